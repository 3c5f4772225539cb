//! ct_label in actions: its bit ranges and masked writes, in the form
//! ovs-ofctl sends them for OpenFlow 1.3 (see `key/` for why the label
//! is two 64-bit halves).

use super::fields::{self, Syntax};
use super::TextError;
use crate::action::{Action, SubField, CT_LABEL_BITS};

/// Why a ct_label bit range is refused: the key keeps the label as two
/// 64-bit halves (see `key/`), and an operand lives in one of them.
pub(crate) const LABEL_RANGE_RULE: &str =
    "ct_label ranges must lie within bits 0..63 or 64..127 (xbr does not split an operand)";

/// The bit range (ofs, nbits) of `s` if it names ct_label
/// (`NXM_NX_CT_LABEL[0..31]`, `ct_label[]`), in the whole label's bits.
pub(crate) fn parse_label_range(token: &str, s: &str) -> Result<Option<(u32, u32)>, TextError> {
    let name = s.trim().split('[').next().unwrap_or("");
    if fields::lookup(name).map(|(_, syntax)| syntax) != Some(Syntax::Label) {
        return Ok(None);
    }
    let range = match s.trim().split_once('[') {
        None => None,
        Some((_, r)) => Some(
            r.strip_suffix(']')
                .ok_or_else(|| TextError::action(token, format!("`{s}`: missing `]`")))?,
        ),
    };
    let bit = |b: &str| {
        b.parse::<u32>()
            .ok()
            .filter(|b| *b < CT_LABEL_BITS)
            .ok_or_else(|| TextError::action(token, format!("bad ct_label bit `{b}`")))
    };
    let (ofs, nbits) = match range {
        None | Some("") => (0, CT_LABEL_BITS),
        Some(r) => match r.split_once("..") {
            Some((a, b)) => {
                let (a, b) = (bit(a)?, bit(b)?);
                if b < a {
                    return Err(TextError::action(
                        token,
                        format!("bit range [{r}] is reversed"),
                    ));
                }
                (a, b - a + 1)
            }
            None => (bit(r)?, 1),
        },
    };
    Ok(Some((ofs, nbits)))
}

/// A masked write of ct_label as ovs-ofctl sends it in OpenFlow 1.3: one
/// NXAST_REG_LOAD per run of mask bits, a run ending after 64 bits.
pub(crate) fn label_loads(token: &str, value: u128, mask: u128) -> Result<Vec<Action>, TextError> {
    if mask == 0 {
        return Err(TextError::action(token, "mask is zero"));
    }
    let mut out = Vec::new();
    let mut ofs = mask.trailing_zeros();
    while ofs < CT_LABEL_BITS {
        let limit = (ofs + 64).min(CT_LABEL_BITS);
        let mut end = ofs;
        while end < limit && mask >> end & 1 == 1 {
            end += 1;
        }
        let nbits = end - ofs;
        let dst = SubField::ct_label(ofs, nbits)
            .ok_or_else(|| TextError::action(token, LABEL_RANGE_RULE))?;
        let bits = u128::from(u64::MAX) >> (64 - nbits);
        out.push(Action::RegLoad {
            dst,
            value: ((value >> ofs) & bits) as u64,
        });
        ofs = if end >= CT_LABEL_BITS {
            CT_LABEL_BITS
        } else {
            end + (mask >> end).trailing_zeros()
        };
    }
    Ok(out)
}
