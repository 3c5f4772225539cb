//! Listeners: the bridge's unix management socket and an optional TCP
//! port (`ptcp:`, or `pssl:` with TLS), with one thread per accepted
//! connection (and one writing to it, see `outbox.rs`), at most
//! `max_connections` per listener (see `limits.rs`): the next one is
//! closed at once, counted and logged. A `pssl:` connection's TLS
//! handshake runs on its connection thread, after the connection was
//! counted, and must complete within the HELLO timeout; so a peer stalling
//! in the handshake is bounded as a silent one is.
//!
//! # Design
//!
//! Each listener runs a blocking `accept` loop on its own thread. The
//! server keeps a clone of every live connection's socket so that
//! [`Server::shutdown`] can shut them down, which makes their blocking
//! reads return; listener threads are woken by shutting their listening
//! socket down after the stop flag is set (not by connecting to it: the
//! socket file may be gone by then).
//!
//! Parts: this file holds the management socket, the accepted
//! connections and the server's life; `tcp.rs` the passive target's
//! listener, replaced in place when the target changes; `controller.rs`
//! the active controllers, one thread each, added and removed in place;
//! `stream.rs` the socket type both kinds of connection share.

mod controller;
mod stream;
mod tcp;

pub use controller::WantedController;

use crate::bridge::Bridge;
use crate::conn_settings::ProbeCell;
use crate::connection::Connection;
use crate::controller_status::ControllerTable;
use crate::error::OfprotoError;
use crate::expiry::{Expiry, EXPIRY_INTERVAL};
use crate::fail_open::FailOpen;
use crate::limits::LimitStats;
use crate::tls::stream::{TlsReader, TlsWriter};
use crate::tls::{TlsContext, TlsError};
use controller::ActiveController;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use stream::Stream;
use tcp::TcpService;
use tracing::{debug, info, warn};

/// A live connection: a handle to shut its socket down, its thread
/// (taken by whoever joins it), and the listener that accepted it (none
/// for an active controller's).
type ConnEntry = (Stream, Option<JoinHandle<()>>, Option<Listener>);

/// State shared by listener and connection threads.
struct Shared {
    bridge: Arc<Bridge>,
    stop: AtomicBool,
    next_id: AtomicU64,
    /// When a standalone bridge fails open (`fail_open.rs`).
    fail_open: Arc<FailOpen>,
    /// Each active controller's state, for the database.
    controller_table: ControllerTable,
    /// Live connections: a handle to shut each down, and its thread.
    conns: Mutex<HashMap<u64, ConnEntry>>,
    /// Connections each [`Listener`] serves now.
    accepted: [AtomicUsize; 2],
}

impl Shared {
    /// Serves a connection `listener` accepted (speaking TLS with `tls`,
    /// for `pssl:`), unless that listener already serves as many as it
    /// may.
    fn spawn_connection(
        self: &Arc<Self>,
        stream: Stream,
        peer: String,
        listener: Listener,
        tls: Option<Arc<TlsContext>>,
    ) {
        let limits = self.bridge.control_limits();
        // The passive target's connections follow its probe interval and
        // packet-in limit while they run (`Server::set_passive_limits`);
        // the management socket's keep OVS's fixed probe.
        let (probe, packet_in_limit) = match listener {
            Listener::Unix => (ProbeCell::new(Some(limits.mgmt_probe)), None),
            Listener::Tcp => {
                let cells = self.bridge.passive_cells();
                (cells.probe, Some(cells.packet_in))
            }
        };
        let count = &self.accepted[listener as usize];
        if count.load(Ordering::SeqCst) >= limits.max_connections {
            LimitStats::hit(&self.bridge.limit_stats().connections_refused);
            warn!(
                %peer,
                max = limits.max_connections,
                "OpenFlow connection refused: the listener serves as many as it may"
            );
            stream.shutdown();
            return;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (reader, writer, killer, handle) =
            match (stream.try_clone(), stream.try_clone(), stream.try_clone()) {
                (Ok(r), Ok(w), Ok(k)) => (r, w, k, stream),
                (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
                    warn!(%peer, error = %e, "cannot clone connection socket");
                    return;
                }
            };
        let shared = self.clone();
        let hello_timeout = limits.hello_timeout;
        let mut conns = self.conns.lock();
        // Under the lock `Server::set_passive_limits` takes, after it set
        // the cell: a connection accepted meanwhile reads the new interval.
        if let Err(e) = handle.set_timeouts(probe.get()) {
            warn!(%peer, error = %e, "cannot set the connection's timeouts");
            return;
        }
        count.fetch_add(1, Ordering::SeqCst);
        let spawned = std::thread::Builder::new()
            .name(format!("ofconn-{id}"))
            .spawn(move || {
                let kill: Box<dyn Fn() + Send + Sync> = Box::new(move || killer.shutdown());
                match (tls, reader) {
                    (Some(ctx), Stream::Tcp(sock)) => {
                        if let Some((r, w)) = shared.accept_tls(&ctx, sock, &peer, hello_timeout) {
                            let failed = r.error_cell();
                            Connection::new(r, w, shared.bridge.clone(), peer)
                                .bounded_by(probe, kill)
                                .packet_in_limit_by(packet_in_limit)
                                .run();
                            if failed.get().is_some() {
                                LimitStats::hit(&shared.bridge.limit_stats().tls_failures);
                            }
                        }
                        drop(writer);
                    }
                    (_, reader) => Connection::new(reader, writer, shared.bridge.clone(), peer)
                        .bounded_by(probe, kill)
                        .packet_in_limit_by(packet_in_limit)
                        .run(),
                }
                shared.conns.lock().remove(&id);
                shared.accepted[listener as usize].fetch_sub(1, Ordering::SeqCst);
            });
        match spawned {
            Ok(t) => {
                conns.insert(id, (handle, Some(t), Some(listener)));
            }
            Err(e) => {
                count.fetch_sub(1, Ordering::SeqCst);
                warn!(error = %e, "cannot start connection thread");
            }
        }
    }
}

/// Which listener accepted a connection (an index into
/// `Shared::accepted`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Listener {
    Unix = 0,
    Tcp = 1,
}

impl Shared {
    /// The TLS handshake of a connection the `pssl:` listener accepted,
    /// within `timeout`; a failure is logged (naming the peer, and the
    /// file or certificate at fault) and counted.
    fn accept_tls(
        &self,
        ctx: &TlsContext,
        sock: TcpStream,
        peer: &str,
        timeout: Duration,
    ) -> Option<(TlsReader, TlsWriter)> {
        match crate::tls::stream::accept(ctx, sock, peer, timeout) {
            Ok(halves) => {
                debug!(%peer, "TLS session established");
                Some(halves)
            }
            Err(e @ TlsError::HandshakeTimeout { .. }) => {
                LimitStats::hit(&self.bridge.limit_stats().hello_timeouts);
                warn!("{e}; disconnecting");
                None
            }
            Err(e) => {
                LimitStats::hit(&self.bridge.limit_stats().tls_failures);
                warn!("OpenFlow pssl: {e}");
                None
            }
        }
    }

    /// Shuts down the connections whose listener `which` picks (`None`:
    /// an active controller's) and waits for the threads of the accepted
    /// ones.
    fn close_connections(&self, which: impl Fn(Option<Listener>) -> bool) {
        let threads: Vec<JoinHandle<()>> = {
            let mut conns = self.conns.lock();
            conns
                .values_mut()
                .filter(|(_, _, from)| which(*from))
                .filter_map(|(s, t, _)| {
                    s.shutdown();
                    t.take()
                })
                .collect()
        };
        for t in threads {
            let _ = t.join();
        }
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Sleeps `d`, or less if the server stops meanwhile.
    fn wait(&self, d: Duration) {
        self.wait_unless(d, &AtomicBool::new(false));
    }

    /// Sleeps `d`, or less if the server or `also` stops meanwhile.
    fn wait_unless(&self, d: Duration, also: &AtomicBool) {
        let until = Instant::now() + d;
        while !self.stopped() && !also.load(Ordering::SeqCst) {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            std::thread::sleep(left.min(STOP_POLL));
        }
    }
}

/// The OpenFlow listeners of one bridge.
pub struct Server {
    shared: Arc<Shared>,
    unix_path: PathBuf,
    /// A duplicate of the management socket's listening socket, shut down
    /// to wake its accept loop (a wake-up connection would fail once the
    /// socket file is gone).
    unix_wake: OwnedFd,
    /// The passive target's listener, if any.
    tcp: Option<TcpService>,
    threads: Vec<JoinHandle<()>>,
    /// Active connections to controllers, one thread per target; each
    /// serves its connection itself and reconnects when it drops.
    controllers: Vec<ActiveController>,
    /// Threads of removed controllers, on their way out (joined at
    /// shutdown; one may still be inside a bounded connect attempt).
    retired: Vec<JoinHandle<()>>,
}

/// Granularity at which a waiting controller thread notices shutdown.
const STOP_POLL: Duration = Duration::from_millis(100);

impl Server {
    /// Listens on `unix_path` (mode 0600; a stale socket file is replaced, a live one is
    /// an error)
    /// and, if given, on `tcp`.
    pub fn start(
        bridge: Arc<Bridge>,
        unix_path: &Path,
        tcp: Option<SocketAddr>,
    ) -> Result<Server, OfprotoError> {
        Server::start_with_tls(bridge, unix_path, tcp, None)
    }

    /// [`Server::start`], the TCP listener speaking TLS with `tls`
    /// (`pssl:`) if given. The key, certificate and CA files are read
    /// for each new connection that finds one of them changed; a file
    /// that cannot be read or used fails those connections (logged)
    /// until it is fixed, and the listener listens on.
    pub fn start_with_tls(
        bridge: Arc<Bridge>,
        unix_path: &Path,
        tcp: Option<SocketAddr>,
        tls: Option<Arc<TlsContext>>,
    ) -> Result<Server, OfprotoError> {
        let unix_err = |source| OfprotoError::Unix {
            path: unix_path.to_path_buf(),
            source,
        };
        // A socket file someone still accepts on belongs to a live switch
        // (another xbr, or ovs-vswitchd): taking it over would cut that
        // switch off from its controller.
        if std::os::unix::net::UnixStream::connect(unix_path).is_ok() {
            return Err(OfprotoError::InUse(unix_path.to_path_buf()));
        }
        match std::fs::remove_file(unix_path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(unix_err(e)),
        }
        let unix = UnixListener::bind(unix_path).map_err(unix_err)?;
        std::fs::set_permissions(unix_path, std::fs::Permissions::from_mode(0o600))
            .map_err(unix_err)?;
        let unix_wake = OwnedFd::from(unix.try_clone().map_err(unix_err)?);
        let fail_open = FailOpen::new(bridge.clone());
        let shared = Arc::new(Shared {
            bridge,
            stop: AtomicBool::new(false),
            next_id: AtomicU64::new(0),
            fail_open: fail_open.clone(),
            controller_table: ControllerTable::default(),
            conns: Mutex::new(HashMap::new()),
            accepted: Default::default(),
        });
        let tcp = match tcp {
            Some(addr) => match TcpService::start(&shared, addr, tls) {
                Ok(t) => Some(t),
                Err(e) => {
                    // Do not leave a socket nobody serves.
                    let _ = std::fs::remove_file(unix_path);
                    return Err(e);
                }
            },
            None => None,
        };
        let mut threads = Vec::new();
        let s = shared.clone();
        let t = std::thread::Builder::new()
            .name("of-unix".into())
            .spawn(move || {
                for conn in unix.incoming() {
                    if s.stop.load(Ordering::SeqCst) {
                        break;
                    }
                    match conn {
                        Ok(c) => {
                            s.spawn_connection(Stream::Unix(c), "unix".into(), Listener::Unix, None)
                        }
                        Err(e) => warn!(error = %e, "unix accept failed"),
                    }
                }
            })
            .map_err(|source| OfprotoError::Thread {
                what: "unix listener",
                source,
            })?;
        threads.push(t);
        // Last, so that no failure above leaves it running.
        let s = shared.clone();
        let t = std::thread::Builder::new()
            .name("of-expiry".into())
            .spawn(move || {
                let mut expiry = Expiry::default();
                while !s.stopped() {
                    expiry.run(&s.bridge, Instant::now());
                    s.wait(EXPIRY_INTERVAL);
                }
            })
            .map_err(|source| OfprotoError::Thread {
                what: "flow expiry",
                source,
            })?;
        threads.push(t);
        info!(path = %unix_path.display(), tcp = ?tcp.as_ref().map(|t| t.local),
              tls = tcp.as_ref().is_some_and(TcpService::is_tls), "OpenFlow listening");
        // Drains the rate-limited connections' packet-in queues.
        let s = shared.clone();
        let t = std::thread::Builder::new()
            .name("of-pinsched".into())
            .spawn(move || s.bridge.notifier().packet_in_scheduler(&s.stop))
            .map_err(|source| OfprotoError::Thread {
                what: "packet-in scheduler",
                source,
            })?;
        threads.push(t);
        // Last: nothing after it can fail and leave it waiting.
        threads.push(fail_open.spawn().map_err(|source| OfprotoError::Thread {
            what: "fail-open timer",
            source,
        })?);
        Ok(Server {
            shared,
            unix_path: unix_path.to_path_buf(),
            unix_wake,
            tcp,
            threads,
            controllers: Vec::new(),
            retired: Vec::new(),
        })
    }

    /// Sets the fail mode: `standalone` forwards as a MAC-learning switch
    /// while none of its configured controllers is connected (fail-open);
    /// secure (the default, and the agent's setting) keeps forwarding by
    /// the flows alone. Without configured controllers both forward by
    /// the flows (a standalone bridge's owner adds OVS's priority-0 NORMAL
    /// flow: `Bridge::flush_flows`).
    pub fn set_fail_mode(&self, standalone: bool) {
        self.shared.fail_open.set_standalone(standalone);
    }

    pub fn local_tcp_addr(&self) -> Option<SocketAddr> {
        self.tcp.as_ref().map(|t| t.local)
    }

    /// Whether the TCP listener speaks TLS (`pssl:`).
    pub fn listener_is_tls(&self) -> bool {
        self.tcp.as_ref().is_some_and(TcpService::is_tls)
    }

    /// Stops the listeners and every connection, and unlinks the socket.
    pub fn shutdown(self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.fail_open.stop();
        self.shared.bridge.notifier().wake_packet_in_scheduler();
        // Wake the accept loops: on Linux, shutting a listening socket down
        // makes a blocked accept() fail at once.
        if let Err(e) =
            nix::sys::socket::shutdown(self.unix_wake.as_raw_fd(), nix::sys::socket::Shutdown::Both)
        {
            warn!(error = %e, "cannot shut a listening socket down");
        }
        if let Some(t) = &self.tcp {
            t.wake();
        }
        for t in self.threads {
            let _ = t.join();
        }
        if let Some(t) = self.tcp {
            t.join();
        }
        self.shared.close_connections(|_| true);
        // Their connections were shut down with the others above; a
        // thread waiting to reconnect sees the stop flag.
        for c in self.controllers {
            let _ = c.thread.join();
        }
        for t in self.retired {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.unix_path);
    }
}
