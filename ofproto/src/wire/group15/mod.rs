//! OpenFlow 1.5's group encodings: GROUP_MOD (`ofp_group_mod` with a
//! bucket array length and a command bucket id), buckets with ids and
//! properties instead of fixed fields, and GROUP_DESC entries in that
//! form; bucket actions are in 1.5's dialect (see `action/of15.rs`). Group and
//! bucket statistics and GROUP_FEATURES are 1.3's.
//!
//! A bucket's weight, watch port and watch group travel as properties
//! (each padded to 8 bytes; the length field counts the weight's two
//! bytes of padding, as the specs and OVS write it, but need not);
//! absent ones mean 1 for a select group's weight (0 otherwise), ANY for
//! the watches, as OVS reads them. The one group property is OVS's
//! (Netronome's) selection method for select groups, an experimenter
//! property: `hash` of the given fields (an OXM field array whose values
//! are masks), seeded by its param, or `dp_hash`; decoded and refused as
//! OVS does, and returned in group descriptions as received.

use super::action::{emit_actions_in, parse_actions_in, Dialect};
use super::mods::{group_type_from_wire, group_type_to_wire};
use super::{err, Ctx, Put, Reader, WireError};
use flowtable::action::{group as group_no, port};
use flowtable::flow_mod::{BucketPos, BUCKET_ID_MAX};
use flowtable::{Bucket, GroupMod, GroupModCommand, GroupType, SelectionKind, SelectionMethod};

/// The selection method property: OpenFlow 1.5's experimenter group
/// property type, Netronome's vendor ids (OVS 2.4 wrote the second) and
/// experimenter type.
mod ntr {
    pub const GROUP_PROP_EXPERIMENTER: u16 = 0xffff;
    pub const VENDOR_ID: u32 = 0x0000_154d;
    pub const COMPAT_VENDOR_ID: u32 = 0x0000_1540;
    pub const SELECTION_METHOD: u32 = 1;
    /// Its fixed part, with the type and length; the field array follows.
    pub const PROP_LEN: usize = 40;
    /// The method's name, NUL-padded.
    pub const METHOD_LEN: usize = 16;
}

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
    let mut selection = None;
    while !r.is_empty() {
        let (ty, len, mut value) = r.property("group property")?;
        let (experimenter, exp_type) = match ty {
            ntr::GROUP_PROP_EXPERIMENTER if len < 12 => {
                return Err(WireError::BadProperty(
                    err::BPC_BAD_LEN,
                    format!("experimenter group property of length {len}"),
                ))
            }
            ntr::GROUP_PROP_EXPERIMENTER => (value.u32()?, value.u32()?),
            t => {
                return Err(WireError::BadProperty(
                    err::BPC_BAD_TYPE,
                    format!("group property type {t}"),
                ))
            }
        };
        if !matches!(experimenter, ntr::VENDOR_ID | ntr::COMPAT_VENDOR_ID)
            || exp_type != ntr::SELECTION_METHOD
        {
            return Err(WireError::BadProperty(
                err::BPC_BAD_EXP_TYPE,
                format!("group property of experimenter {experimenter:#x} type {exp_type}"),
            ));
        }
        selection = Some(parse_selection_method(len, value, group_type, command)?);
    }
    Ok(GroupMod {
        command,
        group_type,
        group_id,
        buckets,
        selection,
    })
}

/// The rest of a selection method property of length `len` (after its
/// experimenter id and type), checked as OVS checks it.
fn parse_selection_method(
    len: usize,
    mut value: Reader,
    group_type: GroupType,
    command: GroupModCommand,
) -> Result<SelectionMethod, WireError> {
    let bad_value = |detail: &str| WireError::BadProperty(err::BPC_BAD_VALUE, detail.into());
    if group_type != GroupType::Select {
        return Err(bad_value("a selection method is for select groups only"));
    }
    if !matches!(
        command,
        GroupModCommand::Add | GroupModCommand::Modify | GroupModCommand::AddOrModify
    ) {
        return Err(bad_value(
            "a selection method comes with an add or a modify only",
        ));
    }
    if len < ntr::PROP_LEN {
        return Err(WireError::BadProperty(
            err::BPC_BAD_LEN,
            format!("selection method property of length {len}"),
        ));
    }
    value.skip(4)?;
    let name = value.bytes(ntr::METHOD_LEN)?;
    let name = match name.iter().position(|&b| b == 0) {
        Some(end) => &name[..end],
        None => return Err(bad_value("selection method name not NUL-terminated")),
    };
    let method = match name {
        b"hash" => SelectionKind::Hash,
        b"dp_hash" => SelectionKind::DpHash,
        _ => {
            return Err(bad_value(&format!(
                "selection method {:?} (hash or dp_hash)",
                String::from_utf8_lossy(name)
            )))
        }
    };
    let param = value.u64()?;
    let wire_fields = value.bytes(len - ntr::PROP_LEN)?.to_vec();
    if !wire_fields.is_empty() && method != SelectionKind::Hash {
        return Err(bad_value("only the hash selection method takes fields"));
    }
    let fields = super::oxm::parse_field_array(&wire_fields)?;
    Ok(SelectionMethod {
        method,
        param,
        fields,
        wire_fields,
    })
}

/// Appends a selection method property.
fn emit_selection_method(s: &SelectionMethod, out: &mut Vec<u8>) {
    let start = out.len();
    out.put_u16(ntr::GROUP_PROP_EXPERIMENTER);
    out.put_u16(0);
    out.put_u32(ntr::VENDOR_ID);
    out.put_u32(ntr::SELECTION_METHOD);
    out.put_zeros(4);
    let mut name = [0u8; ntr::METHOD_LEN];
    let method = s.method.name().as_bytes();
    name[..method.len()].copy_from_slice(method);
    out.extend_from_slice(&name);
    out.put_u64(s.param);
    out.extend_from_slice(&s.wire_fields);
    let len = super::len16(out, start);
    out.patch_u16(start + 2, len);
    out.put_zeros(usize::from(len).next_multiple_of(8) - usize::from(len));
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
    if let Some(s) = &gm.selection {
        emit_selection_method(s, out);
    }
}

/// One OpenFlow 1.5 GROUP_DESC reply entry (`ofp_group_desc`), with the
/// group's selection method if it has one.
pub fn group_desc_entry(
    group_id: u32,
    group_type: GroupType,
    buckets: &[Bucket],
    selection: Option<&SelectionMethod>,
) -> Vec<u8> {
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
    if let Some(s) = selection {
        emit_selection_method(s, &mut out);
    }
    let len = super::len16(&out, 0);
    out.patch_u16(0, len);
    out
}

#[cfg(test)]
mod tests;
