//! Links to the XDP flow cache: only steady connections are linked, and
//! every change that would make a cached packet translate differently
//! unlinks the connection and queues it for the packet thread.

use super::link::{link, peek};
use crate::conntrack::tests::{echo, run, snat, tcp_frame, udp_frame, A, B, COMMIT, LOOKUP};
use crate::conntrack::tuple::tcp_flags as F;
use crate::conntrack::{state, Conntrack, CtConfig, CtRequest, Timeouts, Tuple};
use flowtable::matching::{IP_PROTO_ICMP, IP_PROTO_TCP, IP_PROTO_UDP};

fn udp_tuple() -> Tuple {
    Tuple::v4(0, IP_PROTO_UDP, A, B, 5000, 53)
}

fn tcp_tuple() -> Tuple {
    Tuple::v4(0, IP_PROTO_TCP, A, B, 40000, 80)
}

fn dead(ct: &Conntrack) -> Vec<usize> {
    let mut out = Vec::new();
    ct.xdp_take_dead(0, &mut out);
    out
}

/// A committed UDP connection that has seen its reply.
fn replied_udp(ct: &Conntrack) {
    run(ct, udp_frame(A, 5000, B, 53), &COMMIT, 0);
    run(ct, udp_frame(B, 53, A, 5000), &LOOKUP, 1);
}

/// An established TCP connection (handshake done).
fn established_tcp(ct: &Conntrack) {
    run(
        ct,
        tcp_frame((A, 40000), (B, 80), 1000, 0, F::SYN, 0),
        &COMMIT,
        0,
    );
    let synack = tcp_frame((B, 80), (A, 40000), 5000, 1001, F::SYN | F::ACK, 0);
    run(ct, synack, &LOOKUP, 1);
    run(
        ct,
        tcp_frame((A, 40000), (B, 80), 1001, 5001, F::ACK, 0),
        &LOOKUP,
        2,
    );
}

#[test]
fn only_steady_connections_with_the_seen_mark_are_linked() {
    let ct = Conntrack::default();
    assert!(link(&ct, &udp_tuple(), 0, 0, 1).is_none(), "no connection");
    run(&ct, udp_frame(A, 5000, B, 53), &COMMIT, 0);
    assert!(link(&ct, &udp_tuple(), 0, 0, 1).is_none(), "not replied");
    run(&ct, udp_frame(B, 53, A, 5000), &LOOKUP, 1);
    assert!(link(&ct, &udp_tuple(), 7, 0, 2).is_none(), "other mark");
    assert!(link(&ct, &udp_tuple(), 0, 1, 2).is_none(), "other label");
    let l = link(&ct, &udp_tuple(), 0, 0, 2).expect("steady");
    assert!(l.is_linked());
    // Either direction's tuple finds it.
    let back = link(&ct, &udp_tuple().reverse(), 0, 0, 2).expect("reply");
    assert_eq!(back.id(), l.id());
    // Expired: not linked.
    let t = Timeouts::default();
    assert!(link(&ct, &udp_tuple(), 0, 0, 2 + t.other_bidir).is_none());

    // TCP only once the handshake completed.
    run(
        &ct,
        tcp_frame((A, 40000), (B, 80), 1000, 0, F::SYN, 0),
        &COMMIT,
        0,
    );
    let synack = tcp_frame((B, 80), (A, 40000), 5000, 1001, F::SYN | F::ACK, 0);
    run(&ct, synack, &LOOKUP, 1);
    assert!(link(&ct, &tcp_tuple(), 0, 0, 2).is_none(), "SYN_RECV");
    run(
        &ct,
        tcp_frame((A, 40000), (B, 80), 1001, 5001, F::ACK, 0),
        &LOOKUP,
        2,
    );
    assert!(link(&ct, &tcp_tuple(), 0, 0, 3).is_some());
    assert!(dead(&ct).is_empty());
}

#[test]
fn a_fin_unlinks_and_queues_the_connection_before_the_packet_leaves() {
    let ct = Conntrack::default();
    established_tcp(&ct);
    let l = link(&ct, &tcp_tuple(), 0, 0, 3).expect("established");
    // Data forwarded in the kernel meanwhile: far ahead of what conntrack
    // saw. The FIN still passes (the window resynchronises) and unlinks.
    let far = 100_000_000;
    let fin = tcp_frame((A, 40000), (B, 80), 1001 + far, 5001, F::ACK | F::FIN, 0);
    let (o, _) = run(&ct, fin, &LOOKUP, 4);
    assert_eq!(o.state & state::INV, 0, "{o:?}");
    assert!(!l.is_linked());
    assert_eq!(dead(&ct), vec![l.id()]);
    assert!(dead(&ct).is_empty(), "queued once");
    // The close is tracked to the end.
    let fin2 = tcp_frame((B, 80), (A, 40000), 5001, 1002 + far, F::ACK | F::FIN, 0);
    assert_eq!(run(&ct, fin2, &LOOKUP, 5).0.state & state::INV, 0);
    let last = tcp_frame((A, 40000), (B, 80), 1002 + far, 5002, F::ACK, 0);
    assert_eq!(run(&ct, last, &LOOKUP, 6).0.state & state::INV, 0);
    let dump = ct.dump(None, 7);
    assert_eq!(dump[0].tcp_state, Some("TIME_WAIT"));
    assert!(link(&ct, &tcp_tuple(), 0, 0, 7).is_none(), "closing");
}

#[test]
fn a_new_mark_expiry_and_flush_unlink() {
    let ct = Conntrack::default();
    replied_udp(&ct);
    let l = link(&ct, &udp_tuple(), 0, 0, 2).expect("steady");
    // A packet that changes nothing keeps the link.
    run(&ct, udp_frame(A, 5000, B, 53), &COMMIT, 3);
    assert!(l.is_linked() && dead(&ct).is_empty());
    let mark = CtRequest {
        mark: Some((5, 0xff)),
        ..COMMIT
    };
    run(&ct, udp_frame(A, 5000, B, 53), &mark, 4);
    assert!(!l.is_linked());
    assert_eq!(dead(&ct), vec![l.id()]);

    let l = link(&ct, &udp_tuple(), 5, 0, 5).expect("relinked");
    let t = Timeouts::default();
    assert_eq!(ct.sweep(5 + t.other_bidir, usize::MAX), 1);
    assert_eq!(dead(&ct), vec![l.id()]);

    replied_udp(&ct);
    let l = link(&ct, &udp_tuple(), 0, 0, 2).expect("steady");
    assert_eq!(ct.flush(None), 1);
    assert_eq!(dead(&ct), vec![l.id()]);
    assert!(!l.is_linked());
}

#[test]
fn kernel_hits_refresh_a_linked_connection_only() {
    let ct = Conntrack::new(CtConfig::default());
    let t = ct.config().timeouts;
    replied_udp(&ct);
    let l = link(&ct, &udp_tuple(), 0, 0, 2).expect("steady");
    // Hits at 20 s keep it alive past its timeout from the last packet
    // the packet thread saw (at 1 ms).
    let at = 20_000;
    l.refresh(&ct, at);
    let dump = ct.dump(None, at);
    assert_eq!(dump[0].expires_in, t.other_bidir);
    assert_eq!(ct.sweep(1 + t.other_bidir, usize::MAX), 0);
    // Once unlinked, hits no longer count.
    l.unlink();
    l.refresh(&ct, at + 5_000);
    assert_eq!(ct.dump(None, at)[0].expires_in, t.other_bidir);
}

#[test]
fn links_of_several_threads_keep_the_connection_linked_until_the_last_goes() {
    let ct = Conntrack::default();
    ct.set_xdp_threads(2);
    replied_udp(&ct);
    let reply = Tuple::v4(0, IP_PROTO_UDP, B, A, 53, 5000);
    let first = link(&ct, &udp_tuple(), 0, 0, 2).expect("steady");
    let second = link(&ct, &reply, 0, 0, 2).expect("the other direction");
    // One entry idles out: the other still holds the connection, which
    // a change must then report.
    first.unlink();
    assert!(second.is_linked());
    let mark = CtRequest {
        mark: Some((7, 0xff)),
        ..COMMIT
    };
    run(&ct, udp_frame(A, 5000, B, 53), &mark, 3);
    assert!(!second.is_linked(), "a new mark unlinks every link");
    for thread in 0..2 {
        let mut out = Vec::new();
        assert!(ct.xdp_take_dead(thread, &mut out));
        assert_eq!(out, [second.id()], "thread {thread} hears of it");
    }
    // A link of the old epoch going later leaves a new one alone.
    let third = link(&ct, &udp_tuple(), 7, 0, 4).expect("linked again");
    second.unlink();
    assert!(third.is_linked());
}

/// What adopting a previous process's cache entry asks of conntrack
/// (`engine/adopt.rs`): the outcome `ct()` would give a packet the kernel
/// forwards, for steady connections only, changing nothing.
#[test]
fn a_peek_gives_a_steady_connections_outcome_and_changes_nothing() {
    let ct = Conntrack::default();
    assert!(peek(&ct, &udp_tuple(), 0, false, 1).is_none(), "none");
    run(&ct, udp_frame(A, 5000, B, 53), &COMMIT, 0);
    assert!(
        peek(&ct, &udp_tuple(), 0, false, 1).is_none(),
        "not replied"
    );
    run(&ct, udp_frame(B, 53, A, 5000), &LOOKUP, 1);
    let est = state::TRK | state::EST;
    let p = peek(&ct, &udp_tuple(), 0, true, 2).expect("steady");
    let o = p.outcome;
    assert_eq!((o.state, o.zone, o.mark, o.label), (est, 0, 0, 0));
    assert_eq!(p.rewritten, None, "no translation: nothing rewritten");
    let back = peek(&ct, &udp_tuple().reverse(), 0, false, 2);
    assert_eq!(back.map(|p| p.outcome.state), Some(est | state::RPL));
    // Nothing changed: not linked, and expiring as before.
    let t = Timeouts::default();
    assert!(peek(&ct, &udp_tuple(), 0, false, 1 + t.other_bidir).is_none());
    let l = link(&ct, &udp_tuple(), 0, 0, 2).expect("linkable");
    l.unlink();

    // A translated connection: a `ct()` without `nat` leaves the packet
    // as it is; `ct(nat)` rewrites it as the binding says, both ways, and
    // says so in the state.
    let ct = Conntrack::default();
    let node = 0x0a00_000b;
    run(&ct, udp_frame(A, 5000, B, 53), &snat(node), 0);
    run(&ct, udp_frame(B, 53, node, 5000), &LOOKUP, 1);
    let plain = peek(&ct, &udp_tuple(), 0, false, 2).expect("steady");
    assert_eq!((plain.outcome.state, plain.rewritten), (est, None));
    let out = peek(&ct, &udp_tuple(), 0, true, 2).expect("steady");
    assert_eq!(out.outcome.state, est | state::SNAT);
    let to = out.rewritten.expect("rewritten");
    assert_eq!(
        (to.src.as_v4(), to.sport, to.dst.as_v4(), to.dport),
        (node, 5000, B, 53)
    );
    let reply = Tuple::v4(0, 17, B, node, 53, 5000);
    let back = peek(&ct, &reply, 0, true, 2).expect("steady");
    assert_eq!(back.outcome.state, est | state::RPL | state::SNAT);
    let to = back.rewritten.expect("rewritten");
    assert_eq!(
        (to.src.as_v4(), to.sport, to.dst.as_v4(), to.dport),
        (B, 53, A, 5000)
    );
    // Nothing changed by the peeks: the connection is not linked yet.
    let l = link(&ct, &udp_tuple(), 0, 0, 2).expect("linkable");
    l.unlink();
}

/// A replied ICMP echo is settled for conntrack, but the XDP key does
/// not hold the echo's identifier: the cache neither links nor adopts it.
#[test]
fn an_icmp_echo_is_not_carried() {
    let ct = Conntrack::default();
    run(&ct, echo(A, B, 8, 7), &COMMIT, 0);
    run(&ct, echo(B, A, 0, 7), &LOOKUP, 1);
    let t = Tuple::v4(0, IP_PROTO_ICMP, A, B, 7, 8);
    let settled = ct.link(&t, 0, 0, 2).expect("settled for conntrack");
    settled.unlink();
    assert!(link(&ct, &t, 0, 0, 2).is_none());
    assert!(peek(&ct, &t, 0, false, 2).is_none());
}
