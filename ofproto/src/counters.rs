//! The control plane's counters for one bridge, for xbr's metrics
//! endpoint: OpenFlow connections opened and closed, flow and group mods
//! received, bundles committed or refused, and OFPT_ERRORs sent.
//!
//! Plain relaxed atomics, bumped on the connection threads (once per
//! message or connection, never per packet) and read by whoever reports
//! them; no lock.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

#[derive(Debug, Default)]
pub struct ControlCounters {
    /// Connections served (management socket, TCP listeners, controllers).
    pub connections_opened: AtomicU64,
    /// Of those, the ones that have ended.
    pub connections_closed: AtomicU64,
    /// Flow mods applied or refused, alone or in bundles.
    pub flow_mods: AtomicU64,
    /// Group mods applied or refused, alone or in bundles.
    pub group_mods: AtomicU64,
    /// Bundles committed (all of it in force).
    pub bundles_committed: AtomicU64,
    /// Bundle commits refused (none of it in force).
    pub bundles_failed: AtomicU64,
    /// OFPT_ERROR messages sent to peers.
    pub errors_sent: AtomicU64,
}

impl ControlCounters {
    /// Connections open now.
    pub fn connections(&self) -> u64 {
        let closed = self.connections_closed.load(Relaxed);
        self.connections_opened.load(Relaxed).saturating_sub(closed)
    }

    pub(crate) fn bump(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }
}
