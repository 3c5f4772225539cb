//! The TCP listener of a passive target (`ptcp:`, or `pssl:` with TLS):
//! bound, served by its own accept thread, and replaced in place when the
//! target changes ([`Server::set_listener`]). The connections it accepted
//! close with it, as OVS closes a removed service's connections; the
//! management socket's and the active controllers' go on. A new probe
//! interval or packet-in limit reaches its live connections
//! ([`Server::set_passive_limits`]).

use super::stream::Stream;
use super::{Listener, Server, Shared};
use crate::conn_settings::probe_or_off;
use crate::error::OfprotoError;
use crate::limits::{ControlLimits, PacketInLimit};
use crate::tls::TlsContext;
use parking_lot::Mutex;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tracing::{info, warn};

pub(super) struct TcpService {
    /// The address asked for (`ptcp:0` binds some free port).
    requested: SocketAddr,
    /// The address bound.
    pub(super) local: SocketAddr,
    /// The TLS context its next connections speak, for `pssl:`: new TLS
    /// settings replace it in place, as OVS's take effect for the next
    /// connections.
    tls: Arc<Mutex<Option<Arc<TlsContext>>>>,
    /// A duplicate of the listening socket, shut down to wake the accept
    /// loop (a wake-up connection could go to another listener).
    wake: OwnedFd,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl TcpService {
    /// Listens on `addr` and accepts on a thread of its own.
    pub(super) fn start(
        shared: &Arc<Shared>,
        addr: SocketAddr,
        tls: Option<Arc<TlsContext>>,
    ) -> Result<TcpService, OfprotoError> {
        if let Some(ctx) = &tls {
            if let Err(e) = ctx.check() {
                warn!(%addr, "OpenFlow pssl: {e}; connections will fail until it is fixed");
            }
        }
        let err = |source| OfprotoError::Tcp { addr, source };
        let listener = TcpListener::bind(addr).map_err(err)?;
        let wake = OwnedFd::from(listener.try_clone().map_err(err)?);
        let local = listener.local_addr().map_err(err)?;
        let stop = Arc::new(AtomicBool::new(false));
        let tls = Arc::new(Mutex::new(tls));
        let (s, halt, ctx) = (shared.clone(), stop.clone(), tls.clone());
        let thread = std::thread::Builder::new()
            .name("of-tcp".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if s.stopped() || halt.load(Ordering::SeqCst) {
                        break;
                    }
                    match conn {
                        Ok(c) => {
                            let peer = c.peer_addr().map(|a| a.to_string()).unwrap_or_default();
                            // Replies are small and latency matters (lock-step barriers).
                            let _ = c.set_nodelay(true);
                            let ctx = ctx.lock().clone();
                            s.spawn_connection(Stream::Tcp(c), peer, Listener::Tcp, ctx);
                        }
                        Err(e) => warn!(error = %e, "tcp accept failed"),
                    }
                }
            })
            .map_err(|source| OfprotoError::Thread {
                what: "tcp listener",
                source,
            })?;
        Ok(TcpService {
            requested: addr,
            local,
            tls,
            wake,
            stop,
            thread,
        })
    }

    /// Whether it speaks TLS (`pssl:`).
    pub(super) fn is_tls(&self) -> bool {
        self.tls.lock().is_some()
    }

    /// Whether it serves `addr` with TLS or without as `tls` says; if so,
    /// its next connections take `tls`'s settings.
    fn serves(&self, addr: SocketAddr, tls: &Option<Arc<TlsContext>>) -> bool {
        let mut ours = self.tls.lock();
        if self.requested != addr || ours.is_some() != tls.is_some() {
            return false;
        }
        *ours = tls.clone();
        true
    }

    /// Makes a blocked `accept` return: on Linux, shutting a listening
    /// socket down does so at once.
    pub(super) fn wake(&self) {
        if let Err(e) =
            nix::sys::socket::shutdown(self.wake.as_raw_fd(), nix::sys::socket::Shutdown::Both)
        {
            warn!(error = %e, "cannot shut a listening socket down");
        }
    }

    /// Waits for the accept thread (after the server's stop flag is set
    /// and [`TcpService::wake`]).
    pub(super) fn join(self) {
        let _ = self.thread.join();
    }

    /// Stops accepting and closes the connections it accepted, waiting
    /// for their threads. The address is free again when it returns.
    fn stop(self, shared: &Shared) -> (SocketAddr, Option<Arc<TlsContext>>) {
        self.stop.store(true, Ordering::SeqCst);
        self.wake();
        let again = (self.requested, self.tls.lock().clone());
        self.join();
        shared.close_connections(|from| from == Some(Listener::Tcp));
        again
    }
}

impl Server {
    /// The passive target's inactivity probe (zero: none) and packet-in
    /// limit (its Controller row's `inactivity_probe` and
    /// `controller_rate_limit`):
    /// the connections it accepts from now on take them, and those it
    /// accepted before follow them at their next message or tick, as OVS
    /// reconfigures each connection of a service.
    pub fn set_passive_limits(&self, probe: Duration, packet_in: Option<PacketInLimit>) {
        let bridge = &self.shared.bridge;
        bridge.set_control_limits(ControlLimits {
            tcp_probe: probe,
            tcp_packet_in: packet_in,
            ..bridge.control_limits()
        });
        // After the cell, under the lock a new connection sets its
        // timeouts under: none is left with the old ones.
        for (stream, _, from) in self.shared.conns.lock().values() {
            if *from == Some(Listener::Tcp) {
                if let Err(e) = stream.set_timeouts(probe_or_off(probe)) {
                    warn!(error = %e, "cannot set the new inactivity probe on the socket");
                }
            }
        }
    }

    /// Serves the passive target `tcp` (`pssl:` with `tls`, `ptcp:`
    /// without) from now on, or none: the old listener and the
    /// connections it accepted close, and a new one listens. The
    /// management socket, the active controllers and their connections
    /// are not touched. If it serves that target already, only its next
    /// connections take `tls` (new TLS settings). If
    /// the new address cannot be bound, the old listener comes back and
    /// the error is returned.
    pub fn set_listener(
        &mut self,
        tcp: Option<SocketAddr>,
        tls: Option<Arc<TlsContext>>,
    ) -> Result<(), OfprotoError> {
        match (&self.tcp, tcp) {
            (None, None) => return Ok(()),
            (Some(t), Some(addr)) if t.serves(addr, &tls) => return Ok(()),
            _ => {}
        }
        let old = self.tcp.take().map(|t| t.stop(&self.shared));
        let Some(addr) = tcp else {
            info!("OpenFlow TCP listener closed");
            return Ok(());
        };
        match TcpService::start(&self.shared, addr, tls) {
            Ok(t) => {
                info!(tcp = %t.local, tls = t.is_tls(), "OpenFlow listening");
                self.tcp = Some(t);
                Ok(())
            }
            Err(e) => {
                if let Some((addr, tls)) = old {
                    match TcpService::start(&self.shared, addr, tls) {
                        Ok(t) => self.tcp = Some(t),
                        Err(e2) => warn!("the OpenFlow TCP listener could not be restored: {e2}"),
                    }
                }
                Err(e)
            }
        }
    }
}
