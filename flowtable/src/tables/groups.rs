//! GROUP_MOD semantics of [`FlowTables`] (OpenFlow 1.3, and 1.5's bucket
//! commands, as OVS implements them): groups are validated like flow
//! actions, and deleting a group first deletes the flows that use it.

use super::{Change, FlowTables};
use crate::action::group as group_no;
use crate::action::Bucket;
use crate::error::GroupModError;
use crate::flow_mod::{BucketPos, GroupMod, GroupModCommand, GroupType};
use crate::group::{Group, GroupStats};
use crate::rule::Rule;
use crate::validate::{check_action, Context};
use std::sync::Arc;
use std::time::Instant;

impl FlowTables {
    pub fn group_mod(&mut self, gm: &GroupMod) -> Result<Vec<Change>, GroupModError> {
        let mut changes = Vec::new();
        self.group_mod_into(gm, &mut changes)?;
        Ok(changes)
    }

    /// The checks OVS makes of the message itself, before it looks at
    /// the group table (its `ofputil_check_group_mod`): an indirect group
    /// has exactly one bucket, and only a select group's buckets have
    /// weights, except in a bucket insertion (whose buckets join a group
    /// of the type the group has, whatever the message says; OVS leaves
    /// their weights unchecked, and so does xbr).
    fn check_group_mod(gm: &GroupMod) -> Result<(), GroupModError> {
        if gm.group_type == GroupType::Indirect
            && gm.command != GroupModCommand::Delete
            && gm.buckets.len() != 1
        {
            return Err(GroupModError::InvalidGroup(INDIRECT_ONE_BUCKET));
        }
        if !matches!(gm.command, GroupModCommand::InsertBucket(_))
            && gm.group_type != GroupType::Select
            && gm.buckets.iter().any(|b| b.weight != 0)
        {
            return Err(GroupModError::InvalidGroup(
                "only a select group's buckets have weights",
            ));
        }
        Ok(())
    }

    /// The group a mod results in (after bucket insertions and removals).
    fn check_group(group_type: GroupType, buckets: &[Bucket]) -> Result<(), GroupModError> {
        match group_type {
            GroupType::All | GroupType::Select | GroupType::FastFailover => {}
            GroupType::Indirect => {
                if buckets.len() != 1 {
                    return Err(GroupModError::InvalidGroup(INDIRECT_ONE_BUCKET));
                }
            }
        }
        for b in buckets {
            for a in &b.actions {
                check_action(a, Context::Bucket, &|_| false).map_err(GroupModError::BadAction)?;
            }
        }
        Ok(())
    }

    pub(super) fn group_mod_into(
        &mut self,
        gm: &GroupMod,
        changes: &mut Vec<Change>,
    ) -> Result<(), GroupModError> {
        Self::check_group_mod(gm)?;
        let id = gm.group_id;
        if gm.command == GroupModCommand::Delete {
            self.delete_groups(id, changes)?;
            return Ok(());
        }
        if id > group_no::MAX {
            return Err(GroupModError::InvalidId(id));
        }
        let old = self.groups.get(&id).cloned();
        let command = match (gm.command, &old) {
            (GroupModCommand::AddOrModify, None) => GroupModCommand::Add,
            (GroupModCommand::AddOrModify, Some(_)) => GroupModCommand::Modify,
            (c, _) => c,
        };
        if has_duplicate_ids(&gm.buckets) {
            return Err(GroupModError::BadBucket("two buckets have the same id"));
        }
        let (group_type, buckets, selection) = match (command, &old) {
            (GroupModCommand::Add, Some(_)) => return Err(GroupModError::Exists(id)),
            (GroupModCommand::Add, None) if self.groups.len() >= crate::group::MAX_GROUPS => {
                return Err(GroupModError::OutOfGroups(crate::group::MAX_GROUPS))
            }
            (GroupModCommand::Add, None) => {
                (gm.group_type, gm.buckets.clone(), gm.selection.clone())
            }
            (_, None) => return Err(GroupModError::Unknown(id)),
            // Bucket commands keep the group's type and selection method,
            // whatever the message says (as OVS does, after the ONF's
            // EXT-570).
            (GroupModCommand::InsertBucket(at), Some(old)) => (
                old.group_type,
                insert_buckets(&old.buckets, &gm.buckets, at)?,
                old.selection.clone(),
            ),
            (GroupModCommand::RemoveBucket(at), Some(old)) => {
                if !gm.buckets.is_empty() {
                    return Err(GroupModError::BadBucket(
                        "a bucket removal carries no buckets",
                    ));
                }
                (
                    old.group_type,
                    remove_bucket(&old.buckets, at)?,
                    old.selection.clone(),
                )
            }
            (_, Some(_)) => (gm.group_type, gm.buckets.clone(), gm.selection.clone()),
        };
        // Only a select group has a selection method (the decoders
        // refuse one for another type; this keeps a library caller to it).
        if selection.is_some() && group_type != GroupType::Select {
            return Err(GroupModError::BadType);
        }
        Self::check_group(group_type, &buckets)?;
        let stats = old
            .as_ref()
            .map_or_else(|| Arc::new(GroupStats::default()), |g| g.stats.clone());
        let bucket_stats = Group::bucket_stats_for(&buckets, old.as_deref());
        let created = old.as_ref().map_or_else(Instant::now, |g| g.created);
        let group = Arc::new(Group {
            id,
            group_type,
            buckets,
            selection,
            stats,
            bucket_stats,
            created,
        });
        self.set_group(group, changes);
        Ok(())
    }

    /// Deletes group `id` (or every group for OFPG_ALL) and, first, the
    /// flows that use it.
    fn delete_groups(&mut self, id: u32, changes: &mut Vec<Change>) -> Result<(), GroupModError> {
        let ids: Vec<u32> = if id == group_no::ALL {
            self.groups.keys().copied().collect()
        } else if id > group_no::MAX {
            return Err(GroupModError::InvalidId(id));
        } else {
            // OpenFlow 1.3: deleting a group that does not exist is not an
            // error.
            vec![id]
        };
        for g in ids {
            let users: Vec<Arc<Rule>> = self
                .group_users
                .get(&g)
                .map(|u| u.values().cloned().collect())
                .unwrap_or_default();
            for r in users {
                self.remove_rule(&r, changes);
            }
            self.remove_group(g, changes);
        }
        Ok(())
    }
}

const INDIRECT_ONE_BUCKET: &str = "an indirect group has exactly one bucket";

/// Whether two buckets share an id.
fn has_duplicate_ids(buckets: &[Bucket]) -> bool {
    // Groups have a handful of buckets: quadratic is cheaper than a set.
    buckets
        .iter()
        .enumerate()
        .any(|(i, b)| buckets[..i].iter().any(|o| o.bucket_id == b.bucket_id))
}

/// `old` with `new` inserted at `at` (OFPGC_INSERT_BUCKET).
fn insert_buckets(
    old: &[Bucket],
    new: &[Bucket],
    at: BucketPos,
) -> Result<Vec<Bucket>, GroupModError> {
    if let Some(b) = new
        .iter()
        .find(|b| old.iter().any(|o| o.bucket_id == b.bucket_id))
    {
        return Err(GroupModError::BucketExists(b.bucket_id));
    }
    let split = match at {
        BucketPos::First => 0,
        BucketPos::Last => old.len(),
        BucketPos::Id(id) => match old.iter().position(|b| b.bucket_id == id) {
            Some(i) => i + 1,
            None => return Err(GroupModError::UnknownBucket(id)),
        },
        BucketPos::All => {
            return Err(GroupModError::BadBucket(
                "buckets are inserted first, last or after a bucket, not at all",
            ))
        }
    };
    let mut out = Vec::with_capacity(old.len() + new.len());
    out.extend_from_slice(&old[..split]);
    out.extend_from_slice(new);
    out.extend_from_slice(&old[split..]);
    Ok(out)
}

/// `old` without the bucket at `at` (OFPGC_REMOVE_BUCKET); the first or
/// last of no buckets is nothing to remove.
fn remove_bucket(old: &[Bucket], at: BucketPos) -> Result<Vec<Bucket>, GroupModError> {
    let skip = match at {
        BucketPos::All => return Ok(Vec::new()),
        BucketPos::First => 0,
        BucketPos::Last => old.len().saturating_sub(1),
        BucketPos::Id(id) => old
            .iter()
            .position(|b| b.bucket_id == id)
            .ok_or(GroupModError::UnknownBucket(id))?,
    };
    Ok(old
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != skip)
        .map(|(_, b)| b.clone())
        .collect())
}
