//! Layout invariants of the flow key.

use super::*;

#[test]
fn fields_do_not_overlap_except_documented_overlays() {
    let overlays = [
        (Field::IpSrc, Field::ArpSpa),
        (Field::IpDst, Field::ArpTpa),
        (Field::IpProto, Field::ArpOp),
        (Field::TpSrc, Field::IcmpType),
        (Field::TpDst, Field::IcmpCode),
        (Field::TpSrc, Field::Icmpv6Type),
        (Field::TpDst, Field::Icmpv6Code),
        (Field::IcmpType, Field::Icmpv6Type),
        (Field::IcmpCode, Field::Icmpv6Code),
        (Field::ArpSha, Field::NdSll),
        (Field::ArpTha, Field::NdTll),
    ];
    for (i, a) in Field::ALL.iter().enumerate() {
        for b in &Field::ALL[i + 1..] {
            if overlays.contains(&(*a, *b)) || overlays.contains(&(*b, *a)) {
                continue;
            }
            let (la, lb) = (a.layout(), b.layout());
            if la.word != lb.word {
                continue;
            }
            let ma = a.full_mask() << la.shift;
            let mb = b.full_mask() << lb.shift;
            assert_eq!(ma & mb, 0, "{a:?} overlaps {b:?}");
        }
    }
}

#[test]
fn set_get_round_trip_every_field() {
    for field in Field::ALL {
        let mut k = FlowKey::zero();
        k.set(field, u64::MAX);
        assert_eq!(k.get(field), field.full_mask(), "{field:?}");
        k.set(field, 0);
        assert!(k.is_zero(), "{field:?}");
    }
}

#[test]
fn sub_field_writes_touch_only_their_bits() {
    let mut k = FlowKey::zero();
    k.set(Field::EthDst, 0x1122_3344_5566);
    k.set_bits(Field::EthDst, 32, 16, 0x0a58);
    assert_eq!(k.get(Field::EthDst), 0x0a58_3344_5566);
    assert_eq!(k.get_bits(Field::EthDst, 0, 32), 0x3344_5566);
    k.set(Field::TunId, u64::MAX);
    k.set_bits(Field::TunId, 0, 32, 7);
    assert_eq!(k.get(Field::TunId), 0xffff_ffff_0000_0007);
}

#[test]
fn ct_label_halves_join_into_128_bits() {
    let mut k = FlowKey::zero();
    let label = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210_u128;
    k.set_ct_label(label);
    assert_eq!(k.ct_label(), label);
    assert_eq!(k.get(Field::CtLabelLow), 0xfedc_ba98_7654_3210);
    assert_eq!(k.get(Field::CtLabelHigh), 0x0123_4567_89ab_cdef);
    assert_eq!(k.recirc_table(), None);
    k.set_recirc_table(Some(7));
    assert_eq!(k.ct_label(), label);
}

#[test]
fn ipv6_addresses_are_two_header_words_each() {
    let mut k = FlowKey::zero();
    let addr = 0x2001_0db8_0000_0000_0000_0000_0000_0001_u128;
    k.set128(Field::Ipv6DstLow, addr);
    assert_eq!(k.get128(Field::Ipv6DstLow), addr);
    assert_eq!(k.get(Field::Ipv6DstHigh), 0x2001_0db8_0000_0000);
    assert_eq!(k.get(Field::Ipv6DstLow), 1);
    assert_eq!(k.get128(Field::Ipv6SrcLow), 0);
    for f in [
        Field::Ipv6SrcHigh,
        Field::Ipv6DstLow,
        Field::NdTargetHigh,
        Field::Ipv6Label,
        Field::Ipv6Exthdr,
        Field::MplsLabel,
        Field::MplsTc,
        Field::MplsBos,
        Field::MplsTtl,
        Field::PbbIsid,
    ] {
        assert!(HEADER_WORDS.contains(&f.layout().word), "{f:?}");
    }
    for f in [Field::Metadata, Field::CtLabelLow, Field::CtLabelHigh] {
        assert!(!HEADER_WORDS.contains(&f.layout().word), "{f:?}");
    }
}
