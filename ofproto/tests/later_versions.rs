//! OpenFlow 1.4 and 1.5 peers (`ovs-ofctl -O OpenFlow14|OpenFlow15`): the
//! standard bundle messages and the messages whose encoding is 1.3's; the
//! rest refused with the spec's errors.

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
    let (ok, dump14, err) = h.ofctl_with("OpenFlow14", &["dump-flows", &t]);
    assert!(ok && dump14.contains("(OF1.4)"), "{dump14}{err}");
    assert_eq!(normalise_dump(&dump14), v13);
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
fn an_openflow15_bundle_applies_flows_and_refuses_groups() {
    let h = Harness::start("v15-bundle");
    let t = h.target();
    let flows = "flow add table=0,priority=10,in_port=3,actions=output:2\n\
                 flow add table=0,priority=5,actions=drop\n";
    let (ok, out, err) = h.ofctl_with("OpenFlow15", &["bundle", &t, &file(&h, "flows", flows)]);
    assert!(ok, "{out}{err}");
    assert_eq!(normalise_dump(&h.ok(&["dump-flows", &t])).len(), 2);
    // 1.5 reworked GROUP_MOD: refused, and the bundle with it not applied.
    let with_group = "flow add table=1,priority=10,actions=output:1\n\
                      group add group_id=7,type=all,bucket=actions=output:2\n";
    let (ok, _, err) = h.ofctl_with(
        "OpenFlow15",
        &["bundle", &t, &file(&h, "group", with_group)],
    );
    assert!(!ok);
    assert!(err.contains("OFPBRC_BAD_TYPE"), "{err}");
    assert_eq!(normalise_dump(&h.ok(&["dump-flows", &t])).len(), 2);
    assert!(!h.ok(&["dump-groups", &t]).contains("group_id=7"));
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
fn what_later_versions_encode_differently_is_refused() {
    let h = Harness::start("v14-refused");
    let t = h.target();
    let before = h.dp.ports.lock().clone();
    let (ok, out, err) = h.ofctl_with("OpenFlow14", &["mod-port", &t, "3", "down"]);
    assert!(!ok && err.contains("OFPBRC_BAD_TYPE"), "{out}{err}");
    assert_eq!(*h.dp.ports.lock(), before);
    let (_, out, err) = h.ofctl_with("OpenFlow15", &["dump-flows", &t]);
    assert!(out.contains("OFPBRC_BAD_STAT"), "{out}{err}");
    // xbr never evicts flows, so an importance is refused, not ignored.
    let (ok, out, err) = h.ofctl_with("OpenFlow14", &["add-flow", &t, "importance=5,actions=drop"]);
    assert!(!ok && err.contains("OFPFMFC_UNKNOWN"), "{out}{err}");
    assert_eq!(h.dp.replica.lock().n_rules(), 0);
}
