//! The `type=vxlan` port: a flow-based VXLAN tunnel (OVS's
//! `options:remote_ip=flow options:key=flow`) over an uplink netdev.
//!
//! # Design
//!
//! [`VxlanPort`] pairs the uplink's packet I/O (an AF_XDP socket on the
//! shared UMEM in production, any [`PortIo`] in tests) with a
//! [`VxlanTunnel`], the endpoint, and is itself one OpenFlow port. The
//! uplink's XDP program steers only VXLAN for this node to the socket; the
//! port only moves frames, and the engine's tunnel stages
//! (`engine/tunnel_stages.rs`) use its endpoint on every frame received on it and
//! every output to it:
//!
//! - decapsulation checks the outer headers ([`encap::decap`]) and moves
//!   the descriptor past them (no copy); the tunnel metadata (VNI, outer
//!   source and destination) goes into the packet's flow key;
//! - encapsulation takes `tun_dst` and `tun_id` from the pipeline's output
//!   action and the inner flow's hash from the packet's parse, looks up
//!   the remote VTEP's precomputed header template
//!   ([`neigh::NeighReader`], lock-free), checks the uplink MTU and writes
//!   the outer headers into the frame's headroom (no copy).
//!
//! Frames that fail are dropped and counted per [`TunnelDrop`] reason in
//! the engine's drop counters. All per-packet work is allocation- and
//! lock-free.

pub mod encap;
pub mod neigh;
pub(crate) mod port;
pub mod tunnel;
pub mod underlay;

use crate::engine::{Desc, Frames, PortIo};
use neigh::NeighReader;
use std::os::fd::BorrowedFd;
pub use tunnel::{VxlanParams, VxlanTunnel};

// The tunnel metadata and drop reasons the engine carries for every
// tunnel port; defined with the engine, named here too.
pub use crate::engine::tunnel::{TunnelDrop, TunnelDrops, TunnelMeta};

/// A VXLAN port: the uplink I/O `P` and the tunnel endpoint the engine's
/// tunnel stages use on its frames.
pub struct VxlanPort<P> {
    uplink: P,
    tunnel: VxlanTunnel,
}

impl<P> VxlanPort<P> {
    pub fn new(uplink: P, params: VxlanParams, neigh: NeighReader) -> Self {
        VxlanPort {
            uplink,
            tunnel: VxlanTunnel::new(params, neigh),
        }
    }

    /// The port's own address (`options:local_ip`).
    pub fn local_ip(&self) -> u32 {
        self.tunnel.local_ip()
    }

    pub fn uplink(&self) -> &P {
        &self.uplink
    }

    /// The uplink I/O, for orderly teardown.
    pub fn into_uplink(self) -> P {
        self.uplink
    }

    pub fn uplink_mut(&mut self) -> &mut P {
        &mut self.uplink
    }

    /// The tunnel endpoint, as another packet thread knows it (see
    /// `VxlanTunnel::stand_in`).
    pub fn stand_in(&self) -> VxlanTunnel {
        self.tunnel.stand_in()
    }
}

impl<F: Frames, P: PortIo<F>> PortIo<F> for VxlanPort<P> {
    #[inline]
    fn recv(&mut self, frames: &mut F, out: &mut [Desc]) -> usize {
        self.uplink.recv(frames, out)
    }

    #[inline]
    fn send(&mut self, frames: &mut F, descs: &[Desc]) -> usize {
        self.uplink.send(frames, descs)
    }

    fn maintain(&mut self, frames: &mut F) {
        self.uplink.maintain(frames)
    }

    fn poll_fds<'a>(&'a self, out: &mut Vec<BorrowedFd<'a>>) {
        self.uplink.poll_fds(out)
    }

    fn tunnel(&self) -> Option<&VxlanTunnel> {
        Some(&self.tunnel)
    }

    fn tunnel_mut(&mut self) -> Option<&mut VxlanTunnel> {
        Some(&mut self.tunnel)
    }
}
