//! Transmit threads: the kernel's half of AF_XDP transmits, done on other
//! cores than the packet thread's (`--pmd-cores`).
//!
//! # Design
//!
//! Why: in copy mode (every veth port) a `sendto()` on an AF_XDP socket is
//! where the kernel copies each queued frame into an skb and hands it to
//! the device, and a veth runs the receiving side's stack inside that same
//! call. Measured on OVS's AF_XDP datapath, that is ~85% of a packet
//! thread's core (issue 6). Queueing a descriptor on the TX ring is a few
//! stores; the kick is the work. So the packet thread keeps the rings
//! (receive, pipeline, queue on TX, reap completions, refill) and leaves
//! the kicks of each socket to one transmit thread, which does them on its
//! own core: with N transmit threads the kernel's transmit work of N
//! sockets proceeds in parallel, while the packet thread goes on.
//!
//! What is stored: per transmit thread, the sockets it kicks ([`KickSlot`]:
//! the socket's fd, a pending flag, counters). A port's socket is given to
//! the thread with the fewest sockets when the port is opened.
//!
//! Protocol: the packet thread queues descriptors, then sets the slot's
//! pending flag ([`TxKick::request`]); the transmit thread swaps it back
//! and calls `sendto()`. Requests made while a kick runs set the flag
//! again, so none is lost, and many requests coalesce into one kick (the
//! kernel drains the whole ring, up to its per-call budget). A busy
//! kernel (EAGAIN) is kicked again at once, a few times; past that the
//! packet thread's next round asks again (it does while its TX ring holds
//! descriptors), as with kicks made inline.
//!
//! Never waiting for it: a request still pending [`LATE`] after it was
//! made means the transmit thread is behind (descheduled, its core shared
//! with other work), and the packet thread then kicks the socket itself,
//! as without transmit threads (the kernel serialises `sendto()` calls on
//! one socket), and counts it. So a transmit thread can take work off
//! the packet thread but never hold its transmits up for long.
//!
//! Idle policy: a transmit thread spins for [`SPIN`] after its last kick,
//! then sleeps (`park`); a request sees its `sleeping` flag and unparks
//! it (one futex wake, only then). The flag is set before a last look at
//! the slots and read after the pending flag is set, both sequentially
//! consistent, so either the thread sees the request or the requester sees
//! it asleep. Sleeps are bounded by [`PARK_TIMEOUT`].
//!
//! Closing: a slot's fd sits behind a mutex that a kick holds for its
//! `sendto()`. [`TxKick`] closes its slot when dropped, taking the fd out
//! under that mutex: once it returns no kick is running or will run, so
//! the port may then close its socket and reuse the frames of its TX ring.
//! The thread forgets closed slots at its next look.
//!
//! Cost: per batch the packet thread pays one atomic store (plus a futex
//! wake if the transmit thread slept); nothing per packet. A kick takes an
//! uncontended mutex.

use crate::xsk::kick_fd;
use parking_lot::Mutex;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

/// How long a transmit thread spins after its last kick before sleeping.
const SPIN: Duration = Duration::from_micros(200);
/// Longest sleep (bounds shutdown if a wakeup were ever lost).
const PARK_TIMEOUT: Duration = Duration::from_millis(100);
/// Immediate re-kicks of a busy socket before the packet thread's next
/// request takes over.
const BUSY_RETRIES: u32 = 8;
/// How long a request may wait for its kick before the packet thread
/// makes it itself: a spinning transmit thread starts within a
/// microsecond, a sleeping one within tens.
pub const LATE: Duration = Duration::from_micros(100);

/// One socket a transmit thread kicks.
pub struct KickSlot {
    port: String,
    /// `None` once closed.
    fd: Mutex<Option<Arc<OwnedFd>>>,
    pending: AtomicBool,
    /// When the pending request was made (ns since the thread's epoch).
    requested_at: AtomicU64,
    kicks: AtomicU64,
    busy: AtomicU64,
    /// Kicks the packet thread made itself because this thread was late.
    taken_over: AtomicU64,
    /// A fatal error was logged (once, not per kick).
    error_logged: AtomicBool,
}

impl KickSlot {
    fn new(port: &str, fd: Arc<OwnedFd>) -> Self {
        KickSlot {
            port: port.to_string(),
            fd: Mutex::new(Some(fd)),
            pending: AtomicBool::new(false),
            requested_at: AtomicU64::new(0),
            kicks: AtomicU64::new(0),
            busy: AtomicU64::new(0),
            taken_over: AtomicU64::new(0),
            error_logged: AtomicBool::new(false),
        }
    }

    /// One kick, and its immediate retries while the kernel is busy.
    fn kick(&self) {
        let fd = self.fd.lock();
        let Some(fd) = fd.as_ref() else {
            return;
        };
        for _ in 0..BUSY_RETRIES {
            self.kicks.fetch_add(1, Ordering::Relaxed);
            match kick_fd(fd.as_fd()) {
                Ok(true) => {
                    self.error_logged.store(false, Ordering::Relaxed);
                    return;
                }
                Ok(false) => {
                    self.busy.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    // ENETDOWN and the like: the frames stay queued and
                    // leave once the link is back (the packet thread asks
                    // again every round); say so once.
                    if !self.error_logged.swap(true, Ordering::Relaxed) {
                        tracing::warn!(port = %self.port, error = %e, "transmit stalled");
                    }
                    return;
                }
            }
        }
    }

    fn is_closed(&self) -> bool {
        self.fd.lock().is_none()
    }
}

/// What the pool and one transmit thread share.
struct ThreadShared {
    slots: Mutex<Vec<Arc<KickSlot>>>,
    /// Bumped when `slots` changes, so the thread re-reads it.
    version: AtomicU64,
    sleeping: AtomicBool,
    stop: AtomicBool,
    thread: std::sync::OnceLock<Thread>,
    /// Origin of the slots' request times.
    epoch: Instant,
    /// The CPU it is pinned to (changed by [`KickPool::repin`]).
    cpu: AtomicUsize,
    tid: crate::cpus::ThreadId,
}

impl ThreadShared {
    /// A transmit thread's shared state, before the thread runs.
    fn new(cpu: usize) -> Self {
        ThreadShared {
            slots: Mutex::new(Vec::new()),
            version: AtomicU64::new(0),
            sleeping: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            thread: std::sync::OnceLock::new(),
            epoch: Instant::now(),
            cpu: AtomicUsize::new(cpu),
            tid: crate::cpus::ThreadId::default(),
        }
    }

    fn wake(&self) {
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
    }
}

/// A port socket's handle on its transmit thread, kept by the port: the
/// packet thread calls [`request`](Self::request) after queueing; dropping
/// it stops the kicks before the socket closes.
pub struct TxKick {
    slot: Arc<KickSlot>,
    thread: Arc<ThreadShared>,
}

impl TxKick {
    /// Asks for a kick of the socket's TX ring. Returns false, asking
    /// nothing, when an earlier request has waited longer than [`LATE`]:
    /// the transmit thread is behind (descheduled, or its core is busy),
    /// and the caller should kick the socket itself (the kernel
    /// serialises the two threads' `sendto()` calls on a socket).
    #[inline]
    pub fn request(&self) -> bool {
        let now = self.thread.epoch.elapsed().as_nanos() as u64;
        if self.slot.pending.load(Ordering::SeqCst) {
            let asked = self.slot.requested_at.load(Ordering::Relaxed);
            if now.saturating_sub(asked) > LATE.as_nanos() as u64 {
                self.slot.taken_over.fetch_add(1, Ordering::Relaxed);
                // The next request waits LATE again before taking over.
                self.slot.requested_at.store(now, Ordering::Relaxed);
                return false;
            }
            return true;
        }
        self.slot.requested_at.store(now, Ordering::Relaxed);
        self.slot.pending.store(true, Ordering::SeqCst);
        if self.thread.sleeping.load(Ordering::SeqCst) {
            self.thread.wake();
        }
        true
    }

    /// The CPU of the transmit thread that kicks this socket.
    pub fn cpu(&self) -> usize {
        self.thread.cpu.load(Ordering::Relaxed)
    }
}

impl Drop for TxKick {
    fn drop(&mut self) {
        // Waits for a running kick; none starts after.
        self.slot.fd.lock().take();
        self.thread.version.fetch_add(1, Ordering::SeqCst);
    }
}

/// Counters of one transmit thread, for `xbr stats`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KickerStats {
    pub cpu: usize,
    pub sockets: usize,
    /// `sendto()` calls made.
    pub kicks: u64,
    /// Of those, how many found the kernel busy (and were retried).
    pub busy: u64,
    /// Kicks the packet thread made itself because a request had waited
    /// longer than [`LATE`].
    pub taken_over: u64,
}

/// The transmit threads of one bridge.
pub struct KickPool {
    threads: Vec<(Arc<ThreadShared>, Option<JoinHandle<()>>)>,
    /// Counters (kicks, busy, taken over) of sockets already closed, by
    /// thread.
    retired: Mutex<Vec<(u64, u64, u64)>>,
}

impl KickPool {
    /// Starts one transmit thread per entry of `cpus`, each pinned to its
    /// CPU (`core_affinity` ids).
    pub fn start(cpus: &[core_affinity::CoreId]) -> std::io::Result<KickPool> {
        let mut pool = KickPool {
            threads: Vec::with_capacity(cpus.len()),
            retired: Mutex::new(vec![(0, 0, 0); cpus.len()]),
        };
        for (i, core) in cpus.iter().copied().enumerate() {
            let shared = Arc::new(ThreadShared::new(core.id));
            let s = shared.clone();
            // On error the threads started so far stop as `pool` drops.
            let handle = std::thread::Builder::new()
                .name(format!("xbr-tx{}", i + 1))
                .spawn(move || {
                    s.tid.record_current();
                    if !core_affinity::set_for_current(core) {
                        tracing::warn!(
                            "could not pin transmit thread {} to CPU {}",
                            i + 1,
                            core.id
                        );
                    }
                    run(&s)
                })?;
            let _ = shared.thread.set(handle.thread().clone());
            pool.threads.push((shared, Some(handle)));
        }
        Ok(pool)
    }

    /// Gives the socket `fd` of `port` to the transmit thread with the
    /// fewest sockets.
    pub fn assign(&self, port: &str, fd: Arc<OwnedFd>) -> Option<TxKick> {
        let (thread, _) = self
            .threads
            .iter()
            .min_by_key(|(t, _)| t.slots.lock().iter().filter(|s| !s.is_closed()).count())?;
        let slot = Arc::new(KickSlot::new(port, fd));
        {
            let mut slots = thread.slots.lock();
            // Closed slots' counters stay in the thread's totals.
            let i = self.index_of(thread);
            let mut retired = self.retired.lock();
            slots.retain(|s| {
                let open = !s.is_closed();
                if !open {
                    retired[i].0 += s.kicks.load(Ordering::Relaxed);
                    retired[i].1 += s.busy.load(Ordering::Relaxed);
                    retired[i].2 += s.taken_over.load(Ordering::Relaxed);
                }
                open
            });
            slots.push(slot.clone());
        }
        thread.version.fetch_add(1, Ordering::SeqCst);
        thread.wake();
        Some(TxKick {
            slot,
            thread: thread.clone(),
        })
    }

    fn index_of(&self, thread: &Arc<ThreadShared>) -> usize {
        self.threads
            .iter()
            .position(|(t, _)| Arc::ptr_eq(t, thread))
            .unwrap_or(0)
    }

    /// Each transmit thread's counters.
    pub fn stats(&self) -> Vec<KickerStats> {
        // Copied first: `assign` takes a thread's slots, then this lock.
        let retired = self.retired.lock().clone();
        self.threads
            .iter()
            .zip(retired.iter())
            .map(|((t, _), (kicks, busy, taken_over))| {
                let slots = t.slots.lock();
                let open = slots.iter().filter(|s| !s.is_closed()).count();
                let sum = |c: fn(&KickSlot) -> &AtomicU64| {
                    slots
                        .iter()
                        .map(|s| c(s).load(Ordering::Relaxed))
                        .sum::<u64>()
                };
                KickerStats {
                    cpu: t.cpu.load(Ordering::Relaxed),
                    sockets: open,
                    kicks: kicks + sum(|s| &s.kicks),
                    busy: busy + sum(|s| &s.busy),
                    taken_over: taken_over + sum(|s| &s.taken_over),
                }
            })
            .collect()
    }

    /// Moves the transmit threads to `cpus`, one each, in order; there
    /// must be as many as threads (their number is set at start).
    pub fn repin(&self, cpus: &[usize]) -> Result<(), crate::cpus::CpuError> {
        for ((t, _), &cpu) in self.threads.iter().zip(cpus) {
            crate::cpus::core_id(cpu)?;
            t.tid.pin(cpu)?;
            t.cpu.store(cpu, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Transmit threads running.
    pub fn len(&self) -> usize {
        self.threads.len()
    }

    pub fn is_empty(&self) -> bool {
        self.threads.is_empty()
    }
}

impl Drop for KickPool {
    fn drop(&mut self) {
        for (t, _) in &self.threads {
            t.stop.store(true, Ordering::SeqCst);
            t.wake();
        }
        for (_, h) in &mut self.threads {
            if let Some(h) = h.take() {
                let _ = h.join();
            }
        }
    }
}

/// A transmit thread's loop.
fn run(shared: &ThreadShared) {
    let mut slots: Vec<Arc<KickSlot>> = Vec::new();
    let mut seen = u64::MAX;
    let mut last_work = Instant::now();
    while !shared.stop.load(Ordering::Relaxed) {
        let version = shared.version.load(Ordering::SeqCst);
        if version != seen {
            seen = version;
            slots.clear();
            slots.extend(
                shared
                    .slots
                    .lock()
                    .iter()
                    .filter(|s| !s.is_closed())
                    .cloned(),
            );
        }
        let mut worked = false;
        for s in &slots {
            if s.pending.swap(false, Ordering::SeqCst) {
                s.kick();
                worked = true;
            }
        }
        if worked {
            last_work = Instant::now();
            continue;
        }
        if last_work.elapsed() < SPIN {
            std::hint::spin_loop();
            continue;
        }
        shared.sleeping.store(true, Ordering::SeqCst);
        let pending = slots.iter().any(|s| s.pending.load(Ordering::SeqCst))
            || shared.version.load(Ordering::SeqCst) != seen
            || shared.stop.load(Ordering::SeqCst);
        if !pending {
            std::thread::park_timeout(PARK_TIMEOUT);
        }
        shared.sleeping.store(false, Ordering::SeqCst);
        last_work = Instant::now();
    }
}

#[cfg(test)]
mod tests;
