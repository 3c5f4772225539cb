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
//! What is stored: a BPF per-CPU hash map (`fc_flows`, `--xdp-cache-size`
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
//!   header field of its flow key, and nothing else (ct state, tunnel
//!   metadata, NORMAL's MAC table) entered the translation;
//! - it came from a system port (AF_XDP with this program) and the
//!   actions are Ethernet address rewrites then one output to another
//!   system port that may forward, or nothing at all (a drop);
//! - the translation cache holds the translation (flowtable's rules for
//!   what is cacheable; it also gives the counters to credit);
//! - the switch is not forwarding by NORMAL for lack of a controller.
//!
//! Invalidation (never a stale hit after a barrier reply): each entry
//! carries the generation it was installed in, and the program uses it
//! only if that equals `fc_gen[0]`. The generation is bumped (`XdpGen`)
//! by the packet thread after it applies flow/group changes and before it
//! marks them applied (which is what a barrier reply waits for), and by
//! the control plane on PORT_MOD and fail-mode changes before it replies.
//! Entries are installed with the generation the packet thread read at
//! the start of its round, before it read port configurations, and a
//! pipeline change can only happen between rounds; so an entry either
//! reflects the current pipeline and ports or carries an old generation.
//! Stale entries are deleted by the sweep and reinstalled by the next
//! miss.
//!
//! Counters: hits count packets and bytes per CPU in the entry. Every
//! [`SWEEP_INTERVAL`], the packet thread sums them and credits the
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
//! upcalls have). TCP/UDP frames whose checksum the sender left to
//! offload (it equals the pseudo-header sum) always go to the packet
//! thread, which completes it.
//!
//! Cost: a miss that installs pays one map update syscall (and an
//! allocation for the mirror); the sweep one lookup syscall per entry.
//!
//! Concurrency: the packet thread owns [`XdpCache`]; `XdpGen` is shared
//! with the control plane.

pub mod entry;
mod maps;

pub use entry::{FcAction, FcKey};
pub use maps::{CacheMaps, XdpGen};

use flowtable::cache::Attribution;
use flowtable::pipeline::DropReason;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often hit counters are collected and stale or idle entries removed.
pub const SWEEP_INTERVAL: Duration = Duration::from_millis(250);
/// An entry without hits for this long is removed (OVS's default idle
/// time for datapath flows).
pub const IDLE_EXPIRY: Duration = Duration::from_secs(10);
/// Entries of `--xdp-cache-size` by default.
pub const DEFAULT_ENTRIES: u32 = 65_536;
/// Devices the cache may redirect to: every system port of a bridge,
/// those added while running included (a node's pods come and go).
pub const MAX_TARGETS: u32 = 4_096;

#[derive(Debug, thiserror::Error)]
pub enum XdpCacheError {
    #[error("creating BPF map {name}: {source}")]
    CreateMap {
        name: &'static str,
        #[source]
        source: libbpf_rs::Error,
    },
    #[error("counting possible CPUs: {0}")]
    Cpus(#[source] libbpf_rs::Error),
    #[error("cannot write the XDP flow cache generation")]
    Generation,
    #[error("adding ifindex {ifindex} to the redirect map: {source}")]
    Device {
        ifindex: u32,
        #[source]
        source: libbpf_rs::Error,
    },
}

/// Counts of what the cache did (diagnostics and tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpCacheStats {
    /// Entries installed (or reinstalled after invalidation).
    pub installs: u64,
    /// Installs the kernel refused (e.g. map full under a race).
    pub install_errors: u64,
    /// Installs skipped because the cache was full.
    pub full: u64,
    /// Packets the XDP programs handled from entries (collected so far).
    pub hit_packets: u64,
    /// Entries removed because they were idle.
    pub expired: u64,
    /// Entries removed because a change invalidated them.
    pub invalidated: u64,
}

/// Hits to credit to the engine's ports and drop counters.
#[derive(Clone, Copy, Debug)]
pub struct Credit {
    /// Engine port index the packets came in on.
    pub in_idx: usize,
    /// Engine port index they went out of, or the reason they were
    /// dropped.
    pub out: Result<usize, DropReason>,
    pub packets: u64,
    pub bytes: u64,
}

struct Installed {
    gen: u64,
    action: FcAction,
    attribution: Attribution,
    in_idx: usize,
    out: Result<usize, DropReason>,
    /// Hits already credited.
    packets: u64,
    bytes: u64,
    last_active: Instant,
}

/// The packet thread's side of the XDP flow cache.
pub struct XdpCache {
    maps: Arc<CacheMaps>,
    /// The generation read at the start of the current round.
    round_gen: u64,
    mirror: HashMap<FcKey, Installed, ahash::RandomState>,
    last_sweep: Instant,
    /// Ports' credits waiting for the engine (filled by sweeps and by
    /// reinstalls, drained by [`XdpCache::take_credits`]).
    credits: Vec<Credit>,
    stats: XdpCacheStats,
}

impl XdpCache {
    pub fn new(maps: Arc<CacheMaps>) -> Self {
        XdpCache {
            round_gen: maps.generation().current(),
            mirror: HashMap::with_capacity_and_hasher(
                (maps.capacity() as usize).min(1 << 16),
                ahash::RandomState::new(),
            ),
            maps,
            last_sweep: Instant::now(),
            credits: Vec::new(),
            stats: XdpCacheStats::default(),
        }
    }

    pub fn stats(&self) -> XdpCacheStats {
        self.stats
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

    /// Invalidates every entry (the pipeline changed).
    pub fn invalidate(&mut self) {
        self.round_gen = self.maps.generation().bump();
    }

    /// Installs `action` for frames with `key`, unless an identical entry
    /// of this generation is there already.
    pub fn install(
        &mut self,
        key: FcKey,
        action: FcAction,
        in_idx: usize,
        out: Result<usize, DropReason>,
        attribution: Attribution,
    ) {
        if self.maps.generation().is_broken() {
            return;
        }
        match self.mirror.get(&key) {
            Some(e) if e.gen == self.round_gen && e.action == action => return,
            Some(_) => {
                // Stale (an older generation, so no longer counting):
                // collect its last hits before the update zeroes them.
                if let Some(old) = self.mirror.remove(&key) {
                    self.collect(&key, &old);
                }
            }
            None if self.mirror.len() >= self.maps.capacity() as usize => {
                self.stats.full += 1;
                return;
            }
            None => {}
        }
        let value = entry::value(action, self.round_gen);
        if let Err(e) = self.maps.insert(&key, &value) {
            if self.stats.install_errors == 0 {
                tracing::warn!(error = %e, "cannot install an XDP flow cache entry");
            }
            self.stats.install_errors += 1;
            return;
        }
        self.stats.installs += 1;
        self.mirror.insert(
            key,
            Installed {
                gen: self.round_gen,
                action,
                attribution,
                in_idx,
                out,
                packets: 0,
                bytes: 0,
                last_active: Instant::now(),
            },
        );
    }

    /// Credits an entry's uncredited hits; returns whether there were any.
    fn collect(&mut self, key: &FcKey, e: &Installed) -> bool {
        let Some((packets, bytes)) = self.maps.read(key) else {
            return false;
        };
        let (dp, db) = (
            packets.saturating_sub(e.packets),
            bytes.saturating_sub(e.bytes),
        );
        if dp == 0 {
            return false;
        }
        e.attribution.credit(dp, db);
        self.stats.hit_packets += dp;
        self.credits.push(Credit {
            in_idx: e.in_idx,
            out: e.out,
            packets: dp,
            bytes: db,
        });
        true
    }

    /// Every [`SWEEP_INTERVAL`] (or at once with `force`): collects hit
    /// counts and removes stale and idle entries.
    pub fn sweep(&mut self, now: Instant, force: bool) {
        if !force && now.duration_since(self.last_sweep) < SWEEP_INTERVAL {
            return;
        }
        self.last_sweep = now;
        let current = self.maps.generation().current();
        let broken = self.maps.generation().is_broken();
        let mut mirror = std::mem::take(&mut self.mirror);
        mirror.retain(|key, e| {
            if let Some((packets, bytes)) = self.maps.read(key) {
                let (dp, db) = (
                    packets.saturating_sub(e.packets),
                    bytes.saturating_sub(e.bytes),
                );
                if dp > 0 {
                    e.attribution.credit(dp, db);
                    self.stats.hit_packets += dp;
                    self.credits.push(Credit {
                        in_idx: e.in_idx,
                        out: e.out,
                        packets: dp,
                        bytes: db,
                    });
                    e.packets = packets;
                    e.bytes = bytes;
                    e.last_active = now;
                }
            }
            let stale = e.gen != current || broken;
            let idle = now.duration_since(e.last_active) >= IDLE_EXPIRY;
            if stale || idle {
                self.maps.delete(key);
                if stale {
                    self.stats.invalidated += 1;
                } else {
                    self.stats.expired += 1;
                }
                return false;
            }
            true
        });
        self.mirror = mirror;
    }

    /// Hits collected since the last call, for the engine to add to its
    /// port and drop counters.
    pub fn take_credits(&mut self) -> std::vec::Drain<'_, Credit> {
        self.credits.drain(..)
    }
}

impl Drop for XdpCache {
    fn drop(&mut self) {
        for key in self.mirror.keys() {
            self.maps.delete(key);
        }
    }
}
