//! The OpenFlow 1.5 encodings of actions whose 1.3 form is a Nicira
//! extension: a bit-range write (`load:`, NXAST_REG_LOAD in 1.3) is a
//! SET_FIELD with a masked OXM, a bit-range copy (`move:`, NXAST_REG_MOVE)
//! is OFPAT_COPY_FIELD, and a meter is OFPAT_METER, the first action of
//! the apply-actions list (an instruction in 1.3). OVS writes and reads
//! them so in 1.5 and refuses the Nicira forms there.
//!
//! A masked SET_FIELD decodes to a [`Action::RegLoad`] of the mask's bits,
//! which must be one run (a load cannot write scattered bits); a mask of
//! the whole field decodes to a plain [`Action::SetField`], which is also
//! how a load of a whole field is written back.

use super::finish;
use crate::wire::oxm::{self, be_value, lookup, ones128};
use crate::wire::{err, Put, Reader, WireError};
use flowtable::{Action, SubField};

pub const OFPAT_COPY_FIELD: u16 = 28;
pub const OFPAT_METER: u16 = 29;

/// The OXM header's has-mask bit.
const HAS_MASK: u32 = 0x100;

fn bad(code: u16, detail: impl Into<String>) -> WireError {
    WireError::BadAction(code, detail.into())
}

/// Decodes the OXM TLV of a 1.5 SET_FIELD (after the action header),
/// padding included.
pub(crate) fn parse_set_field(r: &mut Reader<'_>) -> Result<Action, WireError> {
    let body = r.rest();
    let hdr = match body.get(..4) {
        Some(h) => u32::from_be_bytes([h[0], h[1], h[2], h[3]]),
        None => return Err(bad(err::BAC_BAD_SET_LEN, "set_field without its OXM")),
    };
    if hdr & HAS_MASK == 0 {
        let mut exact = Reader::new(body, crate::wire::Ctx::Action, "set_field");
        let action = oxm::parse_set_field(&mut exact)?;
        if exact.rest().iter().any(|b| *b != 0) {
            return Err(bad(err::BAC_BAD_SET_LEN, "set_field padding is not zero"));
        }
        return Ok(action);
    }
    let (class, field) = ((hdr >> 16) as u16, ((hdr >> 9) & 0x7f) as u8);
    let fh = lookup(class, field).ok_or_else(|| {
        bad(
            err::BAC_BAD_SET_TYPE,
            format!("set_field of unknown OXM class {class:#06x} field {field}"),
        )
    })?;
    let len = usize::from(fh.len);
    if (hdr & 0xff) as usize != 2 * len || body.len() < 4 + 2 * len {
        return Err(bad(
            err::BAC_BAD_SET_LEN,
            format!("masked set_field of {} has bad length", fh.name),
        ));
    }
    if body[4 + 2 * len..].iter().any(|b| *b != 0) {
        return Err(bad(err::BAC_BAD_SET_LEN, "set_field padding is not zero"));
    }
    let value = be_value(&body[4..4 + len]);
    let mask = be_value(&body[4 + len..4 + 2 * len]);
    let field_ones = ones128(fh.bits) << fh.wire_shift;
    if value & !mask != 0 || mask & !field_ones != 0 {
        return Err(bad(
            err::BAC_BAD_SET_ARGUMENT,
            format!(
                "set_field of {}: value {value:#x} outside mask {mask:#x}",
                fh.name
            ),
        ));
    }
    let (value, mask) = (value >> fh.wire_shift, mask >> fh.wire_shift);
    if mask == ones128(fh.bits) {
        // The whole field: a plain set_field.
        let mut exact = vec![];
        exact.put_u32(hdr & !(HAS_MASK | 0xff) | len as u32);
        exact.extend_from_slice(&body[4..4 + len]);
        return oxm::parse_set_field(&mut Reader::new(
            &exact,
            crate::wire::Ctx::Action,
            "set_field",
        ));
    }
    // A zero mask writes nothing: refused (as one run of no bits) before
    // its 128 trailing zeros are used as a shift.
    let ofs = mask.trailing_zeros();
    let nbits = mask.checked_shr(ofs).map_or(0, u128::trailing_ones);
    if mask == 0 || mask >> ofs != ones128(nbits) {
        return Err(bad(
            err::BAC_BAD_SET_ARGUMENT,
            format!(
                "set_field of {} with mask {mask:#x}: xbr writes one run of bits",
                fh.name
            ),
        ));
    }
    let dst = oxm::parse_operand(hdr & !(HAS_MASK | 0xff) | len as u32, ofs, nbits)?;
    Ok(Action::RegLoad {
        dst,
        value: ((value >> ofs) & ones128(nbits)) as u64,
    })
}

/// Writes the OXM TLV of a 1.5 SET_FIELD that loads `value` into `dst`:
/// masked unless `dst` is all of the header's bits.
pub(crate) fn emit_load(dst: &SubField, value: u64, out: &mut Vec<u8>) {
    let (hdr, ofs) = oxm::emit_operand(dst);
    let len = (hdr & 0xff) as usize;
    let bits =
        lookup((hdr >> 16) as u16, ((hdr >> 9) & 0x7f) as u8).map_or(len as u32 * 8, |h| h.bits);
    let mask = ones128(dst.nbits) << ofs;
    let value = (u128::from(value) & ones128(dst.nbits)) << ofs;
    let put = |out: &mut Vec<u8>, v: u128| out.extend_from_slice(&v.to_be_bytes()[16 - len..]);
    if ofs == 0 && dst.nbits == bits {
        out.put_u32(hdr);
        put(out, value);
    } else {
        out.put_u32(hdr & !0xff | HAS_MASK | (2 * len) as u32);
        put(out, value);
        put(out, mask);
    }
}

/// Decodes an OFPAT_COPY_FIELD body (after type and length).
pub(crate) fn parse_copy_field(r: &mut Reader<'_>) -> Result<Action, WireError> {
    let nbits = u32::from(r.u16()?);
    let src_ofs = u32::from(r.u16()?);
    let dst_ofs = u32::from(r.u16()?);
    r.skip(2)?;
    let src = oxm::parse_operand(r.u32()?, src_ofs, nbits)?;
    let dst = oxm::parse_operand(r.u32()?, dst_ofs, nbits)?;
    if r.rest().iter().any(|b| *b != 0) {
        return Err(bad(err::BAC_BAD_LEN, "copy_field has trailing bytes"));
    }
    Ok(Action::RegMove { src, dst })
}

/// Writes a whole OFPAT_COPY_FIELD action.
pub(crate) fn emit_copy_field(src: &SubField, dst: &SubField, out: &mut Vec<u8>) {
    out.put_u16(OFPAT_COPY_FIELD);
    let at = out.len();
    out.put_u16(0);
    let (sh, sofs) = oxm::emit_operand(src);
    let (dh, dofs) = oxm::emit_operand(dst);
    out.put_u16(src.nbits as u16);
    out.put_u16(sofs as u16);
    out.put_u16(dofs as u16);
    out.put_zeros(2);
    out.put_u32(sh);
    out.put_u32(dh);
    finish(out, at);
}

/// Splits a 1.5 apply-actions list into its leading OFPAT_METER's meter
/// id, if any, and the rest.
pub(crate) fn split_meter(actions: &[u8]) -> Result<(Option<u32>, &[u8]), WireError> {
    match actions {
        [t0, t1, l0, l1, rest @ ..] if u16::from_be_bytes([*t0, *t1]) == OFPAT_METER => {
            if u16::from_be_bytes([*l0, *l1]) != 8 || rest.len() < 4 {
                return Err(bad(err::BAC_BAD_LEN, "meter action of bad length"));
            }
            let id = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]);
            Ok((Some(id), &rest[4..]))
        }
        _ => Ok((None, actions)),
    }
}

/// Writes OFPAT_METER.
pub(crate) fn emit_meter(id: u32, out: &mut Vec<u8>) {
    out.put_u16(OFPAT_METER);
    out.put_u16(8);
    out.put_u32(id);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::action::{emit_actions_in, parse_actions_in, Dialect};
    use crate::wire::instruction::{emit_instructions_in, parse_instructions_in};
    use flowtable::{Field, Instructions};

    fn reg(n: u32, ofs: u32, nbits: u32) -> SubField {
        let field = Field::Reg(n as u8);
        SubField {
            field,
            ofs,
            nbits,
            named: None,
        }
    }

    fn round_trip(actions: &[Action]) -> (Vec<u8>, Vec<Action>) {
        let mut out = Vec::new();
        emit_actions_in(actions, None, Dialect::Of15, &mut out);
        let back = parse_actions_in(&out, Dialect::Of15).unwrap();
        (out, back)
    }

    #[test]
    fn a_partial_load_is_a_masked_set_field_and_back() {
        let load = Action::RegLoad {
            dst: reg(0, 4, 4),
            value: 7,
        };
        let (bytes, back) = round_trip(std::slice::from_ref(&load));
        // OFPAT_SET_FIELD, NXM_NX_REG0_W: value 0x70, mask 0xf0.
        assert_eq!(
            bytes,
            [0, 25, 0, 16, 0, 1, 1, 8, 0, 0, 0, 0x70, 0, 0, 0, 0xf0]
        );
        assert_eq!(back, [load]);
        // A whole-register load is a plain set_field in 1.5.
        let whole = Action::RegLoad {
            dst: reg(1, 0, 32),
            value: 9,
        };
        let (_, back) = round_trip(&[whole]);
        assert_eq!(
            back,
            [Action::SetField {
                field: Field::Reg(1),
                value: 9
            }]
        );
    }

    #[test]
    fn a_move_is_a_copy_field_and_back() {
        let mv = Action::RegMove {
            src: reg(0, 0, 4),
            dst: reg(1, 4, 4),
        };
        let (bytes, back) = round_trip(std::slice::from_ref(&mv));
        assert_eq!(&bytes[..4], &[0, 28, 0, 24]);
        assert_eq!(&bytes[4..10], &[0, 4, 0, 0, 0, 4]);
        assert_eq!(back, [mv]);
        // The Nicira forms do not exist in 1.5.
        let mut nx = Vec::new();
        emit_actions_in(&back, None, Dialect::Of13, &mut nx);
        let e = parse_actions_in(&nx, Dialect::Of15).unwrap_err();
        assert_eq!(e.ofp_error(), (err::BAD_ACTION, err::BAC_BAD_EXP_TYPE));
    }

    #[test]
    fn scattered_masks_and_bad_copies_are_refused() {
        // NXM_NX_REG2_W value 5 mask 5: two runs of bits.
        let scattered = [0, 25, 0, 16, 0, 1, 5, 8, 0, 0, 0, 5, 0, 0, 0, 5];
        let e = parse_actions_in(&scattered, Dialect::Of15).unwrap_err();
        assert_eq!(e.ofp_error(), (err::BAD_ACTION, err::BAC_BAD_SET_ARGUMENT));
        // Mask 0 writes nothing: refused, not a shift by 128 (the fuzzer
        // with overflow checks found it).
        let zero = [0, 25, 0, 16, 0, 1, 5, 8, 0, 0, 0, 0, 0, 0, 0, 0];
        let e = parse_actions_in(&zero, Dialect::Of15).unwrap_err();
        assert_eq!(e.ofp_error(), (err::BAD_ACTION, err::BAC_BAD_SET_ARGUMENT));
        // Value bits outside the mask.
        let outside = [0, 25, 0, 16, 0, 1, 5, 8, 0, 0, 0, 0x13, 0, 0, 0, 0x0f];
        assert!(parse_actions_in(&outside, Dialect::Of15).is_err());
        // copy_field beyond the source register's 32 bits.
        let mut cf = vec![0, 28, 0, 24, 0, 8, 0, 30, 0, 0, 0, 0];
        cf.extend_from_slice(&[0, 1, 0, 4, 0, 1, 2, 4, 0, 0, 0, 0]);
        assert!(parse_actions_in(&cf, Dialect::Of15).is_err());
        // Every truncation of a valid list fails cleanly.
        let (good, _) = round_trip(&[Action::RegMove {
            src: reg(0, 0, 4),
            dst: reg(1, 4, 4),
        }]);
        for n in 0..good.len() {
            let _ = parse_actions_in(&good[..n], Dialect::Of15);
        }
    }

    #[test]
    fn the_meter_is_the_first_apply_action_in_1_5() {
        let ins = Instructions {
            meter: Some(3),
            apply_actions: Some(vec![Action::Output {
                port: 1,
                max_len: 0,
            }]),
            ..Instructions::default()
        };
        let mut out = Vec::new();
        emit_instructions_in(&ins, None, Dialect::Of15, &mut out);
        // APPLY_ACTIONS, then OFPAT_METER 3 first.
        assert_eq!(&out[..2], &[0, 4]);
        assert_eq!(&out[8..16], &[0, 29, 0, 8, 0, 0, 0, 3]);
        assert_eq!(parse_instructions_in(&out, Dialect::Of15).unwrap(), ins);
        // Alone, without other actions.
        let only = Instructions {
            meter: Some(3),
            ..Instructions::default()
        };
        let mut out = Vec::new();
        emit_instructions_in(&only, None, Dialect::Of15, &mut out);
        assert_eq!(parse_instructions_in(&out, Dialect::Of15).unwrap(), only);
        // 1.3's meter instruction is unknown in 1.5; a meter action after
        // another action is refused.
        let mut v13 = Vec::new();
        emit_instructions_in(&only, None, Dialect::Of13, &mut v13);
        assert!(parse_instructions_in(&v13, Dialect::Of15).is_err());
        let late = [
            0, 4, 0, 32, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 29, 0, 8,
            0, 0, 0, 3,
        ];
        assert!(parse_instructions_in(&late, Dialect::Of15).is_err());
    }
}
