//! Asynchronous messages: what the switch sends to connections without
//! being asked (FLOW_REMOVED, PACKET_IN, PORT_STATUS; flow monitors'
//! updates are `monitor.rs`'s).
//!
//! # Design
//!
//! Stores: for every live connection of one bridge, its writer (shared
//! with the connection thread, which writes its replies through the same
//! mutex, so messages never interleave), its role and its async
//! configuration (SET_ASYNC). A message goes to every connection whose
//! configuration, for its current role, has the message's reason bit.
//!
//! Invariants: a connection is subscribed for exactly as long as its
//! [`Subscription`] lives. Callers notify after releasing the bridge's
//! table lock, so a connection thread blocked writing to a slow peer never
//! holds up the flow tables.
//!
//! Cost and concurrency: one mutex over the subscriber map, taken per
//! notification; the writes happen while holding it, one message per
//! interested connection. Active controller sockets have a write timeout,
//! so a stuck controller delays notifications by at most that long.

use crate::datapath::PortInfo;
use crate::monitor::FlowMonitors;
use crate::roles::ConnRole;
use crate::wire::flow_removed::FlowRemoved;
use crate::wire::message::{role, AsyncConfig};
use crate::wire::packet_io::PacketIn;
use crate::wire::port_status::PortStatus;
use crate::wire::Message;
use flowtable::flow_mod::flow_mod_flags;
use flowtable::Rule;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// A connection's writer, shared between its thread and the notifier.
pub(crate) type SharedWriter = Arc<Mutex<Box<dyn Write + Send>>>;

struct Subscriber {
    writer: SharedWriter,
    role: Arc<AtomicU32>,
    config: Arc<Mutex<AsyncConfig>>,
}

/// The async-message fan-out of one bridge.
#[derive(Default)]
pub struct Notifier {
    subs: Mutex<HashMap<u64, Subscriber>>,
    next_id: AtomicU64,
    /// The connections' flow monitors (see `monitor.rs`).
    pub(crate) monitors: FlowMonitors,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier")
            .field("subscribers", &self.subs.lock().len())
            .finish()
    }
}

/// Keeps a connection subscribed; dropping it unsubscribes.
pub(crate) struct Subscription {
    id: u64,
    notifier: Arc<Notifier>,
}

impl Subscription {
    /// The connection's id among the bridge's (for its flow monitors).
    pub(crate) fn id(&self) -> u64 {
        self.id
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.notifier.subs.lock().remove(&self.id);
        self.notifier.monitors.forget(self.id);
    }
}

impl Notifier {
    pub(crate) fn subscribe(
        self: &Arc<Self>,
        writer: SharedWriter,
        role: &ConnRole,
        config: Arc<Mutex<AsyncConfig>>,
    ) -> Subscription {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.subs.lock().insert(
            id,
            Subscriber {
                writer,
                role: role.shared(),
                config,
            },
        );
        Subscription {
            id,
            notifier: self.clone(),
        }
    }

    /// Reports that `rule` left the table for `reason` (OFPRR_*), if the
    /// flow asked for it (OFPFF_SEND_FLOW_REM).
    pub fn flow_removed(&self, rule: &Rule, reason: u8) {
        if rule.flags & flow_mod_flags::SEND_FLOW_REM == 0 {
            return;
        }
        let (packet_count, byte_count) = rule.stats.read();
        let msg = Message::FlowRemoved(FlowRemoved {
            cookie: rule.cookie,
            priority: rule.priority,
            reason,
            table_id: rule.table_id,
            duration: crate::connection::millisecond_duration(rule.installed.elapsed()),
            idle_timeout: rule.idle_timeout,
            hard_timeout: rule.hard_timeout,
            packet_count,
            byte_count,
            matching: rule.matching,
        })
        .emit(0);
        self.send(&msg, reason, |c| c.flow_removed_mask);
    }

    /// Sends a packet to the controllers that want packet-ins of its
    /// reason.
    /// Returns how many connections it was sent to.
    pub fn packet_in(&self, pi: PacketIn) -> usize {
        let reason = pi.reason;
        let msg = Message::PacketIn(pi).emit(0);
        self.send(&msg, reason, |c| c.packet_in_mask)
    }

    /// Reports a port added, removed or changed (OFPPR_*).
    pub fn port_status(&self, reason: u8, port: PortInfo) {
        let msg = Message::PortStatus(PortStatus { reason, port }).emit(0);
        self.send(&msg, reason, |c| c.port_status_mask);
    }

    /// Writes `msg` to every connection whose `mask` (for its role) has
    /// the `reason` bit.
    fn send(&self, msg: &[u8], reason: u8, mask: impl Fn(&AsyncConfig) -> [u32; 2]) -> usize {
        let bit = 1u32.checked_shl(u32::from(reason)).unwrap_or(0);
        let mut sent = 0;
        for s in self.subs.lock().values() {
            let slave = s.role.load(Ordering::Acquire) == role::SLAVE;
            let m = mask(&s.config.lock())[usize::from(slave)];
            // A failed write is the connection's to notice and report.
            if m & bit != 0 && s.writer.lock().write_all(msg).is_ok() {
                sent += 1;
            }
        }
        sent
    }
}
