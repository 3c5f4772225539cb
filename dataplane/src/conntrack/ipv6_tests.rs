//! ct() on IPv6: TCP, UDP, other protocols, ICMPv6 echo and fragmented
//! datagrams are tracked as IPv4's are, ICMPv6 errors are `+rel` to the
//! connection they quote; Neighbor Discovery and NAT ranges (IPv4 only)
//! are `+inv`.

use super::state::{EST, INV, NEW, REL, RPL, TRK};
use super::tests::{run, snat, tcp_header, BARE_NAT, COMMIT, LOOKUP};
use super::tuple::tcp_flags as F;
use super::{format_entry, Conntrack, CtRequest};
use flowtable::matching::{ICMPV6_ND_NS, IP_PROTO_ICMPV6, IP_PROTO_TCP, IP_PROTO_UDP};
use flowtable::{NatAction, NatSpec};
use std::sync::atomic::Ordering::Relaxed;
use xbr_packet::testframes::{nd_frame, udp6_frame};

const A: u128 = 0xfd00_0000_0000_0000_0000_0000_0000_0002;
const B: u128 = 0xfd00_0000_0000_0000_0000_0000_0000_0003;
const ROUTER: u128 = 0xfd00_0000_0000_0000_0000_0000_0000_0001;
/// The address A's connections leave with (SNAT) and a Service's (DNAT).
const EXT6: u128 = 0xfd00_0000_0000_0000_0000_0000_0000_0100;
const SVC6: u128 = 0xfd00_0000_0000_0000_0000_0000_0000_0030;

/// `ct(commit,nat(src=ADDR))` / `nat(dst=ADDR:PORT)` for IPv6.
fn snat6(addr: u128) -> CtRequest {
    nat6(NatAction {
        flags: NatSpec::SRC,
        ipv6_min: Some(addr),
        ..NatAction::default()
    })
}

fn nat6(n: NatAction) -> CtRequest {
    CtRequest {
        nat: Some(NatSpec::from_action(&n)),
        ..COMMIT
    }
}

fn sum16(b: &[u8]) -> u32 {
    b.chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c.get(1).copied().unwrap_or(0)])))
        .sum()
}

fn fold(mut s: u32) -> u16 {
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// The L4 checksum's offset in an IPv6 frame without extension headers.
fn csum_at(f: &[u8]) -> usize {
    54 + match f[20] {
        IP_PROTO_TCP => 16,
        IP_PROTO_UDP => 6,
        _ => 2,
    }
}

/// The sum of the pseudo-header and the L4 bytes.
fn l4_sum(f: &[u8]) -> u32 {
    let l4 = &f[54..];
    sum16(&f[22..54]) + l4.len() as u32 + u32::from(f[20]) + sum16(l4)
}

/// `f` with its TCP, UDP or ICMPv6 checksum filled in.
fn with_checksum(mut f: Vec<u8>) -> Vec<u8> {
    let at = csum_at(&f);
    f[at..at + 2].copy_from_slice(&[0, 0]);
    let c = !fold(l4_sum(&f));
    f[at..at + 2].copy_from_slice(&c.to_be_bytes());
    f
}

fn checksum_ok(f: &[u8]) -> bool {
    fold(l4_sum(f)) == 0xffff
}

fn src_of(f: &[u8]) -> u128 {
    u128::from_be_bytes(f[22..38].try_into().unwrap())
}

fn dst_of(f: &[u8]) -> u128 {
    u128::from_be_bytes(f[38..54].try_into().unwrap())
}

fn ports_of(f: &[u8]) -> (u16, u16) {
    (
        u16::from_be_bytes([f[54], f[55]]),
        u16::from_be_bytes([f[56], f[57]]),
    )
}

/// An Ethernet + IPv6 frame around `l4` (checksums are not conntrack's
/// business and stay zero).
fn ip6_frame(next: u8, src: u128, dst: u128, l4: &[u8]) -> Vec<u8> {
    let mut f = vec![0x0a, 0x58, 0, 0, 0, 2, 0x0a, 0x58, 0, 0, 0, 1, 0x86, 0xdd];
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&(l4.len() as u16).to_be_bytes());
    f.extend_from_slice(&[next, 64]);
    f.extend_from_slice(&src.to_be_bytes());
    f.extend_from_slice(&dst.to_be_bytes());
    f.extend_from_slice(l4);
    f
}

fn tcp6(
    (src, sport): (u128, u16),
    (dst, dport): (u128, u16),
    seq: u32,
    ack: u32,
    flags: u8,
) -> Vec<u8> {
    ip6_frame(
        IP_PROTO_TCP,
        src,
        dst,
        &tcp_header(sport, dport, seq, ack, flags, 0),
    )
}

fn udp6(src: u128, sport: u16, dst: u128, dport: u16) -> Vec<u8> {
    let mut l4 = vec![0u8; 12];
    l4[0..2].copy_from_slice(&sport.to_be_bytes());
    l4[2..4].copy_from_slice(&dport.to_be_bytes());
    l4[4..6].copy_from_slice(&12u16.to_be_bytes());
    ip6_frame(IP_PROTO_UDP, src, dst, &l4)
}

fn echo6(src: u128, dst: u128, ty: u8, id: u16) -> Vec<u8> {
    let mut l4 = vec![ty, 0, 0, 0, 0, 0, 0, 1];
    l4[4..6].copy_from_slice(&id.to_be_bytes());
    ip6_frame(IP_PROTO_ICMPV6, src, dst, &l4)
}

/// A destination unreachable (type 1, code 4: port) from `src` to `dst`
/// quoting `quoted`'s IPv6 header and first 8 bytes behind it.
fn unreachable6(src: u128, dst: u128, quoted: &[u8]) -> Vec<u8> {
    let mut l4 = vec![1u8, 4, 0, 0, 0, 0, 0, 0];
    l4.extend_from_slice(&quoted[14..14 + 48]);
    ip6_frame(IP_PROTO_ICMPV6, src, dst, &l4)
}

fn state(ct: &Conntrack, frame: Vec<u8>, req: &CtRequest, now: u64) -> u32 {
    run(ct, frame, req, now).0.state
}

#[test]
fn a_tcp_handshake_is_tracked_and_a_segment_out_of_window_is_invalid() {
    let ct = Conntrack::default();
    let (a, b) = ((A, 40000), (B, 80));
    assert_eq!(
        state(&ct, tcp6(a, b, 1000, 0, F::SYN), &COMMIT, 0),
        TRK | NEW
    );
    assert_eq!(
        state(&ct, tcp6(b, a, 5000, 1001, F::SYN | F::ACK), &LOOKUP, 1),
        TRK | EST | RPL
    );
    assert_eq!(
        state(&ct, tcp6(a, b, 1001, 5001, F::ACK), &LOOKUP, 2),
        TRK | EST
    );
    // Far beyond what the peer acknowledged or advertised.
    assert_eq!(
        state(&ct, tcp6(a, b, 1001 + (1 << 30), 5001, F::ACK), &LOOKUP, 3),
        TRK | INV
    );
    assert_eq!(ct.len(), 1);
    let dump = ct.dump(None, 3);
    assert_eq!(
        format_entry(&dump[0]).split(",protoinfo").next().unwrap(),
        "tcp6,orig=(src=fd00::2,dst=fd00::3,sport=40000,dport=80),\
         reply=(src=fd00::3,dst=fd00::2,sport=80,dport=40000)"
    );
}

#[test]
fn udp_replies_are_established_and_zones_keep_connections_apart() {
    let ct = Conntrack::default();
    assert_eq!(state(&ct, udp6(A, 5353, B, 53), &COMMIT, 0), TRK | NEW);
    assert_eq!(
        state(&ct, udp6(B, 53, A, 5353), &LOOKUP, 1),
        TRK | EST | RPL
    );
    let zone7 = CtRequest { zone: 7, ..LOOKUP };
    assert_eq!(state(&ct, udp6(B, 53, A, 5353), &zone7, 1), TRK | NEW);
    // An IPv4 tuple whose addresses are the IPv6 ones' last words is
    // another connection.
    let v4 = super::tests::udp_frame(2, 5353, 3, 53);
    assert_eq!(state(&ct, v4, &LOOKUP, 1), TRK | NEW);
}

#[test]
fn echo_requests_start_exchanges_and_errors_relate_to_them() {
    let ct = Conntrack::default();
    assert_eq!(state(&ct, echo6(A, B, 128, 9), &COMMIT, 0), TRK | NEW);
    assert_eq!(state(&ct, echo6(B, A, 129, 9), &LOOKUP, 1), TRK | EST | RPL);
    // A reply nobody asked for, and a reply that starts nothing.
    assert_eq!(state(&ct, echo6(B, A, 129, 10), &COMMIT, 2), TRK | INV);

    let query = udp6(A, 5353, B, 53);
    assert_eq!(state(&ct, query.clone(), &COMMIT, 2), TRK | NEW);
    // The router on the way says B is unreachable: related, in the
    // reply direction.
    assert_eq!(
        state(&ct, unreachable6(ROUTER, A, &query), &LOOKUP, 3),
        TRK | REL | RPL
    );
    let unknown = udp6(A, 6000, B, 53);
    assert_eq!(
        state(&ct, unreachable6(ROUTER, A, &unknown), &LOOKUP, 3),
        TRK | INV
    );
    assert_eq!(ct.len(), 2);
}

/// `frame` (IPv6, no extension headers) as a fragment of datagram `id`:
/// a fragment header (and, with `hop`, a hop-by-hop header before it),
/// at 8-byte `offset`, more fragments to come when `more`.
fn fragment(frame: &[u8], id: u32, offset: u16, more: bool, hop: bool) -> Vec<u8> {
    let mut f = frame.to_vec();
    let next = f[20];
    let mut ext = Vec::new();
    if hop {
        ext.extend_from_slice(&[44, 0, 1, 4, 0, 0, 0, 0]);
        f[20] = 0;
    } else {
        f[20] = 44;
    }
    ext.extend_from_slice(&[next, 0]);
    ext.extend_from_slice(&(offset << 3 | u16::from(more)).to_be_bytes());
    ext.extend_from_slice(&id.to_be_bytes());
    let plen = u16::from_be_bytes([f[18], f[19]]) + ext.len() as u16;
    f[18..20].copy_from_slice(&plen.to_be_bytes());
    f.splice(54..54, ext);
    f
}

#[test]
fn a_fragmented_datagram_is_tracked_by_its_first_fragment() {
    for hop in [false, true] {
        let ct = Conntrack::default();
        let whole = udp6(A, 5353, B, 53);
        let first = fragment(&whole, 7, 0, true, hop);
        let mut later = fragment(&whole, 7, 100, false, hop);
        later.truncate(later.len() - 4);
        let (o, out) = run(&ct, first.clone(), &COMMIT, 0);
        assert_eq!(o.state, TRK | NEW, "hop {hop}");
        assert_eq!(out, first);
        // The later fragment shares the outcome (and the datagram's ports,
        // which the engine puts in its key).
        let (o, out) = run(&ct, later.clone(), &COMMIT, 1);
        assert_eq!(o.state, TRK | NEW, "hop {hop}");
        assert_eq!(out, later);
        assert_eq!(ct.stats.fragments.load(Relaxed), 1);
        // The first fragment made the connection: B's reply is its.
        assert_eq!(
            state(&ct, udp6(B, 53, A, 5353), &LOOKUP, 2),
            TRK | EST | RPL
        );
        // A later fragment of a datagram whose first was not seen.
        let orphan = fragment(&whole, 8, 100, false, hop);
        assert_eq!(state(&ct, orphan, &LOOKUP, 2), TRK | INV);
        assert_eq!(ct.stats.orphan_fragments.load(Relaxed), 1);
        assert_eq!(ct.len(), 1);
    }
}

#[test]
fn neighbor_discovery_nat_ranges_and_other_protocols() {
    let ct = Conntrack::default();
    let ns = nd_frame(ICMPV6_ND_NS);
    assert_eq!(state(&ct, ns, &COMMIT, 0), TRK | INV);
    // A range of the other family translates nothing: an IPv6
    // connection to IPv4 addresses, an IPv4 one to IPv6 addresses.
    let (o, out) = run(&ct, udp6(A, 1, B, 2), &snat(0x0a00_000a), 0);
    assert_eq!(o.state, TRK | INV);
    assert_eq!(out, udp6(A, 1, B, 2));
    let v4 = super::tests::udp_frame(2, 5353, 3, 53);
    assert_eq!(state(&ct, v4, &snat6(EXT6), 0), TRK | INV);
    assert_eq!(ct.stats.nat_family.load(Relaxed), 2);
    assert!(ct.is_empty());
    // Not IP at all.
    let mut arp = vec![0u8; 42];
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    assert_eq!(state(&ct, arp, &COMMIT, 0), TRK | INV);
    assert_eq!(ct.stats.not_ip.load(Relaxed), 1);
    assert!(ct.stats_text().contains("nat_family: 2\n"));
    // Another protocol (GRE) is tracked by its addresses.
    let gre = ip6_frame(47, A, B, &[0; 8]);
    assert_eq!(state(&ct, gre, &COMMIT, 0), TRK | NEW);
    assert_eq!(
        state(&ct, ip6_frame(47, B, A, &[0; 8]), &LOOKUP, 1),
        TRK | EST | RPL
    );
    // The fixed frames of the packet tests still parse (whole UDP).
    assert_eq!(state(&ct, udp6_frame(), &LOOKUP, 1), TRK | NEW);
}

#[test]
fn a_bare_nat_leaves_an_untranslated_ipv6_connection_alone() {
    let ct = Conntrack::default();
    assert_eq!(state(&ct, udp6(A, 1, B, 2), &COMMIT, 0), TRK | NEW);
    let reply = udp6(B, 2, A, 1);
    let (o, out) = run(&ct, reply.clone(), &BARE_NAT, 1);
    assert_eq!(o.state, TRK | EST | RPL);
    assert_eq!(out, reply);
}

#[test]
fn snat_rewrites_ipv6_sources_and_replies_come_back() {
    let ct = Conntrack::default();
    let query = with_checksum(udp6(A, 5353, B, 53));
    let (o, out) = run(&ct, query, &snat6(EXT6), 0);
    assert_eq!(o.state, TRK | NEW | super::state::SNAT);
    assert_eq!((src_of(&out), dst_of(&out)), (EXT6, B));
    assert!(checksum_ok(&out));
    let sport = ports_of(&out).0;
    // The reply to the translated address is un-NATed back to A.
    let reply = with_checksum(udp6(B, 53, EXT6, sport));
    let (o, back) = run(&ct, reply, &BARE_NAT, 1);
    assert_eq!(o.state, TRK | EST | RPL | super::state::SNAT);
    assert_eq!(
        (src_of(&back), dst_of(&back), ports_of(&back)),
        (B, A, (53, 5353))
    );
    assert!(checksum_ok(&back));
    // B's router reports the query's destination unreachable, to the
    // translated address: it reaches A, quoting what A sent.
    let error = with_checksum(unreachable6(ROUTER, EXT6, &out));
    let (o, translated) = run(&ct, error, &BARE_NAT, 2);
    assert_eq!(o.state & (REL | RPL), REL | RPL);
    assert_eq!(dst_of(&translated), A);
    let quoted_src = u128::from_be_bytes(translated[62 + 8..62 + 24].try_into().unwrap());
    assert_eq!(quoted_src, A);
    assert!(checksum_ok(&translated));
}

#[test]
fn dnat_sends_a_service_address_to_its_backend_and_back() {
    let ct = Conntrack::default();
    let to_backend = nat6(NatAction {
        flags: NatSpec::DST,
        ipv6_min: Some(B),
        proto_min: Some(8080),
        proto_max: Some(8080),
        ..NatAction::default()
    });
    let syn = with_checksum(tcp6((A, 40000), (SVC6, 80), 1000, 0, F::SYN));
    let (o, out) = run(&ct, syn, &to_backend, 0);
    assert_eq!(o.state, TRK | NEW | super::state::DNAT);
    assert_eq!((dst_of(&out), ports_of(&out).1), (B, 8080));
    assert!(checksum_ok(&out));
    let syn_ack = with_checksum(tcp6((B, 8080), (A, 40000), 5000, 1001, F::SYN | F::ACK));
    let (o, back) = run(&ct, syn_ack, &BARE_NAT, 1);
    assert_eq!(o.state & (EST | RPL), EST | RPL);
    assert_eq!((src_of(&back), ports_of(&back).0), (SVC6, 80));
    assert!(checksum_ok(&back));
    // ICMPv6 echo through SNAT: the addresses (in ICMPv6's pseudo-header)
    // change and the checksum stays right.
    let (o, ping) = run(&ct, with_checksum(echo6(A, B, 128, 7)), &snat6(EXT6), 2);
    assert_eq!(o.state & NEW, NEW);
    assert_eq!(src_of(&ping), EXT6);
    assert!(checksum_ok(&ping));
}

#[test]
fn later_fragments_follow_their_first_fragments_translation() {
    let ct = Conntrack::default();
    let whole = udp6(A, 5353, B, 53);
    let first = fragment(&whole, 9, 0, true, false);
    let mut later = fragment(&whole, 9, 100, false, false);
    later.truncate(later.len() - 4);
    let (o, out) = run(&ct, first, &snat6(EXT6), 0);
    assert_eq!(o.state & NEW, NEW);
    assert_eq!(src_of(&out), EXT6);
    let (_, out) = run(&ct, later, &snat6(EXT6), 1);
    assert_eq!((src_of(&out), dst_of(&out)), (EXT6, B));
}
