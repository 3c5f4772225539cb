//! The state of each active controller connection (`tcp:` targets), as
//! ovs-vswitchd reports it in the database's `Controller` rows
//! (`is_connected`, `role`, `status`): connected or not, the rconn-like
//! state (`CONNECTING`, `ACTIVE`, `BACKOFF`), when it last connected and
//! disconnected, the last connection error, and the connection's role.
//!
//! For a controller with a `controller_rate_limit`, also its packet-in
//! queues' counters, by kind (OVS's `packet-in-miss-*` and
//! `packet-in-action-*` keys).
//!
//! One small map per bridge behind a mutex, written by the controller
//! threads on connect and disconnect and read by whoever reports it;
//! never touched per message (the packet-in counters are atomics the
//! queues update and the report reads).

use crate::packet_in_queue::PacketInStats;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One controller's state as reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerStatus {
    pub is_connected: bool,
    /// `CONNECTING`, `ACTIVE` or `BACKOFF` (OVS's rconn states).
    pub state: &'static str,
    /// The connection's OFPCR_ROLE_*, while connected.
    pub role: Option<u32>,
    pub since_connect: Option<Duration>,
    pub since_disconnect: Option<Duration>,
    /// The last failed attempt's error, as `strerror` says it.
    pub last_error: Option<String>,
    /// While connected with a packet-in rate limit: its queues' counters,
    /// `[0]` table misses, `[1]` other reasons.
    pub packet_ins: Option<[PacketInCounts; 2]>,
}

/// One packet-in queue's counters as reported (OVS's `pinsched_stats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PacketInCounts {
    /// Waiting now.
    pub backlog: u64,
    /// Sent at once, within the rate.
    pub bypassed: u64,
    /// Sent through the queue, over the rate.
    pub queued: u64,
    /// Dropped from a full queue.
    pub dropped: u64,
}

#[derive(Default)]
struct Track {
    connected: bool,
    state: &'static str,
    role: Option<Arc<AtomicU32>>,
    last_connect: Option<Instant>,
    last_disconnect: Option<Instant>,
    last_error: Option<String>,
    packet_ins: Option<PacketInStats>,
}

#[derive(Default)]
pub(crate) struct ControllerTable {
    by_target: Mutex<HashMap<SocketAddr, Track>>,
}

impl ControllerTable {
    pub(crate) fn connecting(&self, target: SocketAddr) {
        self.by_target.lock().entry(target).or_default().state = "CONNECTING";
    }

    /// Connected, with its role cell and, with a packet-in rate limit,
    /// its queues' counters.
    pub(crate) fn connected(
        &self,
        target: SocketAddr,
        role: Arc<AtomicU32>,
        packet_ins: Option<PacketInStats>,
    ) {
        let mut map = self.by_target.lock();
        let t = map.entry(target).or_default();
        t.connected = true;
        t.state = "ACTIVE";
        t.role = Some(role);
        t.last_connect = Some(Instant::now());
        t.packet_ins = packet_ins;
    }

    /// The packet-in counters a connected controller's row reports (its
    /// limit changed): `None` without a limit.
    pub(crate) fn set_packet_ins(&self, target: SocketAddr, packet_ins: Option<PacketInStats>) {
        if let Some(t) = self.by_target.lock().get_mut(&target) {
            if t.connected {
                t.packet_ins = packet_ins;
            }
        }
    }

    /// A controller no longer configured: its status goes with it.
    pub(crate) fn forget(&self, target: SocketAddr) {
        self.by_target.lock().remove(&target);
    }

    pub(crate) fn disconnected(&self, target: SocketAddr) {
        let mut map = self.by_target.lock();
        let t = map.entry(target).or_default();
        t.connected = false;
        t.state = "BACKOFF";
        t.role = None;
        t.packet_ins = None;
        t.last_disconnect = Some(Instant::now());
    }

    pub(crate) fn failed(&self, target: SocketAddr, e: &std::io::Error) {
        let mut map = self.by_target.lock();
        let t = map.entry(target).or_default();
        t.state = "BACKOFF";
        t.last_error = Some(match e.raw_os_error() {
            Some(n) => nix::errno::Errno::from_raw(n).desc().to_string(),
            None => e.to_string(),
        });
    }

    /// A failed attempt whose error is not an errno (a TLS handshake).
    pub(crate) fn failed_with(&self, target: SocketAddr, e: &crate::error::ControllerError) {
        let mut map = self.by_target.lock();
        let t = map.entry(target).or_default();
        t.state = "BACKOFF";
        t.last_error = Some(e.to_string());
    }

    pub(crate) fn status(&self, target: SocketAddr) -> Option<ControllerStatus> {
        let map = self.by_target.lock();
        let t = map.get(&target)?;
        let ago = |at: Option<Instant>| at.map(|at| at.elapsed());
        Some(ControllerStatus {
            is_connected: t.connected,
            state: t.state,
            role: t.role.as_ref().map(|r| r.load(Ordering::Acquire)),
            since_connect: ago(t.last_connect),
            since_disconnect: ago(t.last_disconnect),
            last_error: t.last_error.clone(),
            packet_ins: t.packet_ins.as_ref().map(|kinds| {
                kinds.each_ref().map(|q| PacketInCounts {
                    backlog: q.backlog.load(Ordering::Relaxed),
                    bypassed: q.bypassed.load(Ordering::Relaxed),
                    queued: q.queued.load(Ordering::Relaxed),
                    dropped: q.dropped.load(Ordering::Relaxed),
                })
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_limited_controller_reports_its_queues_while_connected() {
        let table = ControllerTable::default();
        let target: SocketAddr = "127.0.0.1:6653".parse().unwrap();
        let stats: PacketInStats = Default::default();
        table.connected(target, Arc::default(), Some(stats.clone()));
        stats[0].queued.fetch_add(3, Ordering::Relaxed);
        stats[0].dropped.fetch_add(1, Ordering::Relaxed);
        stats[1].bypassed.fetch_add(7, Ordering::Relaxed);
        stats[1].backlog.store(2, Ordering::Relaxed);
        let s = table.status(target).unwrap();
        let miss = PacketInCounts {
            queued: 3,
            dropped: 1,
            ..Default::default()
        };
        let other = PacketInCounts {
            bypassed: 7,
            backlog: 2,
            ..Default::default()
        };
        assert_eq!(s.packet_ins, Some([miss, other]));
        table.disconnected(target);
        assert_eq!(table.status(target).unwrap().packet_ins, None);
        // Without a rate limit there are no queues to report.
        table.connected(target, Arc::default(), None);
        assert_eq!(table.status(target).unwrap().packet_ins, None);
    }
}
