//! NXM_NX_CT_LABEL, the one 128-bit field: matches, SET_FIELD and
//! REG_LOAD operands in the encodings ovs-ofctl sends.

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

#[test]
fn ct_label_matches_round_trip() {
    // Exact: header 0x0001d810 and 16 bytes.
    let exact = hex("0001d810 80000000000000000000000000000001");
    let m = parse_oxms(&exact).unwrap();
    let mut want = Match::catch_all();
    want.set_ct_label_masked(1 | 1 << 127, u128::MAX);
    assert_eq!(m, want);
    let mut out = Vec::new();
    emit_oxms(&m, &mut out);
    assert_eq!(out, exact);

    // Masked, with only the high half's bits: header 0x0001d920.
    let masked = hex("0001d920 00000000000000050000000000000000 000000000000000f0000000000000000");
    let m = parse_oxms(&masked).unwrap();
    assert_eq!(m.ct_label(), (5 << 64, 0xf << 64));
    assert_eq!(m.get(Field::CtLabelLow), (0, 0));
    let mut out = Vec::new();
    emit_oxms(&m, &mut out);
    assert_eq!(out, masked);

    // After ct_mark, before metadata, as OVS orders a match.
    let mut m = Match::catch_all();
    m.set_exact(Field::Metadata, 7);
    m.set_ct_label_masked(2, u128::MAX);
    m.set_exact(Field::CtMark, 3);
    let mut out = Vec::new();
    emit_oxms(&m, &mut out);
    assert_eq!(
        out,
        hex(
            "0001d604 00000003 0001d810 00000000000000000000000000000002 80000408 0000000000000007"
        )
    );
    assert_eq!(parse_oxms(&out).unwrap(), m);
}

#[test]
fn ct_label_match_errors_have_their_codes() {
    // Eight bytes: the wrong length.
    assert_eq!(
        code(parse_oxms(&hex("0001d808 0000000000000001")).unwrap_err()),
        (err::BAD_MATCH, err::BMC_BAD_LEN)
    );
    // Value bits outside the mask.
    assert_eq!(
        code(
            parse_oxms(&hex(
                "0001d920 00000000000000000000000000000003 00000000000000000000000000000001"
            ))
            .unwrap_err()
        ),
        (err::BAD_MATCH, err::BMC_BAD_WILDCARDS)
    );
    // Twice.
    assert_eq!(
        code(
            parse_oxms(&hex(
                "0001d810 00000000000000000000000000000001 0001d810 00000000000000000000000000000001"
            ))
            .unwrap_err()
        ),
        (err::BAD_MATCH, err::BMC_DUP_FIELD)
    );
    // Truncated.
    assert_eq!(
        code(parse_oxms(&hex("0001d810 000000000000000000000001")).unwrap_err()),
        (err::BAD_MATCH, err::BMC_BAD_LEN)
    );
}

#[test]
fn ct_label_writes_round_trip() {
    for (bytes, action) in [
        // set_field:0x1->ct_label: OFPAT_SET_FIELD, 4 + 4 + 16 bytes.
        (
            "0019 0018 0001d810 00000000000000000000000000000001",
            Action::SetCtLabel { value: 1 },
        ),
        // load:0x1->NXM_NX_CT_LABEL[0..31]
        (
            "ffff0018 00002320 0007 001f 0001d810 0000000000000001",
            Action::RegLoad {
                dst: SubField {
                    field: Field::CtLabelLow,
                    ofs: 0,
                    nbits: 32,
                    named: None,
                },
                value: 1,
            },
        ),
        // load:0->NXM_NX_CT_LABEL[124..127]
        (
            "ffff0018 00002320 0007 1f03 0001d810 0000000000000000",
            Action::RegLoad {
                dst: SubField {
                    field: Field::CtLabelHigh,
                    ofs: 60,
                    nbits: 4,
                    named: None,
                },
                value: 0,
            },
        ),
        // move:NXM_NX_CT_LABEL[64..95]->NXM_NX_REG0[]
        (
            "ffff0018 00002320 0006 0020 0040 0000 0001d810 00010004",
            Action::RegMove {
                src: SubField {
                    field: Field::CtLabelHigh,
                    ofs: 0,
                    nbits: 32,
                    named: None,
                },
                dst: SubField::whole(Field::Reg(0)),
            },
        ),
    ] {
        let bytes = hex(bytes);
        assert_eq!(parse_actions(&bytes).unwrap(), vec![action.clone()]);
        let mut out = Vec::new();
        emit_actions(&[action], &mut out);
        assert_eq!(out, bytes);
    }
}

#[test]
fn ct_label_operands_across_bit_64_are_refused() {
    // load:0xff->NXM_NX_CT_LABEL[60..67]: one operand in OVS, two halves
    // in xbr's key.
    assert_eq!(
        code(
            parse_actions(&hex(
                "ffff0018 00002320 0007 0f07 0001d810 00000000000000ff"
            ))
            .unwrap_err()
        ),
        (err::BAD_ACTION, err::BAC_BAD_ARGUMENT)
    );
    // Past bit 127.
    assert_eq!(
        code(
            parse_actions(&hex(
                "ffff0018 00002320 0007 2000 0001d810 0000000000000001"
            ))
            .unwrap_err()
        ),
        (err::BAD_ACTION, err::BAC_BAD_ARGUMENT)
    );
}
