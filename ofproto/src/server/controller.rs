//! Active controllers (`tcp:`/`ssl:` targets): one thread per target
//! connects, serves the connection and reconnects with backoff, until the
//! server stops or the controller is removed
//! ([`Server::remove_controller`], [`Server::set_controllers`]), which
//! stops that thread and closes its connection only.

use super::stream::Stream;
use super::{Server, Shared};
use crate::conn_settings::{probe_or_off, LimitCell, ProbeCell};
use crate::connection::{read_tick, Connection};
use crate::controller_status::ControllerStatus;
use crate::error::{ControllerError, OfprotoError};
use crate::limits::{LimitStats, PacketInLimit};
use crate::packet_in_queue::PacketInStats;
use crate::tls::stream::{TlsErrorCell, TlsReader, TlsWriter};
use crate::tls::{TlsContext, TlsError};
use parking_lot::Mutex;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tracing::{debug, info, warn};

/// One configured active controller: its settings, and what stops it.
pub(super) struct ActiveController {
    target: SocketAddr,
    settings: ControllerSettings,
    slot: Arc<ControllerSlot>,
    pub(super) thread: JoinHandle<()>,
}

/// How an active controller is served: compared by
/// [`Server::set_controllers`] to tell a kept controller from a changed one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ControllerSettings {
    /// Connected to with TLS (`ssl:`).
    pub tls: bool,
    /// Its inactivity probe (zero: off).
    pub probe: Duration,
    /// Its PACKET_IN rate limit.
    pub packet_in_limit: Option<PacketInLimit>,
}

/// An active controller as [`Server::set_controllers`] is asked for it.
#[derive(Clone)]
pub struct WantedController {
    pub target: SocketAddr,
    /// The TLS context to connect with (`ssl:`), or `None` (`tcp:`).
    pub tls: Option<Arc<TlsContext>>,
    pub probe: Duration,
    pub packet_in_limit: Option<PacketInLimit>,
}

impl WantedController {
    fn settings(&self) -> ControllerSettings {
        ControllerSettings {
            tls: self.tls.is_some(),
            probe: self.probe,
            packet_in_limit: self.packet_in_limit,
        }
    }
}

/// What a controller's thread and the server's owner share: the stop
/// flag, the probe interval and packet-in limit (changed in place), and
/// a handle on the connection up now, to shut it down or set its
/// timeouts, with its packet-in counters.
struct ControllerSlot {
    stop: AtomicBool,
    /// The TLS context of its next connections (`ssl:`); new TLS
    /// settings replace it in place, as OVS's take effect for the next
    /// connections.
    tls: Mutex<Option<Arc<TlsContext>>>,
    probe: ProbeCell,
    packet_in_limit: LimitCell,
    conn: Mutex<Option<(Stream, PacketInStats)>>,
}

impl ControllerSlot {
    fn new(
        tls: Option<Arc<TlsContext>>,
        probe: Duration,
        packet_in_limit: Option<PacketInLimit>,
    ) -> Self {
        ControllerSlot {
            stop: AtomicBool::new(false),
            tls: Mutex::new(tls),
            probe: ProbeCell::new(probe_or_off(probe)),
            packet_in_limit: LimitCell::new(packet_in_limit),
            conn: Mutex::new(None),
        }
    }

    /// The packet-in counters its Controller row reports: those of the
    /// connection's queues while it has a limit.
    fn reported_packet_ins(&self, stats: &PacketInStats) -> Option<PacketInStats> {
        self.packet_in_limit.get().map(|_| stats.clone())
    }

    /// A new packet-in limit for the connection up now (its Controller
    /// row reports the queues while there is one) and the next ones.
    fn set_packet_in_limit(
        &self,
        limit: Option<PacketInLimit>,
        table: &crate::controller_status::ControllerTable,
        target: SocketAddr,
    ) {
        let conn = self.conn.lock();
        self.packet_in_limit.set(limit);
        if let Some((_, stats)) = conn.as_ref() {
            table.set_packet_ins(target, limit.map(|_| stats.clone()));
        }
    }

    /// A new probe interval for the connection up now and the next ones.
    fn set_probe(&self, probe: Duration) {
        let probe = probe_or_off(probe);
        self.probe.set(probe);
        // Under the lock the thread registers its connection with, after
        // the cell: a connection made meanwhile reads the new interval.
        if let Some((c, _)) = self.conn.lock().as_ref() {
            if let Err(e) = c.set_timeouts(probe) {
                warn!(error = %e, "cannot set the new inactivity probe on the socket");
            }
        }
    }
}

/// Bound on one TCP connection attempt to a controller.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// First and longest wait between two connection attempts (doubling in
/// between, like OVS's rconn backoff).
const BACKOFF_MIN: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(8);

impl Shared {
    /// A controller thread: connect, serve, reconnect, until shutdown or
    /// until the controller is removed (`me.stop`).
    fn controller_loop(self: Arc<Self>, target: SocketAddr, me: Arc<ControllerSlot>) {
        let mut backoff = BACKOFF_MIN;
        let done = || self.stopped() || me.stop.load(Ordering::SeqCst);
        while !done() {
            self.controller_table.connecting(target);
            match TcpStream::connect_timeout(&target, CONNECT_TIMEOUT) {
                Ok(c) => {
                    let tls = me.tls.lock().clone();
                    let served = match &tls {
                        None => {
                            info!(%target, "connected to controller");
                            self.serve_controller(Ok((c, None)), target, &me)
                        }
                        Some(ctx) => self.serve_controller(
                            self.connect_tls(ctx, c, target, me.probe.get()),
                            target,
                            &me,
                        ),
                    };
                    if done() {
                        break;
                    }
                    if let Err(e) = served {
                        // Not connected: the TLS session failed.
                        self.controller_table.failed_with(target, &e);
                        self.wait_unless(backoff, &me.stop);
                        backoff = (backoff * 2).min(BACKOFF_MAX);
                        continue;
                    }
                    backoff = BACKOFF_MIN;
                    self.controller_table.disconnected(target);
                    info!(%target, "controller connection closed");
                }
                Err(e) => {
                    if done() {
                        break;
                    }
                    self.controller_table.failed(target, &e);
                    debug!(%target, error = %e, "controller connection failed");
                }
            }
            self.wait_unless(backoff, &me.stop);
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }

    /// The TLS handshake with the controller at `target` on `c`, within
    /// the connect timeout; failures are logged, naming the controller
    /// and the file or certificate at fault.
    fn connect_tls(
        &self,
        ctx: &TlsContext,
        c: TcpStream,
        target: SocketAddr,
        probe: Option<Duration>,
    ) -> Result<(TcpStream, Option<(TlsReader, TlsWriter)>), ControllerError> {
        let socket = |source| ControllerError::Socket { target, source };
        let sock = c.try_clone().map_err(socket)?;
        // The handshake looks at its deadline at least each read tick.
        let tick = read_tick(probe.unwrap_or(Duration::MAX));
        sock.set_read_timeout(Some(tick))
            .and_then(|()| sock.set_write_timeout(Some(CONNECT_TIMEOUT)))
            .map_err(socket)?;
        let _ = sock.set_nodelay(true);
        match crate::tls::stream::connect(ctx, sock, target, CONNECT_TIMEOUT) {
            Ok(halves) => {
                info!(%target, "connected to controller (TLS)");
                Ok((c, Some(halves)))
            }
            Err(e @ TlsError::Bootstrapped { .. }) => {
                info!(%target, "{e}");
                Err(e.into())
            }
            Err(e) => {
                LimitStats::hit(&self.bridge.limit_stats().tls_failures);
                warn!("OpenFlow controller ssl:{target}: {e}");
                Err(e.into())
            }
        }
    }

    /// Serves the controller connection `c` (with its TLS session, if
    /// any) until it ends; an error if it never came up, or if its TLS
    /// session failed (the peer refused our certificate after the
    /// handshake, as a TLS 1.3 server may).
    fn serve_controller(
        &self,
        c: Result<(TcpStream, Option<(TlsReader, TlsWriter)>), ControllerError>,
        target: SocketAddr,
        me: &ControllerSlot,
    ) -> Result<(), ControllerError> {
        let (c, tls) = c?;
        let _ = c.set_nodelay(true);
        let c = Stream::Tcp(c);
        let (reader, writer, killer, own) =
            match (c.try_clone(), c.try_clone(), c.try_clone(), c.try_clone()) {
                (Ok(r), Ok(w), Ok(k), Ok(o)) => (r, w, k, o),
                (Err(e), _, _, _) | (_, Err(e), _, _) | (_, _, Err(e), _) | (_, _, _, Err(e)) => {
                    warn!(%target, error = %e, "cannot clone controller socket");
                    return Ok(());
                }
            };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let pin_stats = PacketInStats::default();
        {
            // Checked under the locks shutdown and removal sweep with, so
            // a connection made while stopping is never left unswept.
            let mut conns = self.conns.lock();
            let mut slot = me.conn.lock();
            if self.stopped() || me.stop.load(Ordering::SeqCst) {
                return Ok(());
            }
            // A controller that reads nothing for a probe interval fails
            // the connection's writer (outbox.rs), which ends the
            // connection: the read-side probe alone would never notice it.
            // Set under the lock `ControllerSlot::set_probe` takes.
            if let Err(e) = c.set_timeouts(me.probe.get()) {
                warn!(%target, error = %e, "cannot set the inactivity probe");
                return Ok(());
            }
            conns.insert(id, (c, None, None));
            *slot = Some((own, pin_stats.clone()));
        }
        self.fail_open.controller_up();
        let kill: Box<dyn Fn() + Send + Sync> = Box::new(move || killer.shutdown());
        let mut tls_error: Option<TlsErrorCell> = None;
        match tls {
            None => self.run_controller_connection(reader, writer, target, me, kill, &pin_stats),
            Some((r, w)) => {
                drop((reader, writer));
                tls_error = Some(r.error_cell());
                self.run_controller_connection(r, w, target, me, kill, &pin_stats);
            }
        }
        self.conns.lock().remove(&id);
        *me.conn.lock() = None;
        self.fail_open.controller_down();
        match tls_error.and_then(|cell| cell.get()) {
            Some(reason) => {
                LimitStats::hit(&self.bridge.limit_stats().tls_failures);
                self.controller_table.disconnected(target);
                Err(ControllerError::Session { target, reason })
            }
            None => Ok(()),
        }
    }
}

impl Shared {
    /// Serves the connection to the controller at `target` (plain or
    /// TLS halves) until it ends, with the slot's probe and packet-in
    /// limit, which may change while it runs.
    fn run_controller_connection<R: std::io::Read, W: std::io::Write + Send + 'static>(
        &self,
        reader: R,
        writer: W,
        target: SocketAddr,
        me: &ControllerSlot,
        kill: Box<dyn Fn() + Send + Sync>,
        pin_stats: &PacketInStats,
    ) {
        let conn = Connection::new(reader, writer, self.bridge.clone(), target.to_string())
            .bounded_by(me.probe.clone(), kill)
            .with_packet_in_stats(pin_stats.clone());
        self.controller_table.connected(
            target,
            conn.role_cell(),
            me.reported_packet_ins(pin_stats),
        );
        conn.for_controller_by(me.packet_in_limit.clone()).run();
    }
}

impl Server {
    /// Connects to an OpenFlow controller at `target` (OVS's
    /// `tcp:IP:PORT`) and stays connected: a dropped connection is retried
    /// with exponential backoff, and one idle for `probe` gets an
    /// ECHO_REQUEST and is dropped if another `probe` passes in silence
    /// (a zero `probe` never probes, as OVS's `inactivity_probe=0`; fail
    /// open waits three times the longest controller's `probe`).
    /// The flow tables are not touched when a controller goes away (fail
    /// mode secure). PACKET_INs to it are limited to `packet_in_limit`
    /// (OVS's `controller_rate_limit` and `controller_burst_limit`).
    pub fn add_controller(
        &mut self,
        target: SocketAddr,
        probe: Duration,
        packet_in_limit: Option<PacketInLimit>,
    ) -> Result<(), OfprotoError> {
        self.add_controller_with_tls(target, None, probe, packet_in_limit)
    }

    /// [`Server::add_controller`] over TLS with `tls` if given (OVS's
    /// `ssl:IP:PORT`): both sides present certificates signed by the CA
    /// the other trusts. A failed handshake is logged, recorded as the
    /// controller's `last_error`, and retried with the backoff.
    pub fn add_controller_with_tls(
        &mut self,
        target: SocketAddr,
        ctx: Option<Arc<TlsContext>>,
        probe: Duration,
        packet_in_limit: Option<PacketInLimit>,
    ) -> Result<(), OfprotoError> {
        let settings = ControllerSettings {
            tls: ctx.is_some(),
            probe,
            packet_in_limit,
        };
        let shared = self.shared.clone();
        let slot = Arc::new(ControllerSlot::new(ctx, probe, packet_in_limit));
        let me = slot.clone();
        let thread = std::thread::Builder::new()
            .name(format!("of-ctl-{target}"))
            .spawn(move || shared.controller_loop(target, me))
            .map_err(|source| OfprotoError::Thread {
                what: "controller connection",
                source,
            })?;
        self.controllers.push(ActiveController {
            target,
            settings,
            slot,
            thread,
        });
        self.shared.fail_open.controller_added(probe);
        info!(%target, "OpenFlow controller configured");
        Ok(())
    }

    /// Stops serving the controller at `target`, as OVS does when its
    /// Controller row goes: its connection is closed and not retried; the
    /// other controllers, the listeners and their connections are not
    /// touched. Fail-open is timed from then on by the controllers left.
    /// Returns whether `target` was configured.
    pub fn remove_controller(&mut self, target: SocketAddr) -> bool {
        let Some(i) = self.controllers.iter().position(|c| c.target == target) else {
            return false;
        };
        let c = self.controllers.remove(i);
        {
            // Under the lock the thread registers its connection with.
            let conn = c.slot.conn.lock();
            c.slot.stop.store(true, Ordering::SeqCst);
            if let Some((s, _)) = conn.as_ref() {
                s.shutdown();
            }
        }
        self.shared.fail_open.controller_removed(c.settings.probe);
        self.shared.controller_table.forget(target);
        self.retired.retain(|t| !t.is_finished());
        self.retired.push(c.thread);
        info!(%target, "OpenFlow controller removed");
        true
    }

    /// Makes the active controllers `want`, changing only what
    /// differs: controllers no longer wanted are removed, new ones added,
    /// a new inactivity probe or PACKET_IN limit is set on the
    /// live connection, as in OVS; a new TLS context is taken by the
    /// next connection; a controller that changed between `tcp:` and
    /// `ssl:` is reconnected. The listeners and the other
    /// controllers' connections go on. Returns the first error adding a
    /// controller (the others are still applied).
    pub fn set_controllers(&mut self, want: &[WantedController]) -> Result<(), OfprotoError> {
        // A new probe interval or packet-in limit is set on the live
        // connection.
        for c in &mut self.controllers {
            let Some(w) = want.iter().find(|w| w.target == c.target) else {
                continue;
            };
            if w.tls.is_some() != c.settings.tls {
                continue;
            }
            {
                let mut tls = c.slot.tls.lock();
                let same = match (tls.as_ref(), w.tls.as_ref()) {
                    (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                    _ => true,
                };
                if !same {
                    // The connection up now keeps its session.
                    *tls = w.tls.clone();
                    info!(target = %c.target, "controller TLS settings changed (next connection)");
                }
            }
            if w.probe != c.settings.probe {
                c.slot.set_probe(w.probe);
                self.shared
                    .fail_open
                    .controller_probe_changed(c.settings.probe, w.probe);
                info!(target = %c.target, probe = ?w.probe, "controller inactivity probe changed");
                c.settings.probe = w.probe;
            }
            if w.packet_in_limit != c.settings.packet_in_limit {
                c.slot.set_packet_in_limit(
                    w.packet_in_limit,
                    &self.shared.controller_table,
                    c.target,
                );
                info!(target = %c.target, limit = ?w.packet_in_limit,
                      "controller packet-in limit changed");
                c.settings.packet_in_limit = w.packet_in_limit;
            }
        }
        let wanted = |c: &ActiveController| {
            want.iter()
                .any(|w| w.target == c.target && w.settings() == c.settings)
        };
        let stale: Vec<SocketAddr> = self
            .controllers
            .iter()
            .filter(|c| !wanted(c))
            .map(|c| c.target)
            .collect();
        for target in stale {
            self.remove_controller(target);
        }
        let mut first_error = Ok(());
        for w in want {
            if self.controllers.iter().any(|c| c.target == w.target) {
                continue;
            }
            let added =
                self.add_controller_with_tls(w.target, w.tls.clone(), w.probe, w.packet_in_limit);
            if let (Err(e), true) = (added, first_error.is_ok()) {
                first_error = Err(e);
            }
        }
        first_error
    }

    /// The state of the controller at `target` (one
    /// [`Server::add_controller`] was given), `None` before its first
    /// attempt.
    pub fn controller_status(&self, target: SocketAddr) -> Option<ControllerStatus> {
        self.shared.controller_table.status(target)
    }

    /// The controllers configured now.
    pub fn controller_targets(&self) -> Vec<SocketAddr> {
        self.controllers.iter().map(|c| c.target).collect()
    }

    /// Whether the controller at `target` is connected to with TLS.
    pub fn controller_is_tls(&self, target: SocketAddr) -> bool {
        self.controllers
            .iter()
            .any(|c| c.target == target && c.settings.tls)
    }
}
