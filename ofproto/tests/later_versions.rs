//! OpenFlow 1.4 and 1.5 peers (`ovs-ofctl -O OpenFlow14|OpenFlow15`): the
//! standard bundle messages, the messages whose encoding is 1.3's and 1.5's
//! groups; the rest refused with the spec's errors.

mod common;
use common::{normalise_dump, Harness};

const GOOD: &str = "group add group_id=5,type=select,bucket=actions=output:2\n\
                    flow add table=0,priority=10,in_port=3,actions=group:5\n\
                    flow add table=0,priority=5,actions=drop\n";

fn file(h: &Harness, name: &str, text: &str) -> String {
    let p = h.dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_owned()
}

#[test]
fn an_openflow14_bundle_applies_all_or_nothing() {
    let h = Harness::start("v14-bundle");
    let t = h.target();
    let (ok, out, err) = h.ofctl_with("OpenFlow14", &["bundle", &t, &file(&h, "good", GOOD)]);
    assert!(ok, "{out}{err}");
    let v13 = normalise_dump(&h.ok(&["dump-flows", &t]));
    assert_eq!(v13.len(), 2, "{v13:?}");
    for v in ["OpenFlow14", "OpenFlow15"] {
        let (ok, dump, err) = h.ofctl_with(v, &["dump-flows", &t]);
        assert!(ok && dump.contains(" reply (OF1."), "{v}: {dump}{err}");
        assert_eq!(normalise_dump(&dump), v13, "{v}");
    }
    let (ok, agg, err) = h.ofctl_with("OpenFlow15", &["dump-aggregate", &t]);
    assert!(ok && agg.contains("flow_count=2"), "{agg}{err}");
    let (ok, groups, _) = h.ofctl_with("OpenFlow14", &["dump-groups", &t]);
    assert!(ok && groups.contains("group_id=5,type=select"), "{groups}");

    // One flow names a missing group: nothing of the bundle is applied,
    // and the errors are 1.4's (OFPET_BUNDLE_FAILED for the commit).
    let bad = "flow add table=1,priority=10,actions=output:1\n\
               flow add table=1,priority=11,actions=group:99\n";
    let (ok, _, err) = h.ofctl_with("OpenFlow14", &["bundle", &t, &file(&h, "bad", bad)]);
    assert!(!ok);
    assert!(err.contains("OFPBAC_BAD_OUT_GROUP"), "{err}");
    assert!(err.contains("OFPBFC_MSG_FAILED"), "{err}");
    assert_eq!(normalise_dump(&h.ok(&["dump-flows", &t])), v13);
    assert_eq!(h.dp.replica.lock().n_rules(), 2);
}

#[test]
fn an_openflow15_bundle_applies_flows_and_groups_all_or_nothing() {
    let h = Harness::start("v15-bundle");
    let t = h.target();
    let good = "group add group_id=7,type=select,bucket=bucket_id:4,weight:3,actions=output:2,\
                bucket=actions=output:1\n\
                flow add table=0,priority=10,in_port=3,actions=group:7\n\
                flow add table=0,priority=5,actions=drop\n";
    let (ok, out, err) = h.ofctl_with("OpenFlow15", &["bundle", &t, &file(&h, "good", good)]);
    assert!(ok, "{out}{err}");
    assert_eq!(normalise_dump(&h.ok(&["dump-flows", &t])).len(), 2);
    // 1.5 shows bucket ids (ovs-ofctl numbered the second bucket 0).
    let (ok, groups, err) = h.ofctl_with("OpenFlow15", &["dump-groups", &t]);
    assert!(ok, "{groups}{err}");
    assert!(
        groups.contains(
            " group_id=7,type=select,bucket=bucket_id:4,weight:3,actions=output:2,\
             bucket=bucket_id:0,actions=output:1"
        ),
        "{groups}"
    );
    // A bucket command that fails takes the bundle's flows with it.
    let bad = "flow add table=1,priority=10,actions=output:1\n\
               group insert_bucket group_id=7,command_bucket_id=first,bucket=bucket_id:4,actions=output:3\n";
    let (ok, _, err) = h.ofctl_with("OpenFlow15", &["bundle", &t, &file(&h, "bad", bad)]);
    assert!(!ok);
    assert!(err.contains("OFPGMFC_BUCKET_EXISTS"), "{err}");
    assert_eq!(normalise_dump(&h.ok(&["dump-flows", &t])).len(), 2);
    let (_, after, _) = h.ofctl_with("OpenFlow15", &["dump-groups", &t]);
    assert_eq!(after, groups);
}

#[test]
fn openflow15_bucket_commands_edit_a_group_in_place() {
    let h = Harness::start("v15-buckets");
    let t = h.target();
    let of15 = |args: &[&str]| {
        let (ok, out, err) = h.ofctl_with("OpenFlow15", args);
        assert!(ok, "{args:?}: {out}{err}");
        out
    };
    of15(&[
        "add-group",
        &t,
        "group_id=1,type=all,bucket=bucket_id:10,actions=output:1",
    ]);
    of15(&[
        "insert-buckets",
        &t,
        "group_id=1,command_bucket_id=first,bucket=bucket_id:5,actions=output:2",
    ]);
    of15(&[
        "insert-buckets",
        &t,
        "group_id=1,command_bucket_id=10,bucket=bucket_id:20,actions=output:3",
    ]);
    let dump = of15(&["dump-groups", &t]);
    assert!(
        dump.contains(
            " group_id=1,type=all,bucket=bucket_id:5,actions=output:2,\
             bucket=bucket_id:10,actions=output:1,bucket=bucket_id:20,actions=output:3"
        ),
        "{dump}"
    );
    of15(&["remove-buckets", &t, "group_id=1,command_bucket_id=10"]);
    // OpenFlow 1.3 sees the same group without ids.
    assert!(
        h.ok(&["dump-groups", &t])
            .contains(" group_id=1,type=all,bucket=actions=output:2,bucket=actions=output:3"),
        "{}",
        h.ok(&["dump-groups", &t])
    );
    // One group's description, and the spec's error for a missing bucket.
    let one = of15(&["dump-groups", &t, "1"]);
    assert!(one.contains("group_id=1,"), "{one}");
    let (ok, _, err) = h.ofctl_with(
        "OpenFlow15",
        &["remove-buckets", &t, "group_id=1,command_bucket_id=99"],
    );
    assert!(!ok && err.contains("OFPGMFC_UNKNOWN_BUCKET"), "{err}");
    // Group and table statistics keep 1.3's encoding.
    let stats = of15(&["dump-group-stats", &t]);
    assert!(stats.contains("group_id=1,"), "{stats}");
    let tables = of15(&["dump-tables", &t]);
    assert!(
        tables.contains("OFPST_TABLE reply (OF1.5)") && tables.contains("  table 0:"),
        "{tables}"
    );
}

#[test]
fn a_peer_that_also_offers_openflow13_gets_it() {
    let h = Harness::start("v13-chosen");
    let t = h.target();
    let (ok, out, err) = h.ofctl_with("OpenFlow13,OpenFlow14,OpenFlow15", &["dump-ports-desc", &t]);
    assert!(ok && out.contains("(OF1.3)"), "{out}{err}");
    for v in ["OpenFlow14", "OpenFlow15"] {
        let (ok, out, err) = h.ofctl_with(v, &["dump-ports-desc", &t]);
        assert!(ok && out.contains("3(veth0001)"), "{v}: {out}{err}");
    }
}

#[test]
fn ports_are_modified_and_counted_in_later_versions() {
    let h = Harness::start("v14-ports");
    let t = h.target();
    for v in ["OpenFlow14", "OpenFlow15"] {
        let (ok, out, err) = h.ofctl_with(v, &["mod-port", &t, "3", "down"]);
        assert!(ok, "{v}: {out}{err}");
        let (ok, desc, err) = h.ofctl_with(v, &["dump-ports-desc", &t, "3"]);
        assert!(
            ok && desc.contains("config:     PORT_DOWN"),
            "{v}: {desc}{err}"
        );
        let (ok, out, err) = h.ofctl_with(v, &["mod-port", &t, "3", "up"]);
        assert!(ok, "{v}: {out}{err}");
        let (ok, stats, err) = h.ofctl_with(v, &["dump-ports", &t]);
        assert!(
            ok && stats.contains("port  3: rx pkts="),
            "{v}: {stats}{err}"
        );
        assert!(stats.contains("(OF1."), "{v}: {stats}");
    }
    let (ok, desc, _) = h.ofctl_with("OpenFlow14", &["dump-ports-desc", &t, "3"]);
    assert!(ok && desc.contains("config:     0"), "{desc}");
}

#[test]
fn meters_in_later_versions() {
    let h = Harness::start("v15-meters");
    let t = h.target();
    let of15 = |args: &[&str]| {
        let (ok, out, err) = h.ofctl_with("OpenFlow15", args);
        assert!(ok, "{args:?}: {out}{err}");
        out
    };
    of15(&["add-meter", &t, "meter=1,kbps,band=type=drop,rate=1000"]);
    assert!(of15(&["dump-meters", &t]).contains("meter=1 kbps bands=\ntype=drop rate=1000"));
    // In 1.5 the meter is the first action of apply-actions.
    of15(&["add-flow", &t, "priority=5,actions=meter:1,output:2"]);
    let dump = of15(&["dump-flows", &t]);
    assert!(dump.contains("actions=meter:1,output:2"), "{dump}");
    let dump13 = h.ok(&["dump-flows", &t]);
    assert!(dump13.contains("actions=meter:1,output:2"), "{dump13}");
    assert!(of15(&["meter-stats", &t]).contains("meter:1 flow_count:1"));
}

/// The lines of one table in `ovs-ofctl dump-table-desc` output.
fn table_desc(dump: &str, table: u8) -> String {
    let head = format!("  table {table}:");
    let mut lines = dump.lines().skip_while(|l| *l != head);
    let Some(first) = lines.next() else {
        panic!("no {head} in {dump}")
    };
    let rest: Vec<&str> = lines.take_while(|l| l.starts_with("   ")).collect();
    format!("{first}\n{}", rest.join("\n"))
}

#[test]
fn table_settings_and_queue_descriptions_in_later_versions() {
    let h = Harness::start("v14-tables");
    let t = h.target();
    let (ok, dump, err) = h.ofctl_with("OpenFlow14", &["dump-table-desc", &t]);
    assert!(ok, "{dump}{err}");
    assert_eq!(dump.matches("  table ").count(), 254, "{dump}");
    let off = "eviction=off eviction_flags=OTHER|IMPORTANCE|LIFETIME\n   vacancy=off";
    assert_eq!(table_desc(&dump, 253), format!("  table 253:\n   {off}"));

    // ovs-ofctl reads the description first and keeps the other setting.
    for args in [
        ["0", "evict"],
        ["1", "vacancy:10,20"],
        ["2", "vacancy:10,20"],
    ] {
        let (ok, out, err) = h.ofctl_with("OpenFlow14", &[&["mod-table", &t][..], &args].concat());
        assert!(ok, "{args:?}: {out}{err}");
    }
    let (ok, out, err) = h.ofctl_with("OpenFlow15", &["mod-table", &t, "2", "novacancy"]);
    assert!(ok, "{out}{err}");
    h.ok(&["add-flow", &t, "table=1,actions=drop"]);
    let (ok, dump, err) = h.ofctl_with("OpenFlow15", &["dump-table-desc", &t]);
    assert!(
        ok && dump.starts_with("OFPST_TABLE_DESC reply (OF1.5)"),
        "{dump}{err}"
    );
    assert_eq!(
        table_desc(&dump, 0),
        "  table 0:\n   eviction=on eviction_flags=OTHER|IMPORTANCE|LIFETIME\n   vacancy=off"
    );
    // Vacancy as OVS reports an unlimited table with a flow in it.
    assert_eq!(
        table_desc(&dump, 1),
        "  table 1:\n   eviction=off eviction_flags=OTHER|IMPORTANCE|LIFETIME\n   \
         vacancy=on vacancy_down=10% vacancy_up=20% vacancy=99%"
    );
    assert_eq!(table_desc(&dump, 2), format!("  table 2:\n   {off}"));

    let (ok, out, err) = h.ofctl_with("OpenFlow14", &["mod-table", &t, "254", "evict"]);
    assert!(!ok && err.contains("OFPTMFC_BAD_TABLE"), "{out}{err}");

    // Queues: only a port's default one, which is not listed.
    for v in ["OpenFlow14", "OpenFlow15"] {
        let (ok, out, err) = h.ofctl_with(v, &["queue-get-config", &t]);
        assert!(
            ok && out.contains("OFPST_QUEUE_DESC reply"),
            "{v}: {out}{err}"
        );
        assert_eq!(out.lines().count(), 1, "{out}");
        let (_, out, _) = h.ofctl_with(v, &["queue-get-config", &t, "1", "5"]);
        assert!(out.contains("OFPQOFC_BAD_QUEUE"), "{v}: {out}");
        let (_, out, _) = h.ofctl_with(v, &["queue-get-config", &t, "77"]);
        assert!(out.contains("OFPQOFC_BAD_PORT"), "{v}: {out}");
    }
}

#[test]
fn what_later_versions_encode_differently_is_refused() {
    let h = Harness::start("v14-refused");
    let t = h.target();
    // xbr never evicts flows, so an importance is refused, not ignored.
    let (ok, out, err) = h.ofctl_with("OpenFlow14", &["add-flow", &t, "importance=5,actions=drop"]);
    assert!(!ok && err.contains("OFPFMFC_UNKNOWN"), "{out}{err}");
    assert_eq!(h.dp.replica.lock().n_rules(), 0);
}

#[test]
fn packet_outs_in_later_versions() {
    let h = Harness::start("v15-packet-out");
    let t = h.target();
    let frame =
        "0a580a8000030a580a80000208004500001c0001000040117b660a8000020a800003000a0014000800ac";
    for v in ["OpenFlow14", "OpenFlow15"] {
        let (ok, out, err) = h.ofctl_with(
            v,
            &[
                "packet-out",
                &t,
                &format!("in_port=1,packet={frame},actions=load:0x5->NXM_NX_REG0[0..3],output:3"),
            ],
        );
        assert!(ok, "{v}: {out}{err}");
    }
    let outs = h.dp.packet_outs.lock().clone();
    assert_eq!(outs.len(), 2);
    for (in_port, data, actions) in &outs {
        assert_eq!(*in_port, 1);
        assert_eq!(data.len(), frame.len() / 2);
        assert!(
            actions
                .iter()
                .any(|a| matches!(a, flowtable::DpAction::Output { port: 3, .. })),
            "{actions:?}"
        );
    }
    // 1.5 gives the packet pipeline fields to start with: a register the
    // actions then output to.
    h.dp.packet_outs.lock().clear();
    let (ok, out, err) = h.ofctl_with(
        "OpenFlow15",
        &[
            "packet-out",
            &t,
            &format!("in_port=1,reg0=2,tun_id=0x7,packet={frame},actions=output:NXM_NX_REG0[]"),
        ],
    );
    assert!(ok, "{out}{err}");
    let outs = h.dp.packet_outs.lock().clone();
    assert!(
        matches!(
            outs.as_slice(),
            [(1, _, a)] if matches!(a.as_slice(), [flowtable::DpAction::Output { port: 2, .. }])
        ),
        "{outs:?}"
    );
    // Fields the packet itself carries are not metadata: ovs-ofctl
    // refuses them itself (xbr's refusal is packet_io.rs's test).
}
