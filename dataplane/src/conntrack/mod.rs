//! Userspace connection tracking with NAT, for the `ct()` action.
//!
//! # Design
//!
//! Stores: committed connections, each a [`Conn`] with its original and
//! reply tuples (zone, protocol, IPv4 or IPv6 addresses, ports; the reply
//! tuple already NATed), ct_mark, ct_label, the TCP tracker's state,
//! whether a reply was seen, and when it expires. The [`table::Table`]
//! maps both tuples to the record, so a packet of either direction finds
//! it with one lookup; see `table.rs` for the sharding.
//!
//! Semantics follow OVS's `ct()`:
//! - every packet leaves with `+trk`; `+new` until the connection has seen
//!   a reply, `+est` after; `+rpl` in the reply direction; `+rel` for an
//!   ICMP error quoting a tracked connection; `+inv` for what cannot be
//!   tracked (neither IPv4 nor IPv6, ICMPv6 other than
//!   echo and errors, truncated headers, TCP segments outside the window
//!   or with nonsense flags, an echo reply or ICMP error without a
//!   connection, a new connection when the table is full or NAT has no
//!   free tuple, a later fragment whose first fragment was not seen): a
//!   pipeline that drops `+inv` drops it rather than let it past its
//!   policy untracked;
//! - a fragmented datagram is tracked once, by its first fragment, and
//!   its later fragments share the outcome (see `frag.rs`);
//! - only `commit` stores a new connection; an uncommitted one is `+new`
//!   every time. ct_mark and ct_label are written only by a committing
//!   `ct()` (each under its mask); a packet of the connection carries both
//!   in its key after `ct()`;
//! - IPv6 is tracked and translated as IPv4 is (ICMPv6 echo and errors
//!   like ICMP's, fragments like IPv4's); a connection asked to be
//!   translated to an address range of the other family is `+inv`;
//! - NAT happens only when the action has `nat`: `nat(src=..)`/`nat(dst=..)`
//!   choose the translation when the connection is committed, a bare `nat`
//!   applies an existing connection's translation in whichever direction
//!   the packet goes (and translates ICMP errors quoting it);
//! - `force` ends a connection met in the reply direction and starts a new
//!   one with this packet;
//! - timeouts are OVS userspace conntrack's defaults ([`Timeouts`]);
//!   expired connections are ignored by lookups and removed by
//!   [`Conntrack::sweep`], which a [`Sweeper`] thread runs a shard at a
//!   time, off the packet threads.
//!
//! New UDP connections may also be created by the XDP program, from
//! templates the packet threads install, and stored here from its
//! reports; the table keeps the kernel's slot counts up to date so it
//! never creates one this table holds (see `kernel_conns.rs`).
//!
//! The XDP flow cache may forward packets of settled connections in the
//! kernel; the table counts the cache's links to each and voids them when
//! the connection changes or goes (`links.rs`, `absent.rs`,
//! `id_queues.rs`).
//!
//! The fast path's side of both (which connections the cache carries,
//! its handles, the kernel's ring and budget) is in `fastpath/ct/`; it
//! stands on this module's narrow API (`Conntrack::link`, `peek`,
//! `watch_absent`, `store_kernel_conn`, `xdp_take_dead`), and this module
//! imports nothing of the fast path: it calls back only through the
//! traits it defines, [`FlushHook`] and [`KernelConns`].
//!
//! Invariants: the table never holds more than `limit` connections; when
//! full, existing connections work as before and a commit of a new one
//! stores nothing: the packet goes on `+trk+new`, uncommitted (no mark,
//! label or NAT), as in OVS's userspace datapath, and the refusal is
//! counted in [`CtStats::table_full`]. The limit can be changed while
//! packets flow ([`Conntrack::set_limit`], `ovs-appctl
//! dpctl/ct-set-maxconns`); lowering it below the table's size removes
//! nothing, it only refuses new connections until enough expire.
//!
//! Concurrency: [`Conntrack`] is shared (`Arc`) by packet threads and the
//! control socket. A packet of an established connection takes its
//! tuple's shard lock for reading (shared with every other reader) and the
//! connection's own mutex, both held for the few dozen nanoseconds of the
//! update and uncontended unless two threads carry the same connection;
//! there is no global lock. Counters are Relaxed atomics touched only on
//! the slow paths (new, invalid, full). With today's single packet thread
//! both locks are always free (one atomic operation each); a lock-free
//! lookup (RCU-style map) is the next step if several threads contend.
//!
//! Cost: an established connection's packet is one hash, one map probe,
//! the TCP window check and, with NAT, a few incremental checksum updates;
//! no allocation. A new committed connection allocates its record.

mod absent;
pub mod ctnetlink;
mod dump;
pub mod frag;
#[cfg(test)]
mod frag_tests;
pub mod host;
#[cfg(test)]
mod host_tests;
mod id_queues;
#[cfg(test)]
mod ipv6_tests;
mod kernel_conns;
#[cfg(test)]
mod label_tests;
mod links;
mod nat;
mod new_conn;
pub mod persist;
#[cfg(test)]
mod persist_tests;
mod table;
mod tcp;
#[cfg(test)]
pub(crate) mod tests;
pub(crate) mod tuple;
pub mod zone_limits;

pub use dump::{format_entry, Sweeper, SWEEP_INTERVAL};
pub use host::HostConntrack;
pub use kernel_conns::KernelConns;
pub use links::{AbsentLink, ConnLink, FlushHook, Peek};
pub use tuple::{Addr, Tuple};

use flowtable::key::FlowKey;
use flowtable::matching::IP_PROTO_TCP;
use flowtable::pipeline::NatSpec;
use frag::Fragments;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::time::Instant;
use table::{ConnRef, Table};
use tcp::{TcpConn, Verdict};
use tuple::{Parsed, TcpSeg};
use xbr_packet::parse::Layers;

/// ct_state bits (OVS's CS_*).
pub mod state {
    pub const NEW: u32 = 0x01;
    pub const EST: u32 = 0x02;
    pub const REL: u32 = 0x04;
    pub const RPL: u32 = 0x08;
    pub const INV: u32 = 0x10;
    pub const TRK: u32 = 0x20;
    pub const SNAT: u32 = 0x40;
    pub const DNAT: u32 = 0x80;
}

/// Connections the table holds by default (OVS userspace's default
/// `ct-maxconns`).
pub const DEFAULT_LIMIT: usize = 3_000_000;

/// Idle timeouts in milliseconds, by protocol state: OVS userspace
/// conntrack's defaults. UDP and other IP protocols share the "other"
/// timeouts, as in OVS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    pub tcp_first_packet: u64,
    pub tcp_opening: u64,
    pub tcp_established: u64,
    pub tcp_closing: u64,
    pub tcp_fin_wait: u64,
    pub tcp_closed: u64,
    pub other_first: u64,
    pub other_multiple: u64,
    pub other_bidir: u64,
    pub icmp_first: u64,
    pub icmp_reply: u64,
}

impl Default for Timeouts {
    fn default() -> Self {
        const S: u64 = 1000;
        Timeouts {
            tcp_first_packet: 30 * S,
            tcp_opening: 30 * S,
            tcp_established: 24 * 3600 * S,
            tcp_closing: 15 * 60 * S,
            tcp_fin_wait: 45 * S,
            tcp_closed: 30 * S,
            other_first: 60 * S,
            other_multiple: 60 * S,
            other_bidir: 30 * S,
            icmp_first: 60 * S,
            icmp_reply: 30 * S,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CtConfig {
    /// Most connections the table holds.
    pub limit: usize,
    pub timeouts: Timeouts,
}

impl Default for CtConfig {
    fn default() -> Self {
        CtConfig {
            limit: DEFAULT_LIMIT,
            timeouts: Timeouts::default(),
        }
    }
}

/// One `ct()` execution, from `DpAction::Ct`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CtRequest {
    pub zone: u16,
    pub commit: bool,
    pub force: bool,
    pub nat: Option<NatSpec>,
    /// (value, mask) written to ct_mark on commit.
    pub mark: Option<(u32, u32)>,
    /// (value, mask) written to the 128-bit ct_label on commit.
    pub label: Option<(u128, u128)>,
    /// The packet entered from the host (an internal port): a miss may be
    /// a connection the host's conntrack made (see `host.rs`).
    pub from_host: bool,
    /// The port the packet entered by: its share of the fragment table
    /// (`frag.rs`).
    pub in_port: u32,
}

/// What a tracked packet carries on: the ct_* fields of its key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CtOutcome {
    pub state: u32,
    pub zone: u16,
    pub mark: u32,
    pub label: u128,
}

/// A label as [`Conn`] keeps it.
fn label_words(label: u128) -> [u64; 2] {
    [label as u64, (label >> 64) as u64]
}

/// NAT bits of a connection.
const NAT_SRC: u8 = 1;
const NAT_DST: u8 = 2;

/// A committed connection.
///
/// Kept small: a table holds millions (3 million by default in OVS), and
/// with the `Arc` and the lock it is one 192-byte allocation. Hence the
/// label as two words (a `u128` would align the record to 16 bytes) and
/// the rare host translation behind a box.
#[derive(Clone, Debug)]
pub struct Conn {
    pub orig: Tuple,
    /// The reply direction's tuple as its packets arrive (NATed).
    pub reply: Tuple,
    pub mark: u32,
    label: [u64; 2],
    tcp: Option<TcpConn>,
    /// Packets seen in each direction (original, reply), for the "other"
    /// protocols' timeouts.
    seen_reply: bool,
    multiple: bool,
    nat: u8,
    /// A connection learned from the host that the host translated before
    /// br0 saw it: the host's original tuple (see `host.rs`).
    host_orig: Option<Box<Tuple>>,
    /// Monotonic milliseconds ([`Conntrack::now_ms`]) when it expires.
    expires: u64,
    /// XDP flow cache entries (of any packet thread) that carry this
    /// connection: links of the current `xdp_epoch` (see `links.rs`).
    xdp_links: u32,
    xdp_epoch: u32,
    /// Removed from the table (a link held by the cache outlives it).
    removed: bool,
    /// The number of the zone limit it was admitted under (0: none),
    /// given back when it goes (`zone_limits.rs`).
    zone_slot: u32,
}

impl Conn {
    pub fn label(&self) -> u128 {
        u128::from(self.label[0]) | u128::from(self.label[1]) << 64
    }

    fn set_label(&mut self, label: u128) {
        self.label = label_words(label);
    }

    fn timeout(&self, t: &Timeouts) -> u64 {
        if let Some(tcp) = &self.tcp {
            return tcp.timeout(t);
        }
        if self.orig.proto == IP_PROTO_TCP {
            // Learned from the host, untracked here: its end is not seen.
            return t.tcp_established;
        }
        match (self.orig.is_icmp(), self.seen_reply) {
            (true, false) => t.icmp_first,
            (true, true) => t.icmp_reply,
            (_, true) => t.other_bidir,
            (_, false) if self.multiple => t.other_multiple,
            _ => t.other_first,
        }
    }

    fn nat_state(&self) -> u32 {
        let mut s = 0;
        if self.nat & NAT_SRC != 0 {
            s |= state::SNAT;
        }
        if self.nat & NAT_DST != 0 {
            s |= state::DNAT;
        }
        s
    }

    /// The TCP state name for dumps, if TCP.
    pub fn tcp_state(&self) -> Option<&'static str> {
        self.tcp.as_ref().map(TcpConn::state_name)
    }
}

/// Event counters (Relaxed; read by `xbr conntrack` and at shutdown).
#[derive(Debug, Default)]
pub struct CtStats {
    /// New connections refused because the table was full.
    pub table_full: AtomicU64,
    /// New connections refused because NAT found no free tuple.
    pub nat_exhausted: AtomicU64,
    /// Packets marked `+inv`.
    pub invalid: AtomicU64,
    /// Connections committed.
    pub committed: AtomicU64,
    /// Connections learned from the host's conntrack.
    pub learned: AtomicU64,
    /// Connections removed after their timeout.
    pub expired: AtomicU64,
    /// Later fragments that shared their first fragment's outcome.
    pub fragments: AtomicU64,
    /// Later fragments without a first fragment seen (`+inv`, also
    /// counted in `invalid`).
    pub orphan_fragments: AtomicU64,
    /// Packets neither IPv4 nor IPv6, `+inv` and also counted in
    /// `invalid`.
    pub not_ip: AtomicU64,
    /// New connections asked to be translated to an address range of the
    /// other family (an IPv6 connection to an IPv4 range or the reverse);
    /// `+inv` and also counted in `invalid`.
    pub nat_family: AtomicU64,
    /// New connections not committed because their zone was at its limit
    /// (`dpctl/ct-set-limits`); the packet went on `+trk+new`.
    pub zone_limited: AtomicU64,
    /// Connections the XDP program created and the table stored
    /// (`kernel_conns.rs`).
    pub kernel_imported: AtomicU64,
    /// The XDP program's reports of new connections not stored: the
    /// tuple had a connection here already, or the zone or the table was
    /// full.
    pub kernel_refused: AtomicU64,
}

/// A connection as `dump` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CtEntry {
    pub orig: Tuple,
    pub reply: Tuple,
    pub mark: u32,
    pub label: u128,
    pub tcp_state: Option<&'static str>,
    /// Milliseconds until it expires.
    pub expires_in: u64,
}

/// The shared connection tracker; see the module documentation.
pub struct Conntrack {
    table: Table,
    config: CtConfig,
    /// Most connections the table holds: `config.limit` until changed.
    limit: AtomicUsize,
    epoch: Instant,
    /// Next shard [`Conntrack::sweep`] visits.
    sweep_at: AtomicUsize,
    /// The host's conntrack, asked about misses from the host.
    host: Option<Box<dyn HostConntrack>>,
    /// First fragments' outcomes, for their later fragments.
    frags: Fragments,
    /// Ids of linked connections whose XDP cache entries must go, and of
    /// fired watches, for every packet thread (see `links.rs`).
    xdp_dead: id_queues::IdQueues,
    /// Ids of watches on absent tuples (odd, so never a connection's
    /// address; see `absent.rs`).
    next_absent_id: AtomicUsize,
    /// Called by flushes that removed linked connections (the XDP flow
    /// cache's generation; see `links.rs`).
    flush_hook: OnceLock<Arc<dyn FlushHook>>,
    /// New connections the XDP program creates (`kernel_conns.rs`).
    kernel: OnceLock<Arc<dyn KernelConns>>,
    /// Per-zone connection limits (`dpctl/ct-set-limits`).
    pub zone_limits: zone_limits::ZoneLimits,
    pub stats: CtStats,
}

impl std::fmt::Debug for Conntrack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conntrack")
            .field("connections", &self.table.len())
            .field("config", &self.config)
            .finish()
    }
}

impl Default for Conntrack {
    fn default() -> Self {
        Self::new(CtConfig::default())
    }
}

/// What a lookup under the locks decided.
enum Found {
    /// The outcome, and the host's original tuple of a connection whose
    /// first reply this is, which the host must be told about.
    Done(CtOutcome, Option<Tuple>),
    /// The connection must go (expired, reopened by a SYN, forced); the
    /// packet is then handled as new.
    Remove(Tuple, Tuple, ConnRef, bool),
    Missing,
}

impl Conntrack {
    pub fn new(config: CtConfig) -> Self {
        Conntrack {
            table: Table::new(),
            limit: AtomicUsize::new(config.limit),
            config,
            epoch: Instant::now(),
            sweep_at: AtomicUsize::new(0),
            host: None,
            frags: Fragments::default(),
            xdp_dead: id_queues::IdQueues::default(),
            next_absent_id: AtomicUsize::new(0),
            flush_hook: OnceLock::new(),
            kernel: OnceLock::new(),
            zone_limits: zone_limits::ZoneLimits::default(),
            stats: CtStats::default(),
        }
    }

    /// Asks `host` about connections first seen from the host (see
    /// `host.rs`).
    pub fn with_host(mut self, host: Box<dyn HostConntrack>) -> Self {
        self.host = Some(host);
        self
    }

    /// The configuration it was made with (the limit as it was then; see
    /// [`Conntrack::limit`]).
    pub fn config(&self) -> &CtConfig {
        &self.config
    }

    /// Most connections the table holds now.
    pub fn limit(&self) -> usize {
        self.limit.load(Relaxed)
    }

    /// Changes the limit for new connections; existing ones stay, even
    /// beyond it.
    pub fn set_limit(&self, limit: usize) {
        self.limit.store(limit, Relaxed);
    }

    /// Milliseconds since the tracker was made: the clock `execute`,
    /// `sweep` and `dump` take (packet threads read it once per batch).
    pub fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Connections in the table.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Connections by zone, for the zones that have some (no lock).
    pub fn zone_counts(&self) -> Vec<(u16, u32)> {
        self.table.zone_counts()
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    fn invalid(&self, zone: u16) -> CtOutcome {
        self.stats.invalid.fetch_add(1, Relaxed);
        CtOutcome {
            state: state::TRK | state::INV,
            zone,
            mark: 0,
            label: 0,
        }
    }

    /// Runs one packet through conntrack: looks up (and with `commit`
    /// creates) its connection, applies NAT to `frame` when asked, and
    /// returns the packet's ct fields. `frame`, `layers` and `key` are the
    /// packet as `packet::extract` saw it.
    pub fn execute(
        &self,
        frame: &mut [u8],
        layers: Layers,
        key: &FlowKey,
        req: &CtRequest,
        now: u64,
    ) -> CtOutcome {
        self.execute_datagram(frame, layers, key, req, now).0
    }

    pub(super) fn execute_whole(
        &self,
        frame: &mut [u8],
        layers: Layers,
        key: &FlowKey,
        req: &CtRequest,
        now: u64,
    ) -> CtOutcome {
        match tuple::parse(frame, layers, key, req.zone) {
            Parsed::Invalid => self.invalid(req.zone),
            Parsed::Conn { tuple, tcp } => {
                self.track(frame, layers, &tuple, tcp.as_ref(), req, now)
            }
            Parsed::IcmpError { outer, quoted } => {
                self.related(frame, layers, &outer, &quoted, req, now)
            }
        }
    }

    fn track(
        &self,
        frame: &mut [u8],
        layers: Layers,
        t: &Tuple,
        seg: Option<&TcpSeg>,
        req: &CtRequest,
        now: u64,
    ) -> CtOutcome {
        // At most one removal (expired, reopened or forced) and one
        // connection the kernel created meanwhile, then new.
        for _ in 0..3 {
            let found = self.table.with(t, |e| {
                let Some(e) = e else { return Found::Missing };
                let mut c = e.conn.lock();
                let remove =
                    |c: &Conn, expired| Found::Remove(c.orig, c.reply, e.conn.clone(), expired);
                if c.expires <= now {
                    return remove(&c, true);
                }
                if req.force && e.reply {
                    return remove(&c, false);
                }
                let in_kernel = c.xdp_links > 0;
                if let (Some(tcp), Some(seg)) = (c.tcp.as_mut(), seg) {
                    match tcp.update_cached(e.reply, seg, in_kernel) {
                        Verdict::Valid => {}
                        Verdict::Invalid => return Found::Done(self.invalid(req.zone), None),
                        Verdict::Reopen => return remove(&c, false),
                    }
                }
                // The host never sees the replies of a connection it
                // translated (they go straight from pod to pod): tell it
                // about the first, as a shared conntrack would know.
                let first_host_reply = (e.reply && !c.seen_reply)
                    .then(|| c.host_orig.as_deref().copied())
                    .flatten();
                if e.reply {
                    c.seen_reply = true;
                } else {
                    c.multiple = true;
                }
                c.expires = now.saturating_add(c.timeout(&self.config.timeouts));
                let (mark, label) = (c.mark, c.label());
                if req.commit {
                    if let Some((v, m)) = req.mark {
                        c.mark = (c.mark & !m) | (v & m);
                    }
                    if let Some((v, m)) = req.label {
                        let label = (c.label() & !m) | (v & m);
                        c.set_label(label);
                    }
                }
                if c.xdp_links > 0 && (!links::settled(&c) || (c.mark, c.label()) != (mark, label))
                {
                    // Cached packets of it would now be tracked or
                    // translated differently (see links.rs).
                    self.xdp_changed(&mut c, Arc::as_ptr(&e.conn) as usize);
                }
                let mut st = state::TRK;
                st |= if c.seen_reply { state::EST } else { state::NEW };
                if e.reply {
                    st |= state::RPL;
                }
                if req.nat.is_some() && c.nat != 0 {
                    match (c.host_orig.as_deref(), e.reply) {
                        // The host translates its own direction.
                        (Some(_), false) => {}
                        (Some(host_orig), true) => {
                            nat::rewrite_packet(frame, layers, &c.reply, &host_orig.reverse());
                        }
                        (None, true) => {
                            nat::rewrite_packet(frame, layers, &c.reply, &c.orig.reverse());
                        }
                        (None, false) => {
                            nat::rewrite_packet(frame, layers, &c.orig, &c.reply.reverse());
                        }
                    }
                    st |= c.nat_state();
                }
                Found::Done(
                    CtOutcome {
                        state: st,
                        zone: req.zone,
                        mark: c.mark,
                        label: c.label(),
                    },
                    first_host_reply,
                )
            });
            match found {
                Found::Done(o, first_host_reply) => {
                    if let (Some(host), Some(host_orig)) = (&self.host, first_host_reply) {
                        host.reply_seen(&host_orig);
                    }
                    return o;
                }
                // The kernel may have created it: its reports first.
                Found::Missing if self.kernel_drain() > 0 && self.table.contains(t) => continue,
                Found::Missing => {
                    // The host's conntrack is asked about IPv4 only.
                    if req.from_host && !t.v6 {
                        if let Some(o) = self.learn(t, req, now) {
                            return o;
                        }
                    }
                    return self.create(frame, layers, t, seg, req, now);
                }
                Found::Remove(orig, reply, conn, expired) => {
                    if self.remove_conn(&orig, &reply, &conn).0 && expired {
                        self.stats.expired.fetch_add(1, Relaxed);
                    }
                }
            }
        }
        self.invalid(req.zone)
    }
}
