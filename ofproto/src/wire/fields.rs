//! The table of OXM/NXM field headers xbr understands (see
//! [`super::oxm`] for how it is used).

use flowtable::matching::{
    ICMPV6_ND_NA, ICMPV6_ND_NS, IP_PROTO_ICMP, IP_PROTO_ICMPV6, IP_PROTO_SCTP, IP_PROTO_TCP,
    IP_PROTO_UDP,
};
use flowtable::Field;

/// What a header requires the rest of the match to pin (beyond what
/// [`Match::check_prerequisites`] checks for the logical field).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Prereq {
    None,
    /// IPv4 or IPv6.
    Ip,
    Ipv4,
    Ipv6,
    Arp,
    /// The IP protocol, on the IP version that carries it (ICMP on IPv4,
    /// ICMPv6 on IPv6, the others on either).
    Proto(u8),
    /// ICMPv6 of this type: an ND message.
    Nd(u8),
    /// ICMPv6 neighbor solicitation or advertisement (nd_target).
    NdAny,
    /// eth_type 0x8847 or 0x8848.
    Mpls,
    /// eth_type 0x88e7.
    Pbb,
}

/// One TLV header and where its bits live.
#[derive(Clone, Copy, Debug)]
pub struct FieldHeader {
    pub class: u16,
    pub field: u8,
    /// Length of the value in bytes (the mask, if any, has the same length).
    pub len: u8,
    pub target: Field,
    /// Bit of `target` where the header's bits start.
    pub shift: u32,
    /// Number of bits of `target` the header carries.
    pub bits: u32,
    /// Bit of the wire value where those bits start.
    pub wire_shift: u32,
    pub maskable: bool,
    /// Whether a match may use this header (NXM_OF_IN_PORT is 16 bits wide
    /// and so only serves as an action operand).
    pub(crate) in_match: bool,
    pub(crate) prereq: Prereq,
    pub name: &'static str,
}

impl FieldHeader {
    /// The 32-bit TLV header, with or without the mask flag.
    pub fn header(&self, masked: bool) -> u32 {
        let len = u32::from(self.len) * if masked { 2 } else { 1 };
        u32::from(self.class) << 16 | u32::from(self.field) << 9 | u32::from(masked) << 8 | len
    }

    /// Whether a match may use the header.
    pub fn in_match(&self) -> bool {
        self.in_match
    }

    /// Whether this is NXM_NX_CT_LABEL: a 128-bit header whose value
    /// spans both halves of the label, written only by `ct()`.
    pub(crate) fn is_ct_label(&self) -> bool {
        self.target.is_ct_label()
    }

    /// Whether the header is 128 bits wide (ct_label, the IPv6 addresses,
    /// nd_target): its value spans both halves of its field (`target` is
    /// the low half) and takes the `u128` paths of [`super::oxm`].
    pub(crate) fn is_wide(&self) -> bool {
        self.bits == 128
    }

    /// Whether the header carries all of `target` (a 128-bit header all
    /// of both halves).
    pub(crate) fn is_whole(&self) -> bool {
        let bits = if self.target.high_half().is_some() {
            128
        } else {
            self.target.bits()
        };
        self.shift == 0 && self.wire_shift == 0 && self.bits == bits
    }

    pub(crate) fn ones(&self) -> u64 {
        ones(self.bits)
    }
}

pub(crate) fn ones(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

#[allow(clippy::too_many_arguments)]
const fn h(
    class: u16,
    field: u8,
    len: u8,
    target: Field,
    shift: u32,
    bits: u32,
    wire_shift: u32,
    maskable: bool,
    prereq: Prereq,
    name: &'static str,
) -> FieldHeader {
    FieldHeader {
        class,
        field,
        len,
        target,
        shift,
        bits,
        wire_shift,
        maskable,
        in_match: true,
        prereq,
        name,
    }
}

/// OpenFlow basic class.
pub const OXM_CLASS_OPENFLOW_BASIC: u16 = 0x8000;
/// Nicira extensions (NXM1).
pub const OXM_CLASS_NXM1: u16 = 0x0001;
/// Nicira's OpenFlow 1.0 fields (NXM0).
pub const OXM_CLASS_NXM0: u16 = 0x0000;

pub(crate) const B: u16 = OXM_CLASS_OPENFLOW_BASIC;
pub(crate) const X: u16 = OXM_CLASS_NXM1;
pub(crate) const O: u16 = OXM_CLASS_NXM0;
const N: Prereq = Prereq::None;

/// Every header xbr understands. Order matters only for encoding: the
/// first match-capable header of a field is the one a match is dumped with.
#[rustfmt::skip]
pub static HEADERS: [FieldHeader; 81] = [
    h(B, 0, 4, Field::InPort, 0, 32, 0, false, N, "OXM_OF_IN_PORT"),
    h(B, 2, 8, Field::Metadata, 0, 64, 0, true, N, "OXM_OF_METADATA"),
    h(B, 3, 6, Field::EthDst, 0, 48, 0, true, N, "OXM_OF_ETH_DST"),
    h(B, 4, 6, Field::EthSrc, 0, 48, 0, true, N, "OXM_OF_ETH_SRC"),
    h(B, 5, 2, Field::EthType, 0, 16, 0, false, N, "OXM_OF_ETH_TYPE"),
    h(B, 6, 2, Field::VlanTci, 0, 13, 0, true, N, "OXM_OF_VLAN_VID"),
    h(B, 7, 1, Field::VlanTci, 13, 3, 0, false, N, "OXM_OF_VLAN_PCP"),
    h(B, 8, 1, Field::IpDscp, 0, 6, 0, false, Prereq::Ip, "OXM_OF_IP_DSCP"),
    h(B, 9, 1, Field::IpEcn, 0, 2, 0, false, Prereq::Ip, "OXM_OF_IP_ECN"),
    h(B, 10, 1, Field::IpProto, 0, 8, 0, false, Prereq::Ip, "OXM_OF_IP_PROTO"),
    h(B, 11, 4, Field::IpSrc, 0, 32, 0, true, Prereq::Ipv4, "OXM_OF_IPV4_SRC"),
    h(B, 12, 4, Field::IpDst, 0, 32, 0, true, Prereq::Ipv4, "OXM_OF_IPV4_DST"),
    h(B, 13, 2, Field::TpSrc, 0, 16, 0, true, Prereq::Proto(IP_PROTO_TCP), "OXM_OF_TCP_SRC"),
    h(B, 14, 2, Field::TpDst, 0, 16, 0, true, Prereq::Proto(IP_PROTO_TCP), "OXM_OF_TCP_DST"),
    h(B, 15, 2, Field::TpSrc, 0, 16, 0, true, Prereq::Proto(IP_PROTO_UDP), "OXM_OF_UDP_SRC"),
    h(B, 16, 2, Field::TpDst, 0, 16, 0, true, Prereq::Proto(IP_PROTO_UDP), "OXM_OF_UDP_DST"),
    h(B, 17, 2, Field::TpSrc, 0, 16, 0, true, Prereq::Proto(IP_PROTO_SCTP), "OXM_OF_SCTP_SRC"),
    h(B, 18, 2, Field::TpDst, 0, 16, 0, true, Prereq::Proto(IP_PROTO_SCTP), "OXM_OF_SCTP_DST"),
    h(B, 19, 1, Field::IcmpType, 0, 8, 0, false, Prereq::Proto(IP_PROTO_ICMP), "OXM_OF_ICMPV4_TYPE"),
    h(B, 20, 1, Field::IcmpCode, 0, 8, 0, false, Prereq::Proto(IP_PROTO_ICMP), "OXM_OF_ICMPV4_CODE"),
    h(B, 21, 2, Field::ArpOp, 0, 8, 0, false, Prereq::Arp, "OXM_OF_ARP_OP"),
    h(B, 22, 4, Field::ArpSpa, 0, 32, 0, true, Prereq::Arp, "OXM_OF_ARP_SPA"),
    h(B, 23, 4, Field::ArpTpa, 0, 32, 0, true, Prereq::Arp, "OXM_OF_ARP_TPA"),
    h(B, 24, 6, Field::ArpSha, 0, 48, 0, true, Prereq::Arp, "OXM_OF_ARP_SHA"),
    h(B, 25, 6, Field::ArpTha, 0, 48, 0, true, Prereq::Arp, "OXM_OF_ARP_THA"),
    h(B, 26, 16, Field::Ipv6SrcLow, 0, 128, 0, true, Prereq::Ipv6, "OXM_OF_IPV6_SRC"),
    h(B, 27, 16, Field::Ipv6DstLow, 0, 128, 0, true, Prereq::Ipv6, "OXM_OF_IPV6_DST"),
    h(B, 28, 4, Field::Ipv6Label, 0, 20, 0, true, Prereq::Ipv6, "OXM_OF_IPV6_FLABEL"),
    h(B, 29, 1, Field::Icmpv6Type, 0, 8, 0, false, Prereq::Proto(IP_PROTO_ICMPV6), "OXM_OF_ICMPV6_TYPE"),
    h(B, 30, 1, Field::Icmpv6Code, 0, 8, 0, false, Prereq::Proto(IP_PROTO_ICMPV6), "OXM_OF_ICMPV6_CODE"),
    // OF1.3 makes the ND fields exact-only; OVS accepts masks, as here.
    h(B, 31, 16, Field::NdTargetLow, 0, 128, 0, true, Prereq::NdAny, "OXM_OF_IPV6_ND_TARGET"),
    h(B, 32, 6, Field::NdSll, 0, 48, 0, true, Prereq::Nd(ICMPV6_ND_NS), "OXM_OF_IPV6_ND_SLL"),
    h(B, 33, 6, Field::NdTll, 0, 48, 0, true, Prereq::Nd(ICMPV6_ND_NA), "OXM_OF_IPV6_ND_TLL"),
    // Exact-only in OF1.3 (and in OVS).
    h(B, 34, 4, Field::MplsLabel, 0, 20, 0, false, Prereq::Mpls, "OXM_OF_MPLS_LABEL"),
    h(B, 35, 1, Field::MplsTc, 0, 3, 0, false, Prereq::Mpls, "OXM_OF_MPLS_TC"),
    h(B, 36, 1, Field::MplsBos, 0, 1, 0, false, Prereq::Mpls, "OXM_OF_MPLS_BOS"),
    h(B, 37, 3, Field::PbbIsid, 0, 24, 0, true, Prereq::Pbb, "OXM_OF_PBB_ISID"),
    h(B, 38, 8, Field::TunId, 0, 64, 0, true, N, "OXM_OF_TUNNEL_ID"),
    h(B, 39, 2, Field::Ipv6Exthdr, 0, 9, 0, true, Prereq::Ipv6, "OXM_OF_IPV6_EXTHDR"),
    h(X, 0, 4, Field::Reg(0), 0, 32, 0, true, N, "NXM_NX_REG0"),
    h(X, 1, 4, Field::Reg(1), 0, 32, 0, true, N, "NXM_NX_REG1"),
    h(X, 2, 4, Field::Reg(2), 0, 32, 0, true, N, "NXM_NX_REG2"),
    h(X, 3, 4, Field::Reg(3), 0, 32, 0, true, N, "NXM_NX_REG3"),
    h(X, 4, 4, Field::Reg(4), 0, 32, 0, true, N, "NXM_NX_REG4"),
    h(X, 5, 4, Field::Reg(5), 0, 32, 0, true, N, "NXM_NX_REG5"),
    h(X, 6, 4, Field::Reg(6), 0, 32, 0, true, N, "NXM_NX_REG6"),
    h(X, 7, 4, Field::Reg(7), 0, 32, 0, true, N, "NXM_NX_REG7"),
    h(X, 16, 8, Field::TunId, 0, 64, 0, true, N, "NXM_NX_TUN_ID"),
    h(X, 17, 6, Field::ArpSha, 0, 48, 0, true, Prereq::Arp, "NXM_NX_ARP_SHA"),
    h(X, 18, 6, Field::ArpTha, 0, 48, 0, true, Prereq::Arp, "NXM_NX_ARP_THA"),
    h(X, 19, 16, Field::Ipv6SrcLow, 0, 128, 0, true, Prereq::Ipv6, "NXM_NX_IPV6_SRC"),
    h(X, 20, 16, Field::Ipv6DstLow, 0, 128, 0, true, Prereq::Ipv6, "NXM_NX_IPV6_DST"),
    h(X, 21, 1, Field::Icmpv6Type, 0, 8, 0, false, Prereq::Proto(IP_PROTO_ICMPV6), "NXM_NX_ICMPV6_TYPE"),
    h(X, 22, 1, Field::Icmpv6Code, 0, 8, 0, false, Prereq::Proto(IP_PROTO_ICMPV6), "NXM_NX_ICMPV6_CODE"),
    h(X, 23, 16, Field::NdTargetLow, 0, 128, 0, true, Prereq::NdAny, "NXM_NX_ND_TARGET"),
    h(X, 24, 6, Field::NdSll, 0, 48, 0, true, Prereq::Nd(ICMPV6_ND_NS), "NXM_NX_ND_SLL"),
    h(X, 25, 6, Field::NdTll, 0, 48, 0, true, Prereq::Nd(ICMPV6_ND_NA), "NXM_NX_ND_TLL"),
    h(X, 26, 1, Field::IpFrag, 0, 2, 0, true, Prereq::Ip, "NXM_NX_IP_FRAG"),
    h(X, 27, 4, Field::Ipv6Label, 0, 20, 0, true, Prereq::Ipv6, "NXM_NX_IPV6_LABEL"),
    h(X, 29, 1, Field::IpTtl, 0, 8, 0, false, Prereq::Ip, "NXM_NX_IP_TTL"),
    h(X, 30, 1, Field::MplsTtl, 0, 8, 0, false, Prereq::Mpls, "NXM_NX_MPLS_TTL"),
    h(X, 31, 4, Field::TunSrc, 0, 32, 0, true, N, "NXM_NX_TUN_IPV4_SRC"),
    h(X, 32, 4, Field::TunDst, 0, 32, 0, true, N, "NXM_NX_TUN_IPV4_DST"),
    h(X, 33, 4, Field::PktMark, 0, 32, 0, true, N, "NXM_NX_PKT_MARK"),
    h(X, 105, 4, Field::CtState, 0, 32, 0, true, N, "NXM_NX_CT_STATE"),
    h(X, 106, 2, Field::CtZone, 0, 16, 0, false, N, "NXM_NX_CT_ZONE"),
    h(X, 107, 4, Field::CtMark, 0, 32, 0, true, N, "NXM_NX_CT_MARK"),
    h(X, 108, 16, Field::CtLabelLow, 0, 128, 0, true, N, "NXM_NX_CT_LABEL"),
    FieldHeader { in_match: false, ..h(O, 0, 2, Field::InPort, 0, 16, 0, false, N, "NXM_OF_IN_PORT") },
    h(O, 1, 6, Field::EthDst, 0, 48, 0, true, N, "NXM_OF_ETH_DST"),
    h(O, 2, 6, Field::EthSrc, 0, 48, 0, true, N, "NXM_OF_ETH_SRC"),
    h(O, 3, 2, Field::EthType, 0, 16, 0, false, N, "NXM_OF_ETH_TYPE"),
    h(O, 4, 2, Field::VlanTci, 0, 16, 0, true, N, "NXM_OF_VLAN_TCI"),
    h(O, 5, 1, Field::IpDscp, 0, 6, 2, false, Prereq::Ip, "NXM_OF_IP_TOS"),
    h(O, 6, 1, Field::IpProto, 0, 8, 0, false, Prereq::Ip, "NXM_OF_IP_PROTO"),
    h(O, 7, 4, Field::IpSrc, 0, 32, 0, true, Prereq::Ipv4, "NXM_OF_IP_SRC"),
    h(O, 8, 4, Field::IpDst, 0, 32, 0, true, Prereq::Ipv4, "NXM_OF_IP_DST"),
    h(O, 9, 2, Field::TpSrc, 0, 16, 0, true, Prereq::Proto(IP_PROTO_TCP), "NXM_OF_TCP_SRC"),
    h(O, 10, 2, Field::TpDst, 0, 16, 0, true, Prereq::Proto(IP_PROTO_TCP), "NXM_OF_TCP_DST"),
    h(O, 16, 4, Field::ArpSpa, 0, 32, 0, true, Prereq::Arp, "NXM_OF_ARP_SPA"),
    h(O, 17, 4, Field::ArpTpa, 0, 32, 0, true, Prereq::Arp, "NXM_OF_ARP_TPA"),
];
