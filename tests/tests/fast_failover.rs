//! A fast-failover group moves traffic to its next bucket when the watched
//! port goes down (PORT_MOD), and back when it comes up, on the packet
//! thread and in the XDP flow cache alike.
//!
//! Needs root and a built `xbr` (see skeleton.rs). A sends UDP to B's
//! address; C also holds that address and gets the traffic while B's port
//! is down. Pods enable GRO so the XDP cache can redirect to them, and A
//! turns TX checksum offload off (as in xdp_cache.rs; the cache carries
//! partial checksums too, see xdp_cache_offload.rs).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::time::Duration;
use xbr_tests::{udp_send_from, xdp_cache_hits, Pod, Result, UdpReceiver, Xbr, BRIDGE, POD_IF};

const TOOL: &str = env!("CARGO_BIN_EXE_xbr-testtool");

const IP_A: Ipv4Addr = Ipv4Addr::new(10, 128, 0, 2);
const IP_B: Ipv4Addr = Ipv4Addr::new(10, 128, 0, 3);
const IP_C: Ipv4Addr = Ipv4Addr::new(10, 128, 0, 4);
const MAC_A: &str = "0a:58:0a:80:00:02";
const MAC_B: &str = "0a:58:0a:80:00:03";
const MAC_C: &str = "0a:58:0a:80:00:04";
const DST_PORT: u16 = 5001;
const SRC_PORT: u16 = 40001;
const BURST: u64 = 1000;
const RATE: u64 = 10_000;
const RECV_TIMEOUT: Duration = Duration::from_secs(20);
const SILENT_TIMEOUT: Duration = Duration::from_secs(3);

/// Sends one burst from A; returns what B and C received.
fn burst(tool: &Path, a: &Pod, b: &Pod, c: &Pod, expect_b: bool) -> Result<(u64, u64)> {
    let dst = SocketAddrV4::new(IP_B, DST_PORT);
    let (tb, tc) = if expect_b {
        (RECV_TIMEOUT, SILENT_TIMEOUT)
    } else {
        (SILENT_TIMEOUT, RECV_TIMEOUT)
    };
    let rx_b = UdpReceiver::start(tool, b.ns(), dst, BURST, tb)?;
    let rx_c = UdpReceiver::start(tool, c.ns(), dst, BURST, tc)?;
    assert_eq!(
        udp_send_from(tool, a.ns(), SRC_PORT, dst, BURST, RATE)?,
        BURST
    );
    Ok((rx_b.finish()?, rx_c.finish()?))
}

#[test]
fn traffic_fails_over_when_the_watched_port_goes_down_and_back() -> Result<()> {
    let tool = Path::new(TOOL);
    let a = Pod::new(IP_A, 24, MAC_A)?;
    let b = Pod::new(IP_B, 24, MAC_B)?;
    let c = Pod::new(IP_C, 24, MAC_C)?;
    let args = Pod::xdp_port_args(&[&a, &b, &c])?;
    a.exec_ok(&["ethtool", "-K", POD_IF, "tx", "off"])?;
    c.exec_ok(&["ip", "addr", "add", "10.128.0.3/32", "dev", POD_IF])?;
    a.add_neighbor(&b)?;
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut xbr = Xbr::start(&args)?;
    xbr.ofctl_ok(&[
        "add-group",
        BRIDGE,
        &format!(
            "group_id=1,type=ff,bucket=watch_port:2,actions=output:2,\
             bucket=watch_port:3,actions=mod_dl_dst:{MAC_C},output:3"
        ),
    ])?;
    xbr.add_flow("priority=100,in_port=1,udp,actions=group:1")?;

    let first = burst(tool, &a, &b, &c, true)?;
    xbr.ofctl_ok(&["mod-port", BRIDGE, "2", "down"])?;
    let second = burst(tool, &a, &b, &c, false)?;
    xbr.ofctl_ok(&["mod-port", BRIDGE, "2", "up"])?;
    let third = burst(tool, &a, &b, &c, true)?;
    let groups = xbr.ofctl_ok(&["dump-groups", BRIDGE])?;
    xbr.stop(nix::sys::signal::Signal::SIGTERM)?;
    let log = xbr.log();
    assert_eq!(first, (BURST, 0), "B's port up: B gets it\n{log}");
    assert_eq!(second, (0, BURST), "B's port down: C gets it\n{log}");
    assert_eq!(third, (BURST, 0), "B's port up again\n{log}");
    assert!(
        groups.contains("type=ff,bucket=watch_port:2,actions=output:2"),
        "{groups}"
    );
    // The kernel carried part of it, so the failover also had to retire
    // XDP cache entries.
    let hits = xdp_cache_hits(&log).unwrap_or_else(|| panic!("no cache counts in:\n{log}"));
    assert!(hits > 0, "the XDP cache forwarded nothing:\n{log}");
    Ok(())
}
