//! The EtherTypes, IP protocols and ICMPv6 types prerequisites name
//! (re-exported by [`crate::matching`], where the rest of xbr finds them).

pub const ETH_TYPE_IPV4: u16 = 0x0800;
pub const ETH_TYPE_ARP: u16 = 0x0806;
pub const ETH_TYPE_IPV6: u16 = 0x86dd;
/// MPLS unicast and multicast (RFC 5332).
pub const ETH_TYPE_MPLS: u16 = 0x8847;
pub const ETH_TYPE_MPLS_MCAST: u16 = 0x8848;
/// 802.1ah PBB service instance tag (I-TAG).
pub const ETH_TYPE_PBB: u16 = 0x88e7;

/// Whether `eth_type` is one of MPLS's.
pub const fn is_mpls(eth_type: u16) -> bool {
    eth_type == ETH_TYPE_MPLS || eth_type == ETH_TYPE_MPLS_MCAST
}
pub const IP_PROTO_ICMP: u8 = 1;
pub const IP_PROTO_TCP: u8 = 6;
pub const IP_PROTO_UDP: u8 = 17;
pub const IP_PROTO_SCTP: u8 = 132;
pub const IP_PROTO_ICMPV6: u8 = 58;
/// ICMPv6 neighbor solicitation and advertisement, the messages that
/// carry nd_target (and nd_sll, nd_tll respectively).
pub const ICMPV6_ND_NS: u8 = 135;
pub const ICMPV6_ND_NA: u8 = 136;
