//! Connections the XDP program creates in the kernel: the table's side
//! (the design, and the kernel's side, are in `fastpath/ct/kernel_new.rs`).
//!
//! # Design
//!
//! Authority stays here: this table is the connection tracker. The
//! kernel creates a UDP connection only for a frame the packet thread
//! would have found without one and committed, and reports it; the
//! report is stored here as if a packet thread had committed it
//! ([`Conntrack::store_kernel_conn`]) and from then on it is an ordinary
//! connection (its reply, expiry, flush and dump go through this table).
//!
//! What the table owes the kernel's side, through [`KernelConns`]:
//! - every connection it stores or removes is counted in or out
//!   ([`KernelConns::counted`]) under both tuples' shard write locks, so
//!   the kernel sees a connection the moment the table holds it and never
//!   creates one it holds;
//! - before it decides that a tuple has no connection (a packet's
//!   lookup, a dump, a flush, an export) it stores the kernel's reports
//!   first ([`Conntrack::kernel_drain`]).
//!
//! Conntrack knows the kernel's side only as that trait: the fast path
//! (`fastpath/ct/kernel_new.rs`) implements it and stands on this file,
//! never the other way.
//!
//! Cost: a dynamic call per connection stored or removed, when on.

use super::table::ConnRef;
use super::{Conn, Conntrack, Tuple};
use parking_lot::Mutex;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// The kernel's side of the connections the XDP program creates
/// (`fastpath::ct::kernel_new::KernelNew`), as the table calls it.
pub trait KernelConns: Send + Sync {
    /// A connection with tuples `orig` and `reply` was stored (`true`) or
    /// removed; called under both tuples' shard write locks.
    fn counted(&self, orig: &Tuple, reply: &Tuple, stored: bool);
    /// Stores the connections the kernel reported
    /// (`Conntrack::store_kernel_conn`); returns how many.
    fn drain(&self, ct: &Conntrack) -> usize;
    /// Once a round: [`KernelConns::drain`], then whatever upkeep the
    /// kernel's side needs (its budget under the table's limit).
    fn sync(&self, ct: &Conntrack) -> usize;
}

impl Conntrack {
    /// Lets the XDP program create new connections (see
    /// `fastpath/ct/kernel_new.rs`); set once, before traffic.
    pub fn set_kernel_new(&self, k: Arc<dyn KernelConns>) {
        self.table.set_mirror(k.clone());
        let _ = self.kernel.set(k);
    }

    /// Whether the kernel creates connections (the XDP fast path's
    /// new-connection side is on): templates for new flows are worth
    /// making only then.
    pub fn kernel_creates(&self) -> bool {
        self.kernel.get().is_some()
    }

    /// Stores the connections the kernel reported; returns how many.
    pub fn kernel_drain(&self) -> usize {
        self.kernel.get().map_or(0, |k| k.drain(self))
    }

    /// Once a round: stores the kernel's reports, then brings its
    /// budget up to date. Returns how many connections it stored.
    pub fn kernel_sync(&self) -> usize {
        self.kernel.get().map_or(0, |k| k.sync(self))
    }

    /// Stores the connection the kernel created with original tuple `t`
    /// as a commit of its first packet would have (UDP, `+new` until its
    /// first reply, no mark, label or NAT); `false` if the zone or the
    /// table was full or the table holds a tuple of it (then the kernel's
    /// count for it is taken back). Counted in [`super::CtStats`].
    pub(crate) fn store_kernel_conn(&self, t: &Tuple, now: u64) -> bool {
        let stored = self.insert_reported(t, now);
        let counter = if stored {
            &self.stats.kernel_imported
        } else {
            &self.stats.kernel_refused
        };
        counter.fetch_add(1, Relaxed);
        stored
    }

    fn insert_reported(&self, t: &Tuple, now: u64) -> bool {
        let reply = t.reverse();
        let refuse = |this: &Conntrack| {
            this.table.mirror_forget(t);
            false
        };
        // The zone's limit and the table's hold for the kernel's
        // connections too: one over either is not stored (its frame went
        // on as an uncommitted `+new` one would) and its kernel slot is
        // freed, so the tuple's next frame is reported again, as OVS
        // tracks it `+new` again.
        let Some(room) = self.take_room(t.zone) else {
            return refuse(self);
        };
        let conn = Conn {
            orig: *t,
            reply,
            mark: 0,
            label: [0; 2],
            tcp: None,
            seen_reply: false,
            multiple: false,
            nat: 0,
            host_orig: None,
            expires: now.saturating_add(self.config.timeouts.other_first),
            xdp_links: 0,
            xdp_epoch: 0,
            removed: false,
            zone_slot: room.zone_slot(),
        };
        let conn: ConnRef = Arc::new(Mutex::new(conn));
        if self.table.insert_known(*t, reply, conn).is_err() {
            room.give_back(self);
            return refuse(self);
        }
        self.stats.committed.fetch_add(1, Relaxed);
        true
    }
}
