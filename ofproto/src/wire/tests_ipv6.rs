//! The IPv6 OXM fields (OF1.3 §7.2.3.7, fields 26-33 and 39): matches,
//! their prerequisites and errors, SET_FIELD, and the NXM operands of
//! Nicira actions, in the encodings ovs-ofctl sends.

use super::action::{emit_actions, parse_actions};
use super::oxm::{emit_oxms, parse_oxms};
use super::{err, WireError};
use flowtable::{Action, Field, Match, SubField};

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn code(e: WireError) -> (u16, u16) {
    e.ofp_error()
}

fn round_trip(bytes: &str) -> Match {
    let bytes = hex(bytes);
    let m = parse_oxms(&bytes).unwrap_or_else(|e| panic!("{e}"));
    let mut out = Vec::new();
    emit_oxms(&m, &mut out);
    assert_eq!(out, bytes);
    m
}

const SRC: &str = "20010db8000000000000000000000001";

#[test]
fn ipv6_matches_round_trip_in_ovs_order() {
    // eth_type, ipv6_src exact, ipv6_dst /64 (high half only), flow
    // label masked, exthdr masked, ip_proto, tcp_dst.
    let m = round_trip(&format!(
        "80000a02 86dd 80003410 {SRC} \
         80003720 20010db8000000010000000000000000 ffffffffffffffff0000000000000000 \
         80003908 00002345 0000ffff 80004f04 0040 0040 80001401 06 80001c02 0050"
    ));
    assert_eq!(
        m.get128(Field::Ipv6SrcLow),
        (0x2001_0db8_0000_0000_0000_0000_0000_0001, u128::MAX)
    );
    assert_eq!(m.get(Field::Ipv6DstLow), (0, 0));
    assert_eq!(m.get(Field::Ipv6DstHigh), (0x2001_0db8_0000_0001, u64::MAX));
    assert_eq!(m.get(Field::Ipv6Label), (0x2345, 0xffff));
    assert_eq!(m.get(Field::Ipv6Exthdr), (0x40, 0x40));
    // A low-half-only mask is emitted whole as well.
    round_trip(
        "80000a02 86dd 80003520 00000000000000000000000000000001 0000000000000000000000000000ffff",
    );
}

#[test]
fn icmpv6_and_nd_fields_round_trip() {
    // icmp6, type 135 (NS), code 0, nd_target fe80::1, nd_sll.
    let m = round_trip(
        "80000a02 86dd 80001401 3a 80003a01 87 80003c01 00 \
         80003e10 fe800000000000000000000000000001 80004006 0a5800000001",
    );
    assert_eq!(m.exact(Field::Icmpv6Type), Some(135));
    assert_eq!(m.get128(Field::NdTargetLow).0, 0xfe80 << 112 | 1);
    assert_eq!(m.exact(Field::NdSll), Some(0x0a58_0000_0001));
    // NA (136) with nd_tll.
    round_trip("80000a02 86dd 80001401 3a 80003a01 88 80004206 0a5800000002");
}

#[test]
fn ipv6_match_errors_have_their_codes() {
    let prereq = (err::BAD_MATCH, err::BMC_BAD_PREREQ);
    for (bytes, want) in [
        // ipv6_src without eth_type, and on IPv4.
        (format!("80003410 {SRC}"), prereq),
        (format!("80000a02 0800 80003410 {SRC}"), prereq),
        // ipv4_src on IPv6.
        ("80000a02 86dd 80001604 0a000001".into(), prereq),
        // icmpv6_type on ICMP (IPv4), and without ip_proto.
        ("80000a02 0800 80001401 01 80003a01 80".into(), prereq),
        ("80000a02 86dd 80003a01 80".into(), prereq),
        // nd_target on an echo request, nd_sll on an NA, nd_tll on an NS.
        (
            "80000a02 86dd 80001401 3a 80003a01 80 80003e10 fe800000000000000000000000000001"
                .into(),
            prereq,
        ),
        (
            "80000a02 86dd 80001401 3a 80003a01 88 80004006 0a5800000001".into(),
            prereq,
        ),
        (
            "80000a02 86dd 80001401 3a 80003a01 87 80004206 0a5800000001".into(),
            prereq,
        ),
        // Wrong length, a mask on exact-only icmpv6_type, a flow label
        // beyond 20 bits, exthdr bits beyond the nine defined, a value
        // outside its mask, the same field twice.
        (
            "80000a02 86dd 80003408 20010db800000000".into(),
            (err::BAD_MATCH, err::BMC_BAD_LEN),
        ),
        (
            "80000a02 86dd 80001401 3a 80003b02 80ff".into(),
            (err::BAD_MATCH, err::BMC_BAD_MASK),
        ),
        (
            "80000a02 86dd 80003804 00100000".into(),
            (err::BAD_MATCH, err::BMC_BAD_VALUE),
        ),
        (
            "80000a02 86dd 80004e02 0200".into(),
            (err::BAD_MATCH, err::BMC_BAD_VALUE),
        ),
        (
            "80000a02 86dd 80003908 00000003 00000001".into(),
            (err::BAD_MATCH, err::BMC_BAD_WILDCARDS),
        ),
        (
            format!("80000a02 86dd 80003410 {SRC} 80003410 {SRC}"),
            (err::BAD_MATCH, err::BMC_DUP_FIELD),
        ),
    ] {
        let got = parse_oxms(&hex(&bytes)).map(|_| ()).map_err(code);
        assert_eq!(got, Err(want), "{bytes}");
    }
}

#[test]
fn ipv6_set_fields_round_trip() {
    for (bytes, action) in [
        (
            format!("0019 0018 80003410 {SRC}"),
            Action::SetField128 {
                field: Field::Ipv6SrcLow,
                value: 0x2001_0db8_0000_0000_0000_0000_0000_0001,
            },
        ),
        (
            "0019 0018 80003e10 fe800000000000000000000000000001".into(),
            Action::SetField128 {
                field: Field::NdTargetLow,
                value: 0xfe80 << 112 | 1,
            },
        ),
        (
            "0019 0010 80003804 00012345 00000000".into(),
            Action::SetField {
                field: Field::Ipv6Label,
                value: 0x12345,
            },
        ),
        (
            "0019 0010 80003a01 87 000000 00000000".into(),
            Action::SetField {
                field: Field::Icmpv6Type,
                value: 135,
            },
        ),
        (
            "0019 0010 80004006 0a5800000009 0000".into(),
            Action::SetField {
                field: Field::NdSll,
                value: 0x0a58_0000_0009,
            },
        ),
        // load:0x1->NXM_NX_IPV6_DST[64..95]
        (
            "ffff0018 00002320 0007 101f 00012810 0000000000000001".into(),
            Action::RegLoad {
                dst: SubField {
                    field: Field::Ipv6DstHigh,
                    ofs: 0,
                    nbits: 32,
                    named: None,
                },
                value: 1,
            },
        ),
    ] {
        let bytes = hex(&bytes);
        assert_eq!(parse_actions(&bytes).unwrap(), vec![action.clone()]);
        let mut out = Vec::new();
        emit_actions(&[action], &mut out);
        assert_eq!(out, bytes);
    }
}

#[test]
fn exthdr_is_not_settable_and_operands_stay_in_one_half() {
    // set_field of IPV6_EXTHDR: a pseudo-field, not in the packet; of
    // IP_PROTO: read-only, as in OVS.
    let e = parse_actions(&hex("0019 0010 80004e02 0040 000000000000")).unwrap_err();
    assert_eq!(code(e), (err::BAD_ACTION, err::BAC_BAD_SET_TYPE));
    let e = parse_actions(&hex("0019 0010 80001401 11 000000 00000000")).unwrap_err();
    assert_eq!(code(e), (err::BAD_ACTION, err::BAC_BAD_SET_TYPE));
    // A masked set_field is not OF1.3.
    let e = parse_actions(&hex(&format!(
        "0019 0028 80003520 {SRC} ffffffffffffffffffffffffffffffff"
    )))
    .unwrap_err();
    assert_eq!(code(e), (err::BAD_ACTION, err::BAC_BAD_SET_ARGUMENT));
    // load:...->NXM_NX_IPV6_DST[60..70] crosses bit 64.
    let e = parse_actions(&hex(
        "ffff0018 00002320 0007 0f0a 00012810 0000000000000001",
    ))
    .unwrap_err();
    assert_eq!(code(e), (err::BAD_ACTION, err::BAC_BAD_ARGUMENT));
}

/// The property of type `ty` in a table features entry, as its u32 OXM
/// headers.
fn feature_headers(entry: &[u8], ty: u16) -> Vec<u32> {
    let mut at = 64;
    while at + 4 <= entry.len() {
        let t = u16::from_be_bytes([entry[at], entry[at + 1]]);
        let len = usize::from(u16::from_be_bytes([entry[at + 2], entry[at + 3]]));
        if t == ty {
            return entry[at + 4..at + len]
                .chunks(4)
                .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
        }
        at += len.div_ceil(8) * 8;
    }
    panic!("no property {ty}");
}

#[test]
fn table_features_advertise_the_ipv6_fields() {
    let entry = &super::table_features::entries()[0];
    let matches = feature_headers(entry, 8);
    // Maskable ones with the mask bit: IPV6_SRC/DST, FLABEL, ND_TARGET, EXTHDR.
    for h in [
        0x8000_3520,
        0x8000_3720,
        0x8000_3908,
        0x8000_3a01,
        0x8000_3f20,
        0x8000_4f04,
    ] {
        assert!(matches.contains(&h), "match {h:#x}");
    }
    let settable = feature_headers(entry, 14);
    for h in [
        0x8000_3410, // IPV6_SRC
        0x8000_3610, // IPV6_DST
        0x8000_3804, // IPV6_FLABEL
        0x8000_3a01, // ICMPV6_TYPE
        0x8000_3c01, // ICMPV6_CODE
        0x8000_3e10, // IPV6_ND_TARGET
        0x8000_4006, // IPV6_ND_SLL
        0x8000_4206, // IPV6_ND_TLL
    ] {
        assert!(settable.contains(&h), "set_field {h:#x}");
    }
    // IPV6_EXTHDR and IP_PROTO are not settable.
    assert!(!settable.contains(&0x8000_4e02));
    assert!(!settable.contains(&0x8000_1401));
}
