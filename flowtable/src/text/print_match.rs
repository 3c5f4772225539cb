//! Matches printed the way `ovs-ofctl -O OpenFlow13 dump-flows` prints
//! them (OVS 3.1's `match_format`): field order, protocol shorthands, and
//! each field's value syntax.

use super::fields::{self, format_ipv4, format_ipv6_masked, format_mac, format_port};
use super::print::{c_hex, c_hex128, DEFAULT_PRIORITY};
use crate::key::Field;
use crate::matching::{
    Match, ETH_TYPE_ARP, ETH_TYPE_IPV4, ETH_TYPE_IPV6, ETH_TYPE_MPLS, ETH_TYPE_MPLS_MCAST,
    IP_PROTO_ICMP, IP_PROTO_ICMPV6, IP_PROTO_SCTP, IP_PROTO_TCP, IP_PROTO_UDP,
};
use std::fmt::Write;

/// Integer field, hex: `name=0x2a` or `name=0x2a/0xff`.
fn put_hex(s: &mut String, name: &str, v: u64, m: u64, full: u64) {
    if m == full {
        let _ = write!(s, "{name}={},", c_hex(v));
    } else {
        let _ = write!(s, "{name}={}/{},", c_hex(v), c_hex(m));
    }
}

/// Decimal when exact, hex value/mask otherwise (OVS's be16 format).
fn put_dec(s: &mut String, name: &str, v: u64, m: u64, full: u64) {
    if m == full {
        let _ = write!(s, "{name}={v},");
    } else {
        let _ = write!(s, "{name}={}/{},", c_hex(v), c_hex(m));
    }
}

fn put_ip(s: &mut String, name: &str, v: u64, m: u64) {
    let m = m as u32;
    if m == u32::MAX {
        let _ = write!(s, "{name}={},", format_ipv4(v));
    } else if m.leading_ones() + m.trailing_zeros() == 32 {
        let _ = write!(s, "{name}={}/{},", format_ipv4(v), m.leading_ones());
    } else {
        let _ = write!(
            s,
            "{name}={}/{},",
            format_ipv4(v),
            format_ipv4(u64::from(m))
        );
    }
}

fn put_ipv6(s: &mut String, name: &str, (v, m): (u128, u128)) {
    if m != 0 {
        let _ = write!(s, "{name}={},", format_ipv6_masked(v, m));
    }
}

fn put_mac(s: &mut String, name: &str, v: u64, m: u64) {
    if m == Field::EthDst.full_mask() {
        let _ = write!(s, "{name}={},", format_mac(v));
    } else {
        let _ = write!(s, "{name}={}/{},", format_mac(v), format_mac(m));
    }
}

/// A match with its priority, in OVS's field order, no trailing comma:
/// `priority=100,ct_state=-trk,ip,reg0=0x1,in_port=3,nw_dst=10.0.0.0/8`.
pub fn format_match(m: &Match, priority: u16) -> String {
    let mut s = String::new();
    if priority != DEFAULT_PRIORITY {
        let _ = write!(s, "priority={priority},");
    }
    let get = |f: Field| m.get(f);
    let (v, mk) = get(Field::PktMark);
    if mk != 0 {
        put_hex(&mut s, "pkt_mark", v, mk, Field::PktMark.full_mask());
    }
    let (v, mk) = get(Field::CtState);
    if mk != 0 {
        s.push_str("ct_state=");
        let known: u64 = fields::CT_STATE_BITS.iter().map(|(_, b)| b).sum();
        if mk & !known != 0 {
            let _ = write!(s, "{v:#x}/{mk:#x}");
        } else {
            for (name, bit) in fields::CT_STATE_BITS {
                if mk & bit != 0 {
                    s.push(if v & bit != 0 { '+' } else { '-' });
                    s.push_str(name);
                }
            }
        }
        s.push(',');
    }
    let (v, mk) = get(Field::CtZone);
    if mk != 0 {
        put_dec(&mut s, "ct_zone", v, mk, Field::CtZone.full_mask());
    }
    let (v, mk) = get(Field::CtMark);
    if mk != 0 {
        put_hex(&mut s, "ct_mark", v, mk, Field::CtMark.full_mask());
    }
    let (v, mk) = m.ct_label();
    if mk == u128::MAX {
        let _ = write!(s, "ct_label={},", c_hex128(v));
    } else if mk != 0 {
        let _ = write!(s, "ct_label={}/{},", c_hex128(v), c_hex128(mk));
    }
    let eth_type = m.exact(Field::EthType).map(|t| t as u16);
    let proto = m.exact(Field::IpProto).map(|p| p as u8);
    let mut skip_type = false;
    let mut skip_proto = false;
    match eth_type {
        Some(ETH_TYPE_IPV4) => {
            skip_type = true;
            let name = match proto {
                Some(IP_PROTO_ICMP) => Some("icmp"),
                Some(IP_PROTO_TCP) => Some("tcp"),
                Some(IP_PROTO_UDP) => Some("udp"),
                Some(IP_PROTO_SCTP) => Some("sctp"),
                _ => None,
            };
            match name {
                Some(n) => {
                    skip_proto = true;
                    s.push_str(n);
                }
                None => s.push_str("ip"),
            }
            s.push(',');
        }
        Some(ETH_TYPE_IPV6) => {
            skip_type = true;
            let name = match proto {
                Some(IP_PROTO_ICMPV6) => Some("icmp6"),
                Some(IP_PROTO_TCP) => Some("tcp6"),
                Some(IP_PROTO_UDP) => Some("udp6"),
                Some(IP_PROTO_SCTP) => Some("sctp6"),
                _ => None,
            };
            match name {
                Some(n) => {
                    skip_proto = true;
                    s.push_str(n);
                }
                None => s.push_str("ipv6"),
            }
            s.push(',');
        }
        Some(ETH_TYPE_ARP) => {
            skip_type = true;
            s.push_str("arp,");
        }
        Some(ETH_TYPE_MPLS) => {
            skip_type = true;
            s.push_str("mpls,");
        }
        Some(ETH_TYPE_MPLS_MCAST) => {
            skip_type = true;
            s.push_str("mplsm,");
        }
        _ => {}
    }
    for r in 0..8u8 {
        let (v, mk) = get(Field::Reg(r));
        if mk != 0 {
            put_hex(&mut s, &format!("reg{r}"), v, mk, Field::Reg(r).full_mask());
        }
    }
    let (v, mk) = get(Field::TunId);
    if mk != 0 {
        put_hex(&mut s, "tun_id", v, mk, u64::MAX);
    }
    for (f, name) in [(Field::TunSrc, "tun_src"), (Field::TunDst, "tun_dst")] {
        let (v, mk) = get(f);
        if mk != 0 {
            put_ip(&mut s, name, v, mk);
        }
    }
    let (v, mk) = get(Field::Metadata);
    if mk != 0 {
        put_hex(&mut s, "metadata", v, mk, u64::MAX);
    }
    let (v, mk) = get(Field::InPort);
    if mk != 0 {
        let _ = write!(s, "in_port={},", format_port(v as u32));
    }
    let (v, mk) = get(Field::VlanTci);
    if mk != 0 {
        put_hex(&mut s, "vlan_tci", v, mk, Field::VlanTci.full_mask());
    }
    for (f, name) in [(Field::EthSrc, "dl_src"), (Field::EthDst, "dl_dst")] {
        let (v, mk) = get(f);
        if mk != 0 {
            put_mac(&mut s, name, v, mk);
        }
    }
    let (v, mk) = get(Field::EthType);
    if mk != 0 && !skip_type {
        let _ = write!(s, "dl_type=0x{v:04x},");
    }
    let is_arp = eth_type == Some(ETH_TYPE_ARP);
    if eth_type == Some(ETH_TYPE_IPV6) {
        for (f, name) in [
            (Field::Ipv6SrcLow, "ipv6_src"),
            (Field::Ipv6DstLow, "ipv6_dst"),
        ] {
            put_ipv6(&mut s, name, m.get128(f));
        }
        let (v, mk) = get(Field::Ipv6Label);
        if mk == Field::Ipv6Label.full_mask() {
            let _ = write!(s, "ipv6_label=0x{v:05x},");
        } else if mk != 0 {
            let _ = write!(s, "ipv6_label=0x{v:05x}/0x{mk:05x},");
        }
        // OVS has no IPV6_EXTHDR; printed as its other bit fields are.
        let (v, mk) = get(Field::Ipv6Exthdr);
        if mk != 0 {
            put_hex(&mut s, "ipv6_exthdr", v, mk, Field::Ipv6Exthdr.full_mask());
        }
    }
    let (src, dst) = if is_arp {
        ("arp_spa", "arp_tpa")
    } else {
        ("nw_src", "nw_dst")
    };
    for (f, name) in [(Field::IpSrc, src), (Field::IpDst, dst)] {
        let (v, mk) = get(f);
        if mk != 0 {
            put_ip(&mut s, name, v, mk);
        }
    }
    let (v, mk) = get(Field::IpProto);
    if mk != 0 && !skip_proto {
        let name = if is_arp { "arp_op" } else { "nw_proto" };
        let _ = write!(s, "{name}={v},");
    }
    if is_arp {
        for (f, name) in [(Field::ArpSha, "arp_sha"), (Field::ArpTha, "arp_tha")] {
            let (v, mk) = get(f);
            if mk != 0 {
                put_mac(&mut s, name, v, mk);
            }
        }
    }
    let (v, mk) = get(Field::IpDscp);
    if mk != 0 {
        let _ = write!(s, "nw_tos={},", v << 2);
    }
    let (v, mk) = get(Field::IpEcn);
    if mk != 0 {
        let _ = write!(s, "nw_ecn={v},");
    }
    let (v, mk) = get(Field::IpTtl);
    if mk != 0 {
        let _ = write!(s, "nw_ttl={v},");
    }
    // Exact-only fields, printed where OVS prints them.
    for (f, name) in [
        (Field::MplsLabel, "mpls_label"),
        (Field::MplsTc, "mpls_tc"),
        (Field::MplsTtl, "mpls_ttl"),
        (Field::MplsBos, "mpls_bos"),
    ] {
        let (v, mk) = get(f);
        if mk != 0 {
            let _ = write!(s, "{name}={v},");
        }
    }
    // OVS has no PBB; printed as the ports are.
    let (v, mk) = get(Field::PbbIsid);
    if mk != 0 {
        put_dec(&mut s, "pbb_isid", v, mk, Field::PbbIsid.full_mask());
    }
    let (v, mk) = get(Field::IpFrag);
    let frag = match (mk & 3, v & 3) {
        (3, 3) => Some("later"),
        (3, 1) => Some("first"),
        (3, 0) => Some("no"),
        (3, _) => Some("<error>"),
        (1, 1) => Some("yes"),
        (1, _) => Some("no"),
        (2, 2) => Some("later"),
        (2, _) => Some("not_later"),
        _ => None,
    };
    if let Some(f) = frag {
        let _ = write!(s, "nw_frag={f},");
    }
    let is_icmp = eth_type == Some(ETH_TYPE_IPV4) && proto == Some(IP_PROTO_ICMP);
    if eth_type == Some(ETH_TYPE_IPV6) && proto == Some(IP_PROTO_ICMPV6) {
        // OVS prints ICMPv6's type and code under ICMP's names.
        for (f, name) in [
            (Field::Icmpv6Type, "icmp_type"),
            (Field::Icmpv6Code, "icmp_code"),
        ] {
            let (v, mk) = get(f);
            if mk != 0 {
                put_dec(&mut s, name, v, mk, f.full_mask());
            }
        }
        put_ipv6(&mut s, "nd_target", m.get128(Field::NdTargetLow));
        for (f, name) in [(Field::NdSll, "nd_sll"), (Field::NdTll, "nd_tll")] {
            let (v, mk) = get(f);
            if mk != 0 {
                put_mac(&mut s, name, v, mk);
            }
        }
        if s.ends_with(',') {
            s.pop();
        }
        return s;
    }
    let (a, b) = if is_icmp {
        ("icmp_type", "icmp_code")
    } else {
        ("tp_src", "tp_dst")
    };
    for (f, name) in [(Field::TpSrc, a), (Field::TpDst, b)] {
        let (v, mk) = get(f);
        if mk != 0 {
            put_dec(&mut s, name, v, mk, 0xffff);
        }
    }
    if s.ends_with(',') {
        s.pop();
    }
    s
}
