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
//! Layout: a power-of-two number of slots, each key hashed once with
//! `key_hash`; a key may live in one of two slots taken from different
//! bits of its hash (like OVS's EMC), so two hot flows rarely evict each
//! other. A slot is split by who reads it, in four arrays: the tags (the
//! key's hash, all a lookup that misses reads), `Hot` (the key and the
//! pending counts: four cache lines, all a hit compares and writes),
//! `Cached` (the actions a hit copies out) and `Cold` (the counters to
//! credit and the key a `ct(table=N)` fork resumes with, read on flushes
//! and by those forks only). Lookup compares the stored hash, then the
//! whole key (`KEY_WORDS` words).
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
//! the entry and reach the shared atomics in [`FlowCache::flush`], on
//! eviction, and on invalidation. The owner decides how often to flush
//! (the engine: when idle, before answering a statistics request, and
//! every 20 ms under load); crediting an entry is two atomic adds per flow
//! or group it matched (table lookups are summed over the whole flush and
//! added once per table, see `TableTally`), so flushing after every batch
//! would still cost about as much as the hits.
//!
//! Cost: a hit is one hash of the key, up to two key compares and a copy
//! of a few actions; no allocation, no atomic operation. A megaflow hit
//! adds one mask-and-probe per megaflow mask. A miss is the full walk
//! plus cloning the recorded `Arc`s (atomic increments) and an allocation
//! for the megaflow entry, miss path only. Memory: about 1.4 KB per
//! exact-match slot (most of it the eight 96-byte actions and the resume
//! key), half a kilobyte per megaflow entry.
//!
//! Concurrency: none. Each packet thread owns its cache, as it owns its
//! [`Pipeline`] replica.

pub use crate::attribution::Attribution;
use crate::attribution::{credit, credit_tallied, TableTally, TableVisit};
use crate::group::Group;
use crate::key::FlowKey;
use crate::megaflow::{MegaEntry, Megaflows, DEFAULT_MEGAFLOWS};
use crate::pipeline::Pipeline;
use crate::rule::{PipelineCounters, Rule, RuleStats};
use crate::trace::Tracer;
use crate::translation::{DpAction, DropReason, Xlate};
use std::sync::Arc;

pub use crate::megaflow::CACHED_ACTIONS;
/// Most flow and group counters one translation may touch and be cached.
pub const MAX_COUNTERS: usize = 16;
/// Most table lookups one translation may make and be cached.
pub const MAX_TABLE_VISITS: usize = 16;
/// Entries of a cache made with [`FlowCache::default`].
pub const DEFAULT_ENTRIES: usize = 8192;

/// A slot's key and the hits it holds for the shared counters: all a hit
/// reads and writes besides its tag and the results it copies. Aligned so
/// they share four cache lines.
#[repr(C, align(64))]
struct Hot {
    key: FlowKey,
    /// Hits not yet added to the shared counters.
    pending_packets: u64,
    pending_bytes: u64,
    /// Listed in `FlowCache::dirty`.
    dirty: bool,
}

impl Hot {
    fn empty() -> Self {
        Hot {
            key: FlowKey::zero(),
            pending_packets: 0,
            pending_bytes: 0,
            dirty: false,
        }
    }
}

/// What a hit copies out of a slot; in this order, so the count lies
/// right before the first action, not 768 bytes after it.
#[repr(C)]
struct Cached {
    n_actions: u8,
    /// `Cold::recirc` holds a key.
    resumes: bool,
    drop_reason: Option<DropReason>,
    actions: [DpAction; CACHED_ACTIONS],
}

impl Cached {
    fn empty() -> Self {
        Cached {
            actions: [DpAction::Flood; CACHED_ACTIONS],
            n_actions: 0,
            resumes: false,
            drop_reason: None,
        }
    }

    fn actions(&self) -> &[DpAction] {
        self.actions
            .get(..usize::from(self.n_actions))
            .unwrap_or(&[])
    }
}

/// What only misses, flushes and hits of `ct(table=N)` translations read.
struct Cold {
    /// `Xlate::recirc`: the key a `ct(table=N)` fork resumes with.
    recirc: Option<FlowKey>,
    counters: [Option<Arc<RuleStats>>; MAX_COUNTERS],
    visits: [TableVisit; MAX_TABLE_VISITS],
    n_visits: u8,
}

impl Cold {
    fn empty() -> Self {
        Cold {
            recirc: None,
            counters: [const { None }; MAX_COUNTERS],
            visits: [TableVisit::default(); MAX_TABLE_VISITS],
            n_visits: 0,
        }
    }

    fn visits(&self) -> &[TableVisit] {
        self.visits.get(..usize::from(self.n_visits)).unwrap_or(&[])
    }

    fn clear(&mut self) {
        self.recirc = None;
        self.n_visits = 0;
        self.counters.iter_mut().for_each(|c| *c = None);
    }
}

/// Multipliers of the four lanes of [`key_hash`] (odd, so each step is a
/// bijection of the lane) and of its final folds.
const LANE_MULTIPLIERS: [u64; 4] = [
    0x9e37_79b9_7f4a_7c15,
    0xbf58_476d_1ce4_e5b9,
    0x94d0_49bb_1331_11eb,
    0xd6e8_feb8_6659_fd93,
];
const FOLD_MULTIPLIER: u64 = 0x2545_f491_4f6c_dd1d;

/// The upper and lower halves of the 128-bit product, xored: every input
/// bit reaches every output bit.
fn folded_multiply(a: u64, b: u64) -> u64 {
    let p = u128::from(a).wrapping_mul(u128::from(b));
    (p as u64) ^ ((p >> 64) as u64)
}

/// The exact-match hash of a key. A byte-stream hasher walks the key's
/// 216 bytes as one chain of dependent multiplies; here word `i` goes to
/// lane `i % 4`, so four short chains run side by side, and two folds
/// mix the lanes at the end. Keys are attacker-chosen either way (see
/// `with_megaflows`); a collision costs a miss.
fn key_hash(key: &FlowKey) -> u64 {
    let mut lanes = LANE_MULTIPLIERS;
    for (i, w) in key.words.iter().enumerate() {
        let lane = i % 4;
        if let (Some(l), Some(k)) = (lanes.get_mut(lane), LANE_MULTIPLIERS.get(lane)) {
            *l = (*l ^ w).wrapping_mul(*k);
        }
    }
    let [a, b, c, d] = lanes;
    let low = folded_multiply(a ^ c.rotate_left(32), FOLD_MULTIPLIER);
    let high = folded_multiply(b ^ d.rotate_left(32), FOLD_MULTIPLIER);
    folded_multiply(low ^ high.rotate_left(23), FOLD_MULTIPLIER)
}

/// Empties slot `idx` of the arrays (its pending hits credited to
/// `tables` first) and returns its parts for refilling. A function of the
/// arrays, not of the cache, so a caller may keep a megaflow borrowed.
fn take_slot<'a>(
    tags: &mut [u64],
    hot: &'a mut [Hot],
    cached: &'a mut [Cached],
    cold: &'a mut [Cold],
    tables: &PipelineCounters,
    idx: usize,
) -> Option<(&'a mut Hot, &'a mut Cached, &'a mut Cold)> {
    let h = hot.get_mut(idx)?;
    let c = cached.get_mut(idx)?;
    let cold = cold.get_mut(idx)?;
    flush_slot(h, cold, tables);
    *tags.get_mut(idx)? = 0;
    c.n_actions = 0;
    c.resumes = false;
    cold.clear();
    Some((h, c, cold))
}

/// Adds a slot's pending hits to the shared counters.
fn flush_slot(hot: &mut Hot, cold: &Cold, tables: &PipelineCounters) {
    if hot.pending_packets == 0 {
        return;
    }
    let (packets, bytes) = (hot.pending_packets, hot.pending_bytes);
    credit(&cold.counters, cold.visits(), tables, packets, bytes);
    hot.pending_packets = 0;
    hot.pending_bytes = 0;
}

/// Hit/miss statistics of one cache (for benchmarks and diagnostics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub hits: u64,
    /// Exact-match misses the megaflow cache answered.
    pub megaflow_hits: u64,
    /// Subtables the megaflow cache probed for its hits (OVS's
    /// "subtable lookups per megaflow hit").
    pub megaflow_lookups: u64,
    /// Translated by walking the pipeline.
    pub misses: u64,
    /// Translations too big to cache.
    pub uncacheable: u64,
    /// Times the cache was emptied because the pipeline changed.
    pub invalidations: u64,
}

impl CacheStats {
    /// Adds another cache's statistics (another packet thread's).
    pub fn merge(&mut self, o: &CacheStats) {
        let CacheStats {
            hits,
            megaflow_hits,
            megaflow_lookups,
            misses,
            uncacheable,
            invalidations,
        } = o;
        self.hits += hits;
        self.megaflow_hits += megaflow_hits;
        self.megaflow_lookups += megaflow_lookups;
        self.misses += misses;
        self.uncacheable += uncacheable;
        self.invalidations += invalidations;
    }
}

/// A packet thread's exact-match translation cache; see the module
/// documentation.
pub struct FlowCache {
    /// Per slot: the key's hash, 0 for a free slot. Kept apart from the
    /// keys so a lookup that misses (every packet of a new connection
    /// misses twice, once per pass) reads 8 bytes a slot from an array
    /// that stays in the CPU's cache (64 KiB at the default size), not
    /// the slots' keys (2 MiB).
    tags: Vec<u64>,
    hot: Vec<Hot>,
    cached: Vec<Cached>,
    cold: Vec<Cold>,
    mask: usize,
    /// The pipeline generation the entries belong to.
    generation: u64,
    /// Where table lookups of pending hits are counted: the counters of
    /// the pipeline the entries were filled from.
    tables: Arc<PipelineCounters>,
    /// Slots with pending hits; capacity reserved up front.
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
            .field("entries", &self.tags.len())
            .field("generation", &self.generation)
            .field("stats", &self.stats)
            .finish()
    }
}

impl FlowCache {
    /// A cache of `entries` slots, rounded up to a power of two (at least
    /// 2). `FlowCache::new(0)` is a valid, tiny cache; a
    /// packet thread without a cache (`xbr run --flow-cache 0`) has no
    /// `FlowCache` at all and translates every packet.
    pub fn new(entries: usize) -> Self {
        Self::with_megaflows(entries, DEFAULT_MEGAFLOWS)
    }

    /// Like [`FlowCache::new`], with at most `megaflows` megaflow entries
    /// behind the exact-match ones (0: none).
    pub fn with_megaflows(entries: usize, megaflows: usize) -> Self {
        let n = entries.max(2).next_power_of_two();
        FlowCache {
            tags: vec![0; n],
            hot: (0..n).map(|_| Hot::empty()).collect(),
            cached: (0..n).map(|_| Cached::empty()).collect(),
            cold: (0..n).map(|_| Cold::empty()).collect(),
            mask: n - 1,
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

    /// The slot holding `key` (whose hash is `hash`), if any.
    fn find(&self, key: &FlowKey, hash: u64) -> Option<usize> {
        let (a, b) = self.slots(hash);
        [a, b].into_iter().find(|&i| {
            self.tags.get(i) == Some(&hash) && self.hot.get(i).is_some_and(|h| h.key.same_as(key))
        })
    }

    /// Translates `key` like [`Pipeline::xlate`], from the cache when it
    /// can. On a hit `out` holds the actions and drop reason but not the
    /// wildcards.
    pub fn xlate(&mut self, pipe: &Pipeline, key: &FlowKey, packet_len: u32, out: &mut Xlate) {
        if self.generation != pipe.generation() {
            self.invalidate(pipe);
        }
        let hash = key_hash(key) | 1;
        match self.find(key, hash) {
            Some(idx) => self.hit(idx, packet_len, out),
            None => self.xlate_missed(pipe, key, hash, packet_len, out),
        }
    }

    /// Translates `key`, which no exact-match slot holds: from the
    /// megaflows, else by walking the pipeline.
    fn xlate_missed(
        &mut self,
        pipe: &Pipeline,
        key: &FlowKey,
        hash: u64,
        packet_len: u32,
        out: &mut Xlate,
    ) {
        let (a, b) = self.slots(hash);
        let (found, probed) = self.megaflows.lookup_counted(key);
        if let Some(idx) = found {
            if let Some(m) = self.megaflows.entry(idx) {
                let n = usize::from(m.n_actions);
                if let (Some(dst), Some(src)) = (out.actions.get_mut(..n), m.actions.get(..n)) {
                    dst.copy_from_slice(src);
                }
                out.n_actions = n;
                out.drop_reason = m.drop_reason;
                // As in `hit`: no copy of an empty resume key.
                if m.recirc.is_some() {
                    out.recirc = m.recirc;
                } else {
                    out.recirc = None;
                }
                self.stats.megaflow_hits += 1;
                self.stats.megaflow_lookups += probed;
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

    /// Copies slot `idx`'s translation into `out` and counts the packet
    /// there.
    fn hit(&mut self, idx: usize, packet_len: u32, out: &mut Xlate) {
        let (Some(h), Some(c)) = (self.hot.get_mut(idx), self.cached.get(idx)) else {
            return;
        };
        let n = usize::from(c.n_actions);
        // One by one: a slice copy of a variable count is a call to
        // memcpy, slower than the one or two moves most hits need.
        for (dst, src) in out.actions.iter_mut().zip(&c.actions).take(n) {
            *dst = *src;
        }
        out.n_actions = n;
        out.drop_reason = c.drop_reason;
        // Most entries resume nothing: read the cold part only if one
        // does. Two assignments, not one of an `if` expression: that
        // builds the whole `Option` first and copies all its 224 bytes
        // into `out`, even for `None` (7% of a hit).
        if c.resumes {
            out.recirc = self.cold.get(idx).and_then(|cold| cold.recirc);
        } else {
            out.recirc = None;
        }
        h.pending_packets += 1;
        h.pending_bytes += u64::from(packet_len);
        if !h.dirty {
            h.dirty = true;
            self.dirty.push(idx as u32);
        }
        self.stats.hits += 1;
    }

    /// The free slot, else the one with the smaller hash (an arbitrary but
    /// stateless choice).
    fn victim(&self, (a, b): (usize, usize)) -> usize {
        match (self.tags.get(a), self.tags.get(b)) {
            (Some(0), _) => a,
            (_, Some(0)) => b,
            (Some(ta), Some(tb)) if tb < ta => b,
            _ => a,
        }
    }

    /// Empties slot `idx` (its pending hits credited first) and returns
    /// its parts for refilling.
    fn take_slot(&mut self, idx: usize) -> Option<(&mut Hot, &mut Cached, &mut Cold)> {
        take_slot(
            &mut self.tags,
            &mut self.hot,
            &mut self.cached,
            &mut self.cold,
            &self.tables,
            idx,
        )
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
        let Some(m) = self.megaflows.entry(idx) else {
            return;
        };
        // The fields one by one: `m` stays borrowed from the megaflows
        // while the slot is refilled, with no copy of its lists.
        let Some((h, c, cold)) = take_slot(
            &mut self.tags,
            &mut self.hot,
            &mut self.cached,
            &mut self.cold,
            &self.tables,
            victim,
        ) else {
            return;
        };
        c.actions = m.actions;
        c.n_actions = m.n_actions;
        c.drop_reason = m.drop_reason;
        c.resumes = m.recirc.is_some();
        cold.recirc = m.recirc;
        for (slot, counter) in cold.counters.iter_mut().zip(&m.counters) {
            *slot = Some(counter.clone());
        }
        for (slot, v) in cold.visits.iter_mut().zip(&m.visits) {
            *slot = *v;
        }
        cold.n_visits = m.visits.len().min(MAX_TABLE_VISITS) as u8;
        h.key = *key;
        h.pending_packets = 1;
        h.pending_bytes = u64::from(packet_len);
        let newly_dirty = !h.dirty;
        h.dirty = true;
        if let Some(t) = self.tags.get_mut(victim) {
            *t = hash;
        }
        if newly_dirty {
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
        let Some((h, c, cold)) = self.take_slot(victim) else {
            pipe.xlate(key, packet_len, out);
            return;
        };
        out.reset();
        let mut rec = Recorder {
            entry: cold,
            n_counters: 0,
            overflow: false,
        };
        crate::xlate::run(pipe, key, packet_len, out, &mut rec);
        let overflow = rec.overflow;
        let n = out.n_actions;
        if overflow || n > CACHED_ACTIONS {
            cold.clear();
            self.stats.uncacheable += 1;
            return;
        }
        if let (Some(dst), Some(src)) = (c.actions.get_mut(..n), out.actions.get(..n)) {
            dst.copy_from_slice(src);
        }
        c.n_actions = n as u8;
        c.drop_reason = out.drop_reason;
        c.resumes = out.recirc.is_some();
        cold.recirc = out.recirc;
        h.key = *key;
        let mega = MegaEntry::new(
            c.actions(),
            out.drop_reason,
            out.recirc,
            cold.counters.iter().flatten().cloned().collect(),
            cold.visits().to_vec(),
        );
        if let Some(t) = self.tags.get_mut(victim) {
            *t = hash;
        }
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
        let hash = key_hash(key) | 1;
        if let Some(cold) = self.find(key, hash).and_then(|i| self.cold.get(i)) {
            return Some(Attribution {
                counters: cold.counters.iter().flatten().cloned().collect(),
                visits: cold.visits().to_vec(),
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

    /// Adds every entry's pending hits to the shared counters (the
    /// tables' once per table, see `TableTally`).
    pub fn flush(&mut self) {
        let mut tally = TableTally::default();
        for idx in self.dirty.drain(..) {
            let idx = idx as usize;
            if let (Some(h), Some(cold)) = (self.hot.get_mut(idx), self.cold.get(idx)) {
                if h.pending_packets > 0 {
                    let (packets, bytes) = (h.pending_packets, h.pending_bytes);
                    credit_tallied(&cold.counters, cold.visits(), &mut tally, packets, bytes);
                    h.pending_packets = 0;
                    h.pending_bytes = 0;
                }
                h.dirty = false;
            }
        }
        tally.apply(&self.tables);
        self.megaflows.flush(&self.tables);
    }

    /// Flushes, then empties the cache and adopts `pipe`'s generation.
    fn invalidate(&mut self, pipe: &Pipeline) {
        self.flush();
        for ((tag, c), cold) in self
            .tags
            .iter_mut()
            .zip(&mut self.cached)
            .zip(&mut self.cold)
        {
            if *tag != 0 {
                *tag = 0;
                c.n_actions = 0;
                c.resumes = false;
                cold.clear();
            }
        }
        self.megaflows.clear(&self.tables);
        self.generation = pipe.generation();
        self.tables = pipe.counters_arc();
        self.stats.invalidations += 1;
    }
}

/// Collects the counters a walk touches into the slot being filled.
struct Recorder<'e> {
    entry: &'e mut Cold,
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

    fn group(&mut self, group: &Arc<Group>, bucket: Option<usize>) {
        self.record(&group.stats);
        match bucket {
            None => group.bucket_stats.iter().for_each(|s| self.record(s)),
            Some(i) => {
                if let Some(s) = group.bucket_stats.get(i) {
                    self.record(s);
                }
            }
        }
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

    /// Distinct keys must spread over both slot choices, whichever field
    /// they differ in (low or high bits, first or last words): a weak hash
    /// would crowd keys into a few slots that evict each other.
    #[test]
    fn the_hash_spreads_keys_over_slots() {
        let cache = FlowCache::new(8192);
        let varied: [(Field, u32); 6] = [
            (Field::IpDst, 0),
            (Field::TpSrc, 0),
            (Field::TunId, 40),
            (Field::Reg(7), 16),
            (Field::CtMark, 0),
            (Field::EthSrc, 32),
        ];
        for (field, shift) in varied {
            let (mut first, mut second) = (HashSet::new(), HashSet::new());
            for i in 0..10_000u64 {
                let mut k = FlowKey::zero();
                k.set(Field::InPort, 1);
                k.set(field, (i << shift) & field.full_mask());
                let (a, b) = cache.slots(key_hash(&k) | 1);
                first.insert(a);
                second.insert(b);
            }
            // 10,000 keys over 8192 slots: random placement takes
            // 8192 * (1 - e^(-10000/8192)), about 5,775 of them.
            assert!(first.len() > 5600, "{field:?}: {} first slots", first.len());
            assert!(
                second.len() > 5600,
                "{field:?}: {} second slots",
                second.len()
            );
        }
    }
}
