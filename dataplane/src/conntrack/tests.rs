//! Conntrack over real frames: states, TCP windows, limits, timeouts, NAT
//! with checksums, ICMP errors.

use super::*;
use flowtable::matching::{IP_PROTO_ICMP, IP_PROTO_UDP};
use tuple::icmp;
use tuple::tcp_flags as F;
use xbr_packet::parse;

pub(crate) const A: u32 = 0x0a80_0002;
pub(crate) const B: u32 = 0x0a80_0003;
const EXT: u32 = 0x0101_0101;
const NODE: u32 = 0x0a00_000b;

pub(crate) fn sum16(b: &[u8]) -> u32 {
    b.chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum()
}

pub(crate) fn fold(mut s: u32) -> u16 {
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// An Ethernet + IPv4 frame around `l4` (whose checksum field, if any, is
/// filled here).
pub(crate) fn ip_frame(proto: u8, src: u32, dst: u32, mut l4: Vec<u8>) -> Vec<u8> {
    let mut f = vec![0u8; 14];
    f[0..6].copy_from_slice(&[0x0a, 0x58, 0, 0, 0, 2]);
    f[6..12].copy_from_slice(&[0x0a, 0x58, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let total = (20 + l4.len()) as u16;
    let mut ip = vec![0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, proto, 0, 0];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&src.to_be_bytes());
    ip.extend_from_slice(&dst.to_be_bytes());
    let c = !fold(sum16(&ip));
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let csum_at = match proto {
        IP_PROTO_TCP => Some(16),
        IP_PROTO_UDP => Some(6),
        IP_PROTO_ICMP => Some(2),
        _ => None,
    };
    if let Some(at) = csum_at {
        let mut s = sum16(&l4);
        if proto != IP_PROTO_ICMP {
            s += sum16(&src.to_be_bytes()) + sum16(&dst.to_be_bytes());
            s += u32::from(proto) + l4.len() as u32;
        }
        let c = !fold(s);
        l4[at..at + 2].copy_from_slice(&c.to_be_bytes());
    }
    f.extend_from_slice(&ip);
    f.extend_from_slice(&l4);
    f
}

pub(crate) fn tcp_frame(
    (src, sport): (u32, u16),
    (dst, dport): (u32, u16),
    seq: u32,
    ack: u32,
    flags: u8,
    len: usize,
) -> Vec<u8> {
    ip_frame(
        IP_PROTO_TCP,
        src,
        dst,
        tcp_header(sport, dport, seq, ack, flags, len),
    )
}

/// A TCP header (20 bytes, window 64000, checksum 0) and `len` bytes of
/// zero payload.
pub(crate) fn tcp_header(
    sport: u16,
    dport: u16,
    seq: u32,
    ack: u32,
    flags: u8,
    len: usize,
) -> Vec<u8> {
    let mut l4 = vec![0u8; 20 + len];
    l4[0..2].copy_from_slice(&sport.to_be_bytes());
    l4[2..4].copy_from_slice(&dport.to_be_bytes());
    l4[4..8].copy_from_slice(&seq.to_be_bytes());
    l4[8..12].copy_from_slice(&ack.to_be_bytes());
    l4[12] = 5 << 4;
    l4[13] = flags;
    l4[14..16].copy_from_slice(&64000u16.to_be_bytes());
    l4
}

pub(crate) fn udp_frame(src: u32, sport: u16, dst: u32, dport: u16) -> Vec<u8> {
    let mut l4 = vec![0u8; 8 + 4];
    l4[0..2].copy_from_slice(&sport.to_be_bytes());
    l4[2..4].copy_from_slice(&dport.to_be_bytes());
    l4[4..6].copy_from_slice(&12u16.to_be_bytes());
    l4[8..12].copy_from_slice(b"ping");
    ip_frame(IP_PROTO_UDP, src, dst, l4)
}

pub(crate) fn echo(src: u32, dst: u32, ty: u8, id: u16) -> Vec<u8> {
    let mut l4 = vec![0u8; 8 + 8];
    l4[0] = ty;
    l4[4..6].copy_from_slice(&id.to_be_bytes());
    l4[6..8].copy_from_slice(&1u16.to_be_bytes());
    ip_frame(IP_PROTO_ICMP, src, dst, l4)
}

/// An ICMP port unreachable from `src` to `dst` quoting `quoted` (a frame).
fn unreachable(src: u32, dst: u32, quoted: &[u8]) -> Vec<u8> {
    let mut l4 = vec![3u8, 3, 0, 0, 0, 0, 0, 0];
    l4.extend_from_slice(&quoted[14..14 + 28]);
    ip_frame(IP_PROTO_ICMP, src, dst, l4)
}

/// Every checksum of the frame verifies (IP header, and TCP/UDP over the
/// pseudo-header, or ICMP over its message).
pub(crate) fn checksums_ok(f: &[u8]) -> bool {
    let ip = &f[14..34];
    if fold(sum16(ip)) != 0xffff {
        return false;
    }
    let proto = ip[9];
    let l4 = &f[34..];
    let mut s = sum16(l4);
    if proto != IP_PROTO_ICMP {
        s += sum16(&ip[12..20]) + u32::from(proto) + l4.len() as u32;
    }
    fold(s) == 0xffff
}

struct Pkt {
    frame: Vec<u8>,
}

impl Pkt {
    fn run(&mut self, ct: &Conntrack, req: &CtRequest, now: u64) -> CtOutcome {
        let mut key = FlowKey::zero();
        let layers = parse::extract(&self.frame, 1, &mut key);
        ct.execute(&mut self.frame, layers, &key, req, now)
    }
    fn key(&self) -> FlowKey {
        let mut key = FlowKey::zero();
        parse::extract(&self.frame, 1, &mut key);
        key
    }
}

pub(crate) fn run(
    ct: &Conntrack,
    frame: Vec<u8>,
    req: &CtRequest,
    now: u64,
) -> (CtOutcome, Vec<u8>) {
    let mut p = Pkt { frame };
    let o = p.run(ct, req, now);
    (o, p.frame)
}

pub(crate) const COMMIT: CtRequest = CtRequest {
    zone: 0,
    commit: true,
    force: false,
    nat: None,
    mark: None,
    label: None,
    from_host: false,
    in_port: 0,
};
pub(crate) const LOOKUP: CtRequest = CtRequest {
    zone: 0,
    commit: false,
    force: false,
    nat: None,
    mark: None,
    label: None,
    from_host: false,
    in_port: 0,
};
const TRK_NEW: u32 = state::TRK | state::NEW;
const TRK_EST: u32 = state::TRK | state::EST;
const TRK_EST_RPL: u32 = state::TRK | state::EST | state::RPL;
const TRK_INV: u32 = state::TRK | state::INV;

#[test]
fn tcp_handshake_states_and_out_of_window() {
    let ct = Conntrack::default();
    let syn = tcp_frame((A, 40000), (B, 80), 1000, 0, F::SYN, 0);
    assert_eq!(run(&ct, syn.clone(), &LOOKUP, 0).0.state, TRK_NEW);
    assert!(ct.is_empty(), "uncommitted connections are not stored");
    assert_eq!(run(&ct, syn, &COMMIT, 0).0.state, TRK_NEW);
    assert_eq!(ct.len(), 1);
    let synack = tcp_frame((B, 80), (A, 40000), 5000, 1001, F::SYN | F::ACK, 0);
    assert_eq!(run(&ct, synack, &LOOKUP, 1).0.state, TRK_EST_RPL);
    let ack = tcp_frame((A, 40000), (B, 80), 1001, 5001, F::ACK, 100);
    assert_eq!(run(&ct, ack, &LOOKUP, 2).0.state, TRK_EST);
    let bad = tcp_frame((A, 40000), (B, 80), 1001 + 50_000_000, 5001, F::ACK, 100);
    assert_eq!(run(&ct, bad, &LOOKUP, 3).0.state, TRK_INV);
    assert_eq!(ct.stats.invalid.load(Relaxed), 1);
    // A SYN-ACK cannot start a connection.
    let stray = tcp_frame((B, 81), (A, 40001), 1, 1, F::SYN | F::ACK, 0);
    assert_eq!(run(&ct, stray, &COMMIT, 3).0.state, TRK_INV);
    let dump = ct.dump(None, 4);
    assert_eq!(dump.len(), 1);
    assert_eq!(
        format_entry(&dump[0]),
        "tcp,orig=(src=10.128.0.2,dst=10.128.0.3,sport=40000,dport=80),\
         reply=(src=10.128.0.3,dst=10.128.0.2,sport=80,dport=40000),protoinfo=(state=ESTABLISHED)"
    );
}

#[test]
fn zones_and_marks_are_separate() {
    let ct = Conntrack::default();
    let z1 = CtRequest {
        zone: 1,
        mark: Some((0x5, 0xff)),
        ..COMMIT
    };
    let o = run(&ct, udp_frame(A, 5000, B, 53), &z1, 0).0;
    assert_eq!((o.state, o.zone, o.mark), (TRK_NEW, 1, 5));
    // Zone 0 does not know it.
    assert_eq!(
        run(&ct, udp_frame(B, 53, A, 5000), &LOOKUP, 1).0.state,
        TRK_NEW
    );
    let z1_lookup = CtRequest { zone: 1, ..LOOKUP };
    let o = run(&ct, udp_frame(B, 53, A, 5000), &z1_lookup, 1).0;
    assert_eq!((o.state, o.mark), (TRK_EST_RPL, 5));
    // A mark without commit changes nothing.
    let no_commit = CtRequest {
        zone: 1,
        mark: Some((0x9, 0xff)),
        ..LOOKUP
    };
    assert_eq!(run(&ct, udp_frame(A, 5000, B, 53), &no_commit, 2).0.mark, 5);
    assert_eq!(ct.flush(Some(0)), 0);
    assert_eq!(ct.dump(Some(1), 2).len(), 1);
    // Counted under its zone (the metrics' per-zone gauge).
    let z0 = CtRequest { zone: 0, ..COMMIT };
    run(&ct, udp_frame(A, 5001, B, 53), &z0, 2);
    assert_eq!(ct.zone_counts(), [(0, 1), (1, 1)]);
    assert_eq!(ct.flush(Some(1)), 1);
    assert_eq!(ct.zone_counts(), [(0, 1)]);
    assert_eq!(ct.flush(Some(0)), 1);
    assert!(ct.zone_counts().is_empty());
    assert!(ct.is_empty());
}

#[test]
fn full_table_refuses_new_connections_only() {
    let ct = Conntrack::new(CtConfig {
        limit: 2,
        timeouts: Timeouts::default(),
    });
    for port in [1000, 1001] {
        assert_eq!(
            run(&ct, udp_frame(A, port, B, 53), &COMMIT, 0).0.state,
            TRK_NEW
        );
    }
    // Refused, as OVS's userspace datapath refuses it (`conn_not_found`):
    // the packet is `+trk+new` and goes on, but nothing is stored, so its
    // reply is new too, and a mark asked with the commit is not set.
    let marked = CtRequest {
        mark: Some((7, u32::MAX)),
        ..COMMIT
    };
    let (refused, _) = run(&ct, udp_frame(A, 1002, B, 53), &marked, 0);
    assert_eq!(refused.state, TRK_NEW);
    assert_eq!(refused.mark, 0);
    assert_eq!(ct.stats.table_full.load(Relaxed), 1);
    assert_eq!(ct.len(), 2);
    assert_eq!(
        run(&ct, udp_frame(B, 53, A, 1002), &LOOKUP, 0).0.state,
        TRK_NEW
    );
    // Existing connections go on.
    assert_eq!(
        run(&ct, udp_frame(B, 53, A, 1000), &LOOKUP, 1).0.state,
        TRK_EST_RPL
    );
    // Once one expires (the replied one, after other_bidir) and is
    // swept, there is room again.
    let t = Timeouts::default();
    let later = 1 + t.other_bidir;
    assert_eq!(ct.sweep(later, table::SHARDS), 1);
    assert_eq!(ct.len(), 1);
    assert_eq!(
        run(&ct, udp_frame(A, 1002, B, 53), &COMMIT, later).0.state,
        TRK_NEW
    );
}

/// A packet whose reply tuple is its own (same address and port at both
/// ends) cannot be stored under two entries: it is refused as invalid,
/// leaves no half entry and no reserved slot, and the table goes on.
#[test]
fn a_tuple_that_is_its_own_reply_is_refused_whole() {
    let ct = Conntrack::new(CtConfig {
        limit: 1,
        timeouts: Timeouts::default(),
    });
    assert_eq!(
        run(&ct, udp_frame(A, 53, A, 53), &COMMIT, 0).0.state,
        TRK_INV
    );
    assert_eq!(ct.len(), 0);
    assert_eq!(
        run(&ct, udp_frame(A, 53, A, 53), &LOOKUP, 0).0.state,
        TRK_NEW
    );
    // The refused one gave its reservation back: the only slot is free.
    assert_eq!(
        run(&ct, udp_frame(A, 1000, B, 53), &COMMIT, 0).0.state,
        TRK_NEW
    );
    assert_eq!(ct.len(), 1);
}

#[test]
fn timeouts_follow_the_protocol_state() {
    let ct = Conntrack::default();
    let t = Timeouts::default();
    run(&ct, udp_frame(A, 1, B, 2), &COMMIT, 0);
    // Just before the first-packet timeout it is there...
    assert_eq!(
        run(&ct, udp_frame(B, 2, A, 1), &LOOKUP, t.other_first - 1)
            .0
            .state,
        TRK_EST_RPL
    );
    // ...after a reply it lives other_bidir from the last packet.
    let later = t.other_first - 1 + t.other_bidir;
    assert_eq!(ct.dump(None, later - 1).len(), 1);
    assert!(ct.dump(None, later).is_empty());
    assert_eq!(
        run(&ct, udp_frame(B, 2, A, 1), &LOOKUP, later).0.state,
        TRK_NEW
    );
    assert_eq!(ct.stats.expired.load(Relaxed), 1);
    // ICMP echo: request then reply.
    run(&ct, echo(A, B, icmp::ECHO_REQUEST, 7), &COMMIT, 0);
    assert_eq!(
        run(&ct, echo(B, A, icmp::ECHO_REPLY, 7), &LOOKUP, 1)
            .0
            .state,
        TRK_EST_RPL
    );
    // An unsolicited reply is invalid.
    assert_eq!(
        run(&ct, echo(B, A, icmp::ECHO_REPLY, 8), &COMMIT, 1)
            .0
            .state,
        TRK_INV
    );
}

#[test]
fn icmp_errors_are_related_to_the_connection_they_quote() {
    let ct = Conntrack::default();
    let req = udp_frame(A, 5000, B, 53);
    run(&ct, req.clone(), &COMMIT, 0);
    let err = unreachable(B, A, &req);
    assert_eq!(
        run(&ct, err, &LOOKUP, 1).0.state,
        state::TRK | state::REL | state::RPL
    );
    let other = unreachable(B, A, &udp_frame(A, 5001, B, 53));
    assert_eq!(run(&ct, other, &LOOKUP, 1).0.state, TRK_INV);
}

#[test]
fn force_restarts_a_connection_seen_in_reply() {
    let ct = Conntrack::default();
    run(&ct, udp_frame(A, 1, B, 2), &COMMIT, 0);
    let force = CtRequest {
        force: true,
        ..COMMIT
    };
    let o = run(&ct, udp_frame(B, 2, A, 1), &force, 1).0;
    assert_eq!(o.state, TRK_NEW);
    let d = ct.dump(None, 1);
    assert_eq!((d.len(), d[0].orig.src.as_v4()), (1, B));
}

#[test]
fn non_ip_is_invalid() {
    let ct = Conntrack::default();
    let mut arp = vec![0u8; 42];
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    assert_eq!(run(&ct, arp, &COMMIT, 0).0.state, TRK_INV);
    assert!(ct.is_empty());
}

pub(crate) fn snat(ip: u32) -> CtRequest {
    CtRequest {
        nat: Some(NatSpec::v4(NatSpec::SRC, ip, ip, 0, 0)),
        ..COMMIT
    }
}

pub(crate) const BARE_NAT: CtRequest = CtRequest {
    zone: 0,
    commit: false,
    force: false,
    nat: Some(NatSpec::v4(0, 0, 0, 0, 0)),
    mark: None,
    label: None,
    from_host: false,
    in_port: 0,
};

#[test]
fn snat_translates_both_directions_with_valid_checksums() {
    let ct = Conntrack::default();
    let (o, out) = run(
        &ct,
        tcp_frame((A, 40000), (EXT, 80), 1000, 0, F::SYN, 0),
        &snat(NODE),
        0,
    );
    assert_eq!(o.state, TRK_NEW | state::SNAT);
    let mut p = Pkt { frame: out };
    let k = p.key();
    assert_eq!(k.get(flowtable::key::Field::IpSrc), u64::from(NODE));
    assert_eq!(k.get(flowtable::key::Field::TpSrc), 40000);
    assert!(checksums_ok(&p.frame));
    // A second client with the same port gets another one.
    let (_, out2) = run(
        &ct,
        tcp_frame((B, 40000), (EXT, 80), 1, 0, F::SYN, 0),
        &snat(NODE),
        0,
    );
    p.frame = out2;
    let k2 = p.key();
    assert_eq!(k2.get(flowtable::key::Field::IpSrc), u64::from(NODE));
    assert_ne!(k2.get(flowtable::key::Field::TpSrc), 40000);
    assert!(checksums_ok(&p.frame));
    // The reply to the node is un-NATed back to A by a bare nat.
    let reply = tcp_frame((EXT, 80), (NODE, 40000), 5000, 1001, F::SYN | F::ACK, 0);
    let (o, back) = run(&ct, reply, &BARE_NAT, 1);
    assert_eq!(o.state, TRK_EST_RPL | state::SNAT);
    p.frame = back;
    assert_eq!(p.key().get(flowtable::key::Field::IpDst), u64::from(A));
    assert!(checksums_ok(&p.frame));
    // Without nat in the action the packet is tracked but not translated.
    let ack = tcp_frame((A, 40000), (EXT, 80), 1001, 5001, F::ACK, 0);
    let (o, same) = run(&ct, ack.clone(), &LOOKUP, 2);
    assert_eq!(o.state, TRK_EST);
    assert_eq!(same, ack);
    // An ICMP error from a router about the translated packet reaches A,
    // quoting what A sent.
    let sent = tcp_frame((NODE, 40000), (EXT, 80), 1001, 5001, F::ACK, 0);
    let err = unreachable(0x0505_0505, NODE, &sent);
    let (o, e) = run(&ct, err, &BARE_NAT, 3);
    assert_eq!(o.state, state::TRK | state::REL | state::RPL | state::SNAT);
    assert!(checksums_ok(&e));
    assert_eq!(&e[30..34], &A.to_be_bytes(), "outer destination");
    assert_eq!(
        &e[26..30],
        &0x0505_0505u32.to_be_bytes(),
        "router keeps its address"
    );
    let quoted_ip = &e[42..62];
    assert_eq!(&quoted_ip[12..16], &A.to_be_bytes(), "quoted source");
    assert_eq!(fold(sum16(quoted_ip)), 0xffff, "quoted header checksum");
}

#[test]
fn snat_of_two_pings_with_one_identifier_keeps_them_apart() {
    let ct = Conntrack::default();
    let (_, first) = run(&ct, echo(A, EXT, icmp::ECHO_REQUEST, 7), &snat(NODE), 0);
    let (o, second) = run(&ct, echo(B, EXT, icmp::ECHO_REQUEST, 7), &snat(NODE), 0);
    assert_eq!(o.state, TRK_NEW | state::SNAT);
    let id = |f: &[u8]| u16::from_be_bytes([f[38], f[39]]);
    assert_eq!(id(&first), 7);
    let other = id(&second);
    assert_ne!(other, 7);
    assert!(checksums_ok(&first) && checksums_ok(&second));
    assert_eq!(&second[26..30], &NODE.to_be_bytes());
    // Each reply goes back to its own pod with its own identifier.
    for (reply_id, pod) in [(7, A), (other, B)] {
        let (o, back) = run(
            &ct,
            echo(EXT, NODE, icmp::ECHO_REPLY, reply_id),
            &BARE_NAT,
            1,
        );
        assert_eq!(o.state, TRK_EST_RPL | state::SNAT);
        assert_eq!(&back[30..34], &pod.to_be_bytes());
        assert_eq!(id(&back), 7);
        assert!(checksums_ok(&back));
    }
}

#[test]
fn dnat_like_a_service_and_back() {
    let ct = Conntrack::default();
    const SVC: u32 = 0xac1e_0001;
    let dnat = CtRequest {
        nat: Some(NatSpec::v4(NatSpec::DST, B, B, 8080, 8080)),
        ..COMMIT
    };
    let (o, out) = run(&ct, udp_frame(A, 5000, SVC, 53), &dnat, 0);
    assert_eq!(o.state, TRK_NEW | state::DNAT);
    let k = Pkt { frame: out.clone() }.key();
    assert_eq!(
        (
            k.get(flowtable::key::Field::IpDst),
            k.get(flowtable::key::Field::TpDst)
        ),
        (u64::from(B), 8080)
    );
    assert!(checksums_ok(&out));
    let (o, back) = run(&ct, udp_frame(B, 8080, A, 5000), &BARE_NAT, 1);
    assert_eq!(o.state, TRK_EST_RPL | state::DNAT);
    let k = Pkt {
        frame: back.clone(),
    }
    .key();
    assert_eq!(
        (
            k.get(flowtable::key::Field::IpSrc),
            k.get(flowtable::key::Field::TpSrc)
        ),
        (u64::from(SVC), 53)
    );
    assert!(checksums_ok(&back));
    // The backend's port unreachable reaches A from the Service address.
    let err = unreachable(B, A, &udp_frame(A, 5000, B, 8080));
    let (o, e) = run(&ct, err, &BARE_NAT, 2);
    assert_eq!(o.state, state::TRK | state::REL | state::RPL | state::DNAT);
    assert_eq!(&e[26..30], &SVC.to_be_bytes());
    assert!(checksums_ok(&e));
}

#[test]
fn threads_share_the_table_without_deadlock_or_lost_counts() {
    let ct = std::sync::Arc::new(Conntrack::new(CtConfig {
        limit: 3000,
        timeouts: Timeouts::default(),
    }));
    let workers: Vec<_> = (0..4u32)
        .map(|t| {
            let ct = ct.clone();
            std::thread::spawn(move || {
                let mut tracked = 0;
                for i in 0..1000u16 {
                    let src = A + t;
                    let o = run(&ct, udp_frame(src, 1000 + i, B, 53), &COMMIT, 0).0;
                    // A refused commit is `+new` too (as OVS's), but
                    // stores nothing: the reply tells.
                    assert_eq!(o.state, TRK_NEW);
                    let r = run(&ct, udp_frame(B, 53, src, 1000 + i), &LOOKUP, 1).0;
                    if r.state == TRK_EST_RPL {
                        tracked += 1;
                    } else {
                        assert_eq!(r.state, TRK_NEW, "{r:?}");
                    }
                }
                tracked
            })
        })
        .collect();
    // Meanwhile: dumps, sweeps and zone-1 flushes (nothing lives there).
    for _ in 0..50 {
        assert!(ct.dump(None, 0).len() <= 3000);
        ct.sweep(0, table::SHARDS);
        assert_eq!(ct.flush(Some(1)), 0);
    }
    let committed: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    // Every committed connection is there, up to the limit; the others
    // were refused and counted.
    assert_eq!(committed, ct.stats.committed.load(Relaxed));
    assert_eq!(ct.len() as u64, committed);
    assert_eq!(committed + ct.stats.table_full.load(Relaxed), 4000);
    assert_eq!(committed, 3000);
    assert_eq!(ct.dump(None, 2).len(), 3000);
    assert_eq!(ct.flush(None), 3000);
    assert!(ct.is_empty());
}

#[test]
fn the_sweeper_thread_removes_expired_connections_and_stops_when_dropped() {
    let ct = std::sync::Arc::new(Conntrack::new(CtConfig {
        limit: 10,
        timeouts: Timeouts {
            other_first: 1,
            ..Timeouts::default()
        },
    }));
    let now = ct.now_ms();
    run(&ct, udp_frame(A, 1, B, 2), &COMMIT, now);
    assert_eq!(ct.len(), 1);
    let sweeper = Conntrack::spawn_sweeper(&ct).unwrap();
    // One pass over every shard takes SHARDS * SWEEP_INTERVAL.
    let deadline = std::time::Instant::now() + SWEEP_INTERVAL * (table::SHARDS as u32 + 10);
    while !ct.is_empty() {
        assert!(std::time::Instant::now() < deadline, "never swept");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(ct.stats.expired.load(Relaxed), 1);
    let t = std::time::Instant::now();
    drop(sweeper);
    assert!(t.elapsed() < SWEEP_INTERVAL * 5, "{:?}", t.elapsed());
    assert_eq!(std::sync::Arc::strong_count(&ct), 1, "the thread let go");
}

mod prop {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever bytes arrive, conntrack answers with +trk and never
        /// panics, and a NAT rewrite keeps the frame's length.
        #[test]
        fn arbitrary_frames_are_tracked_or_invalid(bytes in proptest::collection::vec(any::<u8>(), 0..120), commit: bool) {
            let ct = Conntrack::new(CtConfig { limit: 4, timeouts: Timeouts::default() });
            let mut f = ip_frame(IP_PROTO_TCP, A, B, vec![0; 20]);
            f.truncate(14);
            f.extend_from_slice(&bytes);
            let len = f.len();
            let mut p = Pkt { frame: f };
            let req = CtRequest { commit, ..snat(NODE) };
            let o = p.run(&ct, &req, 0);
            prop_assert!(o.state & state::TRK != 0);
            prop_assert_eq!(p.frame.len(), len);
        }

        /// Random TCP segments after a handshake never corrupt the tracker:
        /// a segment judged invalid leaves the state exactly as it was.
        #[test]
        fn invalid_segments_do_not_move_the_window(segs in proptest::collection::vec((any::<bool>(), any::<u32>(), any::<u32>(), 0u8..0x20, 0usize..3000), 1..20)) {
            let ct = Conntrack::default();
            run(&ct, tcp_frame((A, 1), (B, 2), 1000, 0, F::SYN, 0), &COMMIT, 0);
            run(&ct, tcp_frame((B, 2), (A, 1), 5000, 1001, F::SYN | F::ACK, 0), &LOOKUP, 0);
            for (reply, seq, ack, flags, len) in segs {
                let before = ct.table.get(&Tuple::v4(0, IP_PROTO_TCP, A, B, 1, 2)).map(|e| e.conn.lock().tcp);
                let f = if reply { tcp_frame((B, 2), (A, 1), seq, ack, flags, len) } else { tcp_frame((A, 1), (B, 2), seq, ack, flags, len) };
                let o = run(&ct, f, &LOOKUP, 1).0;
                let after = ct.table.get(&Tuple::v4(0, IP_PROTO_TCP, A, B, 1, 2)).map(|e| e.conn.lock().tcp);
                if o.state & state::INV != 0 {
                    prop_assert_eq!(before, after);
                }
            }
        }
    }
}

/// A table holds millions of these: the record, its lock and the `Arc`'s
/// counts fit one 192-byte allocation (see `Conn`).
#[test]
fn a_connection_record_stays_small() {
    let alloc = std::mem::size_of::<parking_lot::Mutex<Conn>>() + 2 * std::mem::size_of::<usize>();
    assert!(alloc <= 192, "{alloc} bytes");
}
