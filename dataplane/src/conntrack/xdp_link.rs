//! Connections carried by the XDP flow cache (see `crate::fastpath::cache`).
//!
//! # Design
//!
//! The cache may forward packets of an established connection in the
//! kernel, without conntrack seeing them. That is only right while every
//! packet of the connection would be tracked alike: `+est`, no NAT
//! applied, the same ct_mark and ct_label, and a state that packets
//! without SYN, FIN or RST (the only TCP segments the kernel forwards for
//! such entries) do not change. A connection in that state is *steady*.
//!
//! A [`CtLink`] is one cache entry's handle on the connection it carries;
//! the connection counts its links (`Conn::xdp_links`: with several
//! packet threads, each direction's entries may be another thread's).
//! Whenever a linked connection stops being steady (a FIN or RST seen by
//! a packet thread, a new mark or label, a reopening SYN) or leaves the
//! table (expiry, flush, `force`), conntrack unlinks all of them at once
//! under its lock (a new `xdp_epoch`: links of an older one are void) and
//! queues its id for every packet thread; each takes its queue after
//! every `ct()` and every round ([`Conntrack::xdp_take_dead`]) and deletes
//! the connection's entries it has, so the segment that changed the state
//! is forwarded only after the kernel stopped forwarding the connection
//! from the port it came by (a thread forwards it only after taking its
//! queue). Another thread's entries for the other direction go when that
//! thread takes its queue, within its round. A flush also bumps the cache's generation before it
//! returns, so no entry of a flushed connection is used after
//! `xbr conntrack flush` answered, whether or not the packet thread was
//! awake.
//!
//! Kernel hits refresh the connection ([`CtLink::refresh`], from the
//! cache's sweep) as the packets would have, so it does not expire while
//! the kernel carries it; a steady connection's timeout does not depend
//! on which packets were seen.
//!
//! Tuples without a connection: see `absent.rs` ([`Conntrack::xdp_watch_absent`]);
//! a fired watch's id goes through the same queue.
//!
//! TCP window tracking is suspended while linked (`TcpConn::suspend_window`):
//! the kernel does not tell conntrack the sequence numbers it forwarded,
//! so the first segment of each peer seen afterwards resynchronises the
//! window instead of being judged against a stale one.

use super::absent::AbsentWatches;
use super::table::ConnRef;
use super::{state, Conn, Conntrack, CtOutcome, Tuple};
use crate::fastpath::cache::generation::XdpGen;
use flowtable::matching::{IP_PROTO_TCP, IP_PROTO_UDP};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Whether packets of `c` that the kernel may forward (no SYN, FIN or
/// RST) leave its state, and so their own `ct()` outcome, unchanged.
/// TCP and UDP only: an ICMP echo's identifier is not in the XDP key.
pub(super) fn steady(c: &Conn) -> bool {
    c.seen_reply
        && !c.removed
        && matches!(c.orig.proto, IP_PROTO_TCP | IP_PROTO_UDP)
        && c.tcp.as_ref().is_none_or(|t| t.established())
}

/// What [`Conntrack::xdp_peek`] found: the outcome `ct()` would give the
/// packet, and with NAT the tuple it would leave with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XdpPeek {
    pub outcome: CtOutcome,
    /// The packet's addresses and ports after `ct(nat)` (a translated
    /// connection); `None`: they stay as they came.
    pub rewritten: Option<Tuple>,
}

/// The XDP flow cache's hold on a connection it carries, or on a tuple
/// without one whose uncommitted `+trk+new` it carries (`absent.rs`).
#[derive(Clone)]
pub struct CtLink {
    kind: LinkKind,
}

#[derive(Clone)]
enum LinkKind {
    /// The connection, and the `xdp_epoch` the link belongs to.
    Conn(ConnRef, u32),
    Absent {
        watches: Arc<AbsentWatches>,
        shard: usize,
        tuple: Tuple,
        id: usize,
    },
}

impl std::fmt::Debug for CtLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("CtLink").field(&self.id()).finish()
    }
}

impl CtLink {
    /// The link's identity while it exists: the connection's address
    /// (which the link keeps from being reused), or the watch's odd id.
    pub fn id(&self) -> usize {
        match &self.kind {
            LinkKind::Conn(conn, _) => Arc::as_ptr(conn) as usize,
            LinkKind::Absent { id, .. } => *id,
        }
    }

    /// The kernel forwarded packets of the connection at `now`: it lives
    /// on as if conntrack had seen them. A connection that was unlinked,
    /// removed or already expired is left alone; an absent tuple has
    /// nothing to refresh.
    pub fn refresh(&self, ct: &Conntrack, now: u64) {
        let LinkKind::Conn(conn, epoch) = &self.kind else {
            return;
        };
        let mut c = conn.lock();
        if c.xdp_epoch == *epoch && c.xdp_links > 0 && !c.removed && c.expires > now {
            let until = now.saturating_add(c.timeout(&ct.config.timeouts));
            c.expires = c.expires.max(until);
        }
    }

    /// The cache no longer carries the connection (or the tuple).
    pub fn unlink(&self) {
        match &self.kind {
            LinkKind::Conn(conn, epoch) => {
                let mut c = conn.lock();
                if c.xdp_epoch == *epoch {
                    c.xdp_links = c.xdp_links.saturating_sub(1);
                }
            }
            LinkKind::Absent {
                watches,
                shard,
                tuple,
                id,
            } => watches.remove(*shard, tuple, *id),
        }
    }

    /// Whether the link is still in force (tests and diagnostics).
    pub fn is_linked(&self) -> bool {
        match &self.kind {
            LinkKind::Conn(conn, epoch) => {
                let c = conn.lock();
                c.xdp_epoch == *epoch && c.xdp_links > 0
            }
            LinkKind::Absent {
                watches,
                shard,
                tuple,
                id,
            } => watches.contains(*shard, tuple, *id),
        }
    }
}

impl Conntrack {
    /// Links the connection of the packet tuple `t` to the XDP flow
    /// cache, if it is live, steady and still has the ct_mark and
    /// ct_label the translation saw; `None` otherwise (do not cache).
    pub fn xdp_link(&self, t: &Tuple, mark: u32, label: u128, now: u64) -> Option<CtLink> {
        self.table.with(t, |e| {
            let e = e?;
            let mut c = e.conn.lock();
            if c.expires <= now || !steady(&c) || c.mark != mark || c.label() != label {
                return None;
            }
            c.xdp_links += 1;
            if let Some(tcp) = c.tcp.as_mut() {
                tcp.suspend_window();
            }
            Some(CtLink {
                kind: LinkKind::Conn(e.conn.clone(), c.xdp_epoch),
            })
        })
    }

    /// What `ct()` would give a packet of tuple `t` that the XDP cache may
    /// carry, without changing anything: its connection must be live and
    /// steady; `None` otherwise. When the `ct()` has `nat` and the
    /// connection a translation, the outcome says so (`+snat`/`+dnat`)
    /// and [`XdpPeek::rewritten`] is the tuple the packet leaves with,
    /// as `ct(nat)` rewrites it (the host's own direction of a connection
    /// learned from it is left as it is, as `ct()` leaves it). For
    /// adopting the entries a previous process left (`engine/adopt.rs`):
    /// a packet the kernel forwards leaves such a connection as it is, so
    /// `ct()`'s outcome for it is this.
    pub fn xdp_peek(&self, t: &Tuple, zone: u16, nat: bool, now: u64) -> Option<XdpPeek> {
        self.table.with(t, |e| {
            let e = e?;
            let c = e.conn.lock();
            if c.expires <= now || !steady(&c) {
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
            Some(XdpPeek {
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
    /// without a connection (`+trk+new`), for the XDP flow cache: the
    /// watch fires when a connection with `t` as either tuple is stored.
    /// `None` if `t` has a connection now (do not cache).
    pub fn xdp_watch_absent(&self, t: &Tuple) -> Option<CtLink> {
        let id = self.next_absent_id.fetch_add(1, Ordering::Relaxed) * 2 + 1;
        let shard = self.table.watch_absent(t, id)?;
        Some(CtLink {
            kind: LinkKind::Absent {
                watches: self.table.absent().clone(),
                shard,
                tuple: *t,
                id,
            },
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

    /// Makes the XDP cache's queues serve `threads` packet threads (set
    /// when the bridge starts, before they run).
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
    /// at `conn`), unlinking it from the cache. Returns whether it was
    /// removed and whether it was linked.
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

    /// Makes flushes invalidate the XDP flow cache whose generation `gen`
    /// is (set once, when the bridge starts).
    pub fn set_xdp_gen(&self, gen: Arc<XdpGen>) {
        let _ = self.xdp_gen.set(gen);
    }

    /// A flush removed linked connections: entries must stop being used
    /// before the flush is acknowledged.
    pub(super) fn xdp_flushed(&self) {
        if let Some(g) = self.xdp_gen.get() {
            g.bump();
        }
    }
}
