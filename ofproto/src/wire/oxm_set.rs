//! The OXM TLV of OFPAT_SET_FIELD: which headers may be set, and the
//! header a set field is written back with.

use super::oxm::{
    ct_label_header, emit_tlv, l4_port_header, match_header, named, parse_tlv, set_field_header,
};
use super::{err, Reader, WireError};
use flowtable::{Action, Field};

/// Decodes the OXM TLV of a SET_FIELD action: an exact value of a header
/// that carries a whole, writable field, or of ct_label (which validation
/// admits only inside `ct()`).
pub(crate) fn parse_set_field(r: &mut Reader<'_>) -> Result<Action, WireError> {
    let tlv = parse_tlv(r).map_err(|e| {
        let (_, code) = e.ofp_error();
        let code = if code == err::BMC_BAD_LEN {
            err::BAC_BAD_SET_LEN
        } else {
            err::BAC_BAD_SET_TYPE
        };
        WireError::BadAction(code, format!("set_field: {e}"))
    })?;
    let fh = tlv.header;
    if tlv.mask.is_some() {
        return Err(WireError::BadAction(
            err::BAC_BAD_SET_ARGUMENT,
            format!("set_field of {} may not be masked in OpenFlow 1.3", fh.name),
        ));
    }
    if fh.is_ct_label() {
        return Ok(Action::SetCtLabel { value: tlv.value });
    }
    if fh.is_wide() {
        return Ok(Action::SetField128 {
            field: fh.target,
            value: tlv.value,
        });
    }
    // OXM_OF_VLAN_VID / OXM_OF_VLAN_PCP: parts of the key's vlan_tci.
    if fh.name == "OXM_OF_VLAN_VID" {
        return Ok(Action::SetVlanVid(tlv.value as u16));
    }
    if fh.name == "OXM_OF_VLAN_PCP" {
        return Ok(Action::SetVlanPcp(tlv.value as u8));
    }
    if !fh.is_whole() || !fh.target.is_writable() {
        return Err(WireError::BadAction(
            err::BAC_BAD_SET_TYPE,
            format!("set_field of {} is not supported", fh.name),
        ));
    }
    Ok(Action::SetField {
        field: fh.target,
        value: tlv.value as u64,
    })
}

/// Encodes the OXM TLV of SET_FIELD (without the action header).
pub fn emit_set_field(field: Field, value: u64, out: &mut Vec<u8>) {
    emit_set_field_for(field, value, None, out);
}

/// [`emit_set_field`] in a flow whose match fixes `ip_proto`: L4 ports
/// are one field in the key, so the protocol picks the header the flow was
/// written with (`udp_src`, `sctp_src`), as [`emit_oxms`](super::oxm::emit_oxms) does for the
/// match.
pub(crate) fn emit_set_field_for(
    field: Field,
    value: u64,
    ip_proto: Option<u8>,
    out: &mut Vec<u8>,
) {
    let fh = match field {
        Field::TpSrc | Field::TpDst => l4_port_header(field, ip_proto),
        _ => set_field_header(field).unwrap_or_else(|| match_header(field)),
    };
    emit_tlv(
        out,
        fh,
        u128::from(value & fh.ones()),
        u128::from(fh.ones()),
    );
}

/// Encodes the OXM TLV of a SET_FIELD of OXM_OF_VLAN_VID (`pcp` false) or
/// OXM_OF_VLAN_PCP.
pub fn emit_set_vlan(pcp: bool, value: u16, out: &mut Vec<u8>) {
    let fh = named(if pcp {
        "OXM_OF_VLAN_PCP"
    } else {
        "OXM_OF_VLAN_VID"
    });
    emit_tlv(
        out,
        fh,
        u128::from(value) & u128::from(fh.ones()),
        u128::from(fh.ones()),
    );
}

/// Encodes the OXM TLV of a SET_FIELD of a 128-bit packet field, named by
/// its low half.
pub fn emit_set_field128(field: Field, value: u128, out: &mut Vec<u8>) {
    emit_tlv(out, match_header(field), value, u128::MAX);
}

/// Encodes the OXM TLV of a SET_FIELD of ct_label.
pub fn emit_set_ct_label(value: u128, out: &mut Vec<u8>) {
    emit_tlv(out, ct_label_header(), value, u128::MAX);
}
