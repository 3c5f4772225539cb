//! The NORMAL action: a MAC-learning switch, as OVS's `actions=NORMAL` and
//! its fail-open mode behave (without VLANs or bonds).
//!
//! # Design
//!
//! Stores: which port each recently seen source MAC address arrived on,
//! and when. [`MacTable`] is an open-addressing hash table of fixed
//! capacity, allocated once: learning never allocates, so the packet
//! thread can learn per packet. Lookups probe at most [`PROBES`] slots;
//! a MAC that finds none free and none stale is simply not learned (its
//! packets are flooded, which is correct, only slower), so a flood of
//! random source addresses cannot grow memory or evict the busy stations.
//!
//! Invariants: an entry older than the ageing time is treated as absent
//! and may be overwritten; a station that moves is relearned on its new
//! port at its first packet. Multicast/broadcast source addresses are
//! never learned.
//!
//! Cost: one hash and up to [`PROBES`] compares per learn or lookup; a
//! listing (`fdb/show`) walks every slot.
//! Concurrency: none; one table per packet thread, which lists and
//! empties it when the control plane asks (between rounds).

/// Slots probed per operation.
const PROBES: usize = 8;
/// OVS's default MAC ageing time.
pub const DEFAULT_AGEING_SECS: u64 = 300;

#[derive(Clone, Copy, Default)]
struct Slot {
    /// 48-bit MAC in the low bits; 0 marks a free slot (the all-zero MAC
    /// is not a valid station address and is never learned).
    mac: u64,
    port: u32,
    /// Seconds on the caller's clock when last seen.
    seen: u64,
}

pub struct MacTable {
    slots: Box<[Slot]>,
    mask: usize,
    ageing: u64,
}

/// Whether the first octet has the group (multicast/broadcast) bit.
pub fn is_group(mac: u64) -> bool {
    mac & (1 << 40) != 0
}

impl MacTable {
    /// A table of `capacity` slots (rounded up to a power of two, at least
    /// [`PROBES`]), forgetting stations silent for `ageing_secs`.
    pub fn new(capacity: usize, ageing_secs: u64) -> Self {
        let n = capacity.max(PROBES).next_power_of_two();
        MacTable {
            slots: vec![Slot::default(); n].into_boxed_slice(),
            mask: n - 1,
            ageing: ageing_secs,
        }
    }

    fn home(&self, mac: u64) -> usize {
        // Fibonacci hashing spreads consecutive MACs (one vendor's range).
        (mac.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize & self.mask
    }

    fn live(&self, s: &Slot, now: u64) -> bool {
        s.mac != 0 && now.saturating_sub(s.seen) < self.ageing
    }

    /// Records that `mac` was seen on `port` at `now` (seconds).
    pub fn learn(&mut self, mac: u64, port: u32, now: u64) {
        if mac == 0 || is_group(mac) {
            return;
        }
        let home = self.home(mac);
        let mut free = None;
        for i in 0..PROBES {
            let idx = (home + i) & self.mask;
            let Some(s) = self.slots.get(idx) else {
                return;
            };
            if s.mac == mac {
                free = Some(idx);
                break;
            }
            if free.is_none() && !self.live(s, now) {
                free = Some(idx);
            }
        }
        if let Some(s) = free.and_then(|idx| self.slots.get_mut(idx)) {
            *s = Slot {
                mac,
                port,
                seen: now,
            };
        }
    }

    /// The port `mac` was last seen on, if recently.
    pub fn lookup(&self, mac: u64, now: u64) -> Option<u32> {
        if mac == 0 || is_group(mac) {
            return None;
        }
        let home = self.home(mac);
        (0..PROBES)
            .filter_map(|i| self.slots.get((home + i) & self.mask))
            .find(|s| s.mac == mac)
            .filter(|s| self.live(s, now))
            .map(|s| s.port)
    }
}

/// A learned station, as `ovs-appctl fdb/show` lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Station {
    pub mac: u64,
    pub port: u32,
    /// Seconds since it was last seen.
    pub age: u64,
}

impl Station {
    /// Keeps, of a station listed several times (by several packet
    /// threads), the one seen last, and orders the list as
    /// [`MacTable::stations`] does.
    pub fn dedup_youngest(list: &mut Vec<Station>) {
        list.sort_by_key(|s| (s.mac, s.age));
        list.dedup_by_key(|s| s.mac);
        list.sort_by_key(|s| (std::cmp::Reverse(s.age), s.mac));
    }
}

impl MacTable {
    /// The stations not aged out at `now`, longest silent first (the
    /// order of OVS's LRU list).
    pub fn stations(&self, now: u64) -> Vec<Station> {
        let mut out: Vec<Station> = self
            .slots
            .iter()
            .filter(|s| self.live(s, now))
            .map(|s| Station {
                mac: s.mac,
                port: s.port,
                age: now.saturating_sub(s.seen),
            })
            .collect();
        out.sort_by_key(|s| (std::cmp::Reverse(s.age), s.mac));
        out
    }

    /// Forgets every station (`fdb/flush`).
    pub fn clear(&mut self) {
        self.slots.fill(Slot::default());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stations_are_listed_longest_silent_first_and_cleared() {
        let mut t = MacTable::new(64, 300);
        t.learn(A, 1, 10);
        t.learn(B, 2, 40);
        t.learn(0x0a58_0a80_0009, 3, 0);
        assert_eq!(
            t.stations(300),
            [
                Station {
                    mac: A,
                    port: 1,
                    age: 290
                },
                Station {
                    mac: B,
                    port: 2,
                    age: 260
                },
            ],
            "the third aged out"
        );
        t.clear();
        assert!(t.stations(300).is_empty());
        assert_eq!(t.lookup(A, 300), None);
    }

    #[test]
    fn stations_several_threads_learned_are_listed_once_as_last_seen() {
        let st = |mac, port, age| Station { mac, port, age };
        let mut all = vec![st(A, 1, 50), st(B, 2, 7), st(A, 3, 4), st(B, 2, 9)];
        Station::dedup_youngest(&mut all);
        assert_eq!(all, [st(B, 2, 7), st(A, 3, 4)]);
    }

    const A: u64 = 0x0a58_0a80_0002;
    const B: u64 = 0x0a58_0a80_0003;

    #[test]
    fn learns_moves_and_ages() {
        let mut t = MacTable::new(64, 300);
        assert_eq!(t.lookup(A, 0), None);
        t.learn(A, 1, 0);
        t.learn(B, 2, 0);
        assert_eq!((t.lookup(A, 10), t.lookup(B, 10)), (Some(1), Some(2)));
        t.learn(A, 3, 20);
        assert_eq!(t.lookup(A, 20), Some(3), "a station that moved");
        assert_eq!(t.lookup(B, 300), None, "aged out");
        assert_eq!(t.lookup(A, 300), Some(3));
    }

    #[test]
    fn group_and_zero_addresses_are_never_learned() {
        let mut t = MacTable::new(64, 300);
        t.learn(0xffff_ffff_ffff, 1, 0);
        t.learn(0x0100_5e00_0001, 1, 0);
        t.learn(0, 1, 0);
        assert_eq!(t.lookup(0xffff_ffff_ffff, 0), None);
        assert_eq!(t.lookup(0x0100_5e00_0001, 0), None);
        assert!(t.slots.iter().all(|s| s.mac == 0));
    }

    #[test]
    fn a_full_table_keeps_what_it_has() {
        let mut t = MacTable::new(8, 300);
        for m in 1..=100u64 {
            t.learn(m << 8, 1, 0);
        }
        let learned = t.slots.iter().filter(|s| s.mac != 0).count();
        assert_eq!(learned, 8);
        let first: Vec<u64> = t.slots.iter().map(|s| s.mac).collect();
        for m in 101..=200u64 {
            t.learn(m << 8, 2, 1);
        }
        let after: Vec<u64> = t.slots.iter().map(|s| s.mac).collect();
        assert_eq!(first, after, "live entries are not evicted");
    }
}
