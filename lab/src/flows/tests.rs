//! The generator against the agent-faithful `gen_flows.py`.
//!
//! `testdata/regen.py` ran `gen_flows.py` for each case and stored its
//! output (`CASE.flows`) with the topology it modelled (`CASE.json`: pods,
//! VNIDs, remote nodes and their HostSubnet cookies). Here the same topology
//! goes through [`NodeFlows`], and the flow lists must be equal: same
//! strings, same order.

use super::*;
use serde_json::Value;
use std::path::PathBuf;

fn testdata(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("src/testdata")
        .join(name)
}

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("{key} missing in {v}"))
}

fn n(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} missing in {v}"))
}

fn mac_of(text: &str) -> [u8; 6] {
    dataplane::config::parse_mac(text).unwrap()
}

fn topology(case: &str) -> NodeFlows {
    let text = std::fs::read_to_string(testdata(&format!("{case}.json"))).unwrap();
    let t: Value = serde_json::from_str(&text).unwrap();
    NodeFlows {
        mode: s(&t, "mode").parse().unwrap(),
        variant: if t["legacy"].as_bool().unwrap() {
            Variant::LegacyNonConntrack
        } else {
            Variant::Conntrack
        },
        cluster_networks: t["cluster_networks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap().parse().unwrap())
            .collect(),
        service_network: s(&t, "service_network").parse().unwrap(),
        local_subnet: s(&t, "local_subnet").parse().unwrap(),
        node_ip: s(&t, "node_ip").parse().unwrap(),
        local_mac: mac_of(s(&t, "local_mac")),
        tun_mac: mac_of(s(&t, "tun_mac")),
        vxlan_port: u16::try_from(n(&t, "vxlan_port")).unwrap(),
        isolated_vnids: Vec::new(),
        services: Vec::new(),
        namespace_vnids: t["namespace_vnids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| u32::try_from(v.as_u64().unwrap()).unwrap())
            .collect(),
        pods: t["pods"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| LocalPod {
                ip: s(p, "ip").parse().unwrap(),
                ofport: u32::try_from(n(p, "ofport")).unwrap(),
                vnid: u32::try_from(n(p, "vnid")).unwrap(),
            })
            .collect(),
        remote_nodes: t["remote_nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| RemoteNode {
                subnet: s(r, "subnet").parse().unwrap(),
                node_ip: s(r, "ip").parse().unwrap(),
                cookie: u32::try_from(n(r, "cookie")).unwrap(),
            })
            .collect(),
    }
}

fn check_case(case: &str) {
    let reference = std::fs::read_to_string(testdata(&format!("{case}.flows"))).unwrap();
    let theirs: Vec<&str> = reference.lines().collect();
    let ours = topology(case).generate().unwrap();
    for (i, (a, b)) in ours.iter().zip(theirs.iter()).enumerate() {
        assert_eq!(a, b, "{case}: flow {i} differs");
    }
    assert_eq!(ours.len(), theirs.len(), "{case}: flow count");
    // And the bundle is the same flows, one `flow add` each.
    let bundle = topology(case).bundle().unwrap();
    let lines: Vec<&str> = bundle.lines().collect();
    assert_eq!(lines.len(), theirs.len());
    for (line, flow) in lines.iter().zip(theirs.iter()) {
        assert_eq!(line.strip_prefix("flow add "), Some(*flow));
    }
}

#[test]
fn subnet_legacy_equals_gen_flows() {
    check_case("subnet-legacy");
}

#[test]
fn subnet_legacy_single_node_equals_gen_flows() {
    check_case("subnet-legacy-single-node");
}

#[test]
fn multitenant_legacy_equals_gen_flows() {
    check_case("multitenant-legacy");
}

#[test]
fn multitenant_legacy_two_global_equals_gen_flows() {
    check_case("multitenant-legacy-two-global");
}

#[test]
fn multitenant_conntrack_two_cluster_networks_equals_gen_flows() {
    check_case("multitenant-conntrack");
}

#[test]
fn subnet_conntrack_equals_gen_flows() {
    check_case("subnet-conntrack");
}

#[test]
fn networkpolicy_conntrack_equals_gen_flows() {
    check_case("networkpolicy-conntrack");
}

#[test]
fn legacy_sets_have_no_ct_actions() {
    for case in [
        "subnet-legacy",
        "multitenant-legacy",
        "subnet-legacy-single-node",
    ] {
        for flow in topology(case).generate().unwrap() {
            assert!(!flow.contains("ct("), "{case}: {flow}");
        }
    }
}

#[test]
fn networkpolicy_has_no_legacy_variant() {
    let mut t = topology("networkpolicy-conntrack");
    t.variant = Variant::LegacyNonConntrack;
    assert_eq!(t.generate(), Err(FlowGenError::NetworkPolicyNeedsConntrack));
}

#[test]
fn mode_names_round_trip() {
    for m in [Mode::Subnet, Mode::Multitenant, Mode::NetworkPolicy] {
        assert_eq!(m.name().parse::<Mode>(), Ok(m));
    }
    assert!("flat".parse::<Mode>().is_err());
}
