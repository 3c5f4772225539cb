//! New connections created by the XDP program, in the kernel.
//!
//! # Design
//!
//! Why: every new connection that reaches the packet thread crosses the
//! AF_XDP socket twice (about 1.1 us of the core on a veth in copy mode,
//! bench/RESULTS.md), before any conntrack or pipeline work. A stream of
//! short connections (a pod opening one UDP exchange after another) is
//! then bound by the socket, not by conntrack. The XDP program can create
//! such a connection itself when the packet thread would have created the
//! same one and done the same with the packet.
//!
//! Authority stays with conntrack's table, the connection tracker. The
//! kernel creates a connection only for a frame the packet thread would
//! have found without one and committed, and reports it; conntrack
//! stores it as if a packet thread had committed it (a UDP connection,
//! `+new` until its first reply, no mark, no label, no NAT:
//! `Conntrack::store_kernel_conn`) and from then on it is an ordinary
//! connection (its reply, expiry, flush and dump go through the table).
//! Conntrack calls this side only through its `KernelConns` trait
//! (`conntrack/kernel_conns.rs`), which [`KernelNew`] implements: the
//! fast path stands on conntrack, never the other way.
//!
//! When the kernel may create one: a packet thread installs a *template*
//! (`fastpath/cache/templates.rs`) after translating a UDP frame that was
//! `+trk+new` after `ct(table=N)` in zone Z without a connection and whose
//! next pass committed it in zone Z and output it, with nothing else done
//! (no NAT, mark or label); the template holds the mask of every header
//! bit the two passes examined. A later UDP frame that misses the flow
//! cache and equals the template under the mask translates the same way
//! as long as its tuple has no connection, since the passes read nothing
//! else: the second pass's ct fields are those of any tuple without a
//! connection in zone Z.
//!
//! "Has no connection" is decided in the kernel by `ct_slots`, an array
//! of counters mapped into this process too: each connection counts in
//! the slot of each of its tuples, taken in its canonical direction (the
//! lower address and port as the source: `slots::ct_key`) so that a
//! tuple and its reverse share a slot, hashed with a seed chosen at start:
//! - the table adds a UDP/IPv4 connection's counts when it stores it and
//!   takes them away when it removes it (`KernelConns::counted`, into
//!   `SlotCounts`), with atomic operations on the shared memory, under
//!   the tuples' shard locks: the kernel sees a connection the moment
//!   the table holds it, before any packet of it leaves;
//! - the kernel creates a connection only by claiming an empty slot
//!   (compare-and-exchange 0 to 1), which its report then stands for; a
//!   frame whose slot is taken (a connection in either direction, or one
//!   that shares the slot by chance) is the packet thread's. Slots are
//!   twice as many as connections may be: chance sharing only costs the
//!   kernel path for some new connections, never correctness.
//!
//! Reports are read from a ring (`ct_events`) every round and, whenever
//! the table is about to decide that a tuple has no connection, again
//! first (`Conntrack::kernel_drain`): a frame of a connection the kernel
//! created reaches a packet thread only after the kernel's program
//! finished with the frame that created it (frames of one tuple arrive on
//! one rx queue, whose program runs one frame at a time), so its report
//! is in the ring. A report whose tuple this table holds meanwhile (a
//! device whose queues split one tuple's frames: the frame that reached
//! the packet thread was then committed again, as an unreplied UDP
//! connection's next datagram is) is counted and dropped, and its count
//! in the slot taken back.
//!
//! The limit: the kernel creates connections only while
//! `ct_cfg[0].budget`, which `Conntrack::kernel_sync` sets to the room
//! left under the limit minus [`BUDGET_MARGIN`], is positive. At zero it
//! hands frames to the packet thread, where the table is full or nearly:
//! a commit there stores nothing and the frame goes on `+trk+new`, as
//! OVS's does. The slots are sized for the limit at start; a limit raised
//! later than that gives the kernel no more room than the start's.
//!
//! Per-port shares of the ring: see `kernel_shares.rs`.
//!
//! Known limits: UDP over IPv4 only (a TCP connection starts with a SYN
//! whose tracking state the kernel would have to build); one `ct()` fork
//! before the commit (the agent's policy pipeline, three passes with the
//! commit in the second, takes the packet thread); no NAT, mark or label
//! at the commit. A stored connection's timeout runs from its storing,
//! up to a round (100 ms when the thread is idle) after the kernel
//! created it.
//!
//! Cost: per connection the kernel creates, an atomic operation on its
//! slot and a report there, and here one record read and the table
//! insertion, off the AF_XDP path; per connection the table creates or
//! removes (UDP over IPv4 only), an atomic add on a slot (a cache miss).
//! Memory: 16 bytes per connection of the limit (two 8-byte slots), in
//! the kernel, shared.
//!
//! Concurrency: any thread may change counts (the table's writers:
//! packet threads, the sweeper, the control socket) or drain the ring;
//! reading the ring is serialised by a mutex, taken once per round and
//! per connection decided absent.

use super::kernel_shares::{PortShares, PORT_COUNTERS};
use super::slots::SlotCounts;
use crate::conntrack::{Conntrack, KernelConns, Tuple};
use crate::fastpath::handles::MappedCounters;
use flowtable::matching::IP_PROTO_UDP;
use libbpf_rs::{MapCore, MapFlags, MapHandle};
use parking_lot::Mutex;
use std::os::fd::AsFd;
use std::sync::Arc;

/// Room kept free under the limit: kernel creations between two budget
/// updates (one round) stay under it.
pub const BUDGET_MARGIN: usize = 4096;

/// `struct xbr_ct_event`: the original tuple, then the ingress ifindex
/// and template slot.
const EVENT_SIZE: usize = 24;

/// The maps the XDP program and this side share; created with the flow
/// cache's (`fastpath::cache::CacheMaps`).
pub struct KernelMaps {
    /// `ct_slots` (`BPF_F_MMAPABLE`), of `n_slots` counters.
    pub slots: MapHandle,
    pub n_slots: usize,
    pub events: MapHandle,
    pub cfg: MapHandle,
    /// `ct_ports` (`BPF_F_MMAPABLE`, `PORT_COUNTERS` counters).
    pub ports: MapHandle,
    /// Reports `events` holds.
    pub ring_reports: u64,
    /// Connections the slots were sized for.
    pub connections: usize,
}

/// The tuple a report or a key holds (a key's in its canonical
/// direction), if it is one of a connection the kernel creates.
fn event_tuple(ev: &[u8]) -> Option<Tuple> {
    let b = ev.get(..16)?;
    let u16_at = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
    let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let t = Tuple::v4(
        u16::from_ne_bytes([b[0], b[1]]),
        b[2],
        u32_at(4),
        u32_at(8),
        u16_at(12),
        u16_at(14),
    );
    (t.proto == IP_PROTO_UDP).then_some(t)
}

/// Reads the ring of reports.
struct Events {
    ring: libbpf_rs::RingBuffer<'static>,
    /// Filled by the ring's callback.
    got: Arc<Mutex<Vec<[u8; EVENT_SIZE]>>>,
}

/// Conntrack's side of the kernel's new connections.
pub struct KernelNew {
    /// Held for the ring's mapping.
    _events_map: MapHandle,
    cfg: MapHandle,
    counts: Arc<SlotCounts>,
    ports: PortShares,
    connections: usize,
    events: Mutex<Events>,
    /// The budget last written.
    budget: Mutex<Option<i64>>,
}

impl std::fmt::Debug for KernelNew {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelNew")
            .field("connections", &self.connections)
            .finish()
    }
}

impl KernelNew {
    /// Maps the slots, chooses their seed and reads the ring of reports
    /// of `maps` (the flow cache keeps its own descriptors for the
    /// programs); the kernel creates nothing until the first
    /// `Conntrack::kernel_sync` gives it a budget.
    pub fn new(maps: &KernelMaps) -> std::io::Result<KernelNew> {
        let bpf = |e: libbpf_rs::Error| std::io::Error::other(e.to_string());
        let map = MappedCounters::map(maps.slots.as_fd(), maps.n_slots)?;
        let counts = Arc::new(SlotCounts::new(
            map,
            ahash::RandomState::new().hash_one(0x6b65_726e_656cu64),
            maps.n_slots,
        ));
        let ports = PortShares::new(
            MappedCounters::map(maps.ports.as_fd(), PORT_COUNTERS)?,
            maps.ring_reports,
        );
        let events_map = MapHandle::try_from(&maps.events).map_err(bpf)?;
        let cfg = MapHandle::try_from(&maps.cfg).map_err(bpf)?;
        let got: Arc<Mutex<Vec<[u8; EVENT_SIZE]>>> = Arc::default();
        let sink = got.clone();
        let mut builder = libbpf_rs::RingBufferBuilder::new();
        builder
            .add(&events_map, move |data: &[u8]| {
                if let Some(ev) = data.get(..EVENT_SIZE) {
                    let mut rec = [0u8; EVENT_SIZE];
                    rec.copy_from_slice(ev);
                    sink.lock().push(rec);
                }
                0
            })
            .map_err(bpf)?;
        let ring = builder.build().map_err(bpf)?;
        let k = KernelNew {
            _events_map: events_map,
            cfg,
            counts,
            ports,
            connections: maps.connections,
            events: Mutex::new(Events { ring, got }),
            budget: Mutex::new(None),
        };
        k.write_cfg(0).map_err(bpf)?;
        Ok(k)
    }

    /// The ports' shares of the ring of reports.
    pub fn port_shares(&self) -> &PortShares {
        &self.ports
    }

    /// The count of `t`'s slot, if the kernel creates connections of its
    /// kind (tests and diagnostics).
    pub fn slot_count(&self, t: &Tuple) -> Option<u64> {
        self.counts.count_of(t)
    }

    /// Runs `store` on the reports in the ring, oldest first, with the
    /// ring locked: a reader who finds it empty knows every report before
    /// was stored (a dump right after a connection was created lists it).
    fn read_reports(&self, mut store: impl FnMut(&[u8; EVENT_SIZE])) {
        let ev = self.events.lock();
        if let Err(e) = ev.ring.consume() {
            tracing::warn!(error = %e, "reading the kernel's new connections");
        }
        let mut got = std::mem::take(&mut *ev.got.lock());
        for r in &got {
            // Read: out of its port's share, whatever becomes of it.
            self.ports
                .release(u32::from_ne_bytes([r[16], r[17], r[18], r[19]]));
            store(r);
        }
        got.clear();
        // The buffer goes back for the next read, so draining allocates
        // only while the rate grows.
        let mut back = ev.got.lock();
        if back.is_empty() {
            *back = got;
        }
    }

    /// `struct xbr_ct_cfg` with `budget`.
    fn write_cfg(&self, budget: i64) -> Result<(), libbpf_rs::Error> {
        let mut v = [0u8; 32];
        v[0..8].copy_from_slice(&budget.to_ne_bytes());
        let (seed, mask) = self.counts.seed_and_mask();
        v[8..16].copy_from_slice(&seed.to_ne_bytes());
        v[16..24].copy_from_slice(&mask.to_ne_bytes());
        v[24..32].copy_from_slice(&self.ports.ring_reports().to_ne_bytes());
        self.cfg.update(&0u32.to_ne_bytes(), &v, MapFlags::ANY)
    }

    /// Sets the budget to `room` (fewer connections the table may still
    /// take) less the margin, if it moved by a quarter of the margin or
    /// ran out since it was last written (the kernel counts its own
    /// creations down meanwhile).
    fn set_budget(&self, room: usize) {
        let budget = room.saturating_sub(BUDGET_MARGIN) as i64;
        let mut last = self.budget.lock();
        let due =
            last.is_none_or(|b| b.abs_diff(budget) >= BUDGET_MARGIN as u64 / 4 || budget == 0);
        if !due {
            return;
        }
        match self.write_cfg(budget) {
            Ok(()) => *last = Some(budget),
            Err(e) => tracing::warn!(error = %e, "cannot write the kernel's connection budget"),
        }
    }
}

impl KernelConns for KernelNew {
    fn counted(&self, orig: &Tuple, reply: &Tuple, stored: bool) {
        self.counts.conn(orig, reply, stored);
    }

    fn drain(&self, ct: &Conntrack) -> usize {
        let now = ct.now_ms();
        let mut stored = 0;
        self.read_reports(|r| {
            if let Some(t) = event_tuple(r) {
                stored += usize::from(ct.store_kernel_conn(&t, now));
            }
        });
        stored
    }

    fn sync(&self, ct: &Conntrack) -> usize {
        let stored = self.drain(ct);
        let cap = ct.limit().min(self.connections);
        self.set_budget(cap.saturating_sub(ct.len()));
        stored
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fastpath::ct::slots::ct_key;

    #[test]
    fn a_tuple_and_its_reverse_share_a_key() {
        let t = Tuple::v4(3, IP_PROTO_UDP, 0x0a80_0003, 0x0a80_0002, 53, 5000);
        let k = ct_key(&t).expect("UDP over IPv4");
        assert_eq!(ct_key(&t.reverse()), Some(k));
        // The lower address first.
        assert_eq!(&k[4..8], &[10, 128, 0, 2]);
        assert_eq!(&k[12..14], &5000u16.to_be_bytes());
        assert_eq!(event_tuple(&k), Some(t.reverse()));
        // Same addresses: the lower port first.
        let same = Tuple::v4(0, IP_PROTO_UDP, 7, 7, 9, 8);
        assert_eq!(ct_key(&same), ct_key(&same.reverse()));
        assert_eq!(&ct_key(&same).unwrap()[12..16], &[0, 8, 0, 9]);
        let tcp = Tuple::v4(0, flowtable::matching::IP_PROTO_TCP, 1, 2, 3, 4);
        assert_eq!(ct_key(&tcp), None, "the kernel creates UDP only");
    }
}
