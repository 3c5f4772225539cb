//! The slots that tell the XDP program whether a UDP/IPv4 tuple has a
//! connection (`ct_slots`, an array of counters mapped into this process;
//! the design is in `kernel_new.rs`): each connection counts in the slot
//! of each of its tuples, taken in its canonical direction ([`ct_key`]).
//!
//! The table updates the counts under its shard locks when it stores or
//! removes a connection ([`SlotCounts::conn`]): one or two atomic adds on
//! shared memory, no syscall. A leaf under the table and the kernel link:
//! it knows tuples and the mapped counters, nothing else.

use crate::conntrack::tuple::Tuple;
use crate::fastpath::handles::MappedCounters;
use flowtable::matching::IP_PROTO_UDP;
use std::sync::atomic::Ordering::Relaxed;

/// `struct xbr_ct_key`: zone (native order), protocol, pad, addresses
/// and ports (network order).
pub type CtKey = [u8; 16];

/// The key of tuple `t` and of its reverse in the kernel's map (the
/// canonical direction: the lower address, then the lower port, as the
/// source; the XDP program orders them alike), if the kernel creates
/// connections of its kind (UDP over IPv4).
pub fn ct_key(t: &Tuple) -> Option<CtKey> {
    if t.v6 || t.proto != IP_PROTO_UDP {
        return None;
    }
    let (src, dst) = (t.src.0[0], t.dst.0[0]);
    let (a, b, pa, pb) = if (src, t.sport) > (dst, t.dport) {
        (dst, src, t.dport, t.sport)
    } else {
        (src, dst, t.sport, t.dport)
    };
    let mut k = [0u8; 16];
    k[0..2].copy_from_slice(&t.zone.to_ne_bytes());
    k[2] = t.proto;
    k[4..8].copy_from_slice(&a.to_be_bytes());
    k[8..12].copy_from_slice(&b.to_be_bytes());
    k[12..14].copy_from_slice(&pa.to_be_bytes());
    k[14..16].copy_from_slice(&pb.to_be_bytes());
    Some(k)
}

/// splitmix64's finalizer: every input bit reaches every output bit (a
/// bare multiply leaves the low bits, the ones the mask keeps, to the
/// low input bits).
fn mix64(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A canonical key's slot before the mask (bpf/xbr_xdp.c's
/// `xbr_ct_slot`, which must compute the same).
fn slot_hash(k: &CtKey, seed: u64) -> u64 {
    let be32 = |i: usize| u64::from(u32::from_be_bytes([k[i], k[i + 1], k[i + 2], k[i + 3]]));
    let be16 = |i: usize| u64::from(u16::from_be_bytes([k[i], k[i + 1]]));
    let zone = u64::from(u16::from_ne_bytes([k[0], k[1]]));
    let h = mix64(seed ^ (be32(4) << 32 | be32(8)));
    mix64(h ^ (be16(12) << 48 | be16(14) << 32 | zone << 8 | u64::from(k[2])))
}

/// The slot counters, shared with the kernel (see the module
/// documentation).
#[derive(Debug)]
pub struct SlotCounts {
    map: MappedCounters,
    seed: u64,
    mask: u64,
}

impl SlotCounts {
    /// The slots in `map` (a power of two of them), hashed with `seed`.
    pub(crate) fn new(map: MappedCounters, seed: u64, n_slots: usize) -> SlotCounts {
        SlotCounts {
            map,
            seed,
            mask: (n_slots.max(1) - 1) as u64,
        }
    }

    fn slot(&self, k: &CtKey) -> Option<&std::sync::atomic::AtomicU64> {
        self.map
            .counters()
            .get((slot_hash(k, self.seed) & self.mask) as usize)
    }

    /// The hash seed and the slot mask, as the kernel's config holds them.
    pub(crate) fn seed_and_mask(&self) -> (u64, u64) {
        (self.seed, self.mask)
    }

    /// Counts (`add`) or uncounts a connection with tuples `orig` and
    /// `reply` (one key unless NAT made the reply another pair), if the
    /// kernel creates connections of its kind. Called with the tuples'
    /// shards locked.
    pub fn conn(&self, orig: &Tuple, reply: &Tuple, add: bool) {
        let (Some(a), b) = (ct_key(orig), ct_key(reply)) else {
            return;
        };
        for k in std::iter::once(a).chain(b.filter(|&b| b != a)) {
            if let Some(c) = self.slot(&k) {
                // SeqCst: the count is in memory before the table's locks
                // are released and any packet of the connection leaves.
                if add {
                    c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                } else {
                    c.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                }
            }
        }
    }

    /// The count of `t`'s slot (tests and diagnostics).
    pub fn count_of(&self, t: &Tuple) -> Option<u64> {
        let k = ct_key(t)?;
        Some(self.slot(&k)?.load(Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_spread_over_every_field() {
        // A thousand source ports (one client), a thousand addresses:
        // (nearly) a thousand slots each, of a million.
        let mask = (1u64 << 20) - 1;
        for vary in 0..3 {
            let mut slots: Vec<u64> = (0..1000u32)
                .map(|i| {
                    let t = match vary {
                        0 => Tuple::v4(0, IP_PROTO_UDP, 1, 2, 20000 + i as u16, 53),
                        1 => Tuple::v4(0, IP_PROTO_UDP, 0x0a80_0000 + i, 2, 20000, 53),
                        _ => Tuple::v4(i as u16, IP_PROTO_UDP, 1, 2, 20000, 53),
                    };
                    slot_hash(&ct_key(&t).unwrap(), 42) & mask
                })
                .collect();
            slots.sort_unstable();
            slots.dedup();
            assert!(slots.len() >= 990, "{vary}: {} slots", slots.len());
        }
    }
}
