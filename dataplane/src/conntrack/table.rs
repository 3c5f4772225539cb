//! The connection store: tuples of both directions mapped to shared
//! connection records, split into shards.
//!
//! # Design
//!
//! Stores: for every committed connection two entries, its original tuple
//! and its reply tuple (after NAT), each pointing at the same
//! `Arc<Mutex<Conn>>` together with the direction it names. Shards are
//! chosen by a hash of the tuple, so the two entries of a connection
//! usually live in different shards.
//!
//! Invariants: both entries of a connection exist or neither does (insert
//! and remove take both shard locks, in shard index order, so they never
//! deadlock and nobody sees half a connection); `count` is the number of
//! connections (not entries) and never exceeds the configured limit.
//!
//! Concurrency: a packet takes its tuple's shard lock for reading (packets
//! of any number of threads look up a shard together) and then its
//! connection's mutex; both are uncontended in the common case, and there
//! is no global lock. Only new and ending connections take shard write
//! locks. Dump, flush and expiry sweeps lock one shard at a time. Lock
//! order: shards before connections, shards by index; nobody takes a
//! shard lock while holding a connection's.
//!
//! Inserting also fires the XDP flow cache's watches on the new tuples
//! (`absent.rs`) while it holds their shards' write locks, and inserting
//! and removing count the connection in or out of the kernel's slots
//! (`kernel_conns.rs`) under the same locks.
//!
//! Cost: lookup is a hash of the tuple and one `HashMap` probe; inserting
//! allocates (the record and possibly map growth), which only new
//! connections do.
//!
//! Connections per zone (for the metrics endpoint) are one atomic per
//! zone (256 KiB per table), moved by insert and remove under the same
//! shard locks and read without any lock, so a scrape never waits on or
//! delays the packet threads.

use super::absent::AbsentWatches;
use super::tuple::Tuple;
use super::Conn;
use super::KernelConns;
use ahash::RandomState;
use parking_lot::{Mutex, RwLock};
use std::collections::hash_map::Entry as MapEntry;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

pub const SHARDS: usize = 64;

pub type ConnRef = Arc<Mutex<Conn>>;

/// One tuple's entry: the connection and whether the tuple is its reply.
#[derive(Clone)]
pub struct Entry {
    pub conn: ConnRef,
    pub reply: bool,
}

pub struct Table {
    shards: Vec<RwLock<HashMap<Tuple, Entry, RandomState>>>,
    hasher: RandomState,
    count: AtomicUsize,
    /// The XDP flow cache's watches on tuples without a connection
    /// (`absent.rs`), fired by `insert`.
    absent: Arc<AbsentWatches>,
    /// The kernel's counts to keep up to date, when the XDP program
    /// creates connections (`kernel_conns.rs`).
    mirror: OnceLock<Arc<dyn KernelConns>>,
    /// Connections by zone (of the original tuple), indexed by zone.
    zones: Box<[AtomicU32]>,
}

impl Table {
    pub fn new() -> Self {
        Table {
            shards: (0..SHARDS)
                .map(|_| RwLock::new(HashMap::with_hasher(RandomState::new())))
                .collect(),
            hasher: RandomState::new(),
            count: AtomicUsize::new(0),
            absent: Arc::new(AbsentWatches::new(SHARDS)),
            mirror: OnceLock::new(),
            zones: (0..=u16::MAX).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    /// The zones that hold connections, with how many each (a moment's
    /// view: counts move while it is read).
    pub fn zone_counts(&self) -> Vec<(u16, u32)> {
        (0..=u16::MAX)
            .zip(self.zones.iter())
            .map(|(z, n)| (z, n.load(Ordering::Relaxed)))
            .filter(|&(_, n)| n > 0)
            .collect()
    }

    fn zone_count(&self, t: &Tuple, add: bool) {
        if let Some(n) = self.zones.get(usize::from(t.zone)) {
            if add {
                n.fetch_add(1, Ordering::Relaxed);
            } else {
                n.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// Counts every connection stored from now on in the kernel's slots.
    pub fn set_mirror(&self, q: Arc<dyn KernelConns>) {
        let _ = self.mirror.set(q);
    }

    fn mirrored(&self, orig: &Tuple, reply: &Tuple, add: bool) {
        if let Some(q) = self.mirror.get() {
            q.counted(orig, reply, add);
        }
    }

    /// Takes back a count of `t`'s slot (one the kernel made for a
    /// connection the table did not store).
    pub fn mirror_forget(&self, t: &Tuple) {
        self.mirrored(t, t, false);
    }

    pub fn absent(&self) -> &Arc<AbsentWatches> {
        &self.absent
    }

    /// Registers watch `id` on `t` if `t` has no connection; returns the
    /// shard it is kept under, or `None` if `t` has a connection.
    pub fn watch_absent(&self, t: &Tuple, id: usize) -> Option<usize> {
        let idx = self.shard_of(t);
        let shard = self.shards.get(idx)?;
        let s = shard.read();
        if s.contains_key(t) {
            return None;
        }
        self.absent.add(idx, *t, id);
        Some(idx)
    }

    fn shard_of(&self, t: &Tuple) -> usize {
        (self.hasher.hash_one(t) as usize) % SHARDS
    }

    /// The entry for `t`, if any.
    #[cfg(test)]
    pub fn get(&self, t: &Tuple) -> Option<Entry> {
        let shard = self.shards.get(self.shard_of(t))?;
        shard.read().get(t).cloned()
    }

    /// Runs `f` on the entry for `t` while its shard is locked (the packet
    /// path: no `Arc` clone).
    pub fn with<R>(&self, t: &Tuple, f: impl FnOnce(Option<&Entry>) -> R) -> R {
        match self.shards.get(self.shard_of(t)) {
            Some(shard) => f(shard.read().get(t)),
            None => f(None),
        }
    }

    pub fn contains(&self, t: &Tuple) -> bool {
        self.with(t, |e| e.is_some())
    }

    pub fn len(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reserves room for one connection; `false` when `limit` is reached.
    pub fn reserve(&self, limit: usize) -> bool {
        self.count
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < limit).then_some(n + 1)
            })
            .is_ok()
    }

    /// Gives back a reservation that was not used.
    pub fn unreserve(&self) {
        self.count.fetch_sub(1, Ordering::Relaxed);
    }

    /// Inserts a reserved connection under both tuples. Fails (returning
    /// the connection) if either tuple is taken meanwhile.
    pub fn insert(&self, orig: Tuple, reply: Tuple, conn: ConnRef) -> Result<(), ConnRef> {
        self.insert_mirrored(orig, reply, conn, true)
    }

    /// [`Table::insert`] of a connection the kernel's slots count already
    /// (one the XDP program created).
    pub fn insert_known(&self, orig: Tuple, reply: Tuple, conn: ConnRef) -> Result<(), ConnRef> {
        self.insert_mirrored(orig, reply, conn, false)
    }

    fn insert_mirrored(
        &self,
        orig: Tuple,
        reply: Tuple,
        conn: ConnRef,
        mirror: bool,
    ) -> Result<(), ConnRef> {
        let (a, b) = (self.shard_of(&orig), self.shard_of(&reply));
        let (Some(sa), Some(sb)) = (self.shards.get(a), self.shards.get(b)) else {
            return Err(conn);
        };
        // One probe per tuple (entry, not contains_key then insert): the
        // shards are large and each probe is likely a cache miss.
        if a == b {
            let mut s = sa.write();
            match s.entry(orig) {
                MapEntry::Occupied(_) => return Err(conn),
                MapEntry::Vacant(v) => {
                    v.insert(Entry {
                        conn: conn.clone(),
                        reply: false,
                    });
                }
            }
            match s.entry(reply) {
                MapEntry::Vacant(v) => {
                    v.insert(Entry { conn, reply: true });
                }
                MapEntry::Occupied(_) => {
                    // Both or neither: undo the first. This includes a
                    // tuple that is its own reply (the same address and
                    // port at both ends): it cannot have two entries.
                    s.remove(&orig);
                    return Err(conn);
                }
            }
            self.absent.stored(a, &orig);
            self.absent.stored(a, &reply);
            self.zone_count(&orig, true);
            if mirror {
                self.mirrored(&orig, &reply, true);
            }
            return Ok(());
        }
        let (mut ga, mut gb) = if a < b {
            let ga = sa.write();
            (ga, sb.write())
        } else {
            let gb = sb.write();
            (sa.write(), gb)
        };
        let (MapEntry::Vacant(va), MapEntry::Vacant(vb)) = (ga.entry(orig), gb.entry(reply)) else {
            return Err(conn);
        };
        va.insert(Entry {
            conn: conn.clone(),
            reply: false,
        });
        vb.insert(Entry { conn, reply: true });
        self.absent.stored(a, &orig);
        self.absent.stored(b, &reply);
        self.zone_count(&orig, true);
        if mirror {
            self.mirrored(&orig, &reply, true);
        }
        Ok(())
    }

    /// Removes the connection stored under `orig`/`reply` if those entries
    /// still point at `conn`; returns whether it did.
    pub fn remove(&self, orig: &Tuple, reply: &Tuple, conn: &ConnRef) -> bool {
        let (a, b) = (self.shard_of(orig), self.shard_of(reply));
        let (Some(sa), Some(sb)) = (self.shards.get(a), self.shards.get(b)) else {
            return false;
        };
        let ours = |m: &HashMap<Tuple, Entry, RandomState>, t: &Tuple| {
            m.get(t).is_some_and(|e| Arc::ptr_eq(&e.conn, conn))
        };
        let removed = if a == b {
            let mut s = sa.write();
            if !ours(&s, orig) {
                return false;
            }
            s.remove(orig);
            if ours(&s, reply) {
                s.remove(reply);
            }
            self.mirrored(orig, reply, false);
            true
        } else {
            let (mut ga, mut gb) = if a < b {
                let ga = sa.write();
                (ga, sb.write())
            } else {
                let gb = sb.write();
                (sa.write(), gb)
            };
            if !ours(&ga, orig) {
                return false;
            }
            ga.remove(orig);
            if ours(&gb, reply) {
                gb.remove(reply);
            }
            self.mirrored(orig, reply, false);
            true
        };
        if removed {
            self.count.fetch_sub(1, Ordering::Relaxed);
            self.zone_count(orig, false);
        }
        removed
    }

    /// The connections of `shard` for which `pick` (run with the
    /// connection locked, under the shard's read lock) returns true. The
    /// expiry sweep's way through a shard: only what it removes is
    /// cloned, where a clone of every connection's `Arc` would write to
    /// each record the packet threads are using.
    pub fn shard_conns_where(
        &self,
        shard: usize,
        mut pick: impl FnMut(&Conn) -> bool,
    ) -> Vec<ConnRef> {
        match self.shards.get(shard) {
            Some(s) => s
                .read()
                .values()
                .filter(|e| !e.reply && pick(&e.conn.lock()))
                .map(|e| e.conn.clone())
                .collect(),
            None => Vec::new(),
        }
    }

    /// The connections of one shard, by their original-direction entries
    /// (each connection appears in exactly one shard's list).
    pub fn shard_conns(&self, shard: usize) -> Vec<ConnRef> {
        match self.shards.get(shard) {
            Some(s) => s
                .read()
                .values()
                .filter(|e| !e.reply)
                .map(|e| e.conn.clone())
                .collect(),
            None => Vec::new(),
        }
    }
}

impl Default for Table {
    fn default() -> Self {
        Self::new()
    }
}
