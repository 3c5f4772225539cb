//! IPv6 extraction: fields of well-formed packets (built by etherparse,
//! an independent encoder), extension header chains and their OpenFlow
//! bits, and hostile or truncated headers, which must never panic.

use super::*;
use crate::parse::extract;
use crate::testframes::{nd_frame, tcp6_frame, udp6_frame, DST, SRC};
use proptest::prelude::*;

/// An IPv6 frame whose header chain is `chain` (each (next header value
/// of the header, its bytes)) then `l4` of protocol `proto`.
fn chained(first: u8, chain: &[(u8, Vec<u8>)], l4: &[u8]) -> Vec<u8> {
    let mut f = udp6_frame()[..54].to_vec();
    f[20] = first;
    for (next, bytes) in chain {
        let mut h = bytes.clone();
        h[0] = *next;
        f.extend_from_slice(&h);
    }
    f.extend_from_slice(l4);
    let payload = (f.len() - 54) as u16;
    f[18..20].copy_from_slice(&payload.to_be_bytes());
    f
}

fn opts(len8: u8) -> Vec<u8> {
    let mut h = vec![0u8; (usize::from(len8) + 1) * 8];
    h[1] = len8;
    h
}

fn frag(offset: u16, more: bool) -> Vec<u8> {
    let mut h = vec![0u8; 8];
    h[2..4].copy_from_slice(&(offset << 3 | u16::from(more)).to_be_bytes());
    h
}

const PORTS: [u8; 8] = [0x9c, 0x40, 0, 80, 0, 8, 0, 0];

#[test]
fn udp6_fields() {
    let mut k = FlowKey::zero();
    let l = extract(&udp6_frame(), 7, &mut k);
    assert_eq!(k.get(Field::EthType), 0x86dd);
    assert_eq!(k.get128(Field::Ipv6SrcLow), u128::from_be_bytes(SRC));
    assert_eq!(k.get128(Field::Ipv6DstLow), u128::from_be_bytes(DST));
    assert_eq!(k.get(Field::IpDscp), 11);
    assert_eq!(k.get(Field::IpEcn), 2);
    assert_eq!(k.get(Field::Ipv6Label), 0x12345);
    assert_eq!(k.get(Field::IpTtl), 64);
    assert_eq!(k.get(Field::IpProto), 17);
    assert_eq!((k.get(Field::TpSrc), k.get(Field::TpDst)), (1234, 5678));
    assert_eq!(k.get(Field::Ipv6Exthdr), 0);
    assert_eq!(k.get(Field::IpSrc), 0, "no IPv4 address");
    assert_eq!((l.l3, l.l4, l.proto), (14, 54, 17));
}

#[test]
fn nd_messages_carry_target_and_link_layer_address() {
    let mut k = FlowKey::zero();
    let l = extract(&nd_frame(ICMPV6_ND_NS), 1, &mut k);
    assert_eq!((l.l4, l.proto), (54, IP_PROTO_ICMPV6));
    assert_eq!(k.get(Field::Icmpv6Type), 135);
    assert_eq!(k.get(Field::Icmpv6Code), 0);
    assert_eq!(k.get128(Field::NdTargetLow), 0xfe80 << 112 | 0x99);
    assert_eq!(k.get(Field::NdSll), 0x0a58_0000_0001);
    assert_eq!(k.get(Field::NdTll), 0);
    let mut k = FlowKey::zero();
    extract(&nd_frame(ICMPV6_ND_NA), 1, &mut k);
    assert_eq!(k.get(Field::Icmpv6Type), 136);
    assert_eq!(k.get(Field::NdTll), 0x0a58_0000_0001);
    assert_eq!(k.get(Field::NdSll), 0);
}

#[test]
fn malformed_nd_options_leave_the_nd_fields_zero() {
    // A zero-length option (RFC 4861 says drop), an option past the
    // payload, the address given twice.
    let mut zero_len = nd_frame(ICMPV6_ND_NS);
    zero_len[79] = 0;
    let mut past_end = nd_frame(ICMPV6_ND_NS);
    past_end[79] = 2;
    let mut twice = nd_frame(ICMPV6_ND_NS);
    twice.extend_from_within(78..86);
    twice[19] += 8;
    for (what, f) in [("zero", zero_len), ("past", past_end), ("twice", twice)] {
        let mut k = FlowKey::zero();
        extract(&f, 1, &mut k);
        assert_eq!(k.get(Field::Icmpv6Type), 135, "{what}");
        assert_eq!(k.get128(Field::NdTargetLow), 0, "{what}");
        assert_eq!(k.get(Field::NdSll), 0, "{what}");
    }
    // Bytes behind the payload length (padding) are not options.
    let mut padded = nd_frame(ICMPV6_ND_NS);
    padded.extend_from_slice(&[ND_OPT_SLL, 1, 1, 2, 3, 4, 5, 6]);
    let mut k = FlowKey::zero();
    extract(&padded, 1, &mut k);
    assert_eq!(k.get(Field::NdSll), 0x0a58_0000_0001);
}

#[test]
fn extension_headers_are_walked_and_summarised() {
    let e = |bits: u16| u64::from(bits);
    // Hop-by-hop, destination options, routing, first fragment, TCP.
    let f = chained(
        NH_HOP,
        &[
            (NH_DEST, opts(0)),
            (NH_ROUTING, opts(1)),
            (NH_FRAGMENT, opts(0)),
            (IP_PROTO_TCP, frag(0, true)),
        ],
        &PORTS,
    );
    let mut k = FlowKey::zero();
    let l = extract(&f, 1, &mut k);
    assert_eq!(
        k.get(Field::Ipv6Exthdr),
        e(exthdr::HOP | exthdr::DEST | exthdr::ROUTER | exthdr::FRAG)
    );
    assert_eq!(k.get(Field::IpProto), u64::from(IP_PROTO_TCP));
    assert_eq!(k.get(Field::IpFrag), FRAG_ANY);
    assert_eq!(k.get(Field::TpDst), 80);
    assert_eq!(usize::from(l.l4), 54 + 8 + 8 + 16 + 8);

    // A later fragment: no L4, nw_proto the fragment's next header.
    let f = chained(NH_FRAGMENT, &[(IP_PROTO_UDP, frag(100, false))], &PORTS);
    let l = extract(&f, 1, &mut k);
    assert_eq!(k.get(Field::IpFrag), FRAG_ANY | FRAG_LATER);
    assert_eq!(k.get(Field::IpProto), u64::from(IP_PROTO_UDP));
    assert_eq!((l.l4, k.get(Field::TpDst)), (0, 0));

    // Hop-by-hop twice: repeated, and not first.
    let f = chained(
        NH_HOP,
        &[(NH_HOP, opts(0)), (IP_PROTO_TCP, opts(0))],
        &PORTS,
    );
    extract(&f, 1, &mut k);
    assert_eq!(
        k.get(Field::Ipv6Exthdr),
        e(exthdr::HOP | exthdr::UNREP | exthdr::UNSEQ)
    );
    assert_eq!(k.get(Field::TpDst), 80);

    // Routing before hop-by-hop: out of order. Destination options
    // after routing are the final ones, in order; a third is a repeat.
    let f = chained(
        NH_ROUTING,
        &[
            (NH_DEST, opts(0)),
            (NH_DEST, opts(0)),
            (NH_DEST, opts(0)),
            (IP_PROTO_TCP, opts(0)),
        ],
        &PORTS,
    );
    extract(&f, 1, &mut k);
    assert_eq!(
        k.get(Field::Ipv6Exthdr),
        e(exthdr::ROUTER | exthdr::DEST | exthdr::UNREP)
    );
    let f = chained(
        NH_ROUTING,
        &[(NH_HOP, opts(0)), (IP_PROTO_TCP, opts(0))],
        &PORTS,
    );
    extract(&f, 1, &mut k);
    assert_eq!(
        k.get(Field::Ipv6Exthdr),
        e(exthdr::ROUTER | exthdr::HOP | exthdr::UNSEQ)
    );

    // AH counts its length in 4-byte units beyond the first 8 bytes.
    let mut ah = vec![0u8; 16];
    ah[1] = 2;
    let f = chained(NH_AUTH, &[(IP_PROTO_TCP, ah)], &PORTS);
    let l = extract(&f, 1, &mut k);
    assert_eq!(k.get(Field::Ipv6Exthdr), e(exthdr::AUTH));
    assert_eq!((l.l4, k.get(Field::TpDst)), (54 + 16, 80));

    // ESP ends the walk (the rest is encrypted); so does "no next header".
    let f = chained(NH_ESP, &[], &PORTS);
    let l = extract(&f, 1, &mut k);
    assert_eq!(k.get(Field::Ipv6Exthdr), e(exthdr::ESP));
    assert_eq!((k.get(Field::IpProto), l.l4), (u64::from(NH_ESP), 0));
    let f = chained(NH_DEST, &[(NH_NONE, opts(0))], &PORTS);
    let l = extract(&f, 1, &mut k);
    assert_eq!(k.get(Field::Ipv6Exthdr), e(exthdr::DEST | exthdr::NONEXT));
    assert_eq!((k.get(Field::IpProto), l.l4), (u64::from(NH_NONE), 0));
}

#[test]
fn an_endless_chain_is_cut_short() {
    let chain: Vec<_> = (0..40).map(|_| (NH_DEST, opts(0))).collect();
    let f = chained(NH_DEST, &chain, &PORTS);
    let mut k = FlowKey::zero();
    let l = extract(&f, 1, &mut k);
    assert_eq!(l.l4, 0);
    assert_eq!(k.get(Field::TpDst), 0);
    assert_ne!(k.get(Field::Ipv6Exthdr) & u64::from(exthdr::UNREP), 0);
}

#[test]
fn every_truncation_is_handled() {
    let chained_frame = chained(
        NH_HOP,
        &[(NH_FRAGMENT, opts(1)), (IP_PROTO_TCP, frag(0, false))],
        &PORTS,
    );
    for full in [
        udp6_frame(),
        tcp6_frame(),
        nd_frame(ICMPV6_ND_NS),
        chained_frame,
    ] {
        let mut whole = FlowKey::zero();
        let whole_l4 = extract(&full, 1, &mut whole).l4;
        for len in 0..full.len() {
            let mut k = FlowKey::zero();
            let l = extract(&full[..len], 1, &mut k);
            if len < 54 {
                assert_eq!(k.get128(Field::Ipv6SrcLow), 0, "len {len}");
                assert_eq!(l.l4, 0, "len {len}");
            }
            if usize::from(whole_l4) + 4 > len && l.l4 != 0 {
                // A header cut before its ports is no L4 (ICMPv6 needs
                // only its type and code).
                assert_eq!(l.proto, IP_PROTO_ICMPV6, "len {len}");
            }
        }
    }
}

proptest! {
    /// Any bytes behind an IPv6 ethertype and version nibble: extraction
    /// and every IPv6 rewrite terminate without panicking, and a rewrite
    /// that reports itself skipped leaves the frame alone.
    #[test]
    fn hostile_ipv6_never_panics(tail in proptest::collection::vec(any::<u8>(), 0..160),
                                 nh in prop::sample::select(vec![0u8, 6, 17, 43, 44, 50, 51, 58, 59, 60, 132]),
                                 value in any::<u64>()) {
        let mut f = udp6_frame()[..14].to_vec();
        f.push(0x60);
        f.extend_from_slice(&tail);
        if f.len() > 20 {
            f[20] = nh;
        }
        let mut k = FlowKey::zero();
        let l = extract(&f, 1, &mut k);
        prop_assert!(usize::from(l.l4) <= f.len());
        for field in [
            Field::Ipv6SrcHigh, Field::Ipv6DstLow, Field::Ipv6Label, Field::IpDscp,
            Field::IpEcn, Field::IpTtl, Field::TpSrc, Field::Icmpv6Type, Field::Icmpv6Code,
            Field::NdTargetLow, Field::NdSll, Field::NdTll,
        ] {
            let mut g = f.clone();
            if !crate::rewrite::set_field(&mut g, l, field, value) {
                prop_assert_eq!(&g, &f);
            }
        }
    }
}
