//! A connection's settings that its owner may change while it runs: the
//! inactivity probe interval ([`ProbeCell`]) and the packet-in limit
//! ([`LimitCell`]). OVS reconfigures a live connection when its
//! Controller row changes (an active controller's, or every connection
//! of a passive target); xbr's connection threads read these cells at
//! each message or tick, so the owner (the server, the bridge) changes
//! them without a reconnect and without reaching into the thread.
//!
//! Cost: one relaxed atomic load per message for the probe, and one for
//! the limit's generation; the limit itself is read under a mutex only
//! after it changed.

use crate::limits::PacketInLimit;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A probe interval as a Controller row gives it, `None` for zero: OVS's
/// `Controller.inactivity_probe=0` turns the probe off.
pub(crate) fn probe_or_off(interval: Duration) -> Option<Duration> {
    (!interval.is_zero()).then_some(interval)
}

/// A connection's inactivity probe interval, which its owner may change
/// while it runs (a Controller row's `inactivity_probe` changed, as OVS
/// changes it on the live connection); read at every tick. Whole
/// milliseconds; zero is no probe.
#[derive(Clone, Debug, Default)]
pub(crate) struct ProbeCell(Arc<AtomicU64>);

impl ProbeCell {
    pub(crate) fn new(probe: Option<Duration>) -> Self {
        let cell = ProbeCell::default();
        cell.set(probe);
        cell
    }

    pub(crate) fn get(&self) -> Option<Duration> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(Duration::from_millis(ms)),
        }
    }

    /// `None` turns the probe off; an interval is at least 1 ms.
    pub(crate) fn set(&self, probe: Option<Duration>) {
        let ms = probe.map_or(0, |p| {
            u64::try_from(p.as_millis()).unwrap_or(u64::MAX).max(1)
        });
        self.0.store(ms, Ordering::Relaxed);
    }
}

/// A packet-in limit its owner may change while the connections that
/// follow it run: an active controller's (OVS changes a Controller row's
/// `controller_rate_limit` on the live connection), or the passive
/// target's, followed by every connection it accepted (as OVS
/// reconfigures each connection of a service). Each connection takes a
/// change at its next message or tick; a generation number tells it one
/// happened since it last looked.
#[derive(Clone, Debug, Default)]
pub(crate) struct LimitCell(Arc<LimitCellInner>);

#[derive(Debug, Default)]
struct LimitCellInner {
    generation: AtomicU64,
    limit: Mutex<Option<PacketInLimit>>,
}

impl LimitCell {
    pub(crate) fn new(limit: Option<PacketInLimit>) -> Self {
        let cell = LimitCell::default();
        *cell.0.limit.lock() = limit;
        cell
    }

    pub(crate) fn get(&self) -> Option<PacketInLimit> {
        *self.0.limit.lock()
    }

    pub(crate) fn set(&self, limit: Option<PacketInLimit>) {
        *self.0.limit.lock() = limit;
        self.0.generation.fetch_add(1, Ordering::Release);
    }

    /// The limit now and the generation it belongs to (or a later one).
    pub(crate) fn current(&self) -> (Option<PacketInLimit>, u64) {
        let generation = self.0.generation.load(Ordering::Acquire);
        (self.get(), generation)
    }

    /// The new limit, if it was set since generation `seen` (which then
    /// moves on).
    pub(crate) fn take_change(&self, seen: &mut u64) -> Option<Option<PacketInLimit>> {
        let generation = self.0.generation.load(Ordering::Acquire);
        if generation == *seen {
            return None;
        }
        *seen = generation;
        Some(self.get())
    }
}
