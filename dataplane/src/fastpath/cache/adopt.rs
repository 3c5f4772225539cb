//! Adopting the entries a previous xbr left in the pinned flow cache
//! (`crate::fastpath::pin`, issue 29): at take-over, each entry is checked against
//! this process's tables instead of being retired.
//!
//! # Design
//!
//! Why: the previous process's entries keep forwarding while no xbr runs.
//! Retiring them when the next one takes over sent every cached flow's
//! next frames to the packet thread at once, and at 100 kpps a flow lost
//! frames in that burst (the socket's rings filled before the first
//! frame was translated and the entry installed again); the restored
//! tables mostly say what the old ones said, so the entries are mostly
//! right as they are.
//!
//! What: a take-over ([`CacheMaps::request_adoption`](super::CacheMaps::request_adoption), from
//! `cache::take_over`) makes each packet thread list the map's entries of
//! the current generation that it has no record of (the previous
//! process's; the generation is kept across the restart) and whose
//! ingress device is one of its ports. The engine (`engine/adopt.rs`)
//! translates each entry's frame with the current tables and
//! connections, as a miss would, without counting or changing anything,
//! and hands the outcome to [`XdpCache::adopt`]:
//! - the same entry (action, output, rewrites, conntrack flag): it is
//!   kept in place, recorded as this thread's with the translation's
//!   flows and connections (linked, as an install links them), its hits
//!   from now on credited to the restored rules;
//! - another entry: it is rewritten in place (an install);
//! - nothing the kernel can carry (the flow, port or connection went, or
//!   the connection is no longer steady): it is removed, and the flow's
//!   next frame goes to the packet thread.
//!
//! A connection's NAT binding is followed as `ct(nat)` applies it (the
//! fork resumes with the rewritten headers, `ct::link::peek`), and a
//! decapsulated frame's entry is translated from the VXLAN port with the
//! tunnel metadata its key holds, so both are kept like any other.
//!
//! The kernel keeps forwarding by the entries meanwhile, so a flow that
//! stays the same never leaves the kernel. Entries of devices that are no
//! port of the bridge any more are removed by the first packet thread.
//!
//! When: a chunk of [`super::REVALIDATE_CHUNK`] entries per busy round,
//! the rest when a round is idle, as revalidation does. A flow table,
//! group or port change arriving before every entry was checked removes
//! the entries not checked yet ([`XdpCache::abandon_adoption`]): they
//! were translated by the previous process's tables, and the change must
//! not be reported applied while they forward.
//!
//! Counters: the hits an entry had before it was adopted are not
//! credited (the restored rules start at zero, as after `ovs-save`).

use super::{entry, CtConn, FcAction, FcKey, Installed, Origin, XdpCache};
use crate::conntrack::Conntrack;
use flowtable::cache::Attribution;
use flowtable::pipeline::DropReason;
use std::time::Instant;

/// Whose an entry of the previous process is, by its ingress device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// A port this packet thread serves: it checks the entry.
    Mine,
    /// Another packet thread's port.
    Others,
    /// No port of the bridge: removed.
    Nobody,
}

/// An adopted entry's frame translated with this process's tables: what
/// a miss would install.
pub struct Fresh {
    pub action: FcAction,
    pub out: Result<u32, DropReason>,
    pub origin: Origin,
    pub attribution: Attribution,
    pub conns: Vec<CtConn>,
}

/// An adoption under way: the entries left to check, with the values
/// they had when listed.
pub(super) struct Adoption {
    entries: Vec<(FcKey, Vec<u8>)>,
    pos: usize,
}

impl XdpCache {
    /// Whether a take-over asked for an adoption this cache has not
    /// started yet (one atomic load); marks it started.
    pub fn adoption_asked(&mut self) -> bool {
        let n = self.maps.adoptions();
        if n == self.adoptions_seen {
            return false;
        }
        self.adoptions_seen = n;
        true
    }

    /// Lists the entries to adopt: those of the current generation this
    /// cache has no record of and `claim` says are its own. Those of no
    /// port are removed now when `remove_orphans` (one thread does it).
    pub fn start_adoption(&mut self, claim: impl Fn(&FcKey) -> Claim, remove_orphans: bool) {
        let gen = self.maps.generation().current();
        let mut entries = Vec::new();
        let removed = self.stats.adopt_removed;
        self.adoption_start = self.stats;
        for (key, value) in self.maps.entries() {
            if self.mirror.contains_key(&key) {
                continue;
            }
            match claim(&key) {
                Claim::Mine if entry::generation(&value) == gen => entries.push((key, value)),
                // Of an older generation (stale when the previous process
                // stopped), or of no port now: unused, removed.
                Claim::Mine => {
                    self.maps.delete(&key);
                    self.stats.adopt_removed += 1;
                }
                Claim::Nobody if remove_orphans => {
                    self.maps.delete(&key);
                    self.stats.adopt_removed += 1;
                }
                Claim::Nobody | Claim::Others => {}
            }
        }
        tracing::info!(
            generation = gen,
            to_check = entries.len(),
            removed = self.stats.adopt_removed - removed,
            "adopting the previous xbr's XDP flow cache entries"
        );
        self.adoption = Some(Adoption { entries, pos: 0 });
    }

    /// Whether an adoption is under way.
    pub fn adopting(&self) -> bool {
        self.adoption.is_some()
    }

    /// The next entries to check, at most `max`, moved into `out`; the
    /// caller settles each with [`XdpCache::adopt`], then calls
    /// [`XdpCache::adoption_step_done`].
    pub fn adoption_chunk(&mut self, max: usize, out: &mut Vec<(FcKey, Vec<u8>)>) {
        let Some(a) = &mut self.adoption else {
            return;
        };
        let end = a.pos.saturating_add(max).min(a.entries.len());
        out.extend(
            a.entries[a.pos..end]
                .iter_mut()
                .map(|(k, v)| (*k, std::mem::take(v))),
        );
        a.pos = end;
    }

    /// Ends the adoption, with a summary in the log, once every entry
    /// was handed out and settled.
    pub fn adoption_step_done(&mut self) {
        if self
            .adoption
            .as_ref()
            .is_some_and(|a| a.pos >= a.entries.len())
        {
            self.adoption = None;
            let (s, b) = (&self.stats, &self.adoption_start);
            tracing::info!(
                kept = s.adopted - b.adopted,
                rewritten = s.adopt_rewritten - b.adopt_rewritten,
                removed = s.adopt_removed - b.adopt_removed,
                "adopted the previous xbr's XDP flow cache entries"
            );
        }
    }

    /// A change came before every entry was checked: removes those not
    /// checked yet (see the module documentation). Returns how many.
    pub fn abandon_adoption(&mut self) -> usize {
        let Some(a) = self.adoption.take() else {
            return 0;
        };
        let left = &a.entries[a.pos..];
        for (key, _) in left {
            self.maps.delete(key);
        }
        self.stats.adopt_removed += left.len() as u64;
        left.len()
    }

    /// Settles the entry at `key`, found with value `found`, against its
    /// translation now (`None`: nothing the kernel can carry): kept,
    /// rewritten or removed (see the module documentation). `ct` and
    /// `ct_now` link its connections, as [`XdpCache::install`] does.
    pub fn adopt(
        &mut self,
        key: FcKey,
        found: &[u8],
        fresh: Option<Fresh>,
        ct: &Conntrack,
        ct_now: u64,
    ) {
        let Some(f) = fresh else {
            self.maps.delete(&key);
            self.stats.adopt_removed += 1;
            return;
        };
        let want = entry::value(f.action, self.round_gen, !f.conns.is_empty());
        // The generation and the counters aside (0..24), the same entry.
        let same = entry::generation(found) == self.round_gen && found.get(24..) == want.get(24..);
        if !same {
            tracing::debug!(
                found = ?found.get(..48),
                now = ?want.get(..48),
                generation = self.round_gen,
                "an adopted XDP cache entry differs from its translation now: rewritten"
            );
        }
        if !same || self.mirror.len() >= self.quota {
            self.install(
                key,
                f.action,
                f.origin,
                f.out,
                f.attribution,
                &f.conns,
                ct,
                ct_now,
            );
            if self.mirror.contains_key(&key) {
                self.stats.adopt_rewritten += 1;
            } else {
                // Not installed (full, or a connection that cannot be
                // linked): the old entry must not stay.
                self.maps.delete(&key);
                self.stats.adopt_removed += 1;
            }
            return;
        }
        let mut links = Vec::with_capacity(f.conns.len());
        for c in &f.conns {
            match crate::fastpath::ct::link::link(ct, &c.tuple, c.mark, c.label, ct_now) {
                Some(l) => links.push(l),
                None => {
                    self.release(&key, &links);
                    self.maps.delete(&key);
                    self.stats.adopt_removed += 1;
                    return;
                }
            }
        }
        // What it counted so far is not credited: from now on only.
        let Some((packets, bytes)) = self.maps.read(&key) else {
            // Gone meanwhile (a teardown): nothing to keep.
            self.release(&key, &links);
            return;
        };
        self.remember(
            key,
            Installed {
                gen: self.round_gen,
                action: f.action,
                attribution: f.attribution,
                origin: f.origin,
                out: f.out,
                links,
                decap: entry::is_decapsulated(&key),
                packets,
                bytes,
                last_active: Instant::now(),
            },
        );
        self.stats.adopted += 1;
    }
}
