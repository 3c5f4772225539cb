//! The seam between the OpenFlow control plane and the packet thread.
//!
//! # Design
//!
//! The control plane (ofproto connection threads) owns the authoritative
//! `FlowTables`; the packet thread owns a `Pipeline` replica. Every flow or
//! group change becomes a list of `Change`s, sent here with a sequence number
//! over a channel. The packet thread drains the channel between batches, so a
//! batch of packets always sees one consistent table and never takes a lock
//! per packet; an ONF bundle commit arrives as one list and is applied in one
//! step (atomic for packets).
//!
//! Barriers: `sync(seq)` blocks until the packet thread reports that it has
//! applied `seq`. The packet thread may be asleep in `poll(2)`, so `publish`
//! also writes an eventfd that is part of its poll set.
//!
//! Several packet threads: each has its own end ([`ChangeReceiver`],
//! numbered from 0), its own channel and eventfd. A change list is
//! published to every one (shared, not copied), and a barrier, a
//! statistics collection or start-up waits for the slowest; what the
//! threads publish about themselves is kept per thread and summed when
//! read. PACKET_OUTs are run by thread 0 alone (it hands an output to
//! another thread's port like any of its own packets).
//!
//! Controller traffic: a PACKET_OUT is queued here (bounded) for the
//! packet thread, which runs it between batches; packets for the
//! controllers (`controller` action) go the other way through a bounded
//! queue to the bridge's upcall thread. Both are slow paths: a full queue
//! drops and counts rather than blocking either side.
//!
//! Port counters are written only by the packet thread (plain stores of its
//! private running totals once per batch) and read by the control plane.

mod datapath;
mod port;
#[cfg(test)]
mod tests;
pub mod upcall_shares;

use crate::fastpath::cache::XdpGen;
use crossbeam::channel::{Receiver, Sender};
use flowtable::tables::Change;
use flowtable::Action;
use nix::sys::eventfd::{EfdFlags, EventFd};
use parking_lot::{Condvar, Mutex, RwLock};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

pub use port::{port_config, PortMeta, PortStats};

/// Sequence numbers of published and applied change lists.
struct SeqState {
    published: u64,
    /// Per packet thread: the last change list it applied.
    applied: Vec<u64>,
    /// Per packet thread: it has given its ports' fill rings their frames.
    running: Vec<bool>,
}

impl SeqState {
    /// The last change list every packet thread applied.
    fn applied(&self) -> u64 {
        self.applied.iter().copied().min().unwrap_or(u64::MAX)
    }
}

/// What one packet thread has and says, apart from the sequence numbers.
struct EngineSlot {
    changes: Sender<(u64, Arc<[Change]>)>,
    waker: EventFd,
    /// What it last said about itself (`xbr stats`, metrics). The packet
    /// thread only ever `try_lock`s it (and publishes a round later when a
    /// reader holds it), so reading statistics never makes it wait.
    snapshot: Mutex<EngineSnapshot>,
    /// The last statistics collection it finished (an atomic, so that
    /// marking one takes no lock a reader could hold).
    stats_done: AtomicU64,
    /// NORMAL's stations as it last listed them, and the requests for its
    /// next statistics collection: list them, forget them (`fdb/show`,
    /// `fdb/flush`).
    fdb: Mutex<Vec<crate::normal::Station>>,
    fdb_list: AtomicBool,
    fdb_flush: AtomicBool,
}

/// Shared state between ofproto (through [`ofproto::Datapath`]) and the packet thread.
pub struct DpShared {
    datapath_id: u64,
    /// The bridge's ports as the control plane sees them; changed only by
    /// live port add/remove (`crate::live`), read by OpenFlow requests.
    ports: RwLock<Vec<Arc<PortMeta>>>,
    /// The packet threads, by number.
    engines: Vec<EngineSlot>,
    seq: Mutex<SeqState>,
    applied: Condvar,
    packet_outs: Sender<PacketOutRequest>,
    upcalls: Receiver<Upcall>,
    upcall_shares: Arc<upcall_shares::UpcallShares>,
    /// Standalone mode without a controller: forward by NORMAL.
    fail_open: AtomicBool,
    /// OVSDB's `other_config:flow-restore-wait` is true: the packet
    /// threads drop what they receive (see [`DpShared::set_restore_wait`]).
    restore_wait: AtomicBool,
    /// The XDP flow cache's generation, when the cache is on: bumped on
    /// port and fail-mode changes before they are acknowledged.
    xdp_gen: OnceLock<Arc<XdpGen>>,
    /// Statistics collections requested (see `Datapath::collect_stats`).
    stats_requested: AtomicU64,
    /// Port mirrors (OVSDB's and `xbr capture`'s), read by the packet
    /// threads once per change.
    mirrors: crate::mirror::Mirrors,
}

/// A packet thread's own counters as it last published them (on the
/// last statistics collection): its drops by reason and its caches'
/// statistics; or the sum of every thread's ([`EngineSnapshot::merge`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct EngineSnapshot {
    pub drops: crate::engine::drops::EngineDrops,
    pub pmd: crate::engine::pmd_counters::PmdCounters,
    /// `None` when the translation cache is off.
    pub flow_cache: Option<flowtable::cache::CacheStats>,
    /// `None` when the XDP flow cache is off.
    pub xdp_cache: Option<crate::fastpath::cache::XdpCacheStats>,
    /// When it was published; `None` before the first time.
    pub at: Option<Instant>,
}

impl EngineSnapshot {
    /// Adds `other`'s counts (another packet thread's); `at` becomes the
    /// older of the two, as the sum is as old as its oldest part.
    pub fn merge(&mut self, other: &EngineSnapshot) {
        self.drops.merge(&other.drops);
        self.pmd.merge(&other.pmd);
        self.flow_cache = match (self.flow_cache, other.flow_cache) {
            (Some(mut a), Some(b)) => {
                a.merge(&b);
                Some(a)
            }
            (a, b) => a.or(b),
        };
        self.xdp_cache = match (self.xdp_cache, other.xdp_cache) {
            (Some(mut a), Some(b)) => {
                a.merge(&b);
                Some(a)
            }
            (a, b) => a.or(b),
        };
        self.at = match (self.at, other.at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            _ => None,
        };
    }
}

/// A controller's packet to inject (PACKET_OUT).
pub struct PacketOutRequest {
    pub in_port: u32,
    /// Pipeline fields the packet starts with (OpenFlow 1.5).
    pub metadata: Vec<(flowtable::Field, u64)>,
    pub actions: Vec<Action>,
    pub data: Vec<u8>,
}

/// A packet for the controllers (`controller` action).
pub struct Upcall {
    pub in_port: u32,
    pub tun_id: u64,
    pub reason: u8,
    pub table_id: u8,
    pub cookie: u64,
    /// Length of the whole packet; `data` may be cut to the action's
    /// max_len.
    pub total_len: u16,
    pub data: Vec<u8>,
}

/// Queue bounds: PACKET_OUTs waiting for the packet thread, packets
/// waiting for the controllers.
const PACKET_OUT_QUEUE: usize = 1024;
const UPCALL_QUEUE: usize = 1024;
/// Largest PACKET_OUT payload: what fits a jumbo block after the packet
/// thread's headroom for pushed headers (larger ones are refused with
/// OFPBRC_BAD_LEN). One that fits no frame waits for a free block, and is
/// dropped and counted as `packet_out_too_big` if none is.
pub const MAX_PACKET_OUT: usize =
    (crate::xsk::JUMBO_BLOCK - crate::xsk::XDP_PACKET_HEADROOM) as usize;

/// A packet thread's end of the channels to and from the control plane.
pub struct ChangeReceiver {
    /// The thread's number (its slot in `DpShared`).
    engine: usize,
    rx: Receiver<(u64, Arc<[Change]>)>,
    /// Thread 0's; `None` for the others.
    packet_outs: Option<Receiver<PacketOutRequest>>,
    upcalls: Sender<Upcall>,
    upcall_shares: Arc<upcall_shares::UpcallShares>,
}

impl ChangeReceiver {
    /// The packet thread's number, for the `DpShared` calls it makes.
    pub fn engine(&self) -> usize {
        self.engine
    }

    /// Non-blocking: the next change list, if any.
    pub fn try_next(&self) -> Option<(u64, Arc<[Change]>)> {
        self.rx.try_recv().ok()
    }

    /// Non-blocking: the next PACKET_OUT to run, if any (always `None`
    /// but for thread 0).
    pub fn try_packet_out(&self) -> Option<PacketOutRequest> {
        self.packet_outs.as_ref()?.try_recv().ok()
    }

    /// Queues a packet for the controllers; `false` (dropped) when its
    /// port holds its share of the queue (`upcall_shares.rs`), the queue
    /// is full or nobody listens.
    pub fn upcall(&self, u: Upcall) -> bool {
        let port = u.in_port;
        if !self.upcall_shares.admit(port) {
            return false;
        }
        let queued = self.upcalls.try_send(u).is_ok();
        if !queued {
            self.upcall_shares.release(port);
        }
        queued
    }
}

/// How long a barrier waits for the packet thread before giving up (it only
/// times out if the packet thread is wedged, which is logged).
const SYNC_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound on waiting for the packet thread to collect the XDP flow cache's
/// counters before a statistics reply.
const STATS_TIMEOUT: Duration = Duration::from_millis(500);
/// How often a statistics reader looks whether the collection is done.
const STATS_POLL: Duration = Duration::from_millis(1);

impl DpShared {
    /// The control plane of a datapath with one packet thread.
    pub fn new(
        datapath_id: u64,
        ports: Vec<Arc<PortMeta>>,
    ) -> Result<(Arc<DpShared>, ChangeReceiver), nix::Error> {
        let (shared, mut ends) = DpShared::with_engines(datapath_id, ports, 1)?;
        Ok((shared, ends.pop().expect("one packet thread")))
    }

    /// The control plane of a datapath with `engines` packet threads (at
    /// least one), and each thread's end, by number.
    pub fn with_engines(
        datapath_id: u64,
        ports: Vec<Arc<PortMeta>>,
        engines: usize,
    ) -> Result<(Arc<DpShared>, Vec<ChangeReceiver>), nix::Error> {
        let engines = engines.max(1);
        let (po_tx, po_rx) = crossbeam::channel::bounded(PACKET_OUT_QUEUE);
        let (up_tx, up_rx) = crossbeam::channel::bounded(UPCALL_QUEUE);
        let shares = Arc::new(upcall_shares::UpcallShares::new(UPCALL_QUEUE));
        let mut slots = Vec::with_capacity(engines);
        let mut ends = Vec::with_capacity(engines);
        for engine in 0..engines {
            let (tx, rx) = crossbeam::channel::unbounded();
            slots.push(EngineSlot {
                changes: tx,
                waker: EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)?,
                snapshot: Mutex::default(),
                stats_done: AtomicU64::new(0),
                fdb: Mutex::new(Vec::new()),
                fdb_list: AtomicBool::new(false),
                fdb_flush: AtomicBool::new(false),
            });
            ends.push(ChangeReceiver {
                engine,
                rx,
                packet_outs: (engine == 0).then(|| po_rx.clone()),
                upcalls: up_tx.clone(),
                upcall_shares: shares.clone(),
            });
        }
        let shared = Arc::new(DpShared {
            datapath_id,
            ports: RwLock::new(ports),
            engines: slots,
            seq: Mutex::new(SeqState {
                published: 0,
                applied: vec![0; engines],
                running: vec![false; engines],
            }),
            applied: Condvar::new(),
            packet_outs: po_tx,
            upcalls: up_rx,
            upcall_shares: shares,
            fail_open: AtomicBool::new(false),
            restore_wait: AtomicBool::new(false),
            xdp_gen: OnceLock::new(),
            stats_requested: AtomicU64::new(0),
            mirrors: Default::default(),
        });
        Ok((shared, ends))
    }

    /// The number of packet threads.
    pub fn engines(&self) -> usize {
        self.engines.len()
    }

    pub fn ports(&self) -> Vec<Arc<PortMeta>> {
        self.ports.read().clone()
    }

    /// Lists a port the packet thread has been (or is about to be) given.
    pub fn insert_port(&self, meta: Arc<PortMeta>) {
        self.ports.write().push(meta);
    }

    /// Forgets the port numbered `ofport`; returns it if it was there.
    pub fn remove_port(&self, ofport: u32) -> Option<Arc<PortMeta>> {
        let mut ports = self.ports.write();
        let i = ports.iter().position(|p| p.ofport == ofport)?;
        Some(ports.remove(i))
    }

    /// Makes port and fail-mode changes invalidate the XDP flow cache
    /// whose generation `gen` is (set once, before serving OpenFlow).
    pub fn set_xdp_gen(&self, gen: Arc<XdpGen>) {
        let _ = self.xdp_gen.set(gen);
    }

    /// Packet thread: the latest statistics collection requested.
    pub fn stats_requested(&self) -> u64 {
        self.stats_requested.load(Relaxed)
    }

    /// Packet thread `engine`: collections up to `n` are done.
    pub fn mark_stats_collected(&self, engine: usize, n: u64) {
        self.engines[engine]
            .stats_done
            .fetch_max(n, std::sync::atomic::Ordering::Release);
    }

    /// Packet thread `engine`: every port it polls can receive now.
    pub fn mark_running(&self, engine: usize) {
        self.seq.lock().running[engine] = true;
        self.applied.notify_all();
    }

    /// Waits (at most `timeout`) until every packet thread has given its
    /// ports' fill rings their frames: until then the kernel drops what
    /// the ports' XDP programs hand to their sockets. False on timeout.
    pub fn wait_running(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut s = self.seq.lock();
        while !s.running.iter().all(|&r| r) {
            if self.applied.wait_until(&mut s, deadline).timed_out() {
                return false;
            }
        }
        true
    }

    /// Packet thread `engine`: publishes its counters, unless a reader
    /// holds them this instant (then it returns false and the thread
    /// publishes at its next round: it never waits for a reader).
    pub fn publish_engine(&self, engine: usize, snapshot: EngineSnapshot) -> bool {
        match self.engines[engine].snapshot.try_lock() {
            Some(mut s) => {
                *s = snapshot;
                true
            }
            None => false,
        }
    }

    /// Every packet thread's counters, summed: collected now if they
    /// answer within the statistics timeout, else as last published.
    pub fn engine_snapshot(&self) -> EngineSnapshot {
        self.collect_now();
        let mut sum = *self.engines[0].snapshot.lock();
        for e in &self.engines[1..] {
            sum.merge(&e.snapshot.lock());
        }
        sum
    }

    /// Each packet thread's counters, collected as [`Self::engine_snapshot`]
    /// collects them.
    pub fn engine_snapshots(&self) -> Vec<EngineSnapshot> {
        self.collect_now();
        self.engines.iter().map(|e| *e.snapshot.lock()).collect()
    }

    /// The stations NORMAL has learned (`ovs-appctl fdb/show`), as the
    /// packet threads list them at a statistics collection (each thread
    /// learns from what it receives; a station several learned is listed
    /// once, as the thread that saw it last has it).
    pub fn fdb(&self) -> Vec<crate::normal::Station> {
        for e in &self.engines {
            e.fdb_list.store(true, Relaxed);
        }
        self.collect_now();
        let mut all: Vec<crate::normal::Station> = Vec::new();
        for e in &self.engines {
            all.extend(e.fdb.lock().iter().cloned());
        }
        crate::normal::Station::dedup_youngest(&mut all);
        all
    }

    /// Makes NORMAL forget every station (`ovs-appctl fdb/flush`), at a
    /// statistics collection, and waits for it.
    pub fn fdb_flush(&self) {
        for e in &self.engines {
            e.fdb_flush.store(true, Relaxed);
        }
        self.collect_now();
    }

    /// Packet thread `engine`, at a statistics collection: whether to
    /// empty NORMAL's table and whether to list it (each asked once).
    pub fn take_fdb_requests(&self, engine: usize) -> (bool, bool) {
        let e = &self.engines[engine];
        (
            e.fdb_flush.swap(false, Relaxed),
            e.fdb_list.swap(false, Relaxed),
        )
    }

    /// Packet thread `engine`: NORMAL's stations, listed.
    pub fn publish_fdb(&self, engine: usize, stations: Vec<crate::normal::Station>) {
        *self.engines[engine].fdb.lock() = stations;
    }

    /// Asks the packet threads to collect their counters and waits (at
    /// most STATS_TIMEOUT) until they all did.
    fn collect_now(&self) {
        let target = self.stats_requested.fetch_add(1, Relaxed) + 1;
        self.wake();
        let deadline = Instant::now() + STATS_TIMEOUT;
        // Polled, not signalled: the packet threads mark a collection with
        // an atomic store and take no lock a reader could hold. A
        // collection takes a round or a sweep pass; 1 ms steps cost the
        // reader little and the packet threads nothing.
        let done = || {
            self.engines
                .iter()
                .all(|e| e.stats_done.load(std::sync::atomic::Ordering::Acquire) >= target)
        };
        while !done() {
            if Instant::now() >= deadline {
                tracing::debug!("statistics collection timed out; replying with older counts");
                return;
            }
            std::thread::sleep(STATS_POLL);
        }
    }

    fn invalidate_xdp_cache(&self) {
        if let Some(g) = self.xdp_gen.get() {
            g.bump();
        }
    }

    /// The eventfd packet thread `engine` polls to wake up for changes.
    pub fn waker_fd(&self, engine: usize) -> BorrowedFd<'_> {
        self.engines[engine].waker.as_fd()
    }

    /// Wakes every packet thread that sleeps (changes or shutdown pending).
    pub fn wake(&self) {
        for e in &self.engines {
            // EAGAIN means the counter is already non-zero: it is awake.
            let _ = e.waker.write(1);
        }
    }

    /// Wakes packet thread `engine` if it sleeps.
    pub fn wake_engine(&self, engine: usize) {
        // EAGAIN means the counter is already non-zero: it is awake.
        let _ = self.engines[engine].waker.write(1);
    }

    /// Packet thread `engine`: clears its wakeup eventfd.
    pub fn drain_waker(&self, engine: usize) {
        // EAGAIN just means nothing was pending.
        let _ = self.engines[engine].waker.read();
    }

    /// Packet thread `engine`: everything up to `seq` is now in its
    /// replica.
    pub fn mark_applied(&self, engine: usize, seq: u64) {
        let mut s = self.seq.lock();
        if seq > s.applied[engine] {
            s.applied[engine] = seq;
            self.applied.notify_all();
        }
    }

    /// Packet thread: whether to forward everything by NORMAL.
    pub fn fail_open(&self) -> bool {
        self.fail_open.load(Relaxed)
    }

    /// `flow-restore-wait`, as ovs-vswitchd has it: while on, nothing
    /// that reaches the packet threads is forwarded (ovs-vswitchd does
    /// not read its datapath's upcalls): the tables are being restored
    /// and may be empty or partial. What the XDP flow cache already
    /// holds keeps forwarding, as the kernel datapath's flows do. Turned
    /// off, the cache is invalidated, so every entry is revalidated
    /// against the restored tables (ovs-vswitchd flushes its datapath's
    /// flows then).
    pub fn set_restore_wait(&self, on: bool) {
        if self.restore_wait.swap(on, Relaxed) && !on {
            self.invalidate_xdp_cache();
        }
    }

    /// The bridge's port mirrors.
    pub fn mirrors(&self) -> &crate::mirror::Mirrors {
        &self.mirrors
    }

    /// Ends `flow-restore-wait` without invalidating the XDP flow cache:
    /// for a take-over that checks every entry instead
    /// (`RunningBridge::set_restore_wait`).
    pub fn end_restore_wait_keeping_cache(&self) {
        self.restore_wait.store(false, Relaxed);
    }

    /// Packet thread: whether to drop what it receives (see
    /// [`DpShared::set_restore_wait`]).
    pub fn restore_wait(&self) -> bool {
        self.restore_wait.load(Relaxed)
    }

    /// Packets for the controllers; disconnected once the packet thread
    /// is gone. Whoever takes one gives its port's place back
    /// ([`DpShared::upcall_shares`]).
    pub fn upcalls(&self) -> Receiver<Upcall> {
        self.upcalls.clone()
    }

    /// The ports' shares of the upcall queue.
    pub fn upcall_shares(&self) -> &Arc<upcall_shares::UpcallShares> {
        &self.upcall_shares
    }

    fn port(&self, port_no: u32) -> Option<Arc<PortMeta>> {
        self.ports
            .read()
            .iter()
            .find(|p| p.ofport == port_no)
            .cloned()
    }
}
