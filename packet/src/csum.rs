//! Internet checksums, and the completion of checksums a sender left to
//! "hardware".
//!
//! # Why xbr completes checksums
//!
//! A pod's veth has TX checksum offload on by default: the pod's kernel
//! writes only the folded pseudo-header sum into the TCP/UDP checksum field
//! and marks the skb CHECKSUM_PARTIAL, trusting the device (or the skb
//! layer) to finish it. veth never does: the skb crosses to the peer with
//! that state, and XDP/AF_XDP copy mode then hands xbr the bytes *without*
//! the state. A packet xbr forwards must therefore carry a complete
//! checksum, since the receiving pod (or the far node, after VXLAN) sees a
//! CHECKSUM_NONE frame and verifies it.
//!
//! Frames the XDP flow cache forwards never reach this code: the XDP
//! program completes them with the same test and the same result
//! (`xbr_complete_csum` in dataplane/src/fastpath/bpf/xbr_xdp.c; dataplane/tests/xdpcache_csum.rs
//! checks its output against [`complete_partial`]).
//!
//! The alternatives were worse: turning offload off in every pod (the
//! agent's CNI plugin does not, and the pod owns its netns), or attaching a
//! TC program that calls `bpf_l4_csum_replace`/`skb_checksum_help` on every
//! pod veth (a second attach point per port, and the cost is the same pass
//! over the payload that xbr does here).
//!
//! # Detection and its false positives
//!
//! A partial checksum is recognisable: the field holds exactly `P`, the
//! folded pseudo-header sum of the packet's own addresses, protocol and L4
//! length. For each IPv4 TCP/UDP packet, and each IPv6 one whose TCP/UDP
//! header follows the fixed header (Linux offloads the others' checksums
//! rarely; they are left alone), [`complete_partial`] computes `P`
//! (a few adds, no payload access) and stops unless the field equals it.
//! Only then does it sum the segment (one pass) and:
//! - if the segment already verifies, leaves it: then the complete checksum
//!   *is* `P`, and writing it again would change nothing;
//! - otherwise writes the complete checksum, `!fold(sum(segment))`, which
//!   is right because the field's `P` already stands for the pseudo-header.
//!
//! So no correct packet is ever changed. The one false positive is a packet
//! whose checksum is *wrong* and happens to equal `P` (probability 2^-16 for
//! a random wrong value): xbr would "repair" it and the receiver would
//! accept a corrupt segment. The senders here are local kernels writing
//! into memory, not a lossy wire, so wrong checksums do not occur in
//! practice; a sender that deliberately sends bad checksums (a test tool)
//! gets them repaired with probability 2^-16 per packet. OVS with
//! userspace-tso makes the same trade by trusting `csum_start` metadata;
//! here the metadata is gone, and the pseudo-header match is the
//! strongest evidence left. Fragments are skipped (a partial checksum never
//! spans fragments) and so is a UDP checksum of zero ("none").

use crate::bytes::{be16, be32};
use crate::parse::{ETH_HEADER_LEN, ETH_TYPE_VLAN};

const ETH_TYPE_IPV4: u16 = 0x0800;
const ETH_TYPE_IPV6: u16 = 0x86dd;
const IP_PROTO_TCP: u8 = 6;
const IP_PROTO_UDP: u8 = 17;

/// One's-complement sum of `data` as big-endian 16-bit words (an odd last
/// byte is padded with zero), folded to 16 bits but returned as `u32` so
/// that callers can add a few more 16-bit words without overflow. Reads 8
/// bytes per step.
#[inline]
pub fn ones_sum(data: &[u8]) -> u32 {
    let mut sum = 0u64;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        sum += u64::from(u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
        sum += u64::from(u32::from_be_bytes([c[4], c[5], c[6], c[7]]));
    }
    let mut words = chunks.remainder().chunks_exact(2);
    for w in &mut words {
        sum += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = words.remainder() {
        sum += u64::from(*last) << 8;
    }
    // 2^16 = 1 (mod 2^16 - 1): folding keeps the one's-complement value.
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u32
}

/// Folds a one's-complement sum to 16 bits.
#[inline]
pub fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// The folded IPv4 pseudo-header sum.
#[inline]
pub fn pseudo_header(src: u32, dst: u32, proto: u8, l4_len: u16) -> u16 {
    fold(
        (src >> 16)
            + (src & 0xffff)
            + (dst >> 16)
            + (dst & 0xffff)
            + u32::from(proto)
            + u32::from(l4_len),
    )
}

/// The folded IPv6 pseudo-header sum (RFC 8200 §8.1) of the header at
/// `ip` (40 bytes) for an upper-layer packet of `l4_len` bytes.
fn pseudo_header_v6(ip: &[u8], proto: u8, l4_len: u16) -> Option<u16> {
    let addrs = ip.get(8..40)?;
    Some(fold(ones_sum(addrs) + u32::from(proto) + u32::from(l4_len)))
}

/// Completes a TCP or UDP checksum over IPv4 or IPv6 that the sender left
/// partial (see the module comment). Returns `true` if the frame was
/// changed. Never panics; anything it does not understand is left alone.
pub fn complete_partial(frame: &mut [u8]) -> bool {
    complete(frame).unwrap_or(false)
}

fn complete(frame: &mut [u8]) -> Option<bool> {
    let mut l3 = ETH_HEADER_LEN;
    let mut eth_type = be16(frame, 12)?;
    if eth_type == ETH_TYPE_VLAN {
        eth_type = be16(frame, 16)?;
        l3 += 4;
    }
    if eth_type == ETH_TYPE_IPV6 {
        return complete_ipv6(frame, l3);
    }
    if eth_type != ETH_TYPE_IPV4 {
        return Some(false);
    }
    let vihl = *frame.get(l3)?;
    let ihl = usize::from(vihl & 0x0f) * 4;
    if vihl >> 4 != 4 || ihl < 20 {
        return Some(false);
    }
    if be16(frame, l3 + 6)? & 0x3fff != 0 {
        return Some(false);
    }
    let proto = *frame.get(l3 + 9)?;
    if !matches!(proto, IP_PROTO_TCP | IP_PROTO_UDP) {
        return Some(false);
    }
    let total = usize::from(be16(frame, l3 + 2)?);
    let l4 = l3 + ihl;
    let l4_len = total.checked_sub(ihl)?;
    let p = pseudo_header(
        be32(frame, l3 + 12)?,
        be32(frame, l3 + 16)?,
        proto,
        u16::try_from(l4_len).ok()?,
    );
    finish(frame, l4, l4_len, proto, p)
}

fn complete_ipv6(frame: &mut [u8], l3: usize) -> Option<bool> {
    let ip = frame.get(l3..l3 + 40)?;
    if ip[0] >> 4 != 6 {
        return Some(false);
    }
    let proto = ip[6];
    if !matches!(proto, IP_PROTO_TCP | IP_PROTO_UDP) {
        return Some(false);
    }
    let l4_len = be16(ip, 4)?;
    let p = pseudo_header_v6(ip, proto, l4_len)?;
    finish(frame, l3 + 40, usize::from(l4_len), proto, p)
}

/// Completes the checksum of the `l4_len`-byte TCP/UDP segment at `l4`
/// if its checksum field holds exactly `p`, the pseudo-header sum.
fn finish(frame: &mut [u8], l4: usize, l4_len: usize, proto: u8, p: u16) -> Option<bool> {
    let csum_off = if proto == IP_PROTO_TCP { 16 } else { 6 };
    let at = l4 + csum_off;
    let stored = be16(frame, at)?;
    if stored == 0 && proto == IP_PROTO_UDP {
        return Some(false);
    }
    if stored != p {
        return Some(false);
    }
    let seg = frame.get(l4..l4 + l4_len)?;
    if seg.len() < csum_off + 2 {
        return Some(false);
    }
    let seg_sum = ones_sum(seg);
    if fold(seg_sum + u32::from(p)) == 0xffff {
        // Already complete: its checksum happens to equal P.
        return Some(false);
    }
    let mut c = !fold(seg_sum);
    if c == 0 && proto == IP_PROTO_UDP {
        c = 0xffff;
    }
    frame.get_mut(at..at + 2)?.copy_from_slice(&c.to_be_bytes());
    Some(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Ethernet/IPv4 frame carrying `proto` with `payload` after an L4
    /// header of `l4_hdr` bytes whose checksum sits at `csum_off`.
    fn frame(proto: u8, l4_hdr: usize, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00];
        let l4_len = l4_hdr + payload.len();
        let total = (20 + l4_len) as u16;
        f.extend_from_slice(&[0x45, 0]);
        f.extend_from_slice(&total.to_be_bytes());
        f.extend_from_slice(&[0, 7, 0x40, 0, 64, proto, 0, 0, 10, 128, 0, 2, 10, 129, 2, 3]);
        let c = !fold(ones_sum(&f[14..34]));
        f[24..26].copy_from_slice(&c.to_be_bytes());
        let mut l4 = vec![0u8; l4_hdr];
        l4[0..4].copy_from_slice(&[0x9c, 0x40, 0x14, 0x51]);
        if proto == IP_PROTO_UDP {
            l4[4..6].copy_from_slice(&(l4_len as u16).to_be_bytes());
        } else if proto == IP_PROTO_TCP {
            l4[12] = 0x50;
        }
        f.extend_from_slice(&l4);
        f.extend_from_slice(payload);
        f
    }

    fn valid(f: &[u8], proto: u8) -> bool {
        let p = pseudo_header(0x0a80_0002, 0x0a81_0203, proto, (f.len() - 34) as u16);
        fold(ones_sum(&f[34..]) + u32::from(p)) == 0xffff
    }

    fn set_partial(f: &mut [u8], proto: u8, off: usize) {
        let p = pseudo_header(0x0a80_0002, 0x0a81_0203, proto, (f.len() - 34) as u16);
        f[34 + off..36 + off].copy_from_slice(&p.to_be_bytes());
    }

    #[test]
    fn partial_tcp_and_udp_are_completed() {
        for (proto, hdr, off) in [(IP_PROTO_TCP, 20, 16), (IP_PROTO_UDP, 8, 6)] {
            for len in [0usize, 1, 2, 7, 100, 1401] {
                let payload: Vec<u8> = (0..len).map(|i| (i * 31 + 7) as u8).collect();
                let mut f = frame(proto, hdr, &payload);
                set_partial(&mut f, proto, off);
                assert!(!valid(&f, proto));
                assert!(complete_partial(&mut f), "proto {proto} len {len}");
                assert!(valid(&f, proto), "proto {proto} len {len}");
                // A complete checksum is never touched again.
                let before = f.clone();
                assert!(!complete_partial(&mut f));
                assert_eq!(f, before);
            }
        }
    }

    #[test]
    fn complete_or_foreign_packets_are_left_alone() {
        let mut f = frame(IP_PROTO_TCP, 20, b"hello");
        // some arbitrary wrong checksum that is not P: untouched
        f[50..52].copy_from_slice(&[0x12, 0x34]);
        let before = f.clone();
        assert!(!complete_partial(&mut f));
        assert_eq!(f, before);
        // UDP "no checksum"
        let mut u = frame(IP_PROTO_UDP, 8, b"x");
        assert!(!complete_partial(&mut u));
        // fragments
        let mut g = frame(IP_PROTO_TCP, 20, b"hello");
        set_partial(&mut g, IP_PROTO_TCP, 16);
        g[20] = 0x20; // MF
        assert!(!complete_partial(&mut g));
        // ICMP, ARP, runts and every truncation: no panic
        let mut i = frame(1, 8, b"ping");
        assert!(!complete_partial(&mut i));
        let mut full = frame(IP_PROTO_TCP, 20, b"hello");
        set_partial(&mut full, IP_PROTO_TCP, 16);
        for n in 0..full.len() {
            let mut t = full[..n].to_vec();
            assert!(!complete_partial(&mut t), "truncated to {n}");
        }
    }

    /// IPv6 TCP and UDP, as a pod with TX offload sends them: completed,
    /// and then valid as etherparse (an independent implementation)
    /// computes the checksum; every truncation is left alone.
    #[test]
    fn partial_ipv6_tcp_and_udp_are_completed() {
        use crate::testframes::{tcp6_frame, udp6_frame};
        use etherparse::{SlicedPacket, TransportSlice};
        let valid = |f: &[u8]| {
            let p = SlicedPacket::from_ethernet(f).unwrap();
            let Some(etherparse::NetSlice::Ipv6(ip)) = p.net else {
                panic!("not IPv6")
            };
            let (s, d) = (ip.header().source(), ip.header().destination());
            match p.transport.unwrap() {
                TransportSlice::Tcp(t) => t.calc_checksum_ipv6(s, d).unwrap() == t.checksum(),
                TransportSlice::Udp(u) => {
                    u.to_header()
                        .calc_checksum_ipv6_raw(s, d, u.payload())
                        .unwrap()
                        == u.checksum()
                }
                _ => panic!("not TCP or UDP"),
            }
        };
        for (mut f, off) in [(tcp6_frame(), 16), (udp6_frame(), 6)] {
            assert!(valid(&f));
            assert!(!complete_partial(&mut f), "a complete checksum was touched");
            let len = u16::from_be_bytes([f[18], f[19]]);
            let p = pseudo_header_v6(&f[14..54], f[20], len).unwrap();
            f[54 + off..56 + off].copy_from_slice(&p.to_be_bytes());
            assert!(!valid(&f));
            let partial = f.clone();
            for n in 0..partial.len() {
                let mut t = partial[..n].to_vec();
                assert!(!complete_partial(&mut t), "truncated to {n}");
            }
            assert!(complete_partial(&mut f));
            assert!(valid(&f));
        }
    }

    #[test]
    fn ones_sum_matches_a_plain_word_sum() {
        let data: Vec<u8> = (0..77u32).map(|i| (i * 37 + 11) as u8).collect();
        for len in 0..data.len() {
            let d = &data[..len];
            let mut plain = 0u32;
            for w in d.chunks(2) {
                plain += u32::from(w[0]) << 8 | u32::from(*w.get(1).unwrap_or(&0));
            }
            assert_eq!(fold(ones_sum(d)), fold(plain), "len {len}");
        }
    }

    #[test]
    fn large_sums_do_not_overflow() {
        // A full-size segment of 0xff bytes sums to the largest values;
        // adding the pseudo-header to it once overflowed.
        let mut f = frame(IP_PROTO_TCP, 20, &[0xff; 1400]);
        set_partial(&mut f, IP_PROTO_TCP, 16);
        assert!(complete_partial(&mut f));
        assert!(valid(&f, IP_PROTO_TCP));
        assert!(ones_sum(&[0xff; 9000]) <= 0xffff);
    }
}
