//! A packet thread's megaflow cache: translations keyed on the bits of
//! the packet the pipeline examined, so that every packet agreeing on
//! those bits shares one entry (OVS's datapath flows).
//!
//! # Design
//!
//! Stores: entries of the same shape as the exact-match cache's (actions,
//! drop reason, recirculation key, the counters the translation moves),
//! each under a mask, the union of what its translation examined
//! ([`Xlate::wildcards`](crate::translation::Xlate::wildcards): the masks of every subtable a lookup probed,
//! the fields actions read, the fields actions wrote, and for a
//! translation that recirculates every metadata word) and its key masked
//! by it. Entries with the same mask share a subtable, one hash map from
//! masked key to entry, so a lookup is one mask-and-probe per distinct
//! mask, like the classifier's tuple space search, but without
//! priorities: any entry that matches is right.
//!
//! Why that is right: a translation's result depends on the key only
//! through the bits its wildcards mark (each place in `xlate/` that
//! lets a key bit decide something marks it), so any key equal to the
//! entry's under its mask translates to the same actions, drop reason and
//! counters. Two entries may overlap; both then hold the same result. A
//! recirculation key holds the key's metadata (all marked) as the actions
//! left it, and header and conntrack fields the datapath overwrites after
//! conntrack (`FlowKey::set_headers_from`), so it is shared too.
//!
//! Invariants: entries belong to one pipeline generation (the owning
//! [`crate::cache::FlowCache`] empties this cache with its own); the
//! number of entries never exceeds the capacity: a full cache is emptied
//! (after its pending hits are counted) and refills from the traffic, as
//! OVS's flow limit makes revalidators do.
//!
//! Cost: a lookup masks and hashes the key once per subtable (a few in
//! practice: one per shape of traffic); no allocation. An insert
//! allocates (miss path only).
//!
//! Concurrency: none; each packet thread owns one, inside its
//! `FlowCache`.

use crate::attribution::{credit, TableVisit};
use crate::key::{FlowKey, HEADER_WORDS, KEY_WORDS};
use crate::rule::{PipelineCounters, RuleStats};
use crate::translation::{DpAction, DropReason};
use ahash::RandomState;
use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// Most datapath actions a cached translation holds, in an exact-match
/// entry (`cache.rs`) or a megaflow entry alike.
pub const CACHED_ACTIONS: usize = 8;

/// Entries of a cache made with the default capacity.
pub const DEFAULT_MEGAFLOWS: usize = 16384;

/// One cached translation.
pub(crate) struct MegaEntry {
    pub(crate) actions: [DpAction; CACHED_ACTIONS],
    pub(crate) n_actions: u8,
    pub(crate) drop_reason: Option<DropReason>,
    pub(crate) recirc: Option<FlowKey>,
    pub(crate) counters: Vec<Arc<RuleStats>>,
    pub(crate) visits: Vec<TableVisit>,
    pending_packets: u64,
    pending_bytes: u64,
    dirty: bool,
}

impl MegaEntry {
    pub(crate) fn new(
        actions: &[DpAction],
        drop_reason: Option<DropReason>,
        recirc: Option<FlowKey>,
        counters: Vec<Arc<RuleStats>>,
        visits: Vec<TableVisit>,
    ) -> Option<MegaEntry> {
        let mut stored = [DpAction::Flood; CACHED_ACTIONS];
        stored.get_mut(..actions.len())?.copy_from_slice(actions);
        Some(MegaEntry {
            actions: stored,
            n_actions: actions.len() as u8,
            drop_reason,
            recirc,
            counters,
            visits,
            pending_packets: 0,
            pending_bytes: 0,
            dirty: false,
        })
    }

    fn flush(&mut self, tables: &PipelineCounters) {
        let (packets, bytes) = (self.pending_packets, self.pending_bytes);
        if packets == 0 {
            return;
        }
        for c in &self.counters {
            c.packets.fetch_add(packets, Relaxed);
            c.bytes.fetch_add(bytes, Relaxed);
        }
        credit(&[], &self.visits, tables, packets, bytes);
        self.pending_packets = 0;
        self.pending_bytes = 0;
    }
}

struct Subtable {
    mask: FlowKey,
    entries: HashMap<FlowKey, u32, RandomState>,
}

/// The megaflow cache of one packet thread; see the module documentation.
pub(crate) struct Megaflows {
    subtables: Vec<Subtable>,
    entries: Vec<MegaEntry>,
    capacity: usize,
    /// Entries with pending hits.
    dirty: Vec<u32>,
    hasher: RandomState,
}

impl Megaflows {
    /// A cache of at most `capacity` entries (0: never caches).
    pub(crate) fn new(capacity: usize) -> Self {
        Megaflows {
            subtables: Vec::new(),
            entries: Vec::new(),
            capacity,
            dirty: Vec::new(),
            // Random per cache: subtables are hash maps whose keys are
            // packet headers, so fixed seeds would let a sender craft
            // collisions (and the fixed seeds used before were ahash's own
            // constants, which gave every key the same hash).
            hasher: RandomState::new(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The entry `key` falls under, if any.
    pub(crate) fn lookup(&self, key: &FlowKey) -> Option<u32> {
        self.lookup_counted(key).0
    }

    /// [`Megaflows::lookup`], and how many subtables it probed.
    pub(crate) fn lookup_counted(&self, key: &FlowKey) -> (Option<u32>, u64) {
        let mut probed = 0;
        let found = self.subtables.iter().find_map(|st| {
            probed += 1;
            let masked = masked(key, &st.mask);
            st.entries.get(&masked).copied()
        });
        (found, probed)
    }

    pub(crate) fn entry(&self, idx: u32) -> Option<&MegaEntry> {
        self.entries.get(idx as usize)
    }

    /// Counts one packet translated by entry `idx`.
    pub(crate) fn count(&mut self, idx: u32, packet_len: u32) {
        if let Some(e) = self.entries.get_mut(idx as usize) {
            e.pending_packets += 1;
            e.pending_bytes += u64::from(packet_len);
            if !e.dirty {
                e.dirty = true;
                self.dirty.push(idx);
            }
        }
    }

    /// Stores `entry` for every key equal to `key` under `wildcards`. A
    /// full cache is emptied first (its pending hits counted to `tables`).
    pub(crate) fn insert(
        &mut self,
        key: &FlowKey,
        wildcards: &FlowKey,
        entry: MegaEntry,
        tables: &PipelineCounters,
    ) {
        if self.capacity == 0 {
            return;
        }
        if self.entries.len() >= self.capacity {
            self.clear(tables);
        }
        let mut mask = *wildcards;
        if entry.recirc.is_some() {
            // The recirculation key carries the metadata on.
            for (i, w) in mask.words.iter_mut().enumerate() {
                if !HEADER_WORDS.contains(&i) {
                    *w = u64::MAX;
                }
            }
        }
        // Where the walk starts (FlowKey::recirc_table) always matters.
        if let Some(w) = mask.words.get_mut(KEY_WORDS - 1) {
            *w = u64::MAX;
        }
        let masked_key = masked(key, &mask);
        let st = match self.subtables.iter().position(|st| st.mask == mask) {
            Some(i) => i,
            None => {
                self.subtables.push(Subtable {
                    mask,
                    entries: HashMap::with_hasher(self.hasher.clone()),
                });
                self.subtables.len() - 1
            }
        };
        let idx = self.entries.len() as u32;
        if let Some(st) = self.subtables.get_mut(st) {
            if st.entries.contains_key(&masked_key) {
                return;
            }
            st.entries.insert(masked_key, idx);
            self.entries.push(entry);
        }
    }

    /// Adds every entry's pending hits to the shared counters.
    pub(crate) fn flush(&mut self, tables: &PipelineCounters) {
        for idx in self.dirty.drain(..) {
            if let Some(e) = self.entries.get_mut(idx as usize) {
                e.flush(tables);
                e.dirty = false;
            }
        }
    }

    /// Flushes, then removes every entry.
    pub(crate) fn clear(&mut self, tables: &PipelineCounters) {
        self.flush(tables);
        self.subtables.clear();
        self.entries.clear();
    }
}

fn masked(key: &FlowKey, mask: &FlowKey) -> FlowKey {
    let mut out = FlowKey::zero();
    for ((o, k), m) in out.words.iter_mut().zip(&key.words).zip(&mask.words) {
        *o = k & m;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::Field;
    use std::collections::HashSet;

    /// The subtables' maps must spread masked keys: with a hash that gave
    /// every key the same value (ahash seeded with its own internal
    /// constants did) a lookup walked every entry of the subtable.
    #[test]
    fn the_hash_spreads_masked_keys() {
        let m = Megaflows::new(16);
        let mut hashes = HashSet::new();
        for i in 0..10_000u32 {
            let mut k = FlowKey::zero();
            k.set(Field::InPort, 1);
            k.set(Field::IpDst, u64::from(0x0a80_0000 + i));
            hashes.insert(m.hasher.hash_one(k));
        }
        assert_eq!(hashes.len(), 10_000);
    }
}
