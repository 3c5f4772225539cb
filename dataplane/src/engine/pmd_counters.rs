//! One packet thread's own counters (received, recirculated, sent, busy
//! and idle time): plain integers on the thread, published with its
//! snapshot when a statistics collection asks; `crate::pmd_stats` renders
//! them as `ovs-appctl dpif-netdev/pmd-stats-show` does.

use std::time::Duration;

/// One packet thread's own counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PmdCounters {
    /// Packets the thread took from its ports' receive queues.
    pub received: u64,
    /// Extra passes through the pipeline (`ct(table=N)`).
    pub recirculations: u64,
    /// Frames parsed into a flow key: one per received packet and
    /// PACKET_OUT, plus one for each stage that needed the headers after
    /// an action rewrote them (NAT, or a set_field before a `ct()` or a
    /// tunnel output). Not shown by `pmd-stats-show` (OVS has no such
    /// line); tests and benchmarks read it.
    pub parses: u64,
    /// Packets and batches handed to the ports' transmit paths.
    pub sent_packets: u64,
    pub sent_batches: u64,
    /// Time in rounds that found work, and in rounds (and sleeps) that
    /// did not.
    pub busy_ns: u64,
    pub idle_ns: u64,
}

impl PmdCounters {
    /// Adds one loop iteration's time, busy or idle.
    pub fn account(&mut self, busy: bool, spent: Duration) {
        let ns = u64::try_from(spent.as_nanos()).unwrap_or(u64::MAX);
        if busy {
            self.busy_ns = self.busy_ns.saturating_add(ns);
        } else {
            self.idle_ns = self.idle_ns.saturating_add(ns);
        }
    }

    /// Adds another thread's counters.
    pub fn merge(&mut self, o: &PmdCounters) {
        self.received += o.received;
        self.recirculations += o.recirculations;
        self.parses += o.parses;
        self.sent_packets += o.sent_packets;
        self.sent_batches += o.sent_batches;
        self.busy_ns += o.busy_ns;
        self.idle_ns += o.idle_ns;
    }
}
