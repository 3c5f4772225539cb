//! OXM/NXM TLVs: the `ofp_match` of flow mods and flow stats, the operand
//! of SET_FIELD, and the field headers inside Nicira actions.
//!
//! # Design
//!
//! [`HEADERS`] lists every TLV header xbr understands and where its bits
//! land in a [`flowtable::Field`], as the field registry
//! ([`flowtable::field`]) describes them: class, code, width,
//! maskability and prerequisites all come from there. A header may carry only part of a field
//! (OXM VLAN_VID is 13 of the 16 bits of the OVS-style TCI, NXM_NX_IP_FRAG
//! 2 of 8) or sit shifted inside its wire value (NXM_OF_IP_TOS keeps the
//! DSCP in its upper 6 bits). Decoding accepts every header of a field;
//! encoding picks the one OVS picks for OpenFlow 1.3: the OXM (class
//! 0x8000) header where the field has one, class 0x0001 otherwise, and for
//! Nicira action operands the NXM header (class 0x0000 or 0x0001).
//!
//! Cost: a decode is a linear scan of the (small, static) table per TLV.

use super::{err, Ctx, Put, Reader, WireError};
use flowtable::field::Prereq;
use flowtable::matching::{IP_PROTO_SCTP, IP_PROTO_TCP, IP_PROTO_UDP};
use flowtable::{Field, Match, SubField};

pub use super::fields::{OXM_CLASS_NXM0, OXM_CLASS_NXM1, OXM_CLASS_OPENFLOW_BASIC};
/// OFPXMC_PACKET_REGS (OpenFlow 1.5): 64-bit registers, each holding two
/// of xbr's (and OVS's) 32-bit ones, the even-numbered in the high half.
/// `ovs-ofctl -O OpenFlow15` matches registers this way.
pub const OXM_CLASS_PACKET_REGS: u16 = 0x8001;

pub use super::fields::{FieldHeader, HEADERS};
pub use super::oxm_set::{emit_set_ct_label, emit_set_field, emit_set_field128, emit_set_vlan};
pub(crate) use super::oxm_set::{emit_set_field_for, parse_set_field};

/// The entry for a wire (class, field), if xbr knows it.
pub fn lookup(class: u16, field: u8) -> Option<&'static FieldHeader> {
    HEADERS
        .iter()
        .find(|h| h.class == class && h.field == field)
}

/// The header of this name (the codec names the few it picks by hand:
/// VLAN_VID, VLAN_PCP, VLAN_TCI, CT_LABEL).
pub(super) fn named(name: &str) -> &'static FieldHeader {
    // Every name passed here is a literal of the registry (the tests
    // encode with each); the fallback is the first entry only to stay
    // total.
    HEADERS
        .iter()
        .find(|h| h.name == name)
        .unwrap_or(&HEADERS[0])
}

/// The header a match on `field` is dumped with (not VLAN TCI or L4 ports,
/// which [`emit_oxms`] resolves with more context).
pub(super) fn match_header(field: Field) -> &'static FieldHeader {
    HEADERS
        .iter()
        .find(|h| h.target == field && h.in_match && h.shift == 0)
        .unwrap_or(&HEADERS[0])
}

/// The header SET_FIELD uses for `field`: the dump header when it carries
/// the whole field, else another one that does.
pub fn set_field_header(field: Field) -> Option<&'static FieldHeader> {
    let preferred = match_header(field);
    if preferred.target == field && preferred.is_whole() {
        return Some(preferred);
    }
    HEADERS.iter().find(|h| h.target == field && h.is_whole())
}

/// The NXM header OVS puts in a Nicira action for a sub-field: NXM0/NXM1
/// where the field has one that covers the range, the OXM header otherwise.
pub fn operand_header(sf: &SubField) -> &'static FieldHeader {
    // Written or decoded as another field of the same key bits
    // (`NXM_OF_UDP_SRC`): that field's header.
    if let Some(fh) = sf
        .named
        .and_then(flowtable::field::registry::operand_header_name)
        .and_then(|n| HEADERS.iter().find(|h| h.name == n && h.target == sf.field))
    {
        return fh;
    }
    let fits = |h: &&FieldHeader| {
        h.target == sf.field
            && h.wire_shift == 0
            && sf.ofs >= h.shift
            && sf.ofs + sf.nbits <= h.shift + h.bits
    };
    HEADERS
        .iter()
        .filter(|h| h.class != OXM_CLASS_OPENFLOW_BASIC)
        .find(fits)
        .or_else(|| HEADERS.iter().find(fits))
        .unwrap_or_else(|| match_header(sf.field))
}

/// The NXM_NX_CT_LABEL entry of [`HEADERS`].
pub(super) fn ct_label_header() -> &'static FieldHeader {
    named("NXM_NX_CT_LABEL")
}

/// Decodes a Nicira action operand: a bare 32-bit header plus a bit range
/// within the header's field, checked to lie inside it.
pub fn parse_operand(header: u32, ofs: u32, nbits: u32) -> Result<SubField, WireError> {
    let class = (header >> 16) as u16;
    let field = ((header >> 9) & 0x7f) as u8;
    let fh = lookup(class, field).ok_or_else(|| {
        WireError::BadAction(
            err::BAC_BAD_ARGUMENT,
            format!("unknown NXM field header {header:#010x}"),
        )
    })?;
    if fh.wire_shift != 0 {
        return Err(WireError::BadAction(
            err::BAC_BAD_ARGUMENT,
            format!("{} is not supported as an action operand", fh.name),
        ));
    }
    if nbits == 0 || ofs + nbits > fh.bits {
        return Err(WireError::BadAction(
            err::BAC_BAD_ARGUMENT,
            format!(
                "bits {ofs}..{} exceed {} ({} bits)",
                ofs + nbits,
                fh.name,
                fh.bits
            ),
        ));
    }
    if fh.is_wide() {
        // The key keeps a 128-bit field as two 64-bit halves; an operand
        // must lie within one (see `SubField::wide`).
        return SubField::wide(fh.target, ofs, nbits).ok_or_else(|| {
            WireError::BadAction(
                err::BAC_BAD_ARGUMENT,
                format!(
                    "{}[{ofs}..{}] crosses bit 64, which xbr does not support",
                    fh.name,
                    ofs + nbits - 1
                ),
            )
        });
    }
    Ok(SubField {
        field: fh.target,
        ofs: fh.shift + ofs,
        nbits,
        named: flowtable::field::registry::by_header(class, field)
            .and_then(|(def, _)| flowtable::field::registry::operand_named(def)),
    })
}

/// Encodes a sub-field as (header, ofs within the header's bits).
pub fn emit_operand(sf: &SubField) -> (u32, u32) {
    if sf.field.is_ct_label() {
        return (ct_label_header().header(false), sf.wire_ofs());
    }
    if let Some(low) = sf.field.low_half() {
        let fh = HEADERS
            .iter()
            .filter(|h| h.class != OXM_CLASS_OPENFLOW_BASIC)
            .find(|h| h.target == low)
            .unwrap_or_else(|| match_header(low));
        return (fh.header(false), sf.wire_ofs());
    }
    let fh = operand_header(sf);
    (fh.header(false), sf.ofs.saturating_sub(fh.shift))
}

/// A big-endian value of up to 16 bytes (header lengths are checked
/// against the table before this is called).
pub(super) fn be_value(bytes: &[u8]) -> u128 {
    bytes.iter().fold(0u128, |acc, b| acc << 8 | u128::from(*b))
}

pub(super) fn ones128(bits: u32) -> u128 {
    if bits >= 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    }
}

fn put_value(out: &mut Vec<u8>, v: u128, len: u8) {
    let bytes = v.to_be_bytes();
    out.extend_from_slice(&bytes[16 - usize::from(len).min(16)..]);
}

/// One decoded TLV, in the coordinates of its target field.
pub struct Tlv {
    pub header: &'static FieldHeader,
    /// Right-aligned value of the header's bits: at most 64 bits, except
    /// for NXM_NX_CT_LABEL's 128.
    pub value: u128,
    /// `None` for an exact TLV.
    pub mask: Option<u128>,
}

/// Decodes one TLV from `r`.
pub(crate) fn parse_tlv(r: &mut Reader<'_>) -> Result<Tlv, WireError> {
    let hdr = r.u32()?;
    let class = (hdr >> 16) as u16;
    let field = ((hdr >> 9) & 0x7f) as u8;
    let has_mask = hdr & 0x100 != 0;
    let len = (hdr & 0xff) as usize;
    let fh = lookup(class, field).ok_or_else(|| {
        WireError::BadMatch(
            err::BMC_BAD_FIELD,
            format!("unknown OXM class {class:#06x} field {field}"),
        )
    })?;
    let want = usize::from(fh.len) * if has_mask { 2 } else { 1 };
    if len != want {
        return Err(WireError::BadMatch(
            err::BMC_BAD_LEN,
            format!("{} has length {len}, expected {want}", fh.name),
        ));
    }
    let value = be_value(r.bytes(usize::from(fh.len))?);
    let mask = if has_mask {
        if !fh.maskable {
            return Err(WireError::BadMatch(
                err::BMC_BAD_MASK,
                format!("{} cannot be masked", fh.name),
            ));
        }
        Some(be_value(r.bytes(usize::from(fh.len))?))
    } else {
        None
    };
    let wire_ones = ones128(fh.bits) << fh.wire_shift;
    if value & !wire_ones != 0 {
        return Err(WireError::BadMatch(
            err::BMC_BAD_VALUE,
            format!("{} value {value:#x} out of range", fh.name),
        ));
    }
    if let Some(m) = mask {
        if m & !wire_ones != 0 {
            return Err(WireError::BadMatch(
                err::BMC_BAD_MASK,
                format!("{} mask {m:#x} out of range", fh.name),
            ));
        }
        if value & !m != 0 {
            return Err(WireError::BadMatch(
                err::BMC_BAD_WILDCARDS,
                format!("{} value {value:#x} has bits outside mask {m:#x}", fh.name),
            ));
        }
    }
    Ok(Tlv {
        header: fh,
        value: value >> fh.wire_shift,
        mask: mask.map(|m| m >> fh.wire_shift),
    })
}

/// Decodes a sequence of OXM TLVs (the body of an `ofp_match`, without its
/// type/length/padding) into a match, checking duplicates and
/// prerequisites.
pub fn parse_oxms(bytes: &[u8]) -> Result<Match, WireError> {
    let mut r = Reader::new(bytes, Ctx::Match, "OXM match");
    let mut m = Match::catch_all();
    let mut used: Vec<&'static FieldHeader> = Vec::new();
    while !r.is_empty() {
        if r.peek_u16() == Some(OXM_CLASS_PACKET_REGS) {
            parse_packet_reg(&mut r, &mut m)?;
            continue;
        }
        let tlv = parse_tlv(&mut r)?;
        let fh = tlv.header;
        if !fh.in_match {
            return Err(WireError::BadMatch(
                err::BMC_BAD_FIELD,
                format!("{} is not supported in a match", fh.name),
            ));
        }
        if fh.is_wide() {
            if m.get128(fh.target).1 != 0 {
                return Err(WireError::BadMatch(
                    err::BMC_DUP_FIELD,
                    format!("{} appears twice", fh.name),
                ));
            }
            m.set128_masked(fh.target, tlv.value, tlv.mask.unwrap_or(u128::MAX));
            used.push(fh);
            continue;
        }
        // Every other header is at most 64 bits wide (checked by
        // `parse_tlv` against the header's width).
        let (value, mask) = (tlv.value as u64, tlv.mask.map(|m| m as u64));
        let (old_v, old_m) = m.get(fh.target);
        let range = fh.ones() << fh.shift;
        if old_m & range != 0 {
            return Err(WireError::BadMatch(
                err::BMC_DUP_FIELD,
                format!("{} appears twice", fh.name),
            ));
        }
        let mask = mask.unwrap_or(fh.ones());
        m.set_masked(
            fh.target,
            old_v | value << fh.shift,
            old_m | mask << fh.shift,
        );
        used.push(fh);
    }
    check_prereqs(&m, &used)?;
    Ok(m)
}

/// Decodes an OXM field array (a select group's hash fields, OVS's
/// `fields(...)`): TLVs without a mask bit whose value is the mask of the
/// field to use. Returns the masks, as a key; no prerequisites apply.
pub fn parse_field_array(bytes: &[u8]) -> Result<flowtable::FlowKey, WireError> {
    let mut r = Reader::new(bytes, Ctx::Match, "field array");
    let mut m = Match::catch_all();
    while !r.is_empty() {
        let tlv = parse_tlv(&mut r)?;
        let fh = tlv.header;
        if !fh.in_match || tlv.mask.is_some() {
            return Err(WireError::BadMatch(
                err::BMC_BAD_FIELD,
                format!("{} in a field array", fh.name),
            ));
        }
        let present = if fh.is_wide() {
            m.get128(fh.target).1 != 0
        } else {
            m.get(fh.target).1 & (fh.ones() << fh.shift) != 0
        };
        if present {
            return Err(WireError::BadMatch(
                err::BMC_DUP_FIELD,
                format!("{} appears twice", fh.name),
            ));
        }
        if fh.is_wide() {
            m.set128_masked(fh.target, 0, tlv.value);
        } else {
            let old = m.get(fh.target).1;
            m.set_masked(fh.target, 0, old | (tlv.value as u64) << fh.shift);
        }
    }
    Ok(*m.mask())
}

/// One OFPXMC_PACKET_REGS field of a match: the two 32-bit registers it
/// holds, each matched where its half of the mask has bits.
fn parse_packet_reg(r: &mut Reader<'_>, m: &mut Match) -> Result<(), WireError> {
    let hdr = r.u32()?;
    let field = (hdr >> 9) & 0x7f;
    let masked = hdr & 0x100 != 0;
    let len = hdr & 0xff;
    let bad = |code, detail: String| WireError::BadMatch(code, detail);
    let n = u8::try_from(field).ok().filter(|n| *n < 4).ok_or_else(|| {
        bad(
            err::BMC_BAD_FIELD,
            format!("packet register {field} (xbr has 0-3)"),
        )
    })?;
    if len != if masked { 16 } else { 8 } {
        return Err(bad(
            err::BMC_BAD_LEN,
            format!("packet register {n} has length {len}"),
        ));
    }
    let value = r.u64()?;
    let mask = if masked { r.u64()? } else { u64::MAX };
    if value & !mask != 0 {
        return Err(bad(
            err::BMC_BAD_WILDCARDS,
            format!("packet register {n} value {value:#x} outside its mask {mask:#x}"),
        ));
    }
    for (reg, shift) in [(2 * n, 32), (2 * n + 1, 0)] {
        let (v, mk) = ((value >> shift) as u32, (mask >> shift) as u32);
        if mk == 0 {
            continue;
        }
        if m.get(Field::Reg(reg)).1 != 0 {
            return Err(bad(err::BMC_DUP_FIELD, format!("reg{reg} appears twice")));
        }
        m.set_masked(Field::Reg(reg), u64::from(v), u64::from(mk));
    }
    Ok(())
}

fn check_prereqs(m: &Match, used: &[&'static FieldHeader]) -> Result<(), WireError> {
    let pinned = m.pinned();
    if let Some(fh) = used.iter().find(|fh| !fh.prereq.met(&pinned)) {
        return Err(WireError::BadMatch(
            err::BMC_BAD_PREREQ,
            format!("{} used without its prerequisite", fh.name),
        ));
    }
    m.check_prerequisites()
        .map_err(|e| WireError::BadMatch(err::BMC_BAD_PREREQ, e.to_string()))
}

pub(super) fn emit_tlv(out: &mut Vec<u8>, fh: &FieldHeader, value: u128, mask: u128) {
    let exact = mask == ones128(fh.bits);
    out.put_u32(fh.header(!exact));
    put_value(out, value << fh.wire_shift, fh.len);
    if !exact {
        put_value(out, mask << fh.wire_shift, fh.len);
    }
}

/// Emits the part of `field` that `fh` carries, if any of it is matched.
fn emit_part(out: &mut Vec<u8>, m: &Match, fh: &FieldHeader) {
    let (v, mask) = m.get(fh.target);
    let part_mask = (mask >> fh.shift) & fh.ones();
    if part_mask != 0 {
        let part = (v >> fh.shift) & fh.ones();
        emit_tlv(out, fh, u128::from(part), u128::from(part_mask));
    }
}

/// Encodes a match as OXM TLVs, in OVS's order (the registry's
/// [`flowtable::field::encode_order`]; a 128-bit field's two halves are
/// one TLV, emitted at the low half).
pub fn emit_oxms(m: &Match, out: &mut Vec<u8>) {
    let proto = m.exact(Field::IpProto).map(|v| v as u8);
    let present: Vec<Field> = m.fields().collect();
    let wanted =
        |f: &Field| present.contains(f) || f.high_half().is_some_and(|h| present.contains(&h));
    for &field in flowtable::field::encode_order()
        .iter()
        .filter(|f| wanted(f))
    {
        match field {
            Field::CtLabelLow => {
                let (value, mask) = m.ct_label();
                emit_tlv(out, ct_label_header(), value, mask);
            }
            f if f.high_half().is_some() => {
                let (value, mask) = m.get128(f);
                emit_tlv(out, match_header(f), value, mask);
            }
            Field::VlanTci => {
                let (_, mask) = m.get(Field::VlanTci);
                let pcp = mask & 0xe000;
                // OXM's vlan_vid is maskable, vlan_pcp only exact: a
                // whole or absent PCP goes as OXM (as OVS writes it, e.g.
                // `vlan_vid=0x1000/0x1000,vlan_pcp=3`); a partial PCP mask
                // only fits NXM's vlan_tci.
                if pcp == 0 || pcp == 0xe000 {
                    emit_part(out, m, named("OXM_OF_VLAN_VID"));
                    emit_part(out, m, named("OXM_OF_VLAN_PCP"));
                } else {
                    emit_part(out, m, named("NXM_OF_VLAN_TCI"));
                }
            }
            Field::TpSrc | Field::TpDst => emit_part(out, m, l4_port_header(field, proto)),
            _ => emit_part(out, m, match_header(field)),
        }
    }
}

/// `OFPMT_OXM`.
pub const OFPMT_OXM: u16 = 1;

/// Decodes an `ofp_match` (type OXM) at the start of `r`, consuming its
/// padding.
pub(crate) fn parse_match(r: &mut Reader<'_>) -> Result<Match, WireError> {
    let mtype = r.u16()?;
    let len = usize::from(r.u16()?);
    if mtype != OFPMT_OXM {
        return Err(WireError::BadMatch(
            err::BMC_BAD_TYPE,
            format!("match type {mtype} (only OXM is supported)"),
        ));
    }
    if len < 4 {
        return Err(WireError::BadMatch(
            err::BMC_BAD_LEN,
            format!("ofp_match length {len} is below 4"),
        ));
    }
    let body = r.bytes(len - 4).map_err(|_| {
        WireError::BadMatch(
            err::BMC_BAD_LEN,
            format!("ofp_match length {len} overruns the message"),
        )
    })?;
    let pad = (8 - len % 8) % 8;
    r.skip(pad)
        .map_err(|_| WireError::BadMatch(err::BMC_BAD_LEN, "ofp_match padding missing".into()))?;
    parse_oxms(body)
}

/// Encodes an `ofp_match` of type OXM, padded to 8 bytes.
pub fn emit_match(m: &Match, out: &mut Vec<u8>) {
    let start = out.len();
    out.put_u16(OFPMT_OXM);
    out.put_u16(0);
    emit_oxms(m, out);
    let len = super::len16(out, start);
    out.patch_u16(start + 2, len);
    out.pad8_from(start);
}

/// The OXM header of a transport port (`TpSrc`/`TpDst`, one field in the
/// key) for a flow whose match fixes `ip_proto`: the field whose
/// prerequisite is that protocol (UDP's or SCTP's), else TCP's.
pub(super) fn l4_port_header(field: Field, ip_proto: Option<u8>) -> &'static FieldHeader {
    let proto = match ip_proto {
        Some(p @ (IP_PROTO_UDP | IP_PROTO_SCTP)) => p,
        _ => IP_PROTO_TCP,
    };
    HEADERS
        .iter()
        .find(|h| {
            h.class == OXM_CLASS_OPENFLOW_BASIC
                && h.target == field
                && h.prereq == Prereq::Proto(proto)
        })
        .unwrap_or_else(|| match_header(field))
}
