//! A flow entry as the pipeline stores it.
//!
//! A [`Rule`] is immutable once built: a flow-mod that changes a flow builds
//! a new `Rule` and publishes it in a [`crate::tables::Change`], so a packet
//! thread can keep using the old `Arc<Rule>` until it applies the change.
//! Only the counters move, through atomics shared by every copy.

use crate::action::Instructions;
use crate::matching::Match;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Packet and byte counters of a flow or a group. Packet threads add with
/// `Relaxed` ordering: the counters are statistics, never used to order
/// other memory accesses.
#[derive(Debug, Default)]
pub struct RuleStats {
    pub packets: AtomicU64,
    pub bytes: AtomicU64,
}

impl RuleStats {
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

/// Per-table lookup counters (OFPMP_TABLE).
#[derive(Debug, Default)]
pub struct TableCounters {
    pub lookup: AtomicU64,
    pub matched: AtomicU64,
}

/// The lookup counters of every table of one
/// [`crate::tables::FlowTables`]. Every rule carries an `Arc` to them, so a
/// packet thread's replica adopts them with the first rule it receives and
/// counts into the place the control plane reports from, without any other
/// channel between the two.
#[derive(Debug)]
pub struct PipelineCounters {
    tables: Vec<TableCounters>,
}

impl Default for PipelineCounters {
    fn default() -> Self {
        PipelineCounters {
            tables: (0..crate::action::N_TABLES)
                .map(|_| TableCounters::default())
                .collect(),
        }
    }
}

impl PipelineCounters {
    /// The counters of one table (`None` above table 253).
    #[inline]
    pub fn table(&self, table_id: u8) -> Option<&TableCounters> {
        self.tables.get(usize::from(table_id))
    }
}

#[derive(Debug)]
pub struct Rule {
    /// Unique within a `FlowTables`, never reused. A MODIFY keeps the id (it
    /// is the same flow entry); an ADD that replaces a flow gets a new one.
    pub id: u64,
    pub table_id: u8,
    pub priority: u16,
    pub matching: Match,
    pub cookie: u64,
    /// OFPFF_* flags.
    pub flags: u16,
    pub idle_timeout: u16,
    pub hard_timeout: u16,
    pub instructions: Instructions,
    /// Shared by a replacing rule when counters are kept.
    pub stats: Arc<RuleStats>,
    pub installed: Instant,
    /// The lookup counters of the rule's `FlowTables` (see
    /// [`PipelineCounters`]).
    pub counters: Arc<PipelineCounters>,
    /// The id of the flow this one replaced when an OFPFC_ADD with the
    /// same table, priority and match put it in (`None` otherwise). The
    /// replaced flow is not reported as removed (no FLOW_REMOVED, as in
    /// OVS): only a delete, a timeout or an eviction is a removal.
    pub replaces: Option<u64>,
}

impl Rule {
    /// The classifier's total order: higher priority first; among equal
    /// priorities (overlapping flows, which OpenFlow leaves undefined) the
    /// older rule, i.e. the lower id, wins. Every lookup structure uses this
    /// order so that all replicas pick the same rule.
    #[inline]
    pub fn precedes(&self, other: &Rule) -> bool {
        self.priority > other.priority || (self.priority == other.priority && self.id < other.id)
    }
}
