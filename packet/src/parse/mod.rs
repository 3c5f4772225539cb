//! Flow extraction: one pass over an Ethernet frame that fills a
//! [`FlowKey`] with every header field the pipeline can match.
//!
//! The frame comes straight from a UMEM frame or a TAP read, so nothing in it
//! is trusted: every read is bounds-checked once, a runt or truncated header
//! simply ends extraction at the last complete layer (as OVS does: a
//! truncated TCP header yields an IP flow with zero ports), and nothing here
//! can panic. No allocation.

use flowtable::key::{Field, FlowKey};
use flowtable::matching::{
    ETH_TYPE_ARP, ETH_TYPE_IPV4, ETH_TYPE_IPV6, ETH_TYPE_MPLS, ETH_TYPE_MPLS_MCAST, ETH_TYPE_PBB,
    IP_PROTO_ICMP, IP_PROTO_SCTP, IP_PROTO_TCP, IP_PROTO_UDP,
};

pub mod ipv6;

use crate::bytes::{be16, be32};

pub const ETH_HEADER_LEN: usize = 14;
pub const ETH_TYPE_VLAN: u16 = 0x8100;
/// 802.1ad service tag (S-tag).
pub const ETH_TYPE_8021AD: u16 = 0x88a8;
/// OVS's "VLAN header present" bit in `vlan_tci` (the CFI/DEI position).
pub const VLAN_CFI: u16 = 0x1000;

/// `ip_frag` bits, as OVS defines them.
pub const FRAG_ANY: u64 = 1;
pub const FRAG_LATER: u64 = 2;

/// Byte offsets of the layers found by [`extract`], for header rewrites.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Layers {
    /// Offset of the L3 header (after Ethernet and an optional 802.1Q tag);
    /// of an MPLS packet, its top label stack entry.
    pub l3: u16,
    /// Offset of the L4 header, 0 when there is none (non-IP, later fragment,
    /// truncated).
    pub l4: u16,
    /// The IP protocol of the header at `l4` (for IPv6, the one behind the
    /// extension headers); 0 when `l4` is 0.
    pub proto: u8,
}

#[inline(always)]
fn mac(b: &[u8], at: usize) -> Option<u64> {
    let s = b.get(at..at + 6)?;
    Some(u64::from_be_bytes([
        0, 0, s[0], s[1], s[2], s[3], s[4], s[5],
    ]))
}

/// Fills `key` from `frame` for a packet received on `in_port`. Pipeline
/// metadata (registers, tunnel, conntrack) is zeroed; a tunnel port sets
/// `tun_*` after this call. Returns the layer offsets.
pub fn extract(frame: &[u8], in_port: u32, key: &mut FlowKey) -> Layers {
    *key = FlowKey::zero();
    key.set(Field::InPort, in_port as u64);
    let (Some(dst), Some(src), Some(mut eth_type)) =
        (mac(frame, 0), mac(frame, 6), be16(frame, 12))
    else {
        return Layers::default();
    };
    key.set(Field::EthDst, dst);
    key.set(Field::EthSrc, src);
    let mut l3 = ETH_HEADER_LEN;
    // The outer tag is the key's VLAN whether it is 802.1Q or 802.1ad, as
    // in OVS (vlan-limit 1): a PBB frame's outer S-tag is one.
    if eth_type == ETH_TYPE_VLAN || eth_type == ETH_TYPE_8021AD {
        let (Some(tci), Some(inner)) = (be16(frame, 14), be16(frame, 16)) else {
            return Layers::default();
        };
        key.set(Field::VlanTci, (tci | VLAN_CFI) as u64);
        eth_type = inner;
        l3 += 4;
    }
    if eth_type < ETH_TYPE_MIN {
        (eth_type, l3) = ieee8023_type(frame, l3);
    }
    key.set(Field::EthType, eth_type as u64);
    // The layers are put together from scalars at the end: filled in
    // field by field through a reference, they were stored as bytes and
    // read back as words, a store-forwarding stall costing a tenth of a
    // cached packet's time (`benches/engine.rs`).
    let (l4, proto) = match eth_type {
        ETH_TYPE_IPV4 => extract_ipv4(frame, l3, key),
        ETH_TYPE_ARP => {
            extract_arp(frame, l3, key);
            NO_L4
        }
        ETH_TYPE_IPV6 => ipv6::extract(frame, l3, key),
        ETH_TYPE_MPLS | ETH_TYPE_MPLS_MCAST => {
            extract_mpls(frame, l3, key);
            NO_L4
        }
        // The I-SID of a PBB I-TAG; `layers.l3` stays on the tag, and the
        // customer frame behind it is not read, as behind MPLS.
        ETH_TYPE_PBB => {
            if let Some(itag) = be32(frame, l3) {
                key.set(Field::PbbIsid, u64::from(itag & 0x00ff_ffff));
            }
            NO_L4
        }
        _ => NO_L4,
    };
    Layers {
        l3: l3 as u16,
        l4,
        proto,
    }
}

/// The smallest Ethernet type: a smaller value in the type field is an
/// IEEE 802.3 length.
pub const ETH_TYPE_MIN: u16 = 0x0600;
/// The `dl_type` of an 802.3 frame that carries no Ethernet type (OVS's
/// `FLOW_DL_TYPE_NONE`).
pub const ETH_TYPE_NONE: u16 = 0x05ff;
/// An LLC header with SNAP (DSAP, SSAP, control) and the SNAP
/// organisation code 0: the 2 bytes after it are an Ethernet type.
const LLC_SNAP_ETHERNET: [u8; 6] = [0xaa, 0xaa, 0x03, 0x00, 0x00, 0x00];
/// LLC (3 bytes) and SNAP (5) headers.
const LLC_SNAP_LEN: usize = 8;

/// The `dl_type` and L3 offset of an IEEE 802.3 frame (its type field,
/// ending at `l3`, is a length), as OVS's flow extraction decides them
/// (`parse_ethertype`): LLC/SNAP with organisation code 0 and an Ethernet
/// type in it gives that type, the L3 header following the SNAP header
/// (so IPv4 in SNAP matches `ip`); anything else is
/// [`ETH_TYPE_NONE`] with no L3 header.
fn ieee8023_type(frame: &[u8], l3: usize) -> (u16, usize) {
    match (frame.get(l3..l3 + 6), be16(frame, l3 + 6)) {
        (Some(llc), Some(ty)) if llc == LLC_SNAP_ETHERNET && ty >= ETH_TYPE_MIN => {
            (ty, l3 + LLC_SNAP_LEN)
        }
        _ => (ETH_TYPE_NONE, l3),
    }
}

/// Where an L4 header starts and its protocol: `Layers::l4` and
/// `Layers::proto`.
pub(crate) type L4 = (u16, u8);
/// No L4 header found.
pub(crate) const NO_L4: L4 = (0, 0);

/// The top label stack entry of an MPLS packet; `layers.l3` stays on it.
/// Nothing behind the label stack is extracted: which protocol follows
/// the bottom entry is not in the packet (OVS does the same).
fn extract_mpls(frame: &[u8], l3: usize, key: &mut FlowKey) {
    if let Some(lse) = be32(frame, l3) {
        key.set(Field::MplsLabel, u64::from(lse >> 12));
        key.set(Field::MplsTc, u64::from((lse >> 9) & 7));
        key.set(Field::MplsBos, u64::from((lse >> 8) & 1));
        key.set(Field::MplsTtl, u64::from(lse & 0xff));
    }
}

fn extract_ipv4(frame: &[u8], l3: usize, key: &mut FlowKey) -> L4 {
    let Some(ip) = frame.get(l3..l3 + 20) else {
        return NO_L4;
    };
    if ip[0] >> 4 != 4 {
        return NO_L4;
    }
    let ihl = ((ip[0] & 0x0f) as usize) * 4;
    if ihl < 20 || frame.len() < l3 + ihl {
        return NO_L4;
    }
    key.set(Field::IpDscp, (ip[1] >> 2) as u64);
    key.set(Field::IpEcn, (ip[1] & 3) as u64);
    key.set(Field::IpTtl, ip[8] as u64);
    key.set(Field::IpProto, ip[9] as u64);
    key.set(
        Field::IpSrc,
        u32::from_be_bytes([ip[12], ip[13], ip[14], ip[15]]) as u64,
    );
    key.set(
        Field::IpDst,
        u32::from_be_bytes([ip[16], ip[17], ip[18], ip[19]]) as u64,
    );
    let frag = u16::from_be_bytes([ip[6], ip[7]]);
    let more_fragments = frag & 0x2000 != 0;
    let offset = frag & 0x1fff;
    if offset != 0 {
        key.set(Field::IpFrag, FRAG_ANY | FRAG_LATER);
        return NO_L4;
    }
    if more_fragments {
        key.set(Field::IpFrag, FRAG_ANY);
    }
    let l4 = l3 + ihl;
    match ip[9] {
        IP_PROTO_TCP | IP_PROTO_UDP | IP_PROTO_SCTP => extract_ports(frame, l4, ip[9], key),
        IP_PROTO_ICMP => {
            if let (Some(t), Some(c)) = (frame.get(l4), frame.get(l4 + 1)) {
                key.set(Field::IcmpType, *t as u64);
                key.set(Field::IcmpCode, *c as u64);
                (l4 as u16, IP_PROTO_ICMP)
            } else {
                NO_L4
            }
        }
        _ => NO_L4,
    }
}

/// The ports of a TCP, UDP or SCTP header at `l4`, if the frame has them.
fn extract_ports(frame: &[u8], l4: usize, proto: u8, key: &mut FlowKey) -> L4 {
    let (Some(sp), Some(dp)) = (be16(frame, l4), be16(frame, l4 + 2)) else {
        return NO_L4;
    };
    key.set(Field::TpSrc, sp as u64);
    key.set(Field::TpDst, dp as u64);
    (l4 as u16, proto)
}

fn extract_arp(frame: &[u8], l3: usize, key: &mut FlowKey) {
    // Only Ethernet/IPv4 ARP has the fields OpenFlow names (htype 1, ptype
    // 0x0800, hlen 6, plen 4).
    let (Some(htype), Some(ptype)) = (be16(frame, l3), be16(frame, l3 + 2)) else {
        return;
    };
    let (Some(&hlen), Some(&plen)) = (frame.get(l3 + 4), frame.get(l3 + 5)) else {
        return;
    };
    if htype != 1 || ptype != ETH_TYPE_IPV4 || hlen != 6 || plen != 4 {
        return;
    }
    let (Some(op), Some(sha), Some(spa), Some(tha), Some(tpa)) = (
        be16(frame, l3 + 6),
        mac(frame, l3 + 8),
        be32(frame, l3 + 14),
        mac(frame, l3 + 18),
        be32(frame, l3 + 24),
    ) else {
        return;
    };
    // OVS keeps only the low byte of the opcode (it shares nw_proto).
    if op <= 0xff {
        key.set(Field::ArpOp, op as u64);
    }
    key.set(Field::ArpSha, sha);
    key.set(Field::ArpSpa, spa as u64);
    key.set(Field::ArpTha, tha);
    key.set(Field::ArpTpa, tpa as u64);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testframes::{snap_frame, udp_frame};

    #[test]
    fn udp_fields() {
        let mut k = FlowKey::zero();
        let l = extract(&udp_frame(), 7, &mut k);
        assert_eq!(k.get(Field::InPort), 7);
        assert_eq!(k.get(Field::EthType), 0x0800);
        assert_eq!(k.get(Field::EthSrc), 0x0a58_0a80_0002);
        assert_eq!(k.get(Field::IpSrc), 0x0a80_0002);
        assert_eq!(k.get(Field::IpDst), 0x0a80_0003);
        assert_eq!(k.get(Field::IpProto), 17);
        assert_eq!(k.get(Field::IpTtl), 64);
        assert_eq!(k.get(Field::TpSrc), 1234);
        assert_eq!(k.get(Field::TpDst), 5678);
        assert_eq!(
            l,
            Layers {
                l3: 14,
                l4: 34,
                proto: 17
            }
        );
    }

    /// IEEE 802.3 frames as OVS extracts them: SNAP with organisation
    /// code 0 carries its Ethernet type (and the IPv4 packet behind it is
    /// extracted), with or without a VLAN tag in front; anything else
    /// with a length in the type field is dl_type 0x05ff without L3.
    #[test]
    fn ieee8023_frames_as_ovs_extracts_them() {
        let mut k = FlowKey::zero();
        let l = extract(&snap_frame(&[], [0; 3], 0x0800), 3, &mut k);
        assert_eq!(k.get(Field::EthType), 0x0800);
        assert_eq!(
            (
                k.get(Field::IpSrc),
                k.get(Field::IpDst),
                k.get(Field::TpDst)
            ),
            (0x0a80_0002, 0x0a80_0003, 5678)
        );
        assert_eq!(
            l,
            Layers {
                l3: 22,
                l4: 42,
                proto: 17
            }
        );
        let tagged = snap_frame(&[0x81, 0x00, 0x00, 0x0a], [0; 3], 0x0800);
        let l = extract(&tagged, 3, &mut k);
        assert_eq!(k.get(Field::VlanTci), 0x100a);
        assert_eq!((k.get(Field::EthType), k.get(Field::IpProto)), (0x0800, 17));
        assert_eq!((l.l3, l.l4), (26, 46));
        // Not an Ethernet type behind SNAP: another organisation, a
        // length in SNAP's type field, plain LLC, a frame too short for
        // LLC/SNAP.
        let plain_llc = {
            let mut f = snap_frame(&[], [0; 3], 0x0800);
            f[14..17].copy_from_slice(&[0x42, 0x42, 0x03]);
            f
        };
        for f in [
            snap_frame(&[], [0, 0, 0x0c], 0x0800),
            snap_frame(&[], [0; 3], 0x0100),
            plain_llc,
            snap_frame(&[], [0; 3], 0x0800)[..20].to_vec(),
        ] {
            let l = extract(&f, 3, &mut k);
            assert_eq!(k.get(Field::EthType), 0x05ff, "{f:02x?}");
            assert_eq!((k.get(Field::IpSrc), k.get(Field::IpProto)), (0, 0));
            assert_eq!(
                l,
                Layers {
                    l3: 14,
                    l4: 0,
                    proto: 0
                }
            );
        }
        // The smallest Ethernet type is one.
        let mut f = udp_frame();
        f[12..14].copy_from_slice(&0x0600u16.to_be_bytes());
        extract(&f, 3, &mut k);
        assert_eq!(k.get(Field::EthType), 0x0600);
    }

    /// The top entry of a two-label stack, behind a VLAN tag; nothing of
    /// the IPv4 packet behind the stack.
    #[test]
    fn mpls_top_label_stack_entry() {
        let ip = udp_frame();
        let mut f = ip[..12].to_vec();
        f.extend_from_slice(&[0x81, 0x00, 0x20, 0x64, 0x88, 0x47]);
        // label 1000, tc 5, bos 0, ttl 63; then label 16, tc 0, bos 1, ttl 9.
        f.extend_from_slice(&(1000u32 << 12 | 5 << 9 | 63).to_be_bytes());
        f.extend_from_slice(&(16u32 << 12 | 1 << 8 | 9).to_be_bytes());
        f.extend_from_slice(&ip[14..]);
        let mut k = FlowKey::zero();
        let l = extract(&f, 1, &mut k);
        assert_eq!(k.get(Field::EthType), 0x8847);
        assert_eq!(k.get(Field::VlanTci), 0x1000 | 0x2064);
        let lse = [
            Field::MplsLabel,
            Field::MplsTc,
            Field::MplsBos,
            Field::MplsTtl,
        ];
        assert_eq!(lse.map(|x| k.get(x)), [1000, 5, 0, 63]);
        assert_eq!(
            (
                k.get(Field::IpSrc),
                k.get(Field::IpTtl),
                k.get(Field::TpDst)
            ),
            (0, 0, 0)
        );
        assert_eq!(
            l,
            Layers {
                l3: 18,
                l4: 0,
                proto: 0
            }
        );
        // Cut inside the entry: the Ethernet fields only.
        extract(&f[..20], 1, &mut k);
        assert_eq!(lse.map(|x| k.get(x)), [0; 4]);
        assert_eq!(k.get(Field::EthType), 0x8847);
    }

    /// An 802.1ad S-tag is the key's VLAN, and a PBB I-TAG behind it
    /// gives the I-SID.
    #[test]
    fn s_tag_then_pbb_itag() {
        let mut f = udp_frame()[..12].to_vec();
        f.extend_from_slice(&[0x88, 0xa8, 0x00, 0x0a, 0x88, 0xe7, 0, 0, 0, 100]);
        f.extend_from_slice(&udp_frame());
        let mut k = FlowKey::zero();
        let l = extract(&f, 1, &mut k);
        assert_eq!(k.get(Field::VlanTci), 0x1000 | 10);
        assert_eq!(k.get(Field::EthType), 0x88e7);
        assert_eq!(k.get(Field::PbbIsid), 100);
        assert_eq!((k.get(Field::IpSrc), l.l3, l.l4), (0, 18, 0));
    }

    #[test]
    fn arp_fields() {
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&[0x0a, 0x58, 0x0a, 0x80, 0x00, 0x02, 0x08, 0x06]);
        f.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
        f.extend_from_slice(&[0x0a, 0x58, 0x0a, 0x80, 0x00, 0x02, 10, 128, 0, 2]);
        f.extend_from_slice(&[0, 0, 0, 0, 0, 0, 10, 128, 0, 1]);
        let mut k = FlowKey::zero();
        extract(&f, 3, &mut k);
        assert_eq!(k.get(Field::EthType), 0x0806);
        assert_eq!(k.get(Field::ArpOp), 1);
        assert_eq!(k.get(Field::ArpSpa), 0x0a80_0002);
        assert_eq!(k.get(Field::ArpTpa), 0x0a80_0001);
        assert_eq!(k.get(Field::ArpSha), 0x0a58_0a80_0002);
    }

    #[test]
    fn later_fragment_has_no_ports() {
        let mut f = udp_frame();
        f[20] = 0x00;
        f[21] = 0x10; // offset 16*8
        let mut k = FlowKey::zero();
        let l = extract(&f, 1, &mut k);
        assert_eq!(k.get(Field::IpFrag), FRAG_ANY | FRAG_LATER);
        assert_eq!(k.get(Field::TpSrc), 0);
        assert_eq!(l.l4, 0);
    }

    #[test]
    fn every_truncation_is_handled() {
        let full = udp_frame();
        for len in 0..full.len() {
            let mut k = FlowKey::zero();
            let l = extract(&full[..len], 1, &mut k);
            if len < 34 {
                assert_eq!(k.get(Field::IpSrc), 0, "len {len}");
            }
            if len < 38 {
                assert_eq!(l.l4, 0, "len {len}");
            }
        }
    }

    #[test]
    fn vlan_tag() {
        let base = udp_frame();
        let mut f = base[..12].to_vec();
        f.extend_from_slice(&[0x81, 0x00, 0x00, 0x0a]);
        f.extend_from_slice(&base[12..]);
        let mut k = FlowKey::zero();
        let l = extract(&f, 1, &mut k);
        assert_eq!(k.get(Field::VlanTci), 0x100a);
        assert_eq!(k.get(Field::TpDst), 5678);
        assert_eq!(l.l3, 18);
    }
}
