//! Reading figures out of `xbr stats`' text, as the end-to-end tests
//! compare them before and after traffic.

/// `name: value` in `xbr stats`' XDP flow cache section (0 if absent).
pub fn xdp_stat(stats: &str, name: &str) -> u64 {
    section_stat(stats, "XDP flow cache", name)
}

/// The rx packets of port `iface` in `xbr stats`.
pub fn port_rx_packets(stats: &str, iface: &str) -> u64 {
    stats
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{iface} (")))
        .and_then(|l| l.split("rx packets: ").nth(1))
        .and_then(|r| r.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The rx packets of every port in `xbr stats`, summed: what the bridge
/// received by either path (a port's counter includes what the XDP flow
/// cache forwarded from it).
pub fn all_rx_packets(stats: &str) -> u64 {
    stats
        .lines()
        .filter_map(|l| l.split("rx packets: ").nth(1))
        .filter_map(|r| r.split(',').next()?.parse::<u64>().ok())
        .sum()
}

/// `name: value` on an indented line of `xbr stats`' section that starts
/// with `section` (0 if absent).
pub fn section_stat(stats: &str, section: &str, name: &str) -> u64 {
    stats
        .lines()
        .skip_while(|l| !l.starts_with(section))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .find_map(|l| l.trim().strip_prefix(&format!("{name}: ")))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The value of `name` under `openflow limits hit:` in `xbr stats`.
pub fn limit_count(stats: &str, name: &str) -> u64 {
    section_stat(stats, "openflow limits hit", name)
}
