//! Frames, descriptors and the port I/O interface the engine drives.

use crate::vxlan::VxlanTunnel;
use std::os::fd::BorrowedFd;

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

/// One port's packet I/O, driven only by the engine thread.
pub trait PortIo<F: Frames> {
    /// Receives up to `out.len()` packets into frames of `frames`.
    fn recv(&mut self, frames: &mut F, out: &mut [Desc]) -> usize;
    /// Queues packets for transmission and returns how many it took; the
    /// engine still owns (and frees) the rest.
    fn send(&mut self, frames: &mut F, descs: &[Desc]) -> usize;
    /// Reclaims transmitted frames and keeps receive buffers topped up.
    fn maintain(&mut self, frames: &mut F);
    /// Adds the fds to sleep on when idle (none, one, or one per queue).
    fn poll_fds<'a>(&'a self, out: &mut Vec<BorrowedFd<'a>>);
    /// The ifindex of a port whose XDP program runs the XDP flow cache
    /// (asked once, when the engine is built): entries may forward from
    /// and to it.
    fn xdp_ifindex(&self) -> Option<u32> {
        None
    }
    /// Whether XDP flow cache entries may redirect frames to this port
    /// now (its peer accepts XDP frames; see `ports::redirect`). Asked
    /// whenever an entry to the port is about to be installed.
    fn xdp_redirect_target(&self) -> bool {
        false
    }
    /// Whether such redirects may carry frames in several buffers (jumbo
    /// frames): the device's driver takes them (asked as above).
    fn xdp_redirect_frags(&self) -> bool {
        false
    }
    /// Ports to the host's own stack (internal ports): traffic from them
    /// may belong to connections the host's conntrack made.
    fn is_host(&self) -> bool {
        false
    }
    /// A tunnel port's endpoint. The port itself only moves frames; the
    /// engine's tunnel stages (`engine/tunnel.rs`) decapsulate every frame
    /// received on it and encapsulate every output to it with the
    /// endpoint. Asked once, when the engine is built, whether the port
    /// has one.
    fn tunnel(&self) -> Option<&VxlanTunnel> {
        None
    }
    /// The endpoint, to use it.
    fn tunnel_mut(&mut self) -> Option<&mut VxlanTunnel> {
        None
    }
    /// Frames dropped on the way to the engine since the port was opened:
    /// by the kernel (RX ring full, fill ring empty), and frames larger
    /// than a jumbo block or arriving when none was free. A syscall per
    /// socket, so asked only when statistics are collected.
    fn io_rx_dropped(&self) -> u64 {
        0
    }
}
