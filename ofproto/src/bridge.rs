//! The control plane's view of one switch.
//!
//! # Design
//!
//! A [`Bridge`] owns the authoritative [`FlowTables`] and the switch
//! configuration behind one mutex. Connection threads apply mods under the
//! lock and publish the resulting changes to the datapath *before*
//! releasing it, so the datapath receives change lists in exactly the
//! order the tables applied them. Barriers wait (outside the lock) for the
//! newest sequence number published by anyone, which is conservative but
//! always correct: everything a connection sent before its barrier was
//! published no later than that.
//!
//! Cost: one lock per mod; dumps clone `Arc<Rule>`s under the lock and
//! encode outside it.

use crate::conn_settings::{probe_or_off, LimitCell, ProbeCell};
use crate::counters::ControlCounters;
use crate::datapath::Datapath;
use crate::limits::{ControlLimits, LimitStats};
use crate::monitor::{FlowMonitors, Origin};
use crate::notify::Notifier;
use crate::outbox::Outbox;
use crate::roles::Roles;
use crate::wire::features::{TableMod, TABLE_ALL, TABLE_MAX};
use crate::wire::flow_removed::reason;
use crate::wire::monitor::MonitorRequest;
use crate::wire::packet_io::PacketIn;
use crate::wire::table14::TableSettings;
use crate::wire::WireError;
use flowtable::flow_mod::flow_mod_flags;
use flowtable::tables::Change;
use flowtable::Rule;
use flowtable::{
    FlowMod, FlowModError, FlowTables, GroupMod, GroupModError, MeterMod, MeterModError, ModError,
    PipelineMod,
};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

struct State {
    tables: FlowTables,
    /// OFPC_FRAG_* (SET_CONFIG's flags are the switch's; its
    /// miss_send_len is each connection's own).
    frag_flags: u16,
    /// Each table's OpenFlow 1.4 eviction and vacancy settings, by id.
    table_settings: Vec<TableSettings>,
}

pub struct Bridge {
    state: Mutex<State>,
    dp: Arc<dyn Datapath>,
    /// Highest sequence number returned by `Datapath::publish`.
    last_seq: AtomicU64,
    roles: Arc<Roles>,
    notifier: Arc<Notifier>,
    /// Connections, mods, bundles and errors, for the metrics.
    counters: ControlCounters,
    /// The control plane's bounds (see `limits.rs`), read by each new
    /// connection.
    limits: Mutex<ControlLimits>,
    /// The passive target's probe interval and packet-in limit (from
    /// `limits`), which every connection it accepted follows while it
    /// runs: a change reaches the live connections, as in OVS.
    passive: PassiveCells,
}

/// See [`Bridge::passive_cells`].
#[derive(Clone, Default)]
pub(crate) struct PassiveCells {
    pub(crate) probe: ProbeCell,
    pub(crate) packet_in: LimitCell,
}

impl Bridge {
    pub fn new(dp: Arc<dyn Datapath>) -> Arc<Bridge> {
        Arc::new(Bridge {
            state: Mutex::new(State {
                tables: FlowTables::new(),
                frag_flags: 0,
                table_settings: vec![TableSettings::default(); usize::from(TABLE_MAX) + 1],
            }),
            dp,
            last_seq: AtomicU64::new(0),
            roles: Arc::default(),
            notifier: Arc::default(),
            counters: ControlCounters::default(),
            limits: Mutex::new(ControlLimits::default()),
            passive: PassiveCells::new(&ControlLimits::default()),
        })
    }

    /// The control plane's bounds; new connections take them.
    pub fn control_limits(&self) -> ControlLimits {
        self.limits.lock().clone()
    }

    /// New bounds for the connections to come; the passive target's
    /// probe interval and packet-in limit also apply to the connections
    /// it accepted before (at their next message or tick).
    pub fn set_control_limits(&self, limits: ControlLimits) {
        let mut now = self.limits.lock();
        if now.tcp_probe != limits.tcp_probe {
            self.passive.probe.set(probe_or_off(limits.tcp_probe));
        }
        if now.tcp_packet_in != limits.tcp_packet_in {
            self.passive.packet_in.set(limits.tcp_packet_in);
        }
        *now = limits;
    }

    /// What the passive target's connections follow while they run.
    pub(crate) fn passive_cells(&self) -> PassiveCells {
        self.passive.clone()
    }

    /// How often each bound was hit.
    pub fn limit_stats(&self) -> &Arc<LimitStats> {
        &self.notifier.stats
    }

    /// `Flow_Table:flow_limit` of table `table_id` (`None`: none).
    pub fn set_flow_limit(&self, table_id: u8, limit: Option<usize>) {
        self.state.lock().tables.set_flow_limit(table_id, limit);
    }

    /// The most flows all tables may hold together.
    pub fn set_max_flows(&self, limit: usize) {
        self.state.lock().tables.set_max_flows(limit);
    }

    /// Counts and logs a flow addition a full table refused.
    fn note_table_full(&self, e: &FlowModError) {
        if let FlowModError::TableFull(t) = e {
            LimitStats::hit(&self.limit_stats().table_full);
            tracing::warn!(
                table = t,
                "flow table full: flow refused (OFPFMFC_TABLE_FULL)"
            );
        }
    }

    /// Counts and logs a group addition refused at the bound.
    fn note_out_of_groups(&self, e: &GroupModError) {
        if let GroupModError::OutOfGroups(max) = e {
            LimitStats::hit(&self.limit_stats().out_of_groups);
            tracing::warn!(
                max,
                "group table full: group refused (OFPGMFC_OUT_OF_GROUPS)"
            );
        }
    }

    /// Where asynchronous messages to this bridge's connections go.
    pub fn notifier(&self) -> &Arc<Notifier> {
        &self.notifier
    }

    /// The controller roles of this bridge's connections.
    pub fn roles(&self) -> &Arc<Roles> {
        &self.roles
    }

    pub fn datapath(&self) -> &Arc<dyn Datapath> {
        &self.dp
    }

    /// The control plane's counters (connections, mods, bundles, errors).
    pub fn counters(&self) -> &ControlCounters {
        &self.counters
    }

    /// Queues one change list for the flow monitors; `origin` is the
    /// connection and xid of the single request that made it.
    fn queue_monitors(
        &self,
        tables: &FlowTables,
        changes: &[Change],
        origin: Option<(u64, u32)>,
        why: u8,
    ) {
        let marks;
        let origin = match origin {
            Some((conn, xid)) => {
                marks = [(changes.len(), xid)];
                Some(Origin { conn, xids: &marks })
            }
            None => None,
        };
        self.monitors()
            .queue(changes, origin, &|_| why, tables.next_rule_id());
    }

    fn publish(&self, changes: Vec<Change>) {
        if !changes.is_empty() {
            let seq = self.dp.publish(changes);
            self.last_seq.fetch_max(seq, Ordering::SeqCst);
        }
    }

    /// Applies a flow-mod; `origin`, the connection and xid of its
    /// request, lets that connection's flow monitors abbreviate it.
    pub fn flow_mod(&self, fm: &FlowMod, origin: Option<(u64, u32)>) -> Result<(), FlowModError> {
        ControlCounters::bump(&self.counters.flow_mods, 1);
        let mut st = self.state.lock();
        let changes = st
            .tables
            .flow_mod(fm)
            .inspect_err(|e| self.note_table_full(e))?;
        let gone = deleted(&changes);
        self.queue_monitors(&st.tables, &changes, origin, reason::DELETE);
        self.publish(changes);
        drop(st);
        self.report_removed(&gone, reason::DELETE);
        Ok(())
    }

    /// Applies a group-mod (`origin` as for [`Bridge::flow_mod`]).
    pub fn group_mod(
        &self,
        gm: &GroupMod,
        origin: Option<(u64, u32)>,
    ) -> Result<(), GroupModError> {
        ControlCounters::bump(&self.counters.group_mods, 1);
        let mut st = self.state.lock();
        let changes = st
            .tables
            .group_mod(gm)
            .inspect_err(|e| self.note_out_of_groups(e))?;
        let gone = deleted(&changes);
        self.queue_monitors(&st.tables, &changes, origin, reason::GROUP_DELETE);
        self.publish(changes);
        drop(st);
        self.report_removed(&gone, reason::GROUP_DELETE);
        Ok(())
    }

    /// Deleting a meter deletes its flows; OpenFlow 1.3 has no removal
    /// reason for that (1.4's METER_DELETE), so they are reported as
    /// deleted, as OVS reports them to 1.3 controllers.
    pub fn meter_mod(
        &self,
        mm: &MeterMod,
        origin: Option<(u64, u32)>,
    ) -> Result<(), MeterModError> {
        let mut st = self.state.lock();
        let changes = st.tables.meter_mod(mm)?;
        let gone = deleted(&changes);
        self.queue_monitors(&st.tables, &changes, origin, reason::DELETE);
        self.publish(changes);
        drop(st);
        self.report_removed(&gone, reason::DELETE);
        Ok(())
    }

    /// All or nothing (ONF bundle commit). `origin`: the committing
    /// connection and the xid of mod `i`'s message, for its flow monitors
    /// (see [`Bridge::flow_mod`]); asked only while someone monitors.
    pub fn apply_batch(
        &self,
        mods: &[PipelineMod],
        origin: Option<(u64, &dyn Fn(usize) -> u32)>,
    ) -> Result<(), (usize, ModError)> {
        let c = &self.counters;
        let flows = mods
            .iter()
            .filter(|m| matches!(m, PipelineMod::Flow(_)))
            .count();
        let groups = mods
            .iter()
            .filter(|m| matches!(m, PipelineMod::Group(_)))
            .count();
        ControlCounters::bump(&c.flow_mods, flows as u64);
        ControlCounters::bump(&c.group_mods, groups as u64);
        let mut st = self.state.lock();
        let watched = origin.filter(|_| self.monitors().is_watched());
        let mut ends = Vec::new();
        let applied = match watched {
            Some(_) => st.tables.apply_batch_marked(mods, &mut ends),
            None => st.tables.apply_batch(mods),
        };
        let changes = match applied {
            Ok(changes) => {
                ControlCounters::bump(&c.bundles_committed, 1);
                changes
            }
            Err(e) => {
                ControlCounters::bump(&c.bundles_failed, 1);
                match &e.1 {
                    ModError::Flow(fe) => self.note_table_full(fe),
                    ModError::Group(ge) => self.note_out_of_groups(ge),
                    ModError::Meter(_) => {}
                }
                return Err(e);
            }
        };
        let gone = deleted(&changes);
        let marks: Vec<(usize, u32)> = match watched {
            Some((_, xid_of)) => ends
                .iter()
                .enumerate()
                .map(|(i, &end)| (end, xid_of(i)))
                .collect(),
            None => Vec::new(),
        };
        let origin = watched.map(|(conn, _)| Origin { conn, xids: &marks });
        self.monitors().queue(
            &changes,
            origin,
            &|_| reason::DELETE,
            st.tables.next_rule_id(),
        );
        self.publish(changes);
        drop(st);
        self.report_removed(&gone, reason::DELETE);
        Ok(())
    }

    /// Removes every timed flow for which `expired` gives a reason
    /// (OFPRR_IDLE_TIMEOUT or OFPRR_HARD_TIMEOUT), as one change list, and
    /// reports them (FLOW_REMOVED).
    pub(crate) fn expire_flows(&self, mut expired: impl FnMut(&Rule) -> Option<u8>) {
        let mut st = self.state.lock();
        let doomed: Vec<(Arc<Rule>, u8)> = st
            .tables
            .timed_rules()
            .filter_map(|r| expired(r).map(|why| (r.clone(), why)))
            .collect();
        if doomed.is_empty() {
            return;
        }
        let mut changes = Vec::new();
        for (r, _) in &doomed {
            changes.extend(st.tables.expire(r));
        }
        let why: HashMap<u64, u8> = doomed.iter().map(|(r, why)| (r.id, *why)).collect();
        let why = |r: &Rule| why.get(&r.id).copied().unwrap_or(reason::DELETE);
        self.monitors()
            .queue(&changes, None, &why, st.tables.next_rule_id());
        self.publish(changes);
        drop(st);
        for (r, why) in &doomed {
            self.notifier.flow_removed(r, *why);
        }
        self.monitors().flush();
    }

    /// Hands a packet from the datapath to the controllers (PACKET_IN);
    /// false when no connection wanted it (no controller connected).
    pub fn packet_in(&self, pi: PacketIn) -> bool {
        self.notifier.packet_in(pi) > 0
    }

    /// FLOW_REMOVED for `rules`, and what flow monitors were owed for
    /// the change that removed them.
    fn report_removed(&self, rules: &[Arc<Rule>], why: u8) {
        for r in rules {
            self.notifier.flow_removed(r, why);
        }
        self.monitors().flush();
    }

    fn monitors(&self) -> &FlowMonitors {
        &self.notifier.monitors
    }

    /// Serves a flow monitor request of connection `conn` (see
    /// `monitor.rs`): the reply, with the flows the new monitors report
    /// initially, is written before any later change's update.
    pub(crate) fn monitor_request(
        &self,
        conn: u64,
        outbox: &Arc<Outbox>,
        version: u8,
        xid: u32,
        requests: Vec<MonitorRequest>,
    ) -> Result<(), WireError> {
        let st = self.state.lock();
        let done = self
            .monitors()
            .request(conn, outbox, version, xid, requests, &st.tables);
        drop(st);
        self.monitors().flush();
        done
    }

    /// Cancels flow monitor `id` of connection `conn`.
    pub(crate) fn monitor_cancel(&self, conn: u64, version: u8, id: u32) -> Result<(), WireError> {
        self.monitors().cancel(conn, version, id)
    }

    /// The newest change list's sequence number: it moves with every
    /// change to the flows, groups or meters, so a reader can tell
    /// whether anything changed since it last looked (the state file's
    /// snapshots).
    pub fn change_seq(&self) -> u64 {
        self.last_seq.load(Ordering::SeqCst)
    }

    /// Waits until the datapath applied every change published so far.
    pub fn barrier(&self) {
        let seq = self.last_seq.load(Ordering::SeqCst);
        if seq > 0 {
            self.dp.sync(seq);
        }
    }

    /// OFPC_FRAG_* as the last SET_CONFIG left them.
    pub fn frag_flags(&self) -> u16 {
        self.state.lock().frag_flags
    }

    pub fn set_frag_flags(&self, flags: u16) {
        self.state.lock().frag_flags = flags;
    }

    /// Applies a TABLE_MOD: 1.3's is a no-op once checked; 1.4's replaces
    /// the eviction and vacancy settings of its table, or of every table.
    pub fn table_mod(&self, tm: &TableMod) -> Result<(), (u16, u16)> {
        tm.check()?;
        if let Some(new) = tm.settings {
            let mut st = self.state.lock();
            for (id, s) in st.table_settings.iter_mut().enumerate() {
                if tm.table_id == TABLE_ALL || usize::from(tm.table_id) == id {
                    *s = new;
                }
            }
        }
        Ok(())
    }

    /// Every table's id, 1.4 settings and number of flows (TABLE_DESC).
    pub fn table_descs(&self) -> Vec<(u8, TableSettings, u32)> {
        let st = self.state.lock();
        st.tables
            .table_stats()
            .iter()
            .zip(&st.table_settings)
            .map(|(t, s)| (t.table_id, *s, t.active_count))
            .collect()
    }

    /// Runs `f` with the tables locked (dumps, statistics).
    pub fn with_tables<R>(&self, f: impl FnOnce(&FlowTables) -> R) -> R {
        f(&self.state.lock().tables)
    }
}

/// Flows a change list took out of the tables for good and that asked to
/// be reported.
fn deleted(changes: &[Change]) -> Vec<Arc<Rule>> {
    let wanted = |r: &Rule| r.flags & flow_mod_flags::SEND_FLOW_REM != 0;
    if !changes
        .iter()
        .any(|c| matches!(c, Change::RemoveRule(r) if wanted(r)))
    {
        return Vec::new();
    }
    // A MODIFY puts the flow back with its id; an ADD replacing a flow
    // names the one it replaced. Neither is a removal (OVS 3.1 sends no
    // FLOW_REMOVED for either).
    let kept: HashSet<u64> = changes
        .iter()
        .flat_map(|c| match c {
            Change::AddRule(r) => [Some(r.id), r.replaces],
            _ => [None, None],
        })
        .flatten()
        .collect();
    changes
        .iter()
        .filter_map(|c| match c {
            Change::RemoveRule(r) if wanted(r) && !kept.contains(&r.id) => Some(r.clone()),
            _ => None,
        })
        .collect()
}

impl PassiveCells {
    fn new(limits: &ControlLimits) -> Self {
        PassiveCells {
            probe: ProbeCell::new(probe_or_off(limits.tcp_probe)),
            packet_in: LimitCell::new(limits.tcp_packet_in),
        }
    }
}
