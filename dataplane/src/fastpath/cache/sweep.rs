//! The sweep: collecting the kernel's hit counts, refreshing the
//! connections of entries with hits, and removing stale and idle entries.
//!
//! # Design
//!
//! A pass visits every entry once, every [`SWEEP_INTERVAL`] and before
//! every statistics reply. It walks the flow map itself in batches
//! (`BPF_MAP_LOOKUP_BATCH`, [`SWEEP_CHUNK`] entries a syscall): a whole
//! pass over 100,000 entries took 39 ms that way against 102 ms with one
//! lookup each (`cargo bench -p bench --bench xdp_sweep`, this 2-vCPU VM),
//! so a large cache costs the packet thread well under half of what it
//! did. If the kernel refuses batches
//! (a kernel before 5.6, or a bucket larger than a batch), the sweep
//! falls back for good to a snapshot of the mirror's keys read one by
//! one.
//!
//! A busy round visits one batch (about [`SWEEP_CHUNK`] entries: batches
//! end on a hash bucket), an idle round the rest, so a pass never holds
//! the rings for long. A forced pass (a statistics request, shutdown)
//! starts afresh and goes the same way: a statistics request is answered
//! when its pass is complete ([`XdpCache::passes_completed`]), instead of
//! stalling the packet thread for a whole pass (about 40 ms at 100,000
//! entries here).
//! Entries are deleted as they are visited, which the kernel's batch walk
//! allows (it resumes from a bucket index); entries installed meanwhile
//! are seen by this pass or the next. Counters are read and acted on in
//! the same step, so an idle entry's last hits are credited before it
//! goes. A key in the map but not in the mirror (none should be) is
//! deleted, unless several packet threads share the map (each sweeps it
//! all, acting on its own entries; the others' are theirs to count) or
//! it may be a previous process's entry not adopted yet (pinned maps,
//! before the take-over and while an adoption is under way); an
//! entry in the mirror but not in the map (none should be either) is left
//! to the key-by-key fallback's next use.

use super::maps::BatchRead;
use super::{FcKey, XdpCache, IDLE_EXPIRY, SWEEP_CHUNK, SWEEP_INTERVAL};
use crate::conntrack::Conntrack;
use crate::fastpath::ct::link::CtLink;
use std::time::Instant;

/// A sweep pass under way.
pub(super) enum Pass {
    /// Walking the map in batches.
    Map(BatchRead),
    /// Reading a snapshot of the mirror's keys one by one.
    Keys { keys: Vec<FcKey>, pos: usize },
}

impl XdpCache {
    /// Every [`SWEEP_INTERVAL`] (or at once with `force`, abandoning a
    /// pass under way): collects hit counts, refreshes the connections of
    /// entries with hits in conntrack (`ct`, at its time `ct_now`), and
    /// removes stale and idle entries; one step of the pass when `busy`,
    /// the rest of it otherwise (see the module documentation).
    pub fn sweep(&mut self, now: Instant, force: bool, busy: bool, ct: &Conntrack, ct_now: u64) {
        let due = now.duration_since(self.last_sweep) >= SWEEP_INTERVAL;
        if force || (self.sweep.is_none() && due) {
            // A forced pass starts afresh: entries installed since the
            // last one began have hits to collect too.
            self.last_sweep = now;
            self.sweep_templates();
            self.sweep = Some(if self.sweep_by_key {
                self.key_pass()
            } else {
                Pass::Map(BatchRead::default())
            });
        }
        let Some(mut pass) = self.sweep.take() else {
            return;
        };
        let whole = !busy;
        let mut gone = Vec::new();
        let over = loop {
            let step_over = match &mut pass {
                Pass::Map(read) => match self.sweep_batch(read, now, ct, ct_now, &mut gone) {
                    Ok(()) => read.is_done(),
                    Err(e) => {
                        tracing::warn!(
                            error = %e,
                            "cannot read the XDP flow cache in batches; reading entry by entry"
                        );
                        self.sweep_by_key = true;
                        pass = self.key_pass();
                        continue;
                    }
                },
                Pass::Keys { keys, pos } => {
                    let end = (*pos + SWEEP_CHUNK).min(keys.len());
                    let now_keys = std::mem::take(keys);
                    for key in &now_keys[*pos..end] {
                        let counters = self.maps.read(key);
                        self.visit(key, counters, now, ct, ct_now, &mut gone);
                    }
                    *keys = now_keys;
                    *pos = end;
                    end >= keys.len()
                }
            };
            if step_over || !whole {
                break step_over;
            }
        };
        if over {
            self.passes_completed += 1;
        } else {
            self.sweep = Some(pass);
        }
        for (key, links) in gone {
            self.release(&key, &links);
        }
    }

    /// Sweep passes completed so far: a pass forced now is complete when
    /// this reaches one more than its value before.
    pub fn passes_completed(&self) -> u64 {
        self.passes_completed
    }

    /// A pass over a snapshot of the mirror's keys.
    fn key_pass(&self) -> Pass {
        Pass::Keys {
            keys: self.mirror.keys().copied().collect(),
            pos: 0,
        }
    }

    /// One batch of a map pass.
    fn sweep_batch(
        &mut self,
        read: &mut BatchRead,
        now: Instant,
        ct: &Conntrack,
        ct_now: u64,
        gone: &mut Vec<(FcKey, Vec<CtLink>)>,
    ) -> std::io::Result<()> {
        let mut batch = std::mem::take(&mut self.sweep_batch);
        let read_result = self.maps.read_batch(read, SWEEP_CHUNK as u32, &mut batch);
        // A previous process's entries (pinned maps) are not in the
        // mirror until they are adopted: kept until the take-over and
        // through the adoption, which settles each (`adopt.rs`).
        let awaiting_adoption = self.adoption.is_some()
            || (self.maps.pins().is_some() && self.adoptions_seen == 0)
            || self.maps.generation().is_held();
        if read_result.is_ok() {
            for (key, counters) in &batch {
                if self.mirror.contains_key(key) {
                    self.visit(key, Some(*counters), now, ct, ct_now, gone);
                } else if self.threads == 1 && !awaiting_adoption {
                    // Another packet thread's, when there are several.
                    self.maps.delete(key);
                }
            }
        }
        self.sweep_batch = batch;
        read_result
    }

    /// One entry of a sweep: credits its hits (`counters`, as just read
    /// from the map; `None` if it was not there), refreshes its linked
    /// connections if it had hits, and removes it if stale or idle,
    /// leaving its connection links in `gone` for [`Self::release`].
    fn visit(
        &mut self,
        key: &FcKey,
        counters: Option<(u64, u64)>,
        now: Instant,
        ct: &Conntrack,
        ct_now: u64,
        gone: &mut Vec<(FcKey, Vec<CtLink>)>,
    ) {
        let current = self.maps.generation().current();
        let broken = self.maps.generation().is_broken();
        // Gone since the snapshot (reinstalled, released): skip.
        let Some(e) = self.mirror.get_mut(key) else {
            return;
        };
        if let Some((packets, bytes)) = counters {
            let (dp, db) = (
                packets.saturating_sub(e.packets),
                bytes.saturating_sub(e.bytes),
            );
            if dp > 0 {
                e.credit(dp, db, &mut self.stats, &mut self.credits);
                e.packets = packets;
                e.bytes = bytes;
                e.last_active = now;
                for l in &e.links {
                    l.refresh(ct, ct_now);
                }
            }
        }
        let stale = e.gen != current || broken;
        let idle = now.duration_since(e.last_active) >= IDLE_EXPIRY;
        if stale || idle {
            if !e.links.is_empty() {
                gone.push((*key, std::mem::take(&mut e.links)));
            }
            self.mirror.remove(key);
            self.maps.delete(key);
            if stale {
                self.stats.invalidated += 1;
            } else {
                self.stats.expired += 1;
            }
        }
    }

    /// Sweeps read the map entry by entry from now on, as after a failed
    /// batch (tests of that path).
    pub fn sweep_entry_by_entry(&mut self) {
        self.sweep_by_key = true;
    }
}
