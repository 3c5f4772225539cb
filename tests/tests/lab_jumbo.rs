//! `xbr lab up --underlay-mtu 9000`: a cluster whose underlay carries
//! jumbo frames, pods and tun0 at 8950 as the agent sets them. Frames at
//! the pods' MTU cross nodes in VXLAN (9000-byte outer packets, in several
//! AF_XDP descriptors each way), reach the gateway and the external host,
//! tenants stay apart, and the connectivity check passes. With
//! `--xdp-redirect` the kernel encapsulates and decapsulates them (the
//! XDP flow cache).
//!
//! Needs root and a built `xbr` (see skeleton.rs).

mod lab_common;

use lab_common::*;

#[test]
fn jumbo_underlay_carries_pod_mtu_frames_across_nodes() {
    let lab = Lab::up(&[&TWO_NODES_MULTITENANT[..], &["--underlay-mtu", "9000"]].concat());
    assert_eq!(lab.json["mtu"].as_u64(), Some(8950));
    // pod2 of each node is in ns1, pod3 in ns2.
    let a = lab.pod(|p| s(p, "name") == "node1-pod2");
    let b = lab.pod(|p| s(p, "name") == "node2-pod2");
    let c = lab.pod(|p| s(p, "name") == "node2-pod3");
    let full = (8950 - 28).to_string();
    let a_ns = s(a, "netns");
    // Small frames first: the pods' ARP and the nodes' next hops resolve.
    assert!(ping(a_ns, s(b, "ip")), "same VNID across nodes");
    assert!(
        ping_sized(a_ns, s(b, "ip"), &full),
        "jumbo frames across nodes"
    );
    assert!(!ping_sized(a_ns, s(c, "ip"), &full), "ns1 reached ns2");
    let node = &lab.nodes()[0];
    let gateway = s(node, "subnet").replace(".0/23", ".1");
    assert!(ping_sized(a_ns, &gateway, &full), "tun0");
    let external = s(&lab.json["external"], "ip");
    assert!(ping_sized(a_ns, external, &full), "external host");
    let bps = iperf3_tcp(a_ns, s(b, "netns"), s(b, "ip"));
    assert!(bps > 0.0, "TCP across nodes");
    let out = lab.check();
    assert!(out.success(), "check:\n{}\n{}", out.stdout, out.stderr);
}

/// `(packets, bytes)` of the node's XDP cache entries whose `xbr dpctl
/// dump-flows` line has every one of `parts`.
fn kernel_counts(node: &serde_json::Value, parts: &[&str]) -> (u64, u64) {
    let out = xbr(
        &["dpctl", "dump-flows", "br0", "--rundir", s(node, "rundir")],
        CMD_TIMEOUT,
    );
    assert!(out.success(), "dpctl dump-flows: {}", out.stderr);
    let field = |line: &str, name: &str| -> u64 {
        line.split(name)
            .nth(1)
            .and_then(|r| r.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {line}"))
    };
    out.stdout
        .lines()
        .filter(|l| parts.iter().all(|p| l.contains(p)))
        .fold((0, 0), |(p, b), l| {
            (p + field(l, ", packets:"), b + field(l, ", bytes:"))
        })
}

/// With `--xdp-redirect` the kernel carries the jumbo frames across nodes
/// too: node1's pod-side program completes the pods' offloaded TCP
/// checksums over every buffer and encapsulates (the uplink veth takes
/// multi-buffer frames), node2's uplink program decapsulates.
#[test]
fn jumbo_frames_cross_nodes_in_the_kernel_with_xdp_redirect() {
    let lab = Lab::up(
        &[
            &TWO_NODES_MULTITENANT[..],
            &["--underlay-mtu", "9000", "--xdp-redirect"],
        ]
        .concat(),
    );
    let a = lab.pod(|p| s(p, "name") == "node1-pod2");
    let b = lab.pod(|p| s(p, "name") == "node2-pod2");
    assert!(ping(s(a, "netns"), s(b, "ip")), "same VNID across nodes");
    let bps = iperf3_tcp(s(a, "netns"), s(b, "netns"), s(b, "ip"));
    eprintln!(
        "iperf3 TCP across nodes at MTU 8950: {:.2} Gbit/s",
        bps / 1e9
    );
    let to_server = format!("dst={})", 5201);
    let (n1, n2) = (&lab.nodes()[0], &lab.nodes()[1]);
    for (node, what, parts) in [
        (
            n1,
            "encapsulated by node1",
            ["tnl_push(", to_server.as_str()],
        ),
        (n2, "decapsulated by node2", ["tunnel(", to_server.as_str()]),
    ] {
        let (packets, bytes) = kernel_counts(node, &parts);
        assert!(
            bytes > 100 << 20 && bytes / packets.max(1) > 8000,
            "{what}: {bytes} bytes in {packets} packets"
        );
    }
}
