//! Groups, queues and table configuration as the real
//! `ovs-ofctl -O OpenFlow13` sees them: features advertised truthfully,
//! requests for what the switch lacks refused with the specification's
//! errors. Meters, which the switch has, are in `meters.rs`.

mod common;
use common::Harness;

#[test]
fn group_features_advertise_what_groups_do() {
    let h = Harness::start("feat-groups");
    let out = h.ok(&["dump-group-features", &h.target()]);
    assert!(out.contains("Group table:"), "{out}");
    // all, select, indirect, fast failover; select weights.
    assert!(out.contains("Types:  0xf"), "{out}");
    assert!(out.contains("Capabilities:  0x1"), "{out}");
    // The bound on groups (flowtable::group::MAX_GROUPS) for each type.
    assert_eq!(out.matches("max_groups=0x10000").count(), 4, "{out}");
    assert_eq!(
        out.matches("actions: output group set_field").count(),
        4,
        "{out}"
    );
}

#[test]
fn queues_are_the_ports_defaults() {
    let h = Harness::start("feat-queues");
    let out = h.ok(&["queue-get-config", &h.target(), "2"]);
    assert!(out.contains("OFPT_QUEUE_GET_CONFIG_REPLY"), "{out}");
    // ovs-ofctl prints these errors as replies.
    let out = h.ok(&["queue-get-config", &h.target(), "77"]);
    assert!(out.contains("OFPQOFC_BAD_PORT"), "{out}");
    let out = h.ok(&["queue-stats", &h.target()]);
    assert!(
        out.contains("OFPST_QUEUE reply (OF1.3) (xid=0x2): 0 queues"),
        "{out}"
    );
    let out = h.ok(&["queue-stats", &h.target(), "2", "5"]);
    assert!(out.contains("OFPQOFC_BAD_QUEUE"), "{out}");
}
