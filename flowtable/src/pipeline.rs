//! A packet thread's replica of the pipeline: the tables and groups the
//! translation of a packet ([`crate::xlate`], which adds `xlate` and its
//! variants to [`Pipeline`]) walks.
//!
//! # Design
//!
//! Stores: one [`Classifier`] per table plus the groups by id, fed only by
//! [`Pipeline::apply`] with the [`Change`] lists the control plane's
//! [`crate::tables::FlowTables`] produced. Rules and groups are shared
//! `Arc`s, so a replica costs the index structures, not the flows.
//!
//! Translation ([`Pipeline::xlate`], in `xlate/`) runs the OpenFlow pipeline from table 0
//! on a copy of the packet's key and produces datapath actions: header
//! rewrites and outputs, in order, into a fixed-capacity [`Xlate`]. Header
//! rewrites are committed lazily, like OVS: the translation tracks what the
//! packet looks like in the datapath and emits `SetField`s for the fields
//! that differ only when an output needs them, so a group bucket's rewrites
//! are undone for the next bucket without copying packets here.
//!
//! Concurrency: each packet thread owns its replica (`&mut` for `apply`,
//! `&` for `xlate`); the only shared writes are the Relaxed counter
//! increments on rules, groups and tables.
//!
//! Cost: `xlate` is one classifier lookup per table visited plus the
//! actions; it never allocates and recursion is bounded by
//! [`MAX_RESUBMIT_DEPTH`].

use crate::action::N_TABLES;
use crate::classifier::Classifier;
use crate::group::Group;
use crate::meter::Meter;
use crate::rule::{PipelineCounters, Rule};
use ahash::RandomState;
use std::collections::HashMap;
use std::sync::Arc;

// The translation's types, where they were first defined (the datapath
// and the caches name them through here).
pub use crate::translation::{
    packet_in_reason, DpAction, DropReason, NatSpec, Xlate, MAX_DP_ACTIONS, MAX_RESUBMITS,
    MAX_RESUBMIT_DEPTH,
};

/// One step a packet thread's replica must apply, as the control
/// plane's [`crate::tables::FlowTables`] produces them.
#[derive(Clone, Debug)]
pub enum Change {
    AddRule(Arc<Rule>),
    RemoveRule(Arc<Rule>),
    /// Adds or replaces the group with this id.
    SetGroup(Arc<Group>),
    RemoveGroup(u32),
    /// Adds or replaces the meter with this id.
    SetMeter(Arc<Meter>),
    RemoveMeter(u32),
}

/// A packet thread's replica of the pipeline.
#[derive(Debug)]
pub struct Pipeline {
    pub(crate) tables: Vec<Classifier>,
    pub(crate) counters: Arc<PipelineCounters>,
    pub(crate) groups: HashMap<u32, Arc<Group>, RandomState>,
    /// Bumped by every [`Pipeline::apply`] and liveness change: caches of
    /// translations (`crate::cache::FlowCache`) are valid for one
    /// generation only.
    generation: u64,
    /// Ports that are up, sorted: what fast-failover buckets watch.
    live_ports: Vec<u32>,
}

impl Default for Pipeline {
    fn default() -> Self {
        Self::new()
    }
}

impl Pipeline {
    /// An empty replica. Its table counters are private until the first
    /// rule arrives, which carries the control plane's counters (see
    /// [`PipelineCounters`]); use [`Pipeline::with_counters`] to count
    /// table misses from the start.
    pub fn new() -> Self {
        Self::with_counters(Arc::default())
    }

    /// An empty replica counting into `counters` (from
    /// [`crate::tables::FlowTables::counters`]).
    pub fn with_counters(counters: Arc<PipelineCounters>) -> Self {
        Pipeline {
            tables: (0..N_TABLES).map(|_| Classifier::new()).collect(),
            counters,
            groups: HashMap::default(),
            generation: 0,
            live_ports: Vec::new(),
        }
    }

    pub(crate) fn counters(&self) -> &PipelineCounters {
        &self.counters
    }

    pub(crate) fn counters_arc(&self) -> Arc<PipelineCounters> {
        self.counters.clone()
    }

    /// Changes every time [`Pipeline::apply`] runs.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Applies a change list in order.
    pub fn apply(&mut self, changes: &[Change]) {
        self.generation = self.generation.wrapping_add(1);
        for c in changes {
            match c {
                Change::AddRule(r) => {
                    if !Arc::ptr_eq(&self.counters, &r.counters) {
                        self.counters = r.counters.clone();
                    }
                    if let Some(t) = self.tables.get_mut(usize::from(r.table_id)) {
                        t.insert(r.clone());
                    }
                }
                Change::RemoveRule(r) => {
                    if let Some(t) = self.tables.get_mut(usize::from(r.table_id)) {
                        t.remove(r);
                    }
                }
                Change::SetGroup(g) => {
                    self.groups.insert(g.id, g.clone());
                }
                Change::RemoveGroup(id) => {
                    self.groups.remove(id);
                }
                // Meters run in the datapath, which keeps them; the
                // translation only names them.
                Change::SetMeter(_) | Change::RemoveMeter(_) => {}
            }
        }
    }

    /// Sets the ports that are up (any order; duplicates are ignored),
    /// which fast-failover groups' `watch_port`s follow. A change
    /// invalidates cached translations like a table change; setting the
    /// same set again changes nothing. Returns whether it changed.
    pub fn set_live_ports(&mut self, ports: impl IntoIterator<Item = u32>) -> bool {
        let mut live: Vec<u32> = ports.into_iter().collect();
        live.sort_unstable();
        live.dedup();
        if live == self.live_ports {
            return false;
        }
        self.live_ports = live;
        self.generation = self.generation.wrapping_add(1);
        true
    }

    /// Whether `port` is up (see [`Pipeline::set_live_ports`]).
    pub fn is_port_live(&self, port: u32) -> bool {
        self.live_ports.binary_search(&port).is_ok()
    }

    /// The classifier of one table (read-only).
    pub fn classifier(&self, table_id: u8) -> Option<&Classifier> {
        self.tables.get(usize::from(table_id))
    }

    pub fn n_rules(&self) -> usize {
        self.tables.iter().map(|t| t.len()).sum()
    }
}
