//! A running bridge: its ports, the packet thread and the OpenFlow server,
//! started in an order that leaves nothing behind on failure and stopped in
//! the reverse order.

use crate::config::PortSpec;
use crate::control::DpShared;
use crate::engine::Engine;
use crate::ports::{self, PortError};
use ofproto::{Bridge, Server};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use thiserror::Error;

pub struct BridgeConfig {
    pub name: String,
    pub rundir: PathBuf,
    pub listen: Vec<SocketAddr>,
    pub ports: Vec<PortSpec>,
    pub cpu: Option<usize>,
    pub datapath_id: Option<u64>,
    /// Entries of the packet thread's translation cache; 0 turns it off.
    pub flow_cache_entries: usize,
    /// Fail mode standalone: NORMAL forwarding while no controller is
    /// connected. False: secure (flows only).
    pub standalone: bool,
    /// OpenFlow controllers to stay connected to.
    pub controllers: Vec<SocketAddr>,
    /// Idle time after which a controller is probed (and, after as much
    /// again, dropped and reconnected).
    pub inactivity_probe: std::time::Duration,
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
    #[error("cannot create the packet thread's wakeup eventfd: {0}")]
    Eventfd(nix::Error),
    #[error("signal handling: {0}")]
    Signals(std::io::Error),
    #[error("cannot start the packet thread: {0}")]
    Thread(std::io::Error),
    #[error(transparent)]
    Ctl(#[from] crate::ctl::CtlError),
    #[error("CPU {cpu} does not exist or is not allowed (available: {available})")]
    BadCpu { cpu: usize, available: String },
}

impl BridgeError {
    /// Errors caused by the configuration the user gave (exit code 2).
    pub fn is_config_error(&self) -> bool {
        match self {
            BridgeError::BadName(_) | BridgeError::BadCpu { .. } => true,
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
    server: Server,
    ctl: crate::ctl::CtlServer,
    stop: Arc<AtomicBool>,
    shared: Arc<DpShared>,
    engine: JoinHandle<()>,
    /// Hands packets for the controllers to the OpenFlow side; ends when
    /// the packet thread does (`None` if it could not be started).
    upcalls: Option<JoinHandle<()>>,
    /// Set by a packet thread that panicked.
    failed: Arc<AtomicBool>,
    signals: Signals,
}

impl RunningBridge {
    pub fn start(config: BridgeConfig) -> Result<RunningBridge, BridgeError> {
        if config.name.is_empty() || config.name.len() > 15 || config.name.contains('/') {
            return Err(BridgeError::BadName(config.name));
        }
        let core = match config.cpu {
            None => None,
            Some(cpu) => {
                let ids = core_affinity::get_core_ids().unwrap_or_default();
                match ids.iter().find(|c| c.id == cpu) {
                    Some(c) => Some(*c),
                    None => {
                        let available: Vec<String> = ids.iter().map(|c| c.id.to_string()).collect();
                        return Err(BridgeError::BadCpu {
                            cpu,
                            available: available.join(","),
                        });
                    }
                }
            }
        };
        std::fs::create_dir_all(&config.rundir).map_err(|source| BridgeError::Rundir {
            path: config.rundir.clone(),
            source,
        })?;
        // Signals first, so a SIGTERM during start-up is not lost.
        let signals = Signals::new([SIGINT, SIGTERM]).map_err(BridgeError::Signals)?;

        // Refuse before attaching anything if a live switch owns the socket
        // (Server::start checks again, race-free enough for one host).
        let mgmt = config.rundir.join(format!("{}.mgmt", config.name));
        if std::os::unix::net::UnixStream::connect(&mgmt).is_ok() {
            return Err(BridgeError::Server(ofproto::OfprotoError::InUse(mgmt)));
        }

        // Ports: opened all or nothing (a failure drops the ones opened).
        let opened = ports::open_ports(&config.ports)?;
        let metas = opened.ports.iter().map(|(m, _)| m.clone()).collect();
        let dpid = config
            .datapath_id
            .unwrap_or_else(|| default_datapath_id(&config.name));
        let (shared, changes) = DpShared::new(dpid, metas).map_err(BridgeError::Eventfd)?;

        let stop = Arc::new(AtomicBool::new(false));
        let failed = Arc::new(AtomicBool::new(false));
        let engine = {
            let stop = stop.clone();
            let failed = failed.clone();
            let shared = shared.clone();
            let flow_cache_entries = config.flow_cache_entries;
            std::thread::Builder::new()
                .name("xbr-pmd".into())
                .spawn(move || {
                    if let Some(core) = core {
                        if !core_affinity::set_for_current(core) {
                            tracing::warn!("could not pin the packet thread to CPU {}", core.id);
                        }
                    }
                    let mut engine = Engine::new(opened.frames, opened.ports, shared, changes);
                    engine.set_flow_cache(flow_cache_entries);
                    // A packet thread that died must not leave a process
                    // that still answers OpenFlow but forwards nothing:
                    // stop the whole switch (the ports detach as the
                    // engine unwinds) and exit non-zero.
                    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        engine.run(&stop)
                    }));
                    let engine = match run {
                        Ok(e) => e,
                        Err(_) => {
                            tracing::error!("the packet thread panicked; stopping xbr");
                            failed.store(true, Ordering::SeqCst);
                            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGTERM);
                            return;
                        }
                    };
                    let d = engine.drops;
                    tracing::info!(
                        table_miss = d.table_miss,
                        explicit = d.explicit,
                        unsupported = d.unsupported,
                        port_down = d.port_down,
                        no_frames = d.no_frames,
                        tx_full = d.tx_full,
                        bad_output_port = d.bad_output_port,
                        "packet thread stopped; drops"
                    );
                    if d.tunnel != crate::vxlan::TunnelDrops::default() {
                        tracing::info!(tunnel = ?d.tunnel, "tunnel drops");
                    }
                    // Ports detach here, on the thread that owned them.
                    let (mut frames, ports) = engine.into_parts();
                    for port in ports {
                        port.close(&mut frames);
                    }
                })
                .map_err(BridgeError::Thread)?
        };

        let bridge = Bridge::new(shared.clone());
        let upcalls = spawn_upcall_thread(shared.upcalls(), bridge.clone());
        let server = match Server::start(bridge.clone(), &mgmt, config.listen.first().copied())
            .and_then(|mut s| {
                s.set_fail_mode(config.standalone);
                for c in &config.controllers {
                    if let Err(e) = s.add_controller(*c, config.inactivity_probe) {
                        s.shutdown();
                        return Err(e);
                    }
                }
                Ok(s)
            }) {
            Ok(s) => s,
            Err(e) => {
                stop.store(true, Ordering::Relaxed);
                shared.wake();
                let _ = engine.join();
                return Err(e.into());
            }
        };
        let ctl_path = crate::ctl::socket_path(&config.rundir, &config.name);
        let ctl = match crate::ctl::CtlServer::start(&ctl_path, &config.name, bridge) {
            Ok(c) => c,
            Err(e) => {
                server.shutdown();
                stop.store(true, Ordering::Relaxed);
                shared.wake();
                let _ = engine.join();
                return Err(e.into());
            }
        };
        tracing::info!(
            bridge = %config.name,
            mgmt = %mgmt.display(),
            ctl = %ctl_path.display(),
            ports = config.ports.len(),
            "xbr running"
        );
        Ok(RunningBridge {
            server,
            ctl,
            stop,
            shared,
            engine,
            upcalls,
            failed,
            signals,
        })
    }

    /// Blocks until SIGINT or SIGTERM.
    pub fn wait_for_signal(&mut self) {
        if let Some(sig) = self.signals.forever().next() {
            tracing::info!(signal = sig, "shutting down");
        }
    }

    /// Stops the server (unlinking the socket), then the packet thread, which
    /// detaches XDP programs and removes TAP devices as its ports drop.
    /// Returns false if the packet thread had failed (panicked).
    pub fn shutdown(self) -> bool {
        self.ctl.shutdown();
        self.server.shutdown();
        self.stop.store(true, Ordering::Relaxed);
        self.shared.wake();
        if self.engine.join().is_err() {
            tracing::error!("packet thread panicked");
        }
        if let Some(t) = self.upcalls {
            let _ = t.join();
        }
        !self.failed.load(Ordering::SeqCst)
    }
}

/// The thread that turns upcalls from the packet thread into PACKET_INs.
/// It ends when the packet thread drops its end of the queue. Without it
/// (the OS refused a thread) controller packets are dropped and counted by
/// the packet thread, and the switch still forwards.
fn spawn_upcall_thread(
    rx: crossbeam::channel::Receiver<crate::control::Upcall>,
    bridge: Arc<Bridge>,
) -> Option<JoinHandle<()>> {
    let spawned = std::thread::Builder::new()
        .name("xbr-upcall".into())
        .spawn(move || {
            let mut undelivered = 0u64;
            for u in rx.iter() {
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
