//! One AF_XDP socket bound to (netdev, queue), with its four rings.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use super::multibuf::{pieces, Assembly, Taken};
use super::pool::FramePool;
use super::ring::{ConsRing, ProdRing};
use super::sys::{kick_fd, Mapping};
use super::umem::{FillGrant, Umem};
use super::{XdpDesc, XdpStatistics, XskCounters, XskError, XskMode};

mod bind;

/// Ring sizes and bind options of one socket.
#[derive(Clone, Debug)]
pub struct XskConfig {
    pub rx_size: u32,
    pub tx_size: u32,
    pub fill_size: u32,
    /// Frames lent to the fill ring at first (its share of the UMEM); the
    /// grant grows up to `fill_size` while the socket is busy (see
    /// `FillGrant`).
    pub fill_grant: u32,
    pub comp_size: u32,
    pub mode: XskMode,
    /// Bind with `XDP_USE_NEED_WAKEUP` (sockets sharing a UMEM inherit the
    /// setting of the socket that registered it).
    pub need_wakeup: bool,
    /// Requested `XDP_MAX_TX_SKB_BUDGET` (clamped to `[32, tx_size]`);
    /// silently unused on kernels older than 6.17. The kernel default of 32
    /// makes `sendto()` stop half-way through a 64-packet batch.
    pub tx_skb_budget: u32,
}

impl Default for XskConfig {
    fn default() -> Self {
        XskConfig {
            rx_size: 2048,
            tx_size: 2048,
            fill_size: 2048,
            fill_grant: 2048,
            comp_size: 2048,
            mode: XskMode::Copy,
            need_wakeup: true,
            tx_skb_budget: 256,
        }
    }
}

/// An AF_XDP socket with its RX, TX, fill and completion rings.
///
/// Not `Sync`: the ring cursors assume a single userspace producer/consumer.
pub struct XskSocket {
    // Field order is drop order: ring cursors, then mappings, then the fd.
    rx: ConsRing<XdpDesc>,
    tx: ProdRing<XdpDesc>,
    fill: ProdRing<u64>,
    comp: ConsRing<u64>,
    _maps: [Mapping; 4],
    fd: Arc<OwnedFd>,
    umem: Arc<Umem>,
    ifindex: u32,
    queue: u32,
    need_wakeup: bool,
    /// Copy mode (or no need_wakeup): every TX batch needs a `sendto()`,
    /// whatever the TX ring flag says.
    always_kick: bool,
    tx_skb_budget: Option<u32>,
    counters: XskCounters,
    rx_size: u32,
    fill_size: u32,
    /// Frames the fill ring may hold.
    grant: FillGrant,
    /// Bound with `XDP_USE_SG`: packets may span several descriptors.
    multi_buffer: bool,
    assembly: Assembly,
}

// SAFETY: the raw ring pointers refer to mappings owned by this value; moving
// it to another thread moves the sole userspace user of those rings.
unsafe impl Send for XskSocket {}

impl XskSocket {
    /// Whether packets larger than a frame can be received and sent
    /// (the kernel took `XDP_USE_SG`).
    pub fn multi_buffer(&self) -> bool {
        self.multi_buffer
    }

    /// The socket descriptor, to insert in the XSKMAP or to poll.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    pub fn queue(&self) -> u32 {
        self.queue
    }

    pub fn umem(&self) -> &Arc<Umem> {
        &self.umem
    }

    /// The TX skb budget in force, `None` if the kernel lacks the option.
    pub fn tx_skb_budget(&self) -> Option<u32> {
        self.tx_skb_budget
    }

    pub fn counters(&self) -> &XskCounters {
        &self.counters
    }

    /// Entries of the RX ring.
    pub fn rx_ring_size(&self) -> u32 {
        self.rx_size
    }

    /// Frames the fill ring may hold now (grows with load; see `FillGrant`).
    pub fn fill_grant(&self) -> u32 {
        self.grant.frames()
    }

    /// Receives up to `out.len()` descriptors; the frames now belong to the caller.
    #[inline]
    pub fn rx_burst(&mut self, out: &mut [XdpDesc]) -> usize {
        let n = self.rx.consume(out);
        self.counters.rx_packets += n as u64;
        if n == out.len() && n > 0 {
            // Busy: a bigger fill ring absorbs longer bursts.
            self.grant.grow(self.fill_size);
        }
        n
    }

    /// Receives up to `out.len()` packets, as [`rx_burst`](Self::rx_burst)
    /// does, except that a packet the kernel delivered in several
    /// descriptors (larger than a frame) is copied into a jumbo block of
    /// `pool` and returned as one descriptor there; its pieces go back to
    /// `pool`. May return fewer than it consumed, even none.
    #[inline]
    pub fn recv(&mut self, pool: &mut FramePool, out: &mut [XdpDesc]) -> usize {
        let n = self.rx_burst(out);
        let single = |d: &XdpDesc| d.options & libc::XDP_PKT_CONTD == 0;
        if !self.assembly.is_active() && out[..n].iter().all(single) {
            return n;
        }
        let mut kept = 0;
        for i in 0..n {
            match self.assembly.take(pool, out[i]) {
                Taken::Packet(whole) => {
                    out[kept] = whole;
                    kept += 1;
                }
                Taken::Assembled(whole) => {
                    self.counters.rx_multi_buffer += 1;
                    out[kept] = whole;
                    kept += 1;
                }
                Taken::Dropped => self.counters.rx_multi_buffer_dropped += 1,
                Taken::Pending => {}
            }
        }
        kept
    }

    /// Queues packets for transmission; returns `n`: `descs[..n]` now
    /// belong to the kernel (they come back through [`complete`](Self::complete)),
    /// `descs[n..]` are still the caller's, because the ring was full or
    /// because `descs[n]` is not a packet this socket can send (not inside
    /// one frame or jumbo block of this UMEM, [`Umem::is_valid_packet`]: the
    /// kernel would silently drop it and leak its frame; or larger than a
    /// frame without multi-buffer support). A packet in a jumbo block goes
    /// out as one descriptor per frame it touches. Call
    /// [`kick_tx`](Self::kick_tx) afterwards.
    #[inline]
    pub fn tx_burst(&mut self, descs: &[XdpDesc]) -> usize {
        let single = descs
            .iter()
            .position(|d| !self.umem.is_valid_desc(d))
            .unwrap_or(descs.len());
        let mut n = self.tx.produce(&descs[..single]);
        self.counters.tx_queued += n as u64;
        if n < single {
            return n;
        }
        for d in &descs[single..] {
            let queued = if self.umem.is_valid_desc(d) {
                let q = self.tx.produce(std::slice::from_ref(d)) == 1;
                self.counters.tx_queued += u64::from(q);
                q
            } else {
                self.tx_pieces(d)
            };
            if !queued {
                break;
            }
            n += 1;
        }
        n
    }

    /// Queues a packet spanning several frames of a jumbo block, all its
    /// pieces or none.
    fn tx_pieces(&mut self, d: &XdpDesc) -> bool {
        if !self.multi_buffer || !self.umem.is_valid_packet(d) {
            return false;
        }
        let fs = self.umem.frame_size();
        let n = pieces(d, fs).count() as u32;
        if self.tx.reserve(n) < n {
            return false;
        }
        for (i, piece) in (0..n).zip(pieces(d, fs)) {
            self.tx.set(i, piece);
        }
        self.tx.submit(n);
        self.counters.tx_queued += u64::from(n);
        true
    }

    /// Descriptors queued on TX that the kernel has not consumed yet.
    #[inline]
    pub fn tx_pending(&mut self) -> u32 {
        self.tx.pending()
    }

    /// Asks the kernel to transmit what is in the TX ring. Returns `Ok(true)`
    /// if a kick was made and accepted, `Ok(false)` if none was needed or the
    /// kernel was busy (EAGAIN/EBUSY/ENOBUFS: the descriptors stay queued,
    /// kick again later); errors are fatal conditions such as ENETDOWN.
    pub fn kick_tx(&mut self) -> Result<bool, XskError> {
        if self.tx.pending() == 0 || !self.tx_needs_kick() {
            return Ok(false);
        }
        self.counters.tx_kicks += 1;
        let kicked = kick_fd(self.fd.as_fd());
        if kicked.as_ref().is_ok_and(|k| !k) {
            self.counters.tx_kick_retries += 1;
        }
        kicked
    }

    /// Whether descriptors queued on TX leave only after a `sendto()`
    /// (always in copy mode).
    #[inline]
    pub fn tx_needs_kick(&self) -> bool {
        self.always_kick || self.tx.needs_wakeup()
    }

    /// The socket's fd, shared, for a transmit thread to kick
    /// ([`kick_fd`]) while this value keeps the rings (see
    /// `crate::kicker`). The socket stays open until every holder lets go.
    pub fn shared_fd(&self) -> Arc<OwnedFd> {
        self.fd.clone()
    }

    /// Moves transmitted frames from the completion ring back to `pool`.
    pub fn complete(&mut self, pool: &mut FramePool) -> usize {
        let n = self.comp.peek(u32::MAX);
        for i in 0..n {
            pool.free(self.comp.get(i));
        }
        if n > 0 {
            self.comp.release(n);
        }
        self.counters.tx_completed += u64::from(n);
        n as usize
    }

    /// Posts free frames from `pool` to the fill ring, up to the socket's
    /// grant ([`FillGrant`]).
    pub fn refill(&mut self, pool: &mut FramePool) -> usize {
        let lent = self.fill.pending();
        let room = self.grant.frames().saturating_sub(lent);
        let want = u32::try_from(pool.len()).unwrap_or(u32::MAX).min(room);
        let n = self.fill.reserve(want);
        if n == 0 {
            return 0;
        }
        for (i, addr) in (0..n).zip(pool.top(n as usize).iter()) {
            self.fill.set(i, *addr);
        }
        self.fill.submit(n);
        pool.take(n as usize);
        self.counters.fill_posted += u64::from(n);
        n as usize
    }

    /// Whether the kernel asked for a syscall to resume filling RX (only
    /// with need_wakeup; in copy mode on veth it never does).
    #[inline]
    pub fn needs_rx_wakeup(&self) -> bool {
        self.need_wakeup && self.fill.needs_wakeup()
    }

    /// Wakes the RX path up (non-blocking `recvfrom`).
    pub fn wake_rx(&mut self) -> Result<(), XskError> {
        self.counters.rx_wakeups += 1;
        // SAFETY: recvfrom with no buffer only wakes the kernel's RX processing.
        let rc = unsafe {
            libc::recvfrom(
                self.fd.as_raw_fd(),
                std::ptr::null_mut(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        if rc < 0 {
            let err = io::Error::last_os_error();
            if !matches!(
                err.raw_os_error(),
                Some(libc::EAGAIN | libc::EBUSY | libc::EINTR)
            ) {
                return Err(XskError::io("recvfrom(AF_XDP rx wakeup)", err));
            }
        }
        Ok(())
    }

    /// Kernel drop counters (`XDP_STATISTICS`).
    pub fn statistics(&self) -> Result<XdpStatistics, XskError> {
        let mut st = libc::xdp_statistics {
            rx_dropped: 0,
            rx_invalid_descs: 0,
            tx_invalid_descs: 0,
            rx_ring_full: 0,
            rx_fill_ring_empty_descs: 0,
            tx_ring_empty_descs: 0,
        };
        let mut len = size_of::<libc::xdp_statistics>() as libc::socklen_t;
        // SAFETY: `st`/`len` are valid for writes of the option's size.
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_XDP,
                libc::XDP_STATISTICS,
                (&mut st as *mut libc::xdp_statistics).cast(),
                &mut len,
            )
        };
        if rc != 0 {
            return Err(XskError::io(
                "getsockopt(XDP_STATISTICS)",
                io::Error::last_os_error(),
            ));
        }
        Ok(XdpStatistics {
            rx_dropped: st.rx_dropped,
            rx_invalid_descs: st.rx_invalid_descs,
            tx_invalid_descs: st.tx_invalid_descs,
            rx_ring_full: st.rx_ring_full,
            rx_fill_ring_empty_descs: st.rx_fill_ring_empty_descs,
            tx_ring_empty_descs: st.tx_ring_empty_descs,
        })
    }

    /// Closes the socket and gives back to `pool` the frames that were lent
    /// to the kernel and never returned (fill and TX entries not consumed,
    /// RX and completion entries not read). Dropping without `close` loses
    /// those frames for the life of the pool.
    ///
    /// Frames still inside the kernel at close time (an skb in flight in
    /// copy mode) are not recovered.
    pub fn close(self, pool: &mut FramePool) -> usize {
        let before = pool.len();
        self.close_with(|addr| pool.free(addr));
        pool.len() - before
    }

    /// [`close`](Self::close) without the pool: hands every frame the
    /// kernel gives back to `free` instead, so a socket can be closed (which
    /// waits for an RCU grace period) away from the thread that owns the
    /// pool, and its frames returned to the pool later. Returns how many.
    pub fn close_with(self, mut free: impl FnMut(u64)) -> usize {
        let mut count = 0;
        let mut free = |addr| {
            count += 1;
            free(addr)
        };
        let XskSocket {
            mut rx,
            tx,
            fill,
            mut comp,
            _maps: maps,
            fd,
            assembly,
            ..
        } = self;
        if let Some(block) = assembly.block() {
            free(block);
        }
        // Releasing the last reference closes the socket: the kernel unbinds
        // it, removes it from XSKMAPs and waits for in-flight NAPI
        // (synchronize_net) before returning, so it no longer touches the
        // rings, whose pages stay valid while we keep them mapped.
        drop(fd);
        let mut buf = [XdpDesc::default(); 64];
        loop {
            let n = rx.consume(&mut buf);
            if n == 0 {
                break;
            }
            for d in &buf[..n] {
                free(d.addr);
            }
        }
        let n = comp.peek(u32::MAX);
        for i in 0..n {
            free(comp.get(i));
        }
        fill.unconsumed(&mut free);
        tx.unconsumed(|d| free(d.addr));
        // The cursors point into `maps`; they are plain data, so unmapping
        // now is enough.
        drop(maps);
        count
    }
}

impl std::fmt::Debug for XskSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XskSocket")
            .field("fd", &self.fd.as_raw_fd())
            .field("ifindex", &self.ifindex)
            .field("queue", &self.queue)
            .field("counters", &self.counters)
            .finish()
    }
}
