//! Groups, meters, queues and table configuration as the real
//! `ovs-ofctl -O OpenFlow13` sees them: features advertised truthfully,
//! requests for what the switch lacks refused with the specification's
//! errors.

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
    assert_eq!(
        out.matches("actions: output group set_field").count(),
        4,
        "{out}"
    );
}

#[test]
fn meters_are_advertised_as_absent_and_refused() {
    let h = Harness::start("feat-meters");
    let out = h.ok(&["meter-features", &h.target()]);
    assert!(out.contains("max_meter:0"), "{out}");
    let out = h.ok(&["dump-meters", &h.target()]);
    assert!(out.contains("OFPST_METER_CONFIG reply"), "{out}");
    let (ok, _, err) = h.ofctl(&[
        "add-meter",
        &h.target(),
        "meter=1,kbps,band=type=drop,rate=1000",
    ]);
    assert!(!ok && err.contains("OFPMMFC_OUT_OF_METERS"), "{err}");
    let (_, out, err) = h.ofctl(&["dump-meters", &h.target(), "meter=5"]);
    assert!((out + &err).contains("OFPMMFC_UNKNOWN_METER"));
    // A flow naming a meter that does not exist is refused as OVS does.
    let (ok, _, err) = h.ofctl(&["add-flow", &h.target(), "actions=meter:1,output:2"]);
    assert!(!ok && err.contains("OFPMMFC_UNKNOWN_METER"), "{err}");
    assert!(h.ok(&["del-meters", &h.target()]).is_empty());
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
