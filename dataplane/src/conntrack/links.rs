//! Links from a cache outside the table (the XDP flow cache,
//! `fastpath/ct/link.rs`) to the connections whose packets it forwards
//! without conntrack seeing them: the table's side.
//!
//! # Design
//!
//! Which connections the cache may carry, and for which packets, is the
//! fast path's policy (`fastpath/ct/link.rs`). What conntrack keeps is
//! the part that must happen under its locks:
//!
//! - *settled* connections ([`settled`]): those whose state, and so the
//!   `ct()` outcome of their packets, packets without SYN, FIN or RST do
//!   not change: replied, still in the table, and (TCP) established. A
//!   cache may link only those ([`Conntrack::link`]), and only while they
//!   keep the ct_mark and ct_label its translation saw.
//! - Link counting ([`ConnLink`]): a connection counts its links
//!   (`Conn::xdp_links`: with several packet threads, each direction's
//!   entries may be another thread's). Whenever a linked connection stops
//!   being settled (a FIN or RST seen by a packet thread, a reopening
//!   SYN), gets a new mark or label, or leaves the table (expiry, flush,
//!   `force`), conntrack unlinks all of them at once under its lock (a
//!   new `xdp_epoch`: links of an older one are void) and queues its id
//!   for every packet thread (`id_queues.rs`). Each thread takes its
//!   queue after every `ct()` and every round
//!   ([`Conntrack::xdp_take_dead`]) and deletes the connection's entries
//!   it has, so the segment that changed the state is forwarded only
//!   after the kernel stopped forwarding the connection from the port it
//!   came by. Another thread's entries for the other direction go when
//!   that thread takes its queue, within its round.
//! - Watches on tuples without a connection ([`AbsentLink`], `absent.rs`):
//!   a fired watch's id goes through the same queues.
//! - A flush that removed linked connections calls the [`FlushHook`]
//!   before it returns (the cache's generation: `fastpath::cache::XdpGen`),
//!   so no entry of a flushed connection is used after
//!   `xbr conntrack flush` answered, whether or not the packet thread was
//!   awake.
//!
//! Kernel hits refresh the connection ([`ConnLink::refresh`], from the
//! cache's sweep) as the packets would have, so it does not expire while
//! the kernel carries it; a settled connection's timeout does not depend
//! on which packets were seen.
//!
//! TCP window tracking is suspended while linked (`TcpConn::suspend_window`):
//! the kernel does not tell conntrack the sequence numbers it forwarded,
//! so the first segment of each peer seen afterwards resynchronises the
//! window instead of being judged against a stale one.
//!
//! Cost: a link, a peek, a refresh or an unlink is one table lookup or
//! one connection lock; a packet thread with nothing queued learns so
//! with two atomic loads.

use super::absent::AbsentWatches;
use super::table::ConnRef;
use super::{state, Conn, Conntrack, CtOutcome, Tuple};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Whether packets of `c` without SYN, FIN or RST leave its state, and
/// so their own `ct()` outcome, unchanged.
pub(super) fn settled(c: &Conn) -> bool {
    c.seen_reply && !c.removed && c.tcp.as_ref().is_none_or(|t| t.established())
}

/// Told when a flush removed linked connections, before the flush
/// returns: whatever carries their packets must stop using what it
/// cached of them (the XDP cache bumps its generation).
pub trait FlushHook: Send + Sync {
    fn flushed(&self);
}

/// What `Conntrack::peek` found: the outcome `ct()` would give the
/// packet, and with NAT the tuple it would leave with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peek {
    pub outcome: CtOutcome,
    /// The packet's addresses and ports after `ct(nat)` (a translated
    /// connection); `None`: they stay as they came.
    pub rewritten: Option<Tuple>,
}

/// A cache entry's hold on a settled connection it carries.
#[derive(Clone)]
pub struct ConnLink {
    conn: ConnRef,
    /// The `xdp_epoch` the link belongs to.
    epoch: u32,
}

impl ConnLink {
    /// The connection's address, which the link keeps from being reused.
    pub fn id(&self) -> usize {
        Arc::as_ptr(&self.conn) as usize
    }

    /// The cache forwarded packets of the connection at `now`: it lives
    /// on as if conntrack had seen them. A connection that was unlinked,
    /// removed or already expired is left alone.
    pub fn refresh(&self, ct: &Conntrack, now: u64) {
        let mut c = self.conn.lock();
        if c.xdp_epoch == self.epoch && c.xdp_links > 0 && !c.removed && c.expires > now {
            let until = now.saturating_add(c.timeout(&ct.config.timeouts));
            c.expires = c.expires.max(until);
        }
    }

    /// The cache no longer carries the connection.
    pub fn unlink(&self) {
        let mut c = self.conn.lock();
        if c.xdp_epoch == self.epoch {
            c.xdp_links = c.xdp_links.saturating_sub(1);
        }
    }

    /// Whether the link is still in force.
    pub fn is_linked(&self) -> bool {
        let c = self.conn.lock();
        c.xdp_epoch == self.epoch && c.xdp_links > 0
    }
}

/// A cache entry's watch on a tuple without a connection (`absent.rs`).
#[derive(Clone)]
pub struct AbsentLink {
    watches: Arc<AbsentWatches>,
    shard: usize,
    tuple: Tuple,
    /// Odd, so never a connection's address.
    id: usize,
}

impl AbsentLink {
    pub fn id(&self) -> usize {
        self.id
    }

    /// The cache no longer carries the tuple's outcome.
    pub fn unlink(&self) {
        self.watches.remove(self.shard, &self.tuple, self.id);
    }

    /// Whether the watch is still waiting (not fired, not removed).
    pub fn is_linked(&self) -> bool {
        self.watches.contains(self.shard, &self.tuple, self.id)
    }
}

impl Conntrack {
    /// Links the connection of the packet tuple `t` to a cache, if it is
    /// live, settled and still has the ct_mark and ct_label the
    /// translation saw; `None` otherwise (do not cache).
    pub(crate) fn link(&self, t: &Tuple, mark: u32, label: u128, now: u64) -> Option<ConnLink> {
        self.table.with(t, |e| {
            let e = e?;
            let mut c = e.conn.lock();
            if c.expires <= now || !settled(&c) || c.mark != mark || c.label() != label {
                return None;
            }
            c.xdp_links += 1;
            if let Some(tcp) = c.tcp.as_mut() {
                tcp.suspend_window();
            }
            Some(ConnLink {
                conn: e.conn.clone(),
                epoch: c.xdp_epoch,
            })
        })
    }

    /// What `ct()` would give a packet of tuple `t`, without changing
    /// anything, if its connection is live and settled; `None` otherwise.
    /// When the `ct()` has `nat` and the connection a translation, the
    /// outcome says so (`+snat`/`+dnat`) and [`Peek::rewritten`] is the
    /// tuple the packet leaves with, as `ct(nat)` rewrites it (the host's
    /// own direction of a connection learned from it is left as it is, as
    /// `ct()` leaves it). A packet without SYN, FIN or RST leaves such a
    /// connection as it is, so `ct()`'s outcome for it is this.
    pub(crate) fn peek(&self, t: &Tuple, zone: u16, nat: bool, now: u64) -> Option<Peek> {
        self.table.with(t, |e| {
            let e = e?;
            let c = e.conn.lock();
            if c.expires <= now || !settled(&c) {
                return None;
            }
            let mut st = state::TRK | state::EST;
            if e.reply {
                st |= state::RPL;
            }
            let mut rewritten = None;
            if nat && c.nat != 0 {
                rewritten = match (c.host_orig.as_deref(), e.reply) {
                    (Some(_), false) => None,
                    (Some(host_orig), true) => Some(host_orig.reverse()),
                    (None, true) => Some(c.orig.reverse()),
                    (None, false) => Some(c.reply.reverse()),
                };
                st |= c.nat_state();
            }
            Some(Peek {
                outcome: CtOutcome {
                    state: st,
                    zone,
                    mark: c.mark,
                    label: c.label(),
                },
                rewritten,
            })
        })
    }

    /// Watches the packet tuple `t`, which an uncommitted `ct()` found
    /// without a connection (`+trk+new`), for a cache: the watch fires
    /// when a connection with `t` as either tuple is stored. `None` if
    /// `t` has a connection now (do not cache).
    pub(crate) fn watch_absent(&self, t: &Tuple) -> Option<AbsentLink> {
        let id = self.next_absent_id.fetch_add(1, Ordering::Relaxed) * 2 + 1;
        let shard = self.table.watch_absent(t, id)?;
        Some(AbsentLink {
            watches: self.table.absent().clone(),
            shard,
            tuple: *t,
            id,
        })
    }

    /// Under `c`'s lock, after a change that may make cached packets of
    /// it translate differently: unlinks every link and queues `id` for
    /// every packet thread. Returns whether it was linked.
    pub(super) fn xdp_changed(&self, c: &mut Conn, id: usize) -> bool {
        if c.xdp_links == 0 {
            return false;
        }
        c.xdp_links = 0;
        c.xdp_epoch = c.xdp_epoch.wrapping_add(1);
        self.xdp_dead.push_all(&[id]);
        true
    }

    /// Makes the queues of unlinked connections and fired watches serve
    /// `threads` packet threads (set when the bridge starts, before they
    /// run).
    pub fn set_xdp_threads(&self, threads: usize) {
        self.xdp_dead.set_threads(threads);
        self.table.absent().set_threads(threads);
    }

    /// Moves into `out` the ids packet thread `thread` must act on:
    /// connections and fired watches whose cache entries must go.
    /// Returns whether there were any. Two atomic loads when none.
    pub fn xdp_take_dead(&self, thread: usize, out: &mut Vec<usize>) -> bool {
        let fired = self.table.absent().take_fired(thread, out);
        self.xdp_dead.take(thread, out) | fired
    }

    /// Removes a connection from the table (if those entries still point
    /// at `conn`), unlinking it. Returns whether it was removed and
    /// whether it was linked.
    pub(super) fn remove_conn(&self, orig: &Tuple, reply: &Tuple, conn: &ConnRef) -> (bool, bool) {
        if !self.table.remove(orig, reply, conn) {
            return (false, false);
        }
        let mut c = conn.lock();
        c.removed = true;
        if c.zone_slot != 0 {
            self.zone_limits.release(std::mem::take(&mut c.zone_slot));
        }
        (true, self.xdp_changed(&mut c, Arc::as_ptr(conn) as usize))
    }

    /// Makes flushes that remove linked connections call `hook` (set
    /// once, when the bridge starts).
    pub fn set_flush_hook(&self, hook: Arc<dyn FlushHook>) {
        let _ = self.flush_hook.set(hook);
    }

    /// A flush removed linked connections: entries must stop being used
    /// before the flush is acknowledged.
    pub(super) fn xdp_flushed(&self) {
        if let Some(h) = self.flush_hook.get() {
            h.flushed();
        }
    }
}
