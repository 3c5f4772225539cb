//! NXM sub-field operands (`NXM_NX_REG0[0..15]`) of Nicira actions.

use super::fields::{self, Syntax};
use super::label::LABEL_RANGE_RULE;
use super::TextError;
use crate::action::{SubField, CT_LABEL_BITS};

/// `FIELD`, `FIELD[]`, `FIELD[N]` or `FIELD[A..B]`.
pub(crate) fn parse_subfield(token: &str, s: &str) -> Result<SubField, TextError> {
    let s = s.trim();
    let (name, range) = match s.find('[') {
        Some(i) => {
            let r = s[i + 1..]
                .strip_suffix(']')
                .ok_or_else(|| TextError::action(token, format!("`{s}`: missing `]`")))?;
            (&s[..i], Some(r))
        }
        None => (s, None),
    };
    let (def, syntax) = fields::lookup_def(name)
        .and_then(|d| Some((d, d.syntax?)))
        .ok_or_else(|| TextError::action(token, format!("unknown field `{name}`")))?;
    let field = def.key;
    let width = if matches!(syntax, Syntax::Label | Syntax::Ipv6) {
        CT_LABEL_BITS
    } else {
        field.bits()
    };
    let (ofs, nbits) = match range {
        None | Some("") => (0, width),
        Some(r) => {
            let bit = |b: &str| {
                b.parse::<u32>()
                    .map_err(|_| TextError::action(token, format!("bad bit index `{b}`")))
            };
            match r.split_once("..") {
                Some((a, b)) => {
                    let (a, b) = (bit(a)?, bit(b)?);
                    if b < a {
                        return Err(TextError::action(
                            token,
                            format!("bit range [{r}] is reversed"),
                        ));
                    }
                    // [0..4294967295] would overflow the width.
                    let nbits = (b - a).checked_add(1).ok_or_else(|| {
                        TextError::action(token, format!("bit range [{r}] is too wide"))
                    })?;
                    (a, nbits)
                }
                None => (bit(r)?, 1),
            }
        }
    };
    if syntax == Syntax::Label {
        return SubField::ct_label(ofs, nbits).ok_or_else(|| {
            TextError::action(
                token,
                format!(
                    "bits [{}] of {name}: {LABEL_RANGE_RULE}",
                    range.unwrap_or("")
                ),
            )
        });
    }
    if syntax == Syntax::Ipv6 {
        return SubField::wide(field, ofs, nbits).ok_or_else(|| {
            TextError::action(
                token,
                format!(
                    "bits [{}] of {name}: ranges must lie within bits 0..63 or 64..127",
                    range.unwrap_or("")
                ),
            )
        });
    }
    let sf = SubField {
        field,
        ofs,
        nbits,
        named: crate::field::registry::operand_named(def),
    };
    if !sf.is_valid() {
        return Err(TextError::action(
            token,
            format!(
                "bits [{}] exceed {name} ({width} bits)",
                range.unwrap_or("")
            ),
        ));
    }
    Ok(sf)
}
