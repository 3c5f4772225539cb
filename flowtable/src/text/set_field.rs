//! `set_field:VALUE[/MASK]->FIELD` and the numbers it shares with
//! `push_vlan`.

use super::fields::{self, parse_ipv6, parse_label, parse_value, Syntax};
use super::label::label_loads;
use super::TextError;
use crate::action::{Action, SubField};

/// `set_field:VALUE[/MASK]->FIELD`. A partial mask is sent by ovs-ofctl as
/// one NXAST_REG_LOAD per contiguous run of mask bits.
pub(super) fn parse_set_field(token: &str, a: &str) -> Result<Vec<Action>, TextError> {
    let (v, dst) = a
        .rsplit_once("->")
        .ok_or_else(|| TextError::action(token, "expected set_field:VALUE->FIELD"))?;
    // OXM's VLAN fields are views of the key's vlan_tci with their own
    // actions (PCP and VID each keep the other).
    match dst.trim() {
        "vlan_vid" => {
            return match parse_u16_literal(v.trim()) {
                Some(vid) if vid <= 0x1fff => Ok(vec![Action::SetVlanVid(vid)]),
                _ => Err(TextError::action(
                    token,
                    "vlan_vid is 0..=0x1fff (0x1000: present)",
                )),
            }
        }
        "vlan_pcp" => {
            return match parse_u16_literal(v.trim()) {
                Some(pcp) if pcp <= 7 => Ok(vec![Action::SetVlanPcp(pcp as u8)]),
                _ => Err(TextError::action(token, "vlan_pcp is 0..=7")),
            }
        }
        _ => {}
    }
    let (field, syntax) = fields::lookup(dst.trim())
        .ok_or_else(|| TextError::action(token, format!("unknown field `{dst}`")))?;
    if syntax == Syntax::Label {
        let (value, mask) = parse_label(token, v)?;
        if mask == u128::MAX {
            return Ok(vec![Action::SetCtLabel { value }]);
        }
        return label_loads(token, value, mask);
    }
    if syntax == Syntax::Ipv6 {
        return match parse_ipv6(token, v.trim())? {
            (value, u128::MAX) => Ok(vec![Action::SetField128 { field, value }]),
            _ => Err(TextError::action(
                token,
                format!("{dst}: xbr sets whole IPv6 addresses only (no mask)"),
            )),
        };
    }
    if !field.is_writable() {
        return Err(TextError::action(token, format!("{dst} cannot be set")));
    }
    let (value, mask) = parse_value(token, field, syntax, v, None)?;
    if mask == field.full_mask() {
        return Ok(vec![Action::SetField { field, value }]);
    }
    if mask == 0 {
        return Err(TextError::action(token, "mask is zero"));
    }
    let mut out = Vec::new();
    let mut ofs = 0;
    while ofs < field.bits() {
        if mask >> ofs & 1 == 0 {
            ofs += 1;
            continue;
        }
        let start = ofs;
        while ofs < field.bits() && mask >> ofs & 1 == 1 {
            ofs += 1;
        }
        let nbits = ofs - start;
        let bits = if nbits >= 64 {
            u64::MAX
        } else {
            (1 << nbits) - 1
        };
        out.push(Action::RegLoad {
            dst: SubField {
                field,
                ofs: start,
                nbits,
                named: None,
            },
            value: (value >> start) & bits,
        });
    }
    Ok(out)
}

/// A 16-bit number in decimal or `0x` hex.
pub(super) fn parse_u16_literal(s: &str) -> Option<u16> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u16::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}
