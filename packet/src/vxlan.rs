//! Wire formats of a VXLAN packet's outer headers: IPv4, UDP and the VXLAN
//! header itself (RFC 7348), as views over byte slices.
//!
//! Each `*Packet<T: AsRef<[u8]>>` wraps a buffer that `new_checked` has
//! proven long enough for every accessor, so accessors never fail and never
//! panic; semantic checks (flags, checksums, lengths that must agree with
//! each other) are separate, named, and return [`WireError`]. Setters exist
//! on `T: AsMut<[u8]>` for building the encapsulation template.
//! [`VxlanRepr`] is the parsed form of the VXLAN header.

use crate::bytes::{field16, field32};
pub use crate::csum::{fold, ones_sum};
use thiserror::Error;

pub const ETH_HEADER_LEN: usize = 14;
pub const IPV4_HEADER_LEN: usize = 20;
pub const UDP_HEADER_LEN: usize = 8;
pub const VXLAN_HEADER_LEN: usize = 8;
/// Outer Ethernet + IPv4 (no options) + UDP + VXLAN: what encapsulation
/// prepends and decapsulation strips.
pub const OUTER_LEN: usize = ETH_HEADER_LEN + IPV4_HEADER_LEN + UDP_HEADER_LEN + VXLAN_HEADER_LEN;
/// The outer IPv4 total length is the inner frame plus this.
pub const OUTER_IP_OVERHEAD: usize = IPV4_HEADER_LEN + UDP_HEADER_LEN + VXLAN_HEADER_LEN;

pub const ETH_TYPE_IPV4: u16 = 0x0800;
pub const IP_PROTO_UDP: u8 = 17;
/// IPv4 flags/fragment word: Don't Fragment.
pub const IPV4_DF: u16 = 0x4000;
/// IPv4 flags/fragment word: More Fragments and the offset.
const IPV4_MF_OFFSET: u16 = 0x3fff;
/// The only flag a VXLAN header may carry: "VNI valid" (I).
pub const VXLAN_FLAG_I: u8 = 0x08;

#[derive(Clone, Copy, Debug, Error, PartialEq, Eq)]
pub enum WireError {
    #[error("buffer too short for the header")]
    Truncated,
    #[error("IPv4 version or header length is wrong")]
    BadIpHeader,
    #[error("IPv4 header has options")]
    IpOptions,
    #[error("IPv4 packet is a fragment")]
    Fragment,
    #[error("IPv4 header checksum is wrong")]
    IpChecksum,
    #[error("IPv4 total length disagrees with the frame")]
    IpLength,
    #[error("UDP length disagrees with the IPv4 payload")]
    UdpLength,
    #[error("UDP checksum is wrong")]
    UdpChecksum,
    #[error("VXLAN flags are not exactly I")]
    VxlanFlags,
}

/// An IPv4 header without options, as VXLAN's outer header must be here.
#[derive(Debug, Clone)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Checks that a 20-byte header is present; nothing else.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        if buf.as_ref().len() < IPV4_HEADER_LEN {
            return Err(WireError::Truncated);
        }
        Ok(Ipv4Packet { buf })
    }

    fn b(&self) -> &[u8] {
        self.buf.as_ref()
    }

    pub fn version(&self) -> u8 {
        self.b()[0] >> 4
    }
    /// Header length in bytes.
    pub fn header_len(&self) -> usize {
        usize::from(self.b()[0] & 0x0f) * 4
    }
    pub fn total_len(&self) -> u16 {
        field16(self.b(), 2)
    }
    pub fn ident(&self) -> u16 {
        field16(self.b(), 4)
    }
    pub fn flags_frag(&self) -> u16 {
        field16(self.b(), 6)
    }
    pub fn ttl(&self) -> u8 {
        self.b()[8]
    }
    pub fn protocol(&self) -> u8 {
        self.b()[9]
    }
    pub fn checksum(&self) -> u16 {
        field16(self.b(), 10)
    }
    pub fn src(&self) -> u32 {
        field32(self.b(), 12)
    }
    pub fn dst(&self) -> u32 {
        field32(self.b(), 16)
    }

    /// The checks a tunnel endpoint makes before trusting the header:
    /// version 4, no options, not a fragment, a correct checksum, and a
    /// total length that fits the buffer. Returns the total length.
    pub fn check_tunnel_header(&self) -> Result<usize, WireError> {
        if self.version() != 4 || self.header_len() < IPV4_HEADER_LEN {
            return Err(WireError::BadIpHeader);
        }
        if self.header_len() != IPV4_HEADER_LEN {
            return Err(WireError::IpOptions);
        }
        if self.flags_frag() & IPV4_MF_OFFSET != 0 {
            return Err(WireError::Fragment);
        }
        if fold(ones_sum(&self.b()[..IPV4_HEADER_LEN])) != 0xffff {
            return Err(WireError::IpChecksum);
        }
        let total = usize::from(self.total_len());
        if total < IPV4_HEADER_LEN || total > self.b().len() {
            return Err(WireError::IpLength);
        }
        Ok(total)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    fn m(&mut self) -> &mut [u8] {
        self.buf.as_mut()
    }
    /// Version 4, header length 20, TOS 0.
    pub fn set_version_ihl(&mut self) {
        self.m()[0] = 0x45;
        self.m()[1] = 0;
    }
    pub fn set_total_len(&mut self, v: u16) {
        self.m()[2..4].copy_from_slice(&v.to_be_bytes());
    }
    pub fn set_ident(&mut self, v: u16) {
        self.m()[4..6].copy_from_slice(&v.to_be_bytes());
    }
    pub fn set_flags_frag(&mut self, v: u16) {
        self.m()[6..8].copy_from_slice(&v.to_be_bytes());
    }
    pub fn set_ttl(&mut self, v: u8) {
        self.m()[8] = v;
    }
    pub fn set_protocol(&mut self, v: u8) {
        self.m()[9] = v;
    }
    pub fn set_checksum(&mut self, v: u16) {
        self.m()[10..12].copy_from_slice(&v.to_be_bytes());
    }
    pub fn set_src(&mut self, v: u32) {
        self.m()[12..16].copy_from_slice(&v.to_be_bytes());
    }
    pub fn set_dst(&mut self, v: u32) {
        self.m()[16..20].copy_from_slice(&v.to_be_bytes());
    }
}

/// A UDP header.
#[derive(Debug, Clone)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        if buf.as_ref().len() < UDP_HEADER_LEN {
            return Err(WireError::Truncated);
        }
        Ok(UdpPacket { buf })
    }
    pub fn src_port(&self) -> u16 {
        field16(self.buf.as_ref(), 0)
    }
    pub fn dst_port(&self) -> u16 {
        field16(self.buf.as_ref(), 2)
    }
    pub fn len(&self) -> u16 {
        field16(self.buf.as_ref(), 4)
    }
    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) <= UDP_HEADER_LEN
    }
    pub fn checksum(&self) -> u16 {
        field16(self.buf.as_ref(), 6)
    }

    /// Checks a non-zero checksum against the pseudo-header of `src`,
    /// `dst`; zero means "not computed" for UDP over IPv4. The length must
    /// have been checked against the buffer already.
    pub fn verify_checksum(&self, src: u32, dst: u32) -> Result<(), WireError> {
        if self.checksum() == 0 {
            return Ok(());
        }
        let len = usize::from(self.len());
        let seg = self.buf.as_ref().get(..len).ok_or(WireError::UdpLength)?;
        let Ok(len) = u16::try_from(len) else {
            return Err(WireError::UdpLength);
        };
        let pseudo = crate::csum::pseudo_header(src, dst, IP_PROTO_UDP, len);
        if fold(ones_sum(seg) + u32::from(pseudo)) == 0xffff {
            Ok(())
        } else {
            Err(WireError::UdpChecksum)
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    pub fn set_src_port(&mut self, v: u16) {
        self.buf.as_mut()[0..2].copy_from_slice(&v.to_be_bytes());
    }
    pub fn set_dst_port(&mut self, v: u16) {
        self.buf.as_mut()[2..4].copy_from_slice(&v.to_be_bytes());
    }
    pub fn set_len(&mut self, v: u16) {
        self.buf.as_mut()[4..6].copy_from_slice(&v.to_be_bytes());
    }
    pub fn set_checksum(&mut self, v: u16) {
        self.buf.as_mut()[6..8].copy_from_slice(&v.to_be_bytes());
    }
}

/// The 8-byte VXLAN header: flags (8), reserved (24), VNI (24), reserved (8).
#[derive(Debug, Clone)]
pub struct VxlanPacket<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> VxlanPacket<T> {
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        if buf.as_ref().len() < VXLAN_HEADER_LEN {
            return Err(WireError::Truncated);
        }
        Ok(VxlanPacket { buf })
    }
    pub fn flags(&self) -> u8 {
        self.buf.as_ref()[0]
    }
    pub fn vni(&self) -> u32 {
        field32(self.buf.as_ref(), 4) >> 8
    }
    /// The reserved bits, all of which must be zero.
    fn reserved(&self) -> u32 {
        let b = self.buf.as_ref();
        u32::from_be_bytes([0, b[1], b[2], b[3]]) | u32::from(b[7])
    }
    /// The encapsulated frame.
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[VXLAN_HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> VxlanPacket<T> {
    pub fn set_flags(&mut self, v: u8) {
        let b = self.buf.as_mut();
        b[0] = v;
        b[1..4].fill(0);
    }
    /// Sets the 24-bit VNI (higher bits are ignored) and the reserved byte.
    pub fn set_vni(&mut self, vni: u32) {
        let b = self.buf.as_mut();
        b[4..8].copy_from_slice(&((vni & 0x00ff_ffff) << 8).to_be_bytes());
    }
}

/// A parsed VXLAN header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VxlanRepr {
    pub vni: u32,
}

impl VxlanRepr {
    /// Accepts only the header OVS accepts: flags exactly I and every
    /// reserved bit zero (RFC 7348 says "ignore on receipt", but a set bit
    /// means an extension, e.g. GBP or GPE, whose payload is not plain
    /// Ethernet, so OVS drops it and so do we).
    pub fn parse<T: AsRef<[u8]>>(p: &VxlanPacket<T>) -> Result<VxlanRepr, WireError> {
        if p.flags() != VXLAN_FLAG_I || p.reserved() != 0 {
            return Err(WireError::VxlanFlags);
        }
        Ok(VxlanRepr { vni: p.vni() })
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut VxlanPacket<T>) {
        p.set_flags(VXLAN_FLAG_I);
        p.set_vni(self.vni);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_buffers_are_rejected_by_new_checked() {
        assert_eq!(
            Ipv4Packet::new_checked(&[0u8; 19][..]).err(),
            Some(WireError::Truncated)
        );
        assert_eq!(
            UdpPacket::new_checked(&[0u8; 7][..]).err(),
            Some(WireError::Truncated)
        );
        assert_eq!(
            VxlanPacket::new_checked(&[0u8; 7][..]).err(),
            Some(WireError::Truncated)
        );
    }

    #[test]
    fn vxlan_roundtrip_and_flags() {
        let mut buf = [0xffu8; 8];
        let mut p = VxlanPacket::new_checked(&mut buf[..]).unwrap();
        VxlanRepr { vni: 0x0123_4567 }.emit(&mut p);
        assert_eq!(buf, [0x08, 0, 0, 0, 0x23, 0x45, 0x67, 0]);
        let p = VxlanPacket::new_checked(&buf[..]).unwrap();
        assert_eq!(VxlanRepr::parse(&p), Ok(VxlanRepr { vni: 0x23_4567 }));
        for (at, v) in [(0, 0x00), (0, 0x0c), (0, 0x88), (1, 1), (3, 0x80), (7, 1)] {
            let mut bad = buf;
            bad[at] = v;
            let p = VxlanPacket::new_checked(&bad[..]).unwrap();
            assert_eq!(
                VxlanRepr::parse(&p),
                Err(WireError::VxlanFlags),
                "byte {at} = {v:#x}"
            );
        }
    }

    fn ip_header() -> [u8; 20] {
        let mut h = [0u8; 20];
        let mut p = Ipv4Packet::new_checked(&mut h[..]).unwrap();
        p.set_version_ihl();
        p.set_total_len(20);
        p.set_flags_frag(IPV4_DF);
        p.set_ttl(64);
        p.set_protocol(IP_PROTO_UDP);
        p.set_src(0x0a00_000b);
        p.set_dst(0x0a00_000c);
        let c = !fold(ones_sum(&h));
        h[10..12].copy_from_slice(&c.to_be_bytes());
        h
    }

    #[test]
    fn ipv4_tunnel_checks() {
        let h = ip_header();
        let p = Ipv4Packet::new_checked(&h[..]).unwrap();
        assert_eq!(p.check_tunnel_header(), Ok(20));
        assert_eq!((p.src(), p.dst(), p.ttl()), (0x0a00_000b, 0x0a00_000c, 64));
        let cases: [(usize, u8, WireError); 6] = [
            (0, 0x65, WireError::BadIpHeader),
            (0, 0x44, WireError::BadIpHeader),
            (0, 0x46, WireError::IpOptions),
            (6, 0x60, WireError::Fragment), // DF + MF
            (7, 0x01, WireError::Fragment), // offset 8
            (12, 0x0b, WireError::IpChecksum),
        ];
        for (at, v, want) in cases {
            let mut bad = h;
            bad[at] = v;
            let p = Ipv4Packet::new_checked(&bad[..]).unwrap();
            assert_eq!(p.check_tunnel_header(), Err(want), "byte {at} = {v:#x}");
        }
        // a total length beyond the buffer, checksum kept right
        let mut bad = h;
        bad[3] = 21;
        bad[10..12].fill(0);
        let c = !fold(ones_sum(&bad));
        bad[10..12].copy_from_slice(&c.to_be_bytes());
        let p = Ipv4Packet::new_checked(&bad[..]).unwrap();
        assert_eq!(p.check_tunnel_header(), Err(WireError::IpLength));
    }

    #[test]
    fn udp_checksum_zero_or_verified() {
        let mut seg = vec![0x12, 0x34, 0x12, 0xb5, 0, 12, 0, 0, 1, 2, 3, 4];
        let (src, dst) = (0x0a00_000b, 0x0a00_000c);
        let p = UdpPacket::new_checked(&seg[..]).unwrap();
        assert!(p.verify_checksum(src, dst).is_ok(), "zero means none");
        let pseudo = (src >> 16) + (src & 0xffff) + (dst >> 16) + (dst & 0xffff) + 17 + 12;
        let c = !fold(ones_sum(&seg) + pseudo);
        seg[6..8].copy_from_slice(&c.to_be_bytes());
        let p = UdpPacket::new_checked(&seg[..]).unwrap();
        assert!(p.verify_checksum(src, dst).is_ok());
        assert_eq!(p.verify_checksum(src, dst + 1), Err(WireError::UdpChecksum));
    }
}
