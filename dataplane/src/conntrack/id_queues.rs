//! Ids every packet thread must hear about: connections whose XDP cache
//! entries must go, watches that fired (see `links.rs`, `absent.rs`).
//!
//! Any packet thread may have installed entries for a connection (one
//! direction arrives on a port one thread serves, the other on another's),
//! and conntrack does not know which did, so every id goes to every
//! thread's queue; a thread ignores ids it has no entry for. Pushing takes
//! a lock; a thread with nothing queued pays one atomic load to learn so.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Most packet threads the queues serve (one pending bit each).
pub const MAX_THREADS: usize = 64;

pub struct IdQueues {
    queues: Mutex<Vec<Vec<usize>>>,
    /// Bit `t`: thread `t`'s queue is not empty.
    pending: AtomicU64,
}

impl Default for IdQueues {
    fn default() -> Self {
        IdQueues {
            queues: Mutex::new(vec![Vec::new()]),
            pending: AtomicU64::new(0),
        }
    }
}

impl IdQueues {
    /// Serves `threads` packet threads (1 to [`MAX_THREADS`]), set before
    /// they run.
    pub fn set_threads(&self, threads: usize) {
        self.queues
            .lock()
            .resize_with(threads.clamp(1, MAX_THREADS), Vec::new);
    }

    /// Queues `ids` for every thread.
    pub fn push_all(&self, ids: &[usize]) {
        if ids.is_empty() {
            return;
        }
        let mut queues = self.queues.lock();
        for q in queues.iter_mut() {
            q.extend_from_slice(ids);
        }
        let all = if queues.len() == MAX_THREADS {
            u64::MAX
        } else {
            (1u64 << queues.len()) - 1
        };
        self.pending.fetch_or(all, Ordering::Release);
    }

    /// Moves thread `thread`'s ids into `out`; returns whether there were
    /// any.
    pub fn take(&self, thread: usize, out: &mut Vec<usize>) -> bool {
        let bit = 1u64 << (thread % MAX_THREADS);
        if self.pending.load(Ordering::Acquire) & bit == 0 {
            return false;
        }
        let mut queues = self.queues.lock();
        self.pending.fetch_and(!bit, Ordering::Relaxed);
        match queues.get_mut(thread) {
            Some(q) => {
                out.append(q);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_thread_gets_every_id_once() {
        let q = IdQueues::default();
        q.set_threads(3);
        q.push_all(&[5, 7]);
        q.push_all(&[9]);
        for t in 0..3 {
            let mut out = Vec::new();
            assert!(q.take(t, &mut out));
            assert_eq!(out, [5, 7, 9]);
            assert!(!q.take(t, &mut out), "taken once");
        }
    }

    #[test]
    fn one_thread_by_default() {
        let q = IdQueues::default();
        q.push_all(&[1]);
        let mut out = Vec::new();
        assert!(q.take(0, &mut out));
        assert_eq!(out, [1]);
        assert!(!q.take(1, &mut out));
    }
}
