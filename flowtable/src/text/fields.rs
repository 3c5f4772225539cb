//! Field names and value syntaxes: the match names ovs-ofctl accepts
//! (with their aliases), the NXM/OXM names Nicira actions use, and the
//! textual form of each field's values.

use super::{PortNames, TextError};
use crate::action::port;
use crate::key::Field;

/// How a field's value is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Syntax {
    /// OpenFlow port number or reserved name.
    Port,
    /// Unsigned integer, printed in hex (`0x2a`, `0x2a/0xff`).
    Hex,
    /// Unsigned integer, printed in decimal when exact.
    Dec,
    /// Dotted IPv4, optionally `/prefix` or `/netmask`.
    Ipv4,
    /// Ethernet address, optionally `/mask`.
    Mac,
    /// `+trk-est` style conntrack flags, or a number.
    CtState,
    /// `no|yes|first|later|not_later`.
    Frag,
    /// `nw_tos`: the TOS byte, whose upper 6 bits are the DSCP field.
    Tos,
    /// The 128-bit ct_label, hex like `Hex` (see [`parse_label`]); the
    /// name denotes the whole label, though the entry's field is its low
    /// half.
    Label,
    /// An IPv6 address, optionally `/prefix` or `/mask-address`; like
    /// `Label`, the entry's field is the low half of the 128 bits.
    Ipv6,
}

/// One spelling of a field.
struct Name {
    name: &'static str,
    field: Field,
    syntax: Syntax,
}

const fn n(name: &'static str, field: Field, syntax: Syntax) -> Name {
    Name {
        name,
        field,
        syntax,
    }
}

use Syntax::*;

/// Every name a match or `set_field` accepts. Lookups are
/// case-insensitive for the NXM/OXM names only, as in OVS.
#[rustfmt::skip]
static NAMES: &[Name] = &[
    n("in_port", Field::InPort, Port),
    n("pkt_mark", Field::PktMark, Hex),
    n("reg0", Field::Reg(0), Hex), n("reg1", Field::Reg(1), Hex),
    n("reg2", Field::Reg(2), Hex), n("reg3", Field::Reg(3), Hex),
    n("reg4", Field::Reg(4), Hex), n("reg5", Field::Reg(5), Hex),
    n("reg6", Field::Reg(6), Hex), n("reg7", Field::Reg(7), Hex),
    n("tun_id", Field::TunId, Hex), n("tunnel_id", Field::TunId, Hex),
    n("tun_src", Field::TunSrc, Ipv4), n("tun_dst", Field::TunDst, Ipv4),
    n("ct_state", Field::CtState, CtState),
    n("ct_mark", Field::CtMark, Hex),
    n("ct_zone", Field::CtZone, Dec),
    n("ct_label", Field::CtLabelLow, Label),
    n("metadata", Field::Metadata, Hex),
    n("dl_src", Field::EthSrc, Mac), n("eth_src", Field::EthSrc, Mac),
    n("dl_dst", Field::EthDst, Mac), n("eth_dst", Field::EthDst, Mac),
    n("dl_type", Field::EthType, Hex), n("eth_type", Field::EthType, Hex),
    n("vlan_tci", Field::VlanTci, Hex),
    n("nw_src", Field::IpSrc, Ipv4), n("ip_src", Field::IpSrc, Ipv4),
    n("ipv4_src", Field::IpSrc, Ipv4),
    n("nw_dst", Field::IpDst, Ipv4), n("ip_dst", Field::IpDst, Ipv4),
    n("ipv4_dst", Field::IpDst, Ipv4),
    n("arp_spa", Field::ArpSpa, Ipv4), n("arp_tpa", Field::ArpTpa, Ipv4),
    n("nw_proto", Field::IpProto, Dec), n("ip_proto", Field::IpProto, Dec),
    n("arp_op", Field::ArpOp, Dec),
    n("nw_tos", Field::IpDscp, Tos), n("ip_dscp", Field::IpDscp, Dec),
    n("nw_ecn", Field::IpEcn, Dec), n("ip_ecn", Field::IpEcn, Dec),
    n("nw_ttl", Field::IpTtl, Dec),
    n("ip_frag", Field::IpFrag, Frag), n("nw_frag", Field::IpFrag, Frag),
    n("tp_src", Field::TpSrc, Dec), n("tcp_src", Field::TpSrc, Dec),
    n("udp_src", Field::TpSrc, Dec), n("sctp_src", Field::TpSrc, Dec),
    n("tp_dst", Field::TpDst, Dec), n("tcp_dst", Field::TpDst, Dec),
    n("udp_dst", Field::TpDst, Dec), n("sctp_dst", Field::TpDst, Dec),
    n("icmp_type", Field::IcmpType, Dec), n("icmpv4_type", Field::IcmpType, Dec),
    n("icmp_code", Field::IcmpCode, Dec), n("icmpv4_code", Field::IcmpCode, Dec),
    n("arp_sha", Field::ArpSha, Mac), n("arp_tha", Field::ArpTha, Mac),
    n("ipv6_src", Field::Ipv6SrcLow, Ipv6), n("ipv6_dst", Field::Ipv6DstLow, Ipv6),
    n("ipv6_label", Field::Ipv6Label, Hex), n("ipv6_exthdr", Field::Ipv6Exthdr, Hex),
    n("icmpv6_type", Field::Icmpv6Type, Dec), n("icmpv6_code", Field::Icmpv6Code, Dec),
    n("nd_target", Field::NdTargetLow, Ipv6),
    n("nd_sll", Field::NdSll, Mac), n("nd_tll", Field::NdTll, Mac),
    n("mpls_label", Field::MplsLabel, Dec), n("mpls_tc", Field::MplsTc, Dec),
    n("mpls_bos", Field::MplsBos, Dec), n("mpls_ttl", Field::MplsTtl, Dec),
    n("pbb_isid", Field::PbbIsid, Dec),
    // NXM/OXM names, usable wherever a field name is.
    n("NXM_OF_IN_PORT", Field::InPort, Port), n("OXM_OF_IN_PORT", Field::InPort, Port),
    n("NXM_NX_REG0", Field::Reg(0), Hex), n("NXM_NX_REG1", Field::Reg(1), Hex),
    n("NXM_NX_REG2", Field::Reg(2), Hex), n("NXM_NX_REG3", Field::Reg(3), Hex),
    n("NXM_NX_REG4", Field::Reg(4), Hex), n("NXM_NX_REG5", Field::Reg(5), Hex),
    n("NXM_NX_REG6", Field::Reg(6), Hex), n("NXM_NX_REG7", Field::Reg(7), Hex),
    n("NXM_NX_TUN_ID", Field::TunId, Hex), n("OXM_OF_TUNNEL_ID", Field::TunId, Hex),
    n("NXM_NX_TUN_IPV4_SRC", Field::TunSrc, Ipv4),
    n("NXM_NX_TUN_IPV4_DST", Field::TunDst, Ipv4),
    n("NXM_NX_PKT_MARK", Field::PktMark, Hex),
    n("NXM_NX_CT_STATE", Field::CtState, CtState),
    n("NXM_NX_CT_ZONE", Field::CtZone, Dec),
    n("NXM_NX_CT_MARK", Field::CtMark, Hex),
    n("NXM_NX_CT_LABEL", Field::CtLabelLow, Label),
    n("OXM_OF_METADATA", Field::Metadata, Hex),
    n("NXM_OF_ETH_SRC", Field::EthSrc, Mac), n("OXM_OF_ETH_SRC", Field::EthSrc, Mac),
    n("NXM_OF_ETH_DST", Field::EthDst, Mac), n("OXM_OF_ETH_DST", Field::EthDst, Mac),
    n("NXM_OF_ETH_TYPE", Field::EthType, Hex), n("OXM_OF_ETH_TYPE", Field::EthType, Hex),
    n("NXM_OF_VLAN_TCI", Field::VlanTci, Hex),
    n("NXM_OF_IP_SRC", Field::IpSrc, Ipv4), n("OXM_OF_IPV4_SRC", Field::IpSrc, Ipv4),
    n("NXM_OF_IP_DST", Field::IpDst, Ipv4), n("OXM_OF_IPV4_DST", Field::IpDst, Ipv4),
    n("NXM_OF_IP_PROTO", Field::IpProto, Dec), n("OXM_OF_IP_PROTO", Field::IpProto, Dec),
    n("NXM_NX_IP_TTL", Field::IpTtl, Dec),
    n("NXM_NX_IP_FRAG", Field::IpFrag, Frag),
    n("NXM_OF_TCP_SRC", Field::TpSrc, Dec), n("OXM_OF_TCP_SRC", Field::TpSrc, Dec),
    n("NXM_OF_TCP_DST", Field::TpDst, Dec), n("OXM_OF_TCP_DST", Field::TpDst, Dec),
    n("NXM_OF_UDP_SRC", Field::TpSrc, Dec), n("OXM_OF_UDP_SRC", Field::TpSrc, Dec),
    n("NXM_OF_UDP_DST", Field::TpDst, Dec), n("OXM_OF_UDP_DST", Field::TpDst, Dec),
    n("NXM_OF_ARP_OP", Field::ArpOp, Dec), n("OXM_OF_ARP_OP", Field::ArpOp, Dec),
    n("NXM_OF_ARP_SPA", Field::ArpSpa, Ipv4), n("OXM_OF_ARP_SPA", Field::ArpSpa, Ipv4),
    n("NXM_OF_ARP_TPA", Field::ArpTpa, Ipv4), n("OXM_OF_ARP_TPA", Field::ArpTpa, Ipv4),
    n("NXM_NX_ARP_SHA", Field::ArpSha, Mac), n("OXM_OF_ARP_SHA", Field::ArpSha, Mac),
    n("NXM_NX_ARP_THA", Field::ArpTha, Mac), n("OXM_OF_ARP_THA", Field::ArpTha, Mac),
    n("OXM_OF_IP_DSCP", Field::IpDscp, Dec),
    n("NXM_NX_IP_ECN", Field::IpEcn, Dec), n("OXM_OF_IP_ECN", Field::IpEcn, Dec),
    n("NXM_OF_ICMP_TYPE", Field::IcmpType, Dec), n("OXM_OF_ICMPV4_TYPE", Field::IcmpType, Dec),
    n("NXM_OF_ICMP_CODE", Field::IcmpCode, Dec), n("OXM_OF_ICMPV4_CODE", Field::IcmpCode, Dec),
    n("NXM_NX_IPV6_SRC", Field::Ipv6SrcLow, Ipv6), n("OXM_OF_IPV6_SRC", Field::Ipv6SrcLow, Ipv6),
    n("NXM_NX_IPV6_DST", Field::Ipv6DstLow, Ipv6), n("OXM_OF_IPV6_DST", Field::Ipv6DstLow, Ipv6),
    n("NXM_NX_IPV6_LABEL", Field::Ipv6Label, Hex), n("OXM_OF_IPV6_FLABEL", Field::Ipv6Label, Hex),
    n("OXM_OF_IPV6_EXTHDR", Field::Ipv6Exthdr, Hex),
    n("NXM_NX_ICMPV6_TYPE", Field::Icmpv6Type, Dec), n("OXM_OF_ICMPV6_TYPE", Field::Icmpv6Type, Dec),
    n("NXM_NX_ICMPV6_CODE", Field::Icmpv6Code, Dec), n("OXM_OF_ICMPV6_CODE", Field::Icmpv6Code, Dec),
    n("NXM_NX_ND_TARGET", Field::NdTargetLow, Ipv6), n("OXM_OF_IPV6_ND_TARGET", Field::NdTargetLow, Ipv6),
    n("NXM_NX_ND_SLL", Field::NdSll, Mac), n("OXM_OF_IPV6_ND_SLL", Field::NdSll, Mac),
    n("NXM_NX_ND_TLL", Field::NdTll, Mac), n("OXM_OF_IPV6_ND_TLL", Field::NdTll, Mac),
    n("OXM_OF_MPLS_LABEL", Field::MplsLabel, Dec), n("OXM_OF_MPLS_TC", Field::MplsTc, Dec),
    n("OXM_OF_MPLS_BOS", Field::MplsBos, Dec), n("NXM_NX_MPLS_TTL", Field::MplsTtl, Dec),
    n("OXM_OF_PBB_ISID", Field::PbbIsid, Dec),
];

/// The field a name denotes, with its value syntax.
pub(crate) fn lookup(name: &str) -> Option<(Field, Syntax)> {
    NAMES
        .iter()
        .find(|e| {
            if e.name.starts_with("NXM_") || e.name.starts_with("OXM_") {
                e.name.eq_ignore_ascii_case(name)
            } else {
                e.name == name
            }
        })
        .map(|e| (e.field, e.syntax))
}

/// The field a match/set_field name denotes (`nw_src`, `NXM_NX_REG0`...).
pub fn field_by_name(name: &str) -> Option<Field> {
    lookup(name).map(|(f, _)| f)
}

/// The value syntax of a field as dumps print it.
pub(crate) fn syntax_of(field: Field) -> Syntax {
    match field {
        Field::InPort => Port,
        Field::TunSrc
        | Field::TunDst
        | Field::IpSrc
        | Field::IpDst
        | Field::ArpSpa
        | Field::ArpTpa => Ipv4,
        Field::EthSrc
        | Field::EthDst
        | Field::ArpSha
        | Field::ArpTha
        | Field::NdSll
        | Field::NdTll => Mac,
        Field::Ipv6SrcLow
        | Field::Ipv6SrcHigh
        | Field::Ipv6DstLow
        | Field::Ipv6DstHigh
        | Field::NdTargetLow
        | Field::NdTargetHigh => Ipv6,
        Field::CtState => CtState,
        Field::IpFrag => Frag,
        Field::CtZone
        | Field::IpProto
        | Field::ArpOp
        | Field::IpDscp
        | Field::IpEcn
        | Field::IpTtl
        | Field::TpSrc
        | Field::TpDst
        | Field::IcmpType
        | Field::IcmpCode
        | Field::Icmpv6Type
        | Field::Icmpv6Code
        | Field::MplsLabel
        | Field::MplsTc
        | Field::MplsBos
        | Field::MplsTtl
        | Field::PbbIsid => Dec,
        Field::PktMark
        | Field::Reg(_)
        | Field::TunId
        | Field::CtMark
        | Field::CtLabelLow
        | Field::CtLabelHigh
        | Field::Metadata
        | Field::EthType
        | Field::VlanTci
        | Field::Ipv6Label
        | Field::Ipv6Exthdr => Hex,
    }
}

/// The NXM name Nicira actions print for a field (`NXM_NX_REG0`).
pub(crate) fn nxm_name(field: Field) -> &'static str {
    match field {
        Field::InPort => "NXM_OF_IN_PORT",
        Field::PktMark => "NXM_NX_PKT_MARK",
        Field::Reg(0) => "NXM_NX_REG0",
        Field::Reg(1) => "NXM_NX_REG1",
        Field::Reg(2) => "NXM_NX_REG2",
        Field::Reg(3) => "NXM_NX_REG3",
        Field::Reg(4) => "NXM_NX_REG4",
        Field::Reg(5) => "NXM_NX_REG5",
        Field::Reg(6) => "NXM_NX_REG6",
        Field::Reg(_) => "NXM_NX_REG7",
        Field::TunId => "NXM_NX_TUN_ID",
        Field::TunSrc => "NXM_NX_TUN_IPV4_SRC",
        Field::TunDst => "NXM_NX_TUN_IPV4_DST",
        Field::CtState => "NXM_NX_CT_STATE",
        Field::CtMark => "NXM_NX_CT_MARK",
        Field::CtZone => "NXM_NX_CT_ZONE",
        Field::CtLabelLow | Field::CtLabelHigh => "NXM_NX_CT_LABEL",
        Field::Metadata => "OXM_OF_METADATA",
        Field::EthSrc => "NXM_OF_ETH_SRC",
        Field::VlanTci => "NXM_OF_VLAN_TCI",
        Field::EthDst => "NXM_OF_ETH_DST",
        Field::EthType => "NXM_OF_ETH_TYPE",
        Field::IpSrc => "NXM_OF_IP_SRC",
        Field::IpDst => "NXM_OF_IP_DST",
        Field::ArpSpa => "NXM_OF_ARP_SPA",
        Field::ArpTpa => "NXM_OF_ARP_TPA",
        Field::IpProto => "NXM_OF_IP_PROTO",
        Field::ArpOp => "NXM_OF_ARP_OP",
        Field::IpDscp => "OXM_OF_IP_DSCP",
        Field::IpEcn => "NXM_NX_IP_ECN",
        Field::IpTtl => "NXM_NX_IP_TTL",
        Field::IpFrag => "NXM_NX_IP_FRAG",
        Field::TpSrc => "NXM_OF_TCP_SRC",
        Field::TpDst => "NXM_OF_TCP_DST",
        Field::IcmpType => "NXM_OF_ICMP_TYPE",
        Field::IcmpCode => "NXM_OF_ICMP_CODE",
        Field::ArpSha => "NXM_NX_ARP_SHA",
        Field::ArpTha => "NXM_NX_ARP_THA",
        Field::Ipv6SrcLow | Field::Ipv6SrcHigh => "NXM_NX_IPV6_SRC",
        Field::Ipv6DstLow | Field::Ipv6DstHigh => "NXM_NX_IPV6_DST",
        Field::Ipv6Label => "NXM_NX_IPV6_LABEL",
        Field::Ipv6Exthdr => "OXM_OF_IPV6_EXTHDR",
        Field::Icmpv6Type => "NXM_NX_ICMPV6_TYPE",
        Field::Icmpv6Code => "NXM_NX_ICMPV6_CODE",
        Field::NdTargetLow | Field::NdTargetHigh => "NXM_NX_ND_TARGET",
        Field::NdSll => "NXM_NX_ND_SLL",
        Field::NdTll => "NXM_NX_ND_TLL",
        Field::MplsLabel => "OXM_OF_MPLS_LABEL",
        Field::MplsTc => "OXM_OF_MPLS_TC",
        Field::MplsBos => "OXM_OF_MPLS_BOS",
        Field::MplsTtl => "NXM_NX_MPLS_TTL",
        Field::PbbIsid => "OXM_OF_PBB_ISID",
    }
}

/// Parses an unsigned integer like C's `strtoull(s, 0)`: decimal, `0x` hex
/// or leading-zero octal; a leading `-` wraps (ovs-ofctl accepts
/// `cookie=1/-1`).
pub(crate) fn parse_uint(token: &str, s: &str) -> Result<u64, TextError> {
    let (neg, digits) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    let parsed = if let Some(hex) = digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        u64::from_str_radix(hex, 16)
    } else if digits.len() > 1 && digits.starts_with('0') {
        u64::from_str_radix(&digits[1..], 8)
    } else {
        digits.parse::<u64>()
    };
    let v = parsed.map_err(|_| TextError::value(token, format!("`{s}` is not a number")))?;
    Ok(if neg { v.wrapping_neg() } else { v })
}

/// Parses an integer that must fit in `bits`.
pub(crate) fn parse_uint_bits(token: &str, s: &str, bits: u32) -> Result<u64, TextError> {
    let v = parse_uint(token, s)?;
    if bits < 64 && v >> bits != 0 {
        return Err(TextError::value(
            token,
            format!("{s} does not fit in {bits} bits"),
        ));
    }
    Ok(v)
}

pub(crate) fn parse_ipv4(token: &str, s: &str) -> Result<u32, TextError> {
    s.parse::<std::net::Ipv4Addr>()
        .map(u32::from)
        .map_err(|_| TextError::value(token, format!("`{s}` is not an IPv4 address")))
}

pub(crate) fn parse_mac(token: &str, s: &str) -> Result<u64, TextError> {
    let mut v = 0u64;
    let mut n = 0;
    for part in s.split(':') {
        if part.is_empty() || part.len() > 2 {
            return Err(TextError::value(
                token,
                format!("`{s}` is not a MAC address"),
            ));
        }
        let b = u8::from_str_radix(part, 16)
            .map_err(|_| TextError::value(token, format!("`{s}` is not a MAC address")))?;
        v = v << 8 | u64::from(b);
        n += 1;
    }
    if n != 6 {
        return Err(TextError::value(
            token,
            format!("`{s}` is not a MAC address"),
        ));
    }
    Ok(v)
}

/// Reserved port names ovs-ofctl accepts, with their numbers.
const RESERVED_PORTS: [(&str, u32); 8] = [
    ("IN_PORT", port::IN_PORT),
    ("TABLE", port::TABLE),
    ("NORMAL", port::NORMAL),
    ("FLOOD", port::FLOOD),
    ("ALL", port::ALL),
    ("CONTROLLER", port::CONTROLLER),
    ("LOCAL", port::LOCAL),
    ("ANY", port::ANY),
];

/// A port number, reserved name (any case) or, with `names`, a port name.
pub(crate) fn parse_port(
    token: &str,
    s: &str,
    names: Option<&PortNames>,
) -> Result<u32, TextError> {
    if let Some((_, p)) = RESERVED_PORTS
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(s))
    {
        return Ok(*p);
    }
    if s.as_bytes().first().is_some_and(u8::is_ascii_digit) {
        let v = parse_uint(token, s)?;
        return u32::try_from(v)
            .map_err(|_| TextError::value(token, format!("port {s} is out of range")));
    }
    if let Some(p) = names.and_then(|m| m.get(s)) {
        return Ok(*p);
    }
    Err(TextError::value(token, format!("unknown port `{s}`")))
}

/// How a port prints: a number or the reserved name.
pub(crate) fn format_port(p: u32) -> String {
    match RESERVED_PORTS.iter().find(|(_, n)| *n == p) {
        Some((name, _)) => (*name).to_string(),
        None => p.to_string(),
    }
}

/// Conntrack state bits, in the order OVS prints them.
pub(crate) const CT_STATE_BITS: [(&str, u64); 8] = [
    ("new", 0x01),
    ("est", 0x02),
    ("rel", 0x04),
    ("rpl", 0x08),
    ("inv", 0x10),
    ("trk", 0x20),
    ("snat", 0x40),
    ("dnat", 0x80),
];

fn parse_ct_state(token: &str, s: &str) -> Result<(u64, u64), TextError> {
    if s.starts_with(|c: char| c.is_ascii_digit()) {
        return parse_int_masked(token, s, 32);
    }
    let (mut value, mut mask) = (0u64, 0u64);
    let mut rest = s;
    while !rest.is_empty() {
        let set = match rest.as_bytes().first() {
            Some(b'+') => true,
            Some(b'-') => false,
            _ => {
                return Err(TextError::value(
                    token,
                    format!("ct_state flags must start with + or -, at `{rest}`"),
                ))
            }
        };
        rest = &rest[1..];
        let end = rest.find(['+', '-']).unwrap_or(rest.len());
        let name = &rest[..end];
        let bit = CT_STATE_BITS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, b)| *b)
            .ok_or_else(|| TextError::value(token, format!("unknown ct_state flag `{name}`")))?;
        if mask & bit != 0 {
            return Err(TextError::value(
                token,
                format!("flag `{name}` given twice"),
            ));
        }
        mask |= bit;
        if set {
            value |= bit;
        }
        rest = &rest[end..];
    }
    Ok((value, mask))
}

/// `value[/mask]` of the 128-bit ct_label: hexadecimal with `0x`, else
/// decimal, as ovs-ofctl reads wide fields.
pub(crate) fn parse_label(token: &str, s: &str) -> Result<(u128, u128), TextError> {
    let one = |v: &str| {
        let parsed = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
            Some(hex) => u128::from_str_radix(hex, 16),
            None => v.parse::<u128>(),
        };
        parsed.map_err(|_| {
            TextError::value(
                token,
                format!("`{v}` is not a number that fits the 128-bit ct_label"),
            )
        })
    };
    match s.split_once('/') {
        Some((v, m)) => Ok((one(v)?, one(m)?)),
        None => Ok((one(s)?, u128::MAX)),
    }
}

/// `address[/prefix]` or `address/mask-address` of an IPv6 field, as
/// (value, mask).
pub(crate) fn parse_ipv6(token: &str, s: &str) -> Result<(u128, u128), TextError> {
    let addr = |a: &str| {
        a.parse::<std::net::Ipv6Addr>()
            .map(u128::from)
            .map_err(|_| TextError::value(token, format!("`{a}` is not an IPv6 address")))
    };
    match s.split_once('/') {
        None => Ok((addr(s)?, u128::MAX)),
        Some((a, m)) if m.contains(':') => Ok((addr(a)?, addr(m)?)),
        Some((a, m)) => {
            let len: u32 = m
                .parse()
                .ok()
                .filter(|l| *l <= 128)
                .ok_or_else(|| TextError::value(token, format!("bad prefix length `{m}`")))?;
            let mask = if len == 0 {
                0
            } else {
                u128::MAX << (128 - len)
            };
            Ok((addr(a)?, mask))
        }
    }
}

/// An IPv6 value and mask as OVS prints them: the address alone when
/// exact, `/prefix` for a CIDR mask, else `/mask-address`.
pub(crate) fn format_ipv6_masked(v: u128, m: u128) -> String {
    let a = std::net::Ipv6Addr::from(v);
    if m == u128::MAX {
        a.to_string()
    } else if m.leading_ones() + m.trailing_zeros() == 128 {
        format!("{a}/{}", m.leading_ones())
    } else {
        format!("{a}/{}", std::net::Ipv6Addr::from(m))
    }
}

/// `value[/mask]` of an integer field.
fn parse_int_masked(token: &str, s: &str, bits: u32) -> Result<(u64, u64), TextError> {
    let full = if bits >= 64 {
        u64::MAX
    } else {
        (1 << bits) - 1
    };
    match s.split_once('/') {
        Some((v, m)) => Ok((
            parse_uint_bits(token, v, bits)?,
            parse_uint_bits(token, m, bits)?,
        )),
        None => Ok((parse_uint_bits(token, s, bits)?, full)),
    }
}

/// Parses `value` of `field` written in `syntax`; returns (value, mask)
/// right-aligned in the field.
pub(crate) fn parse_value(
    token: &str,
    field: Field,
    syntax: Syntax,
    s: &str,
    ports: Option<&PortNames>,
) -> Result<(u64, u64), TextError> {
    let full = field.full_mask();
    match syntax {
        Port => Ok((u64::from(parse_port(token, s, ports)?), full)),
        Hex | Dec => parse_int_masked(token, s, field.bits()),
        Tos => {
            let v = parse_uint_bits(token, s, 8)?;
            if v & 3 != 0 {
                return Err(TextError::value(
                    token,
                    "nw_tos must have its two low (ECN) bits zero",
                ));
            }
            Ok((v >> 2, full))
        }
        Ipv4 => {
            let (addr, mask) = match s.split_once('/') {
                None => (parse_ipv4(token, s)?, u32::MAX),
                Some((a, m)) if m.contains('.') => (parse_ipv4(token, a)?, parse_ipv4(token, m)?),
                Some((a, m)) => {
                    let len: u32 = m.parse().ok().filter(|l| *l <= 32).ok_or_else(|| {
                        TextError::value(token, format!("bad prefix length `{m}`"))
                    })?;
                    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
                    (parse_ipv4(token, a)?, mask)
                }
            };
            Ok((u64::from(addr), u64::from(mask)))
        }
        Mac => match s.split_once('/') {
            Some((v, m)) => Ok((parse_mac(token, v)?, parse_mac(token, m)?)),
            None => Ok((parse_mac(token, s)?, full)),
        },
        CtState => parse_ct_state(token, s),
        // Callers look for `Label` and `Ipv6` first: 128 bits do not fit
        // the result.
        Label | Ipv6 => Err(TextError::value(
            token,
            format!("{} is 128 bits wide and cannot be used here", field.name()),
        )),
        Frag => match s {
            "no" => Ok((0, 1)),
            "yes" => Ok((1, 1)),
            "first" => Ok((1, 3)),
            "later" => Ok((3, 3)),
            "not_later" => Ok((0, 2)),
            _ => Err(TextError::value(
                token,
                "ip_frag must be no, yes, first, later or not_later",
            )),
        },
    }
}

/// Parses `s` as a value of `field` (its whole-field syntax, no name
/// needed), e.g. for `set_field:VALUE->field`.
pub fn parse_field_value(field: Field, s: &str) -> Result<(u64, u64), TextError> {
    parse_value(s, field, syntax_of(field), s, None)
}

pub(crate) fn format_ipv4(v: u64) -> String {
    std::net::Ipv4Addr::from(v as u32).to_string()
}

pub(crate) fn format_mac(v: u64) -> String {
    let b = v.to_be_bytes();
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        b[2], b[3], b[4], b[5], b[6], b[7]
    )
}

/// A value as `set_field:` prints it (whole field, no mask).
pub(crate) fn format_value(field: Field, v: u64) -> String {
    match syntax_of(field) {
        Ipv4 => format_ipv4(v),
        Mac => format_mac(v),
        Port => format_port(v as u32),
        Dec => v.to_string(),
        Tos => (v << 2).to_string(),
        Hex | CtState | Frag | Label | Ipv6 => format!("{v:#x}"),
    }
}
