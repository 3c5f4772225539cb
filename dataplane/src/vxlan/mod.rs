//! The `type=vxlan` port: a flow-based VXLAN tunnel (OVS's
//! `options:remote_ip=flow options:key=flow`) over an uplink netdev.
//!
//! # Design
//!
//! [`VxlanPort`] wraps the uplink's packet I/O (an AF_XDP socket on the
//! shared UMEM in production, any [`PortIo`] in tests) and is itself one
//! OpenFlow port. The uplink's XDP program steers only VXLAN for this node
//! to the socket; the engine calls [`PortIo::decap`] on each received frame
//! and [`PortIo::encap`] on each frame it outputs here:
//!
//! - decap checks the outer headers ([`encap::decap`]) and moves the
//!   descriptor past them (no copy); the tunnel metadata (VNI, outer
//!   source and destination) goes into the packet's flow key;
//! - encap takes `tun_dst` and `tun_id` from the pipeline's output action,
//!   looks up the remote VTEP's precomputed header template
//!   ([`neigh::NeighReader`], lock-free), checks the uplink MTU and writes
//!   the outer headers into the frame's headroom (no copy).
//!
//! Frames that fail are dropped and counted per [`TunnelDrop`] reason in
//! the engine's drop counters. All per-packet work is allocation- and
//! lock-free.

pub mod encap;
pub mod neigh;
pub(crate) mod port;
pub mod underlay;

use crate::engine::{Desc, Frames, PortIo};
use encap::FlowOuter;
use neigh::{Miss, NeighReader};
use std::os::fd::BorrowedFd;
use xbr_packet::vxlan::{OUTER_IP_OVERHEAD, OUTER_LEN};

// The tunnel metadata and drop reasons the engine carries for every
// tunnel port; defined with the engine, named here too.
pub use crate::engine::tunnel::{TunnelDrop, TunnelDrops, TunnelMeta};

/// The settings a VXLAN port needs on the packet path.
#[derive(Clone, Copy, Debug)]
pub struct VxlanParams {
    pub local_ip: u32,
    pub dst_port: u16,
    /// The uplink's MTU at start: the largest outer IPv4 packet, until the
    /// resolver reports a new one.
    pub mtu: u32,
}

/// A VXLAN port over the uplink I/O `P`.
pub struct VxlanPort<P> {
    uplink: P,
    params: VxlanParams,
    neigh: NeighReader,
    /// Outer IPv4 id, incremented per packet (DF is set, so it only has to
    /// be distinct enough for duplicate detection, RFC 6864).
    ip_id: u16,
    /// The resolver's snapshot generation the XDP flow cache last saw.
    xdp_seen: u64,
}

impl<P> VxlanPort<P> {
    pub fn new(uplink: P, params: VxlanParams, neigh: NeighReader) -> Self {
        VxlanPort {
            uplink,
            params,
            neigh,
            ip_id: 0,
            xdp_seen: 0,
        }
    }

    /// The port's own address (`options:local_ip`).
    pub fn local_ip(&self) -> u32 {
        self.params.local_ip
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

    /// The port as another packet thread knows it: its settings and a
    /// view of the next hops of its own, without the uplink (see
    /// `engine::handoff`).
    pub fn stand_in(&self) -> VxlanPort<()> {
        VxlanPort::new((), self.params, self.neigh.another())
    }

    /// The outer headers for the frames of one inner flow, for an XDP
    /// flow cache entry (see `PortIo::xdp_encap`).
    pub fn flow_outer(&mut self, tun: TunnelMeta, flow_hash: u32) -> Option<FlowOuter> {
        if tun.tun_dst == 0 {
            return None;
        }
        self.neigh.refresh();
        let mtu = self.neigh.mtu().unwrap_or(self.params.mtu);
        let template = self.neigh.lookup(tun.tun_dst).ok()?;
        Some(template.flow_outer(
            (tun.tun_id & 0x00ff_ffff) as u32,
            encap::src_port(flow_hash),
            mtu,
        ))
    }

    /// Whether `flow_outer` may answer otherwise since the last call.
    pub fn next_hops_changed(&mut self) -> bool {
        self.neigh.refresh();
        let g = self.neigh.generation();
        let changed = g != self.xdp_seen;
        self.xdp_seen = g;
        changed
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

    fn is_tunnel(&self) -> bool {
        true
    }

    #[inline]
    fn decap(&mut self, frames: &mut F, desc: Desc) -> Result<(Desc, TunnelMeta), TunnelDrop> {
        let frame = frames.bytes(desc.addr, desc.len);
        let d = encap::decap(frame, self.params.local_ip, self.params.dst_port)?;
        Ok((
            Desc {
                addr: desc.addr + d.offset as u64,
                len: d.len as u32,
            },
            d.meta,
        ))
    }

    #[inline]
    fn encap(&mut self, frames: &mut F, desc: Desc, tun: TunnelMeta) -> Result<Desc, TunnelDrop> {
        if tun.tun_dst == 0 {
            return Err(TunnelDrop::NoDestination);
        }
        let inner_len = desc.len as usize;
        self.neigh.refresh();
        let mtu = self.neigh.mtu().unwrap_or(self.params.mtu);
        if (inner_len + OUTER_IP_OVERHEAD) as u64 > u64::from(mtu) {
            return Err(TunnelDrop::TooBig);
        }
        if (frames.headroom(desc.addr) as usize) < OUTER_LEN {
            return Err(TunnelDrop::NoHeadroom);
        }
        let template = self.neigh.lookup(tun.tun_dst).map_err(|m| match m {
            Miss::Resolving => TunnelDrop::NoNeighbour,
            Miss::NoRoute => TunnelDrop::NoRoute,
        })?;
        let hash = encap::flow_hash(frames.bytes(desc.addr, desc.len));
        let out = Desc {
            addr: desc.addr - OUTER_LEN as u64,
            len: desc.len + OUTER_LEN as u32,
        };
        self.ip_id = self.ip_id.wrapping_add(1);
        template.write(
            frames.bytes(out.addr, out.len),
            inner_len,
            self.ip_id,
            encap::src_port(hash),
            (tun.tun_id & 0x00ff_ffff) as u32,
        );
        Ok(out)
    }

    fn xdp_encap(&mut self, tun: TunnelMeta, flow_hash: u32) -> Option<FlowOuter> {
        self.flow_outer(tun, flow_hash)
    }

    fn xdp_encap_changed(&mut self) -> bool {
        self.next_hops_changed()
    }
}
