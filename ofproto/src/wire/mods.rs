//! FLOW_MOD, GROUP_MOD and PORT_MOD bodies (everything after `ofp_header`).

use super::action::Dialect;
use super::action::{emit_actions, parse_actions};
use super::instruction::{emit_instructions_for, parse_instructions_in};
use super::oxm::{emit_match, parse_match};
use super::{err, Ctx, Put, Reader, WireError};
use flowtable::{Bucket, FlowMod, FlowModCommand, GroupMod, GroupModCommand, GroupType};

fn command_from_wire(c: u8) -> Result<FlowModCommand, WireError> {
    Ok(match c {
        0 => FlowModCommand::Add,
        1 => FlowModCommand::Modify,
        2 => FlowModCommand::ModifyStrict,
        3 => FlowModCommand::Delete,
        4 => FlowModCommand::DeleteStrict,
        _ => {
            return Err(WireError::FlowMod(
                err::FMFC_BAD_COMMAND,
                format!("flow mod command {c}"),
            ))
        }
    })
}

fn command_to_wire(c: FlowModCommand) -> u8 {
    match c {
        FlowModCommand::Add => 0,
        FlowModCommand::Modify => 1,
        FlowModCommand::ModifyStrict => 2,
        FlowModCommand::Delete => 3,
        FlowModCommand::DeleteStrict => 4,
    }
}

/// Decodes an `ofp_flow_mod` body.
pub fn parse_flow_mod(body: &[u8]) -> Result<FlowMod, WireError> {
    parse_flow_mod_in(body, Dialect::Of13)
}

/// [`parse_flow_mod`] with instructions in `dialect` (the rest of the
/// body is the same in 1.3, 1.4 and 1.5).
pub fn parse_flow_mod_in(body: &[u8], dialect: Dialect) -> Result<FlowMod, WireError> {
    let mut r = Reader::new(body, Ctx::Request, "flow_mod");
    let cookie = r.u64()?;
    let cookie_mask = r.u64()?;
    let table_id = r.u8()?;
    let command = command_from_wire(r.u8()?)?;
    let idle_timeout = r.u16()?;
    let hard_timeout = r.u16()?;
    let priority = r.u16()?;
    let buffer_id = r.u32()?;
    let out_port = r.u32()?;
    let out_group = r.u32()?;
    let flags = r.u16()?;
    r.skip(2)?;
    let matching = parse_match(&mut r)?;
    let instructions = parse_instructions_in(r.rest(), dialect)?;
    Ok(FlowMod {
        cookie,
        cookie_mask,
        table_id,
        command,
        idle_timeout,
        hard_timeout,
        priority,
        buffer_id,
        out_port,
        out_group,
        flags,
        matching,
        instructions,
    })
}

pub fn emit_flow_mod(fm: &FlowMod, out: &mut Vec<u8>) {
    out.put_u64(fm.cookie);
    out.put_u64(fm.cookie_mask);
    out.put_u8(fm.table_id);
    out.put_u8(command_to_wire(fm.command));
    out.put_u16(fm.idle_timeout);
    out.put_u16(fm.hard_timeout);
    out.put_u16(fm.priority);
    out.put_u32(fm.buffer_id);
    out.put_u32(fm.out_port);
    out.put_u32(fm.out_group);
    out.put_u16(fm.flags);
    out.put_zeros(2);
    emit_match(&fm.matching, out);
    let ip_proto = fm
        .matching
        .exact(flowtable::Field::IpProto)
        .map(|v| v as u8);
    emit_instructions_for(&fm.instructions, ip_proto, out);
}

pub(crate) fn group_type_from_wire(t: u8) -> Result<GroupType, WireError> {
    Ok(match t {
        0 => GroupType::All,
        1 => GroupType::Select,
        2 => GroupType::Indirect,
        3 => GroupType::FastFailover,
        _ => {
            return Err(WireError::GroupMod(
                err::GMFC_BAD_TYPE,
                format!("group type {t}"),
            ))
        }
    })
}

pub(crate) fn group_type_to_wire(t: GroupType) -> u8 {
    match t {
        GroupType::All => 0,
        GroupType::Select => 1,
        GroupType::Indirect => 2,
        GroupType::FastFailover => 3,
    }
}

/// Decodes a list of `ofp_bucket`s, numbered from 0 in order (as OVS
/// numbers buckets that came without ids).
pub(crate) fn parse_buckets(bytes: &[u8]) -> Result<Vec<Bucket>, WireError> {
    let mut r = Reader::new(bytes, Ctx::GroupMod, "buckets");
    let mut out = Vec::new();
    for bucket_id in 0u32.. {
        if r.is_empty() {
            break;
        }
        let len = usize::from(r.u16()?);
        if len < 16 || len % 8 != 0 || len - 2 > r.remaining() {
            return Err(WireError::GroupMod(
                err::GMFC_BAD_BUCKET,
                format!("bucket length {len}"),
            ));
        }
        let mut b = Reader::new(r.bytes(len - 2)?, Ctx::GroupMod, "bucket");
        let weight = b.u16()?;
        let watch_port = b.u32()?;
        let watch_group = b.u32()?;
        b.skip(4)?;
        let actions = parse_actions(b.rest())?;
        out.push(Bucket {
            bucket_id,
            weight,
            watch_port,
            watch_group,
            actions,
        });
    }
    Ok(out)
}

pub(crate) fn emit_buckets(buckets: &[Bucket], out: &mut Vec<u8>) {
    for b in buckets {
        let start = out.len();
        out.put_u16(0);
        out.put_u16(b.weight);
        out.put_u32(b.watch_port);
        out.put_u32(b.watch_group);
        out.put_zeros(4);
        emit_actions(&b.actions, out);
        let len = super::len16(out, start);
        out.patch_u16(start, len);
    }
}

/// Decodes an `ofp_group_mod` body.
pub fn parse_group_mod(body: &[u8]) -> Result<GroupMod, WireError> {
    let mut r = Reader::new(body, Ctx::Request, "group_mod");
    let command = match r.u16()? {
        0 => GroupModCommand::Add,
        1 => GroupModCommand::Modify,
        2 => GroupModCommand::Delete,
        0x8000 => GroupModCommand::AddOrModify,
        c => {
            return Err(WireError::GroupMod(
                err::GMFC_BAD_COMMAND,
                format!("group mod command {c}"),
            ))
        }
    };
    let raw_type = r.u8()?;
    r.skip(1)?;
    let group_id = r.u32()?;
    // OVS sends type 0 with DELETE; the type of a delete is meaningless.
    let group_type = match command {
        GroupModCommand::Delete => group_type_from_wire(raw_type).unwrap_or(GroupType::All),
        _ => group_type_from_wire(raw_type)?,
    };
    let buckets = parse_buckets(r.rest())?;
    Ok(GroupMod {
        command,
        group_type,
        group_id,
        buckets,
        selection: None,
    })
}

pub fn emit_group_mod(gm: &GroupMod, out: &mut Vec<u8>) {
    out.put_u16(match gm.command {
        GroupModCommand::Add => 0,
        GroupModCommand::Modify => 1,
        GroupModCommand::Delete => 2,
        GroupModCommand::AddOrModify => 0x8000,
        // OpenFlow 1.5's commands, which a 1.3 switch refuses
        // (BAD_COMMAND): 1.3 has no way to name the bucket position.
        GroupModCommand::InsertBucket(_) => 3,
        GroupModCommand::RemoveBucket(_) => 5,
    });
    out.put_u8(group_type_to_wire(gm.group_type));
    out.put_u8(0);
    out.put_u32(gm.group_id);
    emit_buckets(&gm.buckets, out);
}

/// `ofp_port_mod`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortMod {
    pub port_no: u32,
    pub hw_addr: [u8; 6],
    pub config: u32,
    pub mask: u32,
    pub advertise: u32,
}

impl PortMod {
    pub fn parse(body: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(body, Ctx::Request, "port_mod");
        let mut pm = Self::parse_head(&mut r)?;
        pm.advertise = r.u32()?;
        r.skip(4)?;
        if !r.is_empty() {
            return Err(Ctx::Request.bad_len("port_mod has trailing bytes".into()));
        }
        Ok(pm)
    }

    /// The 24 bytes every version's port mod starts with (port, hardware
    /// address, config and mask); `advertise` is left 0.
    pub(crate) fn parse_head(r: &mut Reader<'_>) -> Result<Self, WireError> {
        let port_no = r.u32()?;
        r.skip(4)?;
        let hw_addr = r.array()?;
        r.skip(2)?;
        Ok(PortMod {
            port_no,
            hw_addr,
            config: r.u32()?,
            mask: r.u32()?,
            advertise: 0,
        })
    }

    /// Writes what [`PortMod::parse_head`] reads.
    pub(crate) fn emit_head(&self, out: &mut Vec<u8>) {
        out.put_u32(self.port_no);
        out.put_zeros(4);
        out.extend_from_slice(&self.hw_addr);
        out.put_zeros(2);
        out.put_u32(self.config);
        out.put_u32(self.mask);
    }

    pub fn emit(&self, out: &mut Vec<u8>) {
        self.emit_head(out);
        out.put_u32(self.advertise);
        out.put_zeros(4);
    }
}
