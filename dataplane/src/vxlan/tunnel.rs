//! One VXLAN tunnel endpoint: what the engine's tunnel stages need to
//! decapsulate what a VXLAN port receives and encapsulate what is output
//! to it (the port's own address and UDP port, the uplink's MTU, the
//! remote VTEPs' header templates), and the outer headers an XDP flow
//! cache entry writes for one inner flow.
//!
//! Owned by the packet thread that serves the port (another thread holds
//! a stand-in with its own view of the same next hops); every call is
//! lock- and allocation-free: the templates are read from a snapshot the
//! resolver publishes (`neigh.rs`).

use super::encap::{self, FlowOuter};
use super::neigh::{Miss, NeighReader};
use crate::engine::frames::{Desc, Frames};
use crate::engine::tunnel::{TunnelDrop, TunnelMeta};
use xbr_packet::vxlan::{OUTER_IP_OVERHEAD, OUTER_LEN};

/// The settings a VXLAN port needs on the packet path.
#[derive(Clone, Copy, Debug)]
pub struct VxlanParams {
    pub local_ip: u32,
    pub dst_port: u16,
    /// The uplink's MTU at start: the largest outer IPv4 packet, until the
    /// resolver reports a new one.
    pub mtu: u32,
}

/// A VXLAN endpoint: settings, next hops, the outer IPv4 id counter.
pub struct VxlanTunnel {
    params: VxlanParams,
    neigh: NeighReader,
    /// Outer IPv4 id, incremented per packet (DF is set, so it only has to
    /// be distinct enough for duplicate detection, RFC 6864).
    ip_id: u16,
    /// The resolver's snapshot generation the XDP flow cache last saw.
    xdp_seen: u64,
}

impl VxlanTunnel {
    pub fn new(params: VxlanParams, neigh: NeighReader) -> Self {
        VxlanTunnel {
            params,
            neigh,
            ip_id: 0,
            xdp_seen: 0,
        }
    }

    /// The endpoint's own address (`options:local_ip`): the tunnel
    /// destination of what it decapsulates.
    pub fn local_ip(&self) -> u32 {
        self.params.local_ip
    }

    /// The endpoint as another packet thread knows it: the same settings
    /// and a view of its own of the same next hops (see
    /// `engine::handoff`).
    pub fn stand_in(&self) -> VxlanTunnel {
        VxlanTunnel::new(self.params, self.neigh.another())
    }

    /// Checks a received frame's outer headers and returns where the inner
    /// frame is (the descriptor moved past them, nothing copied) and its
    /// tunnel metadata.
    #[inline]
    pub fn decap<F: Frames>(
        &self,
        frames: &mut F,
        desc: Desc,
    ) -> Result<(Desc, TunnelMeta), TunnelDrop> {
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

    /// Writes the outer headers for `tun` into the headroom of the frame
    /// `desc`, whose inner flow hashes to `flow_hash`
    /// ([`encap::flow_hash`]); returns the encapsulated frame.
    #[inline]
    pub fn encap<F: Frames>(
        &mut self,
        frames: &mut F,
        desc: Desc,
        tun: TunnelMeta,
        flow_hash: u32,
    ) -> Result<Desc, TunnelDrop> {
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
        let out = Desc {
            addr: desc.addr - OUTER_LEN as u64,
            len: desc.len + OUTER_LEN as u32,
        };
        self.ip_id = self.ip_id.wrapping_add(1);
        template.write(
            frames.bytes(out.addr, out.len),
            inner_len,
            self.ip_id,
            encap::src_port(flow_hash),
            (tun.tun_id & 0x00ff_ffff) as u32,
        );
        Ok(out)
    }

    /// The outer headers for the frames of one inner flow (whose hash is
    /// `flow_hash`) sent with `tun`, for an XDP flow cache entry to write;
    /// `None` when `encap` would not send such a frame now (no
    /// destination, next hop not resolved).
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

    /// Whether `flow_outer` may answer otherwise since the last call (a
    /// next hop or the uplink's MTU changed): the engine then invalidates
    /// the XDP flow cache. Asked at the start of every round.
    pub fn next_hops_changed(&mut self) -> bool {
        self.neigh.refresh();
        let g = self.neigh.generation();
        let changed = g != self.xdp_seen;
        self.xdp_seen = g;
        changed
    }
}
