//! A connection's outgoing messages: a byte queue and the thread that
//! writes it to the socket.
//!
//! # Design
//!
//! Stores: the bytes queued for one connection and not yet written, how
//! many of them the writer thread is writing now, and whether the
//! connection ended (close) or its socket failed.
//!
//! Why: several threads send to one connection. Its own thread sends
//! replies; the bridge's notifier sends asynchronous messages from
//! whichever thread made them (the upcall thread's PACKET_INs, the expiry
//! thread's FLOW_REMOVEDs); flow monitors' updates come from the thread
//! that changed the tables, under the table lock. With blocking writes a
//! peer that stops reading (an `ovs-ofctl monitor` suspended with ^Z)
//! filled its socket buffer and then held up every one of them: the
//! agent's bundle commit never got its reply. Here only the writer thread
//! ever blocks on the socket. Who sends decides what happens when the
//! peer falls behind:
//! - the connection's own replies ([`Outbox::send`]) wait while more than
//!   [`HIGH_WATER`] bytes are pending: backpressure on that connection's
//!   requests only;
//! - PACKET_INs ([`Outbox::offer`]) are dropped past a limit the caller
//!   gives (OVS drops them for a slow controller too);
//! - other asynchronous messages and flow monitor updates
//!   ([`Outbox::push`]) are always queued; the
//!   monitors pause a connection whose backlog passes OVS's 128 KiB (see
//!   `monitor.rs`) and resume it when [`Outbox::on_drained`]'s hook runs.
//!
//! Invariants: bytes are written in the order they were queued, whole
//! messages at a time (each call queues whole messages); after a write
//! fails nothing more is written and every send reports the failure.
//!
//! Bounds ([`Outbox::guard`], see `limits.rs`): everything queued is
//! capped at the guard's `max_backlog` bytes; a [`Outbox::push`] past it
//! fails the outbox (the connection ends, its socket is shut down and the
//! queue freed) rather than grow without limit for a peer that does not
//! read. A write that times out (the socket's send timeout, the probe
//! interval) fails it too. Both are counted in [`LimitStats`].
//!
//! Cost: one mutex per message queued; the writer takes everything queued
//! at once, so a burst is one `write` per batch.

use crate::limits::LimitStats;
use parking_lot::{Condvar, Mutex};
use std::io::{self, Write};
use std::sync::Arc;

/// Pending bytes above which a connection's own replies wait.
pub(crate) const HIGH_WATER: usize = 4 << 20;

type Hook = Box<dyn FnOnce() + Send>;

/// What bounds an outbox; see the module documentation.
pub(crate) struct Guard {
    pub max_backlog: usize,
    pub stats: Arc<LimitStats>,
    /// Shuts the connection's socket down (wakes its reader and writer).
    pub kill: Box<dyn Fn() + Send + Sync>,
    /// The peer, for log lines.
    pub peer: String,
}

#[derive(Default)]
struct State {
    queue: Vec<u8>,
    /// Bytes the writer took and has not finished writing.
    in_flight: usize,
    closed: bool,
    failed: bool,
    /// Run once when nothing is pending any more.
    on_drained: Option<Hook>,
    /// The writer thread is running `on_drained`'s hook (which may queue
    /// more): not drained yet for `Outbox::wait_drained`.
    in_hook: bool,
}

impl State {
    fn pending(&self) -> usize {
        self.queue.len() + self.in_flight
    }
}

/// See the module documentation.
#[derive(Default)]
pub(crate) struct Outbox {
    state: Mutex<State>,
    /// Signalled when bytes are queued, written, or the outbox closes.
    changed: Condvar,
    /// Set once, before the connection subscribes to anything.
    guard: std::sync::OnceLock<Guard>,
}

impl Outbox {
    /// An outbox written to `writer` by a thread of its own, which ends
    /// once the outbox is closed and everything queued is written (or a
    /// write failed). Without a thread (the OS refused one) every send
    /// fails.
    pub(crate) fn start<W: Write + Send + 'static>(writer: W) -> Arc<Outbox> {
        let outbox = Arc::new(Outbox::default());
        let theirs = outbox.clone();
        let spawned = std::thread::Builder::new()
            .name("xbr-of-out".into())
            .spawn(move || theirs.write_all_to(writer));
        if spawned.is_err() {
            outbox.state.lock().failed = true;
        }
        outbox
    }

    fn write_all_to<W: Write>(&self, mut writer: W) {
        loop {
            let batch = {
                let mut st = self.state.lock();
                while st.queue.is_empty() && !st.closed && !st.failed {
                    self.changed.wait(&mut st);
                }
                if st.failed || st.queue.is_empty() {
                    return;
                }
                let batch = std::mem::take(&mut st.queue);
                st.in_flight = batch.len();
                batch
            };
            let result = writer.write_all(&batch).and_then(|()| writer.flush());
            if let (Err(e), Some(g)) = (&result, self.guard.get()) {
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) {
                    LimitStats::hit(&g.stats.write_timeouts);
                    tracing::warn!(peer = %g.peer, "OpenFlow peer stopped reading (write timed out); disconnecting");
                    (g.kill)();
                }
            }
            let hook = {
                let mut st = self.state.lock();
                st.in_flight = 0;
                if result.is_err() {
                    st.failed = true;
                    st.queue = Vec::new();
                }
                let hook = if st.queue.is_empty() {
                    st.on_drained.take()
                } else {
                    None
                };
                st.in_hook = hook.is_some();
                self.changed.notify_all();
                hook
            };
            if let Some(hook) = hook {
                hook();
                self.state.lock().in_hook = false;
                self.changed.notify_all();
            }
        }
    }

    /// Bounds this outbox (once; later calls are ignored).
    pub(crate) fn guard(&self, guard: Guard) {
        let _ = self.guard.set(guard);
    }

    /// Whether the socket failed or the backlog overflowed.
    pub(crate) fn is_failed(&self) -> bool {
        self.state.lock().failed
    }

    /// Whether `more` bytes would take the backlog past the guard's bound;
    /// if so the outbox fails (counted, logged, the socket shut down).
    fn overflows(&self, st: &mut State, more: usize) -> bool {
        let Some(g) = self.guard.get() else {
            return false;
        };
        if st.pending().saturating_add(more) <= g.max_backlog {
            return false;
        }
        st.failed = true;
        st.queue = Vec::new();
        self.changed.notify_all();
        LimitStats::hit(&g.stats.backlog_overflows);
        tracing::warn!(
            peer = %g.peer,
            max_backlog = g.max_backlog,
            "OpenFlow peer too far behind on asynchronous messages; disconnecting"
        );
        (g.kill)();
        true
    }

    fn failed() -> io::Error {
        io::Error::new(io::ErrorKind::BrokenPipe, "the connection's socket failed")
    }

    /// Queues a reply of the connection's own and waits while the peer
    /// is more than [`HIGH_WATER`] bytes behind.
    pub(crate) fn send(&self, bytes: &[u8]) -> io::Result<()> {
        let mut st = self.state.lock();
        if st.failed || st.closed {
            return Err(Self::failed());
        }
        st.queue.extend_from_slice(bytes);
        self.changed.notify_all();
        while st.pending() > HIGH_WATER && !st.failed {
            self.changed.wait(&mut st);
        }
        if st.failed {
            return Err(Self::failed());
        }
        Ok(())
    }

    /// Queues `bytes` unless more than `limit` bytes are pending already;
    /// whether it was queued.
    pub(crate) fn offer(&self, bytes: &[u8], limit: usize) -> bool {
        let mut st = self.state.lock();
        if st.failed || st.closed || st.pending() > limit {
            return false;
        }
        st.queue.extend_from_slice(bytes);
        self.changed.notify_all();
        true
    }

    /// Queues `bytes` whatever the backlog (never waits): for messages
    /// that must not be lost and are sent under a lock.
    pub(crate) fn push(&self, bytes: &[u8]) {
        let mut st = self.state.lock();
        if st.failed || st.closed || bytes.is_empty() || self.overflows(&mut st, bytes.len()) {
            return;
        }
        st.queue.extend_from_slice(bytes);
        self.changed.notify_all();
    }

    /// Bytes queued and not yet written.
    pub(crate) fn pending(&self) -> usize {
        self.state.lock().pending()
    }

    /// Runs `hook` (on the writer thread) the next time nothing is
    /// pending; at once, on this thread, if nothing is pending now. A
    /// later call replaces an earlier hook that has not run.
    pub(crate) fn on_drained(&self, hook: Hook) {
        let mut st = self.state.lock();
        if st.pending() == 0 || st.failed {
            drop(st);
            hook();
        } else {
            st.on_drained = Some(hook);
        }
    }

    /// Waits until everything queued is written (or the socket failed).
    #[cfg(test)]
    pub(crate) fn wait_drained(&self) {
        let mut st = self.state.lock();
        while (st.pending() > 0 || st.in_hook) && !st.failed {
            self.changed.wait(&mut st);
        }
    }

    /// The connection ended: the writer thread writes what is queued and
    /// exits.
    pub(crate) fn close(&self) {
        self.state.lock().closed = true;
        self.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    /// A writer that blocks until the test lets each write through.
    struct Gate {
        open: mpsc::Receiver<()>,
        written: Arc<Mutex<Vec<u8>>>,
    }

    impl Write for Gate {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.open
                .recv()
                .map_err(|_| io::Error::from(io::ErrorKind::BrokenPipe))?;
            self.written.lock().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_stuck_peer_holds_up_only_its_own_replies() {
        let (open, gate) = mpsc::channel();
        let written = Arc::new(Mutex::new(Vec::new()));
        let outbox = Outbox::start(Gate {
            open: gate,
            written: written.clone(),
        });
        // The peer reads nothing: pushes and offers return at once.
        outbox.push(&[1; 100]);
        outbox.push(&vec![2; HIGH_WATER + 1]);
        assert!(!outbox.offer(&[3], HIGH_WATER), "over the limit: dropped");
        assert!(outbox.offer(&[4], 2 * HIGH_WATER));
        let drained = Arc::new(Mutex::new(false));
        let flag = drained.clone();
        outbox.on_drained(Box::new(move || *flag.lock() = true));
        // A reply waits for the backlog to go down.
        let (done, replied) = mpsc::channel();
        let replier = outbox.clone();
        std::thread::spawn(move || done.send(replier.send(&[5])).unwrap());
        assert!(replied.recv_timeout(Duration::from_millis(100)).is_err());
        // Let everything through, one write at a time.
        for _ in 0..3 {
            open.send(()).unwrap();
        }
        replied
            .recv_timeout(Duration::from_secs(5))
            .unwrap()
            .unwrap();
        outbox.wait_drained();
        assert!(*drained.lock());
        let w = written.lock();
        assert_eq!(w.len(), 100 + HIGH_WATER + 1 + 1 + 1);
        assert_eq!((w[0], w[100], w[w.len() - 2], w[w.len() - 1]), (1, 2, 4, 5));
    }

    #[test]
    fn a_failed_write_fails_every_send_after_it() {
        let (open, gate) = mpsc::channel();
        let outbox = Outbox::start(Gate {
            open: gate,
            written: Arc::default(),
        });
        drop(open);
        outbox.push(&[1]);
        outbox.wait_drained();
        assert!(outbox.send(&[2]).is_err());
        assert!(!outbox.offer(&[3], usize::MAX));
    }
}
