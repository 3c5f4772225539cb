//! Connections carried by the XDP flow cache (see `fastpath::cache`):
//! which ones, and the entries' handles on them.
//!
//! # Design
//!
//! The cache may forward packets of a connection in the kernel, without
//! conntrack seeing them. That is only right while every packet of the
//! connection the kernel forwards would be tracked alike: `+est`, no NAT
//! applied, the same ct_mark and ct_label, and a state that packets
//! without SYN, FIN or RST (the only TCP segments the kernel forwards for
//! such entries) do not change. Conntrack says which connections are in
//! such a state (*settled*, `conntrack/links.rs`); the cache adds what
//! its key can tell apart: TCP and UDP only, as an ICMP echo's identifier
//! is not in the XDP key. A connection both settled and of those
//! protocols is *steady*, and only steady connections are linked
//! ([`link`]) or peeked at for adoption ([`peek`]).
//!
//! A [`CtLink`] is one cache entry's handle on what it carries: a steady
//! connection (conntrack's [`ConnLink`], counted by the connection and
//! voided by conntrack when it stops being steady or leaves the table)
//! or a tuple without a connection whose uncommitted `+trk+new` the
//! entry carries (conntrack's [`AbsentLink`], a watch fired when the
//! tuple gets one: `conntrack/absent.rs`). Either way the id of a voided
//! link reaches every packet thread through conntrack's queues
//! (`Conntrack::xdp_take_dead`), and the thread deletes its entries
//! carrying it.
//!
//! Layering: this file stands on conntrack's narrow API (`link`, `peek`,
//! `watch_absent` and the two handles); conntrack imports nothing of the
//! fast path. The cache (`cache/mod.rs`, `cache/adopt.rs`,
//! `cache/sweep.rs`) and the engine's adoption (`engine/adopt.rs`) call
//! these functions.
//!
//! Cost: as conntrack's calls (one table lookup or connection lock each).

use crate::conntrack::{AbsentLink, ConnLink, Conntrack, Peek, Tuple};
use flowtable::matching::{IP_PROTO_TCP, IP_PROTO_UDP};

/// Whether the XDP key tells connections of `proto` apart: TCP and UDP
/// (an ICMP echo's identifier is not in the key).
fn keyed(proto: u8) -> bool {
    matches!(proto, IP_PROTO_TCP | IP_PROTO_UDP)
}

/// The XDP flow cache's hold on a connection it carries, or on a tuple
/// without one whose uncommitted `+trk+new` it carries.
#[derive(Clone)]
pub struct CtLink {
    kind: LinkKind,
}

#[derive(Clone)]
enum LinkKind {
    Conn(ConnLink),
    Absent(AbsentLink),
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
            LinkKind::Conn(l) => l.id(),
            LinkKind::Absent(w) => w.id(),
        }
    }

    /// The kernel forwarded packets of the connection at `now`: it lives
    /// on as if conntrack had seen them. A connection that was unlinked,
    /// removed or already expired is left alone; an absent tuple has
    /// nothing to refresh.
    pub fn refresh(&self, ct: &Conntrack, now: u64) {
        if let LinkKind::Conn(l) = &self.kind {
            l.refresh(ct, now);
        }
    }

    /// The cache no longer carries the connection (or the tuple).
    pub fn unlink(&self) {
        match &self.kind {
            LinkKind::Conn(l) => l.unlink(),
            LinkKind::Absent(w) => w.unlink(),
        }
    }

    /// Whether the link is still in force (tests and diagnostics).
    pub fn is_linked(&self) -> bool {
        match &self.kind {
            LinkKind::Conn(l) => l.is_linked(),
            LinkKind::Absent(w) => w.is_linked(),
        }
    }
}

/// Links the connection of the packet tuple `t` to the XDP flow cache,
/// if it is live, steady and still has the ct_mark and ct_label the
/// translation saw; `None` otherwise (do not cache).
pub fn link(ct: &Conntrack, t: &Tuple, mark: u32, label: u128, now: u64) -> Option<CtLink> {
    if !keyed(t.proto) {
        return None;
    }
    let l = ct.link(t, mark, label, now)?;
    Some(CtLink {
        kind: LinkKind::Conn(l),
    })
}

/// Watches the packet tuple `t`, which an uncommitted `ct()` found
/// without a connection (`+trk+new`), for the XDP flow cache; `None` if
/// `t` has a connection now (do not cache).
pub fn watch_absent(ct: &Conntrack, t: &Tuple) -> Option<CtLink> {
    let w = ct.watch_absent(t)?;
    Some(CtLink {
        kind: LinkKind::Absent(w),
    })
}

/// What `ct()` would give a packet of tuple `t` that the XDP cache may
/// carry, without changing anything: its connection must be live and
/// steady; `None` otherwise (see `Conntrack::peek` for NAT). For
/// adopting the entries a previous process left (`engine/adopt.rs`): a
/// packet the kernel forwards leaves such a connection as it is, so
/// `ct()`'s outcome for it is this.
pub fn peek(ct: &Conntrack, t: &Tuple, zone: u16, nat: bool, now: u64) -> Option<Peek> {
    if !keyed(t.proto) {
        return None;
    }
    ct.peek(t, zone, nat, now)
}
