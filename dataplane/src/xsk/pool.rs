//! The userspace pool of free frames and jumbo blocks of one UMEM: the
//! only userspace view of packet bytes.

use std::sync::Arc;

use super::umem::{Umem, JUMBO_BLOCK};
use super::{XdpDesc, XskError, XDP_PACKET_HEADROOM};

/// Free frames of one UMEM, owned by the thread that runs the sockets.
///
/// A LIFO stack of frame base addresses, preallocated to hold every frame,
/// so `alloc`/`free` are O(1) with no allocation, and recently freed
/// (cache-warm) frames are reused first. Frames move between the pool (free),
/// the kernel (fill/TX rings) and the engine (received, or being built);
/// the pool is the only userspace view of the bytes, so `&mut FramePool`
/// is the proof that no other reference to a frame's bytes exists.
///
/// Jumbo blocks (packets larger than a frame) have a stack of their own.
/// A packet in a block goes to the kernel as one TX descriptor per frame
/// it touches, and each comes back through the completion ring: only the
/// one in the block's first frame (where every packet in a block starts)
/// frees it; the others are ignored.
///
/// Invariant: an address is in a stack at most once and is a frame or
/// block base. Callers must not free a frame they do not own (e.g. one
/// still in a ring); the pool cannot detect that and the frame would
/// later be handed out twice.
///
/// Several packet threads: [`FramePool::split`] divides the frames and
/// blocks into pools that share nothing but the mapping, one per thread.
/// A frame never passes from one to another (a thread's sockets are
/// filled from and complete into its own pool; packets for another
/// thread's port are copied, see `engine::handoff`), so what the pool
/// owns is still reachable through it alone, and the exclusivity the
/// SAFETY comments below rely on holds per pool.
pub struct FramePool {
    umem: Arc<Umem>,
    free: Vec<u64>,
    jumbo: Vec<u64>,
}

impl FramePool {
    /// Creates the pool of `umem` holding all its frames. Fails if a pool
    /// already exists for this UMEM.
    pub fn new(umem: &Arc<Umem>) -> Result<FramePool, XskError> {
        let mut taken = umem.pool_taken.lock();
        if *taken != 0 {
            return Err(XskError::Config(
                "this UMEM already has a frame pool".into(),
            ));
        }
        *taken = 1;
        let fs = u64::from(umem.frame_size);
        let free = (0..u64::from(umem.n_frames))
            .rev()
            .map(|i| i * fs)
            .collect();
        let jumbo = (0..u64::from(umem.n_jumbo))
            .rev()
            .map(|i| umem.jumbo_base + i * u64::from(JUMBO_BLOCK))
            .collect();
        Ok(FramePool {
            umem: Arc::clone(umem),
            free,
            jumbo,
        })
    }

    pub fn umem(&self) -> &Arc<Umem> {
        &self.umem
    }

    /// Divides the pool into `n` (at least one) pools of nearly equal
    /// shares of its free frames and jumbo blocks, for `n` packet
    /// threads. Frames freed later go to whichever pool frees them, which
    /// must be the one that gave them out (see the type's comment).
    pub fn split(self, n: usize) -> Vec<FramePool> {
        let n = n.max(1);
        // `self` goes below: n pools take its place.
        *self.umem.pool_taken.lock() += n;
        let share = |v: &[u64], i: usize| -> Vec<u64> {
            let (len, mut out) = (v.len(), Vec::with_capacity(v.len()));
            out.extend_from_slice(&v[len * i / n..len * (i + 1) / n]);
            out
        };
        (0..n)
            .map(|i| FramePool {
                umem: self.umem.clone(),
                free: share(&self.free, i),
                jumbo: share(&self.jumbo, i),
            })
            .collect()
    }

    /// Number of free frames.
    #[inline]
    pub fn len(&self) -> usize {
        self.free.len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.free.is_empty()
    }

    /// Takes a free frame; returns its base address.
    #[inline]
    pub fn alloc(&mut self) -> Option<u64> {
        self.free.pop()
    }

    /// Takes a free jumbo block; returns its base address.
    #[inline]
    pub fn alloc_jumbo(&mut self) -> Option<u64> {
        self.jumbo.pop()
    }

    /// Number of free jumbo blocks.
    pub fn jumbo_len(&self) -> usize {
        self.jumbo.len()
    }

    /// Returns the frame containing `addr` (any address inside it) to the
    /// pool; for a jumbo block, any address in its first frame (see the
    /// type's comment).
    #[inline]
    pub fn free(&mut self, addr: u64) {
        let fs = u64::from(self.umem.frame_size);
        if addr < self.umem.jumbo_base {
            if self.free.len() < self.umem.n_frames as usize {
                self.free.push(addr - addr % fs);
            }
        } else if addr < self.umem.len as u64 {
            let rel = addr - self.umem.jumbo_base;
            let in_block = rel % u64::from(JUMBO_BLOCK);
            if in_block < fs && self.jumbo.len() < self.umem.n_jumbo as usize {
                self.jumbo.push(addr - in_block);
            }
        }
    }

    /// The top `n` free frames, to be handed to a ring; `take` removes them.
    #[inline]
    pub(super) fn top(&self, n: usize) -> &[u64] {
        &self.free[self.free.len().saturating_sub(n)..]
    }

    #[inline]
    pub(super) fn take(&mut self, n: usize) {
        let keep = self.free.len().saturating_sub(n);
        self.free.truncate(keep);
    }

    /// The packet bytes described by `desc`, or `None` if it is not a valid
    /// descriptor of this UMEM.
    #[inline]
    pub fn packet(&self, desc: &XdpDesc) -> Option<&[u8]> {
        if !self.umem.is_valid_packet(desc) {
            return None;
        }
        // SAFETY: bounds checked above; the frame is owned by the caller
        // (received or allocated), so the kernel does not write it now, and
        // `&self` excludes a concurrent `&mut` view through this pool.
        Some(unsafe {
            std::slice::from_raw_parts(
                self.umem.base.as_ptr().add(desc.addr as usize),
                desc.len as usize,
            )
        })
    }

    /// Mutable packet bytes described by `desc`.
    #[inline]
    pub fn packet_mut(&mut self, desc: &XdpDesc) -> Option<&mut [u8]> {
        if !self.umem.is_valid_packet(desc) {
            return None;
        }
        // SAFETY: as in `packet`; `&mut self` makes this the only view.
        Some(unsafe {
            std::slice::from_raw_parts_mut(
                self.umem.base.as_ptr().add(desc.addr as usize),
                desc.len as usize,
            )
        })
    }

    /// The whole frame (or jumbo block) containing `addr`, and its offset,
    /// for building a packet at any offset (e.g. pushing headers into the
    /// headroom of a received frame).
    #[inline]
    pub fn frame_mut(&mut self, addr: u64) -> Option<(u64, &mut [u8])> {
        let (base, size) = self.umem.span(addr)?;
        // SAFETY: `span` returns a frame or block inside the mapping;
        // exclusive as in `packet_mut`.
        Some((base, unsafe {
            std::slice::from_raw_parts_mut(
                self.umem.base.as_ptr().add(base as usize),
                size as usize,
            )
        }))
    }

    /// A regular frame and a jumbo block, both owned by the caller, at
    /// once (a read into the frame that may run on into the block).
    pub fn frame_and_block_mut(
        &mut self,
        frame: u64,
        block: u64,
    ) -> Option<(&mut [u8], &mut [u8])> {
        let (fbase, fsize) = self.umem.span(frame)?;
        let (bbase, bsize) = self.umem.span(block)?;
        if fbase >= self.umem.jumbo_base || bbase < self.umem.jumbo_base {
            return None;
        }
        let mem = self.umem.base.as_ptr();
        // SAFETY: a frame below `jumbo_base` and a block above it, both
        // inside the mapping, cannot overlap; exclusive as in `packet_mut`.
        Some(unsafe {
            (
                std::slice::from_raw_parts_mut(mem.add(fbase as usize), fsize as usize),
                std::slice::from_raw_parts_mut(mem.add(bbase as usize), bsize as usize),
            )
        })
    }

    /// Copies the packet `piece` (in a regular frame) into jumbo block
    /// `block` at `at` bytes after the headroom, where a packet received
    /// in several descriptors is put together. False if `piece` is not a
    /// frame's packet or does not fit.
    pub fn append(&mut self, block: u64, at: u32, piece: &XdpDesc) -> bool {
        let room = JUMBO_BLOCK - XDP_PACKET_HEADROOM;
        let fits = u64::from(at) + u64::from(piece.len) <= u64::from(room);
        let in_block = self.umem.span(block) == Some((block, JUMBO_BLOCK));
        if !fits
            || !in_block
            || piece.addr >= self.umem.jumbo_base
            || !self.umem.is_valid_desc(piece)
        {
            return false;
        }
        let dst = block + u64::from(XDP_PACKET_HEADROOM + at);
        // SAFETY: the piece lies in one frame below `jumbo_base` (checked),
        // the destination inside the block (checked `fits`), so the ranges
        // are in the mapping and disjoint.
        unsafe {
            let mem = self.umem.base.as_ptr();
            std::ptr::copy_nonoverlapping(
                mem.add(piece.addr as usize),
                mem.add(dst as usize),
                piece.len as usize,
            );
        }
        true
    }

    /// Copies `data` into a fresh frame, after the same headroom the kernel
    /// leaves on received frames, and returns its descriptor. `None` if the
    /// pool is empty or `data` is empty or does not fit.
    pub fn write_packet(&mut self, data: &[u8]) -> Option<XdpDesc> {
        let room = (self.umem.frame_size - XDP_PACKET_HEADROOM) as usize;
        let jumbo_room = (JUMBO_BLOCK - XDP_PACKET_HEADROOM) as usize;
        let base = match data.len() {
            0 => return None,
            n if n <= room => self.alloc()?,
            n if n <= jumbo_room => self.alloc_jumbo()?,
            _ => return None,
        };
        let desc = XdpDesc {
            addr: base + u64::from(XDP_PACKET_HEADROOM),
            len: data.len() as u32,
            options: 0,
        };
        match self.packet_mut(&desc) {
            Some(dst) => {
                dst.copy_from_slice(data);
                Some(desc)
            }
            None => {
                self.free(base);
                None
            }
        }
    }

    /// Copies the packet of `desc` into a fresh frame (flooding one packet to
    /// several ports needs one frame per TX ring).
    pub fn clone_packet(&mut self, desc: &XdpDesc) -> Option<XdpDesc> {
        if !self.umem.is_valid_packet(desc) {
            return None;
        }
        let (src, size) = self.umem.span(desc.addr)?;
        let base = if size == self.umem.frame_size {
            self.alloc()?
        } else {
            self.alloc_jumbo()?
        };
        let copy = XdpDesc {
            addr: base + (desc.addr - src),
            len: desc.len,
            options: 0,
        };
        // SAFETY: both descriptors are valid (same offset and length inside
        // two different frames or blocks, `base` came from a free stack so it
        // is not `desc`'s); the two ranges therefore do not overlap.
        unsafe {
            let mem = self.umem.base.as_ptr();
            std::ptr::copy_nonoverlapping(
                mem.add(desc.addr as usize),
                mem.add(copy.addr as usize),
                desc.len as usize,
            );
        }
        Some(copy)
    }
}

impl Drop for FramePool {
    fn drop(&mut self) {
        *self.umem.pool_taken.lock() -= 1;
    }
}

impl std::fmt::Debug for FramePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FramePool")
            .field("free", &self.free.len())
            .field("jumbo", &self.jumbo.len())
            .field("umem", &self.umem)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_alloc_free_and_bounds() {
        let umem = Umem::new(4, 2048, false).expect("mmap");
        let mut pool = FramePool::new(&umem).expect("pool");
        assert!(FramePool::new(&umem).is_err(), "one pool per UMEM");
        assert_eq!(pool.len(), 4);
        assert_eq!(pool.alloc(), Some(0), "lowest frame first");
        let d = pool.write_packet(&[1, 2, 3]).expect("frame");
        assert_eq!(d.addr, 2048 + u64::from(XDP_PACKET_HEADROOM));
        assert_eq!(pool.packet(&d), Some(&[1u8, 2, 3][..]));
        let c = pool.clone_packet(&d).expect("clone");
        assert_eq!(c.addr % 2048, d.addr % 2048);
        assert_eq!(pool.packet(&c), Some(&[1u8, 2, 3][..]));
        // crossing a frame boundary or leaving the UMEM is rejected
        assert!(pool
            .packet(&XdpDesc {
                addr: 2040,
                len: 16,
                options: 0
            })
            .is_none());
        assert!(pool
            .packet(&XdpDesc {
                addr: 4 * 2048,
                len: 1,
                options: 0
            })
            .is_none());
        assert!(pool.write_packet(&[0u8; 2048]).is_none());
        pool.free(d.addr);
        pool.free(c.addr + 5);
        pool.free(1 << 40);
        assert_eq!(pool.len(), 3);
        assert_eq!(pool.alloc(), Some(c.addr - c.addr % 2048));
        drop(pool);
        assert!(
            FramePool::new(&umem).is_ok(),
            "pool can be recreated after drop"
        );
    }

    #[test]
    fn split_pools_share_out_every_frame_once() {
        let umem = Umem::with_jumbo(10, 2048, 3, false).expect("mmap");
        let pools = FramePool::new(&umem).expect("pool").split(3);
        assert!(FramePool::new(&umem).is_err(), "the shares are pools");
        let mut frames: Vec<u64> = pools.iter().flat_map(|p| p.free.clone()).collect();
        let lens: Vec<usize> = pools.iter().map(FramePool::len).collect();
        assert_eq!(lens, [3, 3, 4]);
        frames.sort_unstable();
        frames.dedup();
        assert_eq!(frames.len(), 10, "each frame in one pool");
        let blocks: usize = pools.iter().map(FramePool::jumbo_len).sum();
        assert_eq!(blocks, 3);
        drop(pools);
        assert!(FramePool::new(&umem).is_ok(), "all shares gone");
    }

    #[test]
    fn jumbo_blocks_hold_packets_across_frames() {
        let umem = Umem::with_jumbo(4, 4096, 2, false).expect("mmap");
        let mut pool = FramePool::new(&umem).expect("pool");
        assert_eq!((pool.len(), pool.jumbo_len()), (4, 2));
        let big: Vec<u8> = (0..9000u32).map(|i| i as u8).collect();
        let d = pool.write_packet(&big).expect("a block");
        assert_eq!(d.addr, 4 * 4096 + u64::from(XDP_PACKET_HEADROOM));
        assert_eq!(pool.packet(&d), Some(&big[..]));
        assert_eq!(pool.len(), 4, "no frame taken");
        let c = pool.clone_packet(&d).expect("the other block");
        assert_eq!(pool.packet(&c), Some(&big[..]));
        assert!(pool.clone_packet(&d).is_none(), "no block left");
        // Too big for a block, or crossing out of one.
        assert!(pool.write_packet(&[0u8; 16384]).is_none());
        assert!(!umem.is_valid_packet(&XdpDesc {
            addr: d.addr,
            len: 16384,
            options: 0
        }));
        // The completions of a block's later frames do not free it.
        pool.free(d.addr - d.addr % 4096 + 4096);
        pool.free(d.addr - d.addr % 4096 + 3 * 4096 + 5);
        assert_eq!(pool.jumbo_len(), 0);
        pool.free(d.addr + 3000);
        assert_eq!(pool.jumbo_len(), 1);

        // Pieces of a received packet put together in a block.
        let block = pool.alloc_jumbo().expect("block");
        let a = pool.write_packet(&big[..3840]).expect("frame");
        let b = pool.write_packet(&big[3840..5000]).expect("frame");
        assert!(pool.append(block, 0, &a));
        assert!(pool.append(block, 3840, &b));
        assert!(!pool.append(block, 16000, &b), "past the block's room");
        assert!(!pool.append(a.addr, 0, &b), "not a block");
        let whole = XdpDesc {
            addr: block + u64::from(XDP_PACKET_HEADROOM),
            len: 5000,
            options: 0,
        };
        assert_eq!(pool.packet(&whole), Some(&big[..5000]));
        let (f, j) = pool.frame_and_block_mut(a.addr, block).expect("disjoint");
        assert_eq!((f.len(), j.len()), (4096, 16384));
        assert!(pool.frame_and_block_mut(block, a.addr).is_none());
    }
}
