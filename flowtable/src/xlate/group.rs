//! Group execution in translation: ALL, INDIRECT, FAST_FAILOVER (bucket
//! liveness as OVS decides it) and SELECT (a weighted choice by a hash of
//! the flow); each bucket runs as if on a clone of the packet.

use super::Ctx;
use crate::action::{port, Bucket};
use crate::flow_mod::{GroupType, SelectionKind, SelectionMethod};
use crate::group::Group;
use crate::key::{Field, FlowKey};
use crate::pipeline::Pipeline;
use crate::trace::Tracer;
use std::sync::Arc;

/// Fields a select group hashes to pick a bucket.
const HASH_FIELDS: [Field; 8] = [
    Field::EthSrc,
    Field::EthDst,
    Field::EthType,
    Field::IpSrc,
    Field::IpDst,
    Field::IpProto,
    Field::TpSrc,
    Field::TpDst,
];

/// A fixed, replica-independent hash (splitmix64 finaliser over the
/// fields), so every packet thread picks the same bucket for a flow.
fn mix(mut h: u64, v: u64) -> u64 {
    h ^= v;
    h = h.wrapping_add(0x9e37_79b9_7f4a_7c15);
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

impl<T: Tracer> Ctx<'_, '_, T> {
    pub(super) fn group(&mut self, id: u32, table: u8, depth: u32) {
        let pipe = self.pipe;
        let Some(g) = pipe.groups.get(&id) else {
            // Validation keeps groups alive while flows use them.
            return;
        };
        match g.group_type {
            GroupType::All | GroupType::Indirect => {
                self.count_group(g, None);
                for b in &g.buckets {
                    self.bucket(b, table, depth);
                }
            }
            GroupType::FastFailover => {
                // The first live bucket; none live drops the packet.
                if let Some(i) = g.buckets.iter().position(|b| bucket_is_live(pipe, b, 0)) {
                    self.run_bucket(g, i, table, depth);
                }
            }
            GroupType::Select => {
                if let Some(i) = self.select_bucket(&g.buckets, g.selection.as_ref()) {
                    self.run_bucket(g, i, table, depth);
                }
            }
        }
    }

    /// Counts the packet in `g` and in its bucket `bucket` (every bucket
    /// for `None`), as OVS credits a group (see `group.rs`).
    fn count_group(&mut self, g: &Arc<Group>, bucket: Option<usize>) {
        self.tracer.group(g, bucket);
        if T::COUNTS {
            g.stats.count(self.packet_len);
            match bucket {
                None => g.bucket_stats.iter().for_each(|s| s.count(self.packet_len)),
                Some(i) => {
                    if let Some(s) = g.bucket_stats.get(i) {
                        s.count(self.packet_len);
                    }
                }
            }
        }
    }

    /// Counts and runs the one bucket `i` of a select or fast-failover
    /// group.
    fn run_bucket(&mut self, g: &Arc<Group>, i: usize, table: u8, depth: u32) {
        if let Some(b) = g.buckets.get(i) {
            self.count_group(g, Some(i));
            self.bucket(b, table, depth);
        }
    }

    /// Weighted choice by flow hash; weight 0 buckets are never chosen.
    /// `hash` with fields hashes those bits of the key, seeded by its
    /// param (OVS's NTR selection method); otherwise, and for `dp_hash`,
    /// the default fields.
    fn select_bucket(
        &mut self,
        buckets: &[Bucket],
        selection: Option<&SelectionMethod>,
    ) -> Option<usize> {
        let total: u64 = buckets.iter().map(|b| u64::from(b.weight)).sum();
        if total == 0 {
            return None;
        }
        let mut h = 0;
        match selection {
            Some(s) if s.method == SelectionKind::Hash && s.fields != FlowKey::zero() => {
                h = s.param;
                for (i, &mask) in s.fields.words.iter().enumerate() {
                    if mask != 0 {
                        h = mix(h, self.key.words[i] & mask);
                        self.out.wildcards.words[i] |= mask;
                    }
                }
            }
            _ => {
                for f in HASH_FIELDS {
                    h = mix(h, self.key.get(f));
                    self.unwildcard(f, 0, f.bits());
                }
            }
        }
        let mut point = h % total;
        for (i, b) in buckets.iter().enumerate() {
            let w = u64::from(b.weight);
            if point < w {
                return Some(i);
            }
            point -= w;
        }
        None
    }

    /// Runs a bucket as if on a clone of the packet: key changes do not
    /// leak into the caller's later actions.
    fn bucket(&mut self, b: &Bucket, table: u8, depth: u32) {
        self.tracer.bucket(b, depth);
        let saved = self.key;
        let mark = self.mpls_mark();
        self.in_group += 1;
        self.execute(&b.actions, table, depth);
        self.in_group -= 1;
        self.undo_mpls(mark);
        self.key = saved;
    }
}

/// Groups a watch_group chain may pass through before the bucket counts
/// as dead (group chains cannot loop, as buckets cannot hold groups, but
/// watch_group may name any group).
const MAX_WATCH_DEPTH: u32 = 8;

/// OpenFlow's bucket liveness, as OVS decides it: a bucket that watches
/// nothing is live; otherwise its watch_port must be up or its
/// watch_group have a live bucket.
fn bucket_is_live(pipe: &Pipeline, b: &Bucket, depth: u32) -> bool {
    let watches_port = b.watch_port != port::ANY;
    let watches_group = b.watch_group != crate::action::group::ANY;
    if !watches_port && !watches_group {
        return true;
    }
    (watches_port && pipe.is_port_live(b.watch_port))
        || (watches_group
            && depth < MAX_WATCH_DEPTH
            && pipe.groups.get(&b.watch_group).is_some_and(|g| {
                g.buckets
                    .iter()
                    .any(|gb| bucket_is_live(pipe, gb, depth + 1))
            }))
}
