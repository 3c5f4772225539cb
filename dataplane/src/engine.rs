//! The poll-mode packet engine: one thread, every port, batches of up to
//! [`BATCH`] packets.
//!
//! # Design
//!
//! All packets live in one frame store (the shared AF_XDP UMEM in
//! production, a plain arena in tests) and are named by [`Desc`] (address,
//! length). A received frame is parsed into a `FlowKey`, run through the
//! thread's private `Pipeline` replica, and its descriptor is queued on the
//! output port's TX batch; frames are only copied when a packet goes to
//! more than one port (every output but the last gets a copy, taken at the
//! moment of that output so later rewrites do not leak into it). TX batches
//! are flushed once per round, so one `sendto()` kick serves a whole batch.
//!
//! Per-packet work allocates nothing and takes no lock: pipeline changes are
//! applied between rounds (see `control`), counters are kept in plain
//! integers and published to shared atomics once per round.
//!
//! Idle policy: after [`SPIN_ROUNDS`] rounds without a packet the thread
//! blocks in `poll(2)` on every port's fd and the control eventfd, so an idle
//! switch costs nothing; the first packet or pipeline change wakes it and it
//! busy-polls again.

use crate::control::{port_config, ChangeReceiver, DpShared, PortMeta, Upcall};
use crate::normal::{MacTable, DEFAULT_AGEING_SECS};
use crate::packet::{self, Layers};
use crate::rewrite;
use crate::vxlan::{TunnelDrop, TunnelDrops, TunnelMeta};
use flowtable::action::port as ofpp;
use flowtable::cache::{CacheStats, FlowCache};
use flowtable::key::{Field, FlowKey};
use flowtable::pipeline::{DpAction, DropReason, Pipeline, Xlate};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
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

/// A frame in the frame store: `addr` of the first byte, `len` bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Desc {
    pub addr: u64,
    pub len: u32,
}

/// Where packet bytes live. Frames are fixed-size slots named by address.
pub trait Frames {
    /// Takes a free frame; `None` when all are in use.
    fn alloc(&mut self) -> Option<u64>;
    /// Gives a frame back (any address inside the frame).
    fn free(&mut self, addr: u64);
    /// The bytes `addr..addr+len` of a frame the engine owns.
    fn bytes(&mut self, addr: u64, len: u32) -> &mut [u8];
    /// Copies a packet into a newly allocated frame; `None` when no frame is
    /// free.
    fn copy(&mut self, src: Desc) -> Option<Desc>;
    /// Bytes of the frame in front of `addr`, room to prepend headers into.
    fn headroom(&self, addr: u64) -> u32;
}

/// One port's packet I/O, driven only by the engine thread.
pub trait PortIo<F: Frames> {
    /// Receives up to `out.len()` packets into frames of `frames`.
    fn recv(&mut self, frames: &mut F, out: &mut [Desc]) -> usize;
    /// Queues packets for transmission and returns how many it took; the
    /// engine still owns (and frees) the rest.
    fn send(&mut self, frames: &mut F, descs: &[Desc]) -> usize;
    /// Reclaims transmitted frames and keeps receive buffers topped up.
    fn maintain(&mut self, frames: &mut F);
    /// The fd to sleep on when idle, if the port has one.
    fn poll_fd(&self) -> Option<BorrowedFd<'_>>;
    /// Tunnel ports (asked once, when the engine is built): the engine
    /// then calls `decap` on every received and `encap` on every output
    /// frame.
    fn is_tunnel(&self) -> bool {
        false
    }
    /// Strips a received frame's outer headers (moving the descriptor,
    /// not the bytes) and returns the inner frame and its tunnel metadata.
    fn decap(&mut self, _frames: &mut F, desc: Desc) -> Result<(Desc, TunnelMeta), TunnelDrop> {
        Ok((desc, TunnelMeta::default()))
    }
    /// Prepends the outer headers for `tun` in the frame's headroom.
    fn encap(&mut self, _frames: &mut F, desc: Desc, _tun: TunnelMeta) -> Result<Desc, TunnelDrop> {
        Ok(desc)
    }
}

/// Drop reasons the engine counts, beyond the pipeline's own.
#[derive(Clone, Copy, Debug, Default)]
pub struct EngineDrops {
    pub table_miss: u64,
    pub explicit: u64,
    pub unsupported: u64,
    pub resubmit_depth: u64,
    pub too_many_actions: u64,
    pub bad_output_port: u64,
    pub port_down: u64,
    pub no_frames: u64,
    pub tx_full: u64,
    /// Packets for the controllers dropped because their queue was full.
    pub upcall_queue_full: u64,
    /// PACKET_OUTs whose data did not fit a frame.
    pub packet_out_too_big: u64,
    /// Tunnel ports' drops, per reason.
    pub tunnel: TunnelDrops,
}

impl EngineDrops {
    fn count(&mut self, reason: DropReason) {
        match reason {
            DropReason::TableMiss => self.table_miss += 1,
            DropReason::ExplicitDrop => self.explicit += 1,
            DropReason::Unsupported(_) => self.unsupported += 1,
            DropReason::ResubmitDepth => self.resubmit_depth += 1,
            DropReason::TooManyActions => self.too_many_actions += 1,
            DropReason::BadOutputPort => self.bad_output_port += 1,
        }
    }
}

/// Running totals of one port, owned by the engine thread.
#[derive(Default)]
struct Totals {
    rx_packets: u64,
    rx_bytes: u64,
    rx_dropped: u64,
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
    /// `io.is_tunnel()`, cached.
    tunnel: bool,
}

/// Stations NORMAL remembers per packet thread.
const MAC_TABLE_SIZE: usize = 8192;

/// OFPCML_NO_BUFFER: a `controller` action's "send the whole packet".
const CONTROLLER_MAX_LEN_ALL: u16 = 0xffff;

/// Busy rounds between two flushes of the translation cache's pending
/// counts (a few milliseconds under load).
const CACHE_FLUSH_ROUNDS: u32 = 256;

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
    rounds_since_flush: u32,
    pub drops: EngineDrops,
    /// NORMAL's learned stations.
    macs: MacTable,
    /// Seconds since the engine started, read once per round (MAC ageing).
    now_secs: u64,
    started: Instant,
    /// Fail-open (standalone mode without a controller): every packet is
    /// forwarded by NORMAL, whatever the flows say. Read once per round.
    fail_open: bool,
    /// Tunnel metadata of the packet `process` is about to handle, when it
    /// came from a tunnel port.
    rx_tunnel: Option<TunnelMeta>,
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
                .map(|(meta, io)| EnginePort {
                    meta,
                    tunnel: io.is_tunnel(),
                    io,
                    tx: Vec::with_capacity(BATCH * 4),
                    totals: Totals::default(),
                    config: 0,
                })
                .collect(),
            port_index,
            pipeline: Pipeline::new(),
            changes,
            shared,
            xlate: Xlate::new(),
            cache: Some(FlowCache::default()),
            rounds_since_flush: 0,
            drops: EngineDrops::default(),
            macs: MacTable::new(MAC_TABLE_SIZE, DEFAULT_AGEING_SECS),
            now_secs: 0,
            started: Instant::now(),
            fail_open: false,
            rx_tunnel: None,
        }
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
        self.rounds_since_flush = 0;
        if let Some(c) = &mut self.cache {
            c.flush();
        }
    }

    /// Runs until `stop` is set. Returns the engine so the caller can read
    /// its final counters and tear the ports down in order.
    pub fn run(mut self, stop: &AtomicBool) -> Self {
        let mut idle_rounds = 0u32;
        while !stop.load(Ordering::Relaxed) {
            self.apply_changes();
            if self.round() > 0 {
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
        self
    }

    /// Applies every pending pipeline change; between rounds, so a round
    /// sees one table version.
    pub fn apply_changes(&mut self) {
        let mut last = None;
        while let Some((seq, changes)) = self.changes.try_next() {
            self.pipeline.apply(&changes);
            last = Some(seq);
        }
        if let Some(seq) = last {
            self.shared.mark_applied(seq);
        }
    }

    fn sleep(&mut self) {
        self.shared.drain_waker();
        // A change published between the last drain and here is caught
        // because the eventfd stays readable until drained.
        let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(self.ports.len() + 1);
        fds.push(PollFd::new(self.shared.waker_fd(), PollFlags::POLLIN));
        for p in &self.ports {
            if let Some(fd) = p.io.poll_fd() {
                fds.push(PollFd::new(fd, PollFlags::POLLIN));
            }
        }
        // EINTR and timeouts just return to polling.
        let _ = poll(&mut fds, PollTimeout::from(POLL_TIMEOUT_MS));
    }

    /// One pass over every port: receive, process, transmit. Returns the
    /// number of packets received.
    pub fn round(&mut self) -> usize {
        let mut received = 0;
        let mut batch = [Desc::default(); BATCH];
        // Every port's config, before any packet: an output checks the
        // destination's bits, which a PORT_MOD may just have changed.
        for port in &mut self.ports {
            port.config = port.meta.config.load(Ordering::Relaxed);
        }
        self.now_secs = self.started.elapsed().as_secs();
        self.fail_open = self.shared.fail_open();
        // Controllers' packets first: they were queued before this round.
        received += self.run_packet_outs();
        for i in 0..self.ports.len() {
            let config = self.ports[i].config;
            let n = self.ports[i].io.recv(&mut self.frames, &mut batch);
            if n == 0 {
                continue;
            }
            received += n;
            let in_port = self.ports[i].meta.ofport;
            let blocked = config & (port_config::PORT_DOWN | port_config::NO_RECV) != 0;
            for desc in &batch[..n] {
                let t = &mut self.ports[i].totals;
                t.rx_packets += 1;
                t.rx_bytes += desc.len as u64;
                if blocked {
                    t.rx_dropped += 1;
                    self.drops.port_down += 1;
                    self.frames.free(desc.addr);
                    continue;
                }
                let mut desc = *desc;
                if self.ports[i].tunnel {
                    match self.ports[i].io.decap(&mut self.frames, desc) {
                        Ok((inner, meta)) => {
                            desc = inner;
                            self.rx_tunnel = Some(meta);
                        }
                        Err(reason) => {
                            self.ports[i].totals.rx_dropped += 1;
                            self.drops.tunnel.count(reason);
                            self.frames.free(desc.addr);
                            continue;
                        }
                    }
                }
                self.process(in_port, desc);
            }
        }
        self.flush();
        // Hits reach the flow counters when the thread goes idle, and
        // every CACHE_FLUSH_ROUNDS busy rounds: per round, a batch of
        // distinct flows would cost an atomic add per packet again.
        self.rounds_since_flush += 1;
        if received == 0 || self.rounds_since_flush >= CACHE_FLUSH_ROUNDS {
            self.flush_cache();
        }
        received
    }

    fn process(&mut self, in_port: u32, desc: Desc) {
        let mut key = FlowKey::zero();
        let layers = {
            let frame = self.frames.bytes(desc.addr, desc.len);
            packet::extract(frame, in_port, &mut key)
        };
        if let Some(t) = self.rx_tunnel.take() {
            key.set(Field::TunId, t.tun_id);
            key.set(Field::TunSrc, u64::from(t.tun_src));
            key.set(Field::TunDst, u64::from(t.tun_dst));
        }
        match &mut self.cache {
            _ if self.fail_open => self.xlate.set_normal(),
            Some(c) => c.xlate(&self.pipeline, &key, desc.len, &mut self.xlate),
            None => self.pipeline.xlate(&key, desc.len, &mut self.xlate),
        }
        self.execute(in_port, desc, layers, key.get(Field::TunId));
    }

    /// Carries out the translation in `self.xlate` on the frame `desc`
    /// (parsed as `layers`), which it consumes.
    fn execute(&mut self, in_port: u32, desc: Desc, layers: Layers, tun_id: u64) {
        let actions = self.xlate.actions();
        // Connection tracking is not carried out yet: such a packet is
        // dropped and counted, as the translation did before it had ct.
        if actions.iter().any(|a| matches!(a, DpAction::Ct { .. })) {
            self.drops.count(DropReason::Unsupported("ct"));
            self.frames.free(desc.addr);
            return;
        }
        let outputs = actions
            .iter()
            .map(|a| match a {
                DpAction::Output { .. } => 1,
                DpAction::Flood | DpAction::Normal => self.ports.len(),
                DpAction::SetField { .. } | DpAction::Controller { .. } | DpAction::Ct { .. } => 0,
            })
            .sum::<usize>();
        let to_controller = actions
            .iter()
            .any(|a| matches!(a, DpAction::Controller { .. }));
        if outputs == 0 && !to_controller {
            self.drops
                .count(self.xlate.drop_reason().unwrap_or(DropReason::ExplicitDrop));
            self.frames.free(desc.addr);
            return;
        }
        // Outputs still to come, so the last one can take the original frame.
        let mut remaining = outputs;
        for i in 0..self.xlate.actions().len() {
            match self.xlate.actions()[i] {
                DpAction::SetField { field, value } => {
                    let frame = self.frames.bytes(desc.addr, desc.len);
                    rewrite::set_field(frame, layers, field, value);
                }
                a @ DpAction::Controller { .. } => self.upcall(in_port, desc, tun_id, a),
                DpAction::Ct { .. } => {}
                DpAction::Normal => {
                    // Learned destination: that port only; else flood.
                    let target = self.normal_target(in_port, desc);
                    for p in 0..self.ports.len() {
                        remaining -= 1;
                        let port = self.ports[p].meta.ofport;
                        if port == in_port || target.is_some_and(|t| t != port) {
                            if remaining == 0 {
                                self.frames.free(desc.addr);
                            }
                            continue;
                        }
                        self.output(in_port, port, desc, remaining == 0, TunnelMeta::default());
                    }
                }
                DpAction::Output {
                    port,
                    tun_id,
                    tun_dst,
                } => {
                    remaining -= 1;
                    let tun = TunnelMeta {
                        tun_id,
                        tun_src: 0,
                        tun_dst,
                    };
                    self.output(in_port, port, desc, remaining == 0, tun);
                }
                DpAction::Flood => {
                    for p in 0..self.ports.len() {
                        remaining -= 1;
                        let port = self.ports[p].meta.ofport;
                        if port == in_port {
                            if remaining == 0 {
                                self.frames.free(desc.addr);
                            }
                            continue;
                        }
                        self.output(in_port, port, desc, remaining == 0, TunnelMeta::default());
                    }
                }
            }
        }
        if outputs == 0 {
            // Only the controller took a copy.
            self.frames.free(desc.addr);
        }
    }

    /// NORMAL's forwarding decision: learns the source MAC on `in_port`
    /// and returns the port the destination was learned on (`None`:
    /// flood).
    fn normal_target(&mut self, in_port: u32, desc: Desc) -> Option<u32> {
        let frame = self.frames.bytes(desc.addr, desc.len);
        let mac = |at: usize| {
            frame
                .get(at..at + 6)
                .map(|b| b.iter().fold(0u64, |m, x| (m << 8) | u64::from(*x)))
        };
        let (dst, src) = (mac(0)?, mac(6)?);
        self.macs.learn(src, in_port, self.now_secs);
        self.macs.lookup(dst, self.now_secs)
    }

    /// Queues a copy of the frame (cut to the action's max_len) for the
    /// controllers.
    fn upcall(&mut self, in_port: u32, desc: Desc, tun_id: u64, action: DpAction) {
        let DpAction::Controller {
            max_len,
            reason,
            table_id,
            cookie,
        } = action
        else {
            return;
        };
        let frame = self.frames.bytes(desc.addr, desc.len);
        let keep = if max_len == CONTROLLER_MAX_LEN_ALL {
            frame.len()
        } else {
            frame.len().min(usize::from(max_len))
        };
        let up = Upcall {
            in_port,
            tun_id,
            reason,
            table_id,
            cookie,
            total_len: u16::try_from(desc.len).unwrap_or(u16::MAX),
            data: frame.get(..keep).unwrap_or_default().to_vec(),
        };
        if !self.changes.upcall(up) {
            self.drops.upcall_queue_full += 1;
        }
    }

    /// Runs up to a batch of queued PACKET_OUTs; returns how many.
    fn run_packet_outs(&mut self) -> usize {
        let mut n = 0;
        while n < BATCH {
            let Some(req) = self.changes.try_packet_out() else {
                break;
            };
            n += 1;
            let Some(addr) = self.frames.alloc() else {
                self.drops.no_frames += 1;
                continue;
            };
            let len = u32::try_from(req.data.len()).unwrap_or(u32::MAX);
            let buf = self.frames.bytes(addr, len);
            if buf.len() != req.data.len() {
                self.drops.packet_out_too_big += 1;
                self.frames.free(addr);
                continue;
            }
            buf.copy_from_slice(&req.data);
            let mut key = FlowKey::zero();
            let layers = packet::extract(self.frames.bytes(addr, len), req.in_port, &mut key);
            self.pipeline
                .xlate_actions(&key, len, &req.actions, &mut self.xlate);
            self.execute(req.in_port, Desc { addr, len }, layers, 0);
        }
        n
    }

    /// Queues `desc` (or a copy, unless `last`) on the TX batch of `port`;
    /// a tunnel port encapsulates it with `tun` first.
    fn output(&mut self, in_port: u32, port: u32, desc: Desc, last: bool, tun: TunnelMeta) {
        let port = if port == ofpp::IN_PORT { in_port } else { port };
        let Some(&idx) = self.port_index.get(port as usize) else {
            self.drops.bad_output_port += 1;
            if last {
                self.frames.free(desc.addr);
            }
            return;
        };
        if idx == u16::MAX {
            self.drops.bad_output_port += 1;
            if last {
                self.frames.free(desc.addr);
            }
            return;
        }
        let idx = idx as usize;
        if self.ports[idx].config & (port_config::PORT_DOWN | port_config::NO_FWD) != 0 {
            self.ports[idx].totals.tx_dropped += 1;
            self.drops.port_down += 1;
            if last {
                self.frames.free(desc.addr);
            }
            return;
        }
        let mut out = if last {
            desc
        } else {
            match self.frames.copy(desc) {
                Some(d) => d,
                None => {
                    self.drops.no_frames += 1;
                    self.ports[idx].totals.tx_dropped += 1;
                    return;
                }
            }
        };
        if self.ports[idx].tunnel {
            match self.ports[idx].io.encap(&mut self.frames, out, tun) {
                Ok(d) => out = d,
                Err(reason) => {
                    self.drops.tunnel.count(reason);
                    self.ports[idx].totals.tx_dropped += 1;
                    self.frames.free(out.addr);
                    return;
                }
            }
        }
        self.ports[idx].tx.push(out);
        if self.ports[idx].tx.len() >= BATCH * 4 {
            self.flush_port(idx);
        }
    }

    fn flush_port(&mut self, idx: usize) {
        let port = &mut self.ports[idx];
        if port.tx.is_empty() {
            return;
        }
        let sent = port.io.send(&mut self.frames, &port.tx);
        for d in &port.tx[..sent] {
            port.totals.tx_packets += 1;
            port.totals.tx_bytes += d.len as u64;
        }
        for d in &port.tx[sent..] {
            port.totals.tx_dropped += 1;
            self.drops.tx_full += 1;
            self.frames.free(d.addr);
        }
        port.tx.clear();
    }

    /// Transmits every queued batch, reclaims frames, publishes counters.
    fn flush(&mut self) {
        for idx in 0..self.ports.len() {
            self.flush_port(idx);
        }
        for port in &mut self.ports {
            port.io.maintain(&mut self.frames);
            let (t, s) = (&port.totals, &port.meta.stats);
            s.rx_packets.store(t.rx_packets, Ordering::Relaxed);
            s.rx_bytes.store(t.rx_bytes, Ordering::Relaxed);
            s.rx_dropped.store(t.rx_dropped, Ordering::Relaxed);
            s.tx_packets.store(t.tx_packets, Ordering::Relaxed);
            s.tx_bytes.store(t.tx_bytes, Ordering::Relaxed);
            s.tx_dropped.store(t.tx_dropped, Ordering::Relaxed);
        }
    }

    /// A port's I/O object by position (tests and diagnostics).
    pub fn port_io_mut(&mut self, i: usize) -> Option<&mut P> {
        self.ports.get_mut(i).map(|p| &mut p.io)
    }

    pub fn frames_mut(&mut self) -> &mut F {
        &mut self.frames
    }

    /// The frame store and the ports' I/O objects, for orderly teardown.
    pub fn into_parts(self) -> (F, Vec<P>) {
        (self.frames, self.ports.into_iter().map(|p| p.io).collect())
    }
}
