//! New connections created by the XDP program (conntrack/kernel_new.rs)
//! must be invisible except for speed: with the benchmark's conntrack
//! flows (`ct(table=0)`, then `ct(commit),output` for `+new`), a thousand
//! UDP connections from pod A to pod B, a reply to one of them, the same
//! datagrams again, and new connections after a flow change that drops
//! them are delivered alike with `--xdp-cache on` and `off`, and leave the
//! same flow and port counters and the same number of connections; with
//! the cache on, the kernel created most of them, and none with
//! `--xdp-ct-new off`.
//!
//! Needs root and a built `xbr` (see skeleton.rs). Pod A keeps TX
//! checksum offload on, so the kernel completes each datagram's checksum
//! before it forwards it (B's socket drops it otherwise).

use std::net::SocketAddrV4;
use std::path::Path;
use std::time::Duration;
use xbr_tests::{
    start_xdp_pair_with, udp_send_flows, udp_send_from, xdp_pods, Counters, Pod, Result,
    UdpReceiver, Xbr, BRIDGE,
};

const TOOL: &str = env!("CARGO_BIN_EXE_xbr-testtool");

const FLOWS: &[&str] = &[
    "table=0,priority=100,ip,ct_state=-trk,actions=ct(table=0)",
    "table=0,priority=90,ip,ct_state=+trk+new,in_port=1,actions=ct(commit),output:2",
    "table=0,priority=90,ip,ct_state=+trk+est,in_port=1,actions=output:2",
    "table=0,priority=90,ip,ct_state=+trk+est+rpl,in_port=2,actions=output:1",
    "table=0,priority=0,actions=drop",
];

/// A's connections: one datagram each from ports FIRST_PORT.. to B.
const CONNS: u64 = 1000;
const FIRST_PORT: u16 = 20000;
/// New connections after the flow change, from LATER_PORT...
const LATER: u64 = 100;
const LATER_PORT: u16 = 22000;
const B_PORT: u16 = 5001;
const RATE: u64 = 2000;
const RECV_TIMEOUT: Duration = Duration::from_secs(20);
const SILENT_TIMEOUT: Duration = Duration::from_secs(3);

/// What a run saw, to compare between cache on and off.
#[derive(Debug, PartialEq, Eq)]
struct Observed {
    /// Delivered: the new connections, the reply, a datagram from B
    /// that no connection allows, the same datagrams again, and the new
    /// connections after the flow change.
    delivered: [u64; 5],
    /// Flow, table and port counters at the end.
    counters: Counters,
    /// Connections after each step but the reply.
    connections: [u64; 3],
}

/// `n_packets` of the flow whose line holds every one of `words`.
fn n_packets(flows: &[String], words: &[&str]) -> u64 {
    flows
        .iter()
        .find(|l| words.iter().all(|w| l.contains(w)))
        .and_then(|l| {
            l.split([' ', ','])
                .find_map(|w| w.strip_prefix("n_packets="))
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no flow with {words:?} in {flows:#?}"))
}

fn stat(xbr: &Xbr, name: &str) -> Result<u64> {
    let out = xbr.client_ok(&["conntrack", "stats", BRIDGE])?;
    Ok(out
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {out}")))
}

/// `count` datagrams to `to`:`dport` from `sources` ports of `from`
/// starting at `sport`; how many arrived.
fn send(
    from: &Pod,
    sport: u16,
    sources: usize,
    to: &Pod,
    dport: u16,
    count: u64,
    timeout: Duration,
) -> Result<u64> {
    let tool = Path::new(TOOL);
    let dst = SocketAddrV4::new(to.ip(), dport);
    let rx = UdpReceiver::start(tool, to.ns(), dst, count, timeout)?;
    let sent = if sources == 1 {
        udp_send_from(tool, from.ns(), sport, dst, count, RATE)?
    } else {
        udp_send_flows(tool, from.ns(), dst, count, RATE, sources, sport)?
    };
    assert_eq!(sent, count);
    rx.finish()
}

fn run(cache: &str, extra: &[&str]) -> Result<(Observed, u64)> {
    let (a, b) = xdp_pods()?;
    a.add_neighbor(&b)?;
    b.add_neighbor(&a)?;
    let xbr = start_xdp_pair_with(&a, &b, cache, extra, FLOWS)?;
    let conns = CONNS as usize;
    let new = send(&a, FIRST_PORT, conns, &b, B_PORT, CONNS, RECV_TIMEOUT)?;
    let c1 = stat(&xbr, "connections")?;
    let reply = send(&b, B_PORT, 1, &a, FIRST_PORT, 1, RECV_TIMEOUT)?;
    // No connection from A's port 30000: B starting one is dropped.
    let stranger = send(&b, B_PORT, 1, &a, 30000, 1, SILENT_TIMEOUT)?;
    let again = send(&a, FIRST_PORT, conns, &b, B_PORT, CONNS, RECV_TIMEOUT)?;
    let c2 = stat(&xbr, "connections")?;
    // New connections now dropped: whatever carried them must stop.
    xbr.add_flow("table=0,priority=95,ip,ct_state=+trk+new,in_port=1,actions=drop")?;
    let later = send(
        &a,
        LATER_PORT,
        LATER as usize,
        &b,
        B_PORT,
        LATER,
        SILENT_TIMEOUT,
    )?;
    let c3 = stat(&xbr, "connections")?;
    // Statistics requests collect the kernel's hits first.
    let counters = xbr.counters()?;
    let created = stat(&xbr, "created_in_kernel")?;
    Ok((
        Observed {
            delivered: [new, reply, stranger, again, later],
            counters,
            connections: [c1, c2, c3],
        },
        created,
    ))
}

#[test]
fn new_connections_are_the_same_whoever_creates_them() -> Result<()> {
    let (off, off_created) = run("off", &[])?;
    assert_eq!(off.delivered, [CONNS, 1, 0, CONNS, 0], "{off:#?}");
    assert_eq!(off.connections, [CONNS, CONNS, CONNS], "{off:#?}");
    assert_eq!(off_created, 0);
    // Each of A's datagrams went through the `+new` flow but the one
    // whose connection B answered, the second time.
    assert_eq!(
        n_packets(&off.counters.flows, &["priority=90", "+new", "in_port=1"]),
        2 * CONNS - 1,
        "{off:#?}"
    );
    let (on, on_created) = run("on", &[])?;
    assert_eq!(on, off, "cache on differs from cache off");
    // The first datagrams reach the packet thread, whose translation
    // installs the template; the kernel creates the rest.
    assert!(
        on_created >= CONNS / 2,
        "the kernel created only {on_created} of {CONNS} connections"
    );
    let (no_kernel, created) = run("on", &["--xdp-ct-new", "off"])?;
    assert_eq!(no_kernel, off, "--xdp-ct-new off differs from cache off");
    assert_eq!(created, 0, "--xdp-ct-new off");
    Ok(())
}
