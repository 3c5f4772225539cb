//! Which counters a translation moves, kept apart from the translation.
//!
//! # Design
//!
//! An [`Attribution`] lists the flows and groups one translation matched
//! and the table lookups it made (with whether each matched), as shared
//! counter blocks. Whoever applies the translation to packets without
//! walking the tables (the packet thread's exact-match and megaflow
//! caches, the XDP flow cache in the kernel) credits those packets here
//! later, so flow, group and table statistics count the same packets as
//! a walk per packet would.
//!
//! [`Pipeline::retranslate`] walks the tables for a key without counting
//! anything and returns the result with its attribution: what a cache
//! needs to decide whether an entry made under an older version of the
//! tables is still exact under the current one (same actions, same flows
//! matched), instead of discarding every entry on every change.
//!
//! Invariants: counters are shared with the rules (`Arc<RuleStats>`);
//! holding an attribution keeps a removed rule's block alive and nothing
//! else, and crediting a removed rule is harmless (nobody reads it).
//! Two attributions are [`Attribution::same`] when they name the same
//! counter blocks (by identity, not value) and the same table visits in
//! the same order: a modified rule keeps its block, a replaced one gets
//! a new block.
//!
//! Cost: building one allocates two small vectors (miss paths only);
//! crediting is one relaxed atomic add per counter and visit, or, for
//! many entries at once ([`TableTally`]), per counter and visited table.

use crate::group::Group;
use crate::key::FlowKey;
use crate::pipeline::Pipeline;
use crate::rule::{PipelineCounters, Rule, RuleStats};
use crate::trace::Tracer;
use crate::translation::Xlate;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// One table lookup a translation made: the table and whether it matched.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TableVisit {
    pub(crate) table: u8,
    pub(crate) matched: bool,
}

/// Table lookups counted over many cache entries and added to the shared
/// table counters once per table: a flush of a thousand entries that all
/// visited the same three tables then costs three pairs of atomic adds
/// for the tables, not three thousand.
pub(crate) struct TableTally {
    lookups: [u64; 256],
    matched: [u64; 256],
    /// Which tables have counts (a bit per table id).
    touched: [u64; 4],
}

impl Default for TableTally {
    fn default() -> Self {
        TableTally {
            lookups: [0; 256],
            matched: [0; 256],
            touched: [0; 4],
        }
    }
}

impl TableTally {
    /// Counts `packets` translated with `visits`.
    pub(crate) fn add(&mut self, visits: &[TableVisit], packets: u64) {
        for v in visits {
            let t = usize::from(v.table);
            if let (Some(l), Some(w)) = (self.lookups.get_mut(t), self.touched.get_mut(t / 64)) {
                *l += packets;
                *w |= 1 << (t % 64);
            }
            if v.matched {
                if let Some(m) = self.matched.get_mut(t) {
                    *m += packets;
                }
            }
        }
    }

    /// Adds the counts to `tables` and starts over.
    pub(crate) fn apply(&mut self, tables: &PipelineCounters) {
        for (word, bits) in self.touched.iter_mut().enumerate() {
            let mut b = std::mem::take(bits);
            while b != 0 {
                let t = word * 64 + b.trailing_zeros() as usize;
                b &= b - 1;
                let (l, m) = (
                    self.lookups.get_mut(t).map(std::mem::take),
                    self.matched.get_mut(t).map(std::mem::take),
                );
                if let Some(c) = u8::try_from(t).ok().and_then(|t| tables.table(t)) {
                    c.lookup.fetch_add(l.unwrap_or(0), Relaxed);
                    if let Some(m) = m.filter(|m| *m > 0) {
                        c.matched.fetch_add(m, Relaxed);
                    }
                }
            }
        }
    }
}

/// Adds `packets` translated like one entry to every flow and group
/// counter it moved, and its table lookups to `tally`.
pub(crate) fn credit_tallied(
    counters: &[Option<Arc<RuleStats>>],
    visits: &[TableVisit],
    tally: &mut TableTally,
    packets: u64,
    bytes: u64,
) {
    for c in counters.iter().flatten() {
        c.packets.fetch_add(packets, Relaxed);
        c.bytes.fetch_add(bytes, Relaxed);
    }
    tally.add(visits, packets);
}

/// Adds `packets` translated like one entry to every counter it moved.
pub(crate) fn credit(
    counters: &[Option<Arc<RuleStats>>],
    visits: &[TableVisit],
    tables: &PipelineCounters,
    packets: u64,
    bytes: u64,
) {
    for c in counters.iter().flatten() {
        c.packets.fetch_add(packets, Relaxed);
        c.bytes.fetch_add(bytes, Relaxed);
    }
    for v in visits {
        if let Some(t) = tables.table(v.table) {
            t.lookup.fetch_add(packets, Relaxed);
            if v.matched {
                t.matched.fetch_add(packets, Relaxed);
            }
        }
    }
}

/// The counters one translation moves (flows, groups, table lookups),
/// detached from the translation; see the module documentation.
#[derive(Clone)]
pub struct Attribution {
    pub(crate) counters: Vec<Arc<RuleStats>>,
    pub(crate) visits: Vec<TableVisit>,
    pub(crate) tables: Arc<PipelineCounters>,
}

impl Attribution {
    /// Adds `packets` packets of `bytes` bytes in total, as if each had
    /// been translated.
    pub fn credit(&self, packets: u64, bytes: u64) {
        if packets == 0 {
            return;
        }
        for c in &self.counters {
            c.packets.fetch_add(packets, Relaxed);
            c.bytes.fetch_add(bytes, Relaxed);
        }
        credit(&[], &self.visits, &self.tables, packets, bytes);
    }

    /// Adds the counters of `next`, a later pass of the same packet
    /// (after a `ct(table=N)` recirculation), so one credit counts the
    /// packet in every flow and table of every pass, as translating each
    /// pass did.
    pub fn extend(&mut self, next: &Attribution) {
        self.counters.extend(next.counters.iter().cloned());
        self.visits.extend_from_slice(&next.visits);
    }

    /// The attributions of a packet's passes, in order, as one
    /// ([`Attribution::extend`]); `None` for no pass.
    pub fn join(passes: impl IntoIterator<Item = Attribution>) -> Option<Attribution> {
        let mut passes = passes.into_iter();
        let mut all = passes.next()?;
        for next in passes {
            all.extend(&next);
        }
        Some(all)
    }

    /// Whether `other` moves exactly the counters this one does: the same
    /// flow and group counter blocks, the same table visits, in order.
    pub fn same(&self, other: &Attribution) -> bool {
        self.visits == other.visits
            && self.counters.len() == other.counters.len()
            && self
                .counters
                .iter()
                .zip(&other.counters)
                .all(|(a, b)| Arc::ptr_eq(a, b))
    }
}

impl std::fmt::Debug for Attribution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attribution")
            .field("counters", &self.counters.len())
            .field("visits", &self.visits.len())
            .finish()
    }
}

impl Pipeline {
    /// Translates `key` as [`Pipeline::xlate`] does, into `out`, but
    /// without counting: returns the counters the translation would have
    /// moved instead. For caches checking an entry against changed
    /// tables; allocates.
    pub fn retranslate(&self, key: &FlowKey, out: &mut Xlate) -> Attribution {
        let mut collector = Collector {
            counters: Vec::new(),
            visits: Vec::new(),
        };
        out.reset();
        crate::xlate::run(self, key, 0, out, &mut collector);
        Attribution {
            counters: collector.counters,
            visits: collector.visits,
            tables: self.counters_arc(),
        }
    }
}

/// Gathers what a walk matched, counting nothing.
struct Collector {
    counters: Vec<Arc<RuleStats>>,
    visits: Vec<TableVisit>,
}

impl Tracer for &mut Collector {
    const COUNTS: bool = false;

    fn lookup(&mut self, table: u8, rule: Option<&Arc<Rule>>, _depth: u32) {
        self.visits.push(TableVisit {
            table,
            matched: rule.is_some(),
        });
        if let Some(r) = rule {
            self.counters.push(r.stats.clone());
        }
    }

    fn group(&mut self, group: &Arc<Group>, bucket: Option<usize>) {
        self.counters.push(group.stats.clone());
        match bucket {
            None => self.counters.extend(group.bucket_stats.iter().cloned()),
            Some(i) => self.counters.extend(group.bucket_stats.get(i).cloned()),
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

    #[test]
    fn a_tally_adds_what_per_entry_credits_would() {
        let visits = |v: &[(u8, bool)]| -> Vec<TableVisit> {
            v.iter()
                .map(|&(table, matched)| TableVisit { table, matched })
                .collect()
        };
        let entries = [
            (visits(&[(0, true), (10, true), (253, false)]), 3),
            (visits(&[(0, true), (10, false)]), 5),
            (visits(&[(64, true), (0, false)]), 7),
        ];
        let (each, tallied) = (PipelineCounters::default(), PipelineCounters::default());
        let mut tally = TableTally::default();
        for (v, packets) in &entries {
            credit(&[], v, &each, *packets, 0);
            tally.add(v, *packets);
        }
        tally.apply(&tallied);
        // Applied once: a second apply adds nothing.
        tally.apply(&tallied);
        for t in 0..=255u8 {
            let (Some(a), Some(b)) = (each.table(t), tallied.table(t)) else {
                continue;
            };
            assert_eq!(
                (a.lookup.load(Relaxed), a.matched.load(Relaxed)),
                (b.lookup.load(Relaxed), b.matched.load(Relaxed)),
                "table {t}"
            );
        }
        let t0 = tallied.table(0).unwrap();
        assert_eq!((t0.lookup.load(Relaxed), t0.matched.load(Relaxed)), (15, 8));
    }
}
