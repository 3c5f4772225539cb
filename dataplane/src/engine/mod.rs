//! The poll-mode packet engine: one packet thread, the ports it serves,
//! batches of up to [`BATCH`] packets. A bridge runs one engine per
//! packet thread (`--pmd-threads`); each serves its own ports and hands
//! outputs to the others' ports off to them (see `handoff.rs`).
//!
//! # Design
//!
//! All packets live in one frame store (the thread's share of the AF_XDP
//! UMEM in production, a plain arena in tests) and are named by [`Desc`]
//! (address, length). A round runs each port's batch through stages:
//!
//! | stage | file |
//! |---|---|
//! | receive, police, admit (over the batch) | `receive.rs`, `hold.rs`, `qos.rs` |
//! | decapsulate (tunnel ports, over the batch) | `tunnel_stages.rs` |
//! | parse once into a per-packet context | `receive.rs`, `packet_ctx.rs` |
//! | translate and execute, pass by pass | `pass.rs`, `execute.rs`, `ct.rs`, `meters.rs` |
//! | hand the translation to the XDP cache | `xdp/` |
//! | output: mirror, encapsulate, queue | `output.rs`, `mirror.rs`, `tunnel_stages.rs`, `handoff.rs` |
//! | transmit (once per round) | `output.rs` |
//!
//! Each packet is parsed once: its `PacketCtx` (`packet_ctx.rs`: flow key,
//! layers, tunnel metadata, XDP key) is passed by reference from stage to
//! stage and never stored on `Engine`; conntrack, the XDP cache and the
//! tunnel's source-port hash read it. The translated packet's descriptor
//! is queued on the output port's TX batch; frames are only copied when a packet goes to
//! more than one port (every output but the last gets a copy, taken at the
//! moment of that output so later rewrites do not leak into it). TX batches
//! are flushed once per round, so one `sendto()` kick serves a whole batch.
//!
//! Per-packet work allocates nothing and takes no lock: pipeline changes are
//! applied between rounds (see `control`), counters are kept in plain
//! integers and published to shared atomics once per round. The exception
//! is `ct()`: the connection tracker is shared, and a tracked packet takes
//! its connection's (uncontended, sharded) locks; see `conntrack`.
//!
//! `ct(table=N)` forks the packet: the tracked copy re-enters the pipeline
//! at table N with the key's metadata from the translation and its ct_*
//! fields from conntrack, in the same call, up to [`MAX_RECIRC_DEPTH`]
//! times (so a batch's packets finish in order, with no queue of frozen
//! packets).
//!
//! Idle policy: after [`SPIN_ROUNDS`] rounds without a packet the thread
//! blocks in `poll(2)` on every port's fd and the control eventfd, so an idle
//! switch costs nothing; the first packet or pipeline change wakes it and it
//! busy-polls again.

use crate::conntrack::Conntrack;
use crate::control::{port_config, ChangeReceiver, DpShared, PortMeta};
use crate::fastpath::cache::XdpCache;
use crate::normal::{MacTable, DEFAULT_AGEING_SECS};
use ahash::RandomState;
use flowtable::cache::{CacheStats, FlowCache};
use flowtable::pipeline::{Pipeline, Xlate};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::collections::HashMap;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Packets taken from one port per round.
pub const BATCH: usize = 64;
/// Empty rounds before the thread sleeps in poll(2).
pub const SPIN_ROUNDS: u32 = 2_000;
/// Longest sleep; bounds shutdown latency if a wakeup were ever lost.
const POLL_TIMEOUT_MS: u16 = 500;
/// Longest sleep while XDP cache entries exist: their hits are collected
/// by this thread (see `fastpath::cache::SWEEP_INTERVAL`).
const XDP_POLL_TIMEOUT_MS: u16 = 100;
/// Times one packet may be recirculated after `ct(table=N)`: the agent's
/// pipeline needs three (table 0, 30 and 31); more means a loop in the
/// flows, and the packet is dropped (counted as `ct_recirc_depth`).
pub const MAX_RECIRC_DEPTH: u32 = 8;

/// Running totals of one port, owned by the engine thread.
#[derive(Default)]
struct Totals {
    rx_packets: u64,
    rx_bytes: u64,
    rx_dropped: u64,
    /// What the port's I/O dropped before the engine saw it (the kernel
    /// before the AF_XDP sockets, frames no jumbo block held, cut TAP
    /// reads), as of the last statistics collection (part of the
    /// published rx_dropped, as OVS counts its AF_XDP sockets' drops).
    io_rx_dropped: u64,
    tx_packets: u64,
    tx_bytes: u64,
    tx_dropped: u64,
}

struct EnginePort<P> {
    meta: Arc<PortMeta>,
    io: P,
    tx: Vec<Desc>,
    totals: Totals,
    /// OFPPC_* bits, refreshed once per round.
    config: u32,
    /// The device's carrier (`PortMeta::link_up`), refreshed once per round.
    link_up: bool,
    /// Whether `io` has a tunnel endpoint, cached.
    tunnel: bool,
    /// `io.xdp_ifindex()`, cached.
    xdp_ifindex: Option<u32>,
    /// Rate limits (see `qos.rs`).
    qos: crate::qos::PortQos,
    /// The mirrors the port is part of (see `mirror.rs`).
    mirrors: crate::mirror::PortMirrors,
    /// Frames taken off the ring during a long pipeline change, not yet
    /// processed (see `hold.rs`).
    held: Vec<Desc>,
    /// A tunnel port's frames waiting for their next hop (see
    /// `unresolved.rs`).
    unresolved: Vec<unresolved::Waiting>,
    /// The packet thread that owns the port, when another one does: `io`
    /// is then a stand-in that only describes it (its device, tunnel
    /// next hops) and outputs are handed off (see `handoff.rs`).
    owner: Option<usize>,
}

impl<P> EnginePort<P> {
    /// A port as the engine keeps it; what it asks of `io` is asked once,
    /// here.
    fn new<F: Frames>(meta: Arc<PortMeta>, io: P) -> Self
    where
        P: PortIo<F>,
    {
        EnginePort {
            meta,
            tunnel: io.tunnel().is_some(),
            xdp_ifindex: io.xdp_ifindex(),
            io,
            tx: Vec::with_capacity(BATCH * 4),
            held: Vec::new(),
            unresolved: Vec::new(),
            totals: Totals::default(),
            config: 0,
            link_up: true,
            qos: Default::default(),
            mirrors: Default::default(),
            owner: None,
        }
    }
}

/// Stations NORMAL remembers per packet thread.
pub const MAC_TABLE_SIZE: usize = 8192;

/// Longest time between two flushes of the translation cache's pending
/// counts while busy (idle rounds flush at once, and a statistics request
/// flushes before its reply). Flushing adds each dirty entry's hits to a
/// dozen shared atomics: with 1,024 flows, flushing every 256 rounds (as
/// before) took 2-3% of the engine's time in `benches/engine.rs`, and
/// the share grows with the number of flows.
const CACHE_FLUSH_MS: u64 = 20;

pub struct Engine<F: Frames, P: PortIo<F>> {
    frames: F,
    ports: Vec<EnginePort<P>>,
    /// ofport -> index into `ports`, `u16::MAX` for none.
    port_index: Vec<u16>,
    pipeline: Pipeline,
    changes: ChangeReceiver,
    shared: Arc<DpShared>,
    xlate: Xlate,
    /// Exact-match cache in front of the pipeline (`None`: translate
    /// every packet, for comparisons and debugging).
    cache: Option<FlowCache>,
    /// `elapsed_ms` at the last flush of the translation cache.
    flushed_at_ms: u64,
    pub drops: EngineDrops,
    /// This thread's `pmd-stats-show` counters.
    pub pmd: crate::engine::pmd_counters::PmdCounters,
    /// Frames waiting on all tunnel ports (see `unresolved.rs`).
    unresolved_total: usize,
    /// NORMAL's learned stations.
    macs: MacTable,
    /// Seconds since the engine started, read once per round (MAC ageing).
    now_secs: u64,
    /// Milliseconds since the engine started, read with `now_secs`.
    elapsed_ms: u64,
    started: Instant,
    /// When the last round began (its one clock read), for the thread's
    /// busy and idle time.
    round_started: Instant,
    /// Fail-open (standalone mode without a controller): every packet is
    /// forwarded by NORMAL, whatever the flows say. Read once per round.
    fail_open: bool,
    /// `flow-restore-wait` (see `DpShared::set_restore_wait`), per round.
    restore_wait: bool,
    /// The connection tracker `ct()` uses (shared with the control socket).
    conntrack: Arc<Conntrack>,
    /// Conntrack's clock, read once per round.
    ct_now: u64,
    /// Ports added and removed while running (see `live_ports.rs`).
    port_ops: Option<crossbeam::channel::Receiver<PortOp<P>>>,
    /// The XDP flow cache in front of the sockets (`None`: off).
    xdp: Option<XdpCache>,
    /// Which of its installs a flooding port gets (`xdp/install_gate.rs`).
    xdp_gate: xdp::InstallGate,
    /// New-connection templates this round found, installed after its
    /// connections reached the kernel (`xdp_template.rs`).
    pending_templates: Vec<crate::fastpath::cache::templates::NewConnTemplate>,
    /// The last statistics collection asked for by the control plane.
    stats_seen: u64,
    /// The collection being served (see `collect_if_asked`) and the XDP
    /// cache pass that completes it.
    stats_pass: Option<(u64, u64)>,
    /// Ports were added or removed: the pipeline's live ports (which
    /// fast-failover groups watch) need recomputing.
    liveness_dirty: bool,
    /// The meters' buckets, by meter id (see `meters.rs`), and where
    /// they come from.
    meters: HashMap<u32, Arc<parking_lot::Mutex<crate::meter::MeterState>>, RandomState>,
    meter_bank: Arc<crate::meter::MeterBank>,
    /// The meters' clock (ns since `started`), read once per round.
    meter_now: u64,
    /// Outputs to ports other packet threads own, and theirs to this
    /// one's (`None`: the only packet thread).
    handoff: Option<handoff::Handoffs>,
    /// The bridge's mirrors as of generation `mirror_gen` (see
    /// `mirror.rs`); the ports' masks index it.
    mirrors: std::sync::Arc<[std::sync::Arc<crate::mirror::Mirror>]>,
    mirror_gen: u64,
    /// Ports were added or removed: their masks need computing.
    mirror_ports_dirty: bool,
    /// A dead capture was reported since the mirrors last changed.
    mirror_reaped: bool,
}

impl<F: Frames, P: PortIo<F>> Engine<F, P> {
    /// `ports` pairs each port's shared metadata with its I/O.
    pub fn new(
        frames: F,
        ports: Vec<(Arc<PortMeta>, P)>,
        shared: Arc<DpShared>,
        changes: ChangeReceiver,
    ) -> Self {
        let max = ports.iter().map(|(m, _)| m.ofport).max().unwrap_or(0) as usize;
        let mut port_index = vec![u16::MAX; max + 1];
        for (i, (m, _)) in ports.iter().enumerate() {
            port_index[m.ofport as usize] = i as u16;
        }
        Engine {
            frames,
            ports: ports
                .into_iter()
                .map(|(meta, io)| EnginePort::new(meta, io))
                .collect(),
            port_index,
            pipeline: Pipeline::new(),
            changes,
            shared,
            xlate: Xlate::new(),
            cache: Some(FlowCache::default()),
            flushed_at_ms: 0,
            drops: EngineDrops::default(),
            pmd: Default::default(),
            unresolved_total: 0,
            macs: MacTable::new(MAC_TABLE_SIZE, DEFAULT_AGEING_SECS),
            now_secs: 0,
            elapsed_ms: 0,
            started: Instant::now(),
            round_started: Instant::now(),
            fail_open: false,
            restore_wait: false,
            conntrack: Arc::default(),
            ct_now: 0,
            port_ops: None,
            xdp: None,
            xdp_gate: Default::default(),
            pending_templates: Vec::new(),
            stats_seen: 0,
            stats_pass: None,
            liveness_dirty: true,
            meters: HashMap::default(),
            meter_bank: Arc::default(),
            meter_now: 0,
            handoff: None,
            mirrors: std::sync::Arc::new([]),
            mirror_gen: 0,
            mirror_ports_dirty: true,
            mirror_reaped: false,
        }
    }

    /// Makes this engine one of several packet threads, with `handoffs`
    /// as its end of their mesh (its number is its `ChangeReceiver`'s).
    pub fn set_handoffs(&mut self, handoffs: handoff::Handoffs) {
        self.handoff = Some(handoffs);
    }

    /// Lists port `meta`, which packet thread `owner` serves: outputs to
    /// it are handed off to that thread. `stand_in` describes the port
    /// (see [`PortIo`]); it is never asked to receive or send.
    pub fn add_remote_port(&mut self, meta: Arc<PortMeta>, stand_in: P, owner: usize) {
        self.add_port_owned(meta, stand_in, Some(owner));
        // Live additions reindex once after all of a round's port ops.
        self.reindex_ports();
        self.liveness_dirty = true;
    }

    /// Uses `ct` as the connection tracker (the default is a private one
    /// with default limits). Expired connections are removed by whoever
    /// runs `Conntrack::spawn_sweeper` for it (the bridge does).
    pub fn set_conntrack(&mut self, ct: Arc<Conntrack>) {
        self.conntrack = ct;
    }

    /// The engine's connection tracker.
    pub fn conntrack(&self) -> &Arc<Conntrack> {
        &self.conntrack
    }

    /// Sets the translation cache size in entries; 0 disables it.
    pub fn set_flow_cache(&mut self, entries: usize) {
        self.flush_cache();
        self.cache = (entries > 0).then(|| FlowCache::new(entries));
    }

    /// The translation cache's hit/miss statistics, if it is on.
    pub fn flow_cache_stats(&self) -> Option<CacheStats> {
        self.cache.as_ref().map(FlowCache::stats)
    }

    /// Moves the cache's pending hit counts into the flow, group and table
    /// counters.
    fn flush_cache(&mut self) {
        self.flushed_at_ms = self.elapsed_ms;
        if let Some(c) = &mut self.cache {
            c.flush();
        }
    }

    /// Publishes the thread's own counters for `xbr stats`: only when a
    /// statistics collection asks, so rounds never pay for it. False when
    /// a reader held them (see [`crate::control::DpShared::publish_engine`]).
    pub(super) fn publish_snapshot(&self) -> bool {
        self.shared.publish_engine(
            self.changes.engine(),
            crate::control::EngineSnapshot {
                drops: self.drops,
                pmd: self.pmd,
                flow_cache: self.flow_cache_stats(),
                xdp_cache: self.xdp_cache_stats(),
                at: Some(Instant::now()),
            },
        )
    }

    /// Runs until `stop` is set. Returns the engine so the caller can read
    /// its final counters and tear the ports down in order.
    pub fn run(mut self, stop: &AtomicBool) -> Self {
        // Every port's fill ring gets its frames before anyone is told the
        // switch runs: the ports' XDP programs already hand frames to the
        // sockets, and the kernel drops them while a fill ring is empty.
        self.flush();
        self.shared.mark_running(self.changes.engine());
        let mut idle_rounds = 0u32;
        let mut busy = false;
        self.round_started = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            self.apply_changes();
            self.collect_if_asked(busy);
            // From one round's start to the next: busy if the earlier
            // found work (its sleep, if any, counted idle).
            let previous = self.round_started;
            let was_busy = busy;
            busy = self.round() > 0;
            self.pmd.account(
                was_busy,
                self.round_started.saturating_duration_since(previous),
            );
            // A chunk while busy, the rest as soon as a round is idle.
            self.xdp_revalidate(busy);
            self.xdp_adopt(busy);
            if busy {
                idle_rounds = 0;
            } else {
                idle_rounds += 1;
                if idle_rounds >= SPIN_ROUNDS {
                    self.sleep();
                    idle_rounds = 0;
                }
            }
        }
        self.apply_changes();
        self.xdp_revalidate(false);
        // The kernel's last hits, so the final counters include them.
        self.xdp_sweep(true, false);
        self
    }

    /// Applies every pending pipeline change; between rounds, so a round
    /// sees one table version.
    pub fn apply_changes(&mut self) {
        // A take-over's request first: the changes and ports published
        // before it are then in the queues drained below.
        let adopt = self.xdp.as_mut().is_some_and(XdpCache::adoption_asked);
        let mut last = None;
        while let Some((seq, changes)) = self.changes.try_next() {
            self.apply_holding(&changes);
            self.apply_meter_changes(&changes);
            last = Some(seq);
        }
        self.apply_port_ops();
        if adopt {
            // The take-over waited for every change before it to be
            // applied (a barrier): changes drained now came after it, so
            // `xdp_changed` removes the entries not checked yet before
            // they count as applied.
            self.xdp_start_adoption();
        }
        if let Some(seq) = last {
            // The barrier is answered once no entry translated by the old
            // tables is left in the XDP cache (marked applied then).
            self.xdp_changed(Some(seq));
        }
    }

    /// Tells the pipeline which ports are live (not PORT_DOWN, carrier
    /// up: OVS's OFPPS_LIVE), for fast-failover groups. A change retires cached translations and
    /// revalidates the XDP cache's entries (a PORT_MOD also retires them
    /// all before its reply, see `control`).
    fn sync_liveness(&mut self) {
        let live = self
            .ports
            .iter()
            .filter(|p| p.config & port_config::PORT_DOWN == 0 && p.link_up)
            .map(|p| p.meta.ofport);
        if self.pipeline.set_live_ports(live) {
            self.xdp_changed(None);
        }
    }

    fn sleep(&mut self) {
        self.shared.drain_waker(self.changes.engine());
        // After the drain: a delivery after this check finds the thread
        // marked asleep and writes the eventfd, which poll(2) then sees.
        if self.handoff.as_ref().is_some_and(|h| !h.may_sleep()) {
            return;
        }
        // A change published between the last drain and here is caught
        // because the eventfd stays readable until drained.
        let mut port_fds: Vec<BorrowedFd<'_>> = Vec::with_capacity(self.ports.len());
        for p in &self.ports {
            p.io.poll_fds(&mut port_fds);
        }
        let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(port_fds.len() + 1);
        fds.push(PollFd::new(
            self.shared.waker_fd(self.changes.engine()),
            PollFlags::POLLIN,
        ));
        fds.extend(
            port_fds
                .into_iter()
                .map(|fd| PollFd::new(fd, PollFlags::POLLIN)),
        );
        // Installed XDP cache entries need sweeping while the kernel
        // forwards their traffic and this thread has nothing to do.
        let timeout = match &self.xdp {
            // Nothing wakes the thread when a tunnel's next hop resolves.
            _ if self.unresolved_total > 0 => unresolved::POLL_MS,
            // So do the reports of connections the kernel creates.
            Some(x) if !x.is_empty() || x.has_templates() => XDP_POLL_TIMEOUT_MS,
            _ => POLL_TIMEOUT_MS,
        };
        // EINTR and timeouts just return to polling.
        let _ = poll(&mut fds, PollTimeout::from(timeout));
        if let Some(h) = &self.handoff {
            h.woke();
        }
    }

    /// One pass over every port: receive, process, transmit. Returns the
    /// number of packets received.
    pub fn round(&mut self) -> usize {
        let mut received = 0;
        let mut batch = [Desc::default(); BATCH];
        // The XDP cache's generation before the ports' configs: see
        // `fastpath::cache` for why this order keeps entries from going stale.
        if let Some(x) = &mut self.xdp {
            // Encapsulating entries hold a tunnel's next hop and MTU as
            // they were when installed: a change makes them all stale.
            let mut tunnels_changed = false;
            for p in &mut self.ports {
                tunnels_changed |= p.io.tunnel_mut().is_some_and(|t| t.next_hops_changed());
            }
            if tunnels_changed {
                x.invalidate();
            }
            x.begin_round();
        }
        // Every port's config, before any packet: an output checks the
        // destination's bits, which a PORT_MOD may just have changed.
        let mut liveness_changed = std::mem::take(&mut self.liveness_dirty);
        for port in &mut self.ports {
            let config = port.meta.config.load(Ordering::Relaxed);
            liveness_changed |= (config ^ port.config) & port_config::PORT_DOWN != 0;
            port.config = config;
            let link_up = port.meta.link_up.load(Ordering::Relaxed);
            liveness_changed |= link_up != port.link_up;
            port.link_up = link_up;
        }
        if liveness_changed {
            self.sync_liveness();
        }
        self.round_started = Instant::now();
        let elapsed = self.round_started - self.started;
        self.now_secs = elapsed.as_secs();
        self.elapsed_ms = elapsed.as_millis() as u64;
        self.sync_qos();
        self.sync_mirrors();
        self.sync_meter_clock();
        self.fail_open = self.shared.fail_open();
        self.restore_wait = self.shared.restore_wait();
        self.ct_now = self.conntrack.now_ms();
        // Frames that waited for a tunnel's next hop go before this
        // round's, which may be to the same destination.
        if self.unresolved_total > 0 {
            self.retry_unresolved();
        }
        // Controllers' packets first: they were queued before this round.
        received += self.run_packet_outs();
        // Then what other packet threads handed off in their last rounds.
        received += self.run_handoffs();
        for i in 0..self.ports.len() {
            // Another packet thread receives on its own ports.
            if self.ports[i].owner.is_none() {
                received += self.receive_port(i, &mut batch);
            }
        }
        self.xdp_sweep(false, received > 0);
        // Storing the kernel's connections is work too.
        received += self.xdp_kernel_sync();
        self.flush();
        // Hits reach the flow counters when the thread goes idle, and
        // every CACHE_FLUSH_MS while busy: per round, a batch of distinct
        // flows would cost an atomic add per packet again.
        if received == 0 || self.elapsed_ms.saturating_sub(self.flushed_at_ms) >= CACHE_FLUSH_MS {
            self.flush_cache();
        }
        received
    }

    /// A port's I/O object by position (tests and diagnostics).
    pub fn port_io_mut(&mut self, i: usize) -> Option<&mut P> {
        self.ports.get_mut(i).map(|p| &mut p.io)
    }

    pub fn frames_mut(&mut self) -> &mut F {
        &mut self.frames
    }

    /// The frame store and the I/O objects of the ports this thread
    /// serves, for orderly teardown (stand-ins for other threads' ports
    /// are dropped).
    pub fn into_parts(self) -> (F, Vec<P>) {
        let ports = self
            .ports
            .into_iter()
            .filter(|p| p.owner.is_none())
            .map(|p| p.io)
            .collect();
        (self.frames, ports)
    }
}

mod adopt;
mod ct;
pub mod drops;
mod execute;
pub(crate) mod frames;
pub mod handoff;
mod hold;
mod io;
mod live_ports;
mod meters;
mod mirror;
mod output;
mod packet_ctx;
mod pass;
pub mod pmd_counters;
mod qos;
mod receive;
mod revalidate;
pub mod tunnel;
mod tunnel_stages;
mod unresolved;
mod xdp;
mod xdp_template;

pub use drops::EngineDrops;
pub use frames::{Desc, Frames};
pub use io::PortIo;
pub use live_ports::PortOp;
