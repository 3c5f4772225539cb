//! A thread that serves a Unix listening socket's connections one at a
//! time until stopped: xbr's control socket (`ctl.rs`) and the socket
//! `ovs-appctl` talks to (`unixctl/`) each run one.
//!
//! Stopping sets a flag and shuts down a duplicate of the listening
//! socket, which makes a blocked `accept()` return at once on Linux
//! (connecting to wake it would fail once the socket file is gone); a
//! connection being served is finished first.

use std::fmt::Display;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// A running accept loop; see the module comment.
pub struct AcceptLoop {
    stop: Arc<AtomicBool>,
    wake: OwnedFd,
    thread: JoinHandle<()>,
    what: &'static str,
}

impl AcceptLoop {
    /// Serves `listener` on a thread named `thread_name`, handing each
    /// connection to `serve`; `what` names the socket in log lines.
    pub fn spawn<E: Display>(
        listener: UnixListener,
        thread_name: &str,
        what: &'static str,
        mut serve: impl FnMut(UnixStream) -> Result<(), E> + Send + 'static,
    ) -> io::Result<AcceptLoop> {
        let wake = OwnedFd::from(listener.try_clone()?);
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name(thread_name.into())
                .spawn(move || {
                    for conn in listener.incoming() {
                        if stop.load(Ordering::Relaxed) {
                            return;
                        }
                        match conn {
                            Ok(stream) => {
                                if let Err(e) = serve(stream) {
                                    tracing::debug!("{what} connection: {e}");
                                }
                            }
                            Err(e) => {
                                tracing::warn!("{what} accept: {e}");
                                std::thread::sleep(Duration::from_millis(50));
                            }
                        }
                    }
                })?
        };
        Ok(AcceptLoop {
            stop,
            wake,
            thread,
            what,
        })
    }

    /// Stops the thread, once the connection it serves (if any) is done.
    pub fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        let how = nix::sys::socket::Shutdown::Both;
        if let Err(e) = nix::sys::socket::shutdown(self.wake.as_raw_fd(), how) {
            tracing::warn!("cannot shut the {} socket down: {e}", self.what);
        }
        if self.thread.join().is_err() {
            tracing::error!("{} thread panicked", self.what);
        }
    }
}
