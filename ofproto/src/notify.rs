//! Asynchronous messages: what the switch sends to connections without
//! being asked (FLOW_REMOVED, PACKET_IN, PORT_STATUS; flow monitors'
//! updates are `monitor.rs`'s).
//!
//! # Design
//!
//! Stores: for every live connection of one bridge, its outbox (shared
//! with the connection thread, which queues its replies there too, so
//! messages never interleave), its role, its async
//! configuration (SET_ASYNC) and, for a service connection, its
//! miss_send_len. A message goes to every connection whose configuration,
//! for its current role, has the message's reason bit, except service
//! connections whose miss_send_len is 0 (OVS's rule: `ovs-ofctl monitor
//! br0 65534` asks for them, a plain `ovs-ofctl` gets none).
//!
//! Invariants: a connection is subscribed for exactly as long as its
//! [`Subscription`] lives.
//!
//! Flow control: a message is queued on each interested connection's
//! outbox and never waited for, so a peer that stops reading (a
//! suspended `ovs-ofctl monitor br0 65534`) holds up neither the packet
//! thread's upcalls nor flow expiry. A connection more than
//! [`PACKET_IN_BACKLOG`] bytes behind misses PACKET_INs, as OVS drops
//! packet-ins to a controller that does not keep up; a controller with a
//! `controller_rate_limit` gets those over it queued per input port and
//! sent as the rate allows, the oldest of the longest queue dropped when
//! the queue is full (OVS's pinsched, see `packet_in_queue.rs`). Drops are
//! counted in `LimitStats` and logged (the 1st, 2nd, 4th ... drop). FLOW_REMOVED and PORT_STATUS are
//! always queued, as in OVS, up to the outbox's bound (`outbox.rs`).
//!
//! Cost and concurrency: one mutex over the subscriber map, taken per
//! notification, and one per interested connection's outbox.

use crate::datapath::PortInfo;
use crate::limits::{LimitStats, PacketInLimit};
use crate::monitor::FlowMonitors;
use crate::outbox::Outbox;
use crate::packet_in_queue::{Offered, PacketInQueue, PacketInQueueStats, PacketInStats};
use crate::roles::ConnRole;
use crate::versions::{self, OFP14_VERSION, OFP15_VERSION};
use crate::wire::flow_removed::FlowRemoved;
use crate::wire::header::msg_type;
use crate::wire::message::{role, AsyncConfig};
use crate::wire::packet_io::{PacketIn, PACKET_IN_REASON_AT};
use crate::wire::port_status::PortStatus;
use crate::wire::{HeaderRepr, Message, HEADER_LEN, OFP_VERSION};
use flowtable::flow_mod::flow_mod_flags;
use flowtable::pipeline::packet_in_reason;
use flowtable::Rule;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// Counts a dropped PACKET_IN, and logs the first, second, fourth, ...
/// (a flood of drops would otherwise flood the log).
fn note_drop(counter: &AtomicU64, connection: u64, why: &'static str) {
    let before = counter.fetch_add(1, Ordering::Relaxed);
    if before == 0 || before.is_power_of_two() {
        tracing::warn!(connection, dropped = before + 1, "packet-in dropped: {why}");
    }
}

/// Pending bytes past which a connection misses PACKET_INs.
pub(crate) const PACKET_IN_BACKLOG: usize = 1 << 20;

struct Subscriber {
    outbox: Arc<Outbox>,
    role: Arc<AtomicU32>,
    config: Arc<Mutex<AsyncConfig>>,
    /// A service connection's miss_send_len: while it is 0 the connection
    /// gets nothing (`None` for connections to controllers).
    gate: Option<Arc<AtomicU16>>,
    /// The OpenFlow version messages are encoded in.
    version: u8,
    /// A controller's packet-in rate limit (`controller_rate_limit`):
    /// the queues of table misses and of other reasons
    /// (`packet_in_queue.rs`).
    packet_in_queues: Option<Mutex<[PacketInQueue; 2]>>,
}

/// Where a packet-in goes in a rate-limited connection's queues, and how
/// far behind a connection may be and still get it.
#[derive(Clone, Copy)]
struct PacketInRoute {
    backlog: usize,
    in_port: u32,
    /// 0: table miss, 1: any other reason (OVS's two schedulers).
    kind: usize,
}

/// The async-message fan-out of one bridge.
#[derive(Default)]
pub struct Notifier {
    subs: Mutex<HashMap<u64, Subscriber>>,
    next_id: AtomicU64,
    /// The connections' flow monitors (see `monitor.rs`).
    pub(crate) monitors: FlowMonitors,
    /// The bridge's counters of bounds hit (packet-ins dropped here).
    pub(crate) stats: Arc<LimitStats>,
    /// Wakes the thread that drains rate-limited packet-in queues
    /// ([`Notifier::packet_in_scheduler`]): something was queued.
    scheduler: Mutex<bool>,
    scheduler_wake: parking_lot::Condvar,
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

    /// Limits the connection's packet-ins to `limit` from now on (its
    /// queues count into `stats`), or lifts the limit: what is queued
    /// is kept as far as the new burst holds, or sent at once without
    /// one.
    pub(crate) fn set_packet_in_limit(&self, limit: Option<(PacketInLimit, &PacketInStats)>) {
        let mut out = Vec::new();
        {
            let mut subs = self.notifier.subs.lock();
            let Some(s) = subs.get_mut(&self.id) else {
                return;
            };
            match (&s.packet_in_queues, limit) {
                (Some(queues), Some((l, _))) => {
                    for q in queues.lock().iter_mut() {
                        q.set_limit(l);
                    }
                }
                (None, Some((l, stats))) => {
                    s.packet_in_queues = Some(Mutex::new([
                        PacketInQueue::new(l, stats[0].clone()),
                        PacketInQueue::new(l, stats[1].clone()),
                    ]));
                }
                (Some(queues), None) => {
                    for q in queues.lock().iter_mut() {
                        q.take_all(&mut out);
                    }
                    s.packet_in_queues = None;
                }
                (None, None) => {}
            }
            for m in out.drain(..) {
                if !s.outbox.offer(&m, PACKET_IN_BACKLOG) {
                    note_drop(
                        &self.notifier.stats.packet_ins_backlog_dropped,
                        self.id,
                        "peer behind",
                    );
                }
            }
        }
        self.notifier.wake_packet_in_scheduler();
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
        outbox: Arc<Outbox>,
        role: &ConnRole,
        config: Arc<Mutex<AsyncConfig>>,
        gate: Option<Arc<AtomicU16>>,
        version: u8,
        packet_in_limit: Option<(PacketInLimit, &PacketInStats)>,
    ) -> Subscription {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.subs.lock().insert(
            id,
            Subscriber {
                outbox,
                role: role.shared(),
                config,
                gate,
                version,
                packet_in_queues: packet_in_limit.map(|(l, stats)| {
                    Mutex::new([
                        PacketInQueue::new(l, stats[0].clone()),
                        PacketInQueue::new(l, stats[1].clone()),
                    ])
                }),
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
        let fr = FlowRemoved {
            cookie: rule.cookie,
            priority: rule.priority,
            reason,
            table_id: rule.table_id,
            duration: crate::wire::millisecond_duration(rule.installed.elapsed()),
            idle_timeout: rule.idle_timeout,
            hard_timeout: rule.hard_timeout,
            packet_count,
            byte_count,
            matching: rule.matching,
        };
        let encode = |version| {
            if version == OFP15_VERSION {
                let mut body = Vec::with_capacity(96);
                fr.emit_v15(&mut body);
                HeaderRepr::framed(msg_type::FLOW_REMOVED, 0, &body)
            } else {
                Message::FlowRemoved(fr.clone()).emit(0)
            }
        };
        self.send(encode, reason, |c| c.flow_removed_mask);
    }

    /// Sends a packet to the controllers that want packet-ins of its
    /// reason.
    /// Returns how many connections it was sent to.
    pub fn packet_in(&self, pi: PacketIn) -> usize {
        // 1.4's reasons (group, action set, packet-out) are ACTION before
        // it, in the message and for the connection's async mask, as OVS
        // sends them.
        let reason = pi.reason;
        let route = PacketInRoute {
            backlog: PACKET_IN_BACKLOG,
            in_port: pi
                .matching
                .exact(flowtable::Field::InPort)
                .and_then(|p| u32::try_from(p).ok())
                .unwrap_or(0),
            kind: usize::from(reason != packet_in_reason::NO_MATCH),
        };
        let reason_for = move |version: u8| {
            if version < OFP14_VERSION {
                packet_in_reason::before_14(reason)
            } else {
                reason
            }
        };
        // The same layout in every version xbr speaks: encoded once, the
        // reason set per version.
        let msg = Message::PacketIn(pi).emit(0);
        let encode = |version| {
            let mut m = msg.clone();
            if let Some(r) = m.get_mut(HEADER_LEN + PACKET_IN_REASON_AT) {
                *r = reason_for(version);
            }
            m
        };
        self.send_but(
            encode,
            reason_for,
            |c| c.packet_in_mask,
            |_, _| false,
            Some(route),
        )
    }

    /// Reports a port added, removed or changed (OFPPR_*).
    pub fn port_status(&self, reason: u8, port: PortInfo) {
        self.port_status_from(reason, port, None);
    }

    /// [`Notifier::port_status`] for a change the connection `source`
    /// made (PORT_MOD): before OpenFlow 1.5 it is not told, as OVS does
    /// it (1.3 says a PORT_MOD makes no PORT_STATUS; 1.5 tells everyone).
    pub(crate) fn port_status_from(&self, reason: u8, port: PortInfo, source: Option<u64>) {
        let ps = PortStatus { reason, port };
        let encode = |version| {
            if version == OFP_VERSION {
                Message::PortStatus(ps.clone()).emit(0)
            } else {
                let mut body = Vec::with_capacity(80);
                ps.emit_v14(&mut body);
                HeaderRepr::framed(msg_type::PORT_STATUS, 0, &body)
            }
        };
        let skip = |id: u64, s: &Subscriber| Some(id) == source && s.version < OFP15_VERSION;
        self.send_but(encode, |_| reason, |c| c.port_status_mask, skip, None);
    }

    /// Writes the message to every connection whose `mask` (for its role)
    /// has the `reason` bit, encoded by `encode` for the connection's
    /// version (once per version).
    /// The packet-in scheduler: drains the rate-limited connections'
    /// queues as their tokens come (`packet_in_queue.rs`), sleeping until
    /// the next is due or something is queued, until `stop`.
    pub(crate) fn packet_in_scheduler(&self, stop: &std::sync::atomic::AtomicBool) {
        let mut next: Option<std::time::Instant> = None;
        while !stop.load(Ordering::SeqCst) {
            {
                let mut queued = self.scheduler.lock();
                if !*queued {
                    // Bounded, so that `stop` is seen without a wake.
                    let until = next.unwrap_or_else(|| {
                        std::time::Instant::now() + std::time::Duration::from_millis(250)
                    });
                    self.scheduler_wake.wait_until(&mut queued, until);
                }
                *queued = false;
            }
            next = self.drain_packet_ins(std::time::Instant::now());
        }
    }

    /// Wakes [`Notifier::packet_in_scheduler`] (something was queued, or
    /// the server stops).
    pub(crate) fn wake_packet_in_scheduler(&self) {
        *self.scheduler.lock() = true;
        self.scheduler_wake.notify_all();
    }

    /// Sends what the limited connections' tokens allow now; returns
    /// when the next token is due, if anything is still queued.
    fn drain_packet_ins(&self, now: std::time::Instant) -> Option<std::time::Instant> {
        let mut next: Option<std::time::Instant> = None;
        let mut out = Vec::new();
        for (&id, s) in self.subs.lock().iter() {
            let Some(queues) = &s.packet_in_queues else {
                continue;
            };
            for q in queues.lock().iter_mut() {
                if let Some(at) = q.drain(now, &mut out) {
                    next = Some(next.map_or(at, |n| n.min(at)));
                }
            }
            for m in out.drain(..) {
                if !s.outbox.offer(&m, PACKET_IN_BACKLOG) {
                    note_drop(&self.stats.packet_ins_backlog_dropped, id, "peer behind");
                }
            }
        }
        next
    }

    /// The packet-in queue counters of each rate-limited connection, by
    /// connection id: [table misses, other reasons].
    pub fn packet_in_queue_stats(&self) -> Vec<(u64, [Arc<PacketInQueueStats>; 2])> {
        self.subs
            .lock()
            .iter()
            .filter_map(|(&id, s)| {
                let q = s.packet_in_queues.as_ref()?.lock();
                Some((id, [q[0].stats.clone(), q[1].stats.clone()]))
            })
            .collect()
    }

    fn send(
        &self,
        encode: impl Fn(u8) -> Vec<u8>,
        reason: u8,
        mask: impl Fn(&AsyncConfig) -> [u32; 2],
    ) -> usize {
        self.send_but(encode, |_| reason, mask, |_, _| false, None)
    }

    /// [`Notifier::send`], skipping the connections `skip` names; with a
    /// packet-in `route`, not to connections more bytes behind than its
    /// backlog, and through a limited connection's queues. The
    /// reason a connection hears (and its mask is asked about) may depend
    /// on its version.
    fn send_but(
        &self,
        encode: impl Fn(u8) -> Vec<u8>,
        reason: impl Fn(u8) -> u8,
        mask: impl Fn(&AsyncConfig) -> [u32; 2],
        skip: impl Fn(u64, &Subscriber) -> bool,
        route: Option<PacketInRoute>,
    ) -> usize {
        // Encoded once per version (1.3, 1.4, 1.5), without allocating
        // for the cache itself: a packet-in is sent per packet.
        let mut encoded: [Option<Vec<u8>>; 3] = Default::default();
        let mut sent = 0;
        for (&id, s) in self.subs.lock().iter() {
            let gated = s
                .gate
                .as_ref()
                .is_some_and(|g| g.load(Ordering::Relaxed) == 0);
            if gated || skip(id, s) {
                continue;
            }
            let slave = s.role.load(Ordering::Acquire) == role::SLAVE;
            let m = mask(&s.config.lock())[usize::from(slave)];
            let bit = 1u32.checked_shl(u32::from(reason(s.version))).unwrap_or(0);
            if m & bit == 0 {
                continue;
            }
            let slot = usize::from(s.version.saturating_sub(OFP_VERSION)).min(2);
            let msg = encoded[slot].get_or_insert_with(|| {
                let mut m = encode(s.version);
                versions::relabel(&mut m, s.version);
                m
            });
            let Some(route) = route else {
                s.outbox.push(msg);
                sent += 1;
                continue;
            };
            if let Some(queues) = &s.packet_in_queues {
                let q = &mut queues.lock()[route.kind];
                let dropped = q.stats.dropped.load(Ordering::Relaxed);
                match q.offer(route.in_port, msg.clone(), std::time::Instant::now()) {
                    Offered::Send(m) => {
                        if s.outbox.offer(&m, route.backlog) {
                            sent += 1;
                        } else {
                            note_drop(&self.stats.packet_ins_backlog_dropped, id, "peer behind");
                        }
                    }
                    Offered::Queued => {
                        LimitStats::hit(&self.stats.packet_ins_queued);
                        if q.stats.dropped.load(Ordering::Relaxed) != dropped {
                            note_drop(&self.stats.packet_ins_rate_limited, id, "rate limit");
                        }
                        self.wake_packet_in_scheduler();
                    }
                }
                continue;
            }
            if s.outbox.offer(msg, route.backlog) {
                sent += 1;
            } else {
                note_drop(&self.stats.packet_ins_backlog_dropped, id, "peer behind");
            }
        }
        sent
    }
}
