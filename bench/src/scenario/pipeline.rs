//! `pipeline`: the OpenShift SDN agent's flows for one node of a
//! multitenant cluster, with 100 local pods, from the project's own
//! generator of the agent's flows (`xbr_lab::flows`, the one `xbr
//! lab up` loads and tests against `shared/sdn/gen_flows.py`), in its
//! default, current flow set (`Variant::Conntrack`, 4.14 and later: every
//! IP packet through `ct(table=0)`; multitenant never commits).
//!
//! Traffic goes from pod A (10.128.0.2, OpenFlow port 3) to pod B
//! (10.128.0.3, port 4), two pods of one namespace, through tables 0
//! (conntrack, then to 20), 20 (pod A's source check, its VNID into REG0),
//! 27, 30, 31 (to the local subnet), 70 (pod B's VNID into REG1, its port
//! into REG2) and 80 (REG0 = REG1: output to REG2). The other 98 pods,
//! `vxlan0` (port 1) and `tun0` (port 2) are named by the flows but exist
//! as no port; nothing is sent to them.

use std::net::Ipv4Addr;

use xbr_lab::addr::Cidr;
use xbr_lab::flows::{LocalPod, Mode, NodeFlows, RemoteNode, Variant};

use super::{ConfigError, LOCAL_NODE};

/// Pods on the node.
pub const PODS: u32 = 100;
/// Namespaces the pods are spread over; the first is `default` (VNID 0).
pub const NAMESPACES: u32 = 10;
/// Other nodes of the cluster: their HostSubnets add the agent's table
/// 10, 50, 90 and 111 flows.
pub const REMOTE_NODES: u32 = 3;
/// The OpenFlow ports of pod A (the generator) and pod B (the sink): the
/// agent numbers pods from 3.
pub const POD_A_PORT: u32 = 3;
pub const POD_B_PORT: u32 = 4;

/// The VNID of namespace `ns`: 0 for `default`, else fixed distinct values
/// in the master's range (it draws them at random in [10, 2^24-1]).
pub fn vnid(ns: u32) -> u32 {
    if ns == 0 {
        0
    } else {
        0x0a_0000 + ns * 0x101
    }
}

/// The namespace of pod `j` (10.128.0.2 + j, port 3 + j): pairs of pods
/// share one, from `ns1` on, so pods 0 and 1 (A and B) are in `ns1` and
/// every namespace, `default` included, holds 10 pods. With
/// `isolate_pod_b`, pod B is in `ns2` instead: the flows must then drop
/// everything A sends it.
pub fn namespace_of(j: u32, isolate_pod_b: bool) -> u32 {
    if isolate_pod_b && j == 1 {
        return 2;
    }
    (j / 2 + 1) % NAMESPACES
}

fn cidr(s: &str) -> Result<Cidr, ConfigError> {
    s.parse()
        .map_err(|e: xbr_lab::addr::BadCidr| ConfigError::Flows(e.to_string()))
}

/// The node's flows in `ovs-ofctl add-flows` syntax, one per line, in the
/// agent's order (the switch loads them as one bundle).
pub fn flows(isolate_pod_b: bool) -> Result<String, ConfigError> {
    let local_subnet = cidr("10.128.0.0/23")?;
    let pods = (0..PODS)
        .map(|j| {
            let ip = local_subnet
                .nth(2 + j)
                .ok_or_else(|| ConfigError::Flows(format!("no address for pod {j}")))?;
            Ok(LocalPod {
                ip,
                ofport: POD_A_PORT + j,
                vnid: vnid(namespace_of(j, isolate_pod_b)),
            })
        })
        .collect::<Result<Vec<_>, ConfigError>>()?;
    let remote_nodes = (1..=REMOTE_NODES)
        .map(|k| {
            Ok(RemoteNode {
                subnet: cidr(&format!("10.128.{}.0/23", 2 * k))?,
                node_ip: Ipv4Addr::from(u32::from(LOCAL_NODE) + k),
                cookie: 0x5eed_0000 + k,
            })
        })
        .collect::<Result<Vec<_>, ConfigError>>()?;
    let node = NodeFlows {
        mode: Mode::Multitenant,
        variant: Variant::Conntrack,
        cluster_networks: vec![cidr("10.128.0.0/14")?],
        service_network: cidr("172.30.0.0/16")?,
        local_subnet,
        node_ip: LOCAL_NODE,
        // Only table 10's fix-ups of traffic from vxlan0 name these.
        local_mac: [0x02, 0, 0, 0, 0x0a, 0x0b],
        tun_mac: [0x02, 0, 0, 0, 0x0a, 0x0c],
        vxlan_port: crate::packet::VXLAN_PORT,
        namespace_vnids: (0..NAMESPACES).map(vnid).collect(),
        isolated_vnids: Vec::new(),
        pods,
        remote_nodes,
        services: Vec::new(),
    };
    let list = node
        .generate()
        .map_err(|e| ConfigError::Flows(e.to_string()))?;
    let mut s = String::with_capacity(list.len() * 120);
    for f in list {
        s.push_str(&f);
        s.push('\n');
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_a_and_b_share_a_namespace_unless_isolated() {
        assert_eq!(namespace_of(0, false), 1);
        assert_eq!(namespace_of(1, false), 1);
        assert_eq!(namespace_of(1, true), 2);
        assert_ne!(vnid(1), 0, "not the global namespace");
        let per_ns = |ns| (0..PODS).filter(|&j| namespace_of(j, false) == ns).count();
        assert!((0..NAMESPACES).all(|ns| per_ns(ns) == 10));
    }

    #[test]
    fn the_agents_multitenant_flows_forward_a_to_b_only_within_the_vnid() {
        let text = flows(false).unwrap();
        let has = |f: &str| text.lines().any(|l| l == f);
        let v = vnid(1);
        // The path A -> B: conntrack, A's source check, B's table 70 and
        // 80 flows, all as the agent writes them.
        assert!(has(
            "table=0, priority=1000, ip, ct_state=-trk, actions=ct(table=0)"
        ));
        assert!(has(&format!("table=20, priority=100, in_port=3, ip, nw_src=10.128.0.2, actions=load:{v}->NXM_NX_REG0[], goto_table:27")));
        assert!(has(&format!("table=70, priority=100, ip, nw_dst=10.128.0.3, actions=load:{v}->NXM_NX_REG1[], load:4->NXM_NX_REG2[], goto_table:80")));
        assert!(has(&format!(
            "table=80, priority=100, reg0={v}, reg1={v}, actions=output:NXM_NX_REG2[]"
        )));
        assert!(has(
            "table=31, priority=200, ip, nw_dst=10.128.0.0/23, actions=goto_table:70"
        ));
        // 100 pods: a table 70 flow each; pod 101 does not exist.
        assert_eq!(text.matches("table=70, priority=100").count(), 100);
        assert!(text.contains("load:102->NXM_NX_REG2[]"));
        assert!(!text.contains("load:103->NXM_NX_REG2[]"));
        assert!(
            text.contains("set_field:10.0.0.14->tun_dst"),
            "remote nodes"
        );
        assert!(!text.contains("ct(commit"), "multitenant never commits");
        // Isolated, B's flow carries another VNID: table 80 has no flow
        // for REG0 = A's VNID with REG1 = B's.
        let iso = flows(true).unwrap();
        let w = vnid(2);
        assert!(iso.lines().any(|l| l == format!("table=70, priority=100, ip, nw_dst=10.128.0.3, actions=load:{w}->NXM_NX_REG1[], load:4->NXM_NX_REG2[], goto_table:80")));
        assert!(!iso.contains(&format!("reg0={v}, reg1={w}")));
    }
}
