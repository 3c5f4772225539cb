//! Pods that keep TX checksum offload on (the veth default, as the
//! agent's CNI plugin leaves them) hand over TCP/UDP whose checksum holds
//! only the pseudo-header sum; the XDP flow cache completes it before it
//! redirects them. With plain output flows and with the agent's
//! conntrack flows, UDP of every size and a bulk TCP transfer each way
//! between two such pods must be delivered intact (the receivers' stacks
//! verify the checksums: a wrong one is a loss) with `--xdp-cache on` as
//! with `off`, leave the same flow, table and port counters, and the
//! cache must have carried them.
//!
//! Needs root and a built `xbr` (see skeleton.rs) and `python3` (TCP).
//! Pods enable GRO (a veth accepts XDP-redirected frames only then) and
//! keep every other offload as the kernel sets it.

use std::net::SocketAddrV4;
use std::path::Path;
use std::time::Duration;
use xbr_tests::{
    start_xdp_pair, tcp_transfer, udp_send_sized, xdp_cache_hits, xdp_pods, Counters, Pod, Result,
    UdpReceiver, AGENT_CT_FLOWS, CMD_TIMEOUT, POD_IF,
};

const TOOL: &str = env!("CARGO_BIN_EXE_xbr-testtool");

/// Every packet between the two ports, both ways.
const PLAIN_FLOWS: &[&str] = &[
    "priority=10,in_port=1,actions=output:2",
    "priority=10,in_port=2,actions=output:1",
];

const A_PORT: u16 = 40001;
const B_PORT: u16 = 5001;
/// UDP payload sizes A sends, one burst each: the XDP program sums a
/// segment in 512-byte chunks, then a chunk per set bit of the rest, then
/// the last 2 and 1 bytes; these cover chunks, odd tails and a full MTU.
const SIZES: &[usize] = &[16, 61, 333, 513, 1001, 1472];
const BURST: u64 = 400;
/// B's datagrams back to A (replies of A's connection).
const REPLIES: u64 = 400;
const TCP_PORT: u16 = 8080;
const TCP_SPORT: u16 = 41000;
/// Thousands of full-size segments one way, their ACKs the other way.
const TCP_BYTES: usize = 4 << 20;
/// Slow enough that the packet thread (cache off, 2 shared cores) keeps up.
const RATE: u64 = 10_000;
const RECV_TIMEOUT: Duration = Duration::from_secs(20);

/// `count` datagrams of `size` bytes from `from`:`sport` to `to`:`dport`;
/// how many arrived intact.
fn udp(from: &Pod, sport: u16, to: &Pod, dport: u16, count: u64, size: usize) -> Result<u64> {
    let tool = Path::new(TOOL);
    let dst = SocketAddrV4::new(to.ip(), dport);
    let rx = UdpReceiver::start(tool, to.ns(), dst, count, RECV_TIMEOUT)?;
    assert_eq!(
        udp_send_sized(tool, from.ns(), sport, dst, count, RATE, size)?,
        count
    );
    rx.finish()
}

/// What a run observed (durations removed). The counters are taken after
/// the UDP traffic, whose packets are the same in every run (TCP's are
/// not: acknowledgements and segment sizes vary).
#[derive(Debug, PartialEq, Eq)]
struct Observed {
    /// A -> B, the connection's first datagram.
    first: u64,
    /// Per size in SIZES: A -> B.
    udp: Vec<u64>,
    /// B -> A.
    replies: u64,
    counters: Counters,
    /// B's answer to the TCP transfer from A.
    tcp: String,
}

/// Runs the traffic through xbr with `flows` and `--xdp-cache cache`;
/// returns what it observed and the hits xbr logged.
fn run(flows: &[&str], cache: &str) -> Result<(Observed, Option<u64>)> {
    let (a, b) = xdp_pods()?;
    for p in [&a, &b] {
        // The point of the test: offload as a pod has it.
        let k = p.ns().exec(&["ethtool", "-k", POD_IF], CMD_TIMEOUT)?.ok()?;
        assert!(
            k.stdout.contains("tx-checksumming: on"),
            "TX checksum offload is off in a new pod: {}",
            k.stdout
        );
    }
    a.add_neighbor(&b)?;
    b.add_neighbor(&a)?;
    let mut xbr = start_xdp_pair(&a, &b, cache, flows)?;
    // A starts the connection, B replies, then A's bursts are (through
    // conntrack) an established connection's.
    let first = udp(&a, A_PORT, &b, B_PORT, 1, 64)?;
    let replies = udp(&b, B_PORT, &a, A_PORT, REPLIES, 200)?;
    let mut udp_counts = Vec::new();
    for &size in SIZES {
        udp_counts.push(udp(&a, A_PORT, &b, B_PORT, BURST, size)?);
    }
    // Statistics requests collect the kernel's hits first.
    let counters = xbr.counters()?;
    let tcp = tcp_transfer(&a, &b, TCP_SPORT, TCP_PORT, TCP_BYTES, false)?;
    let observed = Observed {
        first,
        udp: udp_counts,
        replies,
        counters,
        tcp,
    };
    xbr.stop(nix::sys::signal::Signal::SIGTERM)?;
    let log = xbr.log();
    let hits = xdp_cache_hits(&log);
    if cache == "on" && hits.is_none() {
        eprintln!("--- xbr log:\n{log}");
    }
    Ok((observed, hits))
}

/// Cache off, then on: the same delivery and counters, and the kernel
/// carried the UDP and most of the TCP segments.
fn same_with_and_without_the_cache(flows: &[&str]) -> Result<()> {
    let (off, off_hits) = run(flows, "off")?;
    assert_eq!(off.first, 1, "cache off: {off:#?}");
    assert_eq!(off.udp, vec![BURST; SIZES.len()], "cache off: {off:#?}");
    assert_eq!(off.replies, REPLIES, "cache off: {off:#?}");
    assert_eq!(off.tcp, TCP_BYTES.to_string(), "cache off: {off:#?}");
    assert_eq!(off_hits, None, "no cache, no cache counts");

    let (on, on_hits) = run(flows, "on")?;
    assert_eq!(on, off, "cache on differs from cache off");
    let hits = on_hits.expect("xbr logs the XDP flow cache's counts when it stops");
    // Every datagram but the first of each direction can be a hit; a full-size TCP
    // segment carries 1448 bytes, and most go after the handshake.
    let udp = BURST * SIZES.len() as u64 + REPLIES;
    let tcp_segments = (TCP_BYTES / 1448) as u64;
    let want = udp * 9 / 10 + tcp_segments / 2;
    eprintln!("XDP cache hits: {hits} (want at least {want})");
    assert!(
        hits >= want,
        "only {hits} packets were forwarded by the XDP cache (want {want}): {on:#?}"
    );
    Ok(())
}

#[test]
fn offloaded_checksums_through_output_flows_are_completed_in_the_kernel() -> Result<()> {
    same_with_and_without_the_cache(PLAIN_FLOWS)
}

#[test]
fn offloaded_checksums_through_conntrack_flows_are_completed_in_the_kernel() -> Result<()> {
    same_with_and_without_the_cache(AGENT_CT_FLOWS)
}
