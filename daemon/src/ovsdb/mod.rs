//! `xbr run --ovsdb`: xbr as ovs-vswitchd, configured through
//! ovsdb-server so that unmodified `ovs-vsctl` manages its bridges and
//! ports.
//!
//! # Design
//!
//! One thread (the caller's) runs the client: it connects to the
//! database, asks for a `monitor` of the tables ovs-vswitchd reads, keeps a
//! [`datum::Replica`] of them, and after every change reconciles the
//! running bridges with it ([`reconcile`]) and writes back the columns
//! ovs-vswitchd owns in one `transact`. It answers the server's `echo`
//! requests, and every [`STATS_INTERVAL`] writes interface statistics and
//! retries interfaces that could not be opened; while a bridge has a
//! VXLAN port, it looks the port's underlay up again whenever the kernel
//! announces an address, route or link change ([`dataplane::netwatch`]), and
//! every [`UNDERLAY_INTERVAL`] in any case (a new underlay reopens the
//! port under its number). If the connection drops,
//! the bridges keep forwarding with the configuration they have, and the
//! client reconnects with exponential backoff ([`BACKOFF_MIN`] to
//! [`BACKOFF_MAX`]); the new `monitor` reply is a full snapshot, so
//! whatever changed meanwhile is applied then.

pub mod datum;
pub mod desired;
pub mod mirrors;
pub mod port_change;
pub mod reconcile;
pub mod row_error;
pub mod rpc;
pub mod unsupported;

use rpc::{Conn, Incoming, Remote};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub use reconcile::Settings;

/// How often statistics are written (ovs-vswitchd's default
/// `other_config:stats-update-interval`).
pub const STATS_INTERVAL: Duration = Duration::from_secs(5);
/// How often a VXLAN port's underlay (routes, addresses) is looked up
/// again without a kernel notification, while the bridges have one
/// (`desired.rs`): a safety net, the notifications do the work.
pub const UNDERLAY_INTERVAL: Duration = Duration::from_secs(30);
pub const BACKOFF_MIN: Duration = Duration::from_secs(1);
pub const BACKOFF_MAX: Duration = Duration::from_secs(8);
/// How long the loop waits for a message before checking the stop flag
/// and timers.
const TICK: Duration = Duration::from_millis(200);
const DB: &str = "Open_vSwitch";

/// The columns ovs-vswitchd reads (it writes others; those are not
/// monitored, so xbr's own writes do not come back as changes), and the
/// ones xbr reports as not supported.
fn monitor_requests() -> Value {
    let mut req = json!({
        "Open_vSwitch": {"columns": ["bridges", "next_cfg", "other_config", "ssl"]},
        "SSL": {"columns": ["private_key", "certificate", "ca_cert", "bootstrap_ca_cert"]},
        "Bridge": {"columns": ["name", "ports", "fail_mode", "protocols", "controller",
                               "other_config", "datapath_type",
                               "sflow", "netflow", "ipfix", "mirrors", "flow_tables"]},
        "Port": {"columns": ["name", "interfaces", "qos"]},
        "Interface": {"columns": ["name", "type", "options", "ofport_request", "mtu_request",
                                  "mac", "ingress_policing_rate", "ingress_policing_burst"]},
        "Controller": {"columns": ["target", "controller_rate_limit",
                                   "controller_burst_limit", "inactivity_probe"]},
        "Flow_Table": {"columns": ["flow_limit", "overflow_policy"]},
        "QoS": {"columns": ["type", "other_config"]},
        "Mirror": {"columns": ["name", "select_all", "select_src_port", "select_dst_port",
                               "select_vlan", "output_port", "output_vlan"]},
    });
    for table in ["Bridge", "Port", "Interface", "Controller"] {
        if let Some(cols) = req[table]["columns"].as_array_mut() {
            // Each column once: the database refuses a monitor that names
            // one twice.
            for c in unsupported::monitored(table) {
                if !cols.iter().any(|have| have == c) {
                    cols.push(Value::from(c));
                }
            }
        }
    }
    req
}

/// Runs the client until `stop` is set; then stops every bridge. Returns
/// false if a packet thread had failed.
pub fn run(target: &Path, settings: Settings, stop: &AtomicBool) -> bool {
    run_notifying(
        &Remote::Unix(target.to_path_buf()),
        settings,
        stop,
        &mut || {},
    )
}

/// [`run`], calling `ready` once, when the database's first state has
/// been applied (the bridges are up), for systemd's readiness.
pub fn run_notifying(
    target: &Remote,
    settings: Settings,
    stop: &AtomicBool,
    ready: &mut dyn FnMut(),
) -> bool {
    let mut ready = Some(ready);
    let mut rec = reconcile::Reconciler::new(settings);
    let kernel = KernelChanges::start();
    let mut backoff = BACKOFF_MIN;
    while !stop.load(Ordering::Relaxed) {
        match Conn::open(target, rec.tls().as_deref()) {
            Ok(conn) => {
                tracing::info!(db = %target, "connected to the database");
                let began = Instant::now();
                rec.forget_written();
                session(conn, &mut rec, stop, &mut ready, &kernel);
                if !stop.load(Ordering::Relaxed) {
                    // A session that ends at once (the database refusing
                    // the monitor, say) backs off like a failed connect,
                    // instead of reconnecting in a tight loop.
                    if began.elapsed() > BACKOFF_MAX {
                        backoff = BACKOFF_MIN;
                    }
                    tracing::warn!(
                        "database connection lost; bridges keep forwarding; reconnecting in {} s",
                        backoff.as_secs()
                    );
                    sleep_unless_stopped(backoff, stop);
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                }
            }
            Err(e) => {
                tracing::warn!("{e}; retrying in {} s", backoff.as_secs());
                sleep_unless_stopped(backoff, stop);
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        }
    }
    rec.shutdown()
}

/// The kernel's address, route and link changes, signalled by a
/// [`dataplane::netwatch`] thread for as long as this lives; without the
/// thread (its socket could not be opened) the underlay is polled every
/// second instead.
struct KernelChanges {
    rx: Option<crossbeam::channel::Receiver<()>>,
    stop: std::sync::Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl KernelChanges {
    fn start() -> KernelChanges {
        let (tx, rx) = crossbeam::channel::bounded(1);
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let groups = [
            libc::RTNLGRP_LINK,
            libc::RTNLGRP_IPV4_IFADDR,
            libc::RTNLGRP_IPV4_ROUTE,
        ];
        match dataplane::netwatch::watch("xbr-underlay", &groups, tx, stop.clone()) {
            Ok(t) => KernelChanges {
                rx: Some(rx),
                stop,
                thread: Some(t),
            },
            Err(e) => {
                tracing::warn!(
                    "cannot listen for the kernel's route changes ({e}); VXLAN underlays \
                     are looked up every second instead"
                );
                KernelChanges {
                    rx: None,
                    stop,
                    thread: None,
                }
            }
        }
    }

    /// Whether the underlay should be looked up again: the kernel
    /// announced a change since the last call (without a watcher: always;
    /// the caller's interval paces it).
    fn changed(&self) -> bool {
        match &self.rx {
            Some(rx) => rx.try_recv().is_ok(),
            None => true,
        }
    }

    /// The fallback lookup period: [`UNDERLAY_INTERVAL`] with a watcher,
    /// a second without.
    fn interval(&self) -> Duration {
        if self.rx.is_some() {
            UNDERLAY_INTERVAL
        } else {
            Duration::from_secs(1)
        }
    }
}

impl Drop for KernelChanges {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn sleep_unless_stopped(d: Duration, stop: &AtomicBool) {
    let end = Instant::now() + d;
    while !stop.load(Ordering::Relaxed) && Instant::now() < end {
        std::thread::sleep(TICK);
    }
}

/// One connection's life: monitor, then react until it drops or `stop`.
fn session(
    mut conn: Conn,
    rec: &mut reconcile::Reconciler,
    stop: &AtomicBool,
    ready: &mut Option<&mut dyn FnMut()>,
    kernel: &KernelChanges,
) {
    let mut db = datum::Replica::default();
    let monitor_id = match conn.request("monitor", json!([DB, null, monitor_requests()])) {
        Ok(id) => id,
        Err(e) => {
            tracing::warn!("{e}");
            return;
        }
    };
    let mut synced = false;
    let mut next_stats = Instant::now() + STATS_INTERVAL;
    let mut next_underlay = Instant::now() + kernel.interval();
    // What the last pass read.
    let mut last: Option<desired::Desired> = None;
    while !stop.load(Ordering::Relaxed) {
        let mut changed = false;
        match conn.incoming.recv_timeout(TICK) {
            Ok(Incoming::Reply { id, result }) if id == monitor_id => match result {
                Ok(initial) => {
                    db.apply(&initial);
                    synced = true;
                    changed = true;
                }
                Err(e) => {
                    tracing::error!("the database refused the monitor request: {e}");
                    return;
                }
            },
            Ok(Incoming::Reply { result: Err(e), .. }) => {
                tracing::warn!("database transaction failed: {e}");
            }
            Ok(Incoming::Reply { result: Ok(r), .. }) => log_op_errors(&r),
            Ok(Incoming::Request { method, params, id }) => match method.as_str() {
                "echo" => {
                    if let Err(e) = conn.reply(id, params) {
                        tracing::warn!("{e}");
                        return;
                    }
                }
                "update" => {
                    if let Some(updates) = params.get(1) {
                        db.apply(updates);
                        changed = true;
                    }
                }
                other => tracing::debug!(method = other, "OVSDB: ignoring request"),
            },
            Err(crossbeam::channel::RecvTimeoutError::Timeout) => {}
            Err(crossbeam::channel::RecvTimeoutError::Disconnected) => return,
        }
        if !synced {
            continue;
        }
        let mut ops = Vec::new();
        let now = Instant::now();
        let tick = now >= next_stats;
        // A tunnel's underlay follows the kernel's address and route
        // changes (within a tick of their announcement), and is looked up
        // every interval in any case.
        let announced = kernel.changed();
        let due = now >= next_underlay;
        let underlay = (announced && kernel.rx.is_some() || due) && rec.has_tunnels();
        if due {
            next_underlay = now + kernel.interval();
        }
        if changed || tick || underlay {
            // The tick also retries interfaces that failed to open. The
            // underlay's alone reconciles only if the lookup found a change.
            let d = desired::read(&db);
            if changed || tick || last.as_ref() != Some(&d) {
                ops = rec.apply(&d);
            }
            if let Some(ready) = ready.take() {
                ready();
            }
            if tick {
                next_stats = Instant::now() + STATS_INTERVAL;
                ops.extend(rec.stats(&d));
            }
            last = Some(d);
        }
        if !ops.is_empty() {
            let mut params = vec![json!(DB)];
            params.extend(ops);
            if let Err(e) = conn.request("transact", Value::Array(params)) {
                tracing::warn!("{e}");
                return;
            }
        }
    }
}

/// A transaction's per-operation results may hold errors (a row deleted
/// meanwhile is not one: the update just matches nothing).
fn log_op_errors(results: &Value) {
    for r in results.as_array().into_iter().flatten() {
        if let Some(e) = r.get("error") {
            let details = r.get("details").cloned().unwrap_or_default();
            tracing::warn!("database operation failed: {e} {details}");
        }
    }
}

/// `unix:PATH` of `--ovsdb` (`xbr probe`, `xbr doctor`).
pub fn parse_target(s: &str) -> Result<PathBuf, rpc::RpcError> {
    rpc::parse_target(s)
}

/// `unix:PATH` or `ssl:IP[:PORT]` of `xbr run --ovsdb`.
pub fn parse_remote(s: &str) -> Result<Remote, rpc::RpcError> {
    rpc::parse_remote(s)
}
