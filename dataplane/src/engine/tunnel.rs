//! What the engine knows of a packet's tunnel, whatever the tunnel: the
//! metadata set on receive and read on transmit ([`TunnelMeta`]), and why
//! a frame was dropped ([`TunnelDrop`], counted in [`TunnelDrops`]). The
//! tunnel stages (`tunnel_stages.rs`) and the VXLAN endpoint
//! (`crate::vxlan::tunnel`) fill and read them. A leaf: it imports
//! nothing.

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
