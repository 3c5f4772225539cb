//! A packet thread's exact-match cache of translations, with a megaflow
//! cache behind it (`megaflow.rs`).
//!
//! # Design
//!
//! Lookup order: the exact-match entries, then the megaflow entries (a
//! hit there is copied into an exact-match entry one time in
//! [`PROMOTE_ONE_IN`], otherwise counted in the megaflow entry), then the
//! pipeline walk, whose result fills both.
//!
//! Stores: for recently seen packet keys, the result of
//! [`Pipeline::xlate`] (datapath actions or drop reason) together with
//! references to every counter that translation moved: the flows it
//! matched, the groups it ran, and the tables it looked up (with whether
//! each lookup matched). A hit copies the actions out instead of walking
//! the tables, and adds the packet to per-entry pending counts instead of
//! touching shared atomics.
//!
//! Layout: a power-of-two array of entries, each key hashed once with
//! ahash; a key may live in one of two slots taken from different bits of
//! its hash (like OVS's EMC), so two hot flows rarely evict each other.
//! Lookup compares the stored hash, then the whole key (`KEY_WORDS` words).
//!
//! Invariants:
//! - An entry is only valid for the pipeline generation it was filled in;
//!   [`Pipeline::apply`] bumps the generation, and the next lookup flushes
//!   pending counts and empties the cache before anything else. So a hit
//!   never returns a result that a flow-mod or group-mod has changed, and
//!   counters of rules removed meanwhile get the packets they really saw.
//! - A translation is cached only if everything it produced fits: at most
//!   [`CACHED_ACTIONS`] actions, [`MAX_COUNTERS`] flow/group counters and
//!   [`MAX_TABLE_VISITS`] table lookups. Anything bigger is translated
//!   every time, which is correct, only slower.
//! - The result depends on the key alone: translation reads nothing else
//!   of the packet (the length only feeds counters), and select-group
//!   bucket choice hashes the key. That includes the key a `ct(table=N)`
//!   fork resumes with (`Xlate::recirc`), stored with the entry; a
//!   recirculated packet's key differs from the fresh one (its ct_* fields
//!   and `FlowKey::recirc_table`), so each pass has its own entry.
//!
//! Counters: the miss itself is counted by the walk. Hits accumulate in
//! the entry and reach the shared atomics in [`FlowCache::flush`] (the
//! engine calls it once per batch), on eviction, and on invalidation. A
//! reader of flow statistics therefore lags by at most one batch.
//!
//! Cost: a hit is one hash of the key, up to two key compares and a copy
//! of a few actions; no allocation, no atomic operation. A megaflow hit
//! adds one mask-and-probe per megaflow mask. A miss is the full walk
//! plus cloning the recorded `Arc`s (atomic increments) and an allocation
//! for the megaflow entry, miss path only. Memory: about half a kilobyte
//! per entry of either kind.
//!
//! Concurrency: none. Each packet thread owns its cache, as it owns its
//! [`Pipeline`] replica.

pub use crate::attribution::Attribution;
use crate::attribution::{credit, TableVisit};
use crate::group::Group;
use crate::key::FlowKey;
use crate::megaflow::{MegaEntry, Megaflows, DEFAULT_MEGAFLOWS};
use crate::pipeline::{DpAction, DropReason, Pipeline, Xlate};
use crate::rule::{PipelineCounters, Rule, RuleStats};
use crate::trace::Tracer;
use std::sync::Arc;

/// Most datapath actions an entry holds.
pub const CACHED_ACTIONS: usize = 8;
/// Most flow and group counters one translation may touch and be cached.
pub const MAX_COUNTERS: usize = 16;
/// Most table lookups one translation may make and be cached.
pub const MAX_TABLE_VISITS: usize = 16;
/// Entries of a cache made with [`FlowCache::default`].
pub const DEFAULT_ENTRIES: usize = 8192;

struct Entry {
    /// Never 0 for a used entry (0 marks a free slot).
    hash: u64,
    key: FlowKey,
    actions: [DpAction; CACHED_ACTIONS],
    n_actions: u8,
    drop_reason: Option<DropReason>,
    /// `Xlate::recirc`: the key a `ct(table=N)` fork resumes with.
    recirc: Option<FlowKey>,
    counters: [Option<Arc<RuleStats>>; MAX_COUNTERS],
    visits: [TableVisit; MAX_TABLE_VISITS],
    n_visits: u8,
    /// Hits not yet added to the shared counters.
    pending_packets: u64,
    pending_bytes: u64,
    /// Listed in `FlowCache::dirty`.
    dirty: bool,
}

impl Entry {
    fn empty() -> Self {
        Entry {
            hash: 0,
            key: FlowKey::zero(),
            actions: [DpAction::Flood; CACHED_ACTIONS],
            n_actions: 0,
            drop_reason: None,
            recirc: None,
            counters: [const { None }; MAX_COUNTERS],
            visits: [TableVisit::default(); MAX_TABLE_VISITS],
            n_visits: 0,
            pending_packets: 0,
            pending_bytes: 0,
            dirty: false,
        }
    }

    /// Adds the pending hits to the shared counters.
    fn flush(&mut self, tables: &PipelineCounters) {
        if self.pending_packets == 0 {
            return;
        }
        let (packets, bytes) = (self.pending_packets, self.pending_bytes);
        credit(&self.counters, self.visits(), tables, packets, bytes);
        self.pending_packets = 0;
        self.pending_bytes = 0;
    }

    fn visits(&self) -> &[TableVisit] {
        self.visits.get(..usize::from(self.n_visits)).unwrap_or(&[])
    }
}

impl Entry {
    fn clear(&mut self) {
        self.hash = 0;
        self.n_actions = 0;
        self.n_visits = 0;
        self.counters.iter_mut().for_each(|c| *c = None);
    }
}

/// Hit/miss statistics of one cache (for benchmarks and diagnostics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub hits: u64,
    /// Exact-match misses the megaflow cache answered.
    pub megaflow_hits: u64,
    /// Translated by walking the pipeline.
    pub misses: u64,
    /// Translations too big to cache.
    pub uncacheable: u64,
    /// Times the cache was emptied because the pipeline changed.
    pub invalidations: u64,
}

/// A packet thread's exact-match translation cache; see the module
/// documentation.
pub struct FlowCache {
    entries: Vec<Entry>,
    mask: usize,
    hasher: ahash::RandomState,
    /// The pipeline generation the entries belong to.
    generation: u64,
    /// Where table lookups of pending hits are counted: the counters of
    /// the pipeline the entries were filled from.
    tables: Arc<PipelineCounters>,
    /// Entries with pending hits; capacity reserved up front.
    dirty: Vec<u32>,
    stats: CacheStats,
    /// Behind the exact-match entries: see `megaflow.rs`.
    megaflows: Megaflows,
    /// Chooses which megaflow hits are copied into an exact-match entry.
    promote_rng: u32,
}

/// One megaflow hit in this many (on average) is copied into an
/// exact-match entry: a hot microflow soon gets one, while many short
/// flows under one megaflow do not evict each other on every packet (as
/// OVS's `emc-insert-inv-prob`).
pub const PROMOTE_ONE_IN: u32 = 16;

impl Default for FlowCache {
    fn default() -> Self {
        Self::new(DEFAULT_ENTRIES)
    }
}

impl std::fmt::Debug for FlowCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlowCache")
            .field("entries", &self.entries.len())
            .field("generation", &self.generation)
            .field("stats", &self.stats)
            .finish()
    }
}

impl FlowCache {
    /// A cache of `entries` slots, rounded up to a power of two (at least
    /// 2). `FlowCache::new(0)` is a valid, tiny cache; use
    /// [`FlowCache::disabled`] to translate every packet.
    pub fn new(entries: usize) -> Self {
        Self::with_megaflows(entries, DEFAULT_MEGAFLOWS)
    }

    /// Like [`FlowCache::new`], with at most `megaflows` megaflow entries
    /// behind the exact-match ones (0: none).
    pub fn with_megaflows(entries: usize, megaflows: usize) -> Self {
        let n = entries.max(2).next_power_of_two();
        FlowCache {
            entries: (0..n).map(|_| Entry::empty()).collect(),
            mask: n - 1,
            // Fixed seeds: the cache's behaviour is reproducible; keys are
            // packet headers an attacker controls either way, and the
            // two-slot layout bounds what a collision costs (a miss).
            // Not ahash's own constants (the digits of pi it mixes seeds
            // with): those cancel out and spread keys badly, see the test.
            hasher: ahash::RandomState::with_seeds(
                0x9e37_79b9_7f4a_7c15,
                0xbf58_476d_1ce4_e5b9,
                0x94d0_49bb_1331_11eb,
                0x2545_f491_4f6c_dd1d,
            ),
            generation: u64::MAX,
            tables: Arc::default(),
            dirty: Vec::with_capacity(n),
            stats: CacheStats::default(),
            megaflows: Megaflows::new(megaflows),
            promote_rng: 0x9e37_79b9,
        }
    }

    /// Megaflow entries held.
    pub fn megaflows(&self) -> usize {
        self.megaflows.len()
    }

    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    fn slots(&self, hash: u64) -> (usize, usize) {
        // Bit 0 is always set (0 marks an empty slot): skip it, or only
        // odd slots would ever be first choices.
        let a = ((hash >> 1) as usize) & self.mask;
        let b = ((hash >> 32) as usize) & self.mask;
        (a, b)
    }

    /// Translates `key` like [`Pipeline::xlate`], from the cache when it
    /// can. On a hit `out` holds the actions and drop reason but not the
    /// wildcards.
    pub fn xlate(&mut self, pipe: &Pipeline, key: &FlowKey, packet_len: u32, out: &mut Xlate) {
        if self.generation != pipe.generation() {
            self.invalidate(pipe);
        }
        let hash = self.hasher.hash_one(key) | 1;
        let (a, b) = self.slots(hash);
        for idx in [a, b] {
            let Some(e) = self.entries.get_mut(idx) else {
                continue;
            };
            if e.hash == hash && e.key.same_as(key) {
                let n = usize::from(e.n_actions);
                if let (Some(dst), Some(src)) = (out.actions.get_mut(..n), e.actions.get(..n)) {
                    dst.copy_from_slice(src);
                }
                out.n_actions = n;
                out.drop_reason = e.drop_reason;
                // Most entries resume nothing: copy the key only if one
                // does.
                out.recirc = e.recirc.as_ref().map(|k| *k);
                e.pending_packets += 1;
                e.pending_bytes += u64::from(packet_len);
                if !e.dirty {
                    e.dirty = true;
                    self.dirty.push(idx as u32);
                }
                self.stats.hits += 1;
                return;
            }
        }
        if let Some(idx) = self.megaflows.lookup(key) {
            if let Some(m) = self.megaflows.entry(idx) {
                let n = usize::from(m.n_actions);
                if let (Some(dst), Some(src)) = (out.actions.get_mut(..n), m.actions.get(..n)) {
                    dst.copy_from_slice(src);
                }
                out.n_actions = n;
                out.drop_reason = m.drop_reason;
                out.recirc = m.recirc;
                self.stats.megaflow_hits += 1;
                // xorshift32
                let mut r = self.promote_rng;
                r ^= r << 13;
                r ^= r >> 17;
                r ^= r << 5;
                self.promote_rng = r;
                if r.is_multiple_of(PROMOTE_ONE_IN) {
                    self.promote(idx, key, hash, (a, b), packet_len);
                } else {
                    self.megaflows.count(idx, packet_len);
                }
                return;
            }
        }
        self.stats.misses += 1;
        self.fill(pipe, key, hash, (a, b), packet_len, out);
    }

    /// The free slot, else the one with the smaller hash (an arbitrary but
    /// stateless choice).
    fn victim(&self, (a, b): (usize, usize)) -> usize {
        match (self.entries.get(a), self.entries.get(b)) {
            (Some(ea), _) if ea.hash == 0 => a,
            (_, Some(eb)) if eb.hash == 0 => b,
            (Some(ea), Some(eb)) if eb.hash < ea.hash => b,
            _ => a,
        }
    }

    /// Copies megaflow `idx` into an exact-match entry for `key`, counting
    /// this packet there.
    fn promote(
        &mut self,
        idx: u32,
        key: &FlowKey,
        hash: u64,
        slots: (usize, usize),
        packet_len: u32,
    ) {
        let victim = self.victim(slots);
        let (Some(m), Some(e)) = (self.megaflows.entry(idx), self.entries.get_mut(victim)) else {
            return;
        };
        e.flush(&self.tables);
        e.clear();
        e.actions = m.actions;
        e.n_actions = m.n_actions;
        e.drop_reason = m.drop_reason;
        e.recirc = m.recirc;
        for (slot, c) in e.counters.iter_mut().zip(&m.counters) {
            *slot = Some(c.clone());
        }
        for (slot, v) in e.visits.iter_mut().zip(&m.visits) {
            *slot = *v;
        }
        e.n_visits = m.visits.len().min(MAX_TABLE_VISITS) as u8;
        e.key = *key;
        e.hash = hash;
        e.pending_packets = 1;
        e.pending_bytes = u64::from(packet_len);
        if !e.dirty {
            e.dirty = true;
            self.dirty.push(victim as u32);
        }
    }

    /// The miss path: walks the pipeline (which counts this packet) while
    /// recording the counters, then stores the result if it fits.
    fn fill(
        &mut self,
        pipe: &Pipeline,
        key: &FlowKey,
        hash: u64,
        (a, b): (usize, usize),
        packet_len: u32,
        out: &mut Xlate,
    ) {
        let victim = self.victim((a, b));
        let tables = &self.tables;
        let Some(e) = self.entries.get_mut(victim) else {
            pipe.xlate(key, packet_len, out);
            return;
        };
        e.flush(tables);
        e.clear();
        out.reset();
        let mut rec = Recorder {
            entry: e,
            n_counters: 0,
            overflow: false,
        };
        crate::xlate::run(pipe, key, packet_len, out, &mut rec);
        let overflow = rec.overflow;
        let n = out.n_actions;
        if overflow || n > CACHED_ACTIONS {
            e.clear();
            self.stats.uncacheable += 1;
            return;
        }
        if let (Some(dst), Some(src)) = (e.actions.get_mut(..n), out.actions.get(..n)) {
            dst.copy_from_slice(src);
        }
        e.n_actions = n as u8;
        e.drop_reason = out.drop_reason;
        e.recirc = out.recirc;
        e.key = *key;
        e.hash = hash;
        let mega = MegaEntry::new(
            out.actions(),
            out.drop_reason,
            out.recirc,
            e.counters.iter().flatten().cloned().collect(),
            e.visits().to_vec(),
        );
        if let Some(m) = mega {
            self.megaflows.insert(key, &out.wildcards, m, &self.tables);
        }
    }

    /// The counters the cached translation of `key` moves, if `key` is
    /// cached for `pipe`'s current generation (so it is exactly what
    /// translating `key` now would count). Allocates: for the miss path
    /// of callers that install translations elsewhere, not per packet.
    pub fn attribution(&self, pipe: &Pipeline, key: &FlowKey) -> Option<Attribution> {
        if self.generation != pipe.generation() {
            return None;
        }
        let hash = self.hasher.hash_one(key) | 1;
        let (a, b) = self.slots(hash);
        let exact = [a, b]
            .into_iter()
            .filter_map(|i| self.entries.get(i))
            .find(|e| e.hash == hash && e.key.same_as(key));
        if let Some(e) = exact {
            return Some(Attribution {
                counters: e.counters.iter().flatten().cloned().collect(),
                visits: e.visits().to_vec(),
                tables: self.tables.clone(),
            });
        }
        let m = self.megaflows.entry(self.megaflows.lookup(key)?)?;
        Some(Attribution {
            counters: m.counters.clone(),
            visits: m.visits.clone(),
            tables: self.tables.clone(),
        })
    }

    /// Adds every entry's pending hits to the shared counters.
    pub fn flush(&mut self) {
        for idx in self.dirty.drain(..) {
            if let Some(e) = self.entries.get_mut(idx as usize) {
                e.flush(&self.tables);
                e.dirty = false;
            }
        }
        self.megaflows.flush(&self.tables);
    }

    /// Flushes, then empties the cache and adopts `pipe`'s generation.
    fn invalidate(&mut self, pipe: &Pipeline) {
        self.flush();
        for e in &mut self.entries {
            if e.hash != 0 {
                e.clear();
            }
        }
        self.megaflows.clear(&self.tables);
        self.generation = pipe.generation();
        self.tables = pipe.counters_arc();
        self.stats.invalidations += 1;
    }
}

/// Collects the counters a walk touches into the entry being filled.
struct Recorder<'e> {
    entry: &'e mut Entry,
    n_counters: usize,
    overflow: bool,
}

impl Recorder<'_> {
    fn record(&mut self, stats: &Arc<RuleStats>) {
        match self.entry.counters.get_mut(self.n_counters) {
            Some(slot) => {
                *slot = Some(stats.clone());
                self.n_counters += 1;
            }
            None => self.overflow = true,
        }
    }
}

impl Tracer for &mut Recorder<'_> {
    const COUNTS: bool = true;

    fn lookup(&mut self, table: u8, rule: Option<&Arc<Rule>>, _depth: u32) {
        let n = usize::from(self.entry.n_visits);
        match self.entry.visits.get_mut(n) {
            Some(v) => {
                *v = TableVisit {
                    table,
                    matched: rule.is_some(),
                };
                self.entry.n_visits += 1;
            }
            None => self.overflow = true,
        }
        if let Some(r) = rule {
            self.record(&r.stats);
        }
    }

    fn group(&mut self, group: &Arc<Group>) {
        self.record(&group.stats);
    }

    fn action(&mut self, _: &crate::action::Action, _: u32) {}
    fn goto_table(&mut self, _: u8, _: u32) {}
    fn bucket(&mut self, _: &crate::action::Bucket, _: u32) {}
    fn action_set(&mut self) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::Field;
    use std::collections::HashSet;

    /// Distinct keys must get distinct hashes: with a degenerate hash
    /// (ahash seeded with its own internal constants gives every key the
    /// same value) every key would compete for the same two slots.
    #[test]
    fn the_hash_spreads_keys_over_slots() {
        let cache = FlowCache::new(8192);
        let mut slots = HashSet::new();
        for i in 0..10_000u32 {
            let mut k = FlowKey::zero();
            k.set(Field::InPort, 1);
            k.set(Field::IpDst, u64::from(0x0a80_0000 + i));
            slots.insert(cache.slots(cache.hasher.hash_one(k) | 1).0);
        }
        // 10,000 keys over 8192 slots: most slots taken.
        assert!(slots.len() > 5000, "{} slots", slots.len());
    }
}
