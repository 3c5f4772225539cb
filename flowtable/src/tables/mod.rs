//! The authoritative flow and group tables, with OpenFlow 1.3 flow-mod and
//! group-mod semantics (as Open vSwitch implements them).
//!
//! # Design
//!
//! Stores: one [`Classifier`] per table (0..=253) with that table's lookup
//! counters, the groups and the meters by id, and reverse indexes from
//! group id and meter id to the rules whose instructions name them (so
//! deleting a group or a meter finds its flows without scanning every
//! table).
//!
//! Every successful mod returns the [`Change`] list that brings a packet
//! thread's [`crate::pipeline::Pipeline`] replica to the same state; applying
//! the changes in order is all a replica ever does. A changed flow is
//! published as `RemoveRule(old)` followed by `AddRule(new)`.
//!
//! Invariants: a rule in the tables passed validation against the groups
//! and meters that existed when it was installed, and a group or meter is
//! never removed while a rule refers to it (deleting one removes those
//! rules first), so the replica never meets a dangling group or meter id.
//!
//! Cost: ADD, strict MODIFY/DELETE and group ADD/MODIFY are O(1) expected
//! (see the classifier); non-strict MODIFY/DELETE and `flows()` scan the
//! selected tables, O(n), as the filter may match any rule. A group DELETE
//! costs O(flows using it).
//!
//! Concurrency: none inside; the owner (ofproto) serialises access.
//! Batches are all-or-nothing through an undo journal: every primitive
//! change records its inverse while a batch runs.

use crate::action::{group as group_no, port, N_TABLES, TABLE_ALL};
use crate::classifier::Classifier;
use crate::error::{FlowModError, GroupModError, MeterModError};
use crate::flow_mod::{flow_mod_flags, FlowFilter, FlowMod, FlowModCommand, GroupMod};
use crate::group::Group;
use crate::matching::Match;
use crate::meter::{Meter, MeterMod};
use crate::rule::{PipelineCounters, Rule, RuleStats};
use crate::validate::check_instructions;
use ahash::RandomState;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use thiserror::Error;

mod batch;
mod groups;
mod meters;

// What the replicas apply is theirs to define; the tables produce it.
pub use crate::pipeline::Change;

/// One mod of an all-or-nothing batch. Flow mods dominate batches, so
/// boxing them would only add an allocation per mod.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PipelineMod {
    Flow(FlowMod),
    Group(GroupMod),
    Meter(MeterMod),
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ModError {
    #[error("flow mod: {0}")]
    Flow(#[from] FlowModError),
    #[error("group mod: {0}")]
    Group(#[from] GroupModError),
    #[error("meter mod: {0}")]
    Meter(#[from] MeterModError),
}

impl ModError {
    /// The OpenFlow 1.3 (type, code) for this error.
    pub fn ofp_error(&self) -> (u16, u16) {
        match self {
            ModError::Flow(e) => e.ofp_error(),
            ModError::Group(e) => e.ofp_error(),
            ModError::Meter(e) => e.ofp_error(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableStats {
    pub table_id: u8,
    pub active_count: u32,
    pub lookup_count: u64,
    pub matched_count: u64,
}

/// The inverse of one primitive change, recorded while a batch runs.
#[derive(Debug)]
enum Undo {
    /// The rule was inserted: remove it.
    Inserted(Arc<Rule>),
    /// The rule was removed: put it back.
    Removed(Arc<Rule>),
    /// The group was set or removed: restore what was there.
    Group(u32, Option<Arc<Group>>),
    /// The meter was set or removed: restore what was there.
    Meter(u32, Option<Arc<Meter>>),
}

/// The control plane's copy of the pipeline.
#[derive(Debug)]
pub struct FlowTables {
    tables: Vec<Classifier>,
    counters: Arc<PipelineCounters>,
    groups: BTreeMap<u32, Arc<Group>>,
    /// group id -> rules (by id) whose instructions use the group.
    group_users: HashMap<u32, HashMap<u64, Arc<Rule>, RandomState>, RandomState>,
    meters: BTreeMap<u32, Arc<Meter>>,
    /// meter id -> rules (by id) whose meter instruction names it.
    meter_users: HashMap<u32, HashMap<u64, Arc<Rule>, RandomState>, RandomState>,
    next_id: u64,
    n_rules: usize,
    /// Rules with an idle or hard timeout, by id: what expiry scans, so
    /// a table of permanent flows costs it nothing.
    timed: HashMap<u64, Arc<Rule>, RandomState>,
    /// `Some` while `apply_batch` runs.
    journal: Option<Vec<Undo>>,
    /// Each table's most flows (OVS's `Flow_Table:flow_limit`), by id;
    /// `usize::MAX`: none. An add that would make a table or all of them
    /// together ([`FlowTables::max_flows`]) pass its limit is refused
    /// (OFPFMFC_TABLE_FULL, OVS's `overflow_policy=refuse`); replacing a
    /// flow never is.
    flow_limits: Vec<usize>,
    max_flows: usize,
}

impl Default for FlowTables {
    fn default() -> Self {
        Self::new()
    }
}

fn cookie_matches(rule: &Rule, cookie: u64, mask: u64) -> bool {
    rule.cookie & mask == cookie & mask
}

/// Whether some packet matches both (same-priority overlap, CHECK_OVERLAP).
fn overlaps(a: &Match, b: &Match) -> bool {
    let (av, am, bv, bm) = (a.value(), a.mask(), b.value(), b.mask());
    (0..crate::key::KEY_WORDS).all(|i| (av.words[i] ^ bv.words[i]) & am.words[i] & bm.words[i] == 0)
}

impl FlowTables {
    pub fn new() -> Self {
        FlowTables {
            tables: (0..N_TABLES).map(|_| Classifier::new()).collect(),
            counters: Arc::default(),
            groups: BTreeMap::new(),
            group_users: HashMap::default(),
            meters: BTreeMap::new(),
            meter_users: HashMap::default(),
            next_id: 1,
            n_rules: 0,
            timed: HashMap::default(),
            journal: None,
            flow_limits: vec![usize::MAX; usize::from(N_TABLES)],
            max_flows: usize::MAX,
        }
    }

    /// Sets table `table_id`'s flow limit (`None`: none). Flows already
    /// over it stay; adds are refused until the table is under it.
    pub fn set_flow_limit(&mut self, table_id: u8, limit: Option<usize>) {
        if let Some(l) = self.flow_limits.get_mut(usize::from(table_id)) {
            *l = limit.unwrap_or(usize::MAX);
        }
    }

    /// Sets the most flows all tables may hold together.
    pub fn set_max_flows(&mut self, limit: usize) {
        self.max_flows = limit;
    }

    pub fn n_rules(&self) -> usize {
        self.n_rules
    }

    pub fn groups(&self) -> Vec<Arc<Group>> {
        self.groups.values().cloned().collect()
    }

    pub fn group(&self, id: u32) -> Option<Arc<Group>> {
        self.groups.get(&id).cloned()
    }

    /// The classifier of one table, for read-only inspection.
    pub fn classifier(&self, table_id: u8) -> Option<&Classifier> {
        self.tables.get(usize::from(table_id))
    }

    /// One entry per table (0..=253).
    pub fn table_stats(&self) -> Vec<TableStats> {
        self.tables
            .iter()
            .enumerate()
            .map(|(i, cls)| {
                let c = self.counters.table(i as u8);
                TableStats {
                    table_id: i as u8,
                    active_count: u32::try_from(cls.len()).unwrap_or(u32::MAX),
                    lookup_count: c.map_or(0, |c| c.lookup.load(Ordering::Relaxed)),
                    matched_count: c.map_or(0, |c| c.matched.load(Ordering::Relaxed)),
                }
            })
            .collect()
    }

    /// Rules passing a non-strict filter, in table order, then by the
    /// classifier's precedence (priority descending, then age).
    pub fn flows(&self, filter: &FlowFilter) -> Vec<Arc<Rule>> {
        let mut out = Vec::new();
        for t in self.selected_tables(filter.table_id) {
            let start = out.len();
            out.extend(t.iter().filter(|r| filter.selects(r)).cloned());
            out[start..].sort_by(|a, b| b.priority.cmp(&a.priority).then(a.id.cmp(&b.id)));
        }
        out
    }

    /// The changes that build a replica of the current state from scratch
    /// (groups and meters first, so that no rule refers to a missing one).
    pub fn replay(&self) -> Vec<Change> {
        let mut out: Vec<Change> = self
            .groups
            .values()
            .cloned()
            .map(Change::SetGroup)
            .collect();
        out.extend(self.meters.values().cloned().map(Change::SetMeter));
        for t in &self.tables {
            out.extend(t.iter().cloned().map(Change::AddRule));
        }
        out
    }

    /// A packet-thread replica of the current state, counting into these
    /// tables' counters.
    pub fn pipeline(&self) -> crate::pipeline::Pipeline {
        let mut p = crate::pipeline::Pipeline::with_counters(self.counters());
        p.apply(&self.replay());
        p
    }

    /// The lookup counters the tables report, to hand to a
    /// [`crate::pipeline::Pipeline`] created before any rule exists.
    pub fn counters(&self) -> Arc<PipelineCounters> {
        self.counters.clone()
    }

    fn selected_tables(&self, table_id: u8) -> impl Iterator<Item = &Classifier> {
        let range = if table_id == TABLE_ALL {
            0..self.tables.len()
        } else {
            let t = usize::from(table_id).min(self.tables.len());
            t..(t + 1).min(self.tables.len())
        };
        self.tables[range].iter()
    }

    // ---- primitives: the only code that mutates state ----

    fn insert_rule(&mut self, rule: Arc<Rule>, changes: &mut Vec<Change>) {
        let Some(t) = self.tables.get_mut(usize::from(rule.table_id)) else {
            return;
        };
        t.insert(rule.clone());
        self.n_rules += 1;
        if rule.idle_timeout != 0 || rule.hard_timeout != 0 {
            self.timed.insert(rule.id, rule.clone());
        }
        for g in self.groups_used(&rule) {
            self.group_users
                .entry(g)
                .or_default()
                .insert(rule.id, rule.clone());
        }
        if let Some(m) = rule.instructions.meter {
            self.meter_users
                .entry(m)
                .or_default()
                .insert(rule.id, rule.clone());
        }
        if let Some(j) = &mut self.journal {
            j.push(Undo::Inserted(rule.clone()));
        }
        changes.push(Change::AddRule(rule));
    }

    fn remove_rule(&mut self, rule: &Rule, changes: &mut Vec<Change>) {
        let Some(t) = self.tables.get_mut(usize::from(rule.table_id)) else {
            return;
        };
        let Some(removed) = t.remove(rule) else {
            return;
        };
        self.n_rules -= 1;
        self.timed.remove(&removed.id);
        for g in self.groups_used(&removed) {
            if let Some(users) = self.group_users.get_mut(&g) {
                users.remove(&removed.id);
                if users.is_empty() {
                    self.group_users.remove(&g);
                }
            }
        }
        if let Some(m) = removed.instructions.meter {
            if let Some(users) = self.meter_users.get_mut(&m) {
                users.remove(&removed.id);
                if users.is_empty() {
                    self.meter_users.remove(&m);
                }
            }
        }
        if let Some(j) = &mut self.journal {
            j.push(Undo::Removed(removed.clone()));
        }
        changes.push(Change::RemoveRule(removed));
    }

    /// The rules that have an idle or hard timeout, in no order.
    pub fn timed_rules(&self) -> impl Iterator<Item = &Arc<Rule>> {
        self.timed.values()
    }

    /// Removes `rule` (found by id) because it expired; nothing if it is
    /// gone already. Returns the change list to publish.
    pub fn expire(&mut self, rule: &Rule) -> Vec<Change> {
        let mut changes = Vec::new();
        self.remove_rule(rule, &mut changes);
        changes
    }

    fn set_group(&mut self, group: Arc<Group>, changes: &mut Vec<Change>) {
        let old = self.groups.insert(group.id, group.clone());
        if let Some(j) = &mut self.journal {
            j.push(Undo::Group(group.id, old));
        }
        changes.push(Change::SetGroup(group));
    }

    fn remove_group(&mut self, id: u32, changes: &mut Vec<Change>) {
        let old = self.groups.remove(&id);
        if old.is_some() {
            if let Some(j) = &mut self.journal {
                j.push(Undo::Group(id, old));
            }
            changes.push(Change::RemoveGroup(id));
        }
    }

    fn groups_used(&self, rule: &Rule) -> Vec<u32> {
        let mut gs: Vec<u32> = rule
            .instructions
            .actions()
            .filter_map(|a| match a {
                crate::action::Action::Group(g) => Some(*g),
                _ => None,
            })
            .collect();
        gs.sort_unstable();
        gs.dedup();
        gs
    }

    fn new_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// The id the next rule added will get: every rule in the tables now
    /// has a lower one.
    pub fn next_rule_id(&self) -> u64 {
        self.next_id
    }

    // ---- flow mods ----

    pub fn flow_mod(&mut self, fm: &FlowMod) -> Result<Vec<Change>, FlowModError> {
        let mut changes = Vec::new();
        self.flow_mod_into(fm, &mut changes)?;
        Ok(changes)
    }

    /// Validates fully before touching anything, so a failed mod changes
    /// nothing.
    fn flow_mod_into(
        &mut self,
        fm: &FlowMod,
        changes: &mut Vec<Change>,
    ) -> Result<(), FlowModError> {
        if fm.table_id >= N_TABLES
            && (fm.table_id != TABLE_ALL || fm.command == FlowModCommand::Add)
        {
            return Err(FlowModError::BadTableId(fm.table_id));
        }
        fm.matching.check_prerequisites()?;
        match fm.command {
            FlowModCommand::Add => self.add_flow(fm, changes),
            FlowModCommand::Modify | FlowModCommand::ModifyStrict => self.modify_flows(fm, changes),
            FlowModCommand::Delete | FlowModCommand::DeleteStrict => {
                let victims = self.collect(fm, fm.command == FlowModCommand::DeleteStrict, true);
                for r in victims {
                    self.remove_rule(&r, changes);
                }
                Ok(())
            }
        }
    }

    fn check_instructions(&self, table_id: u8, fm: &FlowMod) -> Result<(), FlowModError> {
        let (groups, meters) = (&self.groups, &self.meters);
        check_instructions(
            table_id,
            &fm.matching,
            &fm.instructions,
            &|g| groups.contains_key(&g),
            &|m| meters.contains_key(&m),
        )
    }

    fn add_flow(&mut self, fm: &FlowMod, changes: &mut Vec<Change>) -> Result<(), FlowModError> {
        self.check_instructions(fm.table_id, fm)?;
        let Some(table) = self.tables.get(usize::from(fm.table_id)) else {
            return Err(FlowModError::BadTableId(fm.table_id));
        };
        if fm.flags & flow_mod_flags::CHECK_OVERLAP != 0
            && table
                .iter_priority(fm.priority)
                .any(|r| overlaps(&r.matching, &fm.matching))
        {
            return Err(FlowModError::Overlap);
        }
        let old = table.find_exact(&fm.matching, fm.priority).cloned();
        let limit = self
            .flow_limits
            .get(usize::from(fm.table_id))
            .copied()
            .unwrap_or(usize::MAX);
        if old.is_none() && (table.len() >= limit || self.n_rules >= self.max_flows) {
            return Err(FlowModError::TableFull(fm.table_id));
        }
        let counters = self.counters.clone();
        let stats = match &old {
            Some(old) if fm.flags & flow_mod_flags::RESET_COUNTS == 0 => old.stats.clone(),
            _ => Arc::new(RuleStats::default()),
        };
        let rule = Arc::new(Rule {
            id: self.new_id(),
            table_id: fm.table_id,
            priority: fm.priority,
            matching: fm.matching,
            cookie: fm.cookie,
            flags: fm.flags,
            idle_timeout: fm.idle_timeout,
            hard_timeout: fm.hard_timeout,
            instructions: fm.instructions.clone(),
            stats,
            installed: Instant::now(),
            counters,
            replaces: old.as_ref().map(|o| o.id),
        });
        if let Some(old) = old {
            self.remove_rule(&old, changes);
        }
        self.insert_rule(rule, changes);
        Ok(())
    }

    /// Rules a MODIFY/DELETE selects. `use_out` applies the out_port and
    /// out_group filters, which OpenFlow 1.3 defines for deletes only.
    fn collect(&self, fm: &FlowMod, strict: bool, use_out: bool) -> Vec<Arc<Rule>> {
        let keep = |r: &Rule| {
            cookie_matches(r, fm.cookie, fm.cookie_mask)
                && (!use_out || fm.out_port == port::ANY || r.instructions.outputs_to(fm.out_port))
                && (!use_out
                    || fm.out_group == group_no::ANY
                    || r.instructions.uses_group(fm.out_group))
        };
        let mut out = Vec::new();
        for t in self.selected_tables(fm.table_id) {
            if strict {
                if let Some(r) = t.find_exact(&fm.matching, fm.priority) {
                    if keep(r) {
                        out.push(r.clone());
                    }
                }
            } else {
                out.extend(
                    t.iter()
                        .filter(|r| r.matching.is_subset_of(&fm.matching) && keep(r))
                        .cloned(),
                );
            }
        }
        out
    }

    /// OpenFlow 1.3 MODIFY: replaces the instructions of the selected flows,
    /// keeping id, cookie, timeouts, flags, duration and (unless
    /// RESET_COUNTS) counters. Selecting nothing is not an error and adds
    /// nothing (the OpenFlow 1.0 "modify acts as add" rule is gone in 1.3).
    fn modify_flows(
        &mut self,
        fm: &FlowMod,
        changes: &mut Vec<Change>,
    ) -> Result<(), FlowModError> {
        let targets = self.collect(fm, fm.command == FlowModCommand::ModifyStrict, false);
        if targets.is_empty() {
            // Still reject instructions that could never be installed.
            let table = if fm.table_id == TABLE_ALL {
                0
            } else {
                fm.table_id
            };
            return self.check_instructions(table, fm);
        }
        let mut checked = [false; N_TABLES as usize];
        for r in &targets {
            if let Some(done) = checked.get_mut(usize::from(r.table_id)) {
                if !*done {
                    self.check_instructions(r.table_id, fm)?;
                    *done = true;
                }
            }
        }
        for old in targets {
            let stats = if fm.flags & flow_mod_flags::RESET_COUNTS != 0 {
                Arc::new(RuleStats::default())
            } else {
                old.stats.clone()
            };
            let new = Arc::new(Rule {
                id: old.id,
                table_id: old.table_id,
                priority: old.priority,
                matching: old.matching,
                cookie: old.cookie,
                flags: old.flags,
                idle_timeout: old.idle_timeout,
                hard_timeout: old.hard_timeout,
                instructions: fm.instructions.clone(),
                stats,
                installed: old.installed,
                counters: old.counters.clone(),
                replaces: None,
            });
            self.remove_rule(&old, changes);
            self.insert_rule(new, changes);
        }
        Ok(())
    }
}
