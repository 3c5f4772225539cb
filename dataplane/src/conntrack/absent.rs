//! Watches on tuples that have no connection, for the XDP flow cache.
//!
//! # Design
//!
//! A `ct()` without `commit` on a packet whose tuple has no connection
//! gives `+trk+new` and stores nothing (the agent's subnet-mode flows
//! never commit, so every packet of every flow is such a packet). That
//! outcome stays the same for every later packet of the tuple, in either
//! direction, until some `ct(commit)` (or the host learning path) stores
//! a connection with the tuple as its original or reply tuple; a TCP
//! segment the kernel forwards from such an entry (ACK without SYN, FIN
//! or RST) is always a valid new one. So the XDP flow cache may carry
//! the packet's translation while the tuple stays absent.
//!
//! Stores: per table shard, the watched tuples, each with the ids of the
//! cache entries' watches on it; a queue of the ids whose tuple got a
//! connection ("fired").
//!
//! Invariants: a watch is registered only while its tuple's table shard
//! is locked (read) and found without the tuple, and `Table::insert`
//! checks for watches while it holds the write locks of both tuples'
//! shards; so a watch either sees no connection and is fired by the
//! first insert of its tuple, or is not registered. A fired watch is
//! gone from the map and its id is in the queue until the packet thread
//! takes it (`Conntrack::xdp_take_dead`) and deletes the entry.
//!
//! Cost: nothing on the packet path while no watch exists (one relaxed
//! load per insert); otherwise one mutex and one probe per tuple
//! inserted. Registering and removing a watch: one mutex and one probe.
//!
//! Concurrency: the maps are per shard, under their own mutexes, taken
//! after (never before) the table shard's lock.

use super::id_queues::IdQueues;
use super::tuple::Tuple;
use ahash::RandomState;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

type WatchMap = HashMap<Tuple, Vec<usize>, RandomState>;

pub struct AbsentWatches {
    shards: Vec<Mutex<WatchMap>>,
    /// Watches registered and not yet fired or removed.
    count: AtomicUsize,
    /// Fired watches, for every packet thread (see `id_queues.rs`).
    fired: IdQueues,
}

impl AbsentWatches {
    pub fn new(shards: usize) -> Self {
        AbsentWatches {
            shards: (0..shards)
                .map(|_| Mutex::new(HashMap::with_hasher(RandomState::new())))
                .collect(),
            count: AtomicUsize::new(0),
            fired: IdQueues::default(),
        }
    }

    /// Registers watch `id` on `t`, which lives in table shard `shard`;
    /// the caller holds that shard's lock and found no `t` in it.
    pub(super) fn add(&self, shard: usize, t: Tuple, id: usize) {
        if let Some(m) = self.shards.get(shard) {
            m.lock().entry(t).or_default().push(id);
            self.count.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Removes watch `id` on `t` if it has not fired.
    pub fn remove(&self, shard: usize, t: &Tuple, id: usize) {
        let Some(m) = self.shards.get(shard) else {
            return;
        };
        let mut m = m.lock();
        let Some(ids) = m.get_mut(t) else {
            return;
        };
        let before = ids.len();
        ids.retain(|&i| i != id);
        if ids.len() < before {
            self.count.fetch_sub(1, Ordering::Relaxed);
        }
        if ids.is_empty() {
            m.remove(t);
        }
    }

    /// Whether watch `id` on `t` is still waiting (not fired, not removed).
    pub fn contains(&self, shard: usize, t: &Tuple, id: usize) -> bool {
        self.shards
            .get(shard)
            .is_some_and(|m| m.lock().get(t).is_some_and(|ids| ids.contains(&id)))
    }

    /// A connection was stored under `t` (table shard `shard`, whose write
    /// lock the caller holds): fires the watches on it.
    pub(super) fn stored(&self, shard: usize, t: &Tuple) {
        // The caller's write lock orders this after any registration on
        // the same shard, so a relaxed load sees it.
        if self.count.load(Ordering::Relaxed) == 0 {
            return;
        }
        let Some(ids) = self.shards.get(shard).and_then(|m| m.lock().remove(t)) else {
            return;
        };
        self.count.fetch_sub(ids.len(), Ordering::Relaxed);
        self.fired.push_all(&ids);
    }

    /// Serves `threads` packet threads.
    pub fn set_threads(&self, threads: usize) {
        self.fired.set_threads(threads);
    }

    /// Moves the ids of fired watches for packet thread `thread` into
    /// `out`; returns whether there were any. One atomic load when none.
    pub fn take_fired(&self, thread: usize, out: &mut Vec<usize>) -> bool {
        self.fired.take(thread, out)
    }
}
