//! The flow cache's generation (see [`XdpGen`]): the one value every
//! entry is checked against, shared by the packet threads, the control
//! plane and conntrack (which bumps it on a flush).
//!
//! A leaf of the fast path: it holds a map handle and atomics and imports
//! nothing else of xbr but conntrack's `FlushHook`, through which a flush
//! bumps it without conntrack depending on the fast path.

use libbpf_rs::{MapCore, MapFlags, MapHandle};
use parking_lot::Mutex;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The cache's generation: the value in `fc_gen[0]` that an entry must
/// carry to be used by the XDP programs.
///
/// Held from a start that adopted a previous xbr's entries until the
/// take-over (`cache::take_over`): bumps are then counted, not made, and
/// nothing is installed, so the previous process's entries keep
/// forwarding while the tables are restored (with `flow-restore-wait`,
/// until the key clears, as OVS leaves its datapath flows alone then).
/// Ports the start adds, readiness checks and table changes meanwhile
/// would otherwise retire them all; the take-over checks every entry
/// against the tables it finds, which covers whatever the bumps stood
/// for.
///
/// Bumped by whoever changes what a translation depends on without
/// revalidating entries (`revalidate.rs`), before that change is
/// acknowledged: PORT_MOD and fail-mode changes in the control plane, a
/// conntrack flush, the packet thread when a tunnel's next hop changes or
/// a flow change comes while a revalidation is under way. Bumps are
/// serialised by `lock` so that the map and `current` move together and
/// only forward; `current` is stored after the map with Release, so a
/// reader who sees generation g (Acquire) also sees every port config
/// change made before g was published.
pub struct XdpGen {
    map: MapHandle,
    lock: Mutex<()>,
    current: AtomicU64,
    /// A bump failed to reach the map: the programs may still use
    /// entries of an older generation, so the packet thread stops
    /// installing and deletes every entry.
    broken: AtomicBool,
    /// A take-over is pending (see above): bumps are deferred.
    held: AtomicBool,
    /// Bumps deferred while held.
    deferred: AtomicU64,
}

/// A conntrack flush that removed connections the cache carried bumps
/// the generation before it returns (`conntrack/links.rs`).
impl crate::conntrack::FlushHook for XdpGen {
    fn flushed(&self) {
        self.bump();
    }
}

impl XdpGen {
    /// Generation 0 in `map` (the one-element `fc_gen` array), not held.
    pub(super) fn new(map: MapHandle) -> XdpGen {
        XdpGen {
            map,
            lock: Mutex::new(()),
            current: AtomicU64::new(0),
            broken: AtomicBool::new(false),
            held: AtomicBool::new(false),
            deferred: AtomicU64::new(0),
        }
    }

    /// Takes generation `g` of a previous process's entries, held until
    /// the take-over if any entries were found.
    pub(super) fn adopt(&self, g: u64, held: bool) {
        self.current.store(g, Ordering::Release);
        self.held.store(held, Ordering::Release);
    }

    /// The `fc_gen` map (to pin it, or to hand it to a program).
    pub(super) fn map_fd(&self) -> BorrowedFd<'_> {
        self.map.as_fd()
    }

    /// The generation entries installed now must carry.
    pub fn current(&self) -> u64 {
        self.current.load(Ordering::Acquire)
    }

    /// Invalidates every entry; returns the new generation. While held
    /// (see above) it only counts the request and returns the current one.
    pub fn bump(&self) -> u64 {
        let _g = self.lock.lock();
        if self.held.load(Ordering::Acquire) {
            self.deferred.fetch_add(1, Ordering::Relaxed);
            return self.current.load(Ordering::Relaxed);
        }
        let next = self.current.load(Ordering::Relaxed) + 1;
        if let Err(e) = self
            .map
            .update(&0u32.to_ne_bytes(), &next.to_ne_bytes(), MapFlags::ANY)
        {
            tracing::error!(error = %e, "cannot invalidate the XDP flow cache; emptying it");
            self.broken.store(true, Ordering::SeqCst);
        }
        self.current.store(next, Ordering::Release);
        next
    }

    pub fn is_broken(&self) -> bool {
        self.broken.load(Ordering::SeqCst)
    }

    /// Whether a take-over is pending (nothing may be installed).
    pub fn is_held(&self) -> bool {
        self.held.load(Ordering::Acquire)
    }

    /// Ends the hold; returns how many bumps it deferred.
    pub(super) fn release(&self) -> u64 {
        let _g = self.lock.lock();
        self.held.store(false, Ordering::Release);
        self.deferred.swap(0, Ordering::Relaxed)
    }
}

impl std::fmt::Debug for XdpGen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdpGen")
            .field("current", &self.current())
            .finish()
    }
}
