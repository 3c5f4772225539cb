//! Header rewrites for `set_field`/`load`/`move` on packet fields, with
//! incremental checksum updates (RFC 1624) so a rewrite costs a few adds
//! instead of a pass over the payload.
//!
//! The frame was parsed by [`crate::parse::extract`], whose [`Layers`] say
//! where each header starts; a field whose header the packet does not carry
//! is left alone (OpenFlow prerequisites make that a controller error, not a
//! packet error).

use crate::bytes::{be16, be32, write16};
use crate::parse::{Layers, ETH_TYPE_8021AD, ETH_TYPE_VLAN};
use flowtable::key::Field;
use flowtable::matching::{
    IP_PROTO_ICMP, IP_PROTO_ICMPV6, IP_PROTO_SCTP, IP_PROTO_TCP, IP_PROTO_UDP,
};

mod ipv6;
mod mpls;
pub use mpls::{copy_ttl, pop_mpls, push_mpls};
mod pbb;
pub use pbb::{pop_pbb, push_pbb, PBB_HEADER_LEN};

/// Folds a 32-bit one's-complement sum into 16 bits.
fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// Full IPv4 header checksum (the checksum field itself must be zero or is
/// skipped by the caller).
pub fn ipv4_header_checksum(header: &[u8]) -> u16 {
    let mut sum = 0u32;
    for (i, pair) in header.chunks(2).enumerate() {
        if i == 5 {
            continue;
        }
        let hi = pair[0] as u32;
        let lo = pair.get(1).copied().unwrap_or(0) as u32;
        sum += (hi << 8) | lo;
    }
    !fold(sum)
}

/// RFC 1624 eqn. 3: the new checksum after a 16-bit word changes from `old`
/// to `new`.
fn csum_replace16(csum: u16, old: u16, new: u16) -> u16 {
    let sum = (!csum as u32) + (!old as u32) + (new as u32);
    !fold(sum)
}

fn csum_replace32(csum: u16, old: u32, new: u32) -> u16 {
    let c = csum_replace16(csum, (old >> 16) as u16, (new >> 16) as u16);
    csum_replace16(c, old as u16, new as u16)
}

/// Where the L4 checksum lives, if the packet has one to maintain: the
/// ones covering the IP pseudo-header (TCP, UDP, ICMPv6).
fn l4_checksum_at(frame: &[u8], layers: Layers) -> Option<usize> {
    if layers.l4 == 0 {
        return None;
    }
    let l4 = layers.l4 as usize;
    let at = match layers.proto {
        IP_PROTO_TCP => l4 + 16,
        // A zero UDP checksum means "none" on IPv4 and must stay zero. On
        // IPv6 it is invalid (RFC 8200 §8.1) and stays so, as in OVS: a
        // rewrite does not make a dropped datagram acceptable.
        IP_PROTO_UDP if be16(frame, l4 + 6)? != 0 => l4 + 6,
        IP_PROTO_ICMPV6 => l4 + 2,
        _ => return None,
    };
    // A segment cut short before its checksum has none to maintain; the
    // rewrite itself still happens (and is reported as done).
    be16(frame, at).map(|_| at)
}

fn set_ipv4_addr(frame: &mut [u8], layers: Layers, at: usize, new: u32) -> Option<()> {
    let l3 = layers.l3 as usize;
    let old = be32(frame, l3 + at)?;
    if old == new {
        return Some(());
    }
    frame
        .get_mut(l3 + at..l3 + at + 4)?
        .copy_from_slice(&new.to_be_bytes());
    let ip_csum = be16(frame, l3 + 10)?;
    write16(frame, l3 + 10, csum_replace32(ip_csum, old, new))?;
    // The pseudo-header covers the addresses.
    if let Some(c) = l4_checksum_at(frame, layers) {
        let l4c = be16(frame, c)?;
        let mut updated = csum_replace32(l4c, old, new);
        if updated == 0 && c == layers.l4 as usize + 6 {
            updated = 0xffff; // UDP transmits a computed zero as all ones
        }
        write16(frame, c, updated)?;
    }
    Some(())
}

fn set_l4_port(frame: &mut [u8], layers: Layers, at: usize, new: u16) -> Option<()> {
    if layers.l4 == 0 {
        return None;
    }
    // Only TCP, UDP and SCTP have ports; in an ICMP header the same bytes
    // are type, code and checksum. Group buckets carry no match to check
    // prerequisites against, so a port rewrite can meet any packet; OVS
    // skips a set_field whose prerequisites the packet does not meet.
    let proto = layers.proto;
    if !matches!(proto, IP_PROTO_TCP | IP_PROTO_UDP | IP_PROTO_SCTP) {
        return None;
    }
    let pos = layers.l4 as usize + at;
    let old = be16(frame, pos)?;
    write16(frame, pos, new)?;
    if proto == IP_PROTO_SCTP {
        sctp_recompute_checksum(frame, layers);
    } else if let Some(c) = l4_checksum_at(frame, layers) {
        let l4c = be16(frame, c)?;
        write16(frame, c, csum_replace16(l4c, old, new))?;
    }
    Some(())
}

/// SCTP's checksum is a CRC32c over the whole packet (RFC 4960 §6.8), which
/// has no incremental update: recomputed over the datagram as the IPv4
/// total length (IPv6 payload length) bounds it, with the checksum field
/// taken as zero, and stored least significant byte first like Linux and
/// OVS do. A packet cut short before its checksum is left as it is.
fn sctp_recompute_checksum(frame: &mut [u8], layers: Layers) -> Option<()> {
    let (l3, l4) = (layers.l3 as usize, layers.l4 as usize);
    let end = if ipv6::is_ipv6(frame, layers) {
        crate::parse::ipv6::packet_end(frame, l3)?
    } else {
        (l3 + usize::from(be16(frame, l3 + 2)?)).min(frame.len())
    };
    let packet = frame.get_mut(l4..end)?;
    if packet.len() < 12 {
        return None;
    }
    packet[8..12].fill(0);
    let crc = crc32c::crc32c(packet);
    packet[8..12].copy_from_slice(&crc.to_le_bytes());
    Some(())
}

/// Rewrites byte 1 (TOS) or 8..9 (TTL/proto) of the IPv4 header, keeping
/// the header checksum right.
fn set_ipv4_word(frame: &mut [u8], layers: Layers, word_at: usize, new_word: u16) -> Option<()> {
    let l3 = layers.l3 as usize;
    let old = be16(frame, l3 + word_at)?;
    // Both words are read before either is written, so a header cut short
    // is left untouched rather than half rewritten.
    let ip_csum = be16(frame, l3 + 10)?;
    write16(frame, l3 + word_at, new_word)?;
    write16(frame, l3 + 10, csum_replace16(ip_csum, old, new_word))
}

/// Inserts an 802.1Q tag (TPID 0x8100, `tci`) after the Ethernet addresses
/// of the `len`-byte frame at the start of `frame`, which must have 4 bytes
/// of room after it; returns the layers moved accordingly, or `None` (frame
/// untouched) for a runt or no room.
pub fn push_vlan(frame: &mut [u8], len: usize, tci: u16, layers: Layers) -> Option<Layers> {
    if len < 14 || frame.len() < len + 4 {
        return None;
    }
    frame.copy_within(12..len, 16);
    write16(frame, 12, ETH_TYPE_VLAN)?;
    write16(frame, 14, tci & !crate::parse::VLAN_CFI)?;
    Some(shift_layers(layers, 4))
}

/// Removes the outermost VLAN tag (802.1Q or 802.1ad) of `frame`; returns
/// the layers moved accordingly, or `None` if it has no tag.
pub fn pop_vlan(frame: &mut [u8], layers: Layers) -> Option<Layers> {
    let tpid = be16(frame, 12)?;
    if (tpid != ETH_TYPE_VLAN && tpid != ETH_TYPE_8021AD) || frame.len() < 18 {
        return None;
    }
    let len = frame.len();
    frame.copy_within(16..len, 12);
    Some(shift_layers(layers, -4))
}

fn shift_layers(layers: Layers, by: i32) -> Layers {
    let shift = |at: u16| {
        if at == 0 {
            0
        } else {
            u16::try_from(i32::from(at) + by).unwrap_or(0)
        }
    };
    Layers {
        l3: shift(layers.l3),
        l4: shift(layers.l4),
        proto: layers.proto,
    }
}

/// Applies one header rewrite. Returns `false` when the packet does not have
/// the header the field lives in (the rewrite is skipped).
pub fn set_field(frame: &mut [u8], layers: Layers, field: Field, value: u64) -> bool {
    let mac = |v: u64| {
        let b = v.to_be_bytes();
        [b[2], b[3], b[4], b[5], b[6], b[7]]
    };
    let l3 = layers.l3 as usize;
    let done = match field {
        Field::EthDst => frame.get_mut(0..6).map(|d| d.copy_from_slice(&mac(value))),
        Field::EthSrc => frame.get_mut(6..12).map(|d| d.copy_from_slice(&mac(value))),
        Field::VlanTci => {
            // Rewriting an existing tag only; push/pop are separate actions.
            if matches!(be16(frame, 12), Some(ETH_TYPE_VLAN | ETH_TYPE_8021AD)) {
                write16(frame, 14, (value as u16) & !crate::parse::VLAN_CFI)
            } else {
                None
            }
        }
        Field::IpDscp
        | Field::IpEcn
        | Field::IpTtl
        | Field::Ipv6SrcHigh
        | Field::Ipv6SrcLow
        | Field::Ipv6DstHigh
        | Field::Ipv6DstLow
        | Field::Ipv6Label
        | Field::Icmpv6Type
        | Field::Icmpv6Code
        | Field::NdTargetHigh
        | Field::NdTargetLow
        | Field::NdSll
        | Field::NdTll
            if ipv6::is_ipv6(frame, layers) =>
        {
            ipv6::set_field(frame, layers, field, value)
        }
        Field::IpSrc | Field::IpDst | Field::IpDscp | Field::IpEcn | Field::IpTtl
            if layers.l3 != 0 && be16(frame, l3 - 2) == Some(0x0800) =>
        {
            match field {
                Field::IpSrc => set_ipv4_addr(frame, layers, 12, value as u32),
                Field::IpDst => set_ipv4_addr(frame, layers, 16, value as u32),
                Field::IpTtl => be16(frame, l3 + 8).and_then(|w| {
                    set_ipv4_word(frame, layers, 8, (w & 0x00ff) | ((value as u16) << 8))
                }),
                Field::IpDscp => be16(frame, l3).and_then(|w| {
                    set_ipv4_word(
                        frame,
                        layers,
                        0,
                        (w & 0xff03) | (((value as u16) & 0x3f) << 2),
                    )
                }),
                _ => be16(frame, l3).and_then(|w| {
                    set_ipv4_word(frame, layers, 0, (w & 0xfffc) | ((value as u16) & 3))
                }),
            }
        }
        Field::ArpSpa | Field::ArpTpa | Field::ArpSha | Field::ArpTha | Field::ArpOp
            if layers.l3 != 0 && be16(frame, l3 - 2) == Some(0x0806) =>
        {
            match field {
                Field::ArpOp => write16(frame, l3 + 6, value as u16),
                Field::ArpSha => frame
                    .get_mut(l3 + 8..l3 + 14)
                    .map(|d| d.copy_from_slice(&mac(value))),
                Field::ArpSpa => frame
                    .get_mut(l3 + 14..l3 + 18)
                    .map(|d| d.copy_from_slice(&(value as u32).to_be_bytes())),
                Field::ArpTha => frame
                    .get_mut(l3 + 18..l3 + 24)
                    .map(|d| d.copy_from_slice(&mac(value))),
                _ => frame
                    .get_mut(l3 + 24..l3 + 28)
                    .map(|d| d.copy_from_slice(&(value as u32).to_be_bytes())),
            }
        }
        Field::TpSrc => set_l4_port(frame, layers, 0, value as u16),
        Field::TpDst => set_l4_port(frame, layers, 2, value as u16),
        Field::IcmpType | Field::IcmpCode => {
            set_icmp_type_code(frame, layers, field == Field::IcmpType, value as u8)
        }
        Field::MplsLabel | Field::MplsTc | Field::MplsBos | Field::MplsTtl => {
            mpls::set_field(frame, layers, field, value)
        }
        Field::PbbIsid => pbb::set_isid(frame, layers, value as u32),
        _ => None,
    };
    done.is_some()
}

/// ICMPv4's type (`is_type`) or code byte, with its checksum (over the
/// ICMP message only) updated incrementally. Not ICMPv4: nothing, as OVS
/// skips a set_field whose prerequisites the packet does not meet.
fn set_icmp_type_code(frame: &mut [u8], layers: Layers, is_type: bool, new: u8) -> Option<()> {
    if layers.l4 == 0 || layers.proto != IP_PROTO_ICMP {
        return None;
    }
    let pos = layers.l4 as usize;
    let old = be16(frame, pos)?;
    let checksum = be16(frame, pos + 2)?;
    let word = if is_type {
        (old & 0x00ff) | (u16::from(new) << 8)
    } else {
        (old & 0xff00) | u16::from(new)
    };
    write16(frame, pos, word)?;
    write16(frame, pos + 2, csum_replace16(checksum, old, word))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::extract;
    use crate::testframes::udp_frame;
    use flowtable::key::FlowKey;

    /// Full UDP checksum over pseudo-header and datagram, for checking the
    /// incremental updates.
    fn udp_checksum(f: &[u8]) -> u16 {
        let mut sum = 0u32;
        let mut add = |b: &[u8]| {
            for pair in b.chunks(2) {
                sum += ((pair[0] as u32) << 8) | pair.get(1).copied().unwrap_or(0) as u32;
            }
        };
        add(&f[26..34]);
        add(&[0, 17]);
        add(&f[38..40]);
        let mut seg = f[34..].to_vec();
        seg[6] = 0;
        seg[7] = 0;
        add(&seg);
        !fold(sum)
    }

    #[test]
    fn address_and_port_rewrites_keep_checksums_valid() {
        let mut f = udp_frame();
        let c = udp_checksum(&f);
        f[40..42].copy_from_slice(&c.to_be_bytes());
        let mut k = FlowKey::zero();
        let l = extract(&f, 1, &mut k);
        assert!(set_field(&mut f, l, Field::IpDst, 0xac1e_0001));
        assert!(set_field(&mut f, l, Field::TpDst, 80));
        assert!(set_field(&mut f, l, Field::IpTtl, 3));
        assert!(set_field(&mut f, l, Field::EthDst, 0x0a58_0000_0001));
        assert_eq!(ipv4_header_checksum(&f[14..34]), be16(&f, 24).unwrap());
        assert_eq!(udp_checksum(&f), be16(&f, 40).unwrap());
        extract(&f, 1, &mut k);
        assert_eq!(k.get(Field::IpDst), 0xac1e_0001);
        assert_eq!(k.get(Field::TpDst), 80);
        assert_eq!(k.get(Field::IpTtl), 3);
        assert_eq!(k.get(Field::EthDst), 0x0a58_0000_0001);
    }

    #[test]
    fn zero_udp_checksum_stays_zero() {
        let mut f = udp_frame();
        let mut k = FlowKey::zero();
        let l = extract(&f, 1, &mut k);
        assert!(set_field(&mut f, l, Field::IpSrc, 0x0101_0101));
        assert_eq!(be16(&f, 40), Some(0));
    }

    /// SCTP's CRC32c, as RFC 3720 B.4 gives it for 32 zero bytes (the
    /// same CRC and byte order as SCTP), after a port rewrite.
    #[test]
    fn sctp_port_rewrite_recomputes_the_crc32c() {
        assert_eq!(crc32c::crc32c(&[0u8; 32]), 0x8a91_36aa);
        let mut f = udp_frame();
        f[23] = IP_PROTO_SCTP;
        let l4 = 34;
        // An SCTP common header: ports, verification tag, checksum.
        f[l4 + 4..l4 + 8].copy_from_slice(&[1, 2, 3, 4]);
        f[l4 + 8..l4 + 12].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        let mut k = FlowKey::zero();
        let l = extract(&f, 1, &mut k);
        assert!(set_field(&mut f, l, Field::TpSrc, 12345));
        assert_eq!(be16(&f, l4), Some(12345));
        let ip_end = 14 + usize::from(be16(&f, 16).unwrap());
        let mut zeroed = f[l4..ip_end].to_vec();
        zeroed[8..12].fill(0);
        let want = crc32c::crc32c(&zeroed).to_le_bytes();
        assert_eq!(f[l4 + 8..l4 + 12], want);
        assert_ne!(want, [0xde, 0xad, 0xbe, 0xef]);
    }

    /// A pushed tag goes after the MAC addresses, the headers behind it
    /// move with the layers, and popping restores the frame.
    #[test]
    fn push_then_pop_vlan_restores_the_frame() {
        let original = udp_frame();
        let len = original.len();
        let mut f = original.clone();
        f.extend_from_slice(&[0; 4]);
        let mut k = FlowKey::zero();
        let l = extract(&original, 1, &mut k);
        let pushed = push_vlan(&mut f, len, 0x2000 | 100, l).unwrap();
        assert_eq!(be16(&f, 12), Some(ETH_TYPE_VLAN));
        assert_eq!(be16(&f, 14), Some(0x2000 | 100));
        assert_eq!(f[16..], original[12..]);
        assert_eq!((pushed.l3, pushed.l4), (l.l3 + 4, l.l4 + 4));
        let mut k2 = FlowKey::zero();
        let reparsed = extract(&f, 1, &mut k2);
        assert_eq!((reparsed.l3, reparsed.l4), (pushed.l3, pushed.l4));
        assert_eq!(k2.get(Field::TpDst), k.get(Field::TpDst));
        // A rewrite through the moved layers lands in the right place.
        assert!(set_field(&mut f, pushed, Field::TpDst, 4242));
        let popped = pop_vlan(&mut f, pushed).unwrap();
        assert_eq!((popped.l3, popped.l4), (l.l3, l.l4));
        let mut k3 = FlowKey::zero();
        extract(&f[..len], 1, &mut k3);
        assert_eq!(k3.get(Field::TpDst), 4242);
        assert_eq!(f[..12], original[..12]);
        // No tag, nothing popped; no room, nothing pushed.
        let mut plain = original.clone();
        assert!(pop_vlan(&mut plain, l).is_none());
        assert!(push_vlan(&mut plain, len, 0, l).is_none());
        assert_eq!(plain, original);
    }

    /// ICMP echo request 8/0 turned into a reply 0/0 and a code change:
    /// the ICMP checksum (over the message only) stays valid.
    #[test]
    fn icmp_type_and_code_rewrites_keep_the_checksum_valid() {
        let mut f = udp_frame();
        f[23] = 1; // ICMP
        let c = ipv4_header_checksum(&f[14..34]);
        f[24..26].copy_from_slice(&c.to_be_bytes());
        let icmp_len = f.len() - 34;
        f[34] = 8;
        f[35] = 0;
        f[36] = 0;
        f[37] = 0;
        let sum = |f: &[u8]| {
            let mut s = 0u32;
            for pair in f[34..34 + icmp_len].chunks(2) {
                s += (u32::from(pair[0]) << 8) | u32::from(pair.get(1).copied().unwrap_or(0));
            }
            fold(s)
        };
        let c = !sum(&f);
        f[36..38].copy_from_slice(&c.to_be_bytes());
        assert_eq!(sum(&f), 0xffff);
        let mut k = FlowKey::zero();
        let l = extract(&f, 1, &mut k);
        assert_eq!((k.get(Field::IcmpType), k.get(Field::IcmpCode)), (8, 0));
        assert!(set_field(&mut f, l, Field::IcmpType, 0));
        assert!(set_field(&mut f, l, Field::IcmpCode, 3));
        assert_eq!((f[34], f[35]), (0, 3));
        assert_eq!(sum(&f), 0xffff, "checksum no longer valid");
        // Not ICMP: skipped.
        let mut u = udp_frame();
        let lu = extract(&u.clone(), 1, &mut k);
        assert!(!set_field(&mut u, lu, Field::IcmpType, 0));
    }

    /// Found by the packet_rewrite fuzz target: a port rewrite on an ICMP
    /// packet overwrote the ICMP checksum.
    #[test]
    fn port_rewrite_skips_icmp() {
        let mut f = udp_frame();
        f[23] = 1; // ICMP
        let c = ipv4_header_checksum(&f[14..34]);
        f[24..26].copy_from_slice(&c.to_be_bytes());
        let orig = f.clone();
        let mut k = FlowKey::zero();
        let l = extract(&f, 1, &mut k);
        assert_ne!(l.l4, 0);
        assert!(!set_field(&mut f, l, Field::TpDst, 4113));
        assert!(!set_field(&mut f, l, Field::TpSrc, 4113));
        assert_eq!(f, orig);
    }

    /// Found by the packet_rewrite fuzz target: on a TCP segment cut
    /// before its checksum, an address rewrite changed the frame but
    /// reported itself skipped; a TTL rewrite on an IPv4 header cut before
    /// its checksum did the same.
    #[test]
    fn truncated_headers_are_rewritten_whole_or_not_at_all() {
        let mut f = udp_frame();
        f[23] = 6; // TCP, cut after the ports
        let c = ipv4_header_checksum(&f[14..34]);
        f[24..26].copy_from_slice(&c.to_be_bytes());
        f.truncate(44);
        let mut k = FlowKey::zero();
        let l = extract(&f, 1, &mut k);
        assert!(set_field(&mut f, l, Field::IpDst, 0x0a80_0050));
        assert_eq!(be32(&f, 30), Some(0x0a80_0050));
        assert_eq!(ipv4_header_checksum(&f[14..34]), be16(&f, 24).unwrap());
        assert!(set_field(&mut f, l, Field::TpDst, 80));
        assert_eq!(be16(&f, 36), Some(80));

        let mut f = udp_frame();
        f.truncate(24); // IPv4 header ends before its checksum
        let orig = f.clone();
        let l = extract(&f, 1, &mut k);
        assert!(!set_field(&mut f, l, Field::IpTtl, 3));
        assert_eq!(f, orig);
    }

    /// The VID/PCP rewrite goes to the outer tag, 802.1Q or 802.1ad.
    #[test]
    fn vlan_rewrites_reach_an_s_tag() {
        let ip = udp_frame();
        let mut f = ip[..12].to_vec();
        f.extend_from_slice(&[0x88, 0xa8, 0x00, 0x0a]);
        f.extend_from_slice(&ip[12..]);
        let mut k = FlowKey::zero();
        let l = extract(&f.clone(), 1, &mut k);
        assert!(set_field(&mut f, l, Field::VlanTci, 0x1000 | 0x6000 | 20));
        assert_eq!(f[12..16], [0x88, 0xa8, 0x60, 20]);
    }

    #[test]
    fn missing_headers_are_skipped() {
        let mut f = udp_frame();
        f.truncate(20);
        let mut k = FlowKey::zero();
        let l = extract(&f, 1, &mut k);
        assert!(!set_field(&mut f, l, Field::IpDst, 1));
        assert!(!set_field(&mut f, l, Field::TpDst, 1));
        assert!(set_field(&mut f, l, Field::EthSrc, 1));
    }
}
