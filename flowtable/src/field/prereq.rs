//! A field's prerequisites: what the rest of a match must pin for a
//! packet it accepts to carry the field (meta-flow's "Prerequisites").

use super::protocols::{
    is_mpls, ETH_TYPE_ARP, ETH_TYPE_IPV4, ETH_TYPE_IPV6, ETH_TYPE_MPLS, ETH_TYPE_PBB, ICMPV6_ND_NA,
    ICMPV6_ND_NS, IP_PROTO_ICMP, IP_PROTO_ICMPV6, IP_PROTO_SCTP, IP_PROTO_TCP, IP_PROTO_UDP,
};

/// What a field requires of the match it appears in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prereq {
    None,
    /// IPv4 or IPv6.
    Ip,
    Ipv4,
    Ipv6,
    Arp,
    /// The IP protocol, on the IP version that carries it (ICMP on IPv4,
    /// ICMPv6 on IPv6, the others on either).
    Proto(u8),
    /// TCP, UDP or SCTP on IPv4 or IPv6 (`tp_src`, `tp_dst`).
    Transport,
    /// ICMPv6 of this type: an ND message.
    Nd(u8),
    /// ICMPv6 neighbor solicitation or advertisement (nd_target).
    NdAny,
    /// eth_type 0x8847 or 0x8848.
    Mpls,
    /// eth_type 0x88e7.
    Pbb,
}

/// What a match pins exactly among the fields prerequisites depend on
/// (`Match::pinned` reads it; `Match::pin` writes it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pinned {
    pub eth_type: Option<u16>,
    pub proto: Option<u8>,
    pub icmp6_type: Option<u8>,
}

impl Prereq {
    /// Whether what a match pins meets the prerequisite: a few compares.
    pub fn met(self, p: &Pinned) -> bool {
        let (eth_type, proto) = (p.eth_type, p.proto);
        let is_ipv4 = eth_type == Some(ETH_TYPE_IPV4);
        let is_ipv6 = eth_type == Some(ETH_TYPE_IPV6);
        let is_icmp6 = is_ipv6 && proto == Some(IP_PROTO_ICMPV6);
        match self {
            Prereq::None => true,
            Prereq::Ip => is_ipv4 || is_ipv6,
            Prereq::Ipv4 => is_ipv4,
            Prereq::Ipv6 => is_ipv6,
            Prereq::Arp => eth_type == Some(ETH_TYPE_ARP),
            Prereq::Proto(IP_PROTO_ICMP) => is_ipv4 && proto == Some(IP_PROTO_ICMP),
            Prereq::Proto(IP_PROTO_ICMPV6) => is_icmp6,
            Prereq::Proto(n) => (is_ipv4 || is_ipv6) && proto == Some(n),
            Prereq::Transport => {
                (is_ipv4 || is_ipv6)
                    && matches!(proto, Some(IP_PROTO_TCP | IP_PROTO_UDP | IP_PROTO_SCTP))
            }
            Prereq::Nd(t) => is_icmp6 && p.icmp6_type == Some(t),
            Prereq::NdAny => {
                is_icmp6 && matches!(p.icmp6_type, Some(ICMPV6_ND_NS) | Some(ICMPV6_ND_NA))
            }
            Prereq::Mpls => eth_type.is_some_and(is_mpls),
            Prereq::Pbb => eth_type == Some(ETH_TYPE_PBB),
        }
    }

    /// The least a match must pin to meet the prerequisite (IPv4 where
    /// either IP version would do, TCP for any transport, a neighbor
    /// solicitation for any ND message).
    pub fn least(self) -> Pinned {
        let eth = |t: u16| Pinned {
            eth_type: Some(t),
            ..Pinned::default()
        };
        match self {
            Prereq::None => Pinned::default(),
            Prereq::Ip | Prereq::Ipv4 => eth(ETH_TYPE_IPV4),
            Prereq::Ipv6 => eth(ETH_TYPE_IPV6),
            Prereq::Arp => eth(ETH_TYPE_ARP),
            Prereq::Proto(n) => Pinned {
                proto: Some(n),
                ..eth(if n == IP_PROTO_ICMPV6 {
                    ETH_TYPE_IPV6
                } else {
                    ETH_TYPE_IPV4
                })
            },
            Prereq::Transport => Prereq::Proto(IP_PROTO_TCP).least(),
            Prereq::Nd(t) => Pinned {
                icmp6_type: Some(t),
                ..Prereq::Proto(IP_PROTO_ICMPV6).least()
            },
            Prereq::NdAny => Prereq::Nd(ICMPV6_ND_NS).least(),
            Prereq::Mpls => eth(ETH_TYPE_MPLS),
            Prereq::Pbb => eth(ETH_TYPE_PBB),
        }
    }
}
