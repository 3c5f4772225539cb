//! Decoding of the Nicira experimenter actions OVS sends (the
//! counterpart of their encodings in `action.rs`): REG_MOVE, REG_LOAD,
//! NOTE, RESUBMIT, RESUBMIT_TABLE, OUTPUT_REG, CT with nested actions,
//! NAT.

use super::{
    bad, nat_range, parse_list, port_from_16, split_ofs_nbits, Dialect, MAX_DEPTH, NXAST_CT,
    NXAST_NAT, NXAST_NOTE, NXAST_OUTPUT_REG, NXAST_REG_LOAD, NXAST_REG_MOVE, NXAST_RESUBMIT,
    NXAST_RESUBMIT_TABLE,
};
use crate::wire::{err, oxm, Reader, WireError};
use flowtable::action::{CtAction, CtZone, NatAction};
use flowtable::Action;

/// Decodes a Nicira action body after its subtype.
pub(super) fn parse_nx(
    subtype: u16,
    r: &mut Reader<'_>,
    depth: u32,
    dialect: Dialect,
) -> Result<Action, WireError> {
    // Body lengths after vendor and subtype (action length minus 10).
    let exact =
        |r: &Reader<'_>, n: usize| super::body_len(r, n, format_args!("NXAST subtype {subtype}"));
    match subtype {
        NXAST_RESUBMIT | NXAST_RESUBMIT_TABLE => {
            exact(r, 6)?;
            let in_port = port_from_16(r.u16()?);
            let table = r.u8()?;
            let table = (subtype == NXAST_RESUBMIT_TABLE && table != 255).then_some(table);
            Ok(Action::Resubmit { in_port, table })
        }
        NXAST_REG_MOVE => {
            exact(r, 14)?;
            let nbits = u32::from(r.u16()?);
            let src_ofs = u32::from(r.u16()?);
            let dst_ofs = u32::from(r.u16()?);
            let src = oxm::parse_operand(r.u32()?, src_ofs, nbits)?;
            let dst = oxm::parse_operand(r.u32()?, dst_ofs, nbits)?;
            Ok(Action::RegMove { src, dst })
        }
        NXAST_REG_LOAD => {
            exact(r, 14)?;
            let (ofs, nbits) = split_ofs_nbits(r.u16()?);
            let dst = oxm::parse_operand(r.u32()?, ofs, nbits)?;
            let value = r.u64()?;
            if nbits < 64 && value >> nbits != 0 {
                return Err(bad(
                    err::BAC_BAD_ARGUMENT,
                    format!("load value {value:#x} wider than {nbits} bits"),
                ));
            }
            Ok(Action::RegLoad { dst, value })
        }
        NXAST_NOTE => Ok(Action::Note(r.rest().to_vec())),
        NXAST_OUTPUT_REG => {
            exact(r, 14)?;
            let (ofs, nbits) = split_ofs_nbits(r.u16()?);
            let src = oxm::parse_operand(r.u32()?, ofs, nbits)?;
            let max_len = r.u16()?;
            if r.rest().iter().any(|b| *b != 0) {
                return Err(bad(err::BAC_BAD_ARGUMENT, "output_reg padding is not zero"));
            }
            Ok(Action::OutputReg { src, max_len })
        }
        NXAST_CT => parse_ct(r, depth, dialect),
        NXAST_NAT => parse_nat(r),
        _ => Err(bad(
            err::BAC_BAD_EXP_TYPE,
            format!("Nicira action subtype {subtype} is not supported"),
        )),
    }
}

fn parse_ct(r: &mut Reader<'_>, depth: u32, dialect: Dialect) -> Result<Action, WireError> {
    let flags = r.u16()?;
    let zone_src = r.u32()?;
    let zone_word = r.u16()?;
    let recirc = r.u8()?;
    r.skip(3)?;
    let alg = r.u16()?;
    let zone = if zone_src == 0 {
        CtZone::Immediate(zone_word)
    } else {
        let (ofs, nbits) = split_ofs_nbits(zone_word);
        CtZone::Field(oxm::parse_operand(zone_src, ofs, nbits)?)
    };
    if depth >= MAX_DEPTH {
        return Err(bad(err::BAC_BAD_ARGUMENT, "ct() nested too deeply"));
    }
    let actions = parse_list(r.rest(), depth + 1, dialect)?;
    Ok(Action::Ct(CtAction {
        flags,
        zone,
        recirc_table: (recirc != 255).then_some(recirc),
        alg,
        actions,
    }))
}

fn parse_nat(r: &mut Reader<'_>) -> Result<Action, WireError> {
    r.skip(2)?;
    let flags = r.u16()?;
    let present = r.u16()?;
    // As OVS: known flags, not both src and dst, not both hash and random.
    use flowtable::action::nat_flags as f;
    let known = f::SRC | f::DST | f::PERSISTENT | f::PROTO_HASH | f::PROTO_RANDOM;
    if flags & !known != 0
        || flags & (f::SRC | f::DST) == f::SRC | f::DST
        || flags & (f::PROTO_HASH | f::PROTO_RANDOM) == f::PROTO_HASH | f::PROTO_RANDOM
    {
        return Err(bad(
            err::BAC_BAD_ARGUMENT,
            format!("nat() flags {flags:#x}"),
        ));
    }
    let v4 = present & (nat_range::IPV4_MIN | nat_range::IPV4_MAX) != 0;
    let v6 = present & (nat_range::IPV6_MIN | nat_range::IPV6_MAX) != 0;
    // As OVS: one family, and a maximum only with its minimum.
    let orphan_max = |min, max| present & max != 0 && present & min == 0;
    if (v4 && v6)
        || orphan_max(nat_range::IPV4_MIN, nat_range::IPV4_MAX)
        || orphan_max(nat_range::IPV6_MIN, nat_range::IPV6_MAX)
    {
        return Err(bad(
            err::BAC_BAD_ARGUMENT,
            format!("nat() range_present {present:#x}"),
        ));
    }
    let mut nat = NatAction {
        flags,
        ..Default::default()
    };
    if present & nat_range::IPV4_MIN != 0 {
        nat.ipv4_min = Some(r.u32()?);
    }
    if present & nat_range::IPV4_MAX != 0 {
        nat.ipv4_max = Some(r.u32()?);
    }
    let mut v6_addr = || -> Result<u128, WireError> { Ok(u128::from_be_bytes(r.array::<16>()?)) };
    if present & nat_range::IPV6_MIN != 0 {
        nat.ipv6_min = Some(v6_addr()?);
    }
    if present & nat_range::IPV6_MAX != 0 {
        nat.ipv6_max = Some(v6_addr()?);
    }
    if nat.ipv4_min == Some(0) || nat.ipv6_min == Some(0) {
        return Err(bad(err::BAC_BAD_ARGUMENT, "nat() range from address 0"));
    }
    let inverted =
        |min: Option<u128>, max: Option<u128>| matches!((min, max), (Some(a), Some(b)) if b < a);
    if inverted(nat.ipv4_min.map(u128::from), nat.ipv4_max.map(u128::from))
        || inverted(nat.ipv6_min, nat.ipv6_max)
    {
        return Err(bad(
            err::BAC_BAD_ARGUMENT,
            "nat() address range ends before it starts",
        ));
    }
    if present & nat_range::PROTO_MIN != 0 {
        nat.proto_min = Some(r.u16()?);
    }
    if present & nat_range::PROTO_MAX != 0 {
        nat.proto_max = Some(r.u16()?);
    }
    if inverted(nat.proto_min.map(u128::from), nat.proto_max.map(u128::from)) {
        return Err(bad(
            err::BAC_BAD_ARGUMENT,
            "nat() port range ends before it starts",
        ));
    }
    if r.rest().iter().any(|b| *b != 0) {
        return Err(bad(err::BAC_BAD_LEN, "nat() has trailing bytes"));
    }
    Ok(Action::Nat(nat))
}
