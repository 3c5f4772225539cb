//! The XDP flow cache across nodes (issues 4 and 6): with `xbr lab up
//! --xdp-redirect`, pod traffic between nodes is encapsulated by the
//! sending node's pod-side XDP program and decapsulated by the receiving
//! node's uplink program, in the kernel; what they forward must be what
//! xbr would deliver (same isolation, every packet intact, TCP from pods
//! that leave checksums to offload), and the ports' and flows' counters
//! must count it as xbr's own path does (the tunnel port's with the outer
//! headers).
//!
//! Needs root, a built `xbr`, `iperf3` and ethtool. Labs are named
//! `xbrt-lab-<tag>` and removed on drop.

mod lab_common;

use lab_common::*;

/// Packets of the UDP burst.
const BURST: u64 = 300;
/// xbr-testtool's UDP frames: 14 + 20 + 8 + 64 bytes, plus the outer
/// Ethernet, IPv4, UDP and VXLAN headers on the underlay.
const INNER_FRAME: u64 = 106;
const OUTER_FRAME: u64 = INNER_FRAME + 50;

/// `(packets, bytes)` `dump-ports` reports for `port`'s `dir` ("rx"/"tx"):
/// from its line `  port  1: rx pkts=5, bytes=390, drop=0, ...`.
fn port_counts(rundir: &str, port: &str, dir: &str) -> (u64, u64) {
    let out = ofctl(rundir, &["dump-ports", "br0", port]);
    let line = out
        .lines()
        .find_map(|l| l.split_once(&format!("{dir} pkts=")).map(|(_, r)| r))
        .unwrap_or_else(|| panic!("no {dir} counts in {out}"));
    let number = |r: &str| -> u64 {
        r.split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("bad {dir} counts in {out}"))
    };
    let bytes = line
        .split_once("bytes=")
        .map(|(_, r)| number(r))
        .unwrap_or_else(|| panic!("no {dir} bytes in {out}"));
    (number(line), bytes)
}

/// node1 encapsulated the burst in XDP and node2 decapsulated it.
fn assert_burst_in_kernel(node1: &[(String, u64)], node2: &[(String, u64)]) {
    assert!(
        count(node1, "encap_hit_packets") >= BURST - 10,
        "node1 encapsulated too little in XDP: {node1:?}"
    );
    assert!(
        count(node2, "decap_hit_packets") >= BURST - 10,
        "node2 decapsulated too little in XDP: {node2:?}"
    );
}

#[test]
fn pods_across_nodes_are_encapsulated_and_decapsulated_in_the_kernel() {
    let lab = Lab::up(&[&TWO_NODES_MULTITENANT[..], &["--legacy", "--xdp-redirect"]].concat());
    assert_eq!(lab.json["vxlan"].as_bool(), Some(true));
    // pod2 of each node is in ns1, pod3 in ns2.
    let a = lab.pod(|p| s(p, "name") == "node1-pod2");
    let b = lab.pod(|p| s(p, "name") == "node2-pod2");
    let c = lab.pod(|p| s(p, "name") == "node2-pod3");
    assert_ne!(u(b, "vnid"), u(c, "vnid"));
    let (n1, n2) = (&lab.nodes()[0], &lab.nodes()[1]);

    // Twice: the second time the entries the first installed are in
    // place, on both nodes (forwarding for ns1, drops for ns1 -> ns2).
    for _ in 0..2 {
        assert!(ping(s(a, "netns"), s(b, "ip")), "same VNID across nodes");
        assert!(!ping(s(a, "netns"), s(c, "ip")), "ns1 reached ns2");
    }

    // Every packet of a burst arrives intact (the receiver checks each
    // payload), and the tunnel ports count them with their outer headers
    // although the kernel forwarded them.
    let (tx0, txb0) = port_counts(s(n1, "rundir"), "1", "tx");
    let (rx0, rxb0) = port_counts(s(n2, "rundir"), "1", "rx");
    let bind = format!("{}:7000", s(b, "ip"));
    let rx = Receiver::start(s(b, "netns"), &bind, BURST);
    assert_eq!(udp_send(s(a, "netns"), &bind, BURST), BURST);
    assert_eq!(rx.finish(), BURST, "UDP across nodes");
    let (tx1, txb1) = port_counts(s(n1, "rundir"), "1", "tx");
    let (rx1, rxb1) = port_counts(s(n2, "rundir"), "1", "rx");
    for (what, pkts, bytes) in [
        ("node1 vxlan0 tx", tx1 - tx0, txb1 - txb0),
        ("node2 vxlan0 rx", rx1 - rx0, rxb1 - rxb0),
    ] {
        // A few more: the pods' own chatter (ND, ARP) may cross too.
        assert!(
            (BURST..BURST + 20).contains(&pkts),
            "{what}: {pkts} packets for a burst of {BURST}"
        );
        assert!(
            (BURST * OUTER_FRAME..=BURST * OUTER_FRAME + 20 * 1500).contains(&bytes),
            "{what}: {bytes} bytes for {pkts} packets"
        );
    }

    // TCP from pods that leave their checksums to offload: the sender's
    // program completes them before it encapsulates.
    let bps = iperf3_tcp(s(a, "netns"), s(b, "netns"), s(b, "ip"));
    eprintln!(
        "iperf3 TCP node1-pod2 -> node2-pod2: {:.2} Gbit/s",
        bps / 1e9
    );
    assert!(bps > 0.0);

    let out = lab.check();
    assert!(out.success(), "check:\n{}\n{}", out.stdout, out.stderr);

    // The uplink MTU is followed on the kernel path too: once it is below
    // what a 1300-byte ping needs encapsulated, the entries that were
    // forwarding such pings are gone and xbr drops them and counts why
    // (the counts are checked below).
    let big_ping = || ping_sized(s(a, "netns"), s(b, "ip"), "1300");
    assert!(big_ping());
    set_uplink_mtu(s(n1, "netns"), "1350");
    assert!(!big_ping(), "oversized VXLAN was sent");
    assert!(ping(s(a, "netns"), s(b, "ip")), "small packets must pass");
    set_uplink_mtu(s(n1, "netns"), "1500");
    assert!(big_ping());

    // The kernel did the work: node1 encapsulated the burst, node2
    // decapsulated it (and the replies the other way).
    let (c1, log1) = stop_and_count(n1);
    let (c2, _) = stop_and_count(n2);
    eprintln!("node1 XDP cache: {c1:?}\nnode2 XDP cache: {c2:?}");
    for (node, counts) in [("node1", &c1), ("node2", &c2)] {
        assert_eq!(count(counts, "install_errors"), 0, "{node}: {counts:?}");
        assert!(count(counts, "encap_hit_packets") > 0, "{node}: {counts:?}");
        assert!(count(counts, "decap_hit_packets") > 0, "{node}: {counts:?}");
    }
    assert_burst_in_kernel(&c1, &c2);
    // At least two of the three oversized pings reached xbr, which
    // dropped them for the MTU.
    let too_big: u64 = log1
        .lines()
        .find(|l| l.contains("tunnel drops"))
        .and_then(|l| l.split("too_big: ").nth(1))
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no tunnel drops in node1's log:\n{log1}"));
    assert!(too_big >= 2, "node1 dropped {too_big} oversized packets");
}

/// The agent's current flows (subnet mode: every IP packet goes through
/// `ct(table=0)`, nothing is committed, so every packet is `+trk+new`):
/// the kernel carries such flows while their tuples have no connection.
#[test]
fn uncommitted_conntrack_flows_across_nodes_are_cached() {
    let lab = Lab::up(&[
        "--mode",
        "subnet",
        "--nodes",
        "2",
        "--pods-per-node",
        "1",
        "--xdp-redirect",
    ]);
    assert_eq!(
        lab.json["flows"].as_str(),
        Some("conntrack"),
        "{}",
        lab.json
    );
    let a = lab.pod(|p| s(p, "name") == "node1-pod1");
    let b = lab.pod(|p| s(p, "name") == "node2-pod1");
    let (n1, n2) = (&lab.nodes()[0], &lab.nodes()[1]);
    // Resolves the nodes' next hops first: until then xbr drops what it
    // would tunnel (counted as no_neighbour), as it should.
    assert!(ping(s(a, "netns"), s(b, "ip")), "ping across nodes");
    let bind = format!("{}:7000", s(b, "ip"));
    let rx = Receiver::start(s(b, "netns"), &bind, BURST);
    assert_eq!(udp_send(s(a, "netns"), &bind, BURST), BURST);
    assert_eq!(rx.finish(), BURST, "UDP across nodes");
    let bps = iperf3_tcp(s(a, "netns"), s(b, "netns"), s(b, "ip"));
    eprintln!(
        "iperf3 TCP node1-pod1 -> node2-pod1: {:.2} Gbit/s",
        bps / 1e9
    );
    assert!(bps > 0.0);
    let (c1, _) = stop_and_count(n1);
    let (c2, _) = stop_and_count(n2);
    eprintln!("node1 XDP cache: {c1:?}\nnode2 XDP cache: {c2:?}");
    for (node, counts) in [("node1", &c1), ("node2", &c2)] {
        assert_eq!(count(counts, "install_errors"), 0, "{node}: {counts:?}");
        assert!(count(counts, "ct_installs") > 0, "{node}: {counts:?}");
    }
    assert_burst_in_kernel(&c1, &c2);
}
