//! OpenFlow 1.5's groups (bucket ids and properties, INSERT_BUCKET and
//! REMOVE_BUCKET, ADD_OR_MOD) against Open vSwitch 3.1: the same
//! `ovs-ofctl -O OpenFlow15` commands on both switches give the same
//! `dump-groups` (in 1.5 and in 1.3) and the same errors, also for select
//! groups' selection methods (`selection_method=hash,fields(...)`); likewise flow
//! statistics, and 1.4's table settings and table and queue descriptions.

mod peers;
use peers::{error_lines, Peers};
use xbr_tests::{HarnessError, Result, BRIDGE};

fn of15<'a>(args: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["-O", "OpenFlow15"];
    v.extend_from_slice(args);
    v
}

fn same_groups(peers: &Peers, step: &str) -> Result<()> {
    peers.assert_same_dump(&of15(&["dump-groups", BRIDGE]), step)?;
    peers.assert_same_dump(&["dump-groups", BRIDGE], step)?;
    Ok(())
}

/// The OFPT_ERROR lines of `ovs-ofctl`'s report (the echoed request that
/// follows is the one just sent).
fn errors(stderr: &str) -> Vec<String> {
    error_lines(stderr)
        .into_iter()
        .filter(|l| l.starts_with("OFPT_ERROR"))
        .collect()
}

/// A command both switches must refuse with the same error.
fn both_refuse(peers: &Peers, args: &[&str], error: &str) -> Result<()> {
    let [x, o] = peers.both(&of15(args))?;
    if x.ok || o.ok || errors(&x.stderr) != errors(&o.stderr) {
        return Err(HarnessError::Unexpected(format!(
            "{args:?}: xbr ok={} / OVS ok={}\n--- xbr:\n{}\n--- OVS:\n{}",
            x.ok, o.ok, x.stderr, o.stderr
        )));
    }
    assert!(x.stderr.contains(error), "{args:?}: {}", x.stderr);
    Ok(())
}

#[test]
fn openflow15_flow_statistics_like_ovs() -> Result<()> {
    let peers = Peers::with_openflow15()?;
    for flow in [
        "table=0,priority=100,cookie=0x5,in_port=1,ip,nw_dst=10.128.0.0/14,\
         actions=load:0x7->NXM_NX_REG0[],goto_table:20",
        "table=0,priority=50,idle_timeout=300,hard_timeout=600,arp,actions=output:2",
        "table=20,priority=10,ip,ct_state=-trk,actions=ct(table=30,zone=3)",
        "table=30,priority=5,tcp,tp_dst=80,actions=ct(commit),output:3",
        "table=30,priority=0,actions=drop",
        "table=31,priority=5,ipv6,actions=ct(commit,nat(src=[fd00::1]-[fd00::5]:1000-2000))",
        "table=31,priority=4,ipv6,actions=ct(commit,nat(dst=fd00::9))",
    ] {
        peers.both_ok(&["add-flow", BRIDGE, flow])?;
    }
    // The same kinds of action written in 1.5, where loads are masked
    // set_fields and moves copy_fields.
    for flow in [
        "table=40,priority=10,actions=load:0x7->NXM_NX_REG0[4..7],\
         move:NXM_NX_REG0[0..3]->NXM_NX_REG1[4..7],goto_table:41",
        "table=41,priority=10,ip,actions=ct(commit,exec(load:0x1->NXM_NX_CT_MARK[0..3])),\
         load:0xa->NXM_NX_TUN_ID[0..31],output:1",
        "table=42,priority=10,actions=set_field:0x5/0xf->reg2,move:NXM_NX_REG2[]->NXM_NX_REG3[]",
        // 1.5 matches registers as halves of 64-bit packet registers.
        "table=43,priority=10,reg0=0x5,reg3=0x7/0xf,actions=drop",
    ] {
        peers.both_ok(&of15(&["add-flow", BRIDGE, flow]))?;
    }
    peers.assert_same_dump(&["dump-flows", BRIDGE], "1.3 dump-flows")?;
    peers.assert_same_dump(&of15(&["dump-flows", BRIDGE]), "1.5 dump-flows")?;
    peers.assert_same_dump(
        &of15(&["dump-flows", BRIDGE, "table=30"]),
        "1.5 dump-flows of one table",
    )?;
    // `NXST_AGGREGATE reply (OF1.5) (xid=0x2): packet_count=0 ...`.
    let [x, o] = peers.both(&of15(&["dump-aggregate", BRIDGE]))?;
    let without_xid = |s: &str| -> Vec<String> { error_lines(s) };
    assert!(x.ok && o.ok, "xbr: {}\nOVS: {}", x.stderr, o.stderr);
    assert_eq!(without_xid(&x.stdout), without_xid(&o.stdout));
    assert!(x.stdout.contains("flow_count=11"), "{}", x.stdout);
    Ok(())
}

#[test]
fn openflow15_groups_like_ovs() -> Result<()> {
    let peers = Peers::with_openflow15()?;
    let add = |spec: &str| peers.both_ok(&of15(&["add-group", BRIDGE, spec]));
    add(
        "group_id=1,type=select,bucket=bucket_id:10,weight:5,actions=output:1,\
         bucket=bucket_id:20,actions=output:2",
    )?;
    add("group_id=2,type=ff,bucket=watch_port:1,actions=output:1,\
         bucket=watch_port:2,watch_group:1,actions=output:2")?;
    add("group_id=3,type=all,bucket=actions=output:1,bucket=actions=output:3")?;
    add("group_id=4,type=indirect,bucket=actions=output:3")?;
    add(
        "group_id=5,type=all,bucket=actions=load:0x3->NXM_NX_REG0[0..7],output:1,\
         bucket=actions=move:NXM_NX_REG0[0..7]->NXM_NX_REG1[8..15],output:2",
    )?;
    same_groups(&peers, "after add-group")?;

    let edit = |cmd: &str, spec: &str| peers.both_ok(&of15(&[cmd, BRIDGE, spec]));
    edit(
        "insert-buckets",
        "group_id=1,command_bucket_id=first,bucket=bucket_id:5,weight:7,actions=output:3",
    )?;
    edit(
        "insert-buckets",
        "group_id=1,command_bucket_id=10,bucket=bucket_id:15,actions=output:2",
    )?;
    edit(
        "insert-buckets",
        "group_id=3,command_bucket_id=last,bucket=bucket_id:9,actions=output:2",
    )?;
    same_groups(&peers, "after insert-buckets")?;
    edit("remove-buckets", "group_id=1,command_bucket_id=last")?;
    edit("remove-buckets", "group_id=3,command_bucket_id=1")?;
    edit("remove-buckets", "group_id=2")?;
    same_groups(&peers, "after remove-buckets")?;
    peers.both_ok(&of15(&[
        "mod-group",
        "--may-create",
        BRIDGE,
        "group_id=6,type=all,bucket=actions=output:1",
    ]))?;
    peers.both_ok(&of15(&[
        "mod-group",
        BRIDGE,
        "group_id=3,type=select,bucket=bucket_id:3,actions=output:3",
    ]))?;
    same_groups(&peers, "after mod-group")?;

    both_refuse(
        &peers,
        &[
            "insert-buckets",
            BRIDGE,
            "group_id=1,command_bucket_id=first,bucket=bucket_id:5,actions=output:1",
        ],
        "OFPGMFC_BUCKET_EXISTS",
    )?;
    both_refuse(
        &peers,
        &["remove-buckets", BRIDGE, "group_id=1,command_bucket_id=99"],
        "OFPGMFC_UNKNOWN_BUCKET",
    )?;
    both_refuse(
        &peers,
        &[
            "insert-buckets",
            BRIDGE,
            "group_id=1,command_bucket_id=99,bucket=bucket_id:50,actions=output:1",
        ],
        "OFPGMFC_UNKNOWN_BUCKET",
    )?;
    both_refuse(
        &peers,
        &[
            "add-group",
            BRIDGE,
            "group_id=1,type=all,bucket=actions=output:1",
        ],
        "OFPGMFC_GROUP_EXISTS",
    )?;
    both_refuse(
        &peers,
        &[
            "add-group",
            BRIDGE,
            "group_id=7,type=all,bucket=bucket_id:1,actions=output:1,\
             bucket=bucket_id:1,actions=output:2",
        ],
        "OFPGMFC_BAD_BUCKET",
    )?;
    same_groups(&peers, "after the refused commands")?;

    // Select groups' selection methods (OVS's NTR group property): kept,
    // reported as given, kept by bucket commands, replaced by a modify.
    add("group_id=10,type=select,selection_method=hash,\
         fields(ip_dst=255.255.255.0,tcp_src),selection_method_param=7,\
         bucket=actions=output:1,bucket=actions=output:2")?;
    add("group_id=11,type=select,selection_method=dp_hash,bucket=actions=output:1")?;
    add("group_id=12,type=select,selection_method=hash,bucket=actions=output:3")?;
    edit(
        "insert-buckets",
        "group_id=10,command_bucket_id=last,bucket=bucket_id:9,actions=output:3",
    )?;
    edit(
        "mod-group",
        "group_id=11,type=select,selection_method=hash,fields=eth_src,bucket=actions=output:2",
    )?;
    peers.both_ok(&of15(&[
        "add-flow",
        BRIDGE,
        "table=0,priority=20,ip,actions=group:10",
    ]))?;
    same_groups(&peers, "after the selection methods")?;
    let [x, _] = peers.both(&of15(&["dump-groups", BRIDGE]))?;
    assert!(
        x.stdout.contains(
            "group_id=10,type=select,selection_method=hash,selection_method_param=7,fields(ip_dst=255.255.255.0,tcp_src)"
        ) && x.stdout.contains("group_id=11,type=select,selection_method=hash,fields=eth_src"),
        "{}",
        x.stdout
    );
    for (spec, error) in [
        (
            "group_id=13,type=all,selection_method=hash,bucket=actions=output:1",
            "OFPBPC_BAD_VALUE",
        ),
        (
            "group_id=13,type=select,selection_method=random,bucket=actions=output:1",
            "OFPBPC_BAD_VALUE",
        ),
    ] {
        both_refuse(&peers, &["add-group", BRIDGE, spec], error)?;
    }
    same_groups(&peers, "after the refused selection methods")?;

    // The agent's way, in 1.5: a bundle of groups and the flows using them.
    let file = peers.file("v15.bundle");
    std::fs::write(
        &file,
        "group add group_id=8,type=select,bucket=bucket_id:2,actions=output:1,bucket=actions=output:2\n\
         flow add table=0,priority=10,in_port=3,actions=group:8\n\
         group insert_bucket group_id=8,command_bucket_id=2,bucket=bucket_id:4,actions=output:3\n",
    )
    .map_err(|e| HarnessError::Unexpected(format!("writing {}: {e}", file.display())))?;
    peers.both_ok(&of15(&["bundle", BRIDGE, &file.to_string_lossy()]))?;
    same_groups(&peers, "after the 1.5 bundle")?;
    peers.assert_same_dump(&["dump-flows", BRIDGE], "after the 1.5 bundle")?;
    Ok(())
}

/// OpenFlow 1.4's table settings (`mod-table TABLE evict|vacancy:D,U`),
/// their description and the queue descriptions, as OVS gives them.
#[test]
fn openflow15_table_and_queue_descriptions_like_ovs() -> Result<()> {
    let peers = Peers::with_openflow15()?;
    let same = |args: &[&str], step: &str| -> Result<()> {
        let [x, o] = peers.both(&of15(args))?;
        if (x.ok, error_lines(&x.stdout)) != (o.ok, error_lines(&o.stdout)) {
            return Err(HarnessError::Unexpected(format!(
                "{step}: {args:?}: xbr ok={} / OVS ok={}\n--- xbr:\n{}{}\n--- OVS:\n{}{}",
                x.ok, o.ok, x.stdout, x.stderr, o.stdout, o.stderr
            )));
        }
        Ok(())
    };
    same(&["dump-table-desc", BRIDGE], "fresh")?;
    for args in [
        ["0", "evict"],
        ["1", "vacancy:10,20"],
        ["2", "vacancy:0,100"],
        ["3", "evict"],
        ["3", "vacancy:5,6"],
    ] {
        peers.both_ok(&of15(&[&["mod-table", BRIDGE][..], &args].concat()))?;
    }
    peers.both_ok(&["add-flow", BRIDGE, "table=1,priority=1,actions=drop"])?;
    same(&["dump-table-desc", BRIDGE], "after mod-table")?;
    for args in [["3", "noevict"], ["2", "novacancy"]] {
        peers.both_ok(&of15(&[&["mod-table", BRIDGE][..], &args].concat()))?;
    }
    same(&["dump-table-desc", BRIDGE], "after turning settings off")?;
    // Table 254 (both refuse it: OVS with OFPTMFC_EPERM, as its hidden
    // internal table is there but read-only; xbr, which has no such
    // table, with OFPTMFC_BAD_TABLE) is left to later_versions.rs.
    // One queue of a port: xbr says OFPQOFC_BAD_QUEUE (later_versions.rs);
    // OVS answers what its netdev says, NXQOFC_QUEUE_ERROR for the TAP
    // devices of these internal ports.
    for args in [
        &["queue-get-config", BRIDGE][..],
        &["queue-get-config", BRIDGE, "1"],
        &["queue-get-config", BRIDGE, "77"],
    ] {
        same(args, "queue descriptions")?;
    }
    Ok(())
}
