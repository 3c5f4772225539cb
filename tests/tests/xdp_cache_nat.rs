//! The XDP flow cache carrying NATed connections must be invisible
//! except for speed: pod A reaches pod B through a virtual address that
//! xbr's own `ct(commit,nat(dst=..))` translates (a Service handled in
//! the switch), and B's replies are un-NATed by `ct(nat)`. UDP and TCP
//! with `--xdp-cache on` and `off` are delivered alike (TCP only works if
//! the replies come from the virtual address) and leave identical flow,
//! table and port counters and the same conntrack table; with the cache
//! on, the kernel rewrote most of the packets.
//!
//! Needs root and a built `xbr` (see skeleton.rs) and `python3` (TCP).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::time::Duration;
use xbr_tests::{
    start_xdp_pair, tcp_transfer_via, udp_send_from, xdp_cache_count, xdp_cache_counts, xdp_pods,
    Counters, Pod, Result, UdpReceiver, Xbr, BRIDGE, POD_A_IP as IP_A, POD_B_IP as IP_B,
    POD_B_MAC as MAC_B, POD_IF,
};

const TOOL: &str = env!("CARGO_BIN_EXE_xbr-testtool");

/// The address A uses for B, which only xbr's NAT knows.
const VIP: Ipv4Addr = Ipv4Addr::new(10, 128, 0, 100);
const A_PORT: u16 = 40001;
const B_PORT: u16 = 5001;
const TCP_PORT: u16 = 8080;
const TCP_SPORT: u16 = 41000;
const TCP_BYTES: usize = 4 << 20;
const BURST: u64 = 2000;
/// Slow enough that the packet thread (cache off, 2 shared cores) keeps up.
const RATE: u64 = 10_000;
const RECV_TIMEOUT: Duration = Duration::from_secs(20);

fn flows() -> Vec<String> {
    vec![
        "table=0, priority=100, ip, actions=ct(nat,table=1)".into(),
        format!(
            "table=1, priority=100, in_port=1, ip, nw_dst={VIP}, ct_state=+trk+new, \
             actions=ct(commit,nat(dst={IP_B}),table=2)"
        ),
        "table=1, priority=100, in_port=1, ip, ct_state=+trk+est, actions=output:2".into(),
        "table=1, priority=100, in_port=2, ip, ct_state=+trk+est+rpl, actions=output:1".into(),
        "table=2, priority=100, actions=output:2".into(),
    ]
}

/// Two pods on xbr with the flows; the order of fields is drop order.
struct Lab {
    xbr: Xbr,
    a: Pod,
    b: Pod,
}

fn lab(cache: &str) -> Result<Lab> {
    let (a, b) = xdp_pods()?;
    // A sends to the virtual address with B's MAC (as a Service's
    // traffic leaves the client pod towards its gateway).
    let vip = VIP.to_string();
    a.exec_ok(&[
        "ip",
        "neigh",
        "replace",
        &vip,
        "lladdr",
        MAC_B,
        "dev",
        POD_IF,
        "nud",
        "permanent",
    ])?;
    b.add_neighbor(&a)?;
    let flows = flows();
    let flows: Vec<&str> = flows.iter().map(String::as_str).collect();
    let xbr = start_xdp_pair(&a, &b, cache, &flows)?;
    Ok(Lab { xbr, a, b })
}

/// `count` datagrams from `from`:`sport` to `via`:`dport`, received by
/// `to` on its own address; how many arrived.
fn udp(from: &Pod, sport: u16, to: &Pod, via: Ipv4Addr, dport: u16, count: u64) -> Result<u64> {
    let tool = Path::new(TOOL);
    let rx = UdpReceiver::start(
        tool,
        to.ns(),
        SocketAddrV4::new(to.ip(), dport),
        count,
        RECV_TIMEOUT,
    )?;
    let dst = SocketAddrV4::new(via, dport);
    assert_eq!(
        udp_send_from(tool, from.ns(), sport, dst, count, RATE)?,
        count
    );
    rx.finish()
}

#[derive(Debug, PartialEq, Eq)]
struct Observed {
    /// A -> VIP (new), B -> A (replies), A -> VIP (established).
    udp: [u64; 3],
    counters: Counters,
    tcp: String,
    conntrack: Vec<String>,
}

/// The counts xbr logs about the XDP cache when it stops.
type Counts = Vec<(String, u64)>;

fn run(cache: &str) -> Result<(Observed, Option<Counts>)> {
    let mut lab = lab(cache)?;
    let (a, b) = (&lab.a, &lab.b);
    let udp_new = udp(a, A_PORT, b, VIP, B_PORT, 1)?;
    let udp_replies = udp(b, B_PORT, a, IP_A, A_PORT, BURST)?;
    let udp_est = udp(a, A_PORT, b, VIP, B_PORT, BURST)?;
    let counters = lab.xbr.counters()?;
    let tcp = tcp_transfer_via(a, b, VIP, TCP_SPORT, TCP_PORT, TCP_BYTES, false)?;
    let conntrack = lab
        .xbr
        .client(&["conntrack", "dump", BRIDGE])?
        .ok()?
        .stdout
        .lines()
        .map(str::to_string)
        .collect();
    let observed = Observed {
        udp: [udp_new, udp_replies, udp_est],
        counters,
        tcp,
        conntrack,
    };
    lab.xbr.stop(nix::sys::signal::Signal::SIGTERM)?;
    Ok((observed, xdp_cache_counts(&lab.xbr.log())))
}

#[test]
fn nat_traffic_is_the_same_with_and_without_the_cache() -> Result<()> {
    let (off, off_counts) = run("off")?;
    assert_eq!(off.udp, [1, BURST, BURST], "cache off: {off:#?}");
    assert_eq!(off.tcp, TCP_BYTES.to_string(), "cache off: {off:#?}");
    for proto in ["udp", "tcp"] {
        let orig = format!("{proto},orig=(src={IP_A},dst={VIP},");
        let reply = format!("reply=(src={IP_B},dst={IP_A},");
        assert!(
            off.conntrack
                .iter()
                .any(|l| l.starts_with(&orig) && l.contains(&reply)),
            "cache off, no DNAT connection for {proto}: {off:#?}"
        );
    }
    assert_eq!(off_counts, None, "no cache, no cache counts");

    let (on, on_counts) = run("on")?;
    assert_eq!(on, off, "cache on differs from cache off");
    let counts = on_counts.expect("xbr logs the XDP flow cache's counts when it stops");
    eprintln!("XDP cache: {counts:?}");
    let hits = xdp_cache_count(&counts, "hit_packets");
    assert!(
        hits >= BURST * 3 / 2,
        "only {hits} packets were rewritten by the XDP cache: {counts:?}"
    );
    assert!(xdp_cache_count(&counts, "ct_installs") >= 2, "{counts:?}");
    Ok(())
}
