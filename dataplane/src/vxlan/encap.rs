//! VXLAN encapsulation and decapsulation of one frame, in place.
//!
//! Encapsulation writes a precomputed [`Template`] (outer Ethernet, IPv4,
//! UDP and VXLAN headers for one remote endpoint, as VPP and OVS's native
//! tunnels do) into the 50 bytes of headroom in front of the inner frame
//! and patches the per-packet words: IPv4 total length, id and checksum
//! (from the template's precomputed partial sum), UDP length and source
//! port, VNI. Decapsulation checks the outer headers and returns where the
//! inner frame starts; the caller moves its descriptor, nothing is copied.

use crate::engine::tunnel::{TunnelDrop, TunnelMeta};
use flowtable::key::{Field, FlowKey};
use flowtable::matching::{IP_PROTO_SCTP, IP_PROTO_TCP};
use xbr_packet::csum::ones_sum;
use xbr_packet::vxlan::{
    fold, Ipv4Packet, UdpPacket, VxlanPacket, VxlanRepr, WireError, ETH_HEADER_LEN, ETH_TYPE_IPV4,
    IPV4_DF, IPV4_HEADER_LEN, IP_PROTO_UDP, OUTER_IP_OVERHEAD, OUTER_LEN, UDP_HEADER_LEN,
    VXLAN_HEADER_LEN,
};

/// TTL of the outer header (OVS's default for tunnels, and Linux's).
pub const OUTER_TTL: u8 = 64;
const IP_AT: usize = ETH_HEADER_LEN;
const UDP_AT: usize = IP_AT + IPV4_HEADER_LEN;
const VXLAN_AT: usize = UDP_AT + UDP_HEADER_LEN;

/// The outer headers towards one remote VTEP, with every field that does
/// not depend on the packet filled in. Immutable once built; 52 bytes plus
/// the sum, so a snapshot of all nodes' templates is small.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    hdr: [u8; OUTER_LEN],
    /// One's-complement sum of the IPv4 header words that do not change
    /// per packet (everything but total length, id and checksum).
    ip_fixed_sum: u32,
}

impl Template {
    pub fn new(
        src_mac: [u8; 6],
        dst_mac: [u8; 6],
        src_ip: u32,
        dst_ip: u32,
        dst_port: u16,
    ) -> Template {
        let mut hdr = [0u8; OUTER_LEN];
        hdr[0..6].copy_from_slice(&dst_mac);
        hdr[6..12].copy_from_slice(&src_mac);
        hdr[12..14].copy_from_slice(&ETH_TYPE_IPV4.to_be_bytes());
        if let Ok(mut ip) = Ipv4Packet::new_checked(&mut hdr[IP_AT..UDP_AT]) {
            ip.set_version_ihl();
            ip.set_flags_frag(IPV4_DF);
            ip.set_ttl(OUTER_TTL);
            ip.set_protocol(IP_PROTO_UDP);
            ip.set_src(src_ip);
            ip.set_dst(dst_ip);
        }
        if let Ok(mut udp) = UdpPacket::new_checked(&mut hdr[UDP_AT..VXLAN_AT]) {
            udp.set_dst_port(dst_port);
        }
        if let Ok(mut vx) = VxlanPacket::new_checked(&mut hdr[VXLAN_AT..]) {
            VxlanRepr { vni: 0 }.emit(&mut vx);
        }
        // Length, id and checksum are still zero here.
        let ip_fixed_sum = ones_sum(&hdr[IP_AT..UDP_AT]);
        Template { hdr, ip_fixed_sum }
    }

    pub fn dst_mac(&self) -> [u8; 6] {
        let mut m = [0u8; 6];
        m.copy_from_slice(&self.hdr[0..6]);
        m
    }

    /// Writes the outer headers into `out[..OUTER_LEN]` for an inner frame
    /// of `inner_len` bytes. The caller has checked that the outer length
    /// fits in 16 bits (the MTU check does).
    #[inline]
    pub fn write(&self, out: &mut [u8], inner_len: usize, ip_id: u16, src_port: u16, vni: u32) {
        let Some(out) = out.get_mut(..OUTER_LEN) else {
            return;
        };
        out.copy_from_slice(&self.hdr);
        let total = (inner_len + OUTER_IP_OVERHEAD) as u16;
        let csum = !fold(self.ip_fixed_sum + u32::from(total) + u32::from(ip_id));
        if let Ok(mut ip) = Ipv4Packet::new_checked(&mut out[IP_AT..UDP_AT]) {
            ip.set_total_len(total);
            ip.set_ident(ip_id);
            ip.set_checksum(csum);
        }
        if let Ok(mut udp) = UdpPacket::new_checked(&mut out[UDP_AT..VXLAN_AT]) {
            udp.set_src_port(src_port);
            udp.set_len(total - IPV4_HEADER_LEN as u16);
            // 0: no checksum, as RFC 7348 allows for IPv4 and OVS and Linux
            // send by default.
            udp.set_checksum(0);
        }
        if let Ok(mut vx) = VxlanPacket::new_checked(&mut out[VXLAN_AT..]) {
            vx.set_vni(vni);
        }
    }
}

/// The outer headers of one inner flow's packets towards one remote VTEP,
/// for the XDP flow cache to write (bpf/xbr_xdp.c, `xbr_write_outer`):
/// the template with the flow's VNI and UDP source port in place; the
/// words that change per packet (IPv4 total length, id, checksum, UDP
/// length) are left zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowOuter {
    pub hdr: [u8; OUTER_LEN],
    /// One's-complement sum of the outer IPv4 header as in `hdr`.
    pub ip_sum: u32,
    /// The longest inner frame the uplink's MTU takes.
    pub max_inner: u16,
}

impl Template {
    /// The outer headers for the packets of a flow with `vni` and
    /// `src_port`, over an uplink with `mtu`.
    pub fn flow_outer(&self, vni: u32, src_port: u16, mtu: u32) -> FlowOuter {
        let mut hdr = self.hdr;
        if let Ok(mut udp) = UdpPacket::new_checked(&mut hdr[UDP_AT..VXLAN_AT]) {
            udp.set_src_port(src_port);
        }
        if let Ok(mut vx) = VxlanPacket::new_checked(&mut hdr[VXLAN_AT..]) {
            vx.set_vni(vni & 0x00ff_ffff);
        }
        let max_inner = mtu
            .saturating_sub(OUTER_IP_OVERHEAD as u32)
            .min(u32::from(u16::MAX)) as u16;
        FlowOuter {
            hdr,
            ip_sum: self.ip_fixed_sum,
            max_inner,
        }
    }
}

/// A hash of the inner frame's flow, for the outer UDP source port (RFC
/// 7348 §5: entropy for ECMP and RSS on the path), read from the flow key
/// the frame was parsed into (no second pass over its bytes): for IPv4 the
/// addresses, protocol and, for TCP, UDP and SCTP when not a fragment, the
/// ports; for anything else the Ethernet addresses and type. Packets of
/// one flow always get the same port (no reordering across paths), and an
/// XDP flow cache entry computes the same one from its key
/// (`fastpath::cache::entry::flow_hash`).
#[inline]
pub fn flow_hash(inner: &FlowKey) -> u32 {
    if inner.get(Field::EthType) == u64::from(ETH_TYPE_IPV4) {
        let proto = inner.get(Field::IpProto) as u8;
        let ports = (inner.get(Field::IpFrag) == 0
            && matches!(proto, IP_PROTO_TCP | IP_PROTO_UDP | IP_PROTO_SCTP))
        .then(|| (inner.get(Field::TpSrc) as u32) << 16 | inner.get(Field::TpDst) as u32 & 0xffff);
        return flow_hash_ipv4(
            inner.get(Field::IpSrc) as u32,
            inner.get(Field::IpDst) as u32,
            proto,
            ports,
        );
    }
    let mut h: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut mix = |v: u64| {
        h = (h ^ v).wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 32;
    };
    mix(inner.get(Field::EthDst));
    mix(inner.get(Field::EthSrc) << 16 | inner.get(Field::EthType));
    (h ^ (h >> 29)) as u32
}

/// [`flow_hash`] of an IPv4 packet from its fields: the addresses, the
/// protocol and, for TCP, UDP and SCTP when not a fragment, the word of
/// the two ports (the XDP flow cache computes an entry's source port
/// from its key with this).
#[inline]
pub fn flow_hash_ipv4(src: u32, dst: u32, proto: u8, ports: Option<u32>) -> u32 {
    let mut h: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut mix = |v: u64| {
        h = (h ^ v).wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 32;
    };
    mix(u64::from(src) << 32 | u64::from(dst));
    mix(u64::from(proto));
    if let Some(p) = ports {
        mix(u64::from(p));
    }
    (h ^ (h >> 29)) as u32
}

/// The outer UDP source port for a flow hash, in RFC 7348's suggested
/// dynamic range 49152-65535.
#[inline]
pub fn src_port(hash: u32) -> u16 {
    0xc000 | (hash as u16 & 0x3fff)
}

/// Where the inner frame of a checked VXLAN packet is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decapped {
    /// Offset of the inner Ethernet header in the received frame.
    pub offset: usize,
    /// Inner frame length (Ethernet padding after the UDP payload is cut).
    pub len: usize,
    pub meta: TunnelMeta,
}

/// Shortest inner frame accepted: an Ethernet header.
const MIN_INNER: usize = ETH_HEADER_LEN;

/// Checks the outer headers of a frame received on the uplink and locates
/// the inner frame. `local_ip` and `dst_port` are the port's; the XDP
/// program already selected on them, but the frame is checked again
/// because nothing from the wire is trusted.
pub fn decap(frame: &[u8], local_ip: u32, dst_port: u16) -> Result<Decapped, TunnelDrop> {
    let eth_type = frame
        .get(12..14)
        .map(|s| u16::from_be_bytes([s[0], s[1]]))
        .ok_or(TunnelDrop::Truncated)?;
    if eth_type != ETH_TYPE_IPV4 {
        return Err(TunnelDrop::NotVxlan);
    }
    let ip_buf = frame.get(IP_AT..).ok_or(TunnelDrop::Truncated)?;
    let ip = Ipv4Packet::new_checked(ip_buf).map_err(|_| TunnelDrop::Truncated)?;
    let total = ip.check_tunnel_header().map_err(|e| match e {
        WireError::IpLength => TunnelDrop::Truncated,
        _ => TunnelDrop::BadOuterIp,
    })?;
    if ip.protocol() != IP_PROTO_UDP || ip.dst() != local_ip {
        return Err(TunnelDrop::NotVxlan);
    }
    let udp_buf = ip_buf
        .get(IPV4_HEADER_LEN..total)
        .ok_or(TunnelDrop::Truncated)?;
    let udp = UdpPacket::new_checked(udp_buf).map_err(|_| TunnelDrop::Truncated)?;
    if udp.dst_port() != dst_port {
        return Err(TunnelDrop::NotVxlan);
    }
    let udp_len = usize::from(udp.len());
    if udp_len != udp_buf.len() {
        return Err(TunnelDrop::BadUdp);
    }
    if udp_len < UDP_HEADER_LEN + VXLAN_HEADER_LEN + MIN_INNER {
        return Err(TunnelDrop::Truncated);
    }
    udp.verify_checksum(ip.src(), ip.dst())
        .map_err(|_| TunnelDrop::BadUdp)?;
    let vx =
        VxlanPacket::new_checked(&udp_buf[UDP_HEADER_LEN..]).map_err(|_| TunnelDrop::Truncated)?;
    let repr = VxlanRepr::parse(&vx).map_err(|_| TunnelDrop::BadFlags)?;
    Ok(Decapped {
        offset: OUTER_LEN,
        len: udp_len - UDP_HEADER_LEN - VXLAN_HEADER_LEN,
        meta: TunnelMeta {
            tun_id: u64::from(repr.vni),
            tun_src: ip.src(),
            tun_dst: ip.dst(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use xbr_packet::csum::pseudo_header;

    const LOCAL: u32 = 0x0a00_000b;
    const REMOTE: u32 = 0x0a00_000c;

    fn inner() -> Vec<u8> {
        xbr_packet::testframes::udp_frame()
    }

    /// `inner` encapsulated by a template from REMOTE to LOCAL.
    fn encapsulated(inner: &[u8], vni: u32) -> Vec<u8> {
        let t = Template::new(
            [2, 0, 0, 0, 0, 0xc],
            [2, 0, 0, 0, 0, 0xb],
            REMOTE,
            LOCAL,
            4789,
        );
        let mut f = vec![0u8; OUTER_LEN];
        t.write(&mut f, inner.len(), 7, src_port(hash_of(inner)), vni);
        f.extend_from_slice(inner);
        f
    }

    #[test]
    fn template_writes_valid_outer_headers() {
        let i = inner();
        let f = encapsulated(&i, 0x12_3456);
        let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
        assert_eq!(ip.check_tunnel_header(), Ok(20 + 16 + i.len()));
        assert_eq!(ip.flags_frag(), IPV4_DF);
        assert_eq!(ip.ttl(), 64);
        assert_eq!(ip.ident(), 7);
        assert_eq!((ip.src(), ip.dst()), (REMOTE, LOCAL));
        let udp = UdpPacket::new_checked(&f[34..]).unwrap();
        assert_eq!(udp.dst_port(), 4789);
        assert!(udp.src_port() >= 49152);
        assert_eq!(usize::from(udp.len()), 16 + i.len());
        assert_eq!(udp.checksum(), 0);
        assert_eq!(&f[42..50], &[0x08, 0, 0, 0, 0x12, 0x34, 0x56, 0]);
        assert_eq!(&f[0..6], &[2, 0, 0, 0, 0, 0xb]);
        assert_eq!(&f[50..], &i[..]);
    }

    #[test]
    fn decap_roundtrip() {
        let i = inner();
        let mut f = encapsulated(&i, 0xab_cdef);
        f.extend_from_slice(&[0u8; 6]); // Ethernet padding is cut
        let d = decap(&f, LOCAL, 4789).unwrap();
        assert_eq!(d.offset, 50);
        assert_eq!(&f[d.offset..d.offset + d.len], &i[..]);
        assert_eq!(
            d.meta,
            TunnelMeta {
                tun_id: 0xab_cdef,
                tun_src: REMOTE,
                tun_dst: LOCAL
            }
        );
    }

    #[test]
    fn malformed_packets_are_named() {
        let good = encapsulated(&inner(), 5);
        let check = |f: &[u8]| decap(f, LOCAL, 4789);
        // every truncation is refused, never a panic
        for n in 0..good.len() {
            assert!(check(&good[..n]).is_err(), "truncated to {n}");
        }
        let mut bad_flags = good.clone();
        bad_flags[42] = 0x0c;
        assert_eq!(check(&bad_flags), Err(TunnelDrop::BadFlags));
        let mut no_i = good.clone();
        no_i[42] = 0;
        assert_eq!(check(&no_i), Err(TunnelDrop::BadFlags));
        let mut reserved = good.clone();
        reserved[49] = 1;
        assert_eq!(check(&reserved), Err(TunnelDrop::BadFlags));
        let mut csum = good.clone();
        csum[24] ^= 0xff;
        assert_eq!(check(&csum), Err(TunnelDrop::BadOuterIp));
        assert_eq!(decap(&good, LOCAL + 1, 4789), Err(TunnelDrop::NotVxlan));
        assert_eq!(decap(&good, LOCAL, 4790), Err(TunnelDrop::NotVxlan));
        // UDP length disagreeing with IP
        let mut ulen = good.clone();
        ulen[39] = ulen[39].wrapping_sub(1);
        assert_eq!(check(&ulen), Err(TunnelDrop::BadUdp));
        // a wrong non-zero UDP checksum, then a right one
        let mut uc = good.clone();
        uc[40..42].copy_from_slice(&[0x12, 0x34]);
        assert_eq!(check(&uc), Err(TunnelDrop::BadUdp));
        let udp_len = (good.len() - 34) as u16;
        uc[40..42].fill(0);
        let p = pseudo_header(REMOTE, LOCAL, 17, udp_len);
        let c = !fold(ones_sum(&uc[34..]) + u32::from(p));
        uc[40..42].copy_from_slice(&c.to_be_bytes());
        assert!(check(&uc).is_ok());
        // inner shorter than an Ethernet header
        let short = encapsulated(&inner()[..13], 5);
        assert_eq!(check(&short), Err(TunnelDrop::Truncated));
        // not IPv4
        let mut arp = good.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(check(&arp), Err(TunnelDrop::NotVxlan));
    }

    /// The hash of a frame as the packet thread has it: parsed.
    fn hash_of(frame: &[u8]) -> u32 {
        let mut key = FlowKey::zero();
        xbr_packet::parse::extract(frame, 1, &mut key);
        flow_hash(&key)
    }

    #[test]
    fn flow_hash_is_per_flow() {
        let a = inner();
        let mut b = inner();
        assert_eq!(hash_of(&a), hash_of(&b));
        b[36] ^= 1; // destination port
        assert_ne!(hash_of(&a), hash_of(&b));
        let mut c = inner();
        c[45] ^= 0xff; // payload: same flow
        assert_eq!(hash_of(&a), hash_of(&c));
        let mut frag = inner();
        frag[20] |= 0x20; // more fragments: the ports are not hashed
        let mut frag2 = frag.clone();
        frag2[36] ^= 1;
        assert_eq!(hash_of(&frag), hash_of(&frag2));
        // Not IPv4: the Ethernet addresses and type.
        let v6 = xbr_packet::testframes::udp6_frame();
        let mut v6b = v6.clone();
        v6b[0] ^= 1;
        assert_ne!(hash_of(&v6), hash_of(&v6b));
        for n in 0..a.len() {
            let _ = hash_of(&a[..n]);
        }
        assert!(src_port(0) >= 49152 && src_port(u32::MAX) >= 49152);
    }
}
