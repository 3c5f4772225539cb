//! xbr side by side with Open vSwitch 3.1 under the OpenShift SDN agent's
//! OpenFlow traffic (issue 3, "How it must be shown").
//!
//! Each test starts a real xbr and a real OVS (Debian's
//! `openvswitch-switch`, private run/db/log directories, netdev datapath),
//! each inside a network namespace of its own, so both have the agent's
//! port names: `vxlan0`=1, `tun0`=2 and 100 pod ports from 3 (internal
//! ports, i.e. TAP devices, on both; OVS's `vxlan0` is a real flow-based
//! VXLAN port). Then it drives both with the same `ovs-ofctl -O
//! OpenFlow13` commands and requires identical `dump-flows` and
//! `dump-groups` output, apart from durations and counters.
//!
//! The flow sets come from `gen_flows.py` (the faithful generator of the
//! agent's tables), found in `$XBR_SDN_DIR` (default `shared/sdn` beside the repository);
//! without it the tests fail with a message saying so.
//!
//! Cost (2-core machine): starting OVS with 102 internal ports and xbr with
//! 102 TAP devices dominates; each test is bounded by the harness's
//! command deadlines.

use bench::ovs::{agent_ports, PortKind, PortSpec};
use xbr_tests::{HarnessError, Result, BRIDGE};

mod peers;
use peers::{error_lines, generate, Peers, PODS, SIZE_ARGS};

/// Both switches with the agent's ports for [`PODS`] pods.
fn agent_node() -> Result<Peers> {
    Peers::start(&agent_ports(PODS))
}

/// Loads one agent flow set three ways into both switches and compares
/// after each: as the agent does (`bundle` with group and flow lines),
/// with `add-groups` + `add-flows`, and with `--bundle replace-flows` over
/// a table that holds a stray flow the replacement must remove.
fn three_ways(mode_args: &[&str], expected_flows: usize) -> Result<()> {
    three_ways_sized(mode_args, &SIZE_ARGS, Some(expected_flows))
}

/// [`three_ways`] with other generator arguments; `expected_flows`
/// `None` takes the number of `flow add` lines of the generated bundle.
fn three_ways_sized(
    mode_args: &[&str],
    size_args: &[&str],
    expected_flows: Option<usize>,
) -> Result<()> {
    let peers = agent_node()?;
    let bundle = peers.file("bundle.txt");
    let flows = peers.file("flows.txt");
    let groups = peers.file("groups.txt");
    let (bundle_s, flows_s, groups_s) = (
        bundle.to_string_lossy().into_owned(),
        flows.to_string_lossy().into_owned(),
        groups.to_string_lossy().into_owned(),
    );
    let mut args: Vec<&str> = mode_args.to_vec();
    args.extend(size_args);
    let mut bundle_args = args.clone();
    bundle_args.extend(["--format", "bundle"]);
    generate(&bundle_args, &bundle)?;
    let mut flow_args = args.clone();
    flow_args.extend(["--format", "flows", "--groups-out", &groups_s]);
    generate(&flow_args, &flows)?;
    let has_groups = std::fs::metadata(&groups).is_ok_and(|m| m.len() > 0);
    let expected_flows = match expected_flows {
        Some(n) => n,
        None => std::fs::read_to_string(&bundle)
            .map_err(|e| HarnessError::Unexpected(format!("reading {bundle_s}: {e}")))?
            .lines()
            .filter(|l| l.starts_with("flow add"))
            .count(),
    };

    // 1. As the agent does.
    peers.both_ok(&["bundle", BRIDGE, &bundle_s])?;
    let n = peers.assert_same_tables("bundle")?;
    assert_eq!(n, expected_flows, "flow count after bundle");

    // 2. add-groups + add-flows.
    peers.clear()?;
    if has_groups {
        peers.both_ok(&["add-groups", BRIDGE, &groups_s])?;
    }
    peers.both_ok(&["add-flows", BRIDGE, &flows_s])?;
    assert_eq!(peers.assert_same_tables("add-flows")?, expected_flows);

    // 3. --bundle replace-flows: from a table with one foreign flow and
    // one flow of the set with other actions, so the replacement adds,
    // modifies and deletes.
    peers.clear()?;
    if has_groups {
        peers.both_ok(&["add-groups", BRIDGE, &groups_s])?;
    }
    peers.both_ok(&["add-flow", BRIDGE, "table=200,priority=7,actions=drop"])?;
    peers.both_ok(&["add-flow", BRIDGE, "table=10,priority=0,actions=output:2"])?;
    peers.both_ok(&["--bundle", "replace-flows", BRIDGE, &flows_s])?;
    assert_eq!(
        peers.assert_same_tables("--bundle replace-flows")?,
        expected_flows
    );
    Ok(())
}

#[test]
fn subnet_loads_like_ovs() -> Result<()> {
    three_ways(&["--mode", "subnet"], 613)
}

#[test]
fn multitenant_loads_like_ovs() -> Result<()> {
    three_ways(&["--mode", "multitenant"], 633)
}

#[test]
fn networkpolicy_loads_like_ovs() -> Result<()> {
    three_ways(&["--mode", "networkpolicy"], 890)
}

/// Every optional feature of the generator at once (the set `lab.sh`
/// captured for wire coverage, plus invalid egress policies, extra VNIDs
/// and two global namespaces), in multitenant mode.
#[test]
fn multitenant_all_features_load_like_ovs() -> Result<()> {
    let mut size = SIZE_ARGS.to_vec();
    size.extend([
        "--fixed-vnid-nodes",
        "1",
        "--egress-ips",
        "3",
        "--multicast-namespaces",
        "2",
        "--egress-policies",
        "2",
        "--invalid-egress-policies",
        "1",
        "--extra-vnids",
        "3",
        "--global-namespaces",
        "2",
    ]);
    three_ways_sized(&["--mode", "multitenant"], &size, None)
}

#[test]
fn legacy_nonconntrack_loads_like_ovs() -> Result<()> {
    three_ways(&["--mode", "subnet", "--legacy-nonconntrack"], 640)
}

/// The value after `key` in `line` up to the next `,` or space.
fn value_after<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let rest = &line[line.find(key)? + key.len()..];
    rest.split([',', ' ']).next().filter(|v| !v.is_empty())
}

/// The first `value_after(key)` on a line of `text` containing `needle`.
fn find_value<'a>(text: &'a str, needle: &str, key: &str) -> Result<&'a str> {
    text.lines()
        .filter(|l| l.contains(needle))
        .find_map(|l| value_after(l, key))
        .ok_or_else(|| {
            HarnessError::Unexpected(format!(
                "generated flows have no line with {needle:?} and {key:?}"
            ))
        })
}

/// The agent's delete templates (TABLES.md section 5), each sent as the
/// agent sends it (`bundle br0 FILE` with `flow delete` / `group delete`
/// lines), on a networkpolicy node with egress IPs, egress policies,
/// multicast and pending pods, so every template has flows to remove.
#[test]
fn delete_templates_like_ovs() -> Result<()> {
    let peers = agent_node()?;
    let bundle = peers.file("bundle.txt");
    let mut args = vec![
        "--mode",
        "networkpolicy",
        "--egress-ips",
        "3",
        "--multicast-namespaces",
        "2",
        "--egress-policies",
        "2",
        "--pending-pods",
        "2",
        "--fixed-vnid-nodes",
        "1",
        "--format",
        "bundle",
    ];
    args.extend(SIZE_ARGS);
    generate(&args, &bundle)?;
    let bundle_s = bundle.to_string_lossy().into_owned();
    peers.both_ok(&["bundle", BRIDGE, &bundle_s])?;
    let start = peers.assert_same_tables("initial load")?;

    let set = std::fs::read_to_string(&bundle)
        .map_err(|e| HarnessError::Unexpected(format!("reading {}: {e}", bundle.display())))?;
    let cookie = find_value(&set, "table=10, priority=100, cookie=0x", "cookie=")?;
    let host_line = set
        .lines()
        .find(|l| l.contains(&format!("table=10, priority=100, cookie={cookie}")))
        .unwrap_or_default();
    let tun_src = value_after(host_line, "tun_src=").unwrap_or_default();
    let subnet = find_value(
        &set,
        &format!("table=50, priority=100, cookie={cookie}"),
        "nw_dst=",
    )?;
    let egress_vnid = find_value(&set, "table=100, reg0=", "reg0=")?;
    let mcast_vnid = find_value(&set, "table=110, reg0=", "reg0=")?;
    let group = find_value(&set, "actions=group:", "actions=group:")?;
    let dropped_vnid = find_value(&set, "table=101, priority=100, reg0=", "reg0=")?;
    let ingress_vnid = find_value(&set, "table=80, priority=100, reg1=", "reg1=")?;
    let policy_vnid = find_value(&set, "table=27, priority=100, reg0=", "reg0=")?;
    let pod_ip = "10.128.0.50";
    let pod_vnid = find_value(
        &set,
        &format!("table=25, priority=100, ip, nw_src={pod_ip},"),
        "load:",
    )?
    .split("->")
    .next()
    .unwrap_or_default();
    // The agent's reads: AlreadySetUp's `table=253` and filtered dumps.
    let reads = [
        String::new(),
        "table=253".to_string(),
        "table=70".to_string(),
        format!("table=10,cookie={cookie}/-1"),
        format!("table=80,reg1={ingress_vnid}"),
        "cookie=1147582955/-1".to_string(),
    ];
    for filter in &reads {
        peers.assert_same_dump(&["dump-flows", BRIDGE, filter], &format!("read {filter:?}"))?;
    }

    let steps: Vec<(&str, Vec<String>)> = vec![
        (
            "pod teardown (cleanupPodFlows)",
            ["ip, nw_dst", "ip, nw_src", "arp, nw_dst", "arp, nw_src"]
                .iter()
                .map(|m| format!("flow delete {m}={pod_ip}"))
                .collect(),
        ),
        (
            "host subnet removal (DeleteHostSubnetRules)",
            vec![
                format!("flow delete table=10, cookie={cookie}/0xffffffff, tun_src={tun_src}"),
                format!("flow delete table=50, cookie={cookie}/0xffffffff, arp, nw_dst={subnet}"),
                format!("flow delete table=90, cookie={cookie}/0xffffffff, ip, nw_dst={subnet}"),
            ],
        ),
        (
            "egress network policy (UpdateEgressNetworkPolicyRules)",
            vec![format!("flow delete table=100, reg0={egress_vnid}")],
        ),
        (
            "multicast (UpdateLocalMulticastFlows)",
            vec![
                format!("flow delete table=110, reg0={mcast_vnid}"),
                format!("flow delete table=120, reg0={mcast_vnid}"),
            ],
        ),
        (
            "network policy namespace (generateNamespaceFlows)",
            vec![
                format!("flow delete table=80, reg1={ingress_vnid}"),
                format!("flow delete table=27, reg0={policy_vnid}"),
                "flow delete table=27, cookie=1147582955/-1".to_string(),
                "flow delete table=80, cookie=1147582955/-1".to_string(),
            ],
        ),
        (
            "egress IP flows (SetNamespaceEgress*)",
            vec![format!("flow delete table=101, reg0={dropped_vnid}")],
        ),
        (
            // Without the agent's preceding `flow delete table=101`: the
            // switch itself must remove the flow that points at the group.
            "group delete cascade (SetNamespaceEgress*)",
            vec![format!("group delete group_id={group}")],
        ),
    ];
    let file = peers.file("step.txt");
    let file_s = file.to_string_lossy().into_owned();
    let mut last = start;
    for (name, lines) in &steps {
        std::fs::write(&file, lines.join("\n") + "\n")
            .map_err(|e| HarnessError::Unexpected(format!("writing {file_s}: {e}")))?;
        peers.both_ok(&["bundle", BRIDGE, &file_s])?;
        let n = peers.assert_same_tables(name)?;
        // Every template here has flows to delete in this set (the group
        // delete removes the flow pointing at the group).
        assert!(
            n < last,
            "{name}: deleted nothing ({n} flows before and after)"
        );
        last = n;
    }

    // One transaction as the agent commits it: the pod set up again, the
    // deleted egress-IP group re-created (delete of a missing group, then
    // add, in one bundle) with a flow pointing at it, the multicast flow
    // and the rule-version note replaced (same match: modify).
    let tx = [
        format!("flow add table=20, priority=100, in_port=51, arp, nw_src={pod_ip}, arp_sha=00:00:0a:80:00:32/00:00:ff:ff:ff:ff, actions=load:{pod_vnid}->NXM_NX_REG0[], goto_table:30"),
        format!("flow add table=20, priority=100, in_port=51, ip, nw_src={pod_ip}, actions=load:{pod_vnid}->NXM_NX_REG0[], goto_table:27"),
        format!("flow add table=25, priority=100, ip, nw_src={pod_ip}, actions=load:{pod_vnid}->NXM_NX_REG0[], goto_table:27"),
        format!("flow add table=40, priority=100, arp, nw_dst={pod_ip}, actions=output:51"),
        format!("flow add table=70, priority=100, ip, nw_dst={pod_ip}, actions=load:{pod_vnid}->NXM_NX_REG1[], load:51->NXM_NX_REG2[], goto_table:80"),
        format!("group delete group_id={group}"),
        format!("group add group_id={group},type=select,bucket=actions=move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31],set_field:10.0.0.14->tun_dst,output:vxlan0,bucket=actions=move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31],set_field:10.0.0.15->tun_dst,output:vxlan0"),
        format!("flow add table=101, priority=100,ip,reg0={group}, actions=ct(commit),group:{group}"),
        "flow add table=111, priority=100, actions=move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31],set_field:10.0.0.12->tun_dst,output:1,set_field:10.0.0.13->tun_dst,output:1,goto_table:120".to_string(),
        format!("flow add table=80, priority=150, reg1={pod_vnid}, reg0={pod_vnid},  actions=output:NXM_NX_REG2[]"),
        "flow add table=253, actions=note:02.0D".to_string(),
    ];
    std::fs::write(&file, tx.join("\n") + "\n")
        .map_err(|e| HarnessError::Unexpected(format!("writing {file_s}: {e}")))?;
    peers.both_ok(&["bundle", BRIDGE, &file_s])?;
    let n = peers.assert_same_tables("agent transaction")?;
    assert!(n > last, "the transaction added nothing ({n} flows)");
    peers.assert_same_dump(&["dump-flows", BRIDGE, "table=253"], "table=253 after")?;
    Ok(())
}

/// A bundle of 500 flows whose 251st names a group that does not exist:
/// both switches reject the whole bundle with the same errors, and xbr's
/// tables are exactly as before.
#[test]
fn failed_bundle_is_rejected_like_ovs() -> Result<()> {
    let peers = Peers::start(&[
        PortSpec::new("vxlan0", 1, PortKind::Vxlan),
        PortSpec::new("tun0", 2, PortKind::Internal),
    ])?;
    peers.both_ok(&["add-flow", BRIDGE, "table=0,priority=1,actions=drop"])?;
    peers.both_ok(&[
        "add-flow",
        BRIDGE,
        "table=0,priority=100,in_port=1,actions=output:2",
    ])?;
    let before = peers.assert_same_tables("before the failed bundle")?;
    let mut text = String::new();
    for i in 0..500u32 {
        if i == 250 {
            text.push_str(
                "flow add table=0, priority=300, ip, nw_dst=10.129.0.1, actions=group:4242\n",
            );
        } else {
            text.push_str(&format!(
                "flow add table=0, priority=200, ip, nw_dst=10.128.{}.{}, actions=output:1\n",
                i / 250,
                i % 250 + 1
            ));
        }
    }
    let file = peers.file("bad.txt");
    std::fs::write(&file, text)
        .map_err(|e| HarnessError::Unexpected(format!("writing {}: {e}", file.display())))?;
    let [x, o] = peers.both(&["bundle", BRIDGE, &file.to_string_lossy()])?;
    assert!(!o.ok, "OVS accepted the bad bundle: {}", o.stderr);
    assert!(!x.ok, "xbr accepted the bad bundle: {}", x.stderr);
    assert_eq!(
        error_lines(&x.stderr),
        error_lines(&o.stderr),
        "ovs-ofctl reports different errors\n--- xbr:\n{}\n--- OVS:\n{}",
        x.stderr,
        o.stderr
    );
    assert!(x.stderr.contains("OFPBAC_BAD_OUT_GROUP"), "{}", x.stderr);
    let after = peers.assert_same_tables("after the failed bundle")?;
    assert_eq!(after, before);
    Ok(())
}
