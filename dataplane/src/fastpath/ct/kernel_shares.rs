//! The ports' shares of the kernel's ring of new-connection reports
//! (`kernel_new.rs`).
//!
//! Why (issue 32): a pod opening new connections faster than the packet
//! thread reads their reports would fill the ring for every port, and the program drops new connections' frames while
//! it is full. `ct_ports` (an array mapped here too, [`PortShares`])
//! counts per ingress port (ifindex modulo [`PORT_BUCKETS`]: two ports
//! share a bucket, and a share, only if their ifindexes differ by a
//! multiple of 1,024) the reports not read yet, and how many ports hold some. The program reports a port's new
//! connection only while the port holds fewer than
//! `max(64, reports the ring holds / (other ports holding + 2))`, the
//! rule of the fragment table's and the upcall queue's shares
//! (docs/fair-sharing.md): alone, a port takes half the ring, and the
//! next port always finds room. A frame over its port's share goes to the
//! packet thread (which takes at most a batch of each port per round) and
//! is counted for the port: `xbr stats` lists the ports that hit their
//! share, and `xbr_port_share_refused_total{resource="ct_new_ring"}`.
//! The program adds to a port's count before it submits a report, and
//! this side takes it back when it reads one, with fetching atomics: the
//! 0->1 and 1->0 transitions each count a holding port up or down exactly
//! once, so the count of holders never drifts.
//!
//! The map is not pinned (as the ring): a new process loads its program
//! with its own, and the pinned maps' layout is unchanged.
//!
//! Cost: in the program, three lookups in one array, a division and, per
//! report, one or two atomic adds; here, one or two atomic updates per
//! report read. `xbr stats` scans the 1,024 buckets (8 KiB).

use crate::fastpath::handles::MappedCounters;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// `XBR_CT_PORT_BUCKETS`: ingress ports are counted by ifindex modulo
/// this.
pub const PORT_BUCKETS: usize = 1024;
/// `XBR_CT_PORT_FLOOR`: the smallest share.
pub const PORT_FLOOR: u64 = 64;
/// `ct_ports`' counters: held per bucket, refused per bucket, holders.
pub const PORT_COUNTERS: usize = 2 * PORT_BUCKETS + 1;
const HOLDERS: usize = 2 * PORT_BUCKETS;

/// The ports' shares of the ring of reports, shared with the kernel (see
/// the module documentation).
#[derive(Debug)]
pub struct PortShares {
    map: MappedCounters,
    ring_reports: u64,
}

/// One port's use of the ring (`xbr stats`, metrics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortShare {
    /// The bucket: ingress ifindex modulo [`PORT_BUCKETS`].
    pub bucket: u32,
    /// Reports not read yet.
    pub held: u64,
    /// Frames sent to the packet thread because the port held its share.
    pub refused: u64,
}

impl PortShares {
    pub(crate) fn new(map: MappedCounters, ring_reports: u64) -> PortShares {
        PortShares { map, ring_reports }
    }

    /// Reports the ring holds.
    pub fn ring_reports(&self) -> u64 {
        self.ring_reports
    }

    fn counter(&self, i: usize) -> &AtomicU64 {
        &self.map.counters()[i]
    }

    /// The bucket of ingress device `ifindex`.
    pub fn bucket(ifindex: u32) -> u32 {
        ifindex & (PORT_BUCKETS as u32 - 1)
    }

    /// A report of `ifindex` was read: its count taken back (never below
    /// zero), and the holders' if it was the port's last.
    pub(crate) fn release(&self, ifindex: u32) {
        let held = self.counter(Self::bucket(ifindex) as usize);
        if let Ok(1) = held.fetch_update(Relaxed, Relaxed, |v| v.checked_sub(1)) {
            let _ = self
                .counter(HOLDERS)
                .fetch_update(Relaxed, Relaxed, |v| v.checked_sub(1));
        }
    }

    /// Ports holding reports now.
    pub fn holders(&self) -> u64 {
        self.counter(HOLDERS).load(Relaxed)
    }

    /// The share of `ifindex`'s port now: the program's rule.
    pub fn share(&self, ifindex: u32) -> u64 {
        let held = self.counter(Self::bucket(ifindex) as usize).load(Relaxed);
        let others = self.holders().saturating_sub(u64::from(held > 0));
        (self.ring_reports / (others + 2)).max(PORT_FLOOR)
    }

    /// The buckets that hold reports or had frames refused.
    pub fn used(&self) -> Vec<PortShare> {
        (0..PORT_BUCKETS)
            .map(|b| PortShare {
                bucket: b as u32,
                held: self.counter(b).load(Relaxed),
                refused: self.counter(PORT_BUCKETS + b).load(Relaxed),
            })
            .filter(|s| s.held > 0 || s.refused > 0)
            .collect()
    }

    /// The buckets whose ports hit their share, named for the ports of
    /// `names` whose ifindexes fall in them (`a/b` if several, `ifindex
    /// modulo 1024 = B` if none): `xbr stats` and the metrics.
    pub fn hits<'a>(&self, names: impl Iterator<Item = &'a str>) -> Vec<(String, PortShare)> {
        let hit: Vec<PortShare> = self.used().into_iter().filter(|s| s.refused > 0).collect();
        if hit.is_empty() {
            return Vec::new();
        }
        let named: Vec<(u32, &str)> = names
            .filter_map(|n| {
                let i = nix::net::if_::if_nametoindex(n).ok()?;
                Some((Self::bucket(i), n))
            })
            .collect();
        hit.into_iter()
            .map(|s| {
                let of: Vec<&str> = named
                    .iter()
                    .filter(|(b, _)| *b == s.bucket)
                    .map(|(_, n)| *n)
                    .collect();
                let name = if of.is_empty() {
                    format!("ifindex modulo {PORT_BUCKETS} = {}", s.bucket)
                } else {
                    of.join("/")
                };
                (name, s)
            })
            .collect()
    }

    /// The counter array itself (tests: another port's reports stand in
    /// for it by adding to its bucket and the holders).
    pub fn counters(&self) -> &[AtomicU64] {
        self.map.counters()
    }
}
