//! The XDP flow cache is invisible except for speed: the same traffic
//! through xbr with `--xdp-cache on` and `--xdp-cache off` must be
//! delivered and dropped alike and leave identical flow, table and port
//! counters; and a flow-mod acknowledged by a barrier must steer the very
//! next packets, with no stale kernel entry forwarding them the old way,
//! and so must a PORT_MOD.
//!
//! Needs root and a built `xbr` (see skeleton.rs). Three pods: A sends, B
//! receives, C takes over B's address when the flows move B's traffic to
//! it. Pods enable GRO (a veth accepts XDP-redirected frames only then,
//! see `xdp_redirect` in docs/xdp-cache.md) and A turns TX checksum offload off so
//! its UDP checksums are complete in the frame (xdp_cache_offload.rs
//! covers partial ones, which the XDP program completes).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::time::{Duration, Instant};
use xbr_tests::{
    udp_send_from, without_durations, xdp_cache_count, xdp_cache_counts, xdp_cache_hits, Pod,
    Result, UdpReceiver, Xbr, BRIDGE, POD_IF,
};

const TOOL: &str = env!("CARGO_BIN_EXE_xbr-testtool");

const IP_A: Ipv4Addr = Ipv4Addr::new(10, 128, 0, 2);
const IP_B: Ipv4Addr = Ipv4Addr::new(10, 128, 0, 3);
const IP_C: Ipv4Addr = Ipv4Addr::new(10, 128, 0, 4);
const MAC_A: &str = "0a:58:0a:80:00:02";
const MAC_B: &str = "0a:58:0a:80:00:03";
const MAC_C: &str = "0a:58:0a:80:00:04";

/// Forwarded to B, then (second burst) to C.
const PORT_FWD: u16 = 5001;
/// Dropped by a flow.
const PORT_DROP: u16 = 5002;
/// Every burst's source port: the second burst repeats the first's
/// 5-tuple, so a stale entry would match it.
const SRC_PORT: u16 = 40001;
const BURST: u64 = 2000;
const DROPPED: u64 = 1000;
/// Slow enough that the packet thread (cache off, 2 shared cores) keeps up.
const RATE: u64 = 10_000;
const PINGS: &str = "50";
const RECV_TIMEOUT: Duration = Duration::from_secs(20);
/// How long B listens in the second burst, where it must get nothing.
const SILENT_TIMEOUT: Duration = Duration::from_secs(3);

/// Everything the run observed: delivery and the switch's counters
/// (durations removed).
#[derive(Debug, PartialEq, Eq)]
struct Observed {
    b_first: u64,
    pings_ok: bool,
    c_second: u64,
    b_second: u64,
    /// After PORT_MOD no-forward on C's port.
    c_third: u64,
    flows: Vec<String>,
    tables: Vec<String>,
    ports: Vec<String>,
}

fn run(cache: &str) -> Result<(Observed, Option<u64>)> {
    let tool = Path::new(TOOL);
    let a = Pod::new(IP_A, 24, MAC_A)?;
    let b = Pod::new(IP_B, 24, MAC_B)?;
    let c = Pod::new(IP_C, 24, MAC_C)?;
    for p in [&a, &b, &c] {
        p.accept_xdp_redirects()?;
    }
    a.exec_ok(&["ethtool", "-K", POD_IF, "tx", "off"])?;
    // C answers for B's address once the flows send B's traffic to it.
    c.exec_ok(&["ip", "addr", "add", "10.128.0.3/32", "dev", POD_IF])?;
    a.add_neighbor(&b)?;
    b.add_neighbor(&a)?;
    let specs: Vec<String> = [&a, &b, &c]
        .iter()
        .enumerate()
        .map(|(i, p)| format!("{}={},xdp_redirect=on", p.host_if(), i + 1))
        .collect();
    let mut args = vec!["--xdp-cache", cache];
    for s in &specs {
        args.extend(["--port", s.as_str()]);
    }
    let mut xbr = Xbr::start(&args)?;
    for f in [
        format!("priority=100,in_port=1,udp,tp_dst={PORT_FWD},actions=output:2"),
        format!("priority=100,in_port=1,udp,tp_dst={PORT_DROP},actions=drop"),
        "priority=50,in_port=1,icmp,actions=output:2".to_string(),
        "priority=50,in_port=2,actions=output:1".to_string(),
    ] {
        xbr.add_flow(&f)?;
    }

    // First burst: forwarded, dropped, and ping both ways.
    let fwd = SocketAddrV4::new(IP_B, PORT_FWD);
    let rx = UdpReceiver::start(tool, b.ns(), fwd, BURST, RECV_TIMEOUT)?;
    assert_eq!(
        udp_send_from(tool, a.ns(), SRC_PORT, fwd, BURST, RATE)?,
        BURST
    );
    let drop_dst = SocketAddrV4::new(IP_B, PORT_DROP);
    assert_eq!(
        udp_send_from(tool, a.ns(), SRC_PORT, drop_dst, DROPPED, RATE)?,
        DROPPED
    );
    let b_first = rx.finish()?;
    let ip_b = IP_B.to_string();
    let ping = a.ns().exec(
        &[
            "ping", "-n", "-q", "-c", PINGS, "-i", "0.01", "-W", "1", "-w", "10", &ip_b,
        ],
        Duration::from_secs(15),
    )?;

    // The flow-mod; ovs-ofctl waits for the barrier reply.
    let moved =
        format!("priority=100,in_port=1,udp,tp_dst={PORT_FWD},actions=mod_dl_dst:{MAC_C},output:3");
    xbr.ofctl_ok(&["--strict", "mod-flows", BRIDGE, &moved])?;
    let rx_c = UdpReceiver::start(tool, c.ns(), fwd, BURST, RECV_TIMEOUT)?;
    let rx_b = UdpReceiver::start(tool, b.ns(), fwd, BURST, SILENT_TIMEOUT)?;
    assert_eq!(
        udp_send_from(tool, a.ns(), SRC_PORT, fwd, BURST, RATE)?,
        BURST
    );
    let c_second = rx_c.finish()?;
    let b_second = rx_b.finish()?;

    // A port change acknowledged by a barrier (ovs-ofctl sends one) must
    // stop the kernel forwarding to the port as well.
    xbr.ofctl_ok(&["mod-port", BRIDGE, "3", "no-forward"])?;
    let rx_c = UdpReceiver::start(tool, c.ns(), fwd, BURST, SILENT_TIMEOUT)?;
    assert_eq!(
        udp_send_from(tool, a.ns(), SRC_PORT, fwd, BURST, RATE)?,
        BURST
    );
    let c_third = rx_c.finish()?;

    let observed = Observed {
        b_first,
        pings_ok: ping.success(),
        c_second,
        b_second,
        c_third,
        flows: without_durations(&xbr.dump_flows()?),
        tables: without_durations(&xbr.ofctl_ok(&["dump-tables", BRIDGE])?),
        ports: without_durations(&xbr.ofctl_ok(&["dump-ports", BRIDGE])?),
    };
    xbr.stop(nix::sys::signal::Signal::SIGTERM)?;
    let log = xbr.log();
    if cache == "on" && xdp_cache_hits(&log).is_none() {
        eprintln!("--- xbr log:\n{log}");
    }
    Ok((observed, xdp_cache_hits(&log)))
}

#[test]
fn cache_on_and_off_deliver_and_count_alike_and_flow_mods_apply_at_once() -> Result<()> {
    let (off, off_hits) = run("off")?;
    let (on, on_hits) = run("on")?;
    // The run itself behaved as the flows say.
    assert_eq!(off.b_first, BURST, "cache off, first burst: {off:#?}");
    assert!(off.pings_ok, "cache off: ping failed: {off:#?}");
    assert_eq!(
        off.c_second, BURST,
        "cache off, second burst to C: {off:#?}"
    );
    assert_eq!(off.b_second, 0, "cache off, B after the flow-mod: {off:#?}");
    assert_eq!(off.c_third, 0, "cache off, C after no-forward: {off:#?}");
    // Same delivery, drops and counters with the cache.
    assert_eq!(on, off, "cache on differs from cache off");
    // And the cache really carried the traffic: without it nothing is
    // logged; with it most packets never reached the packet thread.
    assert_eq!(off_hits, None);
    let hits = on_hits.expect("xbr logs the XDP flow cache's counts when it stops");
    assert!(
        hits >= BURST,
        "only {hits} packets were forwarded by the XDP cache: {on:#?}"
    );
    Ok(())
}

/// Pods A and B accepting redirects, A with complete checksums, each
/// knowing the other's MAC.
fn sender_and_receiver() -> Result<(Pod, Pod)> {
    let a = Pod::new(IP_A, 24, MAC_A)?;
    let b = Pod::new(IP_B, 24, MAC_B)?;
    for p in [&a, &b] {
        p.accept_xdp_redirects()?;
    }
    a.exec_ok(&["ethtool", "-K", POD_IF, "tx", "off"])?;
    a.add_neighbor(&b)?;
    b.add_neighbor(&a)?;
    Ok((a, b))
}

/// Sends `n` datagrams from A (source port SRC_PORT) to B's `port` and
/// checks that all arrive.
fn delivered(xbr: &Xbr, a: &Pod, b: &Pod, port: u16, n: u64) -> Result<()> {
    let tool = Path::new(TOOL);
    let dst = SocketAddrV4::new(IP_B, port);
    let rx = UdpReceiver::start(tool, b.ns(), dst, n, RECV_TIMEOUT)?;
    assert_eq!(udp_send_from(tool, a.ns(), SRC_PORT, dst, n, RATE)?, n);
    assert_eq!(rx.finish()?, n, "to port {port}: {}", xbr.log());
    Ok(())
}

/// Ports added while xbr runs (`xbr port add`, and every port in OVSDB
/// mode) share the bridge's cache: traffic to a port added live is
/// forwarded in the kernel like traffic between ports given at start.
#[test]
fn ports_added_while_running_share_the_cache() -> Result<()> {
    let (a, b) = sender_and_receiver()?;
    let spec_a = format!("{}=1,xdp_redirect=on", a.host_if());
    let mut xbr = Xbr::start(&["--port", &spec_a])?;
    let spec_b = format!("{}=2,xdp_redirect=on", b.host_if());
    let added = xbr.client(&["port", "add", BRIDGE, &spec_b])?;
    assert!(added.success(), "xbr port add: {}", added.stderr);
    xbr.add_flow(&format!("in_port=1,udp,tp_dst={PORT_FWD},actions=output:2"))?;
    delivered(&xbr, &a, &b, PORT_FWD, BURST)?;
    xbr.stop(nix::sys::signal::Signal::SIGTERM)?;
    let log = xbr.log();
    let hits = xdp_cache_hits(&log).unwrap_or_else(|| panic!("no cache counts in:\n{log}"));
    assert!(
        hits >= BURST * 9 / 10,
        "only {hits} of {BURST} packets were forwarded by the XDP cache"
    );
    Ok(())
}

/// Packets the XDP cache forwards through a group count in the group and
/// in the bucket that ran (OFPMP_GROUP, `dump-group-stats`), as those the
/// packet thread translates do: the cache's credits carry the bucket's
/// counters too.
#[test]
fn xdp_cache_hits_count_in_the_group_and_its_bucket() -> Result<()> {
    let (a, b) = sender_and_receiver()?;
    let specs = [
        format!("{}=1,xdp_redirect=on", a.host_if()),
        format!("{}=2,xdp_redirect=on", b.host_if()),
    ];
    let mut xbr = Xbr::start(&["--port", &specs[0], "--port", &specs[1]])?;
    // Bucket 0 has weight 0: every packet takes bucket 1.
    xbr.ofctl_ok(&[
        "add-group",
        BRIDGE,
        "group_id=1,type=select,bucket=weight:0,actions=output:1,bucket=weight:1,actions=output:2",
    ])?;
    xbr.add_flow(&format!("in_port=1,udp,tp_dst={PORT_FWD},actions=group:1"))?;
    delivered(&xbr, &a, &b, PORT_FWD, BURST)?;
    let stats = xbr.ofctl_ok(&["dump-group-stats", BRIDGE])?;
    let line = stats
        .lines()
        .find(|l| l.contains("group_id=1,"))
        .unwrap_or_else(|| panic!("no group 1 in:\n{stats}"));
    let packets = format!("packet_count={BURST},");
    assert!(
        line.contains(&format!(",{packets}"))
            && line.contains("bucket0:packet_count=0,byte_count=0,")
            && line.contains(&format!("bucket1:{packets}")),
        "{line}"
    );
    xbr.stop(nix::sys::signal::Signal::SIGTERM)?;
    let log = xbr.log();
    let hits = xdp_cache_hits(&log).unwrap_or_else(|| panic!("no cache counts in:\n{log}"));
    assert!(
        hits >= BURST * 9 / 10,
        "only {hits} of {BURST} packets were forwarded by the XDP cache"
    );
    Ok(())
}

/// IEEE 802.3 frames from a pod: the XDP program keys none of them, so
/// each reaches the packet thread, which extracts them as OVS does. An
/// IPv4 datagram in LLC/SNAP with the same headers as a flow the kernel
/// cache forwards is not forwarded by that cache entry (whose rewrites
/// assume an Ethernet II frame), yet matches the same `udp,tp_dst` flow;
/// plain LLC matches `dl_type=0x05ff`.
#[test]
fn ieee8023_frames_bypass_the_xdp_cache_and_match_as_in_ovs() -> Result<()> {
    const SNAP: u64 = 100;
    const LLC: u64 = 10;
    let (a, b) = sender_and_receiver()?;
    let specs = [
        format!("{}=1,xdp_redirect=on", a.host_if()),
        format!("{}=2,xdp_redirect=on", b.host_if()),
    ];
    let mut xbr = Xbr::start(&["--port", &specs[0], "--port", &specs[1]])?;
    xbr.add_flow(&format!("in_port=1,udp,tp_dst={PORT_FWD},actions=output:2"))?;
    xbr.add_flow("in_port=1,dl_type=0x05ff,actions=drop")?;
    // The kernel cache learns the datagrams' flow first.
    delivered(&xbr, &a, &b, PORT_FWD, BURST)?;
    // The same IPv4 header and UDP ports, in LLC/SNAP (OUI 0, 0x0800).
    let mac = |m: &str| -> Vec<u8> {
        m.split(':')
            .map(|x| u8::from_str_radix(x, 16).unwrap_or(0))
            .collect()
    };
    let mut ip = vec![0x45, 0, 0, 46, 0, 1, 0, 0, 64, 17, 0, 0];
    ip.extend_from_slice(&IP_A.octets());
    ip.extend_from_slice(&IP_B.octets());
    let mut sum: u32 = ip
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    sum = (sum & 0xffff) + (sum >> 16);
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    ip.extend_from_slice(&SRC_PORT.to_be_bytes());
    ip.extend_from_slice(&PORT_FWD.to_be_bytes());
    ip.extend_from_slice(&[0, 26, 0, 0]);
    ip.resize(46, 0);
    let frame = |llc: &[u8]| -> Vec<u8> {
        let mut f = mac(MAC_B);
        f.extend_from_slice(&mac(MAC_A));
        f.extend_from_slice(&((llc.len() + ip.len()) as u16).to_be_bytes());
        f.extend_from_slice(llc);
        f.extend_from_slice(&ip);
        f
    };
    a.send_raw(&frame(&[0xaa, 0xaa, 0x03, 0, 0, 0, 0x08, 0x00]), SNAP)?;
    a.send_raw(&frame(&[0x42, 0x42, 0x03]), LLC)?;
    let expected = [
        (format!("tp_dst={PORT_FWD}"), BURST + SNAP),
        ("dl_type=0x05ff".into(), LLC),
    ];
    let deadline = std::time::Instant::now() + RECV_TIMEOUT;
    loop {
        let dump = xbr.dump_flows()?;
        let counts: Vec<Option<u64>> = expected
            .iter()
            .map(|(token, _)| xbr_tests::flow_n_packets(&dump, token))
            .collect();
        if counts
            .iter()
            .zip(&expected)
            .all(|(c, (_, want))| *c == Some(*want))
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "flow counts {counts:?}, expected {expected:?}:\n{dump}\n{}",
            xbr.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    xbr.stop(nix::sys::signal::Signal::SIGTERM)?;
    let log = xbr.log();
    let counts = xdp_cache_counts(&log).unwrap_or_else(|| panic!("no cache counts in:\n{log}"));
    let hits = xdp_cache_count(&counts, "hit_packets");
    // The datagrams hit the cache; no 802.3 frame did.
    assert!(
        (BURST * 9 / 10..=BURST).contains(&hits),
        "{hits} cache hits for {BURST} datagrams and {SNAP} SNAP frames: {counts:?}"
    );
    Ok(())
}

/// A flow-mod removes only the kernel entries it changes: the entries of
/// flows it does not touch stay installed (revalidated, not flushed),
/// and an entry whose packets another flow now counts, even with the
/// same actions, is replaced so the new flow gets them.
#[test]
fn flow_mods_keep_the_entries_they_do_not_change() -> Result<()> {
    const PORT_KEPT: u16 = PORT_FWD;
    const PORT_TAKEN: u16 = 5003;
    let (a, b) = sender_and_receiver()?;
    let specs = [
        format!("{}=1,xdp_redirect=on", a.host_if()),
        format!("{}=2,xdp_redirect=on", b.host_if()),
    ];
    let mut xbr = Xbr::start(&["--port", &specs[0], "--port", &specs[1]])?;
    for port in [PORT_KEPT, PORT_TAKEN] {
        xbr.add_flow(&format!(
            "priority=100,in_port=1,udp,tp_dst={port},actions=output:2"
        ))?;
    }
    let burst = |xbr: &Xbr| -> Result<()> {
        delivered(xbr, &a, &b, PORT_KEPT, BURST)?;
        delivered(xbr, &a, &b, PORT_TAKEN, DROPPED)
    };
    burst(&xbr)?;
    // A flow no packet of the bursts matches, then one that takes
    // PORT_TAKEN's packets with the same actions; each acknowledged by a
    // barrier (ovs-ofctl sends one).
    xbr.add_flow("priority=100,in_port=1,udp,tp_dst=6000,actions=drop")?;
    xbr.add_flow(&format!(
        "priority=200,in_port=1,udp,tp_dst={PORT_TAKEN},actions=output:2"
    ))?;
    burst(&xbr)?;
    let flows = without_durations(&xbr.dump_flows()?);
    xbr.stop(nix::sys::signal::Signal::SIGTERM)?;
    let log = xbr.log();
    let counts = xdp_cache_counts(&log).unwrap_or_else(|| panic!("no cache counts in:\n{log}"));
    let count = |name| xdp_cache_count(&counts, name);
    let n_packets = |needle: &str| {
        flows
            .iter()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no flow with {needle} in {flows:#?}"))
            .split_whitespace()
            .find_map(|w| w.strip_prefix("n_packets="))
            .and_then(|v| v.trim_end_matches(',').parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no n_packets for {needle} in {flows:#?}"))
    };
    // Every packet counted on the flow in force when it passed.
    assert_eq!(
        n_packets(&format!("priority=100 udp in_port=1 tp_dst={PORT_KEPT} ")),
        2 * BURST
    );
    assert_eq!(
        n_packets(&format!("priority=100 udp in_port=1 tp_dst={PORT_TAKEN} ")),
        DROPPED
    );
    assert_eq!(
        n_packets(&format!("priority=200 udp in_port=1 tp_dst={PORT_TAKEN} ")),
        DROPPED
    );
    // Three entries in all: PORT_KEPT's once, PORT_TAKEN's twice; the
    // second flow-mod revoked exactly one.
    assert_eq!(count("installs"), 3, "{counts:?}");
    assert_eq!(count("revalidated_out"), 1, "{counts:?}");
    // Kept: both entries by the first flow-mod, PORT_KEPT's by the second.
    assert_eq!(count("revalidated"), 3, "{counts:?}");
    assert_eq!(count("invalidated"), 0, "{counts:?}");
    assert!(
        count("hit_packets") >= (2 * BURST + 2 * DROPPED) * 9 / 10,
        "{counts:?}"
    );
    Ok(())
}

/// `xbr dpctl dump-flows` lists the kernel's entries with their hit
/// counts and actions (as `ovs-appctl dpctl/dump-flows` lists OVS's
/// datapath flows); `dpctl del-flows` retires them all and the next
/// packets install them again.
#[test]
fn dpctl_lists_and_retires_the_kernel_entries() -> Result<()> {
    let tool = Path::new(TOOL);
    let (a, b) = sender_and_receiver()?;
    let specs = [
        format!("{}=1,xdp_redirect=on", a.host_if()),
        format!("{}=2,xdp_redirect=on", b.host_if()),
    ];
    let xbr = Xbr::start(&["--port", &specs[0], "--port", &specs[1]])?;
    xbr.add_flow(&format!("in_port=1,udp,tp_dst={PORT_FWD},actions=output:2"))?;
    xbr.add_flow(&format!("in_port=1,udp,tp_dst={PORT_DROP},actions=drop"))?;
    let dump = |xbr: &Xbr| -> Result<String> {
        let out = xbr.client(&["dpctl", "dump-flows", BRIDGE])?;
        assert!(out.success(), "xbr dpctl dump-flows: {}", out.stderr);
        Ok(out.stdout)
    };
    // The entry of the flow to `dst` in a dump.
    let head = format!(
        "in_port({}),eth(src={MAC_A},dst={MAC_B}),ipv4(src={IP_A},dst={IP_B},proto=17,",
        a.host_if()
    );
    let find = |out: &str, dst: u16| -> Option<String> {
        let l4 = format!(",udp(src={SRC_PORT},dst={dst}), packets:");
        out.lines()
            .find(|l| l.starts_with(&head) && l.contains(&l4))
            .map(str::to_string)
    };
    // One packet, for the packet thread to translate and install the
    // entry; once the dump lists it, the rest, which the kernel carries
    // (on two busy shared cores the thread may install it only after
    // many packets have passed through it).
    let installed = |xbr: &Xbr, dst: u16| -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        while find(&dump(xbr)?, dst).is_none() {
            assert!(
                Instant::now() < deadline,
                "no entry to port {dst}:\n{}",
                dump(xbr)?
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    };
    let send = |xbr: &Xbr| -> Result<()> {
        delivered(xbr, &a, &b, PORT_FWD, 1)?;
        installed(xbr, PORT_FWD)?;
        delivered(xbr, &a, &b, PORT_FWD, BURST)?;
        let dropped = SocketAddrV4::new(IP_B, PORT_DROP);
        assert_eq!(udp_send_from(tool, a.ns(), SRC_PORT, dropped, 1, RATE)?, 1);
        installed(xbr, PORT_DROP)?;
        assert_eq!(
            udp_send_from(tool, a.ns(), SRC_PORT, dropped, DROPPED, RATE)?,
            DROPPED
        );
        Ok(())
    };
    // The kernel's packets of an entry: all but the first of its flow
    // (which the packet thread translated and installed).
    let packets = |line: &str| -> u64 {
        line.split(", packets:")
            .nth(1)
            .and_then(|r| r.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    send(&xbr)?;
    let out = dump(&xbr)?;
    let lines: Vec<&str> = out.lines().collect();
    let fwd = find(&out, PORT_FWD).unwrap_or_else(|| panic!("no entry to port {PORT_FWD}:\n{out}"));
    assert!(fwd.ends_with(&format!("actions:{}", b.host_if())), "{fwd}");
    // Every packet after the entry was installed.
    assert!(packets(&fwd) >= BURST, "{fwd}");
    let dropped =
        find(&out, PORT_DROP).unwrap_or_else(|| panic!("no entry to port {PORT_DROP}:\n{out}"));
    assert!(dropped.ends_with("actions:drop"), "{dropped}");
    assert!(packets(&dropped) >= DROPPED, "{dropped}");
    assert!(
        lines
            .last()
            .is_some_and(|l| l.starts_with("entries: 2 in use of ")),
        "{out}"
    );

    let del = xbr.client(&["dpctl", "del-flows", BRIDGE])?;
    assert!(del.success(), "xbr dpctl del-flows: {}", del.stderr);
    let out = dump(&xbr)?;
    assert!(out.starts_with("entries: 0 in use of "), "{out}");
    send(&xbr)?;
    let out = dump(&xbr)?;
    assert!(out.contains("entries: 2 in use of "), "{out}");

    // Without the cache there is nothing to list.
    let off = Xbr::start(&["--xdp-cache", "off"])?;
    let out = off.client(&["dpctl", "dump-flows", BRIDGE])?;
    assert_eq!(out.stdout, "XDP flow cache: off\n", "{}", out.stderr);
    Ok(())
}
