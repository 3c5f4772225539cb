//! `xbr lab up --underlay-mtu 9000`: a cluster whose underlay carries
//! jumbo frames, pods and tun0 at 8950 as the agent sets them. Frames at
//! the pods' MTU cross nodes in VXLAN (9000-byte outer packets, in several
//! AF_XDP descriptors each way), reach the gateway and the external host,
//! tenants stay apart, and the connectivity check passes.
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
