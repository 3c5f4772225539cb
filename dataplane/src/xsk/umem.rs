//! UMEM (the packet memory shared with the kernel) and the userspace pool
//! of free frames.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use super::{XdpDesc, XskError, XskMode};

/// Frame size used unless the caller asks otherwise; see the module comment
/// in `xsk/mod.rs` for the choice.
pub const DEFAULT_FRAME_SIZE: u32 = 4096;

/// Bytes of a jumbo block: after the headroom, room for a 9216-byte MTU
/// frame with VLAN tags and a VXLAN encapsulation, and a multiple of both
/// frame sizes.
pub const JUMBO_BLOCK: u32 = 16384;

/// Registration state of a UMEM, touched only when sockets bind (control
/// path), hence a mutex.
#[derive(Default)]
pub(super) struct Registration {
    /// Bound sockets using this UMEM. Any live one can be named in
    /// `sxdp_shared_umem_fd` by the next socket; when none is left, the kernel
    /// has released its registration and the next socket registers again.
    pub bound: Vec<Weak<OwnedFd>>,
    /// Bind mode fixed by the socket that registered the UMEM (sockets that
    /// share it inherit the mode and the need_wakeup setting).
    pub mode: Option<(XskMode, bool)>,
    /// Whether the kernel took `XDP_USE_SG` (multi-buffer packets) from the
    /// socket that registered the UMEM; sockets sharing it inherit it.
    pub multi_buffer: bool,
}

/// Packet memory: `n_frames` frames of `frame_size` bytes in one anonymous
/// mapping, registered with the kernel by the first socket bound to it,
/// followed by `n_jumbo` blocks of [`JUMBO_BLOCK`] bytes for packets larger
/// than a frame (see "Jumbo frames" in the module comment). The kernel
/// sees the blocks as ordinary chunks; they are never lent to a fill ring.
///
/// `Umem` itself never reads or writes packet bytes: that is the
/// [`FramePool`](super::pool::FramePool)'s job, and there is at most one pool per UMEM, so every
/// frame has a single userspace owner (the pool's thread) at any time.
pub struct Umem {
    pub(super) base: NonNull<u8>,
    pub(super) len: usize,
    pub(super) frame_size: u32,
    pub(super) n_frames: u32,
    /// Offset of the first jumbo block (the end of the frames).
    pub(super) jumbo_base: u64,
    pub(super) n_jumbo: u32,
    hugepages: bool,
    pub(super) registration: Mutex<Registration>,
    /// Frame pools alive over this UMEM: one, or the shares `split`
    /// made of it (see `FramePool`).
    pub(super) pool_taken: Mutex<usize>,
    /// Sum of the fill-ring grants of the sockets bound now; see
    /// [`FillGrant`].
    granted: AtomicU32,
}

/// How many frames a socket may keep in its fill ring (lent to the
/// kernel). All grants together stay within half the UMEM (the other half
/// is for frames in flight: RX and TX rings, copies): a socket starts with
/// its share (the `initial` its port was sized for) if that budget allows,
/// else what is left but at least [`INITIAL_FILL`], and doubles its
/// grant, up to its fill ring's size, each time it receives a full batch
/// and the budget allows. The ring may be deeper than the share: a busy
/// port then takes frames idle ports were not lent, and can absorb
/// bursts of a ring's depth (a sender's stall of a few milliseconds
/// queues that many frames), while idle ports pin no more than their
/// share. A port added beyond the ports the UMEM was sized for still
/// finds frames: without grants the sockets bound first would lend every
/// frame to the kernel and later ones would receive nothing.
/// A grant is returned when its socket closes; it never shrinks
/// otherwise (frames in a fill ring cannot be taken back).
pub(super) struct FillGrant {
    umem: Arc<Umem>,
    frames: u32,
}

/// The least a socket is granted, even beyond the budget, so that a new
/// port always receives: one receive batch and then some.
const INITIAL_FILL: u32 = 128;

impl FillGrant {
    /// A grant of `initial` frames (at most `ring`) as far as the budget
    /// allows, never below [`INITIAL_FILL`].
    pub(super) fn new(umem: &Arc<Umem>, initial: u32, ring: u32) -> Self {
        let initial = initial.min(ring);
        let mut g = FillGrant {
            umem: Arc::clone(umem),
            frames: INITIAL_FILL.min(initial),
        };
        umem.granted.fetch_add(g.frames, Ordering::Relaxed);
        while g.frames < initial && g.grow(initial) {}
        g
    }

    pub(super) fn frames(&self) -> u32 {
        self.frames
    }

    /// Doubles the grant (at most to `ring`) as far as the UMEM's budget
    /// allows; false if it could not grow.
    pub(super) fn grow(&mut self, ring: u32) -> bool {
        let want = (self.frames * 2).min(ring).saturating_sub(self.frames);
        if want == 0 {
            return false;
        }
        let budget = self.umem.n_frames / 2;
        let granted = &self.umem.granted;
        let mut cur = granted.load(Ordering::Relaxed);
        loop {
            let add = want.min(budget.saturating_sub(cur));
            if add == 0 {
                return false;
            }
            match granted.compare_exchange_weak(
                cur,
                cur + add,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    self.frames += add;
                    return true;
                }
                Err(now) => cur = now,
            }
        }
    }
}

impl Drop for FillGrant {
    fn drop(&mut self) {
        self.umem.granted.fetch_sub(self.frames, Ordering::Relaxed);
    }
}

// SAFETY: `Umem` only holds the address of the mapping; the bytes are
// accessed through the `FramePool` (one, enforced by `pool_taken`, or the
// disjoint shares `FramePool::split` made of it) and by the kernel. The registration state is behind a mutex.
unsafe impl Send for Umem {}
// SAFETY: see `Send`; `&Umem` gives no access to the bytes.
unsafe impl Sync for Umem {}

impl Umem {
    /// Maps `n_frames * frame_size` bytes. `frame_size` must be 2048 or 4096
    /// (the aligned-chunk sizes every kernel accepts). Tries 2 MiB huge pages
    /// first when `try_hugepages` is set, falling back to normal pages.
    pub fn new(n_frames: u32, frame_size: u32, try_hugepages: bool) -> Result<Arc<Umem>, XskError> {
        Umem::with_jumbo(n_frames, frame_size, 0, try_hugepages)
    }

    /// [`new`](Self::new) with `n_jumbo` jumbo blocks after the frames.
    pub fn with_jumbo(
        n_frames: u32,
        frame_size: u32,
        n_jumbo: u32,
        try_hugepages: bool,
    ) -> Result<Arc<Umem>, XskError> {
        if frame_size != 2048 && frame_size != 4096 {
            return Err(XskError::Config(format!(
                "frame size {frame_size} is not 2048 or 4096"
            )));
        }
        if n_frames == 0 {
            return Err(XskError::Config("a UMEM needs at least one frame".into()));
        }
        let jumbo_base = (n_frames as usize)
            .checked_mul(frame_size as usize)
            .ok_or_else(|| {
                XskError::Config(format!("{n_frames} frames of {frame_size} bytes overflow"))
            })?;
        let len = (n_jumbo as usize)
            .checked_mul(JUMBO_BLOCK as usize)
            .and_then(|j| j.checked_add(jumbo_base))
            .ok_or_else(|| XskError::Config(format!("{n_jumbo} jumbo blocks overflow")))?;
        let (base, hugepages) = match try_hugepages.then(|| map_anonymous(len, true)) {
            Some(Ok(p)) => (p, true),
            _ => (
                map_anonymous(len, false).map_err(|e| XskError::io("mmap UMEM", e))?,
                false,
            ),
        };
        Ok(Arc::new(Umem {
            base,
            len,
            frame_size,
            n_frames,
            jumbo_base: jumbo_base as u64,
            n_jumbo,
            hugepages,
            registration: Mutex::new(Registration::default()),
            pool_taken: Mutex::new(0),
            granted: AtomicU32::new(0),
        }))
    }

    pub fn frame_size(&self) -> u32 {
        self.frame_size
    }

    pub fn n_frames(&self) -> u32 {
        self.n_frames
    }

    /// Whether the mapping got huge pages.
    pub fn uses_hugepages(&self) -> bool {
        self.hugepages
    }

    /// Jumbo blocks after the frames.
    pub fn n_jumbo(&self) -> u32 {
        self.n_jumbo
    }

    /// The frame or jumbo block holding `addr`: its offset and size.
    #[inline]
    pub fn span(&self, addr: u64) -> Option<(u64, u32)> {
        if addr < self.jumbo_base {
            let fs = u64::from(self.frame_size);
            Some((addr - addr % fs, self.frame_size))
        } else if addr < self.len as u64 {
            let rel = addr - self.jumbo_base;
            Some((addr - rel % u64::from(JUMBO_BLOCK), JUMBO_BLOCK))
        } else {
            None
        }
    }

    /// True if `desc` is a packet userspace may hold: non-empty and inside
    /// one frame or one jumbo block (then it may cross frame boundaries,
    /// and goes to the kernel as one descriptor per frame it touches).
    #[inline]
    pub fn is_valid_packet(&self, desc: &XdpDesc) -> bool {
        match self.span(desc.addr) {
            Some((base, size)) => {
                desc.len != 0 && desc.addr - base + u64::from(desc.len) <= u64::from(size)
            }
            None => false,
        }
    }

    /// True if the kernel would accept `desc` for TX in aligned mode: inside
    /// the UMEM, non-empty, not crossing a frame boundary.
    #[inline]
    pub fn is_valid_desc(&self, desc: &XdpDesc) -> bool {
        let fs = u64::from(self.frame_size);
        let offset = desc.addr % fs;
        desc.len != 0 && desc.addr < self.len as u64 && offset + u64::from(desc.len) <= fs
    }

    /// Registers the memory on `fd` (`XDP_UMEM_REG`).
    pub(super) fn register(&self, fd: &OwnedFd) -> Result<(), XskError> {
        let reg = libc::xdp_umem_reg {
            addr: self.base.as_ptr() as u64,
            len: self.len as u64,
            chunk_size: self.frame_size,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        // SAFETY: `reg` is a valid, initialised xdp_umem_reg for the option's
        // length; the mapping it names lives as long as this Umem, which every
        // socket using it keeps alive through its Arc.
        let rc = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_XDP,
                libc::XDP_UMEM_REG,
                (&reg as *const libc::xdp_umem_reg).cast(),
                size_of::<libc::xdp_umem_reg>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(XskError::io(
                "setsockopt(XDP_UMEM_REG)",
                io::Error::last_os_error(),
            ));
        }
        Ok(())
    }
}

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` describe the mapping made in `new`; every socket
        // and the pool hold an Arc, so nothing references it any more.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}

impl std::fmt::Debug for Umem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Umem")
            .field("n_frames", &self.n_frames)
            .field("n_jumbo", &self.n_jumbo)
            .field("frame_size", &self.frame_size)
            .field("hugepages", &self.hugepages)
            .finish()
    }
}

fn map_anonymous(len: usize, huge: bool) -> io::Result<NonNull<u8>> {
    let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE;
    if huge {
        flags |= libc::MAP_HUGETLB;
    }
    // SAFETY: anonymous mapping at a kernel-chosen address; no existing memory
    // is affected.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned NULL"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_grants_stay_in_budget_and_grow_with_load() {
        let umem = Umem::new(4096, 2048, false).expect("mmap");
        // Within the budget (half of 4096): full rings.
        let a = FillGrant::new(&umem, 1024, 1024);
        let b = FillGrant::new(&umem, 1024, 1024);
        assert_eq!((a.frames(), b.frames()), (1024, 1024));
        // Beyond it: the least grant, which does not grow.
        let mut c = FillGrant::new(&umem, 1024, 1024);
        assert_eq!(c.frames(), INITIAL_FILL);
        assert!(!c.grow(1024));
        // A closed socket's grant is free again for the busy one.
        drop(a);
        assert!(c.grow(1024));
        assert_eq!(c.frames(), 2 * INITIAL_FILL);
        while c.grow(1024) {}
        assert_eq!(c.frames(), 1024, "capped by the ring");
        let small = FillGrant::new(&umem, 64, 64);
        assert_eq!(small.frames(), 64);
        drop((b, c, small));
        assert_eq!(umem.granted.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_deep_ring_starts_at_its_share_and_grows_into_it() {
        let umem = Umem::new(8192, 2048, false).expect("mmap");
        let mut busy = FillGrant::new(&umem, 1024, 4096);
        let idle = FillGrant::new(&umem, 1024, 4096);
        assert_eq!((busy.frames(), idle.frames()), (1024, 1024));
        assert!(busy.grow(4096));
        assert_eq!(busy.frames(), 2048);
        // The budget (4096) is spent: 2048 + 1024, and 1024 left.
        assert!(busy.grow(4096));
        assert_eq!(busy.frames(), 3072);
        assert!(!busy.grow(4096));
        drop(idle);
        assert!(busy.grow(4096));
        assert_eq!(busy.frames(), 4096, "capped by the ring");
    }

    #[test]
    fn rejects_bad_geometry() {
        assert!(Umem::new(16, 1000, false).is_err());
        assert!(Umem::new(0, 4096, false).is_err());
    }
}
