//! The bridge's packet threads: which ports each serves, and each one's
//! life from its first round to the ports it closes.
//!
//! Ports go to the threads in turn as they are listed (a port's receive
//! queues stay together on one thread); each thread also knows every
//! other thread's ports by stand-ins, so that it can output to them
//! (`engine::handoff`). With one thread nothing of that exists and the
//! engine runs as it always has.

use crossbeam::channel::Receiver;
use dataplane::conntrack::Conntrack;
use dataplane::control::{ChangeReceiver, DpShared, PortMeta};
use dataplane::engine::handoff::Handoffs;
use dataplane::engine::{Engine, PortOp};
use dataplane::fastpath::cache::{CacheMaps, XdpCache};
use dataplane::meter::MeterBank;
use dataplane::ports::{Port, UmemFrames};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// What one packet thread starts with.
pub(super) struct Start {
    pub frames: UmemFrames,
    /// The ports it serves.
    pub own: Vec<(Arc<PortMeta>, Port)>,
    /// The other threads' ports, by stand-ins, with their owner.
    pub others: Vec<(Arc<PortMeta>, Port, usize)>,
    pub changes: ChangeReceiver,
    pub port_ops: Receiver<PortOp<Port>>,
    /// `None` with a single packet thread.
    pub handoffs: Option<Handoffs>,
}

/// What every packet thread shares.
pub(super) struct Common {
    pub shared: Arc<DpShared>,
    pub conntrack: Arc<Conntrack>,
    pub meters: Arc<MeterBank>,
    pub xdp_maps: Option<Arc<CacheMaps>>,
    pub threads: usize,
    pub flow_cache_entries: usize,
    pub stop: Arc<AtomicBool>,
    pub failed: Arc<AtomicBool>,
}

/// Deals `ports` out to `threads` packet threads in turn; returns each
/// thread's own ports and the stand-ins of the others', and each port's
/// owner and receive queues.
#[allow(clippy::type_complexity)]
pub(super) fn deal(
    ports: Vec<(Arc<PortMeta>, Port)>,
    threads: usize,
) -> (
    Vec<Vec<(Arc<PortMeta>, Port)>>,
    Vec<Vec<(Arc<PortMeta>, Port, usize)>>,
    Vec<dataplane::live::Served>,
) {
    let mut own: Vec<Vec<_>> = (0..threads).map(|_| Vec::new()).collect();
    let mut others: Vec<Vec<_>> = (0..threads).map(|_| Vec::new()).collect();
    let mut owners = Vec::new();
    for (i, (meta, io)) in ports.into_iter().enumerate() {
        let owner = i % threads;
        for (t, list) in others.iter_mut().enumerate() {
            if t != owner {
                list.push((meta.clone(), io.stand_in(), owner));
            }
        }
        owners.push(dataplane::live::Served {
            ofport: meta.ofport,
            thread: owner,
            queues: io.rx_queues(),
        });
        own[owner].push((meta, io));
    }
    (own, others, owners)
}

/// Starts packet thread `index` on `core` (if given).
pub(super) fn spawn(
    index: usize,
    core: Option<core_affinity::CoreId>,
    start: Start,
    common: &Common,
    thread_id: Arc<dataplane::cpus::ThreadId>,
) -> std::io::Result<JoinHandle<()>> {
    let shared = common.shared.clone();
    let conntrack = common.conntrack.clone();
    let meters = common.meters.clone();
    let xdp_maps = common.xdp_maps.clone();
    let (threads, flow_cache_entries) = (common.threads, common.flow_cache_entries);
    let (stop, failed) = (common.stop.clone(), common.failed.clone());
    let name = if threads == 1 {
        "xbr-pmd".to_string()
    } else {
        format!("xbr-pmd{index}")
    };
    std::thread::Builder::new().name(name).spawn(move || {
        thread_id.record_current();
        if let Some(core) = core {
            if !core_affinity::set_for_current(core) {
                tracing::warn!(
                    thread = index,
                    "could not pin the packet thread to CPU {}",
                    core.id
                );
            }
        }
        let mut engine = Engine::new(start.frames, start.own, shared, start.changes);
        for (meta, stand_in, owner) in start.others {
            engine.add_remote_port(meta, stand_in, owner);
        }
        if let Some(h) = start.handoffs {
            engine.set_handoffs(h);
        }
        engine.set_meter_bank(meters);
        engine.set_flow_cache(flow_cache_entries);
        engine.set_port_ops(start.port_ops);
        engine.set_conntrack(conntrack);
        engine.set_xdp_cache(xdp_maps.map(|m| XdpCache::new(m).shared_by(threads)));
        // A packet thread that died must not leave a process that still
        // answers OpenFlow but forwards nothing: stop the whole switch
        // (the ports detach as the engine unwinds) and exit non-zero.
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| engine.run(&stop)));
        let engine = match run {
            Ok(e) => e,
            Err(_) => {
                tracing::error!(thread = index, "a packet thread panicked; stopping xbr");
                failed.store(true, Ordering::SeqCst);
                let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGTERM);
                return;
            }
        };
        log_final_counts(index, &engine);
        // Ports detach here, on the thread that owned them.
        let (mut frames, ports) = engine.into_parts();
        for port in ports {
            port.close(&mut frames);
        }
    })
}

fn log_final_counts(index: usize, engine: &Engine<UmemFrames, Port>) {
    let d = engine.drops;
    tracing::info!(
        thread = index,
        table_miss = d.table_miss,
        explicit = d.explicit,
        unsupported = d.unsupported,
        port_down = d.port_down,
        no_frames = d.no_frames,
        tx_full = d.tx_full,
        bad_output_port = d.bad_output_port,
        invalid_ttl = d.invalid_ttl,
        qos_policed = d.qos_policed,
        meter = d.meter,
        ct_recirc_depth = d.ct_recirc_depth,
        "packet thread stopped; drops"
    );
    if index == 0 {
        let cs = &engine.conntrack().stats;
        tracing::info!(
            connections = engine.conntrack().len(),
            committed = cs.committed.load(Ordering::Relaxed),
            invalid = cs.invalid.load(Ordering::Relaxed),
            table_full = cs.table_full.load(Ordering::Relaxed),
            nat_exhausted = cs.nat_exhausted.load(Ordering::Relaxed),
            "conntrack"
        );
    }
    if let Some(x) = engine.xdp_cache_stats() {
        tracing::info!(
            thread = index,
            installs = x.installs,
            hit_packets = x.hit_packets,
            expired = x.expired,
            invalidated = x.invalidated,
            revalidated = x.revalidated,
            revalidated_out = x.revalidated_out,
            full = x.full,
            install_errors = x.install_errors,
            ct_installs = x.ct_installs,
            ct_removed = x.ct_removed,
            decap_hit_packets = x.decap_hit_packets,
            encap_hit_packets = x.encap_hit_packets,
            adopted = x.adopted,
            adopt_rewritten = x.adopt_rewritten,
            adopt_removed = x.adopt_removed,
            "XDP flow cache"
        );
    }
    if d.tunnel != dataplane::vxlan::TunnelDrops::default() {
        tracing::info!(thread = index, tunnel = ?d.tunnel, "tunnel drops");
    }
}
