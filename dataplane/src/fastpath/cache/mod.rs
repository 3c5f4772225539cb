//! The XDP flow cache: hot traffic forwarded by the ports' XDP programs,
//! in the kernel, without reaching the packet thread.
//!
//! # Design
//!
//! Why: AF_XDP in copy mode on veth costs a copy into an skb per frame
//! and runs the receiving pod's stack on the sender's core; that caps any
//! switch that moves every frame through a socket near 1 Mpps per core.
//! An XDP redirect between veths skips both.
//!
//! What is stored: a BPF hash map (`fc_flows`, `--xdp-cache-size`
//! entries) from the exact headers of a frame to what the pipeline did
//! with it (see `entry.rs` and bpf/xbr_xdp.c), and, in the packet thread,
//! a mirror of every installed entry: the flows, groups and tables its
//! translation counted (flowtable's `Attribution`), its ports, and the
//! counts already credited.
//!
//! Authority: the packet thread translates every miss through the full
//! pipeline, as without the cache, then installs an entry only when
//! - the frame is one the XDP program looks up (untagged IPv4 without
//!   options, not a fragment, TCP/UDP/ICMP): the key then holds every
//!   header field of its flow key, and nothing else (tunnel metadata,
//!   NORMAL's MAC table; ct state only as described below) entered the
//!   translation;
//! - it came from a system port (AF_XDP with this program) or a VXLAN
//!   port (decapsulated by its uplink's program, see below) and the
//!   actions are Ethernet address, IPv4 address and TCP/UDP port
//!   rewrites (the program updates the checksums incrementally, as
//!   `rewrite/` does) then one output to another
//!   system port that may forward, or to a VXLAN port whose uplink may
//!   (its device takes redirected frames now: `ports::redirect`), and
//!   neither the input port polices nor the output port limits (QoS is
//!   the packet thread's), or nothing at all (a drop);
//! - the translation cache holds the translation (flowtable's rules for
//!   what is cacheable; it also gives the counters to credit);
//! - the switch is not forwarding by NORMAL for lack of a controller.
//!
//! Conntrack entries: a translation may also go through `ct(table=N)`
//! passes (the agent's `ip,ct_state=-trk -> ct(table=0)`, then
//! `+trk+est` flows) when every pass but the last is such a fork alone
//! (no ct_mark or ct_label written, no `force`; a `commit` of an
//! established connection changes nothing, and `nat` of one without a
//! translation does nothing), after each fork the packet
//! is `+trk+est` (maybe `+rpl`, maybe NATed: the rewrite of the last
//! pass's headers covers it), neither `+new`, `+inv` nor `+rel`,
//! over TCP or UDP, and the last pass's actions are as above. The entry
//! covers the whole translation: its key is the frame's, and it credits
//! the flows and tables of every pass. That is exact because:
//! - a pass's translation depends on the key it resumes with: the
//!   headers (in the XDP key), the metadata of the passes before (a
//!   function of those) and the ct fields. The zone is chosen by the
//!   flows, so the key implies it and the connection; the state of an
//!   established connection is `+est` (with `+rpl` for one direction,
//!   which has its own key) for as long as it stays *steady* (see
//!   `fastpath/ct/link.rs`), and ct_mark and ct_label only change when
//!   a `ct(commit)` writes them, which a cached translation never does;
//! - the connections are linked (`ct::link::link`) when the entry is
//!   installed, checked steady with the mark and label the passes saw.
//!   When one stops being steady (the packet thread saw a FIN or RST, a
//!   mark or label was written, it was reopened) or leaves the table
//!   (expiry, `force`, `xbr conntrack flush`), conntrack queues it and
//!   the packet thread deletes its entries after that `ct()` and every
//!   round, before it forwards the packet that changed it; a flush also
//!   bumps the generation before it answers;
//! - the XDP program hands TCP segments with SYN, FIN or RST, or without
//!   ACK, to the packet thread even on a hit (the entry's `ct` flag), so
//!   conntrack sees every segment that changes a connection's state;
//! - the sweep refreshes linked connections whose entries had hits, so a
//!   connection the kernel carries does not expire in conntrack; a steady
//!   connection's timeout (established TCP, replied UDP) does not depend
//!   on which of its packets were seen.
//!
//! Uncommitted `ct()`: a pass whose packet is exactly `+trk+new` (no
//! connection, none committed: the agent's subnet-mode flows) over TCP or
//! UDP is followed too; the entry holds a watch on the packet's tuple
//! instead of a link (`ct::link::watch_absent`, `conntrack/absent.rs`),
//! which fires, through the same queue, when a connection with that tuple
//! is stored.
//!
//! New connections: a UDP frame without a connection whose translation
//! is `ct(table=N)` then `ct(commit)` and one output (the benchmark's and
//! a simple policy's shape) teaches the program a *template*: the mask of
//! what the two passes examined, and the action. The program then
//! creates such connections itself, for frames that miss the entries and
//! match a template, and reports them to conntrack, which stays the
//! authority (`templates.rs`, and `conntrack/kernel_new.rs` for why that
//! is exact). Templates are retired with the entries (generation) and
//! removed by every flow, group or port change.
//!
//! Known limit: TCP window tracking is skipped for segments the kernel
//! forwards; while linked, and until each peer was seen again after,
//! conntrack accepts segments without window checks and resynchronises
//! the windows from them (`TcpConn::suspend_window`). ICMP is never
//! cached through `ct()` (the echo identifier is not in the XDP key).
//!
//! VXLAN: a frame xbr decapsulated is keyed as its uplink's program
//! keys it: the inner headers, the uplink's ifindex, and the tunnel
//! source and VNI (`entry::set_tunnel`); the tunnel destination is the
//! port's own address, which the program selects on. The program makes
//! every check xbr's decapsulation makes before it looks up (and leaves
//! what it cannot check, e.g. a UDP checksum to verify, to xbr), then
//! strips the outer headers on a hit. An entry that outputs to a VXLAN
//! port holds the outer headers `VxlanPort::encap` would write for the
//! flow (the next hop's template, the VNI, the source port hashed from
//! the inner flow, which the key holds) and the longest inner frame the
//! uplink MTU takes; the program writes them in front of the frame and
//! fills in the lengths, id and checksum, or leaves a frame too long to
//! xbr, which drops and counts it. Entries count inner frames; the
//! engine adds the outer headers to the tunnel port's counters. A new
//! next hop or MTU (the resolver's snapshot changed) invalidates the
//! cache at the start of the next round.
//!
//! Invalidation (never a stale hit after a barrier reply): a flow,
//! group or port change is followed by a revalidation (`revalidate.rs`):
//! each entry is translated again and removed only if it changed, and
//! the change counts as applied (what a barrier or bundle-commit reply
//! waits for) once every entry was checked. Changes whose effect is not
//! worked out per entry retire them all: each entry carries the
//! generation it was installed in, and the program uses it only if that
//! equals `fc_gen[0]`. The generation is bumped (`XdpGen`) by the
//! control plane on PORT_MOD and fail-mode changes before it replies, by
//! conntrack on a flush, and by the packet thread when a tunnel's next
//! hop or MTU changes. Entries are installed with the generation the
//! packet thread read at the start of its round, before it read port
//! configurations, and a pipeline change can only happen between rounds;
//! so an entry either reflects the current pipeline and ports or carries
//! an old generation (or awaits its revalidation, before the reply).
//! Stale entries are deleted by the sweep and reinstalled by the next
//! miss.
//!
//! Counters: hits add to the entry's packets and bytes atomically (one
//! value for all CPUs: a per-CPU map would preallocate entries x CPUs
//! values, hundreds of megabytes of kernel memory on a large node, for
//! an add that is uncontended because a flow is mostly handled on one
//! CPU at a time). Every [`SWEEP_INTERVAL`], the packet thread reads them and credits the
//! difference to the entry's flows, groups and tables, to the ingress
//! port's rx and the egress port's tx counters (or to the drop reason),
//! so OpenFlow statistics count the same packets with or without the
//! cache, [`SWEEP_INTERVAL`] later at worst. Entries idle for
//! [`IDLE_EXPIRY`] or of an old generation are read one last time and
//! deleted.
//!
//! Known limit: frames of a flow that reached the socket before its entry
//! was installed may leave after later frames the kernel forwarded
//! directly (a one-time reordering at the start of a flow, as OVS's
//! upcalls have).
//!
//! Checksums left to offload: pods' veths have TX checksum offload on,
//! so their TCP/UDP frames carry only the pseudo-header sum in the L4
//! checksum field (the skb's CHECKSUM_PARTIAL state does not survive an
//! XDP redirect, and the receiver verifies the field). The XDP program
//! recognises such a frame as the packet thread does (`crate::csum`)
//! and, on a hit that redirects it, completes the checksum over the
//! segment before counting and forwarding it (bpf_csum_diff in bounded
//! chunks, up to 9216 bytes; longer or truncated segments go to the
//! packet thread). Entries need not know: the key holds no checksum, a
//! partial frame translates like a complete one, and address and port
//! rewrites update the completed checksum incrementally (the packet
//! thread completes on receipt, then rewrites). Frames with
//! complete checksums pay only the pseudo-header comparison.
//!
//! Jumbo frames (larger than a page) reach the program in several
//! buffers; every header it reads or rewrites is in the first, and the
//! checksum completion copies the segment through `bpf_xdp_load_bytes`.
//! The kernel drops a multi-buffer frame redirected to a device that does
//! not take them (no `NDO_XMIT_SG`), without a counter, so an entry
//! forwards them only when its output port's device does
//! (`FcAction::Redirect::frags`, from `genl::xdp_features` when the port
//! was opened); otherwise they go to the packet thread.
//!
//! Cost: a miss that installs pays one map update syscall (and an
//! allocation for the mirror, which keeps the flow key of each pass to
//! revalidate from: 216 bytes a pass); the sweep one batched lookup
//! syscall per ~1024 entries (`sweep.rs`); a change one translation per
//! pass per entry; a
//! hit on a partial checksum one pass over the segment in the kernel
//! (the pass the packet thread would otherwise make, minus the copy).
//!
//! Concurrency: the packet thread owns [`XdpCache`]; `XdpGen` is shared
//! with the control plane.

mod adopt;
pub mod dump;
pub mod entry;
pub mod generation;
pub(crate) mod maps;
mod revalidate;
mod stats;
mod sweep;
mod takeover;
pub mod templates;

pub use adopt::{Claim, Fresh};
pub use entry::{FcAction, FcKey};
pub use generation::XdpGen;
pub use maps::{CacheMaps, XdpCacheError};
pub use revalidate::{Candidate, CHUNK as REVALIDATE_CHUNK};
pub use stats::XdpCacheStats;
pub use takeover::take_over;

use crate::conntrack::Conntrack;
use crate::fastpath::ct::link::{self, CtLink};
use flowtable::cache::Attribution;
use flowtable::key::FlowKey;
use flowtable::pipeline::{DpAction, DropReason};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often hit counters are collected and stale or idle entries removed.
pub const SWEEP_INTERVAL: Duration = Duration::from_millis(250);
/// Entries a busy round's sweep step visits at most (see
/// [`XdpCache::sweep`]): one batched map read, about 0.3 ms.
pub const SWEEP_CHUNK: usize = 1024;
/// An entry without hits for this long is removed (OVS's default idle
/// time for datapath flows).
pub const IDLE_EXPIRY: Duration = Duration::from_secs(10);
/// Entries of `--xdp-cache-size` by default: room for a node's hundreds
/// of thousands of flows (100k flows to 100k destinations thrashed a
/// 65,536-entry cache: 0.57 Mpps against 0.76 with this size, the
/// generator's rate). The map is preallocated: about 216 bytes an entry
/// (40 of key, 128 of value, the kernel's element header), 56 MB.
pub const DEFAULT_ENTRIES: u32 = 262_144;
/// Devices the cache may redirect to: every system port of a bridge,
/// those added while running included (a node's pods come and go).
pub const MAX_TARGETS: u32 = 4_096;

/// Hits to credit to the engine's ports and drop counters.
#[derive(Clone, Copy, Debug)]
pub struct Credit {
    /// The OpenFlow port the packets came in on.
    pub in_port: u32,
    /// The OpenFlow port they went out of, or the reason they were
    /// dropped.
    pub out: Result<u32, DropReason>,
    pub packets: u64,
    pub bytes: u64,
}

/// What an entry was translated from: enough to translate it again
/// (see `revalidate.rs`).
pub struct Origin {
    /// The OpenFlow port the frame came in on.
    pub in_port: u32,
    /// The flow key of every pass, the first (the frame as received)
    /// to the last (after the last `ct()` fork).
    pub passes: Box<[FlowKey]>,
    /// The `ct(table=N)` action each pass but the last ended with.
    pub forks: Box<[DpAction]>,
}

struct Installed {
    gen: u64,
    action: FcAction,
    attribution: Attribution,
    origin: Origin,
    out: Result<u32, DropReason>,
    /// The connections the translation went through (`ct()` passes).
    links: Vec<CtLink>,
    /// The key is a decapsulated frame's (see `entry::set_tunnel`).
    decap: bool,
    /// Hits already credited.
    packets: u64,
    bytes: u64,
    last_active: Instant,
}

impl Installed {
    /// Credits `dp` new hits of `db` bytes: to the flows now, to the
    /// ports through `credits`.
    fn credit(&self, dp: u64, db: u64, stats: &mut XdpCacheStats, credits: &mut Vec<Credit>) {
        self.attribution.credit(dp, db);
        stats.hit_packets += dp;
        if self.decap {
            stats.decap_hit_packets += dp;
        }
        if self.action.added_bytes() > 0 {
            stats.encap_hit_packets += dp;
        }
        credits.push(Credit {
            in_port: self.origin.in_port,
            out: self.out,
            packets: dp,
            bytes: db,
        });
    }
}

/// The packet thread's side of the XDP flow cache.
pub struct XdpCache {
    maps: Arc<CacheMaps>,
    /// The generation read at the start of the current round.
    round_gen: u64,
    mirror: HashMap<FcKey, Installed, ahash::RandomState>,
    /// Linked connection id -> the entries that carry it.
    by_conn: HashMap<usize, Vec<FcKey>, ahash::RandomState>,
    last_sweep: Instant,
    /// The sweep pass under way, if any (see `sweep.rs`).
    sweep: Option<sweep::Pass>,
    /// Sweep passes finished (abandoned ones not counted).
    passes_completed: u64,
    /// Batched map reads failed once: sweeps read entry by entry.
    sweep_by_key: bool,
    /// A batch's entries (a buffer kept between sweeps).
    sweep_batch: Vec<(FcKey, (u64, u64))>,
    /// The revalidation pass under way, if any (see `revalidate.rs`).
    reval: Option<revalidate::Pass>,
    /// Ports' credits waiting for the engine (filled by sweeps and by
    /// reinstalls, drained by [`XdpCache::take_credits`]).
    credits: Vec<Credit>,
    stats: XdpCacheStats,
    /// Entries this cache may hold: the map's capacity, or its share when
    /// `threads` packet threads share the map (see [`XdpCache::shared_by`]).
    quota: usize,
    threads: usize,
    /// New-connection templates of this thread's ports (`templates.rs`).
    templates: Vec<templates::Template>,
    /// When a template was last tried per ingress port.
    template_tried: HashMap<u32, Instant, ahash::RandomState>,
    /// Overflow drops to credit to ingress ports (`templates.rs`).
    ct_new_overflow: Vec<(u32, u64)>,
    /// Take-overs seen, and the adoption under way (`adopt.rs`).
    adoptions_seen: u64,
    adoption: Option<adopt::Adoption>,
    /// The counts when the adoption started, for its summary.
    adoption_start: XdpCacheStats,
}

impl XdpCache {
    pub fn new(maps: Arc<CacheMaps>) -> Self {
        XdpCache {
            quota: maps.capacity() as usize,
            threads: 1,
            round_gen: maps.generation().current(),
            mirror: HashMap::with_capacity_and_hasher(
                (maps.capacity() as usize).min(1 << 16),
                ahash::RandomState::new(),
            ),
            maps,
            by_conn: HashMap::with_hasher(ahash::RandomState::new()),
            last_sweep: Instant::now(),
            sweep: None,
            passes_completed: 0,
            sweep_by_key: false,
            sweep_batch: Vec::new(),
            reval: None,
            credits: Vec::new(),
            stats: XdpCacheStats::default(),
            templates: Vec::new(),
            template_tried: HashMap::with_hasher(ahash::RandomState::new()),
            ct_new_overflow: Vec::new(),
            adoptions_seen: 0,
            adoption: None,
            adoption_start: XdpCacheStats::default(),
        }
    }

    pub fn stats(&self) -> XdpCacheStats {
        XdpCacheStats {
            entries: self.mirror.len() as u64,
            ..self.stats
        }
    }

    /// Makes this one of `threads` packet threads' caches over the same
    /// maps: each installs entries for the frames it receives, up to an
    /// equal share of the map, and sweeps only its own.
    pub fn shared_by(mut self, threads: usize) -> Self {
        self.threads = threads.max(1);
        self.quota = self.maps.capacity() as usize / self.threads;
        self
    }

    pub fn len(&self) -> usize {
        self.mirror.len()
    }

    pub fn is_empty(&self) -> bool {
        self.mirror.is_empty()
    }

    /// Start of a round: adopts the current generation. Must be called
    /// before the round reads port configurations (see the module
    /// documentation).
    pub fn begin_round(&mut self) {
        self.round_gen = self.maps.generation().current();
    }

    /// Invalidates every entry at once (a change whose effect on each
    /// entry is not worked out: tunnel next hops, see also
    /// [`XdpCache::start_revalidation`]).
    pub fn invalidate(&mut self) {
        self.round_gen = self.maps.generation().bump();
    }

    /// Installs `action` for frames with `key`, unless an identical entry
    /// of this generation is there already. `conns`: the connections
    /// the translation went through (`ct()` passes), each as the packet's
    /// tuple with the ct_mark and ct_label the pass saw; they are linked
    /// in `ct` (`ct::link::link`, at its time `ct_now`) and the entry
    /// becomes a conntrack entry (see `crate::conntrack` and
    /// `entry::value`), or nothing is installed if one cannot be linked.
    #[allow(clippy::too_many_arguments)]
    pub fn install(
        &mut self,
        key: FcKey,
        action: FcAction,
        origin: Origin,
        out: Result<u32, DropReason>,
        attribution: Attribution,
        conns: &[CtConn],
        ct: &Conntrack,
        ct_now: u64,
    ) {
        // Broken: see `XdpGen`; held: a take-over is pending, and the
        // previous process's entries forward until it is done.
        let gen = self.maps.generation();
        if gen.is_broken() || gen.is_held() {
            return;
        }
        match self.mirror.get(&key) {
            Some(e)
                if e.gen == self.round_gen
                    && e.action == action
                    && e.out == out
                    && e.attribution.same(&attribution)
                    && e.links.len() == conns.len()
                    && e.links.iter().all(CtLink::is_linked) =>
            {
                return;
            }
            Some(_) => {
                // Stale (an older generation, so no longer counting, or a
                // connection that went): collect its last hits before
                // the update zeroes them.
                self.remove(&key);
            }
            None if self.mirror.len() >= self.quota => {
                self.stats.full += 1;
                return;
            }
            None => {}
        }
        let mut links = Vec::with_capacity(conns.len());
        for c in conns {
            let link = if c.absent {
                link::watch_absent(ct, &c.tuple)
            } else {
                link::link(ct, &c.tuple, c.mark, c.label, ct_now)
            };
            match link {
                Some(l) => links.push(l),
                None => {
                    self.release(&key, &links);
                    return;
                }
            }
        }
        let value = entry::value(action, self.round_gen, !links.is_empty());
        if let Err(e) = self.maps.insert(&key, &value) {
            if self.stats.install_errors == 0 {
                tracing::warn!(error = %e, "cannot install an XDP flow cache entry");
            }
            self.stats.install_errors += 1;
            self.release(&key, &links);
            return;
        }
        self.stats.installs += 1;
        if !links.is_empty() {
            self.stats.ct_installs += 1;
        }
        self.remember(
            key,
            Installed {
                gen: self.round_gen,
                action,
                attribution,
                origin,
                out,
                links,
                decap: entry::is_decapsulated(&key),
                packets: 0,
                bytes: 0,
                last_active: Instant::now(),
            },
        );
    }

    /// Keeps `installed`, the entry the kernel now holds under `key`, in
    /// the mirror, indexed under each connection it carries.
    fn remember(&mut self, key: FcKey, installed: Installed) {
        for l in &installed.links {
            self.by_conn.entry(l.id()).or_default().push(key);
        }
        self.mirror.insert(key, installed);
    }

    /// `key` no longer carries `links`: forgets it under each, and unlinks
    /// the connections no other entry carries.
    fn release(&mut self, key: &FcKey, links: &[CtLink]) {
        for l in links {
            let id = l.id();
            let empty = match self.by_conn.get_mut(&id) {
                Some(keys) => {
                    keys.retain(|k| k != key);
                    keys.is_empty()
                }
                None => true,
            };
            if empty {
                self.by_conn.remove(&id);
                l.unlink();
            }
        }
    }

    /// Removes the entry at `key` from the map and the mirror, crediting
    /// its last hits first.
    fn remove(&mut self, key: &FcKey) -> bool {
        let Some(old) = self.mirror.remove(key) else {
            return false;
        };
        // Read and delete at once: a hit between a read and a delete
        // would be lost to the flow's and the port's counters.
        if let Some(last) = self.maps.take(key) {
            self.credit_since(&old, last);
        }
        self.release(key, &old.links);
        true
    }

    /// Removes the entries of the connections `ids` (conntrack saw them
    /// change or go: `Conntrack::xdp_take_dead`).
    pub fn forget_conns(&mut self, ids: &[usize]) {
        for id in ids {
            let Some(keys) = self.by_conn.remove(id) else {
                continue;
            };
            for key in keys {
                if self.remove(&key) {
                    self.stats.ct_removed += 1;
                }
            }
        }
    }

    /// Credits the hits of `e` beyond those already credited, given the
    /// map's counters `(packets, bytes)`; returns whether there were any.
    fn credit_since(&mut self, e: &Installed, (packets, bytes): (u64, u64)) -> bool {
        let (dp, db) = (
            packets.saturating_sub(e.packets),
            bytes.saturating_sub(e.bytes),
        );
        if dp == 0 {
            return false;
        }
        e.credit(dp, db, &mut self.stats, &mut self.credits);
        true
    }

    /// Hits collected since the last call, for the engine to add to its
    /// port and drop counters.
    pub fn take_credits(&mut self) -> std::vec::Drain<'_, Credit> {
        self.credits.drain(..)
    }
}

/// A connection a translation went through: the packet's tuple in the
/// `ct()` pass, and the ct_mark and ct_label the pass saw; `absent`: the
/// pass found none and committed none (`+trk+new`, see
/// `conntrack/absent.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CtConn {
    pub tuple: crate::conntrack::Tuple,
    pub mark: u32,
    pub label: u128,
    pub absent: bool,
}

impl Drop for XdpCache {
    fn drop(&mut self) {
        // The process exits and leaves the kernel path forwarding
        // (`crate::fastpath::pin`): the entries stay for the programs.
        let keep = self.maps.pins().is_some_and(|p| p.keeping());
        for (key, e) in &self.mirror {
            if !keep {
                self.maps.delete(key);
            }
            for l in &e.links {
                l.unlink();
            }
        }
    }
}
