//! Frames and descriptors: where the engine's packets live and how they
//! are named. A leaf: the engine, the ports and the tunnel endpoint all
//! build on it.

/// A frame in the frame store: `addr` of the first byte, `len` bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Desc {
    pub addr: u64,
    pub len: u32,
}

/// Where packet bytes live. Frames are fixed-size slots named by address.
pub trait Frames {
    /// Takes a free frame; `None` when all are in use.
    fn alloc(&mut self) -> Option<u64>;
    /// Gives a frame back (any address inside the frame; for a block from
    /// `alloc_large`, inside its first frame's worth of bytes).
    fn free(&mut self, addr: u64);
    /// Takes a free block for a packet larger than a frame (a jumbo block
    /// of the UMEM), addressed by its first byte; `None` when none is
    /// free or the store has none.
    fn alloc_large(&mut self) -> Option<u64> {
        None
    }
    /// The bytes `addr..addr+len` of a frame the engine owns.
    fn bytes(&mut self, addr: u64, len: u32) -> &mut [u8];
    /// Copies a packet into a newly allocated frame; `None` when no frame is
    /// free.
    fn copy(&mut self, src: Desc) -> Option<Desc>;
    /// Bytes of the frame in front of `addr`, room to prepend headers into.
    fn headroom(&self, addr: u64) -> u32;
}
