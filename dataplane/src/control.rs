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
//! Controller traffic: a PACKET_OUT is queued here (bounded) for the
//! packet thread, which runs it between batches; packets for the
//! controllers (`controller` action) go the other way through a bounded
//! queue to the bridge's upcall thread. Both are slow paths: a full queue
//! drops and counts rather than blocking either side.
//!
//! Port counters are written only by the packet thread (plain stores of its
//! private running totals once per batch) and read by the control plane.

use crate::xdpcache::XdpGen;
use crossbeam::channel::{Receiver, Sender};
use flowtable::tables::Change;
use flowtable::Action;
use nix::sys::eventfd::{EfdFlags, EventFd};
use ofproto::{Datapath, PacketOutError, PortCounters, PortInfo, PortModError};
use parking_lot::{Condvar, Mutex, RwLock};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// OFPPC_* port config bits xbr honours.
pub mod port_config {
    pub const PORT_DOWN: u32 = 1 << 0;
    pub const NO_RECV: u32 = 1 << 2;
    pub const NO_FWD: u32 = 1 << 5;
    pub const NO_PACKET_IN: u32 = 1 << 6;
    pub const ALL: u32 = PORT_DOWN | NO_RECV | NO_FWD | NO_PACKET_IN;
}

/// OFPPS_LIVE and OFPPS_LINK_DOWN.
const OFPPS_LINK_DOWN: u32 = 1 << 0;
const OFPPS_LIVE: u32 = 1 << 2;

/// Counters of one port, published by the packet thread.
#[derive(Default)]
pub struct PortStats {
    pub rx_packets: AtomicU64,
    pub rx_bytes: AtomicU64,
    pub rx_dropped: AtomicU64,
    pub tx_packets: AtomicU64,
    pub tx_bytes: AtomicU64,
    pub tx_dropped: AtomicU64,
    pub rx_errors: AtomicU64,
    pub tx_errors: AtomicU64,
}

/// What the control plane knows about a port; shared with the packet thread.
pub struct PortMeta {
    pub ofport: u32,
    pub name: String,
    pub hw_addr: [u8; 6],
    /// OFPPC_* bits, set by PORT_MOD, read by the packet thread per batch.
    pub config: AtomicU32,
    pub stats: PortStats,
    pub created: Instant,
    /// Rate limits, set by the control plane (OVSDB), read per round.
    pub qos: crate::qos::QosConfig,
    /// What backs the port, as `ovs-appctl dpif/show` gives a netdev's
    /// type and configuration: `afxdp`, `tap`, `internal` (a veth pair),
    /// `vxlan: dst_port=4789, ...`; empty when not said.
    pub kind: String,
}

impl PortMeta {
    pub fn new(ofport: u32, name: String, hw_addr: [u8; 6]) -> Self {
        PortMeta {
            ofport,
            name,
            hw_addr,
            config: AtomicU32::new(0),
            stats: PortStats::default(),
            created: Instant::now(),
            qos: Default::default(),
            kind: String::new(),
        }
    }

    /// The port, said to be backed by `kind` (see the field).
    pub fn with_kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = kind.into();
        self
    }
}

impl PortMeta {
    /// The port as OpenFlow describes it (features, PORT_STATUS).
    pub fn info(&self) -> PortInfo {
        let config = self.config.load(Relaxed);
        let down = config & port_config::PORT_DOWN != 0;
        PortInfo {
            port_no: self.ofport,
            hw_addr: self.hw_addr,
            name: self.name.clone(),
            config,
            state: if down { OFPPS_LINK_DOWN } else { OFPPS_LIVE },
            curr_speed: 10_000_000,
            max_speed: 0,
        }
    }
}

/// Sequence numbers of published and applied change lists.
struct SeqState {
    published: u64,
    applied: u64,
    /// The last statistics collection the packet thread finished.
    stats_done: u64,
    /// The packet thread has given every port's fill ring its frames.
    running: bool,
}

/// Shared state between ofproto (through [`Datapath`]) and the packet thread.
pub struct DpShared {
    datapath_id: u64,
    /// The bridge's ports as the control plane sees them; changed only by
    /// live port add/remove (`crate::live`), read by OpenFlow requests.
    ports: RwLock<Vec<Arc<PortMeta>>>,
    changes: Sender<(u64, Vec<Change>)>,
    seq: Mutex<SeqState>,
    applied: Condvar,
    waker: EventFd,
    packet_outs: Sender<PacketOutRequest>,
    upcalls: Receiver<Upcall>,
    /// Standalone mode without a controller: forward by NORMAL.
    fail_open: AtomicBool,
    /// The XDP flow cache's generation, when the cache is on: bumped on
    /// port and fail-mode changes before they are acknowledged.
    xdp_gen: OnceLock<Arc<XdpGen>>,
    /// Statistics collections requested (see `Datapath::collect_stats`).
    stats_requested: AtomicU64,
    /// What the packet thread last said about itself (`xbr stats`).
    engine: Mutex<EngineSnapshot>,
    /// NORMAL's stations as the packet thread last listed them, and the
    /// requests for its next statistics collection: list them, forget
    /// them (`fdb/show`, `fdb/flush`).
    fdb: Mutex<Vec<crate::normal::Station>>,
    fdb_list: AtomicBool,
    fdb_flush: AtomicBool,
}

/// The packet thread's own counters as it last published them (on the
/// last statistics collection): its drops by reason and its caches'
/// statistics.
#[derive(Clone, Copy, Debug, Default)]
pub struct EngineSnapshot {
    pub drops: crate::engine::EngineDrops,
    /// `None` when the translation cache is off.
    pub flow_cache: Option<flowtable::cache::CacheStats>,
    /// `None` when the XDP flow cache is off.
    pub xdp_cache: Option<crate::xdpcache::XdpCacheStats>,
    /// When it was published; `None` before the first time.
    pub at: Option<Instant>,
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

/// The packet thread's end of the channels to and from the control plane.
pub struct ChangeReceiver {
    rx: Receiver<(u64, Vec<Change>)>,
    packet_outs: Receiver<PacketOutRequest>,
    upcalls: Sender<Upcall>,
}

impl ChangeReceiver {
    /// Non-blocking: the next change list, if any.
    pub fn try_next(&self) -> Option<(u64, Vec<Change>)> {
        self.rx.try_recv().ok()
    }

    /// Non-blocking: the next PACKET_OUT to run, if any.
    pub fn try_packet_out(&self) -> Option<PacketOutRequest> {
        self.packet_outs.try_recv().ok()
    }

    /// Queues a packet for the controllers; `false` (dropped) when the
    /// queue is full or nobody listens.
    pub fn upcall(&self, u: Upcall) -> bool {
        self.upcalls.try_send(u).is_ok()
    }
}

/// How long a barrier waits for the packet thread before giving up (it only
/// times out if the packet thread is wedged, which is logged).
const SYNC_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound on waiting for the packet thread to collect the XDP flow cache's
/// counters before a statistics reply.
const STATS_TIMEOUT: Duration = Duration::from_millis(500);

impl DpShared {
    pub fn new(
        datapath_id: u64,
        ports: Vec<Arc<PortMeta>>,
    ) -> Result<(Arc<DpShared>, ChangeReceiver), nix::Error> {
        let (tx, rx) = crossbeam::channel::unbounded();
        let (po_tx, po_rx) = crossbeam::channel::bounded(PACKET_OUT_QUEUE);
        let (up_tx, up_rx) = crossbeam::channel::bounded(UPCALL_QUEUE);
        let waker = EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)?;
        let shared = Arc::new(DpShared {
            datapath_id,
            ports: RwLock::new(ports),
            changes: tx,
            seq: Mutex::new(SeqState {
                published: 0,
                applied: 0,
                stats_done: 0,
                running: false,
            }),
            applied: Condvar::new(),
            waker,
            packet_outs: po_tx,
            upcalls: up_rx,
            fail_open: AtomicBool::new(false),
            xdp_gen: OnceLock::new(),
            stats_requested: AtomicU64::new(0),
            fdb: Mutex::new(Vec::new()),
            fdb_list: AtomicBool::new(false),
            fdb_flush: AtomicBool::new(false),
            engine: Mutex::default(),
        });
        Ok((
            shared,
            ChangeReceiver {
                rx,
                packet_outs: po_rx,
                upcalls: up_tx,
            },
        ))
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

    /// Packet thread: collections up to `n` are done.
    pub fn mark_stats_collected(&self, n: u64) {
        let mut s = self.seq.lock();
        if n > s.stats_done {
            s.stats_done = n;
            self.applied.notify_all();
        }
    }

    /// Packet thread: every port can receive now.
    pub fn mark_running(&self) {
        self.seq.lock().running = true;
        self.applied.notify_all();
    }

    /// Waits (at most `timeout`) until the packet thread has given every
    /// port's fill ring its frames: until then the kernel drops what the
    /// ports' XDP programs hand to their sockets. False on timeout.
    pub fn wait_running(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut s = self.seq.lock();
        while !s.running {
            if self.applied.wait_until(&mut s, deadline).timed_out() {
                return false;
            }
        }
        true
    }

    /// Packet thread: publishes its counters.
    pub fn publish_engine(&self, snapshot: EngineSnapshot) {
        *self.engine.lock() = snapshot;
    }

    /// The packet thread's counters, collected now if it answers within
    /// the statistics timeout, else as it last published them.
    pub fn engine_snapshot(&self) -> EngineSnapshot {
        self.collect_now();
        *self.engine.lock()
    }

    /// The stations NORMAL has learned (`ovs-appctl fdb/show`), as the
    /// packet thread lists them at a statistics collection.
    pub fn fdb(&self) -> Vec<crate::normal::Station> {
        self.fdb_list.store(true, Relaxed);
        self.collect_now();
        self.fdb.lock().clone()
    }

    /// Makes NORMAL forget every station (`ovs-appctl fdb/flush`), at a
    /// statistics collection, and waits for it.
    pub fn fdb_flush(&self) {
        self.fdb_flush.store(true, Relaxed);
        self.collect_now();
    }

    /// Packet thread, at a statistics collection: whether to empty
    /// NORMAL's table and whether to list it (each asked once).
    pub fn take_fdb_requests(&self) -> (bool, bool) {
        (
            self.fdb_flush.swap(false, Relaxed),
            self.fdb_list.swap(false, Relaxed),
        )
    }

    /// Packet thread: NORMAL's stations, listed.
    pub fn publish_fdb(&self, stations: Vec<crate::normal::Station>) {
        *self.fdb.lock() = stations;
    }

    /// Asks the packet thread to collect its counters and waits (at most
    /// STATS_TIMEOUT) until it did.
    fn collect_now(&self) {
        let target = self.stats_requested.fetch_add(1, Relaxed) + 1;
        self.wake();
        let deadline = Instant::now() + STATS_TIMEOUT;
        let mut s = self.seq.lock();
        while s.stats_done < target {
            if self.applied.wait_until(&mut s, deadline).timed_out() {
                tracing::debug!("statistics collection timed out; replying with older counts");
                return;
            }
        }
    }

    fn invalidate_xdp_cache(&self) {
        if let Some(g) = self.xdp_gen.get() {
            g.bump();
        }
    }

    /// The eventfd the packet thread polls to wake up for changes.
    pub fn waker_fd(&self) -> BorrowedFd<'_> {
        self.waker.as_fd()
    }

    /// Wakes the packet thread if it sleeps (changes or shutdown pending).
    pub fn wake(&self) {
        // EAGAIN means the counter is already non-zero: it is awake anyway.
        let _ = self.waker.write(1);
    }

    /// Packet thread: clears the wakeup eventfd.
    pub fn drain_waker(&self) {
        // EAGAIN just means nothing was pending.
        let _ = self.waker.read();
    }

    /// Packet thread: everything up to `seq` is now in its replica.
    pub fn mark_applied(&self, seq: u64) {
        let mut s = self.seq.lock();
        if seq > s.applied {
            s.applied = seq;
            self.applied.notify_all();
        }
    }

    /// Packet thread: whether to forward everything by NORMAL.
    pub fn fail_open(&self) -> bool {
        self.fail_open.load(Relaxed)
    }

    /// Packets for the controllers; disconnected once the packet thread
    /// is gone.
    pub fn upcalls(&self) -> Receiver<Upcall> {
        self.upcalls.clone()
    }

    fn port(&self, port_no: u32) -> Option<Arc<PortMeta>> {
        self.ports
            .read()
            .iter()
            .find(|p| p.ofport == port_no)
            .cloned()
    }
}

impl Datapath for DpShared {
    fn datapath_id(&self) -> u64 {
        self.datapath_id
    }

    fn ports(&self) -> Vec<PortInfo> {
        self.ports.read().iter().map(|p| p.info()).collect()
    }

    fn port_stats(&self, port_no: u32) -> Vec<PortCounters> {
        self.ports
            .read()
            .iter()
            .filter(|p| port_no == flowtable::action::port::ANY || p.ofport == port_no)
            .map(|p| {
                let s = &p.stats;
                PortCounters {
                    port_no: p.ofport,
                    rx_packets: s.rx_packets.load(Relaxed),
                    tx_packets: s.tx_packets.load(Relaxed),
                    rx_bytes: s.rx_bytes.load(Relaxed),
                    tx_bytes: s.tx_bytes.load(Relaxed),
                    rx_dropped: s.rx_dropped.load(Relaxed),
                    tx_dropped: s.tx_dropped.load(Relaxed),
                    rx_errors: s.rx_errors.load(Relaxed),
                    tx_errors: s.tx_errors.load(Relaxed),
                    duration: p.created.elapsed(),
                }
            })
            .collect()
    }

    fn port_mod(
        &self,
        port_no: u32,
        hw_addr: [u8; 6],
        config: u32,
        mask: u32,
    ) -> Result<(), PortModError> {
        let port = self.port(port_no).ok_or(PortModError::BadPort)?;
        if port.hw_addr != hw_addr {
            return Err(PortModError::BadHwAddr);
        }
        if mask & !port_config::ALL != 0 {
            return Err(PortModError::Failed(format!(
                "port config bits {:#x} are not supported",
                mask & !port_config::ALL
            )));
        }
        let old = port.config.load(Relaxed);
        port.config.store((old & !mask) | (config & mask), Relaxed);
        // After the store (XdpGen publishes with Release), before the
        // reply: no XDP cache entry made under the old config is used
        // once the controller hears back.
        self.invalidate_xdp_cache();
        Ok(())
    }

    fn publish(&self, changes: Vec<Change>) -> u64 {
        let mut s = self.seq.lock();
        s.published += 1;
        let seq = s.published;
        if changes.is_empty() {
            // Nothing for the packet thread; count it as applied so a later
            // barrier does not wait for it.
            if s.applied + 1 == seq {
                s.applied = seq;
            }
        }
        // Sending under the lock keeps the channel in sequence order.
        if self.changes.send((seq, changes)).is_err() {
            tracing::error!("packet thread is gone; pipeline change {seq} not applied");
        }
        drop(s);
        self.wake();
        seq
    }

    fn sync(&self, seq: u64) {
        let deadline = Instant::now() + SYNC_TIMEOUT;
        let mut s = self.seq.lock();
        while s.applied < seq {
            if self.applied.wait_until(&mut s, deadline).timed_out() {
                tracing::error!(
                    "barrier: packet thread has not applied change {seq} after {:?} (at {})",
                    SYNC_TIMEOUT,
                    s.applied
                );
                return;
            }
        }
    }

    fn packet_out(
        &self,
        in_port: u32,
        metadata: Vec<(flowtable::Field, u64)>,
        actions: Vec<Action>,
        data: Vec<u8>,
    ) -> Result<(), PacketOutError> {
        if data.len() > MAX_PACKET_OUT {
            return Err(PacketOutError::TooBig(data.len()));
        }
        self.packet_outs
            .try_send(PacketOutRequest {
                in_port,
                metadata,
                actions,
                data,
            })
            .map_err(|_| PacketOutError::Busy)?;
        self.wake();
        Ok(())
    }

    fn collect_stats(&self) {
        // The XDP flow cache's hits and the kernel's drops before the
        // sockets are kept outside the atomics (the translation cache's
        // lag is one batch).
        self.collect_now();
    }

    fn set_fail_open(&self, on: bool) {
        if self.fail_open.swap(on, Relaxed) != on {
            self.invalidate_xdp_cache();
            tracing::info!(
                fail_open = on,
                "fail mode standalone: forwarding by NORMAL {}",
                if on { "on" } else { "off" }
            );
            self.wake();
        }
    }
}
