//! A running bridge: its ports, the packet threads (see `threads.rs`) and
//! the OpenFlow server, started in an order that leaves nothing behind on
//! failure and stopped in the reverse order.

mod threads;

use dataplane::config::{PortSpec, Target};
use dataplane::control::DpShared;
use dataplane::engine::handoff::Handoffs;
use dataplane::fastpath::cache::CacheMaps;
use dataplane::live::LivePorts;
use dataplane::ports::{self, PortError};
use ofproto::limits::{ControlLimits, PacketInLimit};
use ofproto::tls::TlsContext;
use ofproto::{Bridge, Server};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use thiserror::Error;

/// How long starting waits for the packet threads to be ready to receive
/// (their first round: frames for every port's fill ring).
const ENGINE_START_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

pub struct BridgeConfig {
    pub name: String,
    pub rundir: PathBuf,
    /// The passive OpenFlow target (`ptcp:`/`pssl:`); the first is served.
    pub listen: Vec<Target>,
    pub ports: Vec<PortSpec>,
    /// Packet threads (at least one): each serves some of the ports.
    pub pmd_threads: usize,
    /// CPUs of the packet threads, by thread (fewer: the rest unpinned).
    pub pmd_cpus: Vec<usize>,
    /// CPUs of transmit threads (`--pmd-cores` after the packet threads';
    /// see `dataplane::kicker`); empty: the packet threads transmit themselves.
    pub tx_cpus: Vec<usize>,
    pub datapath_id: Option<u64>,
    /// Entries of each packet thread's translation cache; 0 turns it off.
    pub flow_cache_entries: usize,
    /// Fail mode standalone: NORMAL forwarding while no configured
    /// controller is connected; without controllers, a priority-0 NORMAL
    /// flow (as OVS adds). False: secure (flows only).
    pub standalone: bool,
    /// OpenFlow controllers to stay connected to (`tcp:`/`ssl:`).
    pub controllers: Vec<Target>,
    /// The key, certificate and CA certificate of `ssl:` and `pssl:`
    /// targets (the `SSL` table, `--private-key` ...); without, such
    /// targets are refused by whoever builds the configuration.
    pub tls: Option<Arc<TlsContext>>,
    /// Idle time after which a controller is probed (and, after as much
    /// again, dropped and reconnected).
    pub inactivity_probe: std::time::Duration,
    /// Most connections conntrack holds (`--ct-limit`).
    pub ct_limit: usize,
    /// AF_XDP ports beyond `ports` the frame pool is sized for, so ports
    /// added while running get full rings.
    pub spare_xsk_ports: u32,
    /// Entries of the XDP flow cache in front of the sockets; `None`
    /// turns it off (`--xdp-cache off`).
    pub xdp_cache_entries: Option<u32>,
    /// The XDP programs create new UDP connections from templates (with
    /// the cache only; `--xdp-ct-new`, see `conntrack/kernel_new.rs`).
    pub xdp_ct_new: bool,
    /// The state file (`dataplane::state`): restored at start, saved at a
    /// graceful stop and every snapshot period.
    pub state: StateConfig,
    /// Start with OVSDB's `flow-restore-wait` on (see
    /// [`RunningBridge::set_restore_wait`]).
    pub flow_restore_wait: bool,
    /// Where the bridges' pin directories are (`--bpf-pin-root`; see
    /// `dataplane::fastpath::pin`).
    pub pin_root: PathBuf,
    /// Pin the bridge's XDP programs and flow cache there so that they
    /// outlive the process (`--xdp-pin`; needs the flow cache). Without,
    /// what an earlier xbr pinned for the bridge is removed at start.
    pub pin: bool,
    /// Ports opened with `xdp_redirect=auto` make their veth peer take
    /// redirected frames (`--xdp-peer-gro`, `other_config:xdp-peer-gro`;
    /// see `ports::redirect::peer`).
    pub xdp_peer_gro: bool,
    /// The OpenFlow control plane's bounds (`ofproto::limits`); its
    /// `tcp_probe` is replaced by `inactivity_probe`.
    pub control: ControlLimits,
    /// The most flows all tables may hold together (`--max-flows`).
    pub max_flows: usize,
    /// PACKET_IN rate limits of some of `controllers`.
    pub packet_in_limits: BTreeMap<SocketAddr, PacketInLimit>,
    /// Inactivity probe intervals of some of `controllers` (OVSDB's
    /// `Controller.inactivity_probe`; zero: none); the others get
    /// `inactivity_probe`.
    pub controller_probes: BTreeMap<SocketAddr, std::time::Duration>,
}

/// `--state` and `--state-snapshot`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateConfig {
    /// Off: no state file is read or written.
    pub enabled: bool,
    /// How often a snapshot is written while running; `None`: only at a
    /// graceful stop.
    pub snapshot: Option<std::time::Duration>,
    /// Restore an existing file; false: the bridge is new (created while
    /// xbr runs, e.g. `ovs-vsctl add-br`) and a file left by an earlier
    /// bridge of that name is removed, not restored.
    pub restore: bool,
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig {
            enabled: true,
            snapshot: Some(dataplane::state::DEFAULT_SNAPSHOT_PERIOD),
            restore: true,
        }
    }
}

#[derive(Debug, Error)]
pub enum BridgeError {
    #[error("bridge name '{0}' is not valid (1-15 characters, no '/')")]
    BadName(String),
    #[error(transparent)]
    Port(#[from] PortError),
    #[error("run directory {path}: {source}")]
    Rundir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("OpenFlow server: {0}")]
    Server(#[from] ofproto::OfprotoError),
    #[error("cannot create the packet threads' wakeup eventfds: {0}")]
    Eventfd(nix::Error),
    #[error("XDP flow cache: {0}")]
    XdpCache(#[source] dataplane::fastpath::cache::XdpCacheError),
    #[error("cannot start a packet thread: {0}")]
    Thread(std::io::Error),
    #[error("cannot start the conntrack expiry thread: {0}")]
    CtSweeper(std::io::Error),
    #[error(transparent)]
    Ctl(#[from] crate::ctl::CtlError),
    #[error(transparent)]
    BadCpu(#[from] dataplane::cpus::CpuError),
    #[error(
        "{asked} transmit threads asked for, {running} running: their number changes only \
         when xbr restarts"
    )]
    TxThreads { asked: usize, running: usize },
}

impl BridgeError {
    /// Errors caused by the configuration the user gave (exit code 2).
    pub fn is_config_error(&self) -> bool {
        match self {
            BridgeError::BadName(_) | BridgeError::BadCpu(_) => true,
            BridgeError::Port(e) => e.is_config_error(),
            _ => false,
        }
    }
}

/// A datapath id from the bridge name, stable across restarts (OVS derives
/// it from a MAC; any stable value will do for a userspace bridge).
fn default_datapath_id(name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    h & 0x0000_ffff_ffff_ffff
}

pub struct RunningBridge {
    name: String,
    /// `None` only while [`RunningBridge::restart_openflow`] swaps it, or
    /// after a failed restart.
    server: Option<Server>,
    /// The OpenFlow state the server serves, kept across server restarts.
    bridge: Arc<Bridge>,
    mgmt: PathBuf,
    ctl: crate::ctl::CtlServer,
    stop: Arc<AtomicBool>,
    shared: Arc<DpShared>,
    engines: Vec<JoinHandle<()>>,
    /// Hands packets for the controllers to the OpenFlow side; ends when
    /// the packet threads do (`None` if it could not be started).
    upcalls: Option<JoinHandle<()>>,
    /// Set by a packet thread that panicked.
    failed: Arc<AtomicBool>,
    ct_sweeper: dataplane::conntrack::Sweeper,
    live: Arc<LivePorts>,
    /// Follows the ports' carrier (`ports/carrier.rs`); `None` if it could
    /// not start (logged).
    carrier: Option<dataplane::ports::carrier::CarrierWatch>,
    /// The packet threads, to move them to other CPUs while running.
    pmd_threads: Vec<Arc<dataplane::cpus::ThreadId>>,
    /// The transmit threads (`--pmd-cores` after the packet threads'), if
    /// any.
    kicks: Option<Arc<dataplane::kicker::KickPool>>,
    /// Writes the state file (`None` with `--state off`).
    state: Option<dataplane::state::Keeper>,
    /// The pin directory (`dataplane::fastpath::pin`) and its root, if pinning is on.
    pins: Option<(Arc<dataplane::fastpath::pin::Pins>, PathBuf)>,
    /// [`RunningBridge::take_over_pinned`] was called (it acts once).
    taken_over: AtomicBool,
    /// The controllers' PACKET_IN rate limits, for server restarts.
    packet_in_limits: BTreeMap<SocketAddr, PacketInLimit>,
    /// The controllers' own probe intervals, for server restarts.
    controller_probes: BTreeMap<SocketAddr, std::time::Duration>,
    /// The TLS settings of `ssl:`/`pssl:` targets, for server restarts.
    tls: Option<Arc<TlsContext>>,
}

impl RunningBridge {
    pub fn start(config: BridgeConfig) -> Result<RunningBridge, BridgeError> {
        if config.name.is_empty() || config.name.len() > 15 || config.name.contains('/') {
            return Err(BridgeError::BadName(config.name));
        }
        let threads = config.pmd_threads.max(1);
        let cores = config
            .pmd_cpus
            .iter()
            .map(|&cpu| dataplane::cpus::core_id(cpu))
            .collect::<Result<Vec<_>, _>>()?;
        let tx_cores = config
            .tx_cpus
            .iter()
            .map(|&cpu| dataplane::cpus::core_id(cpu))
            .collect::<Result<Vec<_>, _>>()?;
        std::fs::create_dir_all(&config.rundir).map_err(|source| BridgeError::Rundir {
            path: config.rundir.clone(),
            source,
        })?;

        // Refuse before attaching anything if a live switch owns the socket
        // (Server::start checks again, race-free enough for one host).
        let mgmt = config.rundir.join(format!("{}.mgmt", config.name));
        if std::os::unix::net::UnixStream::connect(&mgmt).is_ok() {
            return Err(BridgeError::Server(ofproto::OfprotoError::InUse(mgmt)));
        }
        // The state file is read (and a bad one refused) before anything
        // is attached; it is applied once the tables exist, below.
        let state_path = dataplane::state::path(&config.rundir, &config.name);
        let (saved, state_start) = if config.state.enabled && config.state.restore {
            dataplane::state::keeper::load(&state_path, &config.name)
        } else if config.state.enabled {
            dataplane::state::keeper::discard(&state_path);
            (None, dataplane::state::status::Start::NoFile)
        } else {
            (None, dataplane::state::status::Start::Disabled)
        };
        let state_status = Arc::new(dataplane::state::StateStatus::new(
            state_path.clone(),
            config.state.snapshot.filter(|_| config.state.enabled),
            state_start,
        ));

        // Ports: opened all or nothing (a failure drops the ones opened).
        // Pinned state a previous xbr left is adopted here (see
        // `dataplane::fastpath::pin`): maps now, links as the ports open.
        let pins = if config.pin && config.xdp_cache_entries.is_some() {
            match dataplane::fastpath::pin::Pins::open(&config.pin_root, &config.name) {
                Ok(p) => Some(Arc::new(p)),
                // A read-only /sys, no right to mount: the bridge still
                // works, but goes with the process (and fails open while
                // none runs), which an operator must hear about.
                Err(e) => {
                    tracing::error!(
                        error = %e,
                        "cannot pin the XDP state: running without; the ports' programs \
                         will detach when xbr exits"
                    );
                    None
                }
            }
        } else {
            if config.pin {
                tracing::warn!(
                    "nothing is pinned without the XDP flow cache: the ports' programs \
                     detach when xbr exits"
                );
            }
            // The programs an earlier, pinning xbr left on the ports would
            // keep this one from attaching.
            dataplane::fastpath::pin::remove_leftover(&config.pin_root, &config.name);
            None
        };
        let xdp_maps = match config.xdp_cache_entries {
            Some(n) => Some(Arc::new(
                CacheMaps::new_pinned(
                    n,
                    dataplane::fastpath::cache::MAX_TARGETS,
                    config.ct_limit,
                    pins.clone(),
                )
                .map_err(BridgeError::XdpCache)?,
            )),
            None => None,
        };
        if let Some(m) = &xdp_maps {
            m.set_peer_gro(config.xdp_peer_gro);
        }
        let mut opened = ports::open_ports(
            &config.ports,
            config.spare_xsk_ports,
            threads,
            xdp_maps.as_deref(),
        )?;
        // Stops its threads if start-up fails below; every kick has ended
        // before a port closes its socket (see `kicker`).
        let kicks = if tx_cores.is_empty() {
            None
        } else {
            let pool =
                dataplane::kicker::KickPool::start(&tx_cores).map_err(BridgeError::Thread)?;
            for (meta, io) in &mut opened.ports {
                if let Some(cpu) = io.offload_kicks(&pool) {
                    tracing::debug!(port = %meta.name, cpu, "transmits kicked by a transmit thread");
                }
            }
            Some(Arc::new(pool))
        };
        let umem = opened.umem.clone();
        let metas = opened.ports.iter().map(|(m, _)| m.clone()).collect();
        let dpid = config
            .datapath_id
            .unwrap_or_else(|| default_datapath_id(&config.name));
        let (shared, ends) =
            DpShared::with_engines(dpid, metas, threads).map_err(BridgeError::Eventfd)?;
        if let Some(m) = &xdp_maps {
            shared.set_xdp_gen(m.generation().clone());
        }
        shared.set_restore_wait(config.flow_restore_wait);
        let live_cache = xdp_maps.clone();

        let stop = Arc::new(AtomicBool::new(false));
        let failed = Arc::new(AtomicBool::new(false));
        let conntrack = dataplane::conntrack::Conntrack::new(dataplane::conntrack::CtConfig {
            limit: config.ct_limit,
            ..Default::default()
        });
        // The host's conntrack, for connections entering from internal
        // ports (conntrack/host.rs). Without it those are simply new.
        let conntrack = match dataplane::conntrack::ctnetlink::Ctnetlink::open() {
            Ok(host) => conntrack.with_host(Box::new(host)),
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    "cannot reach the host's conntrack (ctnetlink); connections the host \
                     translated will not be recognised"
                );
                conntrack
            }
        };
        if let Some(m) = xdp_maps.as_ref().filter(|_| config.xdp_ct_new) {
            // New connections created by the XDP program
            // (fastpath/ct/kernel_new.rs); without, the packet threads
            // create them all.
            match m.start_kernel_new() {
                Ok(k) => conntrack.set_kernel_new(k),
                Err(e) => tracing::warn!(
                    error = %e,
                    "cannot read the XDP program's new connections; the packet threads create them all"
                ),
            }
        }
        let conntrack = Arc::new(conntrack);
        if let Some(m) = &xdp_maps {
            // A flush must stop the kernel forwarding flushed connections.
            conntrack.set_flush_hook(m.generation().clone());
        }
        // Stops with the bridge, or on any early return below.
        let ct_sweeper = dataplane::conntrack::Conntrack::spawn_sweeper(&conntrack)
            .map_err(BridgeError::CtSweeper)?;
        conntrack.set_xdp_threads(threads);
        let (own, others, owners) = threads::deal(opened.ports, threads);
        let pools = opened.frames.into_pool().split(threads);
        let mut handoffs = if threads > 1 {
            Handoffs::mesh(threads).into_iter().map(Some).collect()
        } else {
            vec![None]
        };
        let common = threads::Common {
            shared: shared.clone(),
            conntrack: conntrack.clone(),
            meters: Arc::default(),
            xdp_maps,
            threads,
            flow_cache_entries: config.flow_cache_entries,
            stop: stop.clone(),
            failed: failed.clone(),
        };
        let mut port_ops = Vec::with_capacity(threads);
        let mut engines = Vec::with_capacity(threads);
        let mut pmd_threads = Vec::with_capacity(threads);
        let starts = own
            .into_iter()
            .zip(others)
            .zip(pools)
            .zip(ends)
            .zip(handoffs.drain(..));
        for (index, ((((own, others), pool), changes), handoffs)) in starts.enumerate() {
            let (ops, ops_rx) = crossbeam::channel::unbounded();
            port_ops.push(ops);
            let start = threads::Start {
                frames: dataplane::ports::UmemFrames::new(pool),
                own,
                others,
                changes,
                port_ops: ops_rx,
                handoffs,
            };
            let id = Arc::new(dataplane::cpus::ThreadId::default());
            match threads::spawn(index, cores.get(index).copied(), start, &common, id.clone()) {
                Ok(t) => {
                    engines.push(t);
                    pmd_threads.push(id);
                }
                Err(e) => {
                    // The threads started stop; the ports not yet handed
                    // to one drop (detaching) with the rest of `starts`.
                    stop.store(true, Ordering::Relaxed);
                    shared.wake();
                    for t in engines {
                        let _ = t.join();
                    }
                    return Err(BridgeError::Thread(e));
                }
            }
        }

        // OpenFlow and the control socket come up, and callers learn that
        // xbr runs, only once the packet threads can receive on every port.
        if !shared.wait_running(ENGINE_START_TIMEOUT) {
            tracing::warn!(
                "the packet threads have not all started after {ENGINE_START_TIMEOUT:?}; going on"
            );
        }
        let bridge = Bridge::new(shared.clone());
        bridge.set_control_limits(ControlLimits {
            tcp_probe: config.inactivity_probe,
            ..config.control.clone()
        });
        bridge.set_max_flows(config.max_flows);
        let live = Arc::new(LivePorts::new(
            umem,
            live_cache,
            port_ops,
            owners,
            pmd_threads.clone(),
            shared.clone(),
            bridge.clone(),
            kicks.clone(),
        ));
        live.set_state_status(state_status.clone());
        // Start sequence, before anything can change the tables: (1) the
        // state file's flows, groups, meters, connections and port
        // numbers; (2) then whatever revalidates against those tables
        // (e.g. adopting pinned XDP state); (3) only then OpenFlow opens.
        let state = config.state.enabled.then(|| {
            let (keeper, ports) = dataplane::state::Keeper::start(
                state_path,
                &config.name,
                saved,
                bridge.clone(),
                conntrack.clone(),
                shared.clone(),
                state_status,
                config.state.snapshot,
                // Under flow-restore-wait whoever set it restores the
                // pipeline (ovs-ctl's ovs-save script), as with
                // ovs-vswitchd; connections and port numbers still come
                // back (in OVS they live in the kernel and the database).
                !config.flow_restore_wait,
            );
            live.prefer_ofports(ports.into_iter().map(|p| (p.name, p.ofport)));
            keeper
        });
        let upcalls = spawn_upcall_thread(
            shared.upcalls(),
            shared.upcall_shares().clone(),
            bridge.clone(),
        );
        let server = match start_server(
            &bridge,
            &mgmt,
            (config.listen.first().copied(), &config.controllers),
            config.tls.as_ref(),
            config.standalone,
            (config.inactivity_probe, &config.controller_probes),
            &config.packet_in_limits,
        ) {
            Ok(s) => s,
            Err(e) => {
                stop.store(true, Ordering::Relaxed);
                shared.wake();
                for t in engines {
                    let _ = t.join();
                }
                return Err(e.into());
            }
        };
        // OVS's flush of a new bridge leaves this one flow (fail_mode.rs).
        if config.standalone && config.controllers.is_empty() {
            if let Err(e) = bridge.add_normal_flow() {
                tracing::error!(bridge = %config.name, "cannot add the NORMAL flow: {e}");
            }
        }
        let ctl_path = crate::ctl::socket_path(&config.rundir, &config.name);
        let of_bridge = bridge.clone();
        let ctl = match crate::ctl::CtlServer::start(
            &ctl_path,
            &config.name,
            bridge,
            conntrack,
            live.clone(),
        ) {
            Ok(c) => c,
            Err(e) => {
                server.shutdown();
                stop.store(true, Ordering::Relaxed);
                shared.wake();
                for t in engines {
                    let _ = t.join();
                }
                return Err(e.into());
            }
        };
        let carrier = dataplane::ports::carrier::CarrierWatch::start(&config.name, live.clone());
        tracing::info!(
            bridge = %config.name,
            mgmt = %mgmt.display(),
            ctl = %ctl_path.display(),
            ports = config.ports.len(),
            "xbr running"
        );
        Ok(RunningBridge {
            name: config.name.clone(),
            server: Some(server),
            bridge: of_bridge,
            mgmt,
            ctl,
            stop,
            shared,
            engines,
            upcalls,
            failed,
            ct_sweeper,
            live,
            carrier,
            pmd_threads,
            kicks,
            state,
            pins: pins.map(|p| {
                p.remove_stale_links();
                (p, config.pin_root.clone())
            }),
            taken_over: AtomicBool::new(false),
            packet_in_limits: config.packet_in_limits,
            controller_probes: config.controller_probes,
            tls: config.tls,
        })
    }

    /// Takes over from the xbr whose pinned state this start adopted: its
    /// flow cache entries, which kept forwarding until now, are checked
    /// against this process's tables and kept, rewritten or removed
    /// (`fastpath::cache::take_over`). The daemon calls this once the tables are
    /// final: after restoring saved state, if it does; at once otherwise.
    /// Nothing to do after a clean start.
    pub fn take_over_pinned(&self) {
        if self.taken_over.swap(true, Ordering::Relaxed) {
            return;
        }
        if let (Some((pins, _)), Some(maps)) = (&self.pins, self.live.xdp_cache()) {
            // The packet threads apply every change before the request
            // first, so a change they see with it came after it (see
            // `Engine::apply_changes`).
            self.bridge.barrier();
            dataplane::fastpath::cache::take_over(maps, pins);
        }
    }

    /// The pin directory, if the bridge's XDP state is pinned.
    pub fn pins(&self) -> Option<&Arc<dataplane::fastpath::pin::Pins>> {
        self.pins.as_ref().map(|(p, _)| p)
    }

    /// The OpenFlow side (flow tables, limits and their counters).
    pub fn openflow(&self) -> &Arc<Bridge> {
        &self.bridge
    }

    /// Sets the TLS settings of `ssl:`/`pssl:` targets, for the next
    /// [`RunningBridge::restart_openflow`].
    pub fn set_tls(&mut self, tls: Option<Arc<TlsContext>>) {
        self.tls = tls;
    }

    /// The TLS settings `ssl:`/`pssl:` targets use.
    pub fn tls(&self) -> Option<&Arc<TlsContext>> {
        self.tls.as_ref()
    }

    /// Sets the controllers' PACKET_IN rate limits, for the next
    /// [`RunningBridge::restart_openflow`].
    pub fn set_packet_in_limits(&mut self, limits: BTreeMap<SocketAddr, PacketInLimit>) {
        self.packet_in_limits = limits;
    }

    /// Sets the controllers' own inactivity probe intervals, for the
    /// next [`RunningBridge::restart_openflow`].
    pub fn set_controller_probes(&mut self, probes: BTreeMap<SocketAddr, std::time::Duration>) {
        self.controller_probes = probes;
    }

    /// Moves the packet threads to `pmd_cpus` (thread by thread; more
    /// CPUs than threads are ignored) and the transmit threads to
    /// `tx_cpus` while running (OVSDB's `pmd-cpu-mask` changed). The
    /// number of transmit threads is set at start: a different one is an
    /// error, after the packet threads have moved.
    pub fn set_cpus(&self, pmd_cpus: &[usize], tx_cpus: &[usize]) -> Result<(), BridgeError> {
        for (thread, &cpu) in self.pmd_threads.iter().zip(pmd_cpus) {
            dataplane::cpus::core_id(cpu)?;
            thread.pin(cpu)?;
        }
        let running = self.kicks.as_ref().map_or(0, |k| k.len());
        if running != tx_cpus.len() {
            return Err(BridgeError::TxThreads {
                asked: tx_cpus.len(),
                running,
            });
        }
        if let Some(k) = &self.kicks {
            k.repin(tx_cpus)?;
        }
        Ok(())
    }

    /// OVSDB's `flow-restore-wait`: while on, the packet threads forward
    /// nothing (see `DpShared::set_restore_wait`); the caller also keeps
    /// the controllers away meanwhile, as ovs-vswitchd does. A bridge
    /// that adopted a previous xbr's flow cache and has not taken over yet
    /// (the daemon waits for the key to clear) takes over when it clears:
    /// the entries, which kept forwarding through the wait as the kernel
    /// datapath's flows do, are checked against the restored tables
    /// instead of being flushed.
    pub fn set_restore_wait(&self, on: bool) {
        let adopted = self
            .pins
            .as_ref()
            .and_then(|(p, _)| p.adoption())
            .is_some_and(|a| a.maps);
        if !on && adopted && !self.taken_over.load(Ordering::Relaxed) {
            self.shared.end_restore_wait_keeping_cache();
            self.take_over_pinned();
            return;
        }
        self.shared.set_restore_wait(on);
    }

    /// Adds and removes ports while the bridge runs.
    pub fn live(&self) -> &Arc<LivePorts> {
        &self.live
    }

    /// The bridge's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The datapath id OpenFlow reports.
    /// The state of the active controller at `target`, if this bridge
    /// connects to it (for the database's `Controller` rows).
    pub fn controller_status(
        &self,
        target: std::net::SocketAddr,
    ) -> Option<ofproto::controller_status::ControllerStatus> {
        self.server.as_ref()?.controller_status(target)
    }

    pub fn datapath_id(&self) -> u64 {
        ofproto::Datapath::datapath_id(&*self.shared)
    }

    /// Flushes the flow tables as OVS does when the fail mode, or whether
    /// any primary controller is configured, changes: every flow goes,
    /// and a standalone bridge without controllers gets its priority-0
    /// NORMAL flow (`ofproto::fail_mode`).
    pub fn flush_flows(&self, standalone_without_controllers: bool) {
        match self.bridge.flush_flows(standalone_without_controllers) {
            Ok(()) => {
                tracing::info!(bridge = %self.name, normal_flow = standalone_without_controllers,
                "flow tables flushed (fail mode or controllers changed)")
            }
            Err(e) => tracing::error!(bridge = %self.name, "flushing the flow tables: {e}"),
        }
    }

    /// The OpenFlow server (fail mode, controllers).
    /// The OpenFlow server; `None` if a restart failed (logged).
    pub fn server(&self) -> Option<&Server> {
        self.server.as_ref()
    }

    pub fn server_mut(&mut self) -> Option<&mut Server> {
        self.server.as_mut()
    }

    /// Restarts the OpenFlow server with other controllers and TCP
    /// listener, on the same flow tables and packet threads (so forwarding
    /// goes on): the way to bring back a server whose restart failed
    /// (controllers, the passive target and TLS settings change in
    /// place: `Server::set_controllers`, `Server::set_listener`).
    /// Connections to the management socket are cut; `ovs-ofctl` opens a
    /// new one per command anyway. If the new listener cannot be set up,
    /// the server comes back as it was and the error is returned.
    pub fn restart_openflow(
        &mut self,
        listen: Option<Target>,
        controllers: &[Target],
        standalone: bool,
        probe: std::time::Duration,
    ) -> Result<(), BridgeError> {
        let old = self.server.take().map(|s| {
            let listen = s.local_tcp_addr().map(|addr| Target {
                addr,
                tls: s.listener_is_tls(),
            });
            let targets: Vec<Target> = s
                .controller_targets()
                .into_iter()
                .map(|addr| Target {
                    addr,
                    tls: s.controller_is_tls(addr),
                })
                .collect();
            s.shutdown();
            (listen, targets)
        });
        match start_server(
            &self.bridge,
            &self.mgmt,
            (listen, controllers),
            self.tls.as_ref(),
            standalone,
            (probe, &self.controller_probes),
            &self.packet_in_limits,
        ) {
            Ok(s) => {
                self.server = Some(s);
                Ok(())
            }
            Err(e) => {
                if let Some((listen, targets)) = old {
                    match start_server(
                        &self.bridge,
                        &self.mgmt,
                        (listen, &targets),
                        self.tls.as_ref(),
                        standalone,
                        (probe, &self.controller_probes),
                        &self.packet_in_limits,
                    ) {
                        Ok(s) => self.server = Some(s),
                        Err(e2) => tracing::error!(
                            bridge = %self.name,
                            "OpenFlow server could not be restarted: {e2}"
                        ),
                    }
                }
                Err(e.into())
            }
        }
    }

    /// Stops the server (unlinking the socket), then the packet threads,
    /// which detach XDP programs and remove TAP devices as their ports
    /// drop.
    /// Returns false if a packet thread had failed (panicked).
    /// The state file is written once OpenFlow is closed (so it is the
    /// final state), while the packet threads still run.
    pub fn shutdown(self) -> bool {
        // The process exits: the kernel path (`dataplane::fastpath::pin`) and the state
        // file stay, unless `ovs-appctl exit --cleanup` asked for a teardown.
        let keep = !dataplane::fastpath::pin::cleanup_requested();
        self.stop(keep)
    }

    /// Stops the bridge for good (deleted from the database, or torn
    /// down): its state file is removed instead of written and its pinned
    /// programs and maps are removed, as nothing of it should come back.
    pub fn shutdown_and_forget(self) -> bool {
        self.stop(false)
    }

    fn stop(self, keep: bool) -> bool {
        let pins = self.pins.clone();
        if let (Some((p, _)), true) = (&pins, keep) {
            p.keep_on_exit();
            tracing::info!(
                dir = %p.dir().display(),
                "leaving the XDP programs and flow cache pinned: cached flows keep \
                 forwarding, the rest is dropped, until the next xbr takes over \
                 (`xbr teardown` removes them)"
            );
        }
        let ok = self.stop_threads(keep);
        if let (Some((p, root)), false) = (&pins, keep) {
            let name = p
                .dir()
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            match dataplane::fastpath::pin::teardown(root, &name) {
                Ok(n) => {
                    tracing::info!(dir = %p.dir().display(), pins = n, "pinned XDP state removed")
                }
                Err(e) => tracing::warn!(error = %e, "cannot remove the pinned XDP state"),
            }
        }
        ok
    }

    /// Stops the server and the threads; `save`: write the state file
    /// (else it is removed).
    fn stop_threads(mut self, save: bool) -> bool {
        drop(self.carrier.take());
        self.ctl.shutdown();
        if let Some(s) = self.server {
            s.shutdown();
        }
        match (self.state.take(), save) {
            (Some(k), true) => k.stop_and_save(),
            (Some(k), false) => k.forget(),
            (None, _) => {}
        }
        self.stop.store(true, Ordering::Relaxed);
        self.shared.wake();
        for t in self.engines {
            if t.join().is_err() {
                tracing::error!("packet thread panicked");
            }
        }
        if let Some(t) = self.upcalls {
            let _ = t.join();
        }
        drop(self.ct_sweeper);
        !self.failed.load(Ordering::SeqCst)
    }
}

/// Starts the OpenFlow server of `bridge` with its fail mode and
/// targets (the passive one, the controllers), each controller probed
/// at its own interval in `probes` or else at the default.
fn start_server(
    bridge: &Arc<Bridge>,
    mgmt: &std::path::Path,
    (listen, controllers): (Option<Target>, &[Target]),
    tls: Option<&Arc<TlsContext>>,
    standalone: bool,
    (probe, probes): (
        std::time::Duration,
        &BTreeMap<SocketAddr, std::time::Duration>,
    ),
    packet_in_limits: &BTreeMap<SocketAddr, PacketInLimit>,
) -> Result<Server, ofproto::OfprotoError> {
    // A TLS target without TLS settings was refused (and logged) by
    // whoever built the configuration; it is served as nothing here.
    let with_tls = |t: &Target| if t.tls { tls.cloned() } else { None };
    let listen_tls = listen.and_then(|l| with_tls(&l));
    let listen = listen.filter(|l| !l.tls || listen_tls.is_some());
    let mut s = Server::start_with_tls(bridge.clone(), mgmt, listen.map(|l| l.addr), listen_tls)?;
    s.set_fail_mode(standalone);
    for c in controllers {
        let ctx = with_tls(c);
        if c.tls && ctx.is_none() {
            continue;
        }
        let limit = packet_in_limits.get(&c.addr).copied();
        let probe = probes.get(&c.addr).copied().unwrap_or(probe);
        if let Err(e) = s.add_controller_with_tls(c.addr, ctx, probe, limit) {
            s.shutdown();
            return Err(e);
        }
    }
    Ok(s)
}

/// The thread that turns upcalls from the packet thread into PACKET_INs.
/// It ends when the packet thread drops its end of the queue. Without it
/// (the OS refused a thread) controller packets are dropped and counted by
/// the packet thread, and the switch still forwards.
fn spawn_upcall_thread(
    rx: crossbeam::channel::Receiver<dataplane::control::Upcall>,
    shares: Arc<dataplane::control::upcall_shares::UpcallShares>,
    bridge: Arc<Bridge>,
) -> Option<JoinHandle<()>> {
    let spawned = std::thread::Builder::new()
        .name("xbr-upcall".into())
        .spawn(move || {
            let mut undelivered = 0u64;
            for u in rx.iter() {
                shares.release(u.in_port);
                let delivered = bridge.packet_in(ofproto::wire::packet_io::PacketIn::new(
                    u.in_port,
                    u.tun_id,
                    u.reason,
                    u.table_id,
                    u.cookie,
                    u.total_len,
                    u.data,
                ));
                if !delivered {
                    // output:CONTROLLER with no controller connected: the
                    // packet is dropped; say so once, count the rest.
                    if undelivered == 0 {
                        tracing::warn!(
                            "a flow sends packets to the controller but none is connected; \
                             dropping them"
                        );
                    }
                    undelivered += 1;
                }
            }
            if undelivered > 0 {
                tracing::info!(
                    undelivered,
                    "packets for the controller dropped: none connected"
                );
            }
        });
    match spawned {
        Ok(t) => Some(t),
        Err(e) => {
            tracing::warn!(error = %e, "cannot start the upcall thread; packets to controllers will be dropped");
            None
        }
    }
}
