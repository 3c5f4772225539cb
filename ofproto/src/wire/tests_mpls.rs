//! MPLS on the wire (OF1.3 §7.2.3.7 fields 34-36, §7.2.5 actions 11, 12,
//! 15, 16, 19 and 20): matches with their prerequisites and the errors for
//! masks, values and lengths, the actions, SET_FIELD of the label stack
//! entry's parts, and what TABLE_FEATURES advertises.

use super::action::{emit_actions, parse_actions};
use super::oxm::{emit_oxms, parse_oxms};
use super::{err, table_features, WireError};
use flowtable::{Action, Field};

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

/// eth_type 0x8847, then tc, bos, NXM mpls_ttl and label: OVS's order
/// (`nx_put_raw`), so a dumped flow is the bytes ovs-ofctl sent.
#[test]
fn mpls_match_round_trips_in_ovs_order() {
    let bytes = hex("80000a02 8847 80004601 03 80004801 01 00013c01 40 80004404 000186a0");
    let m = parse_oxms(&bytes).unwrap();
    assert_eq!(m.exact(Field::MplsLabel), Some(100_000));
    assert_eq!(m.exact(Field::MplsTc), Some(3));
    assert_eq!(m.exact(Field::MplsBos), Some(1));
    assert_eq!(m.exact(Field::MplsTtl), Some(64));
    let mut out = Vec::new();
    emit_oxms(&m, &mut out);
    assert_eq!(out, bytes);
    // Multicast MPLS carries the same fields.
    let m = parse_oxms(&hex("80000a02 8848 80004404 00000001")).unwrap();
    assert_eq!(m.exact(Field::MplsLabel), Some(1));
}

#[test]
fn mpls_match_errors_have_their_codes() {
    let prereq = (err::BAD_MATCH, err::BMC_BAD_PREREQ);
    for (bytes, want) in [
        // No eth_type, an IPv4 one.
        ("80004404 00000001", prereq),
        ("80000a02 0800 80004601 01", prereq),
        ("80000a02 86dd 80004801 01", prereq),
        ("80000a02 0800 00013c01 01", prereq),
        // OF1.3 makes all three exact-only.
        (
            "80000a02 8847 80004508 00000001 000fffff",
            (err::BAD_MATCH, err::BMC_BAD_MASK),
        ),
        (
            "80000a02 8847 80004702 01 07",
            (err::BAD_MATCH, err::BMC_BAD_MASK),
        ),
        (
            "80000a02 8847 80004902 01 01",
            (err::BAD_MATCH, err::BMC_BAD_MASK),
        ),
        // Values beyond 20, 3 and 1 bits.
        (
            "80000a02 8847 80004404 00100000",
            (err::BAD_MATCH, err::BMC_BAD_VALUE),
        ),
        (
            "80000a02 8847 80004601 08",
            (err::BAD_MATCH, err::BMC_BAD_VALUE),
        ),
        (
            "80000a02 8847 80004801 02",
            (err::BAD_MATCH, err::BMC_BAD_VALUE),
        ),
        // Wrong lengths, a field twice.
        (
            "80000a02 8847 80004402 0001",
            (err::BAD_MATCH, err::BMC_BAD_LEN),
        ),
        (
            "80000a02 8847 80004602 0001",
            (err::BAD_MATCH, err::BMC_BAD_LEN),
        ),
        (
            "80000a02 8847 80004601 01 80004601 02",
            (err::BAD_MATCH, err::BMC_DUP_FIELD),
        ),
    ] {
        let got = parse_oxms(&hex(bytes)).map(|_| ()).map_err(code);
        assert_eq!(got, Err(want), "{bytes}");
    }
}

#[test]
fn mpls_actions_round_trip() {
    for (bytes, action) in [
        ("0013 0008 8847 0000", Action::PushMpls(0x8847)),
        ("0013 0008 8848 0000", Action::PushMpls(0x8848)),
        ("0014 0008 0800 0000", Action::PopMpls(0x0800)),
        ("0014 0008 8847 0000", Action::PopMpls(0x8847)),
        ("000f 0008 7f 000000", Action::SetMplsTtl(127)),
        ("0010 0008 00000000", Action::DecMplsTtl),
        ("000b 0008 00000000", Action::CopyTtlOut),
        ("000c 0008 00000000", Action::CopyTtlIn),
        (
            "0019 0010 80004404 000000cb 00000000",
            Action::SetField {
                field: Field::MplsLabel,
                value: 203,
            },
        ),
        (
            "0019 0010 80004601 05 000000 00000000",
            Action::SetField {
                field: Field::MplsTc,
                value: 5,
            },
        ),
        (
            "0019 0010 80004801 00 000000 00000000",
            Action::SetField {
                field: Field::MplsBos,
                value: 0,
            },
        ),
        (
            "0019 0010 00013c01 09 000000 00000000",
            Action::SetField {
                field: Field::MplsTtl,
                value: 9,
            },
        ),
    ] {
        let bytes = hex(bytes);
        assert_eq!(
            parse_actions(&bytes).unwrap(),
            vec![action.clone()],
            "{action:?}"
        );
        let mut out = Vec::new();
        emit_actions(&[action], &mut out);
        assert_eq!(out, bytes);
    }
}

#[test]
fn mpls_action_errors_have_their_codes() {
    let bad_len = (err::BAD_ACTION, err::BAC_BAD_LEN);
    for (bytes, want) in [
        // push_mpls of a non-MPLS ethertype: BAD_ARGUMENT, as OVS.
        (
            "0013 0008 0800 0000",
            (err::BAD_ACTION, err::BAC_BAD_ARGUMENT),
        ),
        // Lengths other than 8.
        ("0013 0010 8847 0000 00000000 00000000", bad_len),
        ("0014 0010 0800 0000 00000000 00000000", bad_len),
        ("000f 0010 40 000000 00000000 00000000", bad_len),
        ("0010 0010 00000000 00000000 00000000", bad_len),
        ("0010 0004", bad_len),
        ("0014 0008 0800", bad_len),
        // A value beyond the field, a mask (not in OF1.3's SET_FIELD).
        (
            "0019 0010 80004404 00100000 00000000",
            (err::BAD_ACTION, err::BAC_BAD_SET_TYPE),
        ),
        (
            "0019 0010 80004508 00000001 000fffff",
            (err::BAD_ACTION, err::BAC_BAD_SET_TYPE),
        ),
        ("000b 0010 00000000 00000000 00000000", bad_len),
        ("000c 0004", bad_len),
    ] {
        let got = parse_actions(&hex(bytes)).map(|_| ()).map_err(code);
        assert_eq!(got, Err(want), "{bytes}");
    }
}

/// The properties of table 0's TABLE_FEATURES entry, by type.
fn property(ty: u16) -> Vec<u8> {
    let entry = table_features::entries().remove(0);
    let mut at = 64;
    while at + 4 <= entry.len() {
        let t = u16::from_be_bytes([entry[at], entry[at + 1]]);
        let len = usize::from(u16::from_be_bytes([entry[at + 2], entry[at + 3]]));
        if t == ty {
            return entry[at + 4..at + len].to_vec();
        }
        at += len.div_ceil(8) * 8;
    }
    panic!("no property {ty}");
}

fn words(b: &[u8]) -> Vec<u32> {
    b.chunks(4)
        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Apply-actions lists the MPLS actions, write-actions (which takes only
/// output, group and set_field) does not; the three OXM fields are
/// matchable without masks and settable, and so is NXM's mpls_ttl.
#[test]
fn table_features_advertise_mpls() {
    let types = |b: Vec<u8>| {
        words(&b)
            .into_iter()
            .map(|w| (w >> 16) as u16)
            .collect::<Vec<_>>()
    };
    let apply = types(property(6));
    for t in [11, 12, 15, 16, 19, 20, 17, 18, 23, 24] {
        assert!(apply.contains(&t), "apply-actions lacks {t}");
    }
    let write = types(property(4));
    assert_eq!(write, vec![0, 22, 25]);
    let matches = words(&property(8));
    for h in [0x8000_4404, 0x8000_4601, 0x8000_4801, 0x0001_3c01] {
        assert!(matches.contains(&h), "match lacks {h:#x}");
        assert!(
            !matches.contains(&(h | 0x100)),
            "{h:#x} advertised maskable"
        );
    }
    let setfields = words(&property(14));
    for h in [0x8000_4404, 0x8000_4601, 0x8000_4801, 0x0001_3c01] {
        assert!(setfields.contains(&h), "set_field lacks {h:#x}");
    }
}

/// PBB (OF1.3 field 37, actions 26 and 27), which OVS lacks: the I-SID
/// is maskable and needs eth_type 0x88e7; push_pbb takes only 0x88e7.
#[test]
fn pbb_on_the_wire() {
    for bytes in [
        "80000a02 88e7 80004a03 000064",
        "80000a02 88e7 80004b06 000064 0000ff",
    ] {
        let b = hex(bytes);
        let m = parse_oxms(&b).unwrap();
        assert_eq!(m.get(Field::PbbIsid).0, 100);
        let mut out = Vec::new();
        emit_oxms(&m, &mut out);
        assert_eq!(out, b);
    }
    for (bytes, want) in [
        ("80004a03 000064", (err::BAD_MATCH, err::BMC_BAD_PREREQ)),
        (
            "80000a02 0800 80004a03 000064",
            (err::BAD_MATCH, err::BMC_BAD_PREREQ),
        ),
        (
            "80000a02 88e7 80004a04 00000064",
            (err::BAD_MATCH, err::BMC_BAD_LEN),
        ),
        (
            "80000a02 88e7 80004b06 000064 00000f",
            (err::BAD_MATCH, err::BMC_BAD_WILDCARDS),
        ),
    ] {
        let got = parse_oxms(&hex(bytes)).map(|_| ()).map_err(code);
        assert_eq!(got, Err(want), "{bytes}");
    }
    for (bytes, action) in [
        ("001a 0008 88e7 0000", Action::PushPbb(0x88e7)),
        ("001b 0008 00000000", Action::PopPbb),
        (
            "0019 0010 80004a03 0000cb 0000000000",
            Action::SetField {
                field: Field::PbbIsid,
                value: 203,
            },
        ),
    ] {
        let b = hex(bytes);
        assert_eq!(parse_actions(&b).unwrap(), vec![action.clone()]);
        let mut out = Vec::new();
        emit_actions(&[action], &mut out);
        assert_eq!(out, b);
    }
    for (bytes, want) in [
        (
            "001a 0008 8100 0000",
            (err::BAD_ACTION, err::BAC_BAD_ARGUMENT),
        ),
        (
            "001b 0010 00000000 00000000 00000000",
            (err::BAD_ACTION, err::BAC_BAD_LEN),
        ),
    ] {
        let got = parse_actions(&hex(bytes)).map(|_| ()).map_err(code);
        assert_eq!(got, Err(want), "{bytes}");
    }
    let apply = words(&property(6));
    assert!(apply.contains(&(26 << 16 | 4)) && apply.contains(&(27 << 16 | 4)));
    let matches = words(&property(8));
    assert!(
        matches.contains(&0x8000_4b06),
        "pbb_isid advertised maskable"
    );
}
