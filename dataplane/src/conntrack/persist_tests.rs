//! Connections exported and imported into another tracker: NAT, marks,
//! labels, zones and TCP windows carry on; bad or clashing records leave
//! the table untouched.

use super::persist::ImportError;
use super::tests::{run, snat, tcp_frame, BARE_NAT, COMMIT, LOOKUP};
use super::*;
use tuple::tcp_flags as F;

const A: u32 = 0x0a80_0002;
const EXT: u32 = 0x0101_0101;
const NODE: u32 = 0x0a00_000b;

/// A NATed, marked and labelled TCP connection in zone 5, established.
fn tracker_with_one() -> Conntrack {
    let ct = Conntrack::default();
    let req = CtRequest {
        zone: 5,
        mark: Some((0x42, 0xff)),
        label: Some((1 << 70 | 7, u128::MAX)),
        ..snat(NODE)
    };
    run(
        &ct,
        tcp_frame((A, 40000), (EXT, 80), 1000, 0, F::SYN, 0),
        &req,
        0,
    );
    let zone5 = |r: CtRequest| CtRequest { zone: 5, ..r };
    let reply = tcp_frame((EXT, 80), (NODE, 40000), 5000, 1001, F::SYN | F::ACK, 0);
    run(&ct, reply, &zone5(BARE_NAT), 1);
    ct
}

#[test]
fn an_exported_connection_carries_on_in_another_tracker() {
    let ct = tracker_with_one();
    let saved = ct.export();
    assert_eq!(saved.len(), 1);
    let json = serde_json::to_string(&saved).expect("serializes");
    let back: Vec<persist::SavedConn> = serde_json::from_str(&json).expect("parses");
    assert_eq!(back, saved);

    let other = Conntrack::default();
    let got = other.restore_saved(&back, 1000).expect("imports");
    assert_eq!((got.stored, got.expired), (1, 0));
    let now = other.now_ms();
    let (a, b) = (ct.dump(None, ct.now_ms()), other.dump(None, now));
    assert_eq!(a.len(), 1);
    assert_eq!(b.len(), 1);
    assert_eq!(
        (a[0].orig, a[0].reply, a[0].mark, a[0].label, a[0].tcp_state),
        (b[0].orig, b[0].reply, b[0].mark, b[0].label, b[0].tcp_state)
    );
    // The next segment from A is established, SNATed, with mark and label.
    let ack = tcp_frame((A, 40000), (EXT, 80), 1001, 5001, F::ACK, 10);
    let req = CtRequest {
        zone: 5,
        ..BARE_NAT
    };
    let (o, _) = run(&other, ack, &req, now + 1);
    assert_eq!(o.state, state::TRK | state::EST | state::SNAT);
    assert_eq!((o.mark, o.label), (0x42, 1 << 70 | 7));
    // The time it had left shrank by how long ago it was saved.
    assert!(b[0].expires_in <= a[0].expires_in);
}

#[test]
fn time_spent_down_expires_connections() {
    let ct = Conntrack::default();
    run(
        &ct,
        tcp_frame((A, 1), (EXT, 80), 1, 0, F::SYN, 0),
        &COMMIT,
        0,
    );
    let saved = ct.export();
    let other = Conntrack::default();
    let got = other
        .restore_saved(&saved, 10 * 3600 * 1000)
        .expect("imports");
    assert_eq!((got.stored, got.expired), (0, 1));
    assert!(other.is_empty());
}

#[test]
fn a_clash_or_a_bad_record_leaves_the_table_as_it_was() {
    let ct = tracker_with_one();
    run(
        &ct,
        tcp_frame((A, 2), (EXT, 80), 1, 0, F::SYN, 0),
        &COMMIT,
        2,
    );
    let saved = ct.export();
    assert_eq!(saved.len(), 2);

    // The same connection twice: the second clashes, the first goes too.
    let mut twice = saved.clone();
    twice.push(saved[0].clone());
    let other = Conntrack::default();
    assert!(matches!(
        other.restore_saved(&twice, 0),
        Err(ImportError::Duplicate { index: 2 })
    ));
    assert!(other.is_empty(), "half an import was left behind");

    let mut bad = saved.clone();
    bad[1].reply.zone = 9;
    assert!(matches!(
        other.restore_saved(&bad, 0),
        Err(ImportError::Invalid { index: 1, .. })
    ));
    let small = Conntrack::new(CtConfig {
        limit: 1,
        ..Default::default()
    });
    assert!(matches!(
        small.restore_saved(&saved, 0),
        Err(ImportError::OverLimit { count: 2, limit: 1 })
    ));
    assert!(other.is_empty() && small.is_empty());
    // And the good file still loads.
    assert_eq!(other.restore_saved(&saved, 0).expect("imports").stored, 2);
    let probe = tcp_frame((A, 2), (EXT, 80), 1, 0, F::SYN, 0);
    assert_ne!(run(&other, probe, &LOOKUP, 3).0.state & state::TRK, 0);
}
