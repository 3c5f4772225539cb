//! IPv4 and IPv6 fragments through `ct()`.
//!
//! # Design
//!
//! OVS's kernel datapath hands `ct()` to the kernel's conntrack, which
//! reassembles a fragmented datagram first: the connection is tracked
//! once for the whole datagram, and the pipeline after `ct(table=N)` sees
//! it whole (ports present, `ip_frag=no`). xbr gives the same results
//! without holding frames: a datagram's first fragment (offset 0) carries
//! the L4 header, so it is tracked like an unfragmented packet, and its
//! outcome is remembered here under the datagram's identity (zone,
//! protocol, addresses, IP identification); the later fragments take that
//! outcome, the NAT address change it applied, and its L4 ports (for the
//! pipeline's key), instead of being tracked themselves.
//!
//! The difference from reassembly: a later fragment that arrives before
//! its first fragment (reordered on the way) finds no record and is
//! `+inv`, where the kernel would have waited for the rest. On the paths
//! xbr serves (veths, one VXLAN hop) fragments arrive in order.
//!
//! Stores: at most [`MAX_DATAGRAMS`] records, each for [`FRAG_TIMEOUT_MS`]
//! (the kernel's IPv4 reassembly timeout is 30 s, OVS userspace's 15 s;
//! xbr uses the latter). Two outcomes per record, for `ct()` with and
//! without `nat`: a pipeline runs both kinds on one packet (the agent's
//! `ct(table=0)`, then `ct(nat,table=70)`), and each later fragment must
//! get, at each step, what its first fragment got at the same step.
//!
//! Fair sharing between ports: one pod's fragment flood must not take the
//! whole table from the others (issue 32). A new datagram from port P is
//! remembered only while P holds fewer than its share,
//! `max(MIN_SHARE, MAX_DATAGRAMS / (active + 1))` records, `active` being
//! the ports holding records (P included): a port alone may take half the
//! table, never all of it, so the next port always finds room, and the
//! shares shrink as more ports use the table. Refusals are counted per
//! port ([`Fragments::share_hits`], `xbr stats`); a refused first fragment
//! still goes on, only its later fragments are `+inv` (as with a full
//! table). The guarantee is exact against one flooding port; with several
//! flooding at once, records admitted under a larger share leave within
//! one timeout and the shares settle to `1/(active + 1)`. Frames from
//! other nodes all enter by the VXLAN port and share its share.
//!
//! Cost and concurrency: one mutex over a small hash map and the per-port
//! counts (a map of the ports that hold records, and how many do), taken
//! only by fragments (never by unfragmented packets), for a lookup or an
//! insert and a probe of the port's count; no allocation once the maps
//! have grown to the table's size; a scan for expired records only once
//! one may have expired.
//!
//! [`Conntrack::execute_datagram`], the entry point for every packet, is
//! here too: it sends unfragmented packets straight on to the tracker.

use super::tuple::Addr;
use super::{state, Conntrack, CtOutcome, CtRequest};
use ahash::RandomState;
use flowtable::key::{Field, FlowKey};
use flowtable::matching::{ETH_TYPE_IPV6, IP_PROTO_ICMP, IP_PROTO_ICMPV6};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};
use std::sync::atomic::{AtomicU32, AtomicU64};
use xbr_packet::parse::{Layers, FRAG_LATER};

/// How long a first fragment's outcome waits for the rest (ms).
pub const FRAG_TIMEOUT_MS: u64 = 15_000;
/// Datagrams remembered at once; beyond, expired records are dropped
/// first and then new first fragments are not remembered (their later
/// fragments are `+inv`).
pub const MAX_DATAGRAMS: usize = 4096;
/// The smallest share of the table a port may fill, however many ports
/// use it.
pub const MIN_SHARE: usize = 64;

/// A fragmented datagram's identity (RFC 791 and RFC 8200: source,
/// destination, protocol, identification; IPv4's identification is 16
/// bits, IPv6's 32), per conntrack zone.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct DatagramId {
    pub zone: u16,
    pub proto: u8,
    pub v6: bool,
    pub src: Addr,
    pub dst: Addr,
    pub id: u32,
}

/// What a first fragment got from one kind of `ct()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FragOutcome {
    pub outcome: CtOutcome,
    /// Source and destination address after NAT, when NAT changed them.
    pub nat_addrs: Option<(Addr, Addr)>,
}

#[derive(Clone, Copy, Debug)]
struct Record {
    /// Indexed by "the `ct()` had `nat`".
    outcomes: [Option<FragOutcome>; 2],
    /// The first fragment's L4 words the flow key holds (TCP/UDP/SCTP
    /// ports, ICMP type and code).
    l4: (u16, u16),
    expires: u64,
    /// The port its first fragment came from.
    port: u32,
}

/// One port's use of the table.
#[derive(Clone, Copy, Debug, Default)]
struct PortUse {
    held: usize,
    /// New datagrams not remembered because the port held its share.
    share_hits: u64,
}

#[derive(Default)]
struct Inner {
    map: HashMap<DatagramId, Record, RandomState>,
    /// By port: records held and refusals (entries stay while a port has
    /// refusals to report, so at most one per port ever seen).
    ports: HashMap<u32, PortUse, RandomState>,
    /// Ports holding at least one record.
    active: usize,
    /// New datagrams not remembered because the table was full.
    table_full: u64,
    /// No record expires before this (a lower bound): a flood that finds
    /// its share or the table full scans for expired records only once
    /// some may be.
    earliest: u64,
}

impl Inner {
    /// Drops the records `keep` refuses, keeping the ports' counts.
    fn retain(&mut self, mut keep: impl FnMut(&Record) -> bool) {
        let ports = &mut self.ports;
        let active = &mut self.active;
        let mut earliest = u64::MAX;
        self.map.retain(|_, r| {
            let k = keep(r);
            if k {
                earliest = earliest.min(r.expires);
            } else if let Some(p) = ports.get_mut(&r.port) {
                p.held = p.held.saturating_sub(1);
                if p.held == 0 {
                    *active = active.saturating_sub(1);
                }
            }
            k
        });
        self.earliest = earliest;
    }

    /// Whether `port` may add a record under its share.
    fn under_share(&self, port: u32) -> bool {
        let held = self.ports.get(&port).map_or(0, |p| p.held);
        let others = self.active.saturating_sub(usize::from(held > 0));
        // This port, the others holding records, and room for one more.
        let share = (MAX_DATAGRAMS / (others + 2)).max(MIN_SHARE);
        held < share
    }
}

/// The first fragments' outcomes; see the module documentation.
#[derive(Default)]
pub struct Fragments {
    inner: Mutex<Inner>,
    /// The ports' refusals again, readable without `inner`'s lock: what
    /// the metrics read, so a scrape never holds a lock the packet
    /// threads take.
    refused: ShareRefusals,
}

/// Ports tracked by [`ShareRefusals`] (each that ever hit its share
/// takes one slot for the bridge's life; beyond, refusals count as
/// `overflow`).
const REFUSAL_SLOTS: usize = 1024;

/// Refusals per port in a fixed open-addressing table of atomics: a
/// slot is claimed once by a port (its number + 1; 0 is free) and then
/// only counted up. Written under `Fragments::inner` (one writer at a
/// time), read by anyone without a lock. 16 KiB per bridge.
struct ShareRefusals {
    slots: Box<[(AtomicU32, AtomicU64)]>,
    overflow: AtomicU64,
}

impl Default for ShareRefusals {
    fn default() -> Self {
        ShareRefusals {
            slots: (0..REFUSAL_SLOTS)
                .map(|_| (AtomicU32::new(0), AtomicU64::new(0)))
                .collect(),
            overflow: AtomicU64::new(0),
        }
    }
}

impl ShareRefusals {
    fn add(&self, port: u32) {
        let key = port.wrapping_add(1);
        let start = (port as usize).wrapping_mul(0x9e37_79b9) % REFUSAL_SLOTS;
        for i in 0..REFUSAL_SLOTS {
            let Some((k, n)) = self.slots.get((start + i) % REFUSAL_SLOTS) else {
                break;
            };
            let cur = k.load(Acquire);
            if cur == key || (cur == 0 && k.compare_exchange(0, key, AcqRel, Acquire).is_ok()) {
                n.fetch_add(1, Relaxed);
                return;
            }
        }
        self.overflow.fetch_add(1, Relaxed);
    }

    /// (port, refusals) of every port with a slot, by port; and the
    /// refusals of ports that found no slot.
    fn read(&self) -> (Vec<(u32, u64)>, u64) {
        let mut out: Vec<(u32, u64)> = self
            .slots
            .iter()
            .filter_map(|(k, n)| {
                let key = k.load(Acquire);
                (key != 0).then(|| (key.wrapping_sub(1), n.load(Relaxed)))
            })
            .collect();
        out.sort_unstable();
        (out, self.overflow.load(Relaxed))
    }
}

impl Fragments {
    /// Remembers what a first fragment from `port` got from a `ct()`
    /// (with `nat` or not); returns `false` when the port holds its share
    /// or the table is full of live records.
    pub fn remember(
        &self,
        id: DatagramId,
        port: u32,
        with_nat: bool,
        got: FragOutcome,
        l4: (u16, u16),
        now: u64,
    ) -> bool {
        let mut inner = self.inner.lock();
        if !inner.map.contains_key(&id) {
            let full = inner.map.len() >= MAX_DATAGRAMS;
            if (full || !inner.under_share(port)) && inner.earliest <= now {
                inner.retain(|r| r.expires > now);
            }
            if !inner.under_share(port) {
                inner.ports.entry(port).or_default().share_hits += 1;
                self.refused.add(port);
                return false;
            }
            if inner.map.len() >= MAX_DATAGRAMS {
                inner.table_full += 1;
                return false;
            }
            let u = inner.ports.entry(port).or_default();
            u.held += 1;
            if u.held == 1 {
                inner.active += 1;
            }
        }
        let r = inner.map.entry(id).or_insert(Record {
            outcomes: [None; 2],
            l4,
            expires: 0,
            port,
        });
        r.outcomes[usize::from(with_nat)] = Some(got);
        r.l4 = l4;
        r.expires = now.saturating_add(FRAG_TIMEOUT_MS);
        let expires = r.expires;
        inner.earliest = inner.earliest.min(expires);
        true
    }

    /// What the first fragment of `id` got from the same kind of `ct()`,
    /// and its L4 words; `None` if it was never seen or has expired.
    pub fn lookup(
        &self,
        id: &DatagramId,
        with_nat: bool,
        now: u64,
    ) -> Option<(FragOutcome, (u16, u16))> {
        let inner = self.inner.lock();
        let r = inner.map.get(id).filter(|r| r.expires > now)?;
        Some((r.outcomes[usize::from(with_nat)]?, r.l4))
    }

    /// The L4 words of a datagram whose first fragment was seen.
    pub fn l4_words(&self, id: &DatagramId, now: u64) -> Option<(u16, u16)> {
        let inner = self.inner.lock();
        inner.map.get(id).filter(|r| r.expires > now).map(|r| r.l4)
    }

    /// Drops expired records; returns how many.
    pub fn sweep(&self, now: u64) -> usize {
        let mut inner = self.inner.lock();
        let before = inner.map.len();
        inner.retain(|r| r.expires > now);
        // Ports that hold nothing and have nothing to report go.
        inner.ports.retain(|_, u| u.held > 0 || u.share_hits > 0);
        before - inner.map.len()
    }

    /// Datagrams remembered.
    pub fn len(&self) -> usize {
        self.inner.lock().map.len()
    }

    /// Per port, the records it holds and the new datagrams refused
    /// because it held its share, by port number; and the refusals
    /// because the whole table was full.
    pub fn share_hits(&self) -> (Vec<(u32, usize, u64)>, u64) {
        let inner = self.inner.lock();
        let mut ports: Vec<(u32, usize, u64)> = inner
            .ports
            .iter()
            .map(|(&p, u)| (p, u.held, u.share_hits))
            .collect();
        ports.sort_unstable();
        (ports, inner.table_full)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Per port, the new datagrams refused because it held its share,
    /// read without taking the table's lock (metrics); and the refusals
    /// of ports beyond [`REFUSAL_SLOTS`].
    pub fn share_refusals(&self) -> (Vec<(u32, u64)>, u64) {
        self.refused.read()
    }

    /// Forgets every record (the refusal counts stay).
    pub fn clear(&self) {
        let mut inner = self.inner.lock();
        inner.map.clear();
        for u in inner.ports.values_mut() {
            u.held = 0;
        }
        inner.active = 0;
    }
}

impl Conntrack {
    /// [`execute`](Self::execute), and for a fragment that was tracked
    /// (as part of its datagram) the datagram's L4 words the pipeline's
    /// key should hold after `ct()`, as if it had been reassembled: TCP,
    /// UDP or SCTP ports, or ICMP type and code.
    pub fn execute_datagram(
        &self,
        frame: &mut [u8],
        layers: Layers,
        key: &FlowKey,
        req: &CtRequest,
        now: u64,
    ) -> (CtOutcome, Option<(u16, u16)>) {
        let eth_type = key.get(Field::EthType) as u16;
        let v6 = eth_type == flowtable::matching::ETH_TYPE_IPV6;
        if eth_type != flowtable::matching::ETH_TYPE_IPV4 && !v6 {
            self.stats.not_ip.fetch_add(1, Relaxed);
            return (self.invalid(req.zone), None);
        }
        let frag = key.get(Field::IpFrag);
        if frag == 0 {
            return (self.execute_whole(frame, layers, key, req, now), None);
        }
        let Some(id) = datagram_id(frame, layers, key, req.zone) else {
            return (self.invalid(req.zone), None);
        };
        let with_nat = req.nat.is_some();
        if frag & FRAG_LATER != 0 {
            return match self.frags.lookup(&id, with_nat, now) {
                Some((first, l4)) => {
                    if let (true, Some((src, dst))) = (with_nat, first.nat_addrs) {
                        // A later fragment has no L4 checksum to keep.
                        if src != id.src {
                            super::nat::set_addr(frame, layers, true, src, v6);
                        }
                        if dst != id.dst {
                            super::nat::set_addr(frame, layers, false, dst, v6);
                        }
                    }
                    self.stats.fragments.fetch_add(1, Relaxed);
                    (first.outcome, Some(l4))
                }
                None => {
                    self.stats.orphan_fragments.fetch_add(1, Relaxed);
                    (self.invalid(req.zone), None)
                }
            };
        }
        let outcome = self.execute_whole(frame, layers, key, req, now);
        if outcome.state & state::INV != 0 {
            return (outcome, None);
        }
        let l4 = first_fragment_l4(key);
        let after = (
            addr_at(frame, layers, true, v6),
            addr_at(frame, layers, false, v6),
        );
        let nat_addrs = match after {
            (Some(src), Some(dst)) if (src, dst) != (id.src, id.dst) => Some((src, dst)),
            _ => None,
        };
        let got = FragOutcome { outcome, nat_addrs };
        // A full table only costs the later fragments (`+inv`).
        self.frags.remember(id, req.in_port, with_nat, got, l4, now);
        (outcome, Some(l4))
    }
}

/// The identity of the datagram a fragment belongs to (addresses as it
/// arrived, before any NAT of this `ct()`).
fn datagram_id(frame: &[u8], layers: Layers, key: &FlowKey, zone: u16) -> Option<DatagramId> {
    if layers.l3 == 0 {
        return None;
    }
    let l3 = usize::from(layers.l3);
    let proto = key.get(Field::IpProto) as u8;
    if key.get(Field::EthType) == u64::from(flowtable::matching::ETH_TYPE_IPV6) {
        return Some(DatagramId {
            zone,
            proto,
            v6: true,
            src: Addr::v6(key.get128(Field::Ipv6SrcLow)),
            dst: Addr::v6(key.get128(Field::Ipv6DstLow)),
            id: xbr_packet::parse::ipv6::fragment_id(frame, l3)?,
        });
    }
    let id = u16::from_be_bytes([*frame.get(l3 + 4)?, *frame.get(l3 + 5)?]);
    Some(DatagramId {
        zone,
        proto,
        v6: false,
        src: Addr::v4(key.get(Field::IpSrc) as u32),
        dst: Addr::v4(key.get(Field::IpDst) as u32),
        id: u32::from(id),
    })
}

/// The L4 words of a first fragment's key (see `execute_datagram`).
fn first_fragment_l4(key: &FlowKey) -> (u16, u16) {
    let proto = key.get(Field::IpProto) as u8;
    if proto == IP_PROTO_ICMP && key.get(Field::EthType) != u64::from(ETH_TYPE_IPV6) {
        (
            key.get(Field::IcmpType) as u16,
            key.get(Field::IcmpCode) as u16,
        )
    } else if proto == IP_PROTO_ICMPV6 {
        (
            key.get(Field::Icmpv6Type) as u16,
            key.get(Field::Icmpv6Code) as u16,
        )
    } else {
        (key.get(Field::TpSrc) as u16, key.get(Field::TpDst) as u16)
    }
}

/// The packet's source (`src`) or destination address as it is now.
fn addr_at(frame: &[u8], layers: Layers, src: bool, v6: bool) -> Option<Addr> {
    let l3 = usize::from(layers.l3);
    if v6 {
        let at = l3 + if src { 8 } else { 24 };
        let b: [u8; 16] = frame.get(at..at + 16)?.try_into().ok()?;
        Some(Addr::v6(u128::from_be_bytes(b)))
    } else {
        let at = l3 + if src { 12 } else { 16 };
        let b: [u8; 4] = frame.get(at..at + 4)?.try_into().ok()?;
        Some(Addr::v4(u32::from_be_bytes(b)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u16) -> DatagramId {
        DatagramId {
            zone: 0,
            proto: 17,
            v6: false,
            src: Addr::v4(1),
            dst: Addr::v4(2),
            id: u32::from(n),
        }
    }

    fn got(state: u32) -> FragOutcome {
        FragOutcome {
            outcome: CtOutcome {
                state,
                zone: 0,
                mark: 0,
                label: 0,
            },
            nat_addrs: None,
        }
    }

    #[test]
    fn outcomes_are_kept_per_kind_of_ct_and_expire() {
        let f = Fragments::default();
        assert!(f.remember(id(1), 1, false, got(0x21), (5, 6), 0));
        assert_eq!(f.lookup(&id(1), false, 10), Some((got(0x21), (5, 6))));
        assert_eq!(f.lookup(&id(1), true, 10), None);
        assert!(f.remember(id(1), 1, true, got(0x2a), (5, 6), 20));
        assert_eq!(f.lookup(&id(1), true, 30).map(|g| g.0), Some(got(0x2a)));
        assert_eq!(f.lookup(&id(2), false, 30), None);
        assert_eq!(f.lookup(&id(1), false, 20 + FRAG_TIMEOUT_MS), None);
        assert_eq!(f.sweep(20 + FRAG_TIMEOUT_MS), 1);
        assert!(f.is_empty());
    }

    #[test]
    fn a_port_alone_takes_half_the_table_and_the_next_finds_room() {
        let f = Fragments::default();
        let half = MAX_DATAGRAMS / 2;
        let taken = (0..MAX_DATAGRAMS as u16)
            .filter(|&n| f.remember(id(n), 1, false, got(0x21), (0, 0), 0))
            .count();
        assert_eq!(taken, half);
        // An existing datagram may still be updated.
        assert!(f.remember(id(0), 1, true, got(0x21), (0, 0), 1));
        // Another port finds room while the first floods on; with two
        // ports holding records, a third would get a third.
        for n in 0..100u16 {
            let other = DatagramId {
                src: Addr::v4(9),
                ..id(n)
            };
            assert!(f.remember(other, 2, false, got(0x21), (0, 0), 1));
        }
        assert!(!f.remember(id(u16::MAX), 1, false, got(0x21), (0, 0), 1));
        let (ports, full) = f.share_hits();
        assert_eq!(
            ports,
            vec![(1, half, (MAX_DATAGRAMS - half + 1) as u64), (2, 100, 0)]
        );
        assert_eq!(full, 0);
        // The lock-free copy the metrics read says the same.
        assert_eq!(
            f.share_refusals(),
            (vec![(1, (MAX_DATAGRAMS - half + 1) as u64)], 0)
        );
        // Once its records expire, the first port has room again.
        assert!(f.remember(id(u16::MAX), 1, false, got(0x21), (0, 0), FRAG_TIMEOUT_MS));
        // id(0) (updated at 1), port 2's and the new one.
        assert_eq!(f.len(), 102);
    }

    #[test]
    fn many_ports_share_down_to_the_minimum_then_the_table_is_full() {
        let f = Fragments::default();
        let ports = (MAX_DATAGRAMS / MIN_SHARE) as u32;
        for port in 0..=ports {
            for n in 0..MIN_SHARE as u16 {
                let d = DatagramId {
                    src: Addr::v4(port),
                    ..id(n)
                };
                assert_eq!(
                    f.remember(d, port, false, got(0x21), (0, 0), 0),
                    port < ports,
                    "port {port}"
                );
            }
        }
        assert_eq!(f.len(), MAX_DATAGRAMS);
        assert_eq!(f.share_hits().1, MIN_SHARE as u64);
    }

    #[test]
    fn refusal_slots_are_claimed_once_per_port_and_overflow_is_counted() {
        let r = ShareRefusals::default();
        for port in 0..REFUSAL_SLOTS as u32 {
            r.add(port);
        }
        r.add(7);
        r.add(u32::MAX - 1);
        let (ports, overflow) = r.read();
        assert_eq!(ports.len(), REFUSAL_SLOTS);
        assert_eq!(ports.get(7), Some(&(7, 2)));
        assert_eq!(overflow, 1);
    }
}
