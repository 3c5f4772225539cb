//! Tuple-space-search classifier: one per OpenFlow table.
//!
//! # Design
//!
//! Stores: the rules of one table, grouped into *subtables* by their mask
//! (the "tuple" of tuple space search). A subtable maps a masked value
//! (`Match::value`, already `value & mask`) to the rules with exactly that
//! match, so looking a packet up in a subtable is one masking of the key and
//! one hash probe. Rules sharing a match differ only by priority; that list
//! is kept in [`Rule::precedes`] order (priority descending, then id
//! ascending), so its first element is the subtable's answer.
//!
//! A subtable keys its hash table by the words its mask does not clear
//! (a few of the key's 27: `in_port` and `nw_dst` are two), so a probe
//! hashes and compares only those, and a slot keeps only the first
//! [`INLINE_WORDS`] of them next to its rules (one inline, the usual case,
//! or a list); a mask with more compares the rest against the first
//! rule's own match. A whole 216-byte key per slot would make a table of
//! 100,000 flows some 25 MB larger, in the control plane's classifier and
//! again in every packet thread's replica.
//!
//! Subtables are visited in descending order of the highest priority they
//! hold (`order`). Once the best rule found so far beats every rule a
//! subtable could return (its priority is strictly greater than the
//! subtable's maximum), no later subtable can win and the search stops. The
//! comparison is strict because equal priorities are broken by rule id, and
//! a later subtable may hold an older rule of the same priority.
//!
//! Invariants:
//! - every subtable holds at least one rule (empty ones are freed at once);
//! - `by_mask` maps each live subtable's mask to its slot, and `order` lists
//!   every live slot exactly once, sorted by the subtable's max priority;
//! - each bucket is non-empty and sorted by `Rule::precedes`, its rules
//!   share one match, and its slot's hash and inline words are that
//!   match's value's words at the subtable's `words`;
//! - `priorities` counts the rules per priority, its last key is the max.
//!
//! Cost (n rules, S subtables = distinct masks, k rules sharing one match,
//! normally 1): insert and remove are O(1) expected hash work plus
//! O(log n + k) for the priority count and bucket, plus O(S) when the
//! subtable's max priority changes (re-sorting `order`). S is the number of
//! distinct masks, tens in practice, independent of n. Lookup is O(S) hash
//! probes in the worst case, usually far fewer thanks to the early stop, and
//! never allocates. Iteration is O(n).
//!
//! Concurrency: none inside. The control plane owns one classifier per table
//! (behind its own lock); every packet thread owns a private replica that it
//! updates itself from published change lists, so lookups take no lock.

use crate::key::{FlowKey, KEY_WORDS};
use crate::matching::Match;
use crate::rule::Rule;
use ahash::RandomState;
use hashbrown::HashTable;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// The rules of one subtable that share a match, in `Rule::precedes`
/// order.
#[derive(Debug)]
enum Bucket {
    One(Arc<Rule>),
    /// Two or more.
    Many(Vec<Arc<Rule>>),
}

impl Bucket {
    fn rules(&self) -> &[Arc<Rule>] {
        match self {
            Bucket::One(r) => std::slice::from_ref(r),
            Bucket::Many(v) => v,
        }
    }

    /// The highest-precedence rule.
    fn first(&self) -> &Arc<Rule> {
        match self {
            Bucket::One(r) => r,
            Bucket::Many(v) => &v[0],
        }
    }

    fn insert(&mut self, rule: Arc<Rule>) {
        match self {
            Bucket::One(r) => {
                let existing = r.clone();
                *self = Bucket::Many(if rule.precedes(&existing) {
                    vec![rule, existing]
                } else {
                    vec![existing, rule]
                });
            }
            Bucket::Many(v) => {
                let pos = v.partition_point(|r| r.precedes(&rule));
                v.insert(pos, rule);
            }
        }
    }

    /// Removes the rule with `id`: the rule, and whether the bucket is now
    /// empty (the caller then drops it).
    fn remove(&mut self, id: u64) -> Option<(Arc<Rule>, bool)> {
        match self {
            Bucket::One(r) => (r.id == id).then(|| (r.clone(), true)),
            Bucket::Many(v) => {
                let pos = v.iter().position(|r| r.id == id)?;
                let removed = v.remove(pos);
                if v.len() == 1 {
                    if let Some(last) = v.pop() {
                        *self = Bucket::One(last);
                    }
                }
                Some((removed, false))
            }
        }
    }
}

/// Masked-value words a slot keeps inline (see the module documentation).
pub const INLINE_WORDS: usize = 4;

/// One hash table slot: a match's value, as far as kept inline, and the
/// rules with that match.
#[derive(Debug)]
struct Slot {
    /// The value's words at the subtable's `words[..INLINE_WORDS]`, zero
    /// beyond.
    inline: [u64; INLINE_WORDS],
    rules: Bucket,
}

/// A key's words at a subtable's `words`, masked, gathered for hashing
/// and comparing.
struct Gathered {
    words: [u64; KEY_WORDS],
    len: usize,
}

impl Gathered {
    fn inline(&self) -> [u64; INLINE_WORDS] {
        let mut out = [0; INLINE_WORDS];
        let n = self.len.min(INLINE_WORDS);
        out[..n].copy_from_slice(&self.words[..n]);
        out
    }
}

#[derive(Debug)]
struct Subtable {
    mask: FlowKey,
    /// Indices of the mask's nonzero words, ascending.
    words: Box<[u8]>,
    buckets: HashTable<Slot>,
    hasher: RandomState,
    /// Number of rules per priority; the last key is the max priority.
    priorities: BTreeMap<u16, u32>,
}

impl Subtable {
    fn new(mask: FlowKey) -> Self {
        Subtable {
            words: (0..KEY_WORDS)
                .filter(|&i| mask.words[i] != 0)
                .map(|i| i as u8)
                .collect(),
            mask,
            buckets: HashTable::new(),
            hasher: RandomState::new(),
            priorities: BTreeMap::new(),
        }
    }

    fn max_priority(&self) -> Option<u16> {
        self.priorities.last_key_value().map(|(p, _)| *p)
    }

    #[inline]
    fn gather(&self, key: &FlowKey) -> Gathered {
        gather(&self.words, &self.mask, key)
    }

    fn bucket(&self, g: &Gathered) -> Option<&Bucket> {
        self.buckets
            .find(hash(&self.hasher, g), |s| holds(&self.words, s, g))
            .map(|s| &s.rules)
    }

    fn insert(&mut self, rule: Arc<Rule>) {
        let g = self.gather(rule.matching.value());
        let h = hash(&self.hasher, &g);
        let (hasher, words, mask) = (&self.hasher, &self.words, &self.mask);
        if let Some(slot) = self.buckets.find_mut(h, |s| holds(words, s, &g)) {
            slot.rules.insert(rule);
            return;
        }
        let slot = Slot {
            inline: g.inline(),
            rules: Bucket::One(rule),
        };
        // Rehashing takes a slot's value from its inline words when they
        // hold all of it (the usual case; no visit to the rule, which at
        // 100k flows is a cache miss per slot), else from its first rule.
        self.buckets.insert_unique(h, slot, |s| {
            if words.len() <= INLINE_WORDS {
                hasher.hash_one(&s.inline[..words.len()])
            } else {
                hash(
                    hasher,
                    &gather(words, mask, s.rules.first().matching.value()),
                )
            }
        });
    }

    /// Removes the rule with `rule.id`: it, or `None` if not here.
    fn remove(&mut self, rule: &Rule) -> Option<Arc<Rule>> {
        let g = self.gather(rule.matching.value());
        let h = hash(&self.hasher, &g);
        let words = &self.words;
        let mut entry = self.buckets.find_entry(h, |s| holds(words, s, &g)).ok()?;
        let (removed, empty) = entry.get_mut().rules.remove(rule.id)?;
        if empty {
            entry.remove();
        }
        Some(removed)
    }
}

/// `key & mask` at `words` (a rule's value is already masked).
#[inline]
fn gather(words: &[u8], mask: &FlowKey, key: &FlowKey) -> Gathered {
    let mut g = Gathered {
        words: [0; KEY_WORDS],
        len: words.len(),
    };
    for (j, &i) in words.iter().enumerate() {
        let i = usize::from(i);
        g.words[j] = key.words[i] & mask.words[i];
    }
    g
}

#[inline]
fn hash(hasher: &RandomState, g: &Gathered) -> u64 {
    hasher.hash_one(&g.words[..g.len])
}

/// Whether `slot`, of the subtable whose mask's nonzero words are
/// `words`, holds the value gathered in `g`.
#[inline]
fn holds(words: &[u8], slot: &Slot, g: &Gathered) -> bool {
    let n = g.len.min(INLINE_WORDS);
    if slot.inline[..n] != g.words[..n] {
        return false;
    }
    let value = slot.rules.first().matching.value();
    words[n..]
        .iter()
        .zip(&g.words[n..g.len])
        .all(|(&i, &w)| value.words[usize::from(i)] == w)
}

/// The rules of one table, for lookup by packet and by exact match.
#[derive(Debug, Default)]
pub struct Classifier {
    /// Slab of subtables; `None` slots are listed in `free`.
    subtables: Vec<Option<Subtable>>,
    free: Vec<usize>,
    by_mask: HashMap<FlowKey, usize, RandomState>,
    /// `(max priority, slot)`, max priority descending.
    order: Vec<(u16, usize)>,
    n_rules: usize,
}

impl Classifier {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.n_rules
    }

    pub fn is_empty(&self) -> bool {
        self.n_rules == 0
    }

    /// Number of distinct masks.
    pub fn n_subtables(&self) -> usize {
        self.order.len()
    }

    /// Adds a rule. The caller guarantees no rule with the same id is
    /// present (ids are unique per `FlowTables`).
    pub fn insert(&mut self, rule: Arc<Rule>) {
        let mask = *rule.matching.mask();
        let priority = rule.priority;
        let slot = match self.by_mask.get(&mask) {
            Some(slot) => *slot,
            None => self.new_subtable(mask),
        };
        let Some(Some(st)) = self.subtables.get_mut(slot) else {
            // `by_mask` and the slab are updated together; unreachable.
            return;
        };
        let old_max = st.max_priority();
        st.insert(rule);
        *st.priorities.entry(priority).or_insert(0) += 1;
        self.n_rules += 1;
        if old_max.is_none_or(|m| priority > m) {
            self.reorder(slot, priority);
        }
    }

    /// Removes the rule with `rule.id`, found through its match. Returns it,
    /// or `None` when it is not here.
    pub fn remove(&mut self, rule: &Rule) -> Option<Arc<Rule>> {
        let slot = *self.by_mask.get(rule.matching.mask())?;
        let st = self.subtables.get_mut(slot)?.as_mut()?;
        let removed = st.remove(rule)?;
        let old_max = st.max_priority();
        if let Some(count) = st.priorities.get_mut(&removed.priority) {
            *count -= 1;
            if *count == 0 {
                st.priorities.remove(&removed.priority);
            }
        }
        self.n_rules -= 1;
        match st.max_priority() {
            None => self.free_subtable(slot),
            Some(new_max) if Some(new_max) != old_max => self.reorder(slot, new_max),
            Some(_) => {}
        }
        Some(removed)
    }

    /// The rule with exactly this match and priority (strict semantics).
    pub fn find_exact(&self, matching: &Match, priority: u16) -> Option<&Arc<Rule>> {
        let slot = *self.by_mask.get(matching.mask())?;
        let st = self.subtables.get(slot)?.as_ref()?;
        st.bucket(&st.gather(matching.value()))?
            .rules()
            .iter()
            .find(|r| r.priority == priority)
    }

    /// The highest-precedence rule matching `key`. ORs the mask of every
    /// subtable consulted into `wildcards`: the result depends on those bits
    /// only. Does not allocate.
    #[inline]
    pub fn lookup(&self, key: &FlowKey, wildcards: &mut FlowKey) -> Option<&Arc<Rule>> {
        let mut best: Option<&Arc<Rule>> = None;
        for &(max_priority, slot) in &self.order {
            if best.is_some_and(|b| b.priority > max_priority) {
                break;
            }
            let Some(Some(st)) = self.subtables.get(slot) else {
                continue;
            };
            // The mask's other words are zero: OR-ing them changes nothing.
            for &i in st.words.iter() {
                let i = usize::from(i);
                wildcards.words[i] |= st.mask.words[i];
            }
            if let Some(candidate) = st.bucket(&st.gather(key)).map(Bucket::first) {
                if best.is_none_or(|b| candidate.precedes(b)) {
                    best = Some(candidate);
                }
            }
        }
        best
    }

    /// Every rule, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Rule>> + '_ {
        self.subtables
            .iter()
            .flatten()
            .flat_map(|st| st.buckets.iter().flat_map(|s| s.rules.rules()))
    }

    /// Every rule of one priority, in no particular order; skips subtables
    /// without that priority.
    pub fn iter_priority(&self, priority: u16) -> impl Iterator<Item = &Arc<Rule>> + '_ {
        self.subtables
            .iter()
            .flatten()
            .filter(move |st| st.priorities.contains_key(&priority))
            .flat_map(move |st| {
                st.buckets
                    .iter()
                    .flat_map(|s| s.rules.rules())
                    .filter(move |r| r.priority == priority)
            })
    }

    fn new_subtable(&mut self, mask: FlowKey) -> usize {
        let st = Subtable::new(mask);
        let slot = match self.free.pop() {
            Some(slot) => {
                if let Some(s) = self.subtables.get_mut(slot) {
                    *s = Some(st);
                }
                slot
            }
            None => {
                self.subtables.push(Some(st));
                self.subtables.len() - 1
            }
        };
        self.by_mask.insert(mask, slot);
        slot
    }

    fn free_subtable(&mut self, slot: usize) {
        if let Some(st) = self.subtables.get_mut(slot).and_then(Option::take) {
            self.by_mask.remove(&st.mask);
            self.order.retain(|&(_, s)| s != slot);
            self.free.push(slot);
        }
    }

    /// (Re)places `slot` in `order` for a new max priority.
    fn reorder(&mut self, slot: usize, max_priority: u16) {
        if let Some(pos) = self.order.iter().position(|&(_, s)| s == slot) {
            self.order.remove(pos);
        }
        let pos = self.order.partition_point(|&(p, _)| p >= max_priority);
        self.order.insert(pos, (max_priority, slot));
    }
}

/// Reference lookup for tests and benchmarks: a linear scan with the same
/// precedence as [`Classifier::lookup`].
pub fn linear_lookup<'a>(rules: &'a [Arc<Rule>], key: &FlowKey) -> Option<&'a Arc<Rule>> {
    let mut best: Option<&Arc<Rule>> = None;
    for r in rules {
        if r.matching.matches(key) && best.is_none_or(|b| r.precedes(b)) {
            best = Some(r);
        }
    }
    best
}
