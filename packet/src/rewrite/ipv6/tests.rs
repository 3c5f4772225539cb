//! IPv6 rewrites against an independent checksum computation (etherparse
//! verifies TCP, UDP and ICMPv6 checksums over the IPv6 pseudo-header),
//! and read back through extraction.

use super::super::set_field;
use crate::parse::extract;
use crate::testframes::{nd_frame, tcp6_frame, udp6_frame};
use etherparse::{NetSlice, SlicedPacket, TransportSlice};
use flowtable::key::{Field, FlowKey};
use flowtable::matching::{ICMPV6_ND_NA, ICMPV6_ND_NS};

/// Whether the frame's L4 checksum is right, as etherparse computes it.
fn l4_checksum_ok(f: &[u8]) -> bool {
    let p = SlicedPacket::from_ethernet(f).expect("etherparse parses the frame");
    let Some(NetSlice::Ipv6(ip)) = p.net else {
        panic!("not IPv6");
    };
    let (src, dst) = (ip.header().source(), ip.header().destination());
    match p.transport.expect("an L4 header") {
        TransportSlice::Udp(u) => {
            u.to_header()
                .calc_checksum_ipv6_raw(src, dst, u.payload())
                .unwrap()
                == u.checksum()
        }
        TransportSlice::Tcp(t) => t.calc_checksum_ipv6(src, dst).unwrap() == t.checksum(),
        TransportSlice::Icmpv6(i) => i.is_checksum_valid(src, dst),
        TransportSlice::Icmpv4(_) => panic!("ICMPv4 in IPv6"),
    }
}

const NEW: u128 = 0xfd00_0000_0000_0000_0000_0000_dead_beef;

#[test]
fn address_rewrites_keep_tcp_and_udp_checksums_right() {
    for mut f in [udp6_frame(), tcp6_frame()] {
        assert!(l4_checksum_ok(&f));
        let mut k = FlowKey::zero();
        let l = extract(&f, 1, &mut k);
        for (field, value) in [
            (Field::Ipv6SrcHigh, (NEW >> 64) as u64),
            (Field::Ipv6SrcLow, NEW as u64),
            (Field::Ipv6DstLow, !0),
            (Field::TpDst, 4242),
            (Field::Ipv6Label, 0xabcde),
            (Field::IpDscp, 46),
            (Field::IpEcn, 1),
            (Field::IpTtl, 3),
        ] {
            assert!(set_field(&mut f, l, field, value), "{field:?}");
            assert!(l4_checksum_ok(&f), "{field:?}");
        }
        let l2 = extract(&f, 1, &mut k);
        assert_eq!(l, l2);
        assert_eq!(k.get128(Field::Ipv6SrcLow), NEW);
        assert_eq!(k.get(Field::Ipv6DstLow), u64::MAX);
        assert_eq!(k.get(Field::TpDst), 4242);
        assert_eq!(k.get(Field::Ipv6Label), 0xabcde);
        assert_eq!((k.get(Field::IpDscp), k.get(Field::IpEcn)), (46, 1));
        assert_eq!(k.get(Field::IpTtl), 3);
    }
}

#[test]
fn icmpv6_and_nd_rewrites_keep_the_icmpv6_checksum_right() {
    let mut f = nd_frame(ICMPV6_ND_NS);
    assert!(l4_checksum_ok(&f));
    let mut k = FlowKey::zero();
    let l = extract(&f, 1, &mut k);
    for (field, value) in [
        (Field::NdTargetHigh, 0xfe80_0000_0000_0000),
        (Field::NdTargetLow, 0x0000_0000_0000_0001),
        (Field::NdSll, 0x0a58_0a80_0005),
        (Field::Ipv6DstHigh, 0xff02_0000_0000_0000),
        (Field::Icmpv6Code, 7),
    ] {
        assert!(set_field(&mut f, l, field, value), "{field:?}");
        assert!(l4_checksum_ok(&f), "{field:?}");
    }
    // No TLL option in an NS: nothing to rewrite.
    let before = f.clone();
    assert!(!set_field(&mut f, l, Field::NdTll, 1));
    assert_eq!(f, before);
    // An NS turned NA: the ND fields keep reading (as OVS does, either
    // option in either message).
    assert!(set_field(&mut f, l, Field::Icmpv6Code, 0));
    assert!(set_field(
        &mut f,
        l,
        Field::Icmpv6Type,
        u64::from(ICMPV6_ND_NA)
    ));
    assert!(l4_checksum_ok(&f));
    extract(&f, 1, &mut k);
    assert_eq!(k.get(Field::Icmpv6Type), 136);
    assert_eq!(k.get128(Field::NdTargetLow), 0xfe80 << 112 | 1);
    assert_eq!(k.get(Field::NdSll), 0x0a58_0a80_0005);
    assert_eq!(k.get(Field::Ipv6DstHigh), 0xff02_0000_0000_0000);
    // A port rewrite on ICMPv6 is skipped, as on ICMP.
    let before = f.clone();
    assert!(!set_field(&mut f, l, Field::TpDst, 80));
    assert_eq!(f, before);
}

#[test]
fn a_zero_udp_checksum_stays_zero_and_a_computed_zero_is_sent_as_ones() {
    let mut f = udp6_frame();
    f[60..62].fill(0);
    let mut k = FlowKey::zero();
    let l = extract(&f, 1, &mut k);
    assert!(set_field(&mut f, l, Field::Ipv6SrcLow, 5));
    assert_eq!(f[60..62], [0, 0]);

    // Pick the new low half of the destination so the updated checksum
    // computes to zero: it must then read 0xffff.
    let mut f = udp6_frame();
    let l = extract(&f, 1, &mut k);
    let old_sum = u16::from_be_bytes([f[60], f[61]]);
    let old_word = u16::from_be_bytes([f[52], f[53]]);
    // One's complement: changing one word by d changes the checksum by
    // -d; choose d so the new checksum is 0 (i.e. 0xffff before folding).
    let new_word = old_word
        .wrapping_add(old_sum)
        .wrapping_add(u16::from(old_word.checked_add(old_sum).is_none()));
    let low = u64::from_be_bytes(f[46..54].try_into().unwrap());
    let low = (low & !0xffff) | u64::from(new_word);
    assert!(set_field(&mut f, l, Field::Ipv6DstLow, low));
    assert_eq!(f[60..62], [0xff, 0xff]);
    assert!(l4_checksum_ok(&f));
}

#[test]
fn truncated_packets_are_rewritten_whole_or_not_at_all() {
    let full = tcp6_frame();
    let mut k = FlowKey::zero();
    for len in 14..full.len() {
        let cut = &full[..len];
        let l = extract(cut, 1, &mut k);
        for field in [
            Field::Ipv6SrcLow,
            Field::Ipv6DstHigh,
            Field::Ipv6Label,
            Field::IpTtl,
            Field::TpSrc,
        ] {
            let mut f = cut.to_vec();
            if !set_field(&mut f, l, field, 0x1234) {
                assert_eq!(f, cut, "len {len} {field:?}");
            }
        }
    }
}
