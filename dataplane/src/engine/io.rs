//! The port I/O interface the engine drives.

use super::frames::{Desc, Frames};
use crate::vxlan::tunnel::VxlanTunnel;
use std::os::fd::BorrowedFd;

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
    /// engine's tunnel stages (`engine/tunnel_stages.rs`) decapsulate every frame
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
