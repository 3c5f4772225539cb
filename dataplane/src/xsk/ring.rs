//! Single-producer/single-consumer descriptor rings shared with the kernel.
//!
//! Layout (set by the kernel, read with `XDP_MMAP_OFFSETS`): a `u32` producer
//! index, a `u32` consumer index, a `u32` flags word and an array of
//! `size` entries (`size` a power of two). Indices are free-running `u32`
//! counters: they are never masked when stored, only when used to address
//! an entry, so `prod - cons` (wrapping) is the fill level even across the
//! 2^32 wrap.
//!
//! Each side keeps cached copies of both indices. Its own index is only
//! written back ("published") once a whole batch is done, so one release
//! store and at most one acquire load of the peer's index are paid per
//! batch, not per descriptor:
//! - producer: `reserve` computes free slots from the cached consumer and
//!   reloads it (acquire: the peer finished reading those slots) only when
//!   the cache says there is not enough room; `submit` publishes the
//!   producer index with a release store so the entries are visible first.
//! - consumer: `peek` reloads the producer (acquire: the entries are
//!   written) only when the cache is exhausted; `release` publishes the
//!   consumer index (release: we are done reading the slots).
//!
//! A ring value is owned by exactly one thread (the one owning the socket);
//! the only concurrency is with the kernel on the other side.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU32, Ordering};

/// Free slots for a producer whose published-or-cached index is `prod`,
/// given the consumer index `cons` and a ring of `size` entries.
#[inline]
pub(crate) fn producer_free(size: u32, prod: u32, cons: u32) -> u32 {
    size.wrapping_sub(prod.wrapping_sub(cons))
}

/// Entries ready for a consumer at `cons` when the producer is at `prod`.
#[inline]
pub(crate) fn consumer_avail(prod: u32, cons: u32) -> u32 {
    prod.wrapping_sub(cons)
}

/// Where the shared words and the entry array of one ring live.
///
/// The pointers stay valid for the lifetime of the owning mapping (an
/// mmap of the socket's ring, or a test buffer); `RingPtrs` itself never
/// frees anything.
#[derive(Clone, Copy)]
pub(crate) struct RingPtrs<T> {
    pub producer: *const AtomicU32,
    pub consumer: *const AtomicU32,
    pub flags: *const AtomicU32,
    pub entries: *mut T,
}

/// Cursor state common to both ring directions.
struct RingCore<T> {
    ptrs: RingPtrs<T>,
    mask: u32,
    size: u32,
    cached_prod: u32,
    cached_cons: u32,
    _entries: PhantomData<T>,
}

impl<T: Copy> RingCore<T> {
    /// # Safety
    /// `ptrs` must point to a live ring of `size` entries (power of two) that
    /// outlives the returned value, with properly aligned shared words.
    unsafe fn new(ptrs: RingPtrs<T>, size: u32) -> Self {
        debug_assert!(size.is_power_of_two());
        // SAFETY: the caller guarantees the words are valid and aligned.
        let (prod, cons) = unsafe {
            (
                (*ptrs.producer).load(Ordering::Acquire),
                (*ptrs.consumer).load(Ordering::Acquire),
            )
        };
        RingCore {
            ptrs,
            mask: size - 1,
            size,
            cached_prod: prod,
            cached_cons: cons,
            _entries: PhantomData,
        }
    }

    #[inline]
    fn load_producer(&self) -> u32 {
        // SAFETY: valid for the ring's lifetime (constructor contract).
        unsafe { (*self.ptrs.producer).load(Ordering::Acquire) }
    }

    #[inline]
    fn load_consumer(&self) -> u32 {
        // SAFETY: valid for the ring's lifetime (constructor contract).
        unsafe { (*self.ptrs.consumer).load(Ordering::Acquire) }
    }

    #[inline]
    fn flags(&self) -> u32 {
        // SAFETY: valid for the ring's lifetime (constructor contract). The
        // flag is a hint the kernel may change at any time; no ordering with
        // the entries is needed.
        unsafe { (*self.ptrs.flags).load(Ordering::Relaxed) }
    }

    #[inline]
    fn read(&self, idx: u32) -> T {
        // SAFETY: `idx & mask < size`, inside the entry array; the entry
        // belongs to this side at this moment (ring protocol), so the kernel
        // does not write it concurrently.
        unsafe {
            self.ptrs
                .entries
                .add((idx & self.mask) as usize)
                .read_volatile()
        }
    }

    #[inline]
    fn write(&mut self, idx: u32, value: T) {
        // SAFETY: as in `read`; the slot was reserved by this producer.
        unsafe {
            self.ptrs
                .entries
                .add((idx & self.mask) as usize)
                .write_volatile(value)
        }
    }
}

/// Producer side of a ring (fill and TX rings).
pub(crate) struct ProdRing<T> {
    core: RingCore<T>,
}

impl<T: Copy> ProdRing<T> {
    /// # Safety
    /// As [`RingCore::new`]; additionally this must be the only producer.
    pub(crate) unsafe fn new(ptrs: RingPtrs<T>, size: u32) -> Self {
        ProdRing {
            // SAFETY: the caller upholds RingCore::new's contract (see
            // this function's).
            core: unsafe { RingCore::new(ptrs, size) },
        }
    }

    /// Number of slots (at most `want`) that can be written now.
    #[inline]
    pub(crate) fn reserve(&mut self, want: u32) -> u32 {
        let c = &mut self.core;
        let mut free = producer_free(c.size, c.cached_prod, c.cached_cons);
        if free < want {
            c.cached_cons = c.load_consumer();
            free = producer_free(c.size, c.cached_prod, c.cached_cons);
        }
        free.min(want)
    }

    /// Writes the `i`-th entry of the current reservation (`i < reserve()`).
    #[inline]
    pub(crate) fn set(&mut self, i: u32, value: T) {
        let idx = self.core.cached_prod.wrapping_add(i);
        self.core.write(idx, value);
    }

    /// Publishes the first `n` reserved entries to the kernel.
    #[inline]
    pub(crate) fn submit(&mut self, n: u32) {
        let c = &mut self.core;
        c.cached_prod = c.cached_prod.wrapping_add(n);
        // SAFETY: valid for the ring's lifetime; release orders the entry
        // writes before the index the kernel polls.
        unsafe { (*c.ptrs.producer).store(c.cached_prod, Ordering::Release) }
    }

    /// Copies as many of `src` as fit and publishes them; returns the count.
    #[inline]
    pub(crate) fn produce(&mut self, src: &[T]) -> usize {
        let want = u32::try_from(src.len()).unwrap_or(u32::MAX);
        let n = self.reserve(want);
        for (i, v) in (0..n).zip(src.iter()) {
            self.set(i, *v);
        }
        if n > 0 {
            self.submit(n);
        }
        n as usize
    }

    /// Entries published but not yet consumed by the kernel.
    #[inline]
    pub(crate) fn pending(&mut self) -> u32 {
        self.core.cached_cons = self.core.load_consumer();
        consumer_avail(self.core.cached_prod, self.core.cached_cons)
    }

    #[inline]
    pub(crate) fn needs_wakeup(&self) -> bool {
        self.core.flags() & libc::XDP_RING_NEED_WAKEUP != 0
    }

    /// Reads back the entries the kernel never consumed (only meaningful
    /// once the kernel side is gone: see `XskSocket::close`).
    pub(crate) fn unconsumed(&self, mut f: impl FnMut(T)) {
        let c = &self.core;
        let mut idx = c.load_consumer();
        while idx != c.cached_prod {
            f(c.read(idx));
            idx = idx.wrapping_add(1);
        }
    }
}

/// Consumer side of a ring (RX and completion rings).
pub(crate) struct ConsRing<T> {
    core: RingCore<T>,
}

impl<T: Copy> ConsRing<T> {
    /// # Safety
    /// As [`RingCore::new`]; additionally this must be the only consumer.
    pub(crate) unsafe fn new(ptrs: RingPtrs<T>, size: u32) -> Self {
        ConsRing {
            // SAFETY: the caller upholds RingCore::new's contract (see
            // this function's).
            core: unsafe { RingCore::new(ptrs, size) },
        }
    }

    /// Number of entries (at most `want`) ready to be read.
    #[inline]
    pub(crate) fn peek(&mut self, want: u32) -> u32 {
        let c = &mut self.core;
        let mut avail = consumer_avail(c.cached_prod, c.cached_cons);
        if avail < want {
            c.cached_prod = c.load_producer();
            avail = consumer_avail(c.cached_prod, c.cached_cons);
        }
        avail.min(want)
    }

    /// Reads the `i`-th entry of the current peek (`i < peek()`).
    #[inline]
    pub(crate) fn get(&self, i: u32) -> T {
        self.core.read(self.core.cached_cons.wrapping_add(i))
    }

    /// Returns the first `n` peeked slots to the kernel.
    #[inline]
    pub(crate) fn release(&mut self, n: u32) {
        let c = &mut self.core;
        c.cached_cons = c.cached_cons.wrapping_add(n);
        // SAFETY: valid for the ring's lifetime; release orders our reads of
        // the entries before the kernel may overwrite them.
        unsafe { (*c.ptrs.consumer).store(c.cached_cons, Ordering::Release) }
    }

    /// Copies up to `out.len()` entries out and releases them.
    #[inline]
    pub(crate) fn consume(&mut self, out: &mut [T]) -> usize {
        let want = u32::try_from(out.len()).unwrap_or(u32::MAX);
        let n = self.peek(want);
        for (i, slot) in (0..n).zip(out.iter_mut()) {
            *slot = self.get(i);
        }
        if n > 0 {
            self.release(n);
        }
        n as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An in-memory ring with the kernel's layout; the test plays the kernel
    /// by touching the shared words directly.
    struct FakeRing {
        words: Box<[AtomicU32; 3]>,
        entries: Box<[u64]>,
    }

    impl FakeRing {
        fn new(size: u32, start: u32) -> Self {
            FakeRing {
                words: Box::new([
                    AtomicU32::new(start),
                    AtomicU32::new(start),
                    AtomicU32::new(0),
                ]),
                entries: vec![0u64; size as usize].into_boxed_slice(),
            }
        }
        fn ptrs(&mut self) -> RingPtrs<u64> {
            RingPtrs {
                producer: &self.words[0],
                consumer: &self.words[1],
                flags: &self.words[2],
                entries: self.entries.as_mut_ptr(),
            }
        }
        fn prod(&self) -> u32 {
            self.words[0].load(Ordering::SeqCst)
        }
        fn cons(&self) -> u32 {
            self.words[1].load(Ordering::SeqCst)
        }
    }

    #[test]
    fn index_arithmetic_wraps() {
        assert_eq!(producer_free(8, 0, 0), 8);
        assert_eq!(producer_free(8, 5, 1), 4);
        // producer wrapped past u32::MAX, consumer not yet
        assert_eq!(producer_free(8, 2, u32::MAX - 1), 4);
        assert_eq!(consumer_avail(2, u32::MAX - 1), 4);
        assert_eq!(consumer_avail(7, 7), 0);
        assert_eq!(producer_free(8, 3, 3u32.wrapping_sub(8)), 0);
    }

    #[test]
    fn producer_wraps_and_respects_consumer() {
        let size = 8;
        let start = u32::MAX - 2;
        let mut fake = FakeRing::new(size, start);
        // SAFETY: the fake ring outlives `ring` (dropped at end of scope).
        let mut ring = unsafe { ProdRing::new(fake.ptrs(), size) };
        let vals: Vec<u64> = (100..110).collect();
        assert_eq!(ring.produce(&vals), 8, "only `size` slots exist");
        assert_eq!(fake.prod(), start.wrapping_add(8));
        assert_eq!(ring.reserve(1), 0, "ring is full until the consumer moves");
        // The "kernel" consumes 3 entries; they were written at masked slots.
        for k in 0..3u32 {
            let idx = start.wrapping_add(k) & (size - 1);
            assert_eq!(fake.entries[idx as usize], 100 + u64::from(k));
        }
        fake.words[1].store(start.wrapping_add(3), Ordering::SeqCst);
        assert_eq!(ring.reserve(5), 3);
        assert_eq!(ring.produce(&[7, 8, 9, 10]), 3);
        assert_eq!(fake.prod(), start.wrapping_add(11));
        assert_eq!(ring.pending(), 8);
    }

    #[test]
    fn consumer_sees_only_published_entries() {
        let size = 4;
        let start = u32::MAX;
        let mut fake = FakeRing::new(size, start);
        // SAFETY: the fake ring outlives `ring`.
        let mut ring = unsafe { ConsRing::new(fake.ptrs(), size) };
        let mut out = [0u64; 8];
        assert_eq!(ring.consume(&mut out), 0);
        // "kernel" writes 3 entries across the wrap and publishes them
        for k in 0..3u32 {
            let idx = start.wrapping_add(k) & (size - 1);
            fake.entries[idx as usize] = 40 + u64::from(k);
        }
        fake.words[0].store(start.wrapping_add(3), Ordering::SeqCst);
        assert_eq!(ring.peek(2), 2);
        assert_eq!(ring.get(0), 40);
        assert_eq!(ring.get(1), 41);
        ring.release(2);
        assert_eq!(fake.cons(), start.wrapping_add(2));
        assert_eq!(ring.consume(&mut out), 1);
        assert_eq!(out[0], 42);
        assert_eq!(fake.cons(), start.wrapping_add(3));
    }

    #[test]
    fn need_wakeup_flag_is_read() {
        let mut fake = FakeRing::new(4, 0);
        // SAFETY: the fake ring outlives `ring`.
        let ring = unsafe { ProdRing::<u64>::new(fake.ptrs(), 4) };
        assert!(!ring.needs_wakeup());
        fake.words[2].store(libc::XDP_RING_NEED_WAKEUP, Ordering::SeqCst);
        assert!(ring.needs_wakeup());
    }

    #[test]
    fn unconsumed_lists_entries_left_to_the_kernel() {
        let mut fake = FakeRing::new(4, 10);
        // SAFETY: the fake ring outlives `ring`.
        let mut ring = unsafe { ProdRing::new(fake.ptrs(), 4) };
        ring.produce(&[1, 2, 3]);
        fake.words[1].store(11, Ordering::SeqCst);
        let mut left = Vec::new();
        ring.unconsumed(|v| left.push(v));
        assert_eq!(left, vec![2, 3]);
    }
}
