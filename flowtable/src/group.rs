//! A group table entry. Like [`crate::rule::Rule`], immutable once
//! published; a GROUP_MOD MODIFY publishes a new `Group` sharing the counters.

use crate::action::Bucket;
use crate::flow_mod::GroupType;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

#[derive(Debug, Default)]
pub struct GroupStats {
    pub packets: AtomicU64,
    pub bytes: AtomicU64,
}

impl GroupStats {
    /// `(packets, bytes)` as of now.
    pub fn read(&self) -> (u64, u64) {
        (
            self.packets.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }

    pub(crate) fn count(&self, bytes: u32) {
        self.packets.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(u64::from(bytes), Ordering::Relaxed);
    }
}

#[derive(Debug)]
pub struct Group {
    pub id: u32,
    pub group_type: GroupType,
    pub buckets: Vec<Bucket>,
    pub stats: Arc<GroupStats>,
}
