//! A group table entry. Like [`crate::rule::Rule`], immutable once
//! published; a GROUP_MOD MODIFY publishes a new `Group` sharing the
//! counters: the group's, and each bucket's with the bucket of the same id
//! it had before (a new bucket id starts at zero).
//!
//! Counting follows OVS (`group_dpif_credit_stats`): a packet through an
//! ALL or INDIRECT group counts in the group and in every bucket; through
//! a SELECT or FAST_FAILOVER group, in the group and the bucket it ran,
//! and in nothing when no bucket could run (none live, all weights 0).

use crate::action::Bucket;
use crate::flow_mod::{GroupType, SelectionMethod};
use std::sync::Arc;
use std::time::Instant;

/// The most groups a switch holds, of all types together: every group
/// costs memory in the control plane and in each packet thread's replica,
/// so a controller cannot add groups without bound (OVS advertises the
/// whole id space and is bounded by memory alone). A GROUP_MOD ADD past it
/// is refused with OFPGMFC_OUT_OF_GROUPS; GROUP_FEATURES advertises it.
pub const MAX_GROUPS: usize = 65_536;

/// A group's counters: the same packet/byte pair as a flow's.
pub type GroupStats = crate::rule::RuleStats;

#[derive(Debug)]
pub struct Group {
    pub id: u32,
    pub group_type: GroupType,
    pub buckets: Vec<Bucket>,
    /// A select group's selection method, if it was given one.
    pub selection: Option<SelectionMethod>,
    pub stats: Arc<GroupStats>,
    /// One counter block per bucket, in the order of `buckets`.
    pub bucket_stats: Vec<Arc<GroupStats>>,
    /// When the group was added (a modification keeps it): the duration
    /// OFPMP_GROUP reports.
    pub created: Instant,
}

impl Group {
    /// Counter blocks for `buckets`, each shared with the bucket of the
    /// same id in `old` (the group being modified), if it had one.
    pub fn bucket_stats_for(buckets: &[Bucket], old: Option<&Group>) -> Vec<Arc<GroupStats>> {
        buckets
            .iter()
            .map(|b| {
                old.and_then(|o| {
                    o.buckets
                        .iter()
                        .zip(&o.bucket_stats)
                        .find(|(ob, _)| ob.bucket_id == b.bucket_id)
                        .map(|(_, s)| s.clone())
                })
                .unwrap_or_default()
            })
            .collect()
    }
}
