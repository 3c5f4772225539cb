//! Field values in text: parsing and printing each [`Syntax`]. Which
//! names denote which field, and each field's syntax, come from the field
//! registry ([`crate::field`]).

use super::{PortNames, TextError};
use crate::action::port;
use crate::key::Field;

pub(crate) use crate::field::Syntax;
use crate::field::{self as registry, FieldDef};

use Syntax::*;

/// The registry entry a match or `set_field` name denotes.
pub(crate) fn lookup_def(name: &str) -> Option<&'static FieldDef> {
    registry::by_name(name)
}

/// The key field a name denotes, with its value syntax.
pub(crate) fn lookup(name: &str) -> Option<(Field, Syntax)> {
    lookup_def(name).and_then(|d| Some((d.key, d.syntax?)))
}

/// The field a match/set_field name denotes (`nw_src`, `NXM_NX_REG0`...).
pub fn field_by_name(name: &str) -> Option<Field> {
    lookup(name).map(|(f, _)| f)
}

/// The value syntax of a field as dumps print it.
pub(crate) fn syntax_of(field: Field) -> Syntax {
    registry::syntax_of(field)
}

/// The NXM name Nicira actions print for a field (`NXM_NX_REG0`).
pub(crate) fn nxm_name(field: Field) -> &'static str {
    registry::nxm_name(field)
}

/// Parses an unsigned integer like C's `strtoull(s, 0)`: decimal, `0x` hex
/// or leading-zero octal; a leading `-` wraps (ovs-ofctl accepts
/// `cookie=1/-1`).
pub(crate) fn parse_uint(token: &str, s: &str) -> Result<u64, TextError> {
    let (neg, digits) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    let parsed = if let Some(hex) = digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        u64::from_str_radix(hex, 16)
    } else if digits.len() > 1 && digits.starts_with('0') {
        u64::from_str_radix(&digits[1..], 8)
    } else {
        digits.parse::<u64>()
    };
    let v = parsed.map_err(|_| TextError::value(token, format!("`{s}` is not a number")))?;
    Ok(if neg { v.wrapping_neg() } else { v })
}

/// Parses an integer that must fit in `bits`.
pub(crate) fn parse_uint_bits(token: &str, s: &str, bits: u32) -> Result<u64, TextError> {
    let v = parse_uint(token, s)?;
    if bits < 64 && v >> bits != 0 {
        return Err(TextError::value(
            token,
            format!("{s} does not fit in {bits} bits"),
        ));
    }
    Ok(v)
}

pub(crate) fn parse_ipv4(token: &str, s: &str) -> Result<u32, TextError> {
    s.parse::<std::net::Ipv4Addr>()
        .map(u32::from)
        .map_err(|_| TextError::value(token, format!("`{s}` is not an IPv4 address")))
}

pub(crate) fn parse_mac(token: &str, s: &str) -> Result<u64, TextError> {
    let mut v = 0u64;
    let mut n = 0;
    for part in s.split(':') {
        if part.is_empty() || part.len() > 2 {
            return Err(TextError::value(
                token,
                format!("`{s}` is not a MAC address"),
            ));
        }
        let b = u8::from_str_radix(part, 16)
            .map_err(|_| TextError::value(token, format!("`{s}` is not a MAC address")))?;
        v = v << 8 | u64::from(b);
        n += 1;
    }
    if n != 6 {
        return Err(TextError::value(
            token,
            format!("`{s}` is not a MAC address"),
        ));
    }
    Ok(v)
}

/// Reserved port names ovs-ofctl accepts, with their numbers.
const RESERVED_PORTS: [(&str, u32); 8] = [
    ("IN_PORT", port::IN_PORT),
    ("TABLE", port::TABLE),
    ("NORMAL", port::NORMAL),
    ("FLOOD", port::FLOOD),
    ("ALL", port::ALL),
    ("CONTROLLER", port::CONTROLLER),
    ("LOCAL", port::LOCAL),
    ("ANY", port::ANY),
];

/// A port number, reserved name (any case) or, with `names`, a port name.
pub(crate) fn parse_port(
    token: &str,
    s: &str,
    names: Option<&PortNames>,
) -> Result<u32, TextError> {
    if let Some((_, p)) = RESERVED_PORTS
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(s))
    {
        return Ok(*p);
    }
    if s.as_bytes().first().is_some_and(u8::is_ascii_digit) {
        let v = parse_uint(token, s)?;
        return u32::try_from(v)
            .map_err(|_| TextError::value(token, format!("port {s} is out of range")));
    }
    if let Some(p) = names.and_then(|m| m.get(s)) {
        return Ok(*p);
    }
    Err(TextError::value(token, format!("unknown port `{s}`")))
}

/// How a port prints: a number or the reserved name.
pub(crate) fn format_port(p: u32) -> String {
    match RESERVED_PORTS.iter().find(|(_, n)| *n == p) {
        Some((name, _)) => (*name).to_string(),
        None => p.to_string(),
    }
}

/// Conntrack state bits, in the order OVS prints them.
pub(crate) const CT_STATE_BITS: [(&str, u64); 8] = [
    ("new", 0x01),
    ("est", 0x02),
    ("rel", 0x04),
    ("rpl", 0x08),
    ("inv", 0x10),
    ("trk", 0x20),
    ("snat", 0x40),
    ("dnat", 0x80),
];

fn parse_ct_state(token: &str, s: &str) -> Result<(u64, u64), TextError> {
    if s.starts_with(|c: char| c.is_ascii_digit()) {
        return parse_int_masked(token, s, 32);
    }
    let (mut value, mut mask) = (0u64, 0u64);
    let mut rest = s;
    while !rest.is_empty() {
        let set = match rest.as_bytes().first() {
            Some(b'+') => true,
            Some(b'-') => false,
            _ => {
                return Err(TextError::value(
                    token,
                    format!("ct_state flags must start with + or -, at `{rest}`"),
                ))
            }
        };
        rest = &rest[1..];
        let end = rest.find(['+', '-']).unwrap_or(rest.len());
        let name = &rest[..end];
        let bit = CT_STATE_BITS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, b)| *b)
            .ok_or_else(|| TextError::value(token, format!("unknown ct_state flag `{name}`")))?;
        if mask & bit != 0 {
            return Err(TextError::value(
                token,
                format!("flag `{name}` given twice"),
            ));
        }
        mask |= bit;
        if set {
            value |= bit;
        }
        rest = &rest[end..];
    }
    Ok((value, mask))
}

/// `value[/mask]` of the 128-bit ct_label: hexadecimal with `0x`, else
/// decimal, as ovs-ofctl reads wide fields.
pub(crate) fn parse_label(token: &str, s: &str) -> Result<(u128, u128), TextError> {
    let one = |v: &str| {
        let parsed = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
            Some(hex) => u128::from_str_radix(hex, 16),
            None => v.parse::<u128>(),
        };
        parsed.map_err(|_| {
            TextError::value(
                token,
                format!("`{v}` is not a number that fits the 128-bit ct_label"),
            )
        })
    };
    match s.split_once('/') {
        Some((v, m)) => Ok((one(v)?, one(m)?)),
        None => Ok((one(s)?, u128::MAX)),
    }
}

/// `address[/prefix]` or `address/mask-address` of an IPv6 field, as
/// (value, mask).
pub(crate) fn parse_ipv6(token: &str, s: &str) -> Result<(u128, u128), TextError> {
    let addr = |a: &str| {
        a.parse::<std::net::Ipv6Addr>()
            .map(u128::from)
            .map_err(|_| TextError::value(token, format!("`{a}` is not an IPv6 address")))
    };
    match s.split_once('/') {
        None => Ok((addr(s)?, u128::MAX)),
        Some((a, m)) if m.contains(':') => Ok((addr(a)?, addr(m)?)),
        Some((a, m)) => {
            let len: u32 = m
                .parse()
                .ok()
                .filter(|l| *l <= 128)
                .ok_or_else(|| TextError::value(token, format!("bad prefix length `{m}`")))?;
            let mask = if len == 0 {
                0
            } else {
                u128::MAX << (128 - len)
            };
            Ok((addr(a)?, mask))
        }
    }
}

/// An IPv6 value and mask as OVS prints them: the address alone when
/// exact, `/prefix` for a CIDR mask, else `/mask-address`.
pub(crate) fn format_ipv6_masked(v: u128, m: u128) -> String {
    let a = std::net::Ipv6Addr::from(v);
    if m == u128::MAX {
        a.to_string()
    } else if m.leading_ones() + m.trailing_zeros() == 128 {
        format!("{a}/{}", m.leading_ones())
    } else {
        format!("{a}/{}", std::net::Ipv6Addr::from(m))
    }
}

/// `value[/mask]` of an integer field.
fn parse_int_masked(token: &str, s: &str, bits: u32) -> Result<(u64, u64), TextError> {
    let full = if bits >= 64 {
        u64::MAX
    } else {
        (1 << bits) - 1
    };
    match s.split_once('/') {
        Some((v, m)) => Ok((
            parse_uint_bits(token, v, bits)?,
            parse_uint_bits(token, m, bits)?,
        )),
        None => Ok((parse_uint_bits(token, s, bits)?, full)),
    }
}

/// Parses `value` of `field` written in `syntax`; returns (value, mask)
/// right-aligned in the field.
pub(crate) fn parse_value(
    token: &str,
    field: Field,
    syntax: Syntax,
    s: &str,
    ports: Option<&PortNames>,
) -> Result<(u64, u64), TextError> {
    let full = field.full_mask();
    match syntax {
        Port => Ok((u64::from(parse_port(token, s, ports)?), full)),
        Hex | Dec => parse_int_masked(token, s, field.bits()),
        Tos => {
            let v = parse_uint_bits(token, s, 8)?;
            if v & 3 != 0 {
                return Err(TextError::value(
                    token,
                    "nw_tos must have its two low (ECN) bits zero",
                ));
            }
            Ok((v >> 2, full))
        }
        Ipv4 => {
            let (addr, mask) = match s.split_once('/') {
                None => (parse_ipv4(token, s)?, u32::MAX),
                Some((a, m)) if m.contains('.') => (parse_ipv4(token, a)?, parse_ipv4(token, m)?),
                Some((a, m)) => {
                    let len: u32 = m.parse().ok().filter(|l| *l <= 32).ok_or_else(|| {
                        TextError::value(token, format!("bad prefix length `{m}`"))
                    })?;
                    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
                    (parse_ipv4(token, a)?, mask)
                }
            };
            Ok((u64::from(addr), u64::from(mask)))
        }
        Mac => match s.split_once('/') {
            Some((v, m)) => Ok((parse_mac(token, v)?, parse_mac(token, m)?)),
            None => Ok((parse_mac(token, s)?, full)),
        },
        CtState => parse_ct_state(token, s),
        // Callers look for `Label` and `Ipv6` first: 128 bits do not fit
        // the result.
        Label | Ipv6 => Err(TextError::value(
            token,
            format!("{} is 128 bits wide and cannot be used here", field.name()),
        )),
        Frag => match s {
            "no" => Ok((0, 1)),
            "yes" => Ok((1, 1)),
            "first" => Ok((1, 3)),
            "later" => Ok((3, 3)),
            "not_later" => Ok((0, 2)),
            _ => Err(TextError::value(
                token,
                "ip_frag must be no, yes, first, later or not_later",
            )),
        },
    }
}

/// Parses `s` as a value of `field` (its whole-field syntax, no name
/// needed), e.g. for `set_field:VALUE->field`.
pub fn parse_field_value(field: Field, s: &str) -> Result<(u64, u64), TextError> {
    parse_value(s, field, syntax_of(field), s, None)
}

pub(crate) fn format_ipv4(v: u64) -> String {
    std::net::Ipv4Addr::from(v as u32).to_string()
}

pub(crate) fn format_mac(v: u64) -> String {
    let b = v.to_be_bytes();
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        b[2], b[3], b[4], b[5], b[6], b[7]
    )
}

/// A value as `set_field:` prints it (whole field, no mask).
pub(crate) fn format_value(field: Field, v: u64) -> String {
    match syntax_of(field) {
        Ipv4 => format_ipv4(v),
        Mac => format_mac(v),
        Port => format_port(v as u32),
        Dec => v.to_string(),
        Tos => (v << 2).to_string(),
        Hex | CtState | Frag | Label | Ipv6 => format!("{v:#x}"),
    }
}
