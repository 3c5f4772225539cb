//! The one table of fields, [`FIELDS`], and the lookups over it.
//!
//! # Design
//!
//! An entry ([`FieldDef`]) is one field as OVS's meta-flow defines one
//! (`mf_field`): a value with one width, one maskability, one set of
//! prerequisites and one text syntax. Its identity is its `name` (or, for
//! the one unnamed entry, its header), unique across the table; code
//! refers to the key field (`Field`) or a header, and asks the registry
//! for the entry. It says
//! - its names: `name`, the one ovs-ofctl prints in a match (empty for a
//!   field known only by its wire header, NXM_OF_IN_PORT), and `aliases`,
//!   the other spellings ovs-ofctl accepts (`ip_src` for `nw_src`);
//! - where it lives in the flow key: bits `shift..shift+bits` of the key
//!   field `key` ([`crate::key`] owns the word layout). A field may be
//!   part of a key field (OXM's `vlan_vid` is 13 of the 16 TCI bits) and
//!   several fields may share one (`tcp_src`, `udp_src` and `sctp_src` are
//!   the key's `TpSrc`). A 128-bit field names the low half of its key
//!   pair (see [`Field::high_half`]) and has `bits == 128`;
//! - its wire form: `bytes` per value (a mask has as many), `wire_shift`
//!   (NXM_OF_IP_TOS carries the DSCP in its upper 6 bits), and up to two
//!   TLV headers, `oxm` (class 0x8000) and `nxm` (class 0x0000 or
//!   0x0001), each with its class, code and name;
//! - `maskable` (both on the wire and in text), `in_match` (whether a
//!   match may use it; the 16-bit NXM_OF_IN_PORT is an action operand
//!   only), `prereq`, and `syntax`, its text form, `None` for a field the
//!   text syntax does not offer (vlan_vid and vlan_pcp: xbr's text speaks
//!   OVS's `vlan_tci`).
//!
//! Every header of every entry is one the codec decodes, in a match and
//! as a Nicira action operand, as OVS does; which one it encodes is the
//! codec's choice ([`wire_headers`] gives it the order).
//!
//! # Invariants (checked by this module's tests)
//!
//! - (class, code) is unique among all headers; header names are unique
//!   (case-insensitively, as OVS compares them) and start `OXM_OF_` for
//!   class 0x8000, `NXM_OF_` for 0x0000 and `NXM_NX_` for 0x0001.
//! - Every text name (name, alias, header name of an entry with a
//!   syntax) denotes one entry.
//! - `shift + bits` fits the key field (128 for a wide one) and
//!   `bits + wire_shift` fits `bytes`.
//! - Every key field is carried whole by at least one entry with a
//!   syntax, which gives it its text syntax and NXM name.
//!
//! # Costs
//!
//! The table is static, about 60 entries. Name and header lookups are a
//! linear scan (text parsing and wire decoding, never per packet); the
//! codec's ordered header list is built once ([`wire_headers`]), and so
//! is the match's table of which key fields need what
//! ([`key_prereqs`], cached by `matching.rs`), since that one runs twice
//! per flow-mod.

use super::protocols::{
    ICMPV6_ND_NA, ICMPV6_ND_NS, IP_PROTO_ICMP, IP_PROTO_ICMPV6, IP_PROTO_SCTP, IP_PROTO_TCP,
    IP_PROTO_UDP,
};
use super::{Prereq, Syntax};
use crate::key::Field;
use std::sync::LazyLock;

/// OpenFlow basic class.
pub const OXM_CLASS_OPENFLOW_BASIC: u16 = 0x8000;
/// Nicira extensions (NXM1).
pub const OXM_CLASS_NXM1: u16 = 0x0001;
/// Nicira's OpenFlow 1.0 fields (NXM0).
pub const OXM_CLASS_NXM0: u16 = 0x0000;

/// One TLV header of a field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub class: u16,
    pub code: u8,
    pub name: &'static str,
}

/// One field (see the module comment for what each part means).
#[derive(Clone, Copy, Debug)]
pub struct FieldDef {
    pub name: &'static str,
    pub aliases: &'static [&'static str],
    pub key: Field,
    pub shift: u32,
    pub bits: u32,
    pub bytes: u8,
    pub wire_shift: u32,
    pub maskable: bool,
    pub in_match: bool,
    pub prereq: Prereq,
    pub syntax: Option<Syntax>,
    pub oxm: Option<Header>,
    pub nxm: Option<Header>,
}

impl FieldDef {
    /// The field's headers: OXM first, then NXM.
    pub fn headers(&self) -> impl Iterator<Item = &Header> {
        self.oxm.iter().chain(self.nxm.iter())
    }

    /// Whether the field is all of its key field, unshifted: the entry
    /// that gives the key field its text syntax and NXM name.
    pub fn is_plain(&self) -> bool {
        self.shift == 0 && self.wire_shift == 0
    }

    /// Whether the field is 128 bits wide (ct_label, IPv6 addresses,
    /// nd_target).
    pub fn is_wide(&self) -> bool {
        self.bits == 128
    }

    /// Every name the text syntax accepts for it (none without a syntax).
    pub fn text_names(&self) -> impl Iterator<Item = &'static str> + '_ {
        let on = self.syntax.is_some();
        std::iter::once(self.name)
            .filter(|n| !n.is_empty())
            .chain(self.aliases.iter().copied())
            .chain(self.headers().map(|h| h.name))
            .filter(move |_| on)
    }
}

/// Width in bits of a key field as fields see it: 128 for the low half
/// of a 128-bit pair.
pub const fn key_bits(f: Field) -> u32 {
    if f.high_half().is_some() {
        128
    } else {
        f.bits()
    }
}

const fn f(
    name: &'static str,
    key: Field,
    bytes: u8,
    maskable: bool,
    prereq: Prereq,
    syntax: Syntax,
) -> FieldDef {
    FieldDef {
        name,
        aliases: &[],
        key,
        shift: 0,
        bits: key_bits(key),
        bytes,
        wire_shift: 0,
        maskable,
        in_match: true,
        prereq,
        syntax: Some(syntax),
        oxm: None,
        nxm: None,
    }
}

const fn hdr(class: u16, code: u8, name: &'static str) -> Option<Header> {
    Some(Header { class, code, name })
}

impl FieldDef {
    const fn oxm(mut self, code: u8, name: &'static str) -> Self {
        self.oxm = hdr(OXM_CLASS_OPENFLOW_BASIC, code, name);
        self
    }
    const fn nxm0(mut self, code: u8, name: &'static str) -> Self {
        self.nxm = hdr(OXM_CLASS_NXM0, code, name);
        self
    }
    const fn nxm1(mut self, code: u8, name: &'static str) -> Self {
        self.nxm = hdr(OXM_CLASS_NXM1, code, name);
        self
    }
    const fn aka(mut self, aliases: &'static [&'static str]) -> Self {
        self.aliases = aliases;
        self
    }
    const fn part(mut self, shift: u32, bits: u32) -> Self {
        self.shift = shift;
        self.bits = bits;
        self
    }
    const fn wire_shift(mut self, n: u32) -> Self {
        self.wire_shift = n;
        self
    }
    const fn no_text(mut self) -> Self {
        self.syntax = None;
        self
    }
    const fn operand_only(mut self) -> Self {
        self.in_match = false;
        self
    }
}

use Prereq as P;
use Syntax::*;
const Y: bool = true;
const N: bool = false;
const TCP: Prereq = P::Proto(IP_PROTO_TCP);
const UDP: Prereq = P::Proto(IP_PROTO_UDP);
const SCTP: Prereq = P::Proto(IP_PROTO_SCTP);
const ICMP: Prereq = P::Proto(IP_PROTO_ICMP);
const ICMP6: Prereq = P::Proto(IP_PROTO_ICMPV6);

/// Every field xbr supports. Order matters in two ways: the key fields
/// appear in the order OVS writes a match in ([`encode_order`]), and
/// among the plain entries of a key field, the first gives the key field
/// its text syntax, and the first with an NXM header its NXM name
/// (`tp_src`, which has none, then `tcp_src`).
#[rustfmt::skip]
pub static FIELDS: [FieldDef; 62] = [
    // Metadata and L2, in the order OVS writes a match (nx_put_raw).
    f("in_port", Field::InPort, 4, N, P::None, Port).oxm(0, "OXM_OF_IN_PORT"),
    f("", Field::InPort, 2, N, P::None, Port).part(0, 16).nxm0(0, "NXM_OF_IN_PORT").operand_only(),
    f("dl_src", Field::EthSrc, 6, Y, P::None, Mac).aka(&["eth_src"])
        .oxm(4, "OXM_OF_ETH_SRC").nxm0(2, "NXM_OF_ETH_SRC"),
    f("dl_dst", Field::EthDst, 6, Y, P::None, Mac).aka(&["eth_dst"])
        .oxm(3, "OXM_OF_ETH_DST").nxm0(1, "NXM_OF_ETH_DST"),
    f("dl_type", Field::EthType, 2, N, P::None, Hex).aka(&["eth_type"])
        .oxm(5, "OXM_OF_ETH_TYPE").nxm0(3, "NXM_OF_ETH_TYPE"),
    f("vlan_tci", Field::VlanTci, 2, Y, P::None, Hex).nxm0(4, "NXM_OF_VLAN_TCI"),
    f("vlan_vid", Field::VlanTci, 2, Y, P::None, Hex).part(0, 13).no_text().oxm(6, "OXM_OF_VLAN_VID"),
    f("vlan_pcp", Field::VlanTci, 1, N, P::None, Dec).part(13, 3).no_text().oxm(7, "OXM_OF_VLAN_PCP"),
    // MPLS and PBB.
    f("mpls_tc", Field::MplsTc, 1, N, P::Mpls, Dec).oxm(35, "OXM_OF_MPLS_TC"),
    f("mpls_bos", Field::MplsBos, 1, N, P::Mpls, Dec).oxm(36, "OXM_OF_MPLS_BOS"),
    f("mpls_ttl", Field::MplsTtl, 1, N, P::Mpls, Dec).nxm1(30, "NXM_NX_MPLS_TTL"),
    f("mpls_label", Field::MplsLabel, 4, N, P::Mpls, Dec).oxm(34, "OXM_OF_MPLS_LABEL"),
    f("pbb_isid", Field::PbbIsid, 3, Y, P::Pbb, Dec).oxm(37, "OXM_OF_PBB_ISID"),
    // L3.
    f("nw_src", Field::IpSrc, 4, Y, P::Ipv4, Ipv4).aka(&["ip_src", "ipv4_src"])
        .oxm(11, "OXM_OF_IPV4_SRC").nxm0(7, "NXM_OF_IP_SRC"),
    f("nw_dst", Field::IpDst, 4, Y, P::Ipv4, Ipv4).aka(&["ip_dst", "ipv4_dst"])
        .oxm(12, "OXM_OF_IPV4_DST").nxm0(8, "NXM_OF_IP_DST"),
    f("ipv6_src", Field::Ipv6SrcLow, 16, Y, P::Ipv6, Ipv6)
        .oxm(26, "OXM_OF_IPV6_SRC").nxm1(19, "NXM_NX_IPV6_SRC"),
    f("ipv6_dst", Field::Ipv6DstLow, 16, Y, P::Ipv6, Ipv6)
        .oxm(27, "OXM_OF_IPV6_DST").nxm1(20, "NXM_NX_IPV6_DST"),
    f("ipv6_label", Field::Ipv6Label, 4, Y, P::Ipv6, Hex)
        .oxm(28, "OXM_OF_IPV6_FLABEL").nxm1(27, "NXM_NX_IPV6_LABEL"),
    f("ipv6_exthdr", Field::Ipv6Exthdr, 2, Y, P::Ipv6, Hex).oxm(39, "OXM_OF_IPV6_EXTHDR"),
    // The key keeps OVS's 8-bit ip_frag; the field is its two defined bits.
    f("ip_frag", Field::IpFrag, 1, Y, P::Ip, Frag).aka(&["nw_frag"]).part(0, 2)
        .nxm1(26, "NXM_NX_IP_FRAG"),
    f("nw_tos", Field::IpDscp, 1, N, P::Ip, Tos).wire_shift(2).nxm0(5, "NXM_OF_IP_TOS"),
    f("ip_dscp", Field::IpDscp, 1, N, P::Ip, Dec).oxm(8, "OXM_OF_IP_DSCP"),
    f("nw_ecn", Field::IpEcn, 1, N, P::Ip, Dec).aka(&["ip_ecn"])
        .oxm(9, "OXM_OF_IP_ECN").nxm1(28, "NXM_NX_IP_ECN"),
    f("nw_ttl", Field::IpTtl, 1, N, P::Ip, Dec).nxm1(29, "NXM_NX_IP_TTL"),
    f("nw_proto", Field::IpProto, 1, N, P::Ip, Dec).aka(&["ip_proto"])
        .oxm(10, "OXM_OF_IP_PROTO").nxm0(6, "NXM_OF_IP_PROTO"),
    // L4. `tp_src`/`tp_dst` are any transport protocol's ports; the text
    // syntax checks the protocol-named ones against ip_proto by name.
    f("tp_src", Field::TpSrc, 2, Y, P::Transport, Dec),
    f("tp_dst", Field::TpDst, 2, Y, P::Transport, Dec),
    f("tcp_src", Field::TpSrc, 2, Y, TCP, Dec).oxm(13, "OXM_OF_TCP_SRC").nxm0(9, "NXM_OF_TCP_SRC"),
    f("tcp_dst", Field::TpDst, 2, Y, TCP, Dec).oxm(14, "OXM_OF_TCP_DST").nxm0(10, "NXM_OF_TCP_DST"),
    f("udp_src", Field::TpSrc, 2, Y, UDP, Dec)
        .oxm(15, "OXM_OF_UDP_SRC").nxm0(11, "NXM_OF_UDP_SRC"),
    f("udp_dst", Field::TpDst, 2, Y, UDP, Dec)
        .oxm(16, "OXM_OF_UDP_DST").nxm0(12, "NXM_OF_UDP_DST"),
    f("sctp_src", Field::TpSrc, 2, Y, SCTP, Dec).oxm(17, "OXM_OF_SCTP_SRC"),
    f("sctp_dst", Field::TpDst, 2, Y, SCTP, Dec).oxm(18, "OXM_OF_SCTP_DST"),
    f("icmp_type", Field::IcmpType, 1, N, ICMP, Dec).aka(&["icmpv4_type"])
        .oxm(19, "OXM_OF_ICMPV4_TYPE").nxm0(13, "NXM_OF_ICMP_TYPE"),
    f("icmp_code", Field::IcmpCode, 1, N, ICMP, Dec).aka(&["icmpv4_code"])
        .oxm(20, "OXM_OF_ICMPV4_CODE").nxm0(14, "NXM_OF_ICMP_CODE"),
    f("icmpv6_type", Field::Icmpv6Type, 1, N, ICMP6, Dec)
        .oxm(29, "OXM_OF_ICMPV6_TYPE").nxm1(21, "NXM_NX_ICMPV6_TYPE"),
    f("icmpv6_code", Field::Icmpv6Code, 1, N, ICMP6, Dec)
        .oxm(30, "OXM_OF_ICMPV6_CODE").nxm1(22, "NXM_NX_ICMPV6_CODE"),
    // IPv6 neighbor discovery. OF1.3 makes these exact-only; OVS accepts
    // masks, as xbr does.
    f("nd_target", Field::NdTargetLow, 16, Y, P::NdAny, Ipv6)
        .oxm(31, "OXM_OF_IPV6_ND_TARGET").nxm1(23, "NXM_NX_ND_TARGET"),
    f("nd_sll", Field::NdSll, 6, Y, P::Nd(ICMPV6_ND_NS), Mac)
        .oxm(32, "OXM_OF_IPV6_ND_SLL").nxm1(24, "NXM_NX_ND_SLL"),
    f("nd_tll", Field::NdTll, 6, Y, P::Nd(ICMPV6_ND_NA), Mac)
        .oxm(33, "OXM_OF_IPV6_ND_TLL").nxm1(25, "NXM_NX_ND_TLL"),
    // ARP (its SPA/TPA and opcode overlay the IPv4 bits, see key/).
    f("arp_op", Field::ArpOp, 2, N, P::Arp, Dec)
        .oxm(21, "OXM_OF_ARP_OP").nxm0(15, "NXM_OF_ARP_OP"),
    f("arp_spa", Field::ArpSpa, 4, Y, P::Arp, Ipv4).oxm(22, "OXM_OF_ARP_SPA").nxm0(16, "NXM_OF_ARP_SPA"),
    f("arp_tpa", Field::ArpTpa, 4, Y, P::Arp, Ipv4).oxm(23, "OXM_OF_ARP_TPA").nxm0(17, "NXM_OF_ARP_TPA"),
    f("arp_sha", Field::ArpSha, 6, Y, P::Arp, Mac).oxm(24, "OXM_OF_ARP_SHA").nxm1(17, "NXM_NX_ARP_SHA"),
    f("arp_tha", Field::ArpTha, 6, Y, P::Arp, Mac).oxm(25, "OXM_OF_ARP_THA").nxm1(18, "NXM_NX_ARP_THA"),
    // Tunnel, registers, mark, conntrack, OpenFlow metadata.
    f("tun_id", Field::TunId, 8, Y, P::None, Hex).aka(&["tunnel_id"])
        .oxm(38, "OXM_OF_TUNNEL_ID").nxm1(16, "NXM_NX_TUN_ID"),
    f("tun_src", Field::TunSrc, 4, Y, P::None, Ipv4).nxm1(31, "NXM_NX_TUN_IPV4_SRC"),
    f("tun_dst", Field::TunDst, 4, Y, P::None, Ipv4).nxm1(32, "NXM_NX_TUN_IPV4_DST"),
    f("reg0", Field::Reg(0), 4, Y, P::None, Hex).nxm1(0, "NXM_NX_REG0"),
    f("reg1", Field::Reg(1), 4, Y, P::None, Hex).nxm1(1, "NXM_NX_REG1"),
    f("reg2", Field::Reg(2), 4, Y, P::None, Hex).nxm1(2, "NXM_NX_REG2"),
    f("reg3", Field::Reg(3), 4, Y, P::None, Hex).nxm1(3, "NXM_NX_REG3"),
    f("reg4", Field::Reg(4), 4, Y, P::None, Hex).nxm1(4, "NXM_NX_REG4"),
    f("reg5", Field::Reg(5), 4, Y, P::None, Hex).nxm1(5, "NXM_NX_REG5"),
    f("reg6", Field::Reg(6), 4, Y, P::None, Hex).nxm1(6, "NXM_NX_REG6"),
    f("reg7", Field::Reg(7), 4, Y, P::None, Hex).nxm1(7, "NXM_NX_REG7"),
    f("pkt_mark", Field::PktMark, 4, Y, P::None, Hex).nxm1(33, "NXM_NX_PKT_MARK"),
    f("ct_state", Field::CtState, 4, Y, P::None, CtState).nxm1(105, "NXM_NX_CT_STATE"),
    f("ct_zone", Field::CtZone, 2, N, P::None, Dec).nxm1(106, "NXM_NX_CT_ZONE"),
    f("ct_mark", Field::CtMark, 4, Y, P::None, Hex).nxm1(107, "NXM_NX_CT_MARK"),
    f("ct_label", Field::CtLabelLow, 16, Y, P::None, Label).nxm1(108, "NXM_NX_CT_LABEL"),
    f("metadata", Field::Metadata, 8, Y, P::None, Hex).oxm(2, "OXM_OF_METADATA"),
];

/// Whether `name` is a wire header name, compared case-insensitively as
/// OVS does (`nxm_nx_reg0` works); field names are case-sensitive.
fn is_header_name(name: &str) -> bool {
    name.starts_with("NXM_") || name.starts_with("OXM_")
}

/// The field a text name denotes (`nw_src`, `ip_src`, `NXM_NX_REG0`).
pub fn by_name(name: &str) -> Option<&'static FieldDef> {
    FIELDS.iter().find(|d| {
        d.text_names().any(|n| {
            if is_header_name(n) {
                n.eq_ignore_ascii_case(name)
            } else {
                n == name
            }
        })
    })
}

/// The field and header of a wire (class, code), if xbr knows it.
pub fn by_header(class: u16, code: u8) -> Option<(&'static FieldDef, &'static Header)> {
    FIELDS.iter().find_map(|d| {
        d.headers()
            .find(|h| h.class == class && h.code == code)
            .map(|h| (d, h))
    })
}

/// Rank of a header class in [`wire_headers`]' order.
fn class_rank(class: u16) -> u8 {
    match class {
        OXM_CLASS_OPENFLOW_BASIC => 0,
        OXM_CLASS_NXM1 => 1,
        _ => 2,
    }
}

static WIRE_HEADERS: LazyLock<Vec<(&'static FieldDef, &'static Header)>> = LazyLock::new(|| {
    let mut v: Vec<_> = FIELDS
        .iter()
        .flat_map(|d| d.headers().map(move |h| (d, h)))
        .collect();
    v.sort_by_key(|(_, h)| (class_rank(h.class), h.code));
    v
});

/// Every header the codec speaks, with its field: OpenFlow basic, then
/// NXM1, then NXM0, each by code. The codec dumps a match with the first
/// match-capable header of each key field, so this order makes OXM the
/// choice wherever a field has one, as OVS does for OpenFlow 1.3.
pub fn wire_headers() -> &'static [(&'static FieldDef, &'static Header)] {
    &WIRE_HEADERS
}

/// The plain entries (see [`FieldDef::is_plain`]) of a key field (a half
/// of a 128-bit field stands for the whole).
fn plain(field: Field) -> impl Iterator<Item = &'static FieldDef> {
    let key = field.low_half().unwrap_or(field);
    FIELDS
        .iter()
        .filter(move |d| d.key == key && d.syntax.is_some() && d.is_plain())
}

/// The text syntax of a key field's values as dumps and `set_field:`
/// print them. A half of ct_label is a 64-bit number, printed in hex.
pub fn syntax_of(field: Field) -> Syntax {
    match plain(field).find_map(|d| d.syntax) {
        Some(Syntax::Label) => Syntax::Hex,
        Some(s) => s,
        // Unreachable for a key field (the registry's tests check every
        // one has a plain entry); hex shows any value faithfully.
        None => Syntax::Hex,
    }
}

/// The name Nicira actions print for a key field (`NXM_NX_REG0`): its
/// NXM header's where it has one, else its OXM header's.
pub fn nxm_name(field: Field) -> &'static str {
    plain(field)
        .find_map(|d| d.nxm)
        .or_else(|| plain(field).find_map(|d| d.oxm))
        .map_or_else(|| field.name(), |h| h.name)
}

/// What an action operand written or decoded as `def` keeps of it
/// (`SubField::named`): `None` when `def` prints as its key field does
/// (the header [`nxm_name`] gives), else `def`'s name: `udp_src`,
/// `sctp_dst`, fields that share the key's transport ports with
/// `tcp_src`/`tcp_dst`.
pub fn operand_named(def: &FieldDef) -> Option<&'static str> {
    // Named entries that are all of their key field and have a header;
    // the first of a key's is the key field's own.
    let whole = |d: &&FieldDef| {
        !d.name.is_empty()
            && d.is_plain()
            && !d.is_wide()
            && d.bits == d.key.bits()
            && d.headers().next().is_some()
    };
    if !whole(&def) {
        return None;
    }
    let first = FIELDS.iter().filter(whole).find(|d| d.key == def.key)?;
    (first.name != def.name).then_some(def.name)
}

/// The header name an operand named `named` ([`operand_named`]) prints
/// and encodes with: the entry's NXM header where it has one, else its
/// OXM header.
pub fn operand_header_name(named: &str) -> Option<&'static str> {
    by_name(named).and_then(|d| d.nxm.or(d.oxm)).map(|h| h.name)
}

/// Whether `d`'s bits overlap the key field `field`'s (an ARP SPA and
/// nw_src share bits, as do icmp_type and tp_src; a 128-bit field
/// overlaps both its halves).
fn overlaps(d: &FieldDef, field: Field) -> bool {
    if d.is_wide() || field.is_half() {
        return field.low_half() == Some(d.key);
    }
    let (a, b) = (d.key.layout(), field.layout());
    let (a_lo, b_lo) = (a.shift + d.shift, b.shift);
    a.word == b.word && a_lo < b_lo + b.bits && b_lo < a_lo + d.bits
}

/// The prerequisites under which a key field's bits mean something: one
/// per field whose bits overlap them, duplicates removed. A key field is
/// available in a match that meets any of them; one with
/// [`Prereq::None`] among them always is (`Match::check_prerequisites`
/// is built on this).
pub fn key_prereqs(field: Field) -> Vec<Prereq> {
    let mut out: Vec<Prereq> = Vec::new();
    for d in FIELDS.iter().filter(|d| overlaps(d, field)) {
        if !out.contains(&d.prereq) {
            out.push(d.prereq);
        }
    }
    out
}

/// The name a match prints a key field with (`dl_src`, `nw_tos`,
/// `tp_src`; for either half of a 128-bit field the whole one's,
/// `ipv6_src`): the first named entry of it that has a syntax.
/// [`Field::name`], the key's own name, agrees (checked by the tests).
pub fn name_of(field: Field) -> &'static str {
    let key = field.low_half().unwrap_or(field);
    FIELDS
        .iter()
        .find(|d| d.key == key && d.syntax.is_some() && !d.name.is_empty())
        .map_or_else(|| field.name(), |d| d.name)
}

static ENCODE_ORDER: LazyLock<Vec<Field>> = LazyLock::new(|| {
    let mut out: Vec<Field> = Vec::new();
    for d in FIELDS.iter().filter(|d| d.in_match) {
        if !out.contains(&d.key) {
            out.push(d.key);
        }
    }
    out
});

/// The key fields a match can use, in the order OVS writes a match in
/// (`nx_put_raw`: metadata, L2, MPLS, L3, L4, ARP, tunnel, registers,
/// mark, conntrack, OpenFlow metadata); a 128-bit field appears once, as
/// its low half. Keeping OVS's order makes a dumped flow byte-identical
/// to the FLOW_MOD ovs-ofctl sent. Built once.
pub fn encode_order() -> &'static [Field] {
    &ENCODE_ORDER
}
