//! Revalidation: after a flow table, group or port change, each XDP
//! cache entry is kept if translating its frame again gives the same
//! entry, and removed otherwise, instead of retiring every entry.
//!
//! # Design
//!
//! Why: the agent changes flows whenever a pod, service or policy comes
//! or goes. Retiring the whole cache on each change (a generation bump)
//! sends all of a node's traffic to the packet thread at once, to be
//! translated and installed again; under a bundle every 20 ms that halved
//! the rate (bench/RESULTS.md, `churn`). OVS's revalidators likewise
//! translate each datapath flow again rather than flushing.
//!
//! How: every entry keeps its [`Origin`]: the flow key of
//! each pass and each pass's `ct(table=N)` action. The packet thread
//! (`engine/revalidate.rs`) translates each pass again with the current
//! tables, without counting (`Pipeline::retranslate`), and keeps the
//! entry only if every fork is the same `ct()` action resuming with the
//! same metadata, and the last pass gives the same XDP action, output
//! port and counters (the same flows and groups matched, the same table
//! lookups). A pass's translation depends on its key and the tables
//! alone; the conntrack state it resumed with is the linked connection's
//! (see the module above), which a table change does not touch; so an
//! entry kept is exactly what a miss would install now.
//!
//! When: a pass starts when the packet thread applies a change and
//! snapshots the keys; it visits [`CHUNK`] entries at once and per busy
//! round, and the rest at once when a round is idle, so a large cache
//! does not hold the rings. A change arriving mid-pass retires every
//! entry by generation instead (entries already visited were checked
//! against older tables, and restarting could keep a stream of changes
//! waiting for ever); a cache of up to [`CHUNK`] entries never has a pass
//! pending. Entries installed during the pass come from the current
//! tables. The change is only marked applied,
//! which is what barrier and bundle-commit replies wait for, when the
//! pass is over: until then a frame may still meet an entry of the old
//! tables, never after the reply. A frame meets one version or the other
//! as a whole: an entry carries its whole translation.
//!
//! Cost: one translation per pass per entry (about a microsecond for the
//! agent's pipeline) when a change comes, and the origin's memory: 216
//! bytes a pass (three for the agent's conntrack pipeline) on top of the
//! kernel's entry.

use super::{FcKey, Origin, XdpCache};
use flowtable::cache::Attribution;
use flowtable::pipeline::DropReason;

/// Entries a busy round's revalidation step visits (a millisecond or two
/// of translation).
pub const CHUNK: usize = 1024;

/// A revalidation pass under way.
pub(super) struct Pass {
    keys: Vec<FcKey>,
    pos: usize,
    /// The change to mark applied when the pass is over.
    seq: Option<u64>,
}

/// An entry as the revalidation sees it.
pub struct Candidate<'a> {
    pub origin: &'a Origin,
    pub action: &'a super::FcAction,
    pub out: Result<u32, DropReason>,
    pub attribution: &'a Attribution,
}

impl XdpCache {
    /// Starts checking every entry against changed tables or ports;
    /// `seq`: a pipeline change to report applied when the pass is over.
    /// A pass under way is replaced (the caller reports its change).
    pub fn start_revalidation(&mut self, seq: Option<u64>) {
        // Templates are not revalidated: the next new connection
        // installs its own again (see `templates.rs`).
        self.clear_templates();
        self.reval = Some(Pass {
            keys: self.mirror.keys().copied().collect(),
            pos: 0,
            seq,
        });
    }

    /// Drops the pass under way (every entry was just retired by
    /// [`XdpCache::invalidate`]); returns its change to mark applied.
    pub fn abandon_revalidation(&mut self) -> Option<u64> {
        self.reval.take().and_then(|p| p.seq)
    }

    /// Whether a revalidation pass is under way.
    pub fn revalidating(&self) -> bool {
        self.reval.is_some()
    }

    /// The next keys of the pass to check, at most `max`, appended to
    /// `out`.
    pub fn revalidation_chunk(&mut self, max: usize, out: &mut Vec<FcKey>) {
        if let Some(p) = &mut self.reval {
            let end = p.pos.saturating_add(max).min(p.keys.len());
            out.extend_from_slice(&p.keys[p.pos..end]);
            p.pos = end;
        }
    }

    /// Ends the pass if every key was handed out; returns the change to
    /// mark applied, if there is one.
    pub fn finish_revalidation(&mut self) -> Option<u64> {
        match &self.reval {
            Some(p) if p.pos >= p.keys.len() => self.reval.take().and_then(|p| p.seq),
            _ => None,
        }
    }

    /// The entry at `key`, if it is installed and of the current
    /// generation (an older one is the sweep's to remove).
    pub fn candidate(&self, key: &FcKey) -> Option<Candidate<'_>> {
        let e = self.mirror.get(key)?;
        (e.gen == self.maps.generation().current()).then_some(Candidate {
            origin: &e.origin,
            action: &e.action,
            out: e.out,
            attribution: &e.attribution,
        })
    }

    /// Records the verdict on the entry at `key`: kept if still `exact`,
    /// else removed, its last hits credited to what it was.
    pub fn revalidated(&mut self, key: &FcKey, exact: bool) {
        if exact {
            self.stats.revalidated += 1;
        } else if self.remove(key) {
            self.stats.revalidated_out += 1;
        }
    }

    /// Removes every entry that takes frames in from or out to `ofport`
    /// (the port is being removed), crediting their last hits.
    pub fn forget_port(&mut self, ofport: u32) {
        let keys: Vec<FcKey> = self
            .mirror
            .iter()
            .filter(|(_, e)| e.origin.in_port == ofport || e.out == Ok(ofport))
            .map(|(k, _)| *k)
            .collect();
        for k in &keys {
            if self.remove(k) {
                self.stats.invalidated += 1;
            }
        }
    }
}
