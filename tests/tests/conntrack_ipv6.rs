//! Conntrack over IPv6 end to end: two pods on one xbr with IPv6
//! addresses, flows that let only A start connections (`ct(commit)` for
//! A's new ones, established traffic both ways, everything else dropped),
//! real TCP and ping (also fragmented) between the pods, and
//! `xbr conntrack dump`.
//!
//! Needs root (namespaces, veths, XDP), a built `xbr`, `ping` and
//! `python3`. Traffic is a handful of packets per step, each step bounded
//! in time.

use std::time::Duration;
use xbr_tests::{greeting, greeting_server, Pod, Result, Xbr, BRIDGE, POD_IF};

const IP6_A: &str = "fd00::2";
const IP6_B: &str = "fd00::3";
const TCP_PORT: u16 = 8080;
const CMD_TIMEOUT: Duration = Duration::from_secs(20);

const FLOWS: &[&str] = &[
    "table=0, priority=1000, ipv6, ct_state=-trk, actions=ct(table=0)",
    "table=0, priority=900, ipv6, ct_state=+trk+inv, actions=drop",
    "table=0, priority=800, ipv6, ct_state=+trk+new, in_port=1, actions=ct(commit),output:2",
    "table=0, priority=700, ipv6, ct_state=+trk+est, in_port=1, actions=output:2",
    "table=0, priority=700, ipv6, ct_state=+trk+est, in_port=2, actions=output:1",
    "table=0, priority=0, actions=drop",
];

/// Gives `pod` the IPv6 address `ip` (no duplicate detection: the test
/// sends no Neighbor Discovery) and a permanent neighbour entry for
/// `peer` at `peer_mac`.
fn enable_ipv6(pod: &Pod, ip: &str, peer: &str, peer_mac: &str) -> Result<()> {
    for knob in [
        "net.ipv6.conf.all.disable_ipv6=0".to_string(),
        format!("net.ipv6.conf.{POD_IF}.disable_ipv6=0"),
    ] {
        pod.exec_ok(&["sysctl", "-qw", &knob])?;
    }
    pod.exec_ok(&[
        "ip",
        "-6",
        "addr",
        "add",
        &format!("{ip}/64"),
        "dev",
        POD_IF,
        "nodad",
    ])?;
    pod.exec_ok(&[
        "ip",
        "-6",
        "neigh",
        "replace",
        peer,
        "lladdr",
        peer_mac,
        "dev",
        POD_IF,
        "nud",
        "permanent",
    ])
}

/// Pods A (port 1) and B (port 2) with IPv6 addresses, B's neighbour
/// entry for `b_peer` pointing at A, and an xbr programmed with `flows`.
/// Bound as `let (a, b, xbr)`, xbr (the last binding) drops first.
fn lab(b_peer: &str, flows: &[&str]) -> Result<(Pod, Pod, Xbr)> {
    let a = Pod::new("10.128.0.2".parse().unwrap(), 24, "0a:58:0a:80:00:02")?;
    let b = Pod::new("10.128.0.3".parse().unwrap(), 24, "0a:58:0a:80:00:03")?;
    enable_ipv6(&a, IP6_A, IP6_B, b.mac())?;
    enable_ipv6(&b, IP6_B, b_peer, a.mac())?;
    let specs = [format!("{}=1", a.host_if()), format!("{}=2", b.host_if())];
    let args: Vec<&str> = specs.iter().flat_map(|p| ["--port", p.as_str()]).collect();
    let xbr = Xbr::start(&args)?;
    for f in flows {
        xbr.add_flow(f)?;
    }
    Ok((a, b, xbr))
}

/// `count` pings of `size` bytes (above 1452, each one a fragmented
/// datagram both ways).
fn ping6(pod: &Pod, dst: &str, count: u32, size: u32) -> Result<bool> {
    let (count, size) = (count.to_string(), size.to_string());
    let out = pod.ns().exec(
        &[
            "ping", "-6", "-n", "-q", "-c", &count, "-s", &size, "-i", "0.2", "-W", "1", dst,
        ],
        CMD_TIMEOUT,
    )?;
    Ok(out.success())
}

#[test]
fn ipv6_connections_are_tracked_and_only_their_replies_pass() -> Result<()> {
    let (a, b, xbr) = lab(IP6_A, FLOWS)?;
    let log = || xbr.flows_and_log();

    assert!(ping6(&a, IP6_B, 3, 56)?, "A -> B ping6\n{}", log());
    assert!(
        !ping6(&b, IP6_A, 2, 56)?,
        "B -> A must be denied\n{}",
        log()
    );
    // Fragmented both ways: each datagram tracked by its first fragment.
    assert!(
        ping6(&a, IP6_B, 2, 3000)?,
        "A -> B 3000-byte ping6\n{}",
        log()
    );

    let server = greeting_server(b.ns(), IP6_B, TCP_PORT)?;
    assert_eq!(
        greeting(a.ns(), IP6_B, TCP_PORT)?.as_deref(),
        Some("hello from fd00::3 to fd00::2"),
        "{}",
        log()
    );
    let _ = server.wait(Duration::from_secs(5));
    // B's own connection attempt towards A is new and not A's: dropped.
    assert_eq!(
        greeting(b.ns(), IP6_A, TCP_PORT)?,
        None,
        "B -> A TCP\n{}",
        log()
    );

    let conntrack = |args: &[&str]| {
        let mut full = vec!["conntrack"];
        full.extend_from_slice(args);
        xbr.client(&full)
    };
    // The big pings' later fragments went by their first fragments.
    let stats = conntrack(&["stats", BRIDGE])?;
    let later = stats
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("later_fragments: ")?.parse::<u64>().ok());
    assert!(later.is_some_and(|n| n >= 4), "{}", stats.stdout);
    let dump = conntrack(&["dump", BRIDGE])?;
    assert!(dump.success(), "{dump:?}");
    assert!(
        dump.stdout.lines().any(|l| l
            .starts_with(&format!("tcp6,orig=(src={IP6_A},dst={IP6_B},sport="))
            && l.contains(&format!(
                ",dport={TCP_PORT}),reply=(src={IP6_B},dst={IP6_A},sport={TCP_PORT},"
            ))),
        "{}",
        dump.stdout
    );
    assert!(
        dump.stdout
            .lines()
            .any(|l| l.starts_with(&format!("icmpv6,orig=(src={IP6_A},dst={IP6_B},id="))),
        "{}",
        dump.stdout
    );
    // Only A's connections were stored.
    assert!(
        !dump.stdout.contains(&format!("orig=(src={IP6_B},")),
        "{}",
        dump.stdout
    );
    Ok(())
}

/// A's connections leave with this address (SNAT in xbr).
const IP6_EXT: &str = "fd00::100";

const SNAT_FLOWS: &[&str] = &[
    "table=0, priority=100, ipv6, in_port=1, actions=ct(commit,nat(src=fd00::100)),output:2",
    "table=0, priority=100, ipv6, in_port=2, ct_state=-trk, actions=ct(nat,table=1)",
    "table=1, priority=100, ipv6, ct_state=+trk+est, actions=output:1",
    "table=1, priority=0, actions=drop",
];

#[test]
fn ipv6_snat_hides_the_source_and_replies_come_back() -> Result<()> {
    // B answers the translated address; xbr un-NATs towards A's MAC.
    let (a, b, xbr) = lab(IP6_EXT, SNAT_FLOWS)?;
    // B's server sees the connection come from the translated address.
    let server = greeting_server(b.ns(), IP6_B, TCP_PORT)?;
    assert_eq!(
        greeting(a.ns(), IP6_B, TCP_PORT)?.as_deref(),
        Some("hello from fd00::3 to fd00::100"),
        "{}",
        xbr.flows_and_log()
    );
    let _ = server.wait(Duration::from_secs(5));
    assert!(
        ping6(&a, IP6_B, 2, 56)?,
        "A -> B ping6 through SNAT\n{}",
        xbr.flows_and_log()
    );
    let dump = xbr.client(&["conntrack", "dump", BRIDGE])?;
    assert!(
        dump.stdout.lines().any(
            |l| l.starts_with(&format!("tcp6,orig=(src={IP6_A},dst={IP6_B},"))
                && l.contains(&format!("reply=(src={IP6_B},dst={IP6_EXT},"))
        ),
        "{}",
        dump.stdout
    );
    Ok(())
}
