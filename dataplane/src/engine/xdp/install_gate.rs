//! Which XDP cache installs a packet thread makes while a port floods it
//! with distinct flows.
//!
//! # Design
//!
//! Normally a translation the kernel can carry out is installed at the
//! flow's first frame, as OVS installs a datapath flow at its first
//! upcall. A pod sending frames that are each a flow of their own
//! (spoofed sources, every port number: `bench::hostile`) would then have
//! every frame installed: a BPF map update and a record in xbr's memory
//! (about 1.5 KiB with the agent's flows, docs/xdp-cache.md) for an entry
//! that never hits, and the cache filled for everyone until the entries
//! idle out.
//!
//! So each port has a budget of [`BUDGET`] first-frame installs a second.
//! Past it, until the second ends, a flow of that port is installed at
//! its second frame in that time: the first only leaves its key's
//! fingerprint in a small direct-mapped table ([`SEEN`] slots). A flow of
//! one frame never comes back and costs its translation alone; a real
//! flow of the same port is installed one frame later than it would
//! have been. Each skipped install is counted (`deferred` in `xbr stats`'
//! XDP flow cache section).
//!
//! Stores: per port slot (the OpenFlow port number modulo [`SLOTS`]: ports
//! that share a slot share its budget) the second and the installs in
//! it; the fingerprints (4 bytes each, 64 KiB in all), shared by the ports
//! over their budget. Two keys in one slot forget each other (the flow is
//! installed a frame later still); a fingerprint collision lets a flow of
//! one frame in early (1 in 2^32). Both are harmless.
//!
//! Costs: per install a slot update; past the budget one hash of the key
//! and one table access. No allocation after creation, no lock: each
//! packet thread has its own.

use crate::fastpath::cache::FcKey;

/// First-frame installs per port a second (the flood of distinct flows
/// `hostilebench` sends is 100,000 a second; a pod opening connections
/// installs a few each).
pub(crate) const BUDGET: u32 = 4096;
/// Port slots with their own budget.
const SLOTS: usize = 256;
/// Fingerprints of first frames seen over the budget (a power of two).
const SEEN: usize = 16_384;

/// See the module documentation.
pub(crate) struct InstallGate {
    /// Per port slot: the second the count is for, and the count.
    ports: [(u64, u32); SLOTS],
    seen: Box<[u32]>,
    hasher: ahash::RandomState,
    /// Installs skipped: first frames of a port over its budget.
    pub(crate) deferred: u64,
}

impl Default for InstallGate {
    fn default() -> Self {
        InstallGate {
            ports: [(0, 0); SLOTS],
            seen: vec![0; SEEN].into_boxed_slice(),
            hasher: ahash::RandomState::new(),
            deferred: 0,
        }
    }
}

impl InstallGate {
    /// Whether the frame with key `key`, received on `in_port` at second
    /// `now_secs`, may install its translation now.
    pub(crate) fn admit(&mut self, in_port: u32, key: &FcKey, now_secs: u64) -> bool {
        let Some((second, n)) = self.ports.get_mut(in_port as usize % SLOTS) else {
            return true;
        };
        if *second != now_secs {
            *second = now_secs;
            *n = 0;
        }
        if *n < BUDGET {
            *n += 1;
            return true;
        }
        let h = self.hasher.hash_one(key);
        // Never 0, the empty slot's value.
        let fingerprint = (h >> 32) as u32 | 1;
        let Some(slot) = self.seen.get_mut(h as usize & (SEEN - 1)) else {
            return true;
        };
        if *slot == fingerprint {
            *slot = 0;
            return true;
        }
        *slot = fingerprint;
        self.deferred += 1;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u32) -> FcKey {
        let mut k: FcKey = [0; crate::fastpath::cache::entry::KEY_SIZE];
        k[..4].copy_from_slice(&i.to_be_bytes());
        k
    }

    #[test]
    fn within_the_budget_every_first_frame_installs() {
        let mut g = InstallGate::default();
        for i in 0..BUDGET {
            assert!(g.admit(1, &key(i), 7));
        }
        // A new second, a new budget.
        for i in 0..BUDGET {
            assert!(g.admit(1, &key(i), 8));
        }
        assert_eq!(g.deferred, 0);
    }

    #[test]
    fn over_the_budget_a_flow_installs_at_its_second_frame_and_others_keep_theirs() {
        let mut g = InstallGate::default();
        for i in 0..BUDGET {
            assert!(g.admit(1, &key(i), 7));
        }
        // Port 1 floods distinct flows: none installs.
        let flood = 10_000u32;
        let admitted = (0..flood)
            .filter(|i| g.admit(1, &key(1_000_000 + i), 7))
            .count();
        assert!(admitted <= 2, "{admitted} of a flood of distinct flows");
        assert!(g.deferred >= u64::from(flood) - 2);
        // A real flow of port 1: its second frame installs.
        assert!(!g.admit(1, &key(42), 7));
        assert!(g.admit(1, &key(42), 7));
        // Port 2 has its own budget.
        assert!(g.admit(2, &key(5), 7));
    }
}
