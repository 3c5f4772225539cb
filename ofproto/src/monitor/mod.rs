//! The flow monitors of one bridge's connections (`ovs-ofctl monitor br0
//! watch:`), and the updates they are owed.
//!
//! # Design
//!
//! Stores: per monitoring connection, its version, its outbox, its
//! monitors ([`MonitorRequest`]s, unique ids), the bytes of the messages
//! queued for it and, while it is paused, what changed meanwhile.
//!
//! Ordering: the bridge hands every change list to [`FlowMonitors::queue`]
//! while it still holds its table lock, and a new monitor's initial flows
//! are read and its reply queued under that lock too; the queues are
//! handed to the connections' outboxes by [`FlowMonitors::flush`] after
//! the lock is released (after the FLOW_REMOVEDs of the same change, as
//! OVS orders them), each taken and handed over under its queue's lock.
//! So a connection gets its reply, then the changes made after it, in
//! the order the tables made them; nothing here waits for a peer.
//!
//! Events as OVS reports them: a new flow is ADDED (also one that replaced
//! a flow with the same match and priority, whose removal is not
//! reported); a MODIFY that changed the instructions or the cookie is
//! MODIFIED; a flow taken out is REMOVED with its reason (within one
//! change list, a bundle's, a flow deleted and another added with the same
//! match and priority read as that replacement). A connection's own
//! changes, those of its flow-mods and bundle commits ([`Origin`]), are
//! abbreviated as OVS abbreviates them: unless one of the monitors that
//! selected a change set ONLY_OWN (`ovs-ofctl monitor`'s default; `!own`
//! clears it), the connection gets one ABBREV update per change list,
//! with the xid of the request that made its first selected change,
//! instead of the full updates.
//!
//! Flow control as OVS's: updates go out through the connection's
//! [`Outbox`], which never blocks whoever changed the tables. When a
//! connection is more than [`PAUSE_BACKLOG`] bytes behind, its monitors
//! are paused (OFPFME_PAUSED; in 1.3 ONF's 1871 message): from then on it
//! is told only of the removal of flows that existed when it paused, and
//! the flows added or modified meanwhile are remembered (the latest
//! version of each, forgotten if removed). Once its backlog is written
//! out, it gets those as ADDED (added since the pause) or MODIFIED
//! updates, then OFPFME_RESUMED (1872).
//!
//! Cost: one atomic load per change list while nobody monitors; else one
//! pass over the change list per monitoring connection, under the table
//! lock, and the encoding of what it selects.

use crate::outbox::Outbox;
use crate::versions;
use crate::wire::features::{TABLE_ALL, TABLE_MAX};
use crate::wire::monitor::{
    append_abbrev, append_update, flags, mo_err, monitor_error, nx_err, pause_message,
    reply_type_and_prefix, Command, Event, MonitorRequest,
};
use crate::wire::multipart::pack_replies_with;
use crate::wire::{err, WireError};
use flowtable::tables::Change;
use flowtable::{FlowTables, Match, Rule};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

/// A connection this many bytes behind has its monitors paused (OVS's
/// figure).
pub(crate) const PAUSE_BACKLOG: usize = 128 * 1024;

struct Watcher {
    version: u8,
    outbox: Arc<Outbox>,
    monitors: Vec<MonitorRequest>,
    /// Encoded updates not yet handed to the outbox (see `flush`).
    queued: Arc<Mutex<Vec<u8>>>,
    paused: Option<Paused>,
    /// Paused by the last `queue`: `flush` asks the outbox to call back
    /// once it is drained.
    resume_pending: bool,
}

/// A paused connection's state.
struct Paused {
    /// Rules with a lower id existed when it paused.
    first_new_id: u64,
    /// Flows its monitors select that were added or modified since, by
    /// id: the latest version.
    changed: BTreeMap<u64, Arc<Rule>>,
}

type Watchers = Mutex<HashMap<u64, Watcher>>;

/// The flow monitors of one bridge; see the module documentation.
#[derive(Default)]
pub struct FlowMonitors {
    watchers: Arc<Watchers>,
    /// Connections with at least one monitor.
    watching: AtomicUsize,
}

/// Who made a change list: connection `conn` (its monitor id, see
/// [`FlowMonitors::request`]), by requests whose xids `xids` gives as
/// `(end, xid)`, ascending: the changes before index `end` not claimed by
/// an earlier pair were made by request `xid` (one pair for a flow-mod,
/// one per message for a bundle commit).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Origin<'a> {
    pub conn: u64,
    pub xids: &'a [(usize, u32)],
}

impl Origin<'_> {
    /// The xid of the request that made change `index`.
    fn xid_of(&self, index: usize) -> u32 {
        self.xids
            .iter()
            .find(|(end, _)| index < *end)
            .or(self.xids.last())
            .map_or(0, |(_, xid)| *xid)
    }
}

/// A change to report, with the flow as it was before a modification
/// and the change's index in its list.
struct FlowEvent<'a> {
    event: Event,
    rule: &'a Arc<Rule>,
    old: Option<&'a Rule>,
    index: usize,
}

impl FlowEvent<'_> {
    /// The OFPFMF_* bit a monitor needs to be told of it.
    fn update_flag(&self) -> u16 {
        match self.event {
            Event::Initial => flags::INITIAL,
            Event::Added => flags::ADD,
            Event::Removed(_) => flags::REMOVED,
            Event::Modified => flags::MODIFY,
        }
    }
}

/// The events of one change list (see the module documentation).
fn events<'a>(changes: &'a [Change], reason: &dyn Fn(&Rule) -> u8) -> Vec<FlowEvent<'a>> {
    let mut removed: HashMap<u64, &Arc<Rule>> = HashMap::new();
    let mut added_ids = HashSet::new();
    for c in changes {
        match c {
            Change::RemoveRule(r) => {
                removed.insert(r.id, r);
            }
            Change::AddRule(r) => {
                added_ids.insert(r.id);
            }
            _ => {}
        }
    }
    // Flows a new one replaced (same table, priority and match).
    let slot = |r: &Rule| (r.table_id, r.priority, r.matching);
    let replacing: HashSet<(u8, u16, Match)> = changes
        .iter()
        .filter_map(|c| match c {
            Change::AddRule(r) if !removed.contains_key(&r.id) => Some(slot(r)),
            _ => None,
        })
        .collect();
    let mut out = Vec::new();
    for (index, c) in changes.iter().enumerate() {
        match c {
            Change::AddRule(r) => match removed.get(&r.id).copied() {
                Some(old) if old.instructions == r.instructions && old.cookie == r.cookie => {}
                Some(old) => out.push(FlowEvent {
                    event: Event::Modified,
                    rule: r,
                    old: Some(old.as_ref()),
                    index,
                }),
                None => out.push(FlowEvent {
                    event: Event::Added,
                    rule: r,
                    old: None,
                    index,
                }),
            },
            Change::RemoveRule(r)
                if !added_ids.contains(&r.id) && !replacing.contains(&slot(r)) =>
            {
                out.push(FlowEvent {
                    event: Event::Removed(reason(r)),
                    rule: r,
                    old: None,
                    index,
                })
            }
            _ => {}
        }
    }
    out
}

/// One update owed to a connection.
enum Update<'a> {
    /// A flow with its event, and whether to include its instructions.
    Full(Event, &'a Rule, bool),
    /// The connection's own change, by its request's xid.
    Abbrev(u32),
}

/// Encodes `updates` as the multipart replies of a connection speaking
/// `version`, numbered `xid`.
fn encode(version: u8, xid: u32, updates: &[Update]) -> Vec<u8> {
    let entries = updates.iter().map(|u| {
        let mut e = Vec::with_capacity(128);
        match u {
            Update::Full(event, rule, instructions) => {
                append_update(version, *event, rule, *instructions, &mut e)
            }
            Update::Abbrev(xid) => append_abbrev(version, *xid, &mut e),
        }
        e
    });
    let (ty, prefix) = reply_type_and_prefix(version);
    let mut out = Vec::new();
    for mut m in pack_replies_with(xid, ty, &prefix, entries) {
        versions::relabel(&mut m, version);
        out.extend_from_slice(&m);
    }
    out
}

impl FlowMonitors {
    /// Serves one monitor request of connection `conn` (numbered `xid`):
    /// adds, replaces or deletes its monitors, all or nothing, and queues
    /// the reply with the flows of `tables` that the new monitors report
    /// initially. Call with the bridge's table lock held (for `tables`),
    /// then [`FlowMonitors::flush`].
    pub(crate) fn request(
        &self,
        conn: u64,
        outbox: &Arc<Outbox>,
        version: u8,
        xid: u32,
        requests: Vec<MonitorRequest>,
        tables: &FlowTables,
    ) -> Result<(), WireError> {
        let mut watchers = self.watchers.lock();
        let mut monitors = watchers
            .get(&conn)
            .map(|w| w.monitors.clone())
            .unwrap_or_default();
        let mut fresh = Vec::new();
        for q in requests {
            if q.filter.table_id > TABLE_MAX && q.filter.table_id != TABLE_ALL {
                return Err(WireError::BadRequest(
                    err::BRC_BAD_TABLE_ID,
                    format!("flow monitor of table {}", q.filter.table_id),
                ));
            }
            let at = monitors.iter().position(|m| m.id == q.id);
            let unknown = || {
                monitor_error(
                    version,
                    nx_err::UNKNOWN_MONITOR,
                    mo_err::UNKNOWN_MONITOR,
                    format!("no flow monitor {}", q.id),
                )
            };
            match (q.command, at) {
                (Command::Add, Some(_)) => {
                    return Err(monitor_error(
                        version,
                        nx_err::MONITOR_EXISTS,
                        mo_err::MONITOR_EXISTS,
                        format!("flow monitor {} exists", q.id),
                    ))
                }
                (Command::Modify | Command::Delete, None) => return Err(unknown()),
                (Command::Add, None) => {}
                (Command::Modify | Command::Delete, Some(i)) => {
                    monitors.remove(i);
                }
            }
            if q.command != Command::Delete {
                fresh.push(q.id);
                monitors.push(q);
            }
        }
        // The initial flows, each once, with instructions if any monitor
        // that reports it asked for them.
        let mut initial: Vec<(Arc<Rule>, bool)> = Vec::new();
        let mut seen: HashMap<u64, usize> = HashMap::new();
        // By id: a later command of the same request may have removed one.
        for m in monitors.iter().filter(|m| fresh.contains(&m.id)) {
            if m.flags & flags::INITIAL == 0 {
                continue;
            }
            for r in tables.flows(&m.filter) {
                let instructions = m.flags & flags::INSTRUCTIONS != 0;
                match seen.get(&r.id) {
                    Some(&i) => {
                        if let Some(e) = initial.get_mut(i) {
                            e.1 |= instructions;
                        }
                    }
                    None => {
                        seen.insert(r.id, initial.len());
                        initial.push((r, instructions));
                    }
                }
            }
        }
        let updates: Vec<Update> = initial
            .iter()
            .map(|(r, ins)| Update::Full(Event::Initial, r.as_ref(), *ins))
            .collect();
        let reply = encode(version, xid, &updates);
        let watcher = watchers.entry(conn).or_insert_with(|| Watcher {
            version,
            outbox: outbox.clone(),
            monitors: Vec::new(),
            queued: Arc::default(),
            paused: None,
            resume_pending: false,
        });
        watcher.monitors = monitors;
        watcher.queued.lock().extend_from_slice(&reply);
        self.recount(&watchers);
        Ok(())
    }

    /// Deletes monitor `id` of connection `conn` (OpenFlow 1.3's cancel).
    pub(crate) fn cancel(&self, conn: u64, version: u8, id: u32) -> Result<(), WireError> {
        let mut watchers = self.watchers.lock();
        let found = watchers.get_mut(&conn).and_then(|w| {
            let i = w.monitors.iter().position(|m| m.id == id)?;
            w.monitors.remove(i);
            Some(())
        });
        self.recount(&watchers);
        found.ok_or_else(|| {
            monitor_error(
                version,
                nx_err::UNKNOWN_MONITOR,
                mo_err::UNKNOWN_MONITOR,
                format!("no flow monitor {id}"),
            )
        })
    }

    /// Drops everything of connection `conn` (it closed).
    pub(crate) fn forget(&self, conn: u64) {
        let mut watchers = self.watchers.lock();
        if watchers.remove(&conn).is_some() {
            self.recount(&watchers);
        }
    }

    /// Whether any connection monitors flows (a change list then needs
    /// its origin worked out).
    pub(crate) fn is_watched(&self) -> bool {
        self.watching.load(Ordering::Acquire) != 0
    }

    fn recount(&self, watchers: &HashMap<u64, Watcher>) {
        let n = watchers.values().filter(|w| !w.monitors.is_empty()).count();
        self.watching.store(n, Ordering::Release);
    }

    /// Queues, for every monitoring connection, the updates its monitors
    /// select from one change list, made by `origin` (`None`: by the
    /// switch itself, e.g. a timeout); `reason` gives a removed flow's
    /// OFPRR_*; `first_new_id` is the id the tables' next rule will get.
    /// Call with the bridge's table lock held, then
    /// [`FlowMonitors::flush`].
    pub(crate) fn queue(
        &self,
        changes: &[Change],
        origin: Option<Origin>,
        reason: &dyn Fn(&Rule) -> u8,
        first_new_id: u64,
    ) {
        if !self.is_watched() {
            return;
        }
        let events = events(changes, reason);
        if events.is_empty() {
            return;
        }
        for (conn, w) in self.watchers.lock().iter_mut() {
            let wanted = |e: &FlowEvent| {
                w.monitors
                    .iter()
                    .filter(|m| m.selects(e.update_flag(), e.rule, e.old))
                    .fold(0, |acc, m| acc | m.flags)
            };
            let mut selected: Vec<Update> = Vec::new();
            if let Some(p) = &mut w.paused {
                // Only removals of flows it knew of; the rest for later.
                for e in &events {
                    let wanted = wanted(e);
                    if wanted == 0 {
                        continue;
                    }
                    match e.event {
                        Event::Removed(_) => {
                            p.changed.remove(&e.rule.id);
                            if e.rule.id < p.first_new_id {
                                let instructions = wanted & flags::INSTRUCTIONS != 0;
                                selected.push(Update::Full(e.event, e.rule, instructions));
                            }
                        }
                        _ => {
                            p.changed.insert(e.rule.id, e.rule.clone());
                        }
                    }
                }
            } else {
                let own = origin.filter(|o| o.conn == *conn);
                let mut abbreviated = false;
                for e in &events {
                    let wanted = wanted(e);
                    if wanted == 0 {
                        continue;
                    }
                    match own {
                        Some(o) if wanted & flags::ONLY_OWN == 0 => {
                            // One abbreviation stands for all of them.
                            if !std::mem::replace(&mut abbreviated, true) {
                                selected.push(Update::Abbrev(o.xid_of(e.index)));
                            }
                        }
                        _ => selected.push(Update::Full(
                            e.event,
                            e.rule,
                            wanted & flags::INSTRUCTIONS != 0,
                        )),
                    }
                }
            }
            if selected.is_empty() {
                continue;
            }
            let mut queued = w.queued.lock();
            queued.extend_from_slice(&encode(w.version, 0, &selected));
            if w.paused.is_none() && w.outbox.pending() + queued.len() > PAUSE_BACKLOG {
                let mut paused = pause_message(w.version, true);
                versions::relabel(&mut paused, w.version);
                queued.extend_from_slice(&paused);
                w.paused = Some(Paused {
                    first_new_id,
                    changed: BTreeMap::new(),
                });
                w.resume_pending = true;
            }
        }
    }

    /// Hands every connection's queued messages to its outbox (never
    /// waits for a peer); a connection just paused is resumed once its
    /// outbox is drained.
    pub(crate) fn flush(&self) {
        let mut pending = Vec::new();
        for (&conn, w) in self.watchers.lock().iter_mut() {
            let resume = std::mem::take(&mut w.resume_pending);
            pending.push((conn, w.outbox.clone(), w.queued.clone(), resume));
        }
        for (conn, outbox, queued, resume) in pending {
            {
                // Taken and handed over under the queue's lock, so two
                // flushes cannot reorder what they take.
                let mut q = queued.lock();
                outbox.push(&q);
                q.clear();
            }
            if resume {
                let watchers = Arc::downgrade(&self.watchers);
                outbox.on_drained(Box::new(move || resume_watcher(&watchers, conn)));
            }
        }
    }
}

#[cfg(test)]
impl FlowMonitors {
    /// Waits until every connection's outbox is written out.
    fn drained(&self) {
        let outboxes: Vec<Arc<Outbox>> = self
            .watchers
            .lock()
            .values()
            .map(|w| w.outbox.clone())
            .collect();
        for o in outboxes {
            o.wait_drained();
        }
    }
}

/// Resumes connection `conn`'s monitors (its outbox was drained): the
/// flows added or modified since it paused, then OFPFME_RESUMED.
fn resume_watcher(watchers: &Weak<Watchers>, conn: u64) {
    let Some(watchers) = watchers.upgrade() else {
        return;
    };
    let mut watchers = watchers.lock();
    let Some(w) = watchers.get_mut(&conn) else {
        return;
    };
    let Some(p) = w.paused.take() else {
        return;
    };
    let mut updates = Vec::new();
    for rule in p.changed.values() {
        let added = rule.id >= p.first_new_id;
        let update = if added {
            flags::ADD | flags::MODIFY
        } else {
            flags::MODIFY
        };
        let wanted = w
            .monitors
            .iter()
            .filter(|m| m.selects(update, rule, None))
            .fold(0, |acc, m| acc | m.flags);
        if wanted != 0 {
            let event = if added { Event::Added } else { Event::Modified };
            updates.push(Update::Full(event, rule, wanted & flags::INSTRUCTIONS != 0));
        }
    }
    // What was queued before (removals) goes first; under the queue's
    // lock, as in `flush`.
    let mut queued = w.queued.lock();
    if !updates.is_empty() {
        queued.extend_from_slice(&encode(w.version, 0, &updates));
    }
    let mut resumed = pause_message(w.version, false);
    versions::relabel(&mut resumed, w.version);
    queued.extend_from_slice(&resumed);
    w.outbox.push(&queued);
    queued.clear();
}

#[cfg(test)]
mod tests;
