//! Every header of the field registry through the codec: as a match TLV
//! (exact and, where maskable, masked), through the canonical match
//! encoding, as a SET_FIELD operand and as a Nicira action operand.

use super::oxm::{
    emit_match, emit_operand, emit_oxms, emit_set_ct_label, emit_set_field128, emit_set_field_for,
    emit_set_vlan, emit_tlv, parse_match, parse_operand, parse_oxms, parse_set_field, FieldHeader,
    HEADERS,
};
use super::{Ctx, Reader};
use flowtable::field::FIELDS;
use flowtable::{Action, Field, Match, SubField};

fn ones(bits: u32) -> u128 {
    if bits >= 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    }
}

/// The least match meeting the header's prerequisites.
fn base(fh: &FieldHeader) -> Match {
    let mut m = Match::catch_all();
    m.pin(&fh.prereq.least());
    m
}

/// `base` plus the header's bits at `value/mask` (header coordinates).
fn with(fh: &FieldHeader, value: u128, mask: u128) -> Match {
    let mut m = base(fh);
    if fh.is_wide() {
        m.set128_masked(fh.target, value, mask);
    } else {
        let (v, mk) = m.get(fh.target);
        m.set_masked(
            fh.target,
            v | (value as u64) << fh.shift,
            mk | (mask as u64) << fh.shift,
        );
    }
    m
}

/// Exact, and masked where the header allows it.
fn cases(fh: &FieldHeader) -> Vec<(u128, u128)> {
    let all = ones(fh.bits);
    let v = 0xa5a5_a5a5_a5a5_a5a5_a5a5_a5a5_a5a5_a5a5 & all;
    let mut out = vec![(v, all)];
    if fh.maskable {
        let m = 0xf0f0_f0f0_f0f0_f0f0_f0f0_f0f0_f0f0_f0f0 & all;
        out.push((v & m, m));
    }
    out
}

#[test]
fn every_match_header_decodes_to_its_field_and_reencodes() {
    let mut n = 0;
    for fh in HEADERS.iter().filter(|h| h.in_match()) {
        for (v, m) in cases(fh) {
            let want = with(fh, v, m);
            // This very header, after the prerequisites.
            let mut tlvs = Vec::new();
            emit_oxms(&base(fh), &mut tlvs);
            emit_tlv(&mut tlvs, fh, v, m);
            let got = parse_oxms(&tlvs).unwrap_or_else(|e| panic!("{}: {e}", fh.name));
            assert_eq!(got, want, "{} {v:#x}/{m:#x}", fh.name);
            // The canonical encoding of the same match (maybe another
            // header of the field) decodes to it too.
            let mut out = Vec::new();
            emit_match(&want, &mut out);
            let mut r = Reader::new(&out, Ctx::Match, "test match");
            let back = parse_match(&mut r).unwrap_or_else(|e| panic!("{}: {e}", fh.name));
            assert_eq!(back, want, "{} re-encoded", fh.name);
            assert!(r.is_empty());
            n += 1;
        }
    }
    assert!(n > HEADERS.len(), "{n} cases");
}

#[test]
fn an_unmaskable_header_refuses_a_mask_and_prerequisites_are_checked() {
    for fh in HEADERS.iter().filter(|h| h.in_match()) {
        if !fh.maskable {
            let mut tlvs = Vec::new();
            emit_oxms(&base(fh), &mut tlvs);
            emit_tlv(&mut tlvs, fh, 0, 0);
            assert!(parse_oxms(&tlvs).is_err(), "{} masked", fh.name);
        }
        if fh.prereq != flowtable::field::Prereq::None {
            let mut tlvs = Vec::new();
            emit_tlv(&mut tlvs, fh, 0, ones(fh.bits));
            assert!(parse_oxms(&tlvs).is_err(), "{} without prereq", fh.name);
        }
    }
}

fn decode_set_field(bytes: &[u8]) -> Action {
    let mut r = Reader::new(bytes, Ctx::Match, "test set_field");
    parse_set_field(&mut r).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn every_settable_field_round_trips_through_set_field() {
    let mut n = 0;
    for d in FIELDS.iter().filter(|d| d.in_match) {
        let mut out = Vec::new();
        let v = 0xa5a5_a5a5_a5a5_a5a5_a5a5_a5a5_a5a5_a5a5 & ones(d.bits);
        let proto = match d.prereq {
            flowtable::field::Prereq::Proto(p) => Some(p),
            _ => None,
        };
        let want = if d.key == Field::CtLabelLow {
            emit_set_ct_label(v, &mut out);
            Action::SetCtLabel { value: v }
        } else if d.is_wide() {
            emit_set_field128(d.key, v, &mut out);
            Action::SetField128 {
                field: d.key,
                value: v,
            }
        } else if d.name == "vlan_vid" {
            emit_set_vlan(false, v as u16, &mut out);
            Action::SetVlanVid(v as u16)
        } else if d.name == "vlan_pcp" {
            emit_set_vlan(true, v as u16, &mut out);
            Action::SetVlanPcp(v as u8)
        } else if d.is_plain() && d.bits == d.key.bits() && d.key.is_writable() {
            emit_set_field_for(d.key, v as u64, proto, &mut out);
            Action::SetField {
                field: d.key,
                value: v as u64,
            }
        } else {
            continue;
        };
        assert_eq!(decode_set_field(&out), want, "{}", d.name);
        n += 1;
    }
    assert!(n > 40, "{n} fields");
}

#[test]
fn every_operand_header_round_trips_as_a_subfield() {
    for fh in HEADERS.iter().filter(|h| h.wire_shift == 0) {
        let header = fh.header(false);
        let ranges: &[(u32, u32)] = if fh.is_wide() {
            &[(0, 64), (64, 64), (3, 5)]
        } else {
            &[(0, fh.bits), (fh.bits - 1, 1)]
        };
        for &(ofs, nbits) in ranges {
            let sf: SubField = parse_operand(header, ofs, nbits)
                .unwrap_or_else(|e| panic!("{}[{ofs}+{nbits}]: {e}", fh.name));
            let (h2, ofs2) = emit_operand(&sf);
            let back = parse_operand(h2, ofs2, nbits).unwrap();
            assert_eq!(back, sf, "{}[{ofs}+{nbits}]", fh.name);
        }
        assert!(
            parse_operand(header, 0, fh.bits + 1).is_err(),
            "{}",
            fh.name
        );
    }
}

#[test]
fn the_headers_the_codec_names_exist() {
    for name in [
        "OXM_OF_VLAN_VID",
        "OXM_OF_VLAN_PCP",
        "NXM_OF_VLAN_TCI",
        "NXM_NX_CT_LABEL",
    ] {
        assert_eq!(super::oxm::named(name).name, name);
    }
    // A partial PCP mask only fits NXM's vlan_tci.
    let mut m = Match::catch_all();
    m.set_masked(Field::VlanTci, 0x2000, 0x2fff);
    let mut out = Vec::new();
    emit_match(&m, &mut out);
    let mut r = Reader::new(&out, Ctx::Match, "test match");
    assert_eq!(parse_match(&mut r).unwrap(), m);
}

/// The NXM names OVS's meta-flow gives six fields that also have an OXM
/// header, with their header words written out: each decodes, in a match
/// and as a Nicira action operand, to what its OXM header decodes to; a
/// match re-encodes with the OXM header (OVS's choice for OpenFlow 1.3)
/// and an operand with the NXM one (OVS's NXAST_REG_MOVE/LOAD always use
/// NXM), except for the UDP ports: the key keeps one TpSrc/TpDst for all
/// transport protocols and an operand names it NXM_OF_TCP_SRC/DST.
#[test]
fn the_nxm_names_of_oxm_fields_decode_like_their_oxm_headers() {
    for (nxm, oxm, name) in [
        (0x0000_1602u32, 0x8000_1e02u32, "NXM_OF_UDP_SRC"),
        (0x0000_1802, 0x8000_2002, "NXM_OF_UDP_DST"),
        (0x0000_1a01, 0x8000_2601, "NXM_OF_ICMP_TYPE"),
        (0x0000_1c01, 0x8000_2801, "NXM_OF_ICMP_CODE"),
        (0x0000_1e02, 0x8000_2a02, "NXM_OF_ARP_OP"),
        (0x0001_3801, 0x8000_1201, "NXM_NX_IP_ECN"),
    ] {
        let find = |word: u32| HEADERS.iter().find(|h| h.header(false) == word);
        let fh = find(nxm).unwrap_or_else(|| panic!("{name} is not decoded"));
        let ofh = find(oxm).expect(name);
        assert_eq!(fh.name, name);
        assert_eq!(
            (fh.target, fh.shift, fh.bits, fh.prereq, fh.maskable),
            (ofh.target, ofh.shift, ofh.bits, ofh.prereq, ofh.maskable),
            "{name}"
        );
        // A match: the prerequisites, then the NXM TLV.
        let value = 3;
        let want = with(fh, value, ones(fh.bits));
        let mut body = Vec::new();
        emit_oxms(&base(fh), &mut body);
        let tlv_at = body.len();
        emit_tlv(&mut body, fh, value, ones(fh.bits));
        assert_eq!(&body[tlv_at..tlv_at + 4], nxm.to_be_bytes(), "{name}");
        let got = parse_oxms(&body).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(got, want, "{name}");
        let mut out = Vec::new();
        emit_oxms(&got, &mut out);
        assert!(
            out.windows(4).any(|w| w == oxm.to_be_bytes()),
            "{name} re-encodes as {out:02x?}"
        );
        // An action operand, whole and one bit.
        for (ofs, nbits) in [(0, fh.bits), (fh.bits - 1, 1)] {
            let sf = parse_operand(nxm, ofs, nbits).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(sf, parse_operand(oxm, ofs, nbits).unwrap(), "{name}");
            let (header, back) = emit_operand(&sf);
            assert_eq!(back, ofs, "{name}");
            if !name.starts_with("NXM_OF_UDP_") {
                assert_eq!(header, nxm, "{name}");
            }
        }
    }
}
