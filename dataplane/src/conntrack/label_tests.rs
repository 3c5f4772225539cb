//! ct_label: written by a committing `ct()` under its mask, carried by
//! every later packet of the connection, shown by dumps.

use super::tests::{run, udp_frame, A, B, COMMIT, LOOKUP};
use super::{format_entry, Conntrack, CtRequest};
use flowtable::key::FlowKey;
use flowtable::Match;
use xbr_packet::parse;

#[test]
fn a_committed_label_is_carried_by_the_connections_later_packets() {
    let ct = Conntrack::default();
    let label = 1u128 | 0xab << 64;
    let commit = CtRequest {
        label: Some((label, u128::MAX)),
        ..COMMIT
    };
    assert_eq!(
        run(&ct, udp_frame(A, 5000, B, 53), &commit, 0).0.label,
        label
    );

    // The reply, only looked up, carries it; so a flow matching the label
    // (what the pipeline does with the recirculated key) accepts it.
    let (o, reply) = run(&ct, udp_frame(B, 53, A, 5000), &LOOKUP, 1);
    assert_eq!(o.label, label);
    let mut key = FlowKey::zero();
    parse::extract(&reply, 1, &mut key);
    key.set_ct_label(o.label);
    let mut labelled = Match::catch_all();
    labelled.set_ct_label_masked(1, 1);
    assert!(labelled.matches(&key));
    let mut other = Match::catch_all();
    other.set_ct_label_masked(2, 2);
    assert!(!other.matches(&key));

    // A label without commit changes nothing; a later commit changes
    // only the bits under its mask.
    let no_commit = CtRequest {
        label: Some((0, u128::MAX)),
        ..LOOKUP
    };
    assert_eq!(
        run(&ct, udp_frame(A, 5000, B, 53), &no_commit, 2).0.label,
        label
    );
    let recommit = CtRequest {
        label: Some((0x10 | 0xff << 120, 0x11 | 0xff << 120)),
        ..COMMIT
    };
    let want = 0x10 | 0xab << 64 | 0xff << 120;
    assert_eq!(
        run(&ct, udp_frame(A, 5000, B, 53), &recommit, 3).0.label,
        want
    );
    let dump = ct.dump(None, 4);
    assert_eq!(dump.len(), 1);
    assert_eq!(dump[0].label, want);
    assert!(
        format_entry(&dump[0]).ends_with(",labels=0xff000000000000ab0000000000000010"),
        "{}",
        format_entry(&dump[0])
    );
}

#[test]
fn a_connection_committed_without_a_label_has_none() {
    let ct = Conntrack::default();
    assert_eq!(run(&ct, udp_frame(A, 1, B, 2), &COMMIT, 0).0.label, 0);
    assert_eq!(run(&ct, udp_frame(B, 2, A, 1), &LOOKUP, 1).0.label, 0);
    let dump = ct.dump(None, 2);
    assert!(!format_entry(&dump[0]).contains("labels="));
}
