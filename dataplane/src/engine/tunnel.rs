//! The engine's tunnel stages and what they know of a packet's tunnel:
//! the metadata set on receive and read on transmit ([`TunnelMeta`]), and
//! why a frame was dropped ([`TunnelDrop`], counted in [`TunnelDrops`]).
//!
//! A tunnel port only moves frames (its uplink's); its endpoint
//! ([`crate::vxlan::VxlanTunnel`], from `PortIo::tunnel_mut`) is used
//! here: decapsulation is a stage over each batch received on the port,
//! before parsing, and encapsulation a stage of each output to it, after
//! the pipeline, with the inner flow's hash from the packet's parse.

/// Tunnel metadata of one packet: set from the outer headers on receive,
/// taken from the output action on transmit (`tun_src` unused there).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TunnelMeta {
    pub tun_id: u64,
    pub tun_src: u32,
    pub tun_dst: u32,
}

/// Why a tunnel port dropped a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TunnelDrop {
    /// Received: not VXLAN for this port (wrong address, port or protocol).
    NotVxlan,
    /// Received: shorter than its headers or lengths say.
    Truncated,
    /// Received: outer IPv4 header with options, a fragment, a bad
    /// checksum or version.
    BadOuterIp,
    /// Received: UDP length or checksum wrong.
    BadUdp,
    /// Received: VXLAN flags other than exactly I, or reserved bits set.
    BadFlags,
    /// Sent: the output action carried no `tun_dst`.
    NoDestination,
    /// Sent: the route to `tun_dst` does not leave through the uplink.
    NoRoute,
    /// Sent: the next hop's MAC is not resolved yet (the kernel is asked).
    NoNeighbour,
    /// Sent: the encapsulated packet exceeds the uplink MTU.
    TooBig,
    /// Sent: the frame has no room for the outer headers.
    NoHeadroom,
}

/// Counters per [`TunnelDrop`] reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TunnelDrops {
    pub not_vxlan: u64,
    pub truncated: u64,
    pub bad_outer_ip: u64,
    pub bad_udp: u64,
    pub bad_flags: u64,
    pub no_destination: u64,
    pub no_route: u64,
    pub no_neighbour: u64,
    pub too_big: u64,
    pub no_headroom: u64,
    /// Not a drop: frames that waited for their next hop instead of being
    /// dropped as `no_neighbour` (those that waited in vain are counted
    /// there too).
    pub waited_for_neighbour: u64,
}

impl TunnelDrops {
    /// Adds another packet thread's drops.
    pub fn merge(&mut self, o: &TunnelDrops) {
        let TunnelDrops {
            not_vxlan,
            truncated,
            bad_outer_ip,
            bad_udp,
            bad_flags,
            no_destination,
            no_route,
            no_neighbour,
            too_big,
            no_headroom,
            waited_for_neighbour,
        } = o;
        self.not_vxlan += not_vxlan;
        self.truncated += truncated;
        self.bad_outer_ip += bad_outer_ip;
        self.bad_udp += bad_udp;
        self.bad_flags += bad_flags;
        self.no_destination += no_destination;
        self.no_route += no_route;
        self.no_neighbour += no_neighbour;
        self.too_big += too_big;
        self.no_headroom += no_headroom;
        self.waited_for_neighbour += waited_for_neighbour;
    }

    pub fn count(&mut self, reason: TunnelDrop) {
        let c = match reason {
            TunnelDrop::NotVxlan => &mut self.not_vxlan,
            TunnelDrop::Truncated => &mut self.truncated,
            TunnelDrop::BadOuterIp => &mut self.bad_outer_ip,
            TunnelDrop::BadUdp => &mut self.bad_udp,
            TunnelDrop::BadFlags => &mut self.bad_flags,
            TunnelDrop::NoDestination => &mut self.no_destination,
            TunnelDrop::NoRoute => &mut self.no_route,
            TunnelDrop::NoNeighbour => &mut self.no_neighbour,
            TunnelDrop::TooBig => &mut self.too_big,
            TunnelDrop::NoHeadroom => &mut self.no_headroom,
        };
        *c += 1;
    }

    /// Malformed received frames, all reasons together.
    pub fn malformed(&self) -> u64 {
        self.truncated + self.bad_outer_ip + self.bad_udp + self.bad_flags
    }
}

use super::io::Desc;
use super::{Engine, Frames, PortIo};

impl<F: Frames, P: PortIo<F>> Engine<F, P> {
    /// The decapsulation stage: strips the outer headers of the frames of
    /// `batch`, received on tunnel port `i` (moving each descriptor past
    /// them, nothing copied), writing the `n`th kept frame's tunnel
    /// metadata to `meta[n]`; drops and counts the malformed. Returns how
    /// many are left, compacted at the front.
    pub(super) fn decap_stage(
        &mut self,
        i: usize,
        batch: &mut [Desc],
        meta: &mut [TunnelMeta],
    ) -> usize {
        let port = &mut self.ports[i];
        let Some(tunnel) = port.io.tunnel_mut() else {
            return batch.len();
        };
        let mut kept = 0;
        for j in 0..batch.len() {
            match tunnel.decap(&mut self.frames, batch[j]) {
                Ok((inner, m)) => {
                    // A sender's offload may reach us through an underlay
                    // of veths too (the uplink's XDP program completes
                    // them alike).
                    xbr_packet::csum::complete_partial(self.frames.bytes(inner.addr, inner.len));
                    batch[kept] = inner;
                    meta[kept] = m;
                    kept += 1;
                }
                Err(reason) => {
                    port.totals.rx_dropped += 1;
                    self.drops.tunnel.count(reason);
                    self.frames.free(batch[j].addr);
                }
            }
        }
        kept
    }

    /// The encapsulation stage of one output: writes the outer headers
    /// for `tun` in front of `desc`, whose inner flow hashes to
    /// `flow_hash`, with tunnel port `idx`'s endpoint.
    #[inline]
    pub(super) fn encap(
        &mut self,
        idx: usize,
        desc: Desc,
        tun: TunnelMeta,
        flow_hash: u32,
    ) -> Result<Desc, TunnelDrop> {
        match self.ports[idx].io.tunnel_mut() {
            Some(t) => t.encap(&mut self.frames, desc, tun, flow_hash),
            // Only tunnel ports come here.
            None => Ok(desc),
        }
    }
}
