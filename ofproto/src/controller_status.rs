//! The state of each active controller connection (`tcp:` targets), as
//! ovs-vswitchd reports it in the database's `Controller` rows
//! (`is_connected`, `role`, `status`): connected or not, the rconn-like
//! state (`CONNECTING`, `ACTIVE`, `BACKOFF`), when it last connected and
//! disconnected, the last connection error, and the connection's role.
//!
//! One small map per bridge behind a mutex, written by the controller
//! threads on connect and disconnect and read by whoever reports it;
//! never touched per message.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One controller's state as reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerStatus {
    pub is_connected: bool,
    /// `CONNECTING`, `ACTIVE` or `BACKOFF` (OVS's rconn states).
    pub state: &'static str,
    /// The connection's OFPCR_ROLE_*, while connected.
    pub role: Option<u32>,
    pub since_connect: Option<Duration>,
    pub since_disconnect: Option<Duration>,
    /// The last failed attempt's error, as `strerror` says it.
    pub last_error: Option<String>,
}

#[derive(Default)]
struct Track {
    connected: bool,
    state: &'static str,
    role: Option<Arc<AtomicU32>>,
    last_connect: Option<Instant>,
    last_disconnect: Option<Instant>,
    last_error: Option<String>,
}

#[derive(Default)]
pub(crate) struct ControllerTable {
    by_target: Mutex<HashMap<SocketAddr, Track>>,
}

impl ControllerTable {
    pub(crate) fn connecting(&self, target: SocketAddr) {
        self.by_target.lock().entry(target).or_default().state = "CONNECTING";
    }

    pub(crate) fn connected(&self, target: SocketAddr, role: Arc<AtomicU32>) {
        let mut map = self.by_target.lock();
        let t = map.entry(target).or_default();
        t.connected = true;
        t.state = "ACTIVE";
        t.role = Some(role);
        t.last_connect = Some(Instant::now());
    }

    pub(crate) fn disconnected(&self, target: SocketAddr) {
        let mut map = self.by_target.lock();
        let t = map.entry(target).or_default();
        t.connected = false;
        t.state = "BACKOFF";
        t.role = None;
        t.last_disconnect = Some(Instant::now());
    }

    pub(crate) fn failed(&self, target: SocketAddr, e: &std::io::Error) {
        let mut map = self.by_target.lock();
        let t = map.entry(target).or_default();
        t.state = "BACKOFF";
        t.last_error = Some(match e.raw_os_error() {
            Some(n) => nix::errno::Errno::from_raw(n).desc().to_string(),
            None => e.to_string(),
        });
    }

    /// A failed attempt whose error is not an errno (a TLS handshake).
    pub(crate) fn failed_with(&self, target: SocketAddr, e: String) {
        let mut map = self.by_target.lock();
        let t = map.entry(target).or_default();
        t.state = "BACKOFF";
        t.last_error = Some(e);
    }

    pub(crate) fn status(&self, target: SocketAddr) -> Option<ControllerStatus> {
        let map = self.by_target.lock();
        let t = map.get(&target)?;
        let ago = |at: Option<Instant>| at.map(|at| at.elapsed());
        Some(ControllerStatus {
            is_connected: t.connected,
            state: t.state,
            role: t.role.as_ref().map(|r| r.load(Ordering::Acquire)),
            since_connect: ago(t.last_connect),
            since_disconnect: ago(t.last_disconnect),
            last_error: t.last_error.clone(),
        })
    }
}
