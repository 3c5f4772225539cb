//! Packet-ins over a controller's rate limit are queued per input port
//! and sent as the rate allows, as OVS's packet-in scheduler (`pinsched`)
//! does, rather than dropped.
//!
//! # Design
//!
//! Stores, per controller connection with a `controller_rate_limit` and
//! per kind (table misses, and every other reason: OVS keeps the two
//! apart so that a flood of one does not starve the other): a token
//! bucket (`rate` packets/s, `burst` deep) and one FIFO of encoded
//! messages per input port.
//!
//! Rules, OVS's: a packet-in goes out at once when nothing is queued and
//! a token is there ("bypassed"); otherwise it is queued behind the
//! others ("queued"). At most `burst` are queued in all: one more drops
//! the oldest message of the longest port queue ("dropped"), so a port
//! that floods loses its own packet-ins, not another port's. The queues
//! are drained in round-robin order over the ports, one message per
//! token, by the server's scheduler thread, which sleeps until the next
//! token is due while anything is queued.
//!
//! Costs: a send is O(1) plus, when full, O(ports queued) to find the
//! longest queue; memory is bounded by `burst` messages per kind and
//! connection. Concurrency: each [`PacketInQueue`] sits behind its
//! subscriber's mutex in the notifier; the counters are atomics read by
//! the status and stats code without that lock.

use crate::limits::{PacketInLimit, TokenBucket};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// Messages one drain may send per queue: OVS's pinsched sends at most
/// 50 per run, so that one connection's backlog does not hold the others.
const DRAIN_MAX: usize = 50;

/// What became of a packet-in offered to [`PacketInQueue::offer`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Offered {
    /// Send it now.
    Send(Vec<u8>),
    /// Queued (perhaps dropping an older one, counted).
    Queued,
}

/// Counters of one queue, OVS's `pinsched_stats`.
#[derive(Debug, Default)]
pub struct PacketInQueueStats {
    /// Sent at once, within the rate.
    pub bypassed: AtomicU64,
    /// Queued because the rate was reached.
    pub queued: AtomicU64,
    /// Dropped from a full queue.
    pub dropped: AtomicU64,
    /// Waiting now.
    pub backlog: AtomicU64,
}

/// One kind's queues of one connection; see the module documentation.
pub(crate) struct PacketInQueue {
    bucket: TokenBucket,
    burst: usize,
    /// Per input port, oldest first; no empty queue is kept.
    ports: HashMap<u32, VecDeque<Vec<u8>>>,
    /// Round-robin order of the ports with queued messages.
    order: VecDeque<u32>,
    queued: usize,
    pub(crate) stats: std::sync::Arc<PacketInQueueStats>,
    rate: u32,
}

/// A controller connection's counters, by kind: `[0]` table misses
/// (OVS's "miss" scheduler), `[1]` every other reason (its "action").
/// Made with the connection, before it subscribes, so that its
/// Controller row can report them for as long as it is connected.
pub type PacketInStats = [std::sync::Arc<PacketInQueueStats>; 2];

impl PacketInQueue {
    pub(crate) fn new(limit: PacketInLimit, stats: std::sync::Arc<PacketInQueueStats>) -> Self {
        PacketInQueue {
            bucket: TokenBucket::new(limit),
            burst: limit.burst.max(1) as usize,
            ports: HashMap::new(),
            order: VecDeque::new(),
            queued: 0,
            stats,
            rate: limit.rate.max(1),
        }
    }

    /// Takes `limit` from now on (a Controller row's limit changed): a
    /// new bucket, and what a smaller burst no longer holds dropped from
    /// the longest queues, as on overflow.
    pub(crate) fn set_limit(&mut self, limit: PacketInLimit) {
        self.bucket = TokenBucket::new(limit);
        self.burst = limit.burst.max(1) as usize;
        self.rate = limit.rate.max(1);
        while self.queued > self.burst {
            self.drop_from_longest();
        }
        self.stats.backlog.store(self.queued as u64, Relaxed);
    }

    /// Everything queued, oldest port first (the limit is gone: it is
    /// sent at once).
    pub(crate) fn take_all(&mut self, out: &mut Vec<Vec<u8>>) {
        while let Some(port) = self.order.pop_front() {
            if let Some(q) = self.ports.remove(&port) {
                out.extend(q);
            }
        }
        self.queued = 0;
        self.stats.backlog.store(0, Relaxed);
    }

    /// A packet-in from `in_port`, encoded as `msg`.
    pub(crate) fn offer(&mut self, in_port: u32, msg: Vec<u8>, now: Instant) -> Offered {
        if self.queued == 0 && self.bucket.take(now) {
            self.stats.bypassed.fetch_add(1, Relaxed);
            return Offered::Send(msg);
        }
        if self.queued >= self.burst {
            self.drop_from_longest();
        }
        let q = self.ports.entry(in_port).or_default();
        if q.is_empty() {
            self.order.push_back(in_port);
        }
        q.push_back(msg);
        self.queued += 1;
        self.stats.queued.fetch_add(1, Relaxed);
        self.stats.backlog.store(self.queued as u64, Relaxed);
        Offered::Queued
    }

    /// Takes what the tokens allow now, round-robin over the ports, into
    /// `out` (at most [`DRAIN_MAX`]); returns when the next token is due
    /// if anything is left queued.
    pub(crate) fn drain(&mut self, now: Instant, out: &mut Vec<Vec<u8>>) -> Option<Instant> {
        let mut sent = 0;
        while self.queued > 0 && sent < DRAIN_MAX && self.bucket.take(now) {
            let Some(port) = self.order.pop_front() else {
                break;
            };
            let Some(q) = self.ports.get_mut(&port) else {
                continue;
            };
            if let Some(m) = q.pop_front() {
                out.push(m);
                self.queued -= 1;
                sent += 1;
            }
            if q.is_empty() {
                self.ports.remove(&port);
            } else {
                self.order.push_back(port);
            }
        }
        self.stats.backlog.store(self.queued as u64, Relaxed);
        (self.queued > 0).then(|| {
            // A token every 1/rate s; at once if the cap stopped us.
            if sent == DRAIN_MAX {
                now
            } else {
                now + Duration::from_micros(1_000_000 / u64::from(self.rate))
                    .max(Duration::from_millis(1))
            }
        })
    }

    /// Drops the oldest message of the longest queue (the first longest
    /// in round-robin order; OVS picks one of them at random).
    fn drop_from_longest(&mut self) {
        let mut longest: Option<(u32, usize)> = None;
        for &p in &self.order {
            let n = self.ports.get(&p).map_or(0, VecDeque::len);
            if longest.is_none_or(|(_, m)| n > m) {
                longest = Some((p, n));
            }
        }
        let Some((port, _)) = longest else {
            return;
        };
        if let Some(q) = self.ports.get_mut(&port) {
            q.pop_front();
            self.queued -= 1;
            self.stats.dropped.fetch_add(1, Relaxed);
            if q.is_empty() {
                self.ports.remove(&port);
                self.order.retain(|p| *p != port);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_limit_keeps_what_its_burst_holds_and_none_sends_all() {
        let limit = |rate, burst| PacketInLimit { rate, burst };
        let stats = std::sync::Arc::new(PacketInQueueStats::default());
        let mut q = PacketInQueue::new(limit(1, 4), stats.clone());
        let now = Instant::now();
        let mut sent = 0;
        // The bucket starts with a burst's tokens: four go at once, the
        // next four wait.
        for i in 0..8u8 {
            if let Offered::Send(_) = q.offer(u32::from(i % 2), vec![i], now) {
                sent += 1;
            }
        }
        assert_eq!((sent, q.queued), (4, 4));
        q.set_limit(limit(1, 2));
        assert_eq!(q.queued, 2);
        assert_eq!(stats.backlog.load(Relaxed), 2);
        let mut out = Vec::new();
        q.take_all(&mut out);
        assert_eq!((out.len(), q.queued), (2, 0));
        assert!(q.order.is_empty() && q.ports.is_empty());
    }

    fn q(rate: u32, burst: u32) -> PacketInQueue {
        PacketInQueue::new(PacketInLimit { rate, burst }, Default::default())
    }

    #[test]
    fn within_the_rate_goes_at_once_then_queues() {
        let mut q = q(100, 2);
        let now = Instant::now();
        assert_eq!(q.offer(1, vec![1], now), Offered::Send(vec![1]));
        assert_eq!(q.offer(1, vec![2], now), Offered::Send(vec![2]));
        assert_eq!(q.offer(1, vec![3], now), Offered::Queued);
        // Something is queued: even with a token, later ones queue behind.
        let later = now + Duration::from_millis(50);
        assert_eq!(q.offer(1, vec![4], later), Offered::Queued);
        let mut out = Vec::new();
        assert_eq!(q.drain(later, &mut out), None);
        assert_eq!(out, vec![vec![3], vec![4]]);
        assert_eq!(q.stats.bypassed.load(Relaxed), 2);
        assert_eq!(q.stats.queued.load(Relaxed), 2);
        assert_eq!(q.stats.backlog.load(Relaxed), 0);
    }

    #[test]
    fn a_full_queue_drops_from_the_flooding_port() {
        let mut q = q(10, 3);
        let now = Instant::now();
        for i in 0..3 {
            assert!(matches!(q.offer(9, vec![i], now), Offered::Send(_)));
        }
        // Port 9 floods; port 2 sends one.
        for i in 10..13 {
            assert_eq!(q.offer(9, vec![i], now), Offered::Queued);
        }
        assert_eq!(q.offer(2, vec![20], now), Offered::Queued);
        assert_eq!(q.stats.dropped.load(Relaxed), 1);
        // Round-robin: port 9's oldest left, then port 2's, then 9's.
        let mut out = Vec::new();
        let next = q.drain(now + Duration::from_millis(200), &mut out);
        assert_eq!(out, vec![vec![11], vec![20]]);
        assert!(next.is_some());
        out.clear();
        assert_eq!(q.drain(now + Duration::from_millis(400), &mut out), None);
        assert_eq!(out, vec![vec![12]]);
    }

    #[test]
    fn memory_is_bounded_by_the_burst() {
        let mut q = q(1, 5);
        let now = Instant::now();
        for i in 0..10_000u32 {
            let _ = q.offer(i % 7, vec![0; 64], now);
        }
        assert_eq!(q.queued, 5);
        assert_eq!(q.stats.backlog.load(Relaxed), 5);
        assert!(q.ports.values().map(VecDeque::len).sum::<usize>() == 5);
    }
}
