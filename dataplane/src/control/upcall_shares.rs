//! Per-port shares of the upcall queue (frames on their way to the
//! controllers), so one pod whose frames a flow sends to the controller
//! cannot fill the queue for every other port (issue 32).
//!
//! # Design
//!
//! Stores: per bucket (a port's number modulo [`BUCKETS`]) the upcalls
//! queued and not yet taken by the upcall thread, the upcalls refused for
//! its share, and the last port number seen (for the report); and how
//! many buckets hold upcalls (`active`). A port may queue while it holds
//! fewer than `max(MIN_SHARE, queue / (others + 2))`, `others` being the
//! other buckets holding upcalls: alone it takes at most half the queue,
//! so the next port always finds room; the shares shrink as more ports
//! use it. Ports whose numbers are equal modulo 256 share a bucket
//! (OpenFlow port numbers are handed out in order, so that takes more
//! than 256 ports).
//!
//! Concurrency and cost: lock-free, no allocation; a queued upcall costs
//! one compare-and-exchange and one load, and its taking one decrement
//! (plus one on `active` when a bucket empties or fills). The counts and
//! `active` are updated separately, so `active` may be off by one for a
//! moment: the share is approximate by that much, never unbounded (the
//! queue's own bound still holds).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

/// Buckets of ports.
pub const BUCKETS: usize = 256;
/// The smallest share of the queue a port may fill.
pub const MIN_SHARE: u32 = 16;

#[derive(Default)]
struct Bucket {
    held: AtomicU32,
    refused: AtomicU64,
    port: AtomicU32,
}

/// See the module documentation.
pub struct UpcallShares {
    capacity: u32,
    buckets: Vec<Bucket>,
    active: AtomicU32,
}

impl UpcallShares {
    /// Shares of a queue of `capacity` upcalls.
    pub fn new(capacity: usize) -> Self {
        UpcallShares {
            capacity: u32::try_from(capacity).unwrap_or(u32::MAX),
            buckets: (0..BUCKETS).map(|_| Bucket::default()).collect(),
            active: AtomicU32::new(0),
        }
    }

    fn bucket(&self, port: u32) -> Option<&Bucket> {
        self.buckets.get(port as usize % BUCKETS)
    }

    /// Takes a place for an upcall from `port`; `false` (counted) when
    /// the port holds its share.
    pub fn admit(&self, port: u32) -> bool {
        let Some(b) = self.bucket(port) else {
            return false;
        };
        let active = self.active.load(Relaxed);
        let mut was_empty = false;
        let admitted = b
            .held
            .fetch_update(Relaxed, Relaxed, |held| {
                let others = if held > 0 {
                    active.saturating_sub(1)
                } else {
                    active
                };
                let share = (self.capacity / (others + 2)).max(MIN_SHARE);
                was_empty = held == 0;
                (held < share).then_some(held + 1)
            })
            .is_ok();
        if admitted {
            if was_empty {
                self.active.fetch_add(1, Relaxed);
            }
            b.port.store(port, Relaxed);
        } else {
            b.refused.fetch_add(1, Relaxed);
        }
        admitted
    }

    /// Gives back the place of an upcall from `port` (taken off the
    /// queue, or not queued after all).
    pub fn release(&self, port: u32) {
        let Some(b) = self.bucket(port) else {
            return;
        };
        if let Ok(1) = b
            .held
            .fetch_update(Relaxed, Relaxed, |held| held.checked_sub(1))
        {
            let _ = self
                .active
                .fetch_update(Relaxed, Relaxed, |a| a.checked_sub(1));
        }
    }

    /// `(port, refused)` of every bucket that refused upcalls, by port
    /// (the last port seen in the bucket).
    pub fn refused(&self) -> Vec<(u32, u64)> {
        let mut out: Vec<(u32, u64)> = self
            .buckets
            .iter()
            .filter_map(|b| {
                let n = b.refused.load(Relaxed);
                (n > 0).then(|| (b.port.load(Relaxed), n))
            })
            .collect();
        out.sort_unstable();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_alone_takes_half_and_the_next_finds_room() {
        let s = UpcallShares::new(1024);
        let taken = (0..1024).filter(|_| s.admit(1)).count();
        assert_eq!(taken, 512);
        // With port 1 holding, port 2 may take a third of the queue.
        let taken = (0..1024).filter(|_| s.admit(2)).count();
        assert_eq!(taken, 341);
        assert_eq!(s.refused(), vec![(1, 512), (2, 683)]);
        // Port 1's upcalls taken: it may queue again; port 2 stays at its
        // share while port 1 holds upcalls.
        for _ in 0..512 {
            s.release(1);
        }
        assert_eq!(s.active.load(Relaxed), 1);
        assert!(s.admit(1));
        assert_eq!((0..1024).filter(|_| s.admit(2)).count(), 0);
    }

    #[test]
    fn shares_never_fall_below_the_minimum() {
        let s = UpcallShares::new(1024);
        for port in 0..200u32 {
            let share = (1024 / (port + 2)).clamp(MIN_SHARE, 100);
            assert_eq!(
                (0..100).filter(|_| s.admit(port)).count() as u32,
                share,
                "port {port}"
            );
        }
    }
}
