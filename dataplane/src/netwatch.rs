//! A thread that listens to rtnetlink multicast groups and signals each
//! kernel change over a channel, coalesced: one pending signal is enough,
//! since every listener re-reads what it needs (a dump) rather than
//! applying the notifications themselves. A lost notification (the
//! socket's buffer overran: ENOBUFS) is signalled too, so nothing is
//! missed. The thread ends within [`READ_TIMEOUT_MS`] of `stop`.

use crossbeam::channel::Sender;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// How long the watcher blocks in one read, bounding how late it notices
/// `stop`.
const READ_TIMEOUT_MS: i64 = 250;

/// Starts a thread named `name` that sends `()` on `changed` (without
/// blocking) whenever one of the rtnetlink `groups` (`libc::RTNLGRP_*`)
/// announces a change, in the calling thread's network namespace.
pub fn watch(
    name: &str,
    groups: &[u32],
    changed: Sender<()>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<JoinHandle<()>> {
    use netlink_sys::{protocols::NETLINK_ROUTE, Socket};
    use nix::sys::socket::{setsockopt, sockopt::ReceiveTimeout};
    use nix::sys::time::{TimeVal, TimeValLike};
    let mut sock = Socket::new(NETLINK_ROUTE)?;
    sock.bind_auto()?;
    for &group in groups {
        sock.add_membership(group)?;
    }
    setsockopt(
        &sock,
        ReceiveTimeout,
        &TimeVal::milliseconds(READ_TIMEOUT_MS),
    )
    .map_err(std::io::Error::from)?;
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match sock.recv_from_full() {
                    Ok(_) => {
                        let _ = changed.try_send(());
                    }
                    // After an overrun (ENOBUFS) events were lost: re-read.
                    Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                        let _ = changed.try_send(());
                    }
                    // Read timeouts: check `stop` again.
                    Err(_) => {}
                }
            }
        })
}
