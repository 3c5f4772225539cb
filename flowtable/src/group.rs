//! A group table entry. Like [`crate::rule::Rule`], immutable once
//! published; a GROUP_MOD MODIFY publishes a new `Group` sharing the counters.

use crate::action::Bucket;
use crate::flow_mod::{GroupType, SelectionMethod};
use std::sync::Arc;

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
}
