//! An OpenFlow meter limits a flow's packet rate on the real datapath,
//! its statistics count what entered and what its band dropped, and a
//! flow without the meter passes everything, with the XDP flow cache on
//! (it must never carry the metered flow, or the meter would be bypassed).
//!
//! Needs root and a built `xbr` (see skeleton.rs). A sends UDP to B: 5000
//! packets in a second to a port whose flow has a 1000 pps DROP meter,
//! then the same to a port whose flow has none. Pods enable GRO and A
//! turns TX checksum offload off so the XDP cache can carry flows (see
//! xdp_cache.rs).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::time::Duration;
use xbr_tests::{
    strip_ansi, udp_send_from, xdp_cache_hits, Pod, Result, UdpReceiver, Xbr, BRIDGE, POD_IF,
};

const TOOL: &str = env!("CARGO_BIN_EXE_xbr-testtool");

const IP_A: Ipv4Addr = Ipv4Addr::new(10, 128, 0, 2);
const IP_B: Ipv4Addr = Ipv4Addr::new(10, 128, 0, 3);
const MAC_A: &str = "0a:58:0a:80:00:02";
const MAC_B: &str = "0a:58:0a:80:00:03";
/// Through the meter.
const PORT_METERED: u16 = 5001;
/// Not metered.
const PORT_FREE: u16 = 5002;
const SRC_PORT: u16 = 40001;
const SENT: u64 = 5000;
/// Packets per second: SENT takes a second.
const RATE: u64 = 5000;
/// The meter: 1000 pps and a bucket of 100 packets, so about 1100 of
/// the 5000 pass; the band is generous because the machine is shared
/// (a stalled sender spreads the second, and more passes).
const METER: &str = "meter=1,pktps,burst,stats,band=type=drop,rate=1000,burst_size=100";
const PASS_MIN: u64 = 500;
const PASS_MAX: u64 = 2500;
const RECV_TIMEOUT: Duration = Duration::from_secs(20);
/// How long B waits for packets the meter may have dropped.
const METERED_TIMEOUT: Duration = Duration::from_secs(5);

/// Sends SENT packets from A to B's `port`; returns what B received.
fn send(tool: &Path, a: &Pod, b: &Pod, port: u16, timeout: Duration) -> Result<u64> {
    let dst = SocketAddrV4::new(IP_B, port);
    let rx = UdpReceiver::start(tool, b.ns(), dst, SENT, timeout)?;
    assert_eq!(
        udp_send_from(tool, a.ns(), SRC_PORT, dst, SENT, RATE)?,
        SENT
    );
    rx.finish()
}

/// A `name:N` value from ovs-ofctl's meter-stats output.
fn stat(out: &str, name: &str) -> u64 {
    out.split_whitespace()
        .find_map(|w| w.strip_prefix(name)?.strip_prefix(':')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in:\n{out}"))
}

#[test]
fn a_drop_meter_limits_its_flow_and_counts() -> Result<()> {
    let tool = Path::new(TOOL);
    let a = Pod::new(IP_A, 24, MAC_A)?;
    let b = Pod::new(IP_B, 24, MAC_B)?;
    for p in [&a, &b] {
        p.accept_xdp_redirects()?;
    }
    a.exec_ok(&["ethtool", "-K", POD_IF, "tx", "off"])?;
    a.add_neighbor(&b)?;
    let specs: Vec<String> = [&a, &b]
        .iter()
        .enumerate()
        .map(|(i, p)| format!("{}={},xdp_redirect=on", p.host_if(), i + 1))
        .collect();
    let mut args = Vec::new();
    for s in &specs {
        args.extend(["--port", s.as_str()]);
    }
    let mut xbr = Xbr::start(&args)?;
    xbr.ofctl_ok(&["add-meter", BRIDGE, METER])?;
    xbr.add_flow(&format!(
        "priority=100,in_port=1,udp,tp_dst={PORT_METERED},actions=meter:1,output:2"
    ))?;
    xbr.add_flow(&format!(
        "priority=100,in_port=1,udp,tp_dst={PORT_FREE},actions=output:2"
    ))?;

    let metered = send(tool, &a, &b, PORT_METERED, METERED_TIMEOUT)?;
    let stats = xbr.ofctl_ok(&["meter-stats", BRIDGE, "meter=1"])?;
    let free = send(tool, &a, &b, PORT_FREE, RECV_TIMEOUT)?;
    xbr.stop(nix::sys::signal::Signal::SIGTERM)?;
    let log = xbr.log();
    eprintln!("{metered} of {SENT} passed the meter; {free} the flow without it\n{stats}");

    assert!(
        (PASS_MIN..=PASS_MAX).contains(&metered),
        "{metered} of {SENT} passed a 1000 pps meter\n{stats}\n{log}"
    );
    assert_eq!(free, SENT, "the flow without the meter\n{log}");
    assert_eq!(stat(&stats, "flow_count"), 1, "{stats}");
    // Every packet sent reached the meter, and what its band did not drop
    // reached B.
    let entered = stat(&stats, "packet_in_count");
    let dropped = stat(&stats, "packet_count");
    assert_eq!(entered, SENT, "{stats}");
    assert_eq!(entered - dropped, metered, "{stats}");
    // The packet thread names its drops.
    let drops = strip_ansi(&log);
    let line = drops
        .lines()
        .find(|l| l.contains("packet thread stopped; drops"))
        .unwrap_or_else(|| panic!("no drop counts in:\n{log}"));
    assert!(line.contains(&format!("meter={dropped}")), "{line}");
    // The kernel carried the flow without the meter: the cache was on.
    let hits = xdp_cache_hits(&log).unwrap_or_else(|| panic!("no cache counts in:\n{log}"));
    assert!(hits > 0, "the XDP cache forwarded nothing:\n{log}");
    Ok(())
}
