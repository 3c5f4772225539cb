//! OpenFlow 1.5's group encodings: GROUP_MOD (`ofp_group_mod` with a
//! bucket array length and a command bucket id), buckets with ids and
//! properties instead of fixed fields, and GROUP_DESC entries in that
//! form; bucket actions are in 1.5's dialect (see `action15.rs`). Group and
//! bucket statistics and GROUP_FEATURES are 1.3's.
//!
//! A bucket's weight, watch port and watch group travel as properties
//! (each padded to 8 bytes; the length field counts the weight's two
//! bytes of padding, as the specs and OVS write it, but need not);
//! absent ones mean 1 for a select group's weight (0 otherwise), ANY for
//! the watches, as OVS reads them. Group properties (OVS's NTR
//! `selection_method`) are refused: xbr has one selection method.

use super::action::{emit_actions_in, parse_actions_in, Dialect};
use super::mods::{group_type_from_wire, group_type_to_wire};
use super::{err, Ctx, Put, Reader, WireError};
use flowtable::action::{group as group_no, port};
use flowtable::flow_mod::{BucketPos, BUCKET_ID_MAX};
use flowtable::{Bucket, GroupMod, GroupModCommand, GroupType};

/// `ofp_group_bucket_prop_type`.
mod prop {
    pub const WEIGHT: u16 = 0;
    pub const WATCH_PORT: u16 = 1;
    pub const WATCH_GROUP: u16 = 2;
}

/// OFPGC_* of OpenFlow 1.5 (and OVS's ADD_OR_MOD).
mod command {
    pub const ADD: u16 = 0;
    pub const MODIFY: u16 = 1;
    pub const DELETE: u16 = 2;
    pub const INSERT_BUCKET: u16 = 3;
    pub const REMOVE_BUCKET: u16 = 5;
    pub const ADD_OR_MOD: u16 = 0x8000;
}

const GROUP_MOD_LEN: usize = 16;
const BUCKET_LEN: usize = 8;
const DESC_LEN: usize = 16;

fn bad_bucket(detail: String) -> WireError {
    WireError::GroupMod(err::GMFC_BAD_BUCKET, detail)
}

/// Decodes an OpenFlow 1.5 `ofp_group_mod` body.
pub fn parse_group_mod(body: &[u8]) -> Result<GroupMod, WireError> {
    let mut r = Reader::new(body, Ctx::Request, "group_mod");
    let raw_command = r.u16()?;
    let raw_type = r.u8()?;
    r.skip(1)?;
    let group_id = r.u32()?;
    let buckets_len = usize::from(r.u16()?);
    r.skip(2)?;
    let raw_at = r.u32()?;
    let at = BucketPos::from_wire(raw_at);
    let command = match (raw_command, at) {
        (command::INSERT_BUCKET, Some(at)) if at != BucketPos::All => {
            GroupModCommand::InsertBucket(at)
        }
        (command::REMOVE_BUCKET, Some(at)) => GroupModCommand::RemoveBucket(at),
        (command::INSERT_BUCKET | command::REMOVE_BUCKET, _) => {
            return Err(bad_bucket(format!("command bucket id {raw_at:#x}")))
        }
        (c, Some(BucketPos::All)) => match c {
            command::ADD => GroupModCommand::Add,
            command::MODIFY => GroupModCommand::Modify,
            command::DELETE => GroupModCommand::Delete,
            command::ADD_OR_MOD => GroupModCommand::AddOrModify,
            c => {
                return Err(WireError::GroupMod(
                    err::GMFC_BAD_COMMAND,
                    format!("group mod command {c}"),
                ))
            }
        },
        (command::ADD | command::MODIFY | command::DELETE | command::ADD_OR_MOD, _) => {
            return Err(bad_bucket(format!(
                "command bucket id {raw_at:#x} with a command that takes none"
            )))
        }
        (c, _) => {
            return Err(WireError::GroupMod(
                err::GMFC_BAD_COMMAND,
                format!("group mod command {c}"),
            ))
        }
    };
    // The type of a delete is meaningless (OVS sends 0).
    let group_type = match command {
        GroupModCommand::Delete => group_type_from_wire(raw_type).unwrap_or(GroupType::All),
        _ => group_type_from_wire(raw_type)?,
    };
    if buckets_len > r.remaining() {
        return Err(WireError::BadRequest(
            err::BRC_BAD_LEN,
            format!(
                "bucket array of {buckets_len} bytes, {} left",
                r.remaining()
            ),
        ));
    }
    let buckets = parse_buckets(r.bytes(buckets_len)?, group_type)?;
    if !r.is_empty() {
        return Err(WireError::BadProperty(
            err::BPC_BAD_TYPE,
            "group properties (selection_method) are not supported".into(),
        ));
    }
    Ok(GroupMod {
        command,
        group_type,
        group_id,
        buckets,
    })
}

/// Decodes an array of OpenFlow 1.5 `ofp_bucket`s of a group of type
/// `group_type` (which decides an absent weight).
fn parse_buckets(bytes: &[u8], group_type: GroupType) -> Result<Vec<Bucket>, WireError> {
    let mut r = Reader::new(bytes, Ctx::GroupMod, "buckets");
    let mut out = Vec::new();
    while !r.is_empty() {
        if r.remaining() < BUCKET_LEN {
            return Err(bad_bucket(format!(
                "{} bytes after the last bucket",
                r.remaining()
            )));
        }
        let len = usize::from(r.u16()?);
        let actions_len = usize::from(r.u16()?);
        if len < BUCKET_LEN || len - 4 > r.remaining() || actions_len > len - BUCKET_LEN {
            return Err(bad_bucket(format!(
                "bucket length {len} with {actions_len} bytes of actions"
            )));
        }
        let bucket_id = r.u32()?;
        if bucket_id > BUCKET_ID_MAX {
            return Err(bad_bucket(format!("bucket id {bucket_id:#x}")));
        }
        let actions = parse_actions_in(r.bytes(actions_len)?, Dialect::Of15)?;
        let mut bucket = Bucket {
            bucket_id,
            weight: u16::from(group_type == GroupType::Select),
            watch_port: port::ANY,
            watch_group: group_no::ANY,
            actions,
        };
        parse_bucket_properties(r.bytes(len - BUCKET_LEN - actions_len)?, &mut bucket)?;
        out.push(bucket);
    }
    Ok(out)
}

fn parse_bucket_properties(bytes: &[u8], bucket: &mut Bucket) -> Result<(), WireError> {
    let bad_len = |detail: String| WireError::BadProperty(err::BPC_BAD_LEN, detail);
    let mut r = Reader::new(bytes, Ctx::Request, "bucket property");
    while !r.is_empty() {
        let (ty, len, mut value) = r.property("bucket property")?;
        // A 16-bit value may come with its 2 bytes of padding counted in
        // the length (the specs' way) or not; OVS takes either.
        let exact = |n: usize, value: &Reader| {
            if value.remaining() == n || (n == 2 && value.remaining() == 4) {
                Ok(())
            } else {
                Err(bad_len(format!("bucket property {ty} of length {len}")))
            }
        };
        match ty {
            prop::WEIGHT => {
                exact(2, &value)?;
                bucket.weight = value.u16()?;
            }
            prop::WATCH_PORT => {
                exact(4, &value)?;
                bucket.watch_port = value.u32()?;
            }
            prop::WATCH_GROUP => {
                exact(4, &value)?;
                bucket.watch_group = value.u32()?;
            }
            t => {
                return Err(WireError::BadProperty(
                    err::BPC_BAD_TYPE,
                    format!("bucket property type {t}"),
                ))
            }
        }
    }
    Ok(())
}

/// Appends one OpenFlow 1.5 bucket of a group of type `group_type`, with
/// the properties OVS writes: the weight for select groups (or when
/// nonzero), the watches when set.
fn emit_bucket(b: &Bucket, group_type: GroupType, out: &mut Vec<u8>) {
    let start = out.len();
    out.put_u16(0);
    out.put_u16(0);
    out.put_u32(b.bucket_id);
    emit_actions_in(&b.actions, None, Dialect::Of15, out);
    let actions_len = super::len16(out, start + BUCKET_LEN);
    if group_type == GroupType::Select || b.weight != 0 {
        // 16-bit values get 8-byte properties in the specs (OVS too).
        out.put_u16(prop::WEIGHT);
        out.put_u16(8);
        out.put_u16(b.weight);
        out.put_zeros(2);
    }
    if b.watch_port != port::ANY {
        out.put_u16(prop::WATCH_PORT);
        out.put_u16(8);
        out.put_u32(b.watch_port);
    }
    if b.watch_group != group_no::ANY {
        out.put_u16(prop::WATCH_GROUP);
        out.put_u16(8);
        out.put_u32(b.watch_group);
    }
    let len = super::len16(out, start);
    out.patch_u16(start, len);
    out.patch_u16(start + 2, actions_len);
}

/// Appends an OpenFlow 1.5 `ofp_group_mod` body.
pub fn emit_group_mod(gm: &GroupMod, out: &mut Vec<u8>) {
    let (raw_command, at) = match gm.command {
        GroupModCommand::Add => (command::ADD, BucketPos::All),
        GroupModCommand::Modify => (command::MODIFY, BucketPos::All),
        GroupModCommand::Delete => (command::DELETE, BucketPos::All),
        GroupModCommand::AddOrModify => (command::ADD_OR_MOD, BucketPos::All),
        GroupModCommand::InsertBucket(at) => (command::INSERT_BUCKET, at),
        GroupModCommand::RemoveBucket(at) => (command::REMOVE_BUCKET, at),
    };
    let start = out.len();
    out.put_u16(raw_command);
    out.put_u8(group_type_to_wire(gm.group_type));
    out.put_u8(0);
    out.put_u32(gm.group_id);
    out.put_u16(0);
    out.put_zeros(2);
    out.put_u32(at.to_wire());
    for b in &gm.buckets {
        emit_bucket(b, gm.group_type, out);
    }
    let buckets_len = super::len16(out, start + GROUP_MOD_LEN);
    out.patch_u16(start + 8, buckets_len);
}

/// One OpenFlow 1.5 GROUP_DESC reply entry (`ofp_group_desc`).
pub fn group_desc_entry(group_id: u32, group_type: GroupType, buckets: &[Bucket]) -> Vec<u8> {
    let mut out = Vec::new();
    out.put_u16(0);
    out.put_u8(group_type_to_wire(group_type));
    out.put_u8(0);
    out.put_u32(group_id);
    out.put_u16(0);
    out.put_zeros(6);
    for b in buckets {
        emit_bucket(b, group_type, &mut out);
    }
    let buckets_len = super::len16(&out, DESC_LEN);
    out.patch_u16(8, buckets_len);
    let len = super::len16(&out, 0);
    out.patch_u16(0, len);
    out
}

#[cfg(test)]
mod tests;
