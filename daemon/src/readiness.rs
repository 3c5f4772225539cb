//! systemd's `Type=notify` readiness: `READY=1` once the bridges are up
//! (`xbr run`: the bridge serves OpenFlow and its ports are attached;
//! `--ovsdb`: the database's first state is applied), `STOPPING=1` on a
//! signal. Without `$NOTIFY_SOCKET` (not started by systemd) both do
//! nothing. A failed send is logged, never fatal: xbr forwards either way,
//! and systemd reports the start timeout.

/// Tells the service manager that xbr is up, with a status line.
pub fn ready(status: &str) {
    let state = [
        sd_notify::NotifyState::Ready,
        sd_notify::NotifyState::Status(status),
    ];
    if let Err(e) = sd_notify::notify(false, &state) {
        tracing::warn!("sd_notify READY=1: {e}");
    }
}

/// Tells the service manager that xbr is stopping.
pub fn stopping() {
    if let Err(e) = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]) {
        tracing::warn!("sd_notify STOPPING=1: {e}");
    }
}
