//! A field's prerequisites: what the rest of a match must pin for a
//! packet it accepts to carry the field (meta-flow's "Prerequisites").

use crate::key::Field;
use crate::matching::{
    is_mpls, Match, ETH_TYPE_ARP, ETH_TYPE_IPV4, ETH_TYPE_IPV6, ETH_TYPE_MPLS, ETH_TYPE_PBB,
    ICMPV6_ND_NA, ICMPV6_ND_NS, IP_PROTO_ICMP, IP_PROTO_ICMPV6, IP_PROTO_SCTP, IP_PROTO_TCP,
    IP_PROTO_UDP,
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

impl Prereq {
    /// Whether `m` pins what the prerequisite asks for (exact matches on
    /// eth_type, ip_proto and for ND the ICMPv6 type). Three exact-field
    /// reads and a compare.
    pub fn met(self, m: &Match) -> bool {
        let eth_type = m.exact(Field::EthType).map(|v| v as u16);
        let proto = m.exact(Field::IpProto).map(|v| v as u8);
        let is_ipv4 = eth_type == Some(ETH_TYPE_IPV4);
        let is_ipv6 = eth_type == Some(ETH_TYPE_IPV6);
        let is_icmp6 = is_ipv6 && proto == Some(IP_PROTO_ICMPV6);
        let icmp6_type = m.exact(Field::Icmpv6Type).map(|t| t as u8);
        match self {
            Prereq::None => true,
            Prereq::Ip => is_ipv4 || is_ipv6,
            Prereq::Ipv4 => is_ipv4,
            Prereq::Ipv6 => is_ipv6,
            Prereq::Arp => eth_type == Some(ETH_TYPE_ARP),
            Prereq::Proto(IP_PROTO_ICMP) => is_ipv4 && proto == Some(IP_PROTO_ICMP),
            Prereq::Proto(IP_PROTO_ICMPV6) => is_icmp6,
            Prereq::Proto(p) => (is_ipv4 || is_ipv6) && proto == Some(p),
            Prereq::Transport => {
                (is_ipv4 || is_ipv6)
                    && matches!(proto, Some(IP_PROTO_TCP | IP_PROTO_UDP | IP_PROTO_SCTP))
            }
            Prereq::Nd(t) => is_icmp6 && icmp6_type == Some(t),
            Prereq::NdAny => {
                is_icmp6 && matches!(icmp6_type, Some(ICMPV6_ND_NS) | Some(ICMPV6_ND_NA))
            }
            Prereq::Mpls => eth_type.is_some_and(is_mpls),
            Prereq::Pbb => eth_type == Some(ETH_TYPE_PBB),
        }
    }

    /// Adds to `m` the least it must pin to meet the prerequisite (IPv4
    /// where either IP version would do); what tools and tests use to
    /// build a valid match around a field.
    pub fn satisfy(self, m: &mut Match) {
        let mut pin = |f: Field, v: u64| m.set_exact(f, v);
        match self {
            Prereq::None => {}
            Prereq::Ip | Prereq::Ipv4 => pin(Field::EthType, u64::from(ETH_TYPE_IPV4)),
            Prereq::Ipv6 => pin(Field::EthType, u64::from(ETH_TYPE_IPV6)),
            Prereq::Arp => pin(Field::EthType, u64::from(ETH_TYPE_ARP)),
            Prereq::Proto(p) => {
                let eth = if p == IP_PROTO_ICMPV6 {
                    ETH_TYPE_IPV6
                } else {
                    ETH_TYPE_IPV4
                };
                pin(Field::EthType, u64::from(eth));
                pin(Field::IpProto, u64::from(p));
            }
            Prereq::Transport => Prereq::Proto(IP_PROTO_TCP).satisfy(m),
            Prereq::Nd(t) => {
                Prereq::Proto(IP_PROTO_ICMPV6).satisfy(m);
                m.set_exact(Field::Icmpv6Type, u64::from(t));
            }
            Prereq::NdAny => Prereq::Nd(ICMPV6_ND_NS).satisfy(m),
            Prereq::Mpls => pin(Field::EthType, u64::from(ETH_TYPE_MPLS)),
            Prereq::Pbb => pin(Field::EthType, u64::from(ETH_TYPE_PBB)),
        }
    }
}
