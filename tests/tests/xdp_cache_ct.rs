//! The XDP flow cache carrying established conntrack connections must be
//! invisible except for speed: with the agent's conntrack flows (three
//! `ct()` passes for A's packets, two for B's replies), UDP and TCP
//! between two pods with `--xdp-cache on` and `off` are delivered alike,
//! leave identical flow, table and port counters and the same conntrack
//! table (TCP closes by FIN and by RST tracked to TIME_WAIT), and after
//! `xbr conntrack flush` no stale kernel entry forwards the flushed
//! connections' replies, which the policy then refuses. A connection the
//! kernel carries longer than its timeout stays in conntrack. The same
//! holds with two packet threads (`--pmd-threads 2`), where A's port and
//! B's are served by different threads: every packet of theirs crosses
//! from one to the other, each installs the entries of its direction,
//! and a change of the connection must retire both.
//!
//! Needs root and a built `xbr` (see skeleton.rs) and `python3` (TCP).
//! Pods enable GRO (a veth accepts XDP-redirected frames only then) and
//! turn TX checksum offload off, so this covers complete checksums
//! (xdp_cache_offload.rs covers partial ones with these flows).

use std::net::SocketAddrV4;
use std::path::Path;
use std::time::Duration;
use xbr_tests::{
    start_xdp_pair_with, tcp_transfer, udp_send_from, xdp_cache_count, xdp_cache_counts, xdp_pods,
    Counters, Pod, Result, UdpReceiver, Xbr, AGENT_CT_FLOWS, BRIDGE, POD_A_IP as IP_A,
    POD_B_IP as IP_B, POD_IF,
};

const TOOL: &str = env!("CARGO_BIN_EXE_xbr-testtool");

/// A's UDP socket and B's: one connection, A -> B.
const A_PORT: u16 = 40001;
const B_PORT: u16 = 5001;
/// TCP: B listens; A connects from fixed ports (one closes with FIN, one
/// with RST) so both runs track the same tuples.
const TCP_PORT: u16 = 8080;
const TCP_FIN_SPORT: u16 = 41000;
const TCP_RST_SPORT: u16 = 41001;
/// Bytes A sends on each TCP connection: hundreds of segments, most of
/// them forwarded by the kernel when the cache is on.
const TCP_BYTES: usize = 4 << 20;
const BURST: u64 = 2000;
/// Slow enough that the packet thread (cache off, 2 shared cores) keeps up.
const RATE: u64 = 10_000;
const RECV_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a receiver that must get nothing listens.
const SILENT_TIMEOUT: Duration = Duration::from_secs(3);

/// Two pods on xbr with the flows; the order of fields is drop order.
struct Lab {
    xbr: Xbr,
    a: Pod,
    b: Pod,
}

fn lab(cache: &str) -> Result<Lab> {
    lab_with(cache, &[])
}

/// [`lab`] with more arguments for xbr.
fn lab_with(cache: &str, extra: &[&str]) -> Result<Lab> {
    let (a, b) = xdp_pods()?;
    for p in [&a, &b] {
        p.exec_ok(&["ethtool", "-K", POD_IF, "tx", "off"])?;
    }
    a.add_neighbor(&b)?;
    b.add_neighbor(&a)?;
    let xbr = start_xdp_pair_with(&a, &b, cache, extra, AGENT_CT_FLOWS)?;
    Ok(Lab { xbr, a, b })
}

/// `count` datagrams from `from`:`sport` to `to`:`dport`; how many arrived.
fn udp(from: &Pod, sport: u16, to: &Pod, dport: u16, count: u64, timeout: Duration) -> Result<u64> {
    let tool = Path::new(TOOL);
    let dst = SocketAddrV4::new(to.ip(), dport);
    let rx = UdpReceiver::start(tool, to.ns(), dst, count, timeout)?;
    assert_eq!(
        udp_send_from(tool, from.ns(), sport, dst, count, RATE)?,
        count
    );
    rx.finish()
}

fn tcp(a: &Pod, b: &Pod, sport: u16, reset: bool) -> Result<String> {
    tcp_transfer(a, b, sport, TCP_PORT, TCP_BYTES, reset)
}

fn ct_dump(xbr: &Xbr) -> Result<Vec<String>> {
    let out = xbr.client(&["conntrack", "dump", BRIDGE])?.ok()?;
    Ok(out.stdout.lines().map(str::to_string).collect())
}

/// The counts xbr logs about the XDP cache when it stops.
type Counts = Vec<(String, u64)>;

/// Everything a run observed (durations removed). The counters are
/// taken after the UDP traffic, whose packets are the same in every run
/// (TCP's are not: acknowledgements and segment sizes vary).
#[derive(Debug, PartialEq, Eq)]
struct Observed {
    /// A -> B (new), B -> A (replies), A -> B (established).
    udp: [u64; 3],
    counters: Counters,
    tcp_fin: String,
    tcp_rst: String,
    conntrack: Vec<String>,
    /// B's replies after the flush: none may pass.
    after_flush: u64,
}

/// `n_packets` of the flow of `table` with `priority` in a flow dump.
fn flow_packets(flows: &[String], table: u8, priority: u16) -> u64 {
    let (t, p) = (format!("table={table}"), format!("priority={priority}"));
    flows
        .iter()
        .find(|l| {
            let words: Vec<&str> = l.split(' ').collect();
            words.contains(&t.as_str()) && words.contains(&p.as_str())
        })
        .and_then(|l| l.split(' ').find_map(|w| w.strip_prefix("n_packets=")))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no flow table={table} priority={priority} in {flows:#?}"))
}

/// (rx, tx) packets of `port` in a port dump.
fn port_packets(ports: &[String], port: u32) -> (u64, u64) {
    let at = ports
        .iter()
        .position(|l| l.starts_with(&format!("port {port}:")))
        .unwrap_or_else(|| panic!("no port {port} in {ports:#?}"));
    let pkts = |l: &String| {
        l.split(' ')
            .find_map(|w| w.strip_prefix("pkts="))
            .and_then(|n| n.parse::<u64>().ok())
    };
    match (
        ports.get(at).and_then(pkts),
        ports.get(at + 1).and_then(pkts),
    ) {
        (Some(rx), Some(tx)) => (rx, tx),
        _ => panic!("port {port}: no rx/tx counts in {ports:#?}"),
    }
}

/// Every packet counted once per pass, whoever carried it: the counters
/// after all the traffic (TCP included) agree with each other.
fn assert_counters_agree(c: &Counters, what: &str) {
    let (flows, ports) = (&c.flows, &c.ports);
    let (rx1, tx1) = port_packets(ports, 1);
    let (rx2, tx2) = port_packets(ports, 2);
    // Every IP packet enters table 0 untracked once.
    assert_eq!(
        flow_packets(flows, 0, 1000),
        rx1 + rx2,
        "{what}: {flows:#?}"
    );
    // A's packets are committed (-rpl) and leave on port 2; B's replies
    // leave on port 1; B's other packets (after the flush) are committed
    // too, and dropped.
    let dropped = flow_packets(flows, 80, 0);
    assert_eq!(
        flow_packets(flows, 30, 100),
        rx1 + dropped,
        "{what}: {flows:#?}"
    );
    assert_eq!(flow_packets(flows, 80, 150), tx2, "{what}: {flows:#?}");
    assert_eq!(flow_packets(flows, 80, 200), tx1, "{what}: {flows:#?}");
    assert_eq!(dropped, rx2 - tx1, "{what}: {flows:#?} {ports:#?}");
}

fn run(cache: &str, extra: &[&str]) -> Result<(Observed, Option<Counts>)> {
    let mut lab = lab_with(cache, extra)?;
    let (a, b) = (&lab.a, &lab.b);
    let udp_new = udp(a, A_PORT, b, B_PORT, 1, RECV_TIMEOUT)?;
    let udp_replies = udp(b, B_PORT, a, A_PORT, BURST, RECV_TIMEOUT)?;
    // A flow no packet here matches: the replies' entry (two `ct()`
    // passes) must be kept, not retired (see the assertions on "on").
    lab.xbr
        .add_flow("table=0,priority=300,udp,nw_dst=10.99.99.99,actions=drop")?;
    let udp_est = udp(a, A_PORT, b, B_PORT, BURST, RECV_TIMEOUT)?;
    // Statistics requests collect the kernel's hits first.
    let counters = lab.xbr.counters()?;
    let tcp_fin = tcp(a, b, TCP_FIN_SPORT, false)?;
    let tcp_rst = tcp(a, b, TCP_RST_SPORT, true)?;
    let conntrack = ct_dump(&lab.xbr)?;
    let flush = lab.xbr.client(&["conntrack", "flush", BRIDGE])?;
    assert!(flush.success(), "{flush:?}");
    // Replies of the flushed connection are B starting something now,
    // which the policy refuses.
    let after_flush = udp(b, B_PORT, a, A_PORT, BURST, SILENT_TIMEOUT)?;
    assert_counters_agree(&lab.xbr.counters()?, &format!("cache {cache}, at the end"));
    let observed = Observed {
        udp: [udp_new, udp_replies, udp_est],
        counters,
        tcp_fin,
        tcp_rst,
        conntrack,
        after_flush,
    };
    lab.xbr.stop(nix::sys::signal::Signal::SIGTERM)?;
    Ok((observed, xdp_cache_counts(&lab.xbr.log())))
}

#[test]
fn conntrack_traffic_is_the_same_with_and_without_the_cache() -> Result<()> {
    let (off, off_counts) = run("off", &[])?;
    let sent = TCP_BYTES.to_string();
    assert_eq!(off.udp, [1, BURST, BURST], "cache off: {off:#?}");
    assert_eq!(
        (off.tcp_fin.as_str(), off.tcp_rst.as_str()),
        (sent.as_str(), sent.as_str())
    );
    assert_eq!(off.after_flush, 0, "cache off: {off:#?}");
    for sport in [TCP_FIN_SPORT, TCP_RST_SPORT] {
        let orig = format!("tcp,orig=(src={IP_A},dst={IP_B},sport={sport},dport={TCP_PORT})");
        assert!(
            off.conntrack
                .iter()
                .any(|l| l.starts_with(&orig) && l.ends_with("protoinfo=(state=TIME_WAIT)")),
            "cache off, TCP from {sport} not closed: {off:#?}"
        );
    }
    assert!(
        off.conntrack.iter().any(|l| l.starts_with(&format!(
            "udp,orig=(src={IP_A},dst={IP_B},sport={A_PORT},dport={B_PORT})"
        ))),
        "{off:#?}"
    );
    assert_eq!(off_counts, None, "no cache, no cache counts");

    let (on, on_counts) = run("on", &[])?;
    assert_eq!(on, off, "cache on differs from cache off");
    let (threads, threads_counts) = run("on", &["--pmd-threads", "2"])?;
    assert_eq!(threads, off, "two packet threads differ from one");
    let counts = threads_counts.expect("each thread logs its XDP cache's counts");
    assert!(
        xdp_cache_count(&counts, "ct_removed") >= 2,
        "FINs, RSTs and the flush retire both threads' entries: {counts:?}"
    );
    // And the kernel really carried the established traffic: the UDP
    // replies and established datagrams and most TCP segments.
    let counts = on_counts.expect("xbr logs the XDP flow cache's counts when it stops");
    let hits = xdp_cache_count(&counts, "hit_packets");
    assert!(
        hits >= BURST * 3 / 2,
        "only {hits} packets were forwarded by the XDP cache: {counts:?}"
    );
    assert!(xdp_cache_count(&counts, "ct_installs") >= 2, "{counts:?}");
    // The flow-mod kept the replies' entry: translated again through
    // its passes, it was the same.
    assert!(xdp_cache_count(&counts, "revalidated") >= 1, "{counts:?}");
    assert_eq!(xdp_cache_count(&counts, "revalidated_out"), 0, "{counts:?}");
    // FINs, RSTs and the flush removed connections' entries.
    assert!(xdp_cache_count(&counts, "ct_removed") >= 2, "{counts:?}");
    Ok(())
}

/// A UDP connection whose packets all go through the kernel for longer
/// than conntrack's timeout for it (30 s once replied) stays tracked: the
/// cache's hits refresh it.
#[test]
fn a_connection_the_kernel_carries_does_not_expire() -> Result<()> {
    const SECONDS: u64 = 36;
    const PPS: u64 = 100;
    let mut lab = lab("on")?;
    let (a, b) = (&lab.a, &lab.b);
    assert_eq!(udp(a, A_PORT, b, B_PORT, 1, RECV_TIMEOUT)?, 1);
    assert_eq!(udp(b, B_PORT, a, A_PORT, 1, RECV_TIMEOUT)?, 1);
    let tool = Path::new(TOOL);
    let dst = SocketAddrV4::new(IP_B, B_PORT);
    let n = SECONDS * PPS;
    let rx = UdpReceiver::start(tool, b.ns(), dst, n, Duration::from_secs(SECONDS + 20))?;
    assert_eq!(udp_send_from(tool, a.ns(), A_PORT, dst, n, PPS)?, n);
    assert_eq!(rx.finish()?, n, "{}", lab.xbr.log());
    let udp_line = format!("udp,orig=(src={IP_A},dst={IP_B},sport={A_PORT},dport={B_PORT})");
    let dump = ct_dump(&lab.xbr)?;
    assert!(
        dump.iter().any(|l| l.starts_with(&udp_line)),
        "the connection expired while the kernel carried it: {dump:?}"
    );
    // The very connection: it never expired and was never made again
    // (an expired one would be committed anew by A's next datagram).
    let stats = lab
        .xbr
        .client(&["conntrack", "stats", BRIDGE])?
        .ok()?
        .stdout;
    for line in ["committed: 1", "expired: 0"] {
        assert!(stats.lines().any(|l| l == line), "{line}? {stats}");
    }
    lab.xbr.stop(nix::sys::signal::Signal::SIGTERM)?;
    let counts = xdp_cache_counts(&lab.xbr.log()).expect("cache counts logged");
    // The packet thread saw (almost) none of them: without the refresh
    // the connection would have expired 30 s after the first.
    assert!(
        xdp_cache_count(&counts, "hit_packets") >= n - 10,
        "the kernel did not carry the connection: {counts:?}"
    );
    Ok(())
}
