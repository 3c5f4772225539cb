//! The packet thread's side of XDP cache revalidation (the design is in
//! `fastpath/cache/revalidate.rs`): translating each entry's passes again with
//! the current tables and ports, and removing the entries that changed.

use super::xdp::plain_ct_fork;
use super::{Engine, Frames, PortIo};
use crate::fastpath::cache::{Candidate, FcKey, XdpCache, REVALIDATE_CHUNK};
use flowtable::cache::Attribution;
use flowtable::key::{Field, FlowKey};
use flowtable::pipeline::Xlate;

impl<F: Frames, P: PortIo<F>> Engine<F, P> {
    /// The tables or ports changed: checks every XDP cache entry again,
    /// a chunk now and the rest in the next rounds; `seq`, a pipeline
    /// change, is marked applied once every entry is checked (at once
    /// without a cache).
    ///
    /// A change that comes while a pass is still under way retires every
    /// entry instead (a generation bump) and counts as applied at once:
    /// restarting would let a stream of changes to a large cache keep
    /// every barrier waiting.
    pub(super) fn xdp_changed(&mut self, seq: Option<u64>) {
        // A previous process's entries not adopted yet were translated by
        // its tables: they go before a pipeline change counts as applied
        // (a liveness change has no reply to wait: they are checked
        // against it as they come).
        if let (Some(x), Some(_)) = (&mut self.xdp, seq) {
            x.abandon_adoption();
        }
        let done = match &mut self.xdp {
            Some(x) if x.revalidating() => {
                x.invalidate();
                x.abandon_revalidation().max(seq)
            }
            Some(x) => {
                x.start_revalidation(seq);
                self.xdp_revalidate(true);
                return;
            }
            None => seq,
        };
        if let Some(seq) = done {
            self.shared.mark_applied(self.changes.engine(), seq);
        }
    }

    /// One step of the revalidation under way, if any: a chunk of
    /// entries when `busy`, else all that are left.
    pub(super) fn xdp_revalidate(&mut self, busy: bool) {
        // Every round asks: answer without touching the cache otherwise.
        if !self.xdp.as_ref().is_some_and(XdpCache::revalidating) {
            return;
        }
        let Some(mut x) = self.xdp.take() else {
            return;
        };
        let mut keys = Vec::new();
        x.revalidation_chunk(if busy { REVALIDATE_CHUNK } else { usize::MAX }, &mut keys);
        let mut xlate = Xlate::new();
        for key in &keys {
            let exact = match x.candidate(key) {
                Some(c) => self.still_exact(key, &c, &mut xlate),
                None => continue,
            };
            x.revalidated(key, exact);
        }
        if let Some(seq) = x.finish_revalidation() {
            self.shared.mark_applied(self.changes.engine(), seq);
        }
        self.xdp = Some(x);
    }

    /// Whether translating `c`'s passes now gives the entry it is:
    /// each fork the same `ct()` resuming with the same metadata, then
    /// the same XDP action and output, with the same counters.
    fn still_exact(&mut self, xk: &FcKey, c: &Candidate<'_>, xlate: &mut Xlate) -> bool {
        if self.fail_open {
            return false;
        }
        let passes = &c.origin.passes;
        let Some((last, forks)) = passes.split_last() else {
            return false;
        };
        if forks.len() != c.origin.forks.len() {
            return false;
        }
        let mut parts = Vec::with_capacity(passes.len());
        for (i, key) in passes.iter().enumerate() {
            parts.push(self.pipeline.retranslate(key, xlate));
            let Some(next) = passes.get(i + 1) else {
                break;
            };
            if plain_ct_fork(xlate.actions()) != c.origin.forks.get(i)
                || !resumes_as(xlate.recirc(), next)
            {
                return false;
            }
        }
        let Some(fresh) = Self::fc_action(
            &mut self.ports,
            &self.port_index,
            c.origin.in_port,
            xk,
            last,
            xlate,
        ) else {
            return false;
        };
        fresh == (*c.action, c.out)
            && Attribution::join(parts).is_some_and(|a| a.same(c.attribution))
    }
}

/// Whether a fork resuming with `recirc` (the translation's metadata)
/// gave the pass key `next`: `next` is `recirc` with the packet's headers
/// after `ct()` and the connection's ct fields (`engine/ct.rs`), which
/// do not depend on the tables once the `ct()` action is the same.
fn resumes_as(recirc: Option<&FlowKey>, next: &FlowKey) -> bool {
    let Some(recirc) = recirc else {
        return false;
    };
    let mut k = *recirc;
    k.set_headers_from(next);
    k.set(Field::CtState, next.get(Field::CtState));
    k.set(Field::CtZone, next.get(Field::CtZone));
    k.set(Field::CtMark, next.get(Field::CtMark));
    k.set_ct_label(next.ct_label());
    k == *next
}
