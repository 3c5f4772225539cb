//! Action lists: OpenFlow 1.3 OUTPUT, GROUP, SET_FIELD, the VLAN, MPLS,
//! PBB and TTL actions (COPY_TTL_OUT/IN and PBB too, which OVS lacks), and
//! the Nicira experimenter actions OVS sends (REG_MOVE, REG_LOAD, NOTE,
//! RESUBMIT, RESUBMIT_TABLE, OUTPUT_REG, CT with nested actions, NAT;
//! decoded in `nx.rs`), in OpenFlow 1.3's encodings or 1.5's
//! ([`Dialect`], `of15.rs`).
//!
//! Each wire action decodes to exactly one [`Action`] variant and each
//! variant has one encoding, so a flow dumps in the encoding it was added
//! with. The exceptions are non-canonical inputs OVS never sends for these
//! actions: NXAST_RESUBMIT comes back as NXAST_RESUBMIT_TABLE with table
//! 255 (the same meaning), and operands named by a non-preferred header
//! come back with the preferred one.

use super::{err, oxm, Ctx, Put, Reader, WireError, NX_VENDOR_ID};
use flowtable::action::CtZone;
use flowtable::{Action, SubField};

pub(super) mod nx;
pub(super) mod of15;

pub const OFPAT_OUTPUT: u16 = 0;
pub const OFPAT_GROUP: u16 = 22;
pub const OFPAT_SET_FIELD: u16 = 25;
pub const OFPAT_PUSH_PBB: u16 = 26;
pub const OFPAT_POP_PBB: u16 = 27;
pub const OFPAT_PUSH_VLAN: u16 = 17;
pub const OFPAT_POP_VLAN: u16 = 18;
pub const OFPAT_COPY_TTL_OUT: u16 = 11;
pub const OFPAT_COPY_TTL_IN: u16 = 12;
pub const OFPAT_SET_MPLS_TTL: u16 = 15;
pub const OFPAT_DEC_MPLS_TTL: u16 = 16;
pub const OFPAT_PUSH_MPLS: u16 = 19;
pub const OFPAT_POP_MPLS: u16 = 20;
pub const OFPAT_SET_NW_TTL: u16 = 23;
pub const OFPAT_DEC_NW_TTL: u16 = 24;
pub const OFPAT_EXPERIMENTER: u16 = 0xffff;

pub const NXAST_RESUBMIT: u16 = 1;
pub const NXAST_REG_MOVE: u16 = 6;
pub const NXAST_REG_LOAD: u16 = 7;
pub const NXAST_NOTE: u16 = 8;
pub const NXAST_RESUBMIT_TABLE: u16 = 14;
pub const NXAST_OUTPUT_REG: u16 = 15;
pub const NXAST_CT: u16 = 35;
pub const NXAST_NAT: u16 = 36;

/// NX_NAT_RANGE_* bits of `range_present`.
pub(super) mod nat_range {
    pub const IPV4_MIN: u16 = 1 << 0;
    pub const IPV4_MAX: u16 = 1 << 1;
    pub const IPV6_MIN: u16 = 1 << 2;
    pub const IPV6_MAX: u16 = 1 << 3;
    pub const PROTO_MIN: u16 = 1 << 4;
    pub const PROTO_MAX: u16 = 1 << 5;
}

/// Nesting limit for `ct()` actions: OVS allows only NAT and field writes
/// inside `ct()`, so anything deeper is malformed.
pub(super) const MAX_DEPTH: u32 = 2;

pub(super) fn bad(code: u16, detail: impl Into<String>) -> WireError {
    WireError::BadAction(code, detail.into())
}

/// OpenFlow 1.0-style 16-bit port numbers (used by NXAST_RESUBMIT) map
/// their reserved range 0xff00.. onto OpenFlow 1.1+'s 0xffffff00...
pub(super) fn port_from_16(p: u16) -> u32 {
    if p >= 0xff00 {
        0xffff_0000 | u32::from(p)
    } else {
        u32::from(p)
    }
}

fn port_to_16(p: u32) -> Option<u16> {
    if p >= 0xffff_ff00 {
        Some((p & 0xffff) as u16)
    } else {
        u16::try_from(p).ok().filter(|p| *p < 0xff00)
    }
}

/// `ofs_nbits`: offset in the upper 10 bits, `nbits - 1` in the lower 6.
pub(super) fn split_ofs_nbits(v: u16) -> (u32, u32) {
    (u32::from(v >> 6), u32::from(v & 0x3f) + 1)
}

fn join_ofs_nbits(ofs: u32, nbits: u32) -> u16 {
    ((ofs << 6) | (nbits.saturating_sub(1) & 0x3f)) as u16
}

/// Which OpenFlow version's encodings an action list is read and written
/// in: 1.3 (and 1.4), where bit-range writes and copies are Nicira's
/// REG_LOAD and REG_MOVE, or 1.5, where a masked SET_FIELD and
/// OFPAT_COPY_FIELD replaced them (see `of15.rs`). Everything else is
/// the same in both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Dialect {
    #[default]
    Of13,
    Of15,
}

impl Dialect {
    /// The dialect of OpenFlow `version` (1.4 writes actions as 1.3).
    pub fn of(version: u8) -> Dialect {
        if version == crate::wire::OFP15_VERSION {
            Dialect::Of15
        } else {
            Dialect::Of13
        }
    }
}

/// Decodes a whole action list.
pub fn parse_actions(bytes: &[u8]) -> Result<Vec<Action>, WireError> {
    parse_list(bytes, 0, Dialect::Of13)
}

/// [`parse_actions`] in `dialect`.
pub fn parse_actions_in(bytes: &[u8], dialect: Dialect) -> Result<Vec<Action>, WireError> {
    parse_list(bytes, 0, dialect)
}

pub(super) fn parse_list(
    bytes: &[u8],
    depth: u32,
    dialect: Dialect,
) -> Result<Vec<Action>, WireError> {
    let mut r = Reader::new(bytes, Ctx::Action, "action list");
    let mut out = Vec::new();
    while !r.is_empty() {
        let head = r.bytes(4.min(r.remaining()))?;
        let (ty, len) = match head {
            [a, b, c, d] => (
                u16::from_be_bytes([*a, *b]),
                usize::from(u16::from_be_bytes([*c, *d])),
            ),
            _ => return Err(bad(err::BAC_BAD_LEN, "truncated action header")),
        };
        if len < 8 || len % 8 != 0 || len - 4 > r.remaining() {
            return Err(bad(
                err::BAC_BAD_LEN,
                format!("action type {ty} has bad length {len}"),
            ));
        }
        let body = r.bytes(len - 4)?;
        out.push(parse_one(ty, body, depth, dialect)?);
    }
    Ok(out)
}

/// OFPBAC_BAD_LEN unless `r` has exactly `n` bytes left (an action's fixed
/// body); `what` names the action.
pub(super) fn body_len(
    r: &Reader<'_>,
    n: usize,
    what: std::fmt::Arguments<'_>,
) -> Result<(), WireError> {
    if r.remaining() == n {
        return Ok(());
    }
    Err(bad(
        err::BAC_BAD_LEN,
        format!("{what}: body of {} bytes, expected {n}", r.remaining()),
    ))
}

/// Decodes one action given its type and the bytes after type and length.
fn parse_one(ty: u16, body: &[u8], depth: u32, dialect: Dialect) -> Result<Action, WireError> {
    let mut r = Reader::new(body, Ctx::Action, "action");
    let want_len = |r: &Reader<'_>, n: usize| body_len(r, n, format_args!("action type {ty}"));
    match ty {
        OFPAT_OUTPUT => {
            want_len(&r, 12)?;
            let port = r.u32()?;
            let max_len = r.u16()?;
            Ok(Action::Output { port, max_len })
        }
        OFPAT_GROUP => {
            want_len(&r, 4)?;
            Ok(Action::Group(r.u32()?))
        }
        OFPAT_PUSH_VLAN => {
            want_len(&r, 4)?;
            Ok(Action::PushVlan(r.u16()?))
        }
        OFPAT_POP_VLAN => {
            want_len(&r, 4)?;
            Ok(Action::PopVlan)
        }
        OFPAT_PUSH_MPLS | OFPAT_POP_MPLS => {
            want_len(&r, 4)?;
            let ethertype = r.u16()?;
            if ty == OFPAT_POP_MPLS {
                return Ok(Action::PopMpls(ethertype));
            }
            // As OVS: only the MPLS ethertypes can be pushed.
            if !flowtable::matching::is_mpls(ethertype) {
                return Err(bad(
                    err::BAC_BAD_ARGUMENT,
                    format!("push_mpls of ethertype {ethertype:#06x}"),
                ));
            }
            Ok(Action::PushMpls(ethertype))
        }
        OFPAT_PUSH_PBB => {
            want_len(&r, 4)?;
            let ethertype = r.u16()?;
            if ethertype != flowtable::matching::ETH_TYPE_PBB {
                return Err(bad(
                    err::BAC_BAD_ARGUMENT,
                    format!("push_pbb of ethertype {ethertype:#06x}"),
                ));
            }
            Ok(Action::PushPbb(ethertype))
        }
        OFPAT_POP_PBB => {
            want_len(&r, 4)?;
            Ok(Action::PopPbb)
        }
        OFPAT_SET_MPLS_TTL => {
            want_len(&r, 4)?;
            Ok(Action::SetMplsTtl(r.u8()?))
        }
        OFPAT_DEC_MPLS_TTL => {
            want_len(&r, 4)?;
            Ok(Action::DecMplsTtl)
        }
        OFPAT_COPY_TTL_OUT => {
            want_len(&r, 4)?;
            Ok(Action::CopyTtlOut)
        }
        OFPAT_COPY_TTL_IN => {
            want_len(&r, 4)?;
            Ok(Action::CopyTtlIn)
        }
        OFPAT_SET_NW_TTL => {
            want_len(&r, 4)?;
            Ok(Action::SetNwTtl(r.u8()?))
        }
        OFPAT_DEC_NW_TTL => {
            want_len(&r, 4)?;
            Ok(Action::DecNwTtl)
        }
        OFPAT_SET_FIELD => {
            let action = match dialect {
                Dialect::Of13 => oxm::parse_set_field(&mut r)?,
                Dialect::Of15 => of15::parse_set_field(&mut r)?,
            };
            if r.rest().iter().any(|b| *b != 0) {
                return Err(bad(err::BAC_BAD_SET_LEN, "set_field padding is not zero"));
            }
            Ok(action)
        }
        OFPAT_EXPERIMENTER => {
            let vendor = r.u32()?;
            if vendor != NX_VENDOR_ID {
                return Err(bad(
                    err::BAC_BAD_EXPERIMENTER,
                    format!("experimenter {vendor:#010x}"),
                ));
            }
            let subtype = r.u16()?;
            if dialect == Dialect::Of15 && matches!(subtype, NXAST_REG_LOAD | NXAST_REG_MOVE) {
                // As OVS: 1.5 has set_field and copy_field for these.
                return Err(bad(
                    err::BAC_BAD_EXP_TYPE,
                    format!("Nicira action subtype {subtype} does not exist in OpenFlow 1.5"),
                ));
            }
            nx::parse_nx(subtype, &mut r, depth, dialect)
        }
        of15::OFPAT_COPY_FIELD if dialect == Dialect::Of15 => of15::parse_copy_field(&mut r),
        _ => Err(bad(
            err::BAC_BAD_TYPE,
            format!("action type {ty} is not supported"),
        )),
    }
}

/// Encodes an action list.
pub fn emit_actions(actions: &[Action], out: &mut Vec<u8>) {
    emit_actions_for(actions, None, out);
}

/// [`emit_actions`] for a flow whose match fixes `ip_proto` (see
/// [`oxm::emit_set_field_for`]).
pub(crate) fn emit_actions_for(actions: &[Action], ip_proto: Option<u8>, out: &mut Vec<u8>) {
    emit_actions_in(actions, ip_proto, Dialect::Of13, out);
}

/// [`emit_actions_for`] in `dialect`.
pub(crate) fn emit_actions_in(
    actions: &[Action],
    ip_proto: Option<u8>,
    dialect: Dialect,
    out: &mut Vec<u8>,
) {
    for a in actions {
        emit_one(a, ip_proto, dialect, out);
    }
}

/// Starts a Nicira action; returns the offset of its length field.
fn nx_start(out: &mut Vec<u8>, subtype: u16) -> usize {
    out.put_u16(OFPAT_EXPERIMENTER);
    let at = out.len();
    out.put_u16(0);
    out.put_u32(NX_VENDOR_ID);
    out.put_u16(subtype);
    at
}

/// Pads the action started at `len_at - 2` to 8 bytes and fills in its length.
pub(super) fn finish(out: &mut Vec<u8>, len_at: usize) {
    let start = len_at - 2;
    out.pad8_from(start);
    let len = super::len16(out, start);
    out.patch_u16(len_at, len);
}

fn emit_one(a: &Action, ip_proto: Option<u8>, dialect: Dialect, out: &mut Vec<u8>) {
    match a {
        Action::RegLoad { dst, value } if dialect == Dialect::Of15 => {
            out.put_u16(OFPAT_SET_FIELD);
            let at = out.len();
            out.put_u16(0);
            of15::emit_load(dst, *value, out);
            finish(out, at);
        }
        Action::RegMove { src, dst } if dialect == Dialect::Of15 => {
            of15::emit_copy_field(src, dst, out);
        }
        Action::Output { port, max_len } => {
            out.put_u16(OFPAT_OUTPUT);
            out.put_u16(16);
            out.put_u32(*port);
            out.put_u16(*max_len);
            out.put_zeros(6);
        }
        Action::Group(g) => {
            out.put_u16(OFPAT_GROUP);
            out.put_u16(8);
            out.put_u32(*g);
        }
        Action::SetNwTtl(ttl) => {
            out.put_u16(OFPAT_SET_NW_TTL);
            out.put_u16(8);
            out.put_u8(*ttl);
            out.put_zeros(3);
        }
        Action::DecNwTtl => {
            out.put_u16(OFPAT_DEC_NW_TTL);
            out.put_u16(8);
            out.put_zeros(4);
        }
        Action::PushVlan(ethertype) => {
            out.put_u16(OFPAT_PUSH_VLAN);
            out.put_u16(8);
            out.put_u16(*ethertype);
            out.put_zeros(2);
        }
        Action::PopVlan => {
            out.put_u16(OFPAT_POP_VLAN);
            out.put_u16(8);
            out.put_zeros(4);
        }
        Action::PushMpls(ethertype) | Action::PopMpls(ethertype) => {
            let ty = if matches!(a, Action::PushMpls(_)) {
                OFPAT_PUSH_MPLS
            } else {
                OFPAT_POP_MPLS
            };
            out.put_u16(ty);
            out.put_u16(8);
            out.put_u16(*ethertype);
            out.put_zeros(2);
        }
        Action::PushPbb(ethertype) => {
            out.put_u16(OFPAT_PUSH_PBB);
            out.put_u16(8);
            out.put_u16(*ethertype);
            out.put_zeros(2);
        }
        Action::PopPbb => {
            out.put_u16(OFPAT_POP_PBB);
            out.put_u16(8);
            out.put_zeros(4);
        }
        Action::SetMplsTtl(ttl) => {
            out.put_u16(OFPAT_SET_MPLS_TTL);
            out.put_u16(8);
            out.put_u8(*ttl);
            out.put_zeros(3);
        }
        Action::DecMplsTtl | Action::CopyTtlOut | Action::CopyTtlIn => {
            out.put_u16(match a {
                Action::CopyTtlOut => OFPAT_COPY_TTL_OUT,
                Action::CopyTtlIn => OFPAT_COPY_TTL_IN,
                _ => OFPAT_DEC_MPLS_TTL,
            });
            out.put_u16(8);
            out.put_zeros(4);
        }
        Action::SetVlanVid(vid) => {
            out.put_u16(OFPAT_SET_FIELD);
            let at = out.len();
            out.put_u16(0);
            oxm::emit_set_vlan(false, *vid, out);
            finish(out, at);
        }
        Action::SetVlanPcp(pcp) => {
            out.put_u16(OFPAT_SET_FIELD);
            let at = out.len();
            out.put_u16(0);
            oxm::emit_set_vlan(true, u16::from(*pcp), out);
            finish(out, at);
        }
        Action::SetField { field, value } => {
            out.put_u16(OFPAT_SET_FIELD);
            let at = out.len();
            out.put_u16(0);
            oxm::emit_set_field_for(*field, *value, ip_proto, out);
            finish(out, at);
        }
        Action::SetField128 { field, value } => {
            out.put_u16(OFPAT_SET_FIELD);
            let at = out.len();
            out.put_u16(0);
            oxm::emit_set_field128(*field, *value, out);
            finish(out, at);
        }
        Action::SetCtLabel { value } => {
            out.put_u16(OFPAT_SET_FIELD);
            let at = out.len();
            out.put_u16(0);
            oxm::emit_set_ct_label(*value, out);
            finish(out, at);
        }
        Action::RegLoad { dst, value } => {
            let at = nx_start(out, NXAST_REG_LOAD);
            let (hdr, ofs) = oxm::emit_operand(dst);
            out.put_u16(join_ofs_nbits(ofs, dst.nbits));
            out.put_u32(hdr);
            out.put_u64(*value);
            finish(out, at);
        }
        Action::RegMove { src, dst } => {
            let at = nx_start(out, NXAST_REG_MOVE);
            let (sh, sofs) = oxm::emit_operand(src);
            let (dh, dofs) = oxm::emit_operand(dst);
            out.put_u16(src.nbits as u16);
            out.put_u16(sofs as u16);
            out.put_u16(dofs as u16);
            out.put_u32(sh);
            out.put_u32(dh);
            finish(out, at);
        }
        Action::OutputReg { src, max_len } => {
            let at = nx_start(out, NXAST_OUTPUT_REG);
            let (hdr, ofs) = oxm::emit_operand(src);
            out.put_u16(join_ofs_nbits(ofs, src.nbits));
            out.put_u32(hdr);
            out.put_u16(*max_len);
            out.put_zeros(6);
            finish(out, at);
        }
        Action::Resubmit { in_port, table } => {
            let at = nx_start(out, NXAST_RESUBMIT_TABLE);
            // Ports without a 16-bit form cannot be resubmitted to in
            // OpenFlow; validation rejects them before they are stored.
            out.put_u16(port_to_16(*in_port).unwrap_or(0xfff8));
            out.put_u8(table.unwrap_or(255));
            out.put_zeros(3);
            finish(out, at);
        }
        Action::Note(bytes) => {
            let at = nx_start(out, NXAST_NOTE);
            out.extend_from_slice(bytes);
            finish(out, at);
        }
        Action::Ct(ct) => {
            let at = nx_start(out, NXAST_CT);
            out.put_u16(ct.flags);
            match ct.zone {
                CtZone::Immediate(z) => {
                    out.put_u32(0);
                    out.put_u16(z);
                }
                CtZone::Field(sf) => {
                    let (hdr, ofs) = oxm::emit_operand(&sf);
                    out.put_u32(hdr);
                    out.put_u16(join_ofs_nbits(ofs, sf.nbits));
                }
            }
            out.put_u8(ct.recirc_table.unwrap_or(255));
            out.put_zeros(3);
            out.put_u16(ct.alg);
            emit_actions_in(&ct.actions, ip_proto, dialect, out);
            finish(out, at);
        }
        Action::Nat(nat) => {
            let at = nx_start(out, NXAST_NAT);
            out.put_zeros(2);
            out.put_u16(nat.flags);
            let mut present = 0;
            for (set, bit) in [
                (nat.ipv4_min.is_some(), nat_range::IPV4_MIN),
                (nat.ipv4_max.is_some(), nat_range::IPV4_MAX),
                (nat.ipv6_min.is_some(), nat_range::IPV6_MIN),
                (nat.ipv6_max.is_some(), nat_range::IPV6_MAX),
                (nat.proto_min.is_some(), nat_range::PROTO_MIN),
                (nat.proto_max.is_some(), nat_range::PROTO_MAX),
            ] {
                if set {
                    present |= bit;
                }
            }
            out.put_u16(present);
            for v in [nat.ipv4_min, nat.ipv4_max].into_iter().flatten() {
                out.put_u32(v);
            }
            for v in [nat.ipv6_min, nat.ipv6_max].into_iter().flatten() {
                out.extend_from_slice(&v.to_be_bytes());
            }
            for v in [nat.proto_min, nat.proto_max].into_iter().flatten() {
                out.put_u16(v);
            }
            finish(out, at);
        }
    }
}

/// Whether a sub-field is representable in a Nicira action (used by tests
/// and callers that build actions programmatically).
pub fn operand_is_encodable(sf: &SubField) -> bool {
    if sf.field.is_ct_label() {
        return sf.is_valid();
    }
    sf.is_valid() && {
        let fh = oxm::operand_header(sf);
        fh.target == sf.field && sf.ofs >= fh.shift && sf.ofs + sf.nbits <= fh.shift + fh.bits
    }
}
