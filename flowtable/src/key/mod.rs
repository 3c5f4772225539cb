//! The flow key: every header field and metadata value a flow can match on.
//!
//! # Design
//!
//! A [`FlowKey`] is a fixed array of [`KEY_WORDS`] 64-bit words, like OVS's
//! `struct flow` seen through a miniflow. Every field lives at a fixed bit
//! position inside one word (see [`Field::layout`]), so a *mask* is simply
//! another `FlowKey`, and the classifier can mask and hash a key word by word
//! without knowing which fields a subtable uses.
//!
//! Overlays follow OVS: ARP's SPA/TPA share the IPv4 source/destination bits,
//! ARP's opcode shares `ip_proto`, and ICMP type/code share the transport
//! source/destination ports. Which interpretation applies is decided by the
//! prerequisites (`eth_type`, `ip_proto`), never by the bits themselves.
//!
//! Invariants: a key built by the packet parser has zero in every field the
//! packet does not carry; metadata (registers, tunnel, conntrack) starts at
//! zero when a packet enters the pipeline unless the port sets it (a tunnel
//! port sets `tun_*`).
//!
//! ct_label is 128 bits wide, more than a [`Field`] value (a `u64`) holds,
//! so the key stores it as two 64-bit fields, [`Field::CtLabelLow`] (bits
//! 0..63) and [`Field::CtLabelHigh`] (bits 64..127), each a word of its
//! own: masking, hashing and the classifier handle them like any other
//! field, and only the edges that see the whole label (text, wire, the
//! `ct()` action) join the halves ([`FlowKey::ct_label`], [`split_label`]).
//! The IPv6 source, destination and ND target addresses are split the same
//! way ([`Field::high_half`], [`FlowKey::get128`]); ND's link-layer options
//! share the ARP hardware address bits and ICMPv6 type/code the transport
//! ports, as in OVS.
//!
//! Cost: reading or writing a field is a shift and a mask. Keys are `Copy`
//! (216 bytes) and never allocate.

use std::fmt;

/// Number of 64-bit words in a [`FlowKey`].
pub const KEY_WORDS: usize = 27;

/// A packet's parsed headers plus pipeline metadata, or a mask over them.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FlowKey {
    pub words: [u64; KEY_WORDS],
}

/// Every field the pipeline knows, with its fixed place in a [`FlowKey`].
///
/// Fields are logical: `IpSrc` and `ArpSpa` name the same bits; the wire
/// codec picks the OXM/NXM header by the flow's prerequisites.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Field {
    InPort,
    PktMark,
    Reg(u8),
    TunId,
    TunSrc,
    TunDst,
    CtState,
    CtMark,
    CtZone,
    /// Bits 0..63 of the 128-bit ct_label.
    CtLabelLow,
    /// Bits 64..127 of the 128-bit ct_label.
    CtLabelHigh,
    Metadata,
    EthSrc,
    /// 802.1Q TCI with OVS's CFI-as-present convention: 0 = no VLAN header.
    VlanTci,
    EthDst,
    EthType,
    IpSrc,
    IpDst,
    ArpSpa,
    ArpTpa,
    IpProto,
    ArpOp,
    IpDscp,
    IpEcn,
    IpTtl,
    /// OVS `ip_frag` bits: 1 = fragment (any), 2 = later fragment.
    IpFrag,
    TpSrc,
    TpDst,
    IcmpType,
    IcmpCode,
    ArpSha,
    ArpTha,
    /// Bits 64..127 of the IPv6 source address.
    Ipv6SrcHigh,
    /// Bits 0..63 of the IPv6 source address.
    Ipv6SrcLow,
    Ipv6DstHigh,
    Ipv6DstLow,
    /// The IPv6 flow label (20 bits).
    Ipv6Label,
    /// OpenFlow's IPV6_EXTHDR pseudo-field: which extension headers the
    /// packet has, and whether they repeat or are out of order
    /// ([`exthdr`]).
    Ipv6Exthdr,
    /// ICMPv6 type and code share the transport port bits, as ICMP's do.
    Icmpv6Type,
    Icmpv6Code,
    /// Bits 64..127 of the target address of a neighbor solicitation or
    /// advertisement.
    NdTargetHigh,
    NdTargetLow,
    /// The ND source/target link-layer address options share the ARP
    /// hardware address bits, as in OVS.
    NdSll,
    NdTll,
    /// The top MPLS label stack entry's label (20 bits), traffic class (3),
    /// bottom-of-stack bit and TTL; zero for a packet without MPLS. Only
    /// the top entry is in the key: the packet parser stops there, as
    /// OVS's does, so nothing behind an MPLS stack is in the key either.
    MplsLabel,
    MplsTc,
    MplsBos,
    MplsTtl,
    /// The I-SID of a PBB (802.1ah) service instance tag; zero for a
    /// packet without one. The parser stops at the tag, as at an MPLS
    /// label stack.
    PbbIsid,
}

/// Bits of [`Field::Ipv6Exthdr`] (OF1.3 `ofp_ipv6exthdr_flags`).
pub mod exthdr {
    /// "No next header" (59) seen.
    pub const NONEXT: u16 = 1 << 0;
    pub const ESP: u16 = 1 << 1;
    pub const AUTH: u16 = 1 << 2;
    pub const DEST: u16 = 1 << 3;
    pub const FRAG: u16 = 1 << 4;
    pub const ROUTER: u16 = 1 << 5;
    pub const HOP: u16 = 1 << 6;
    /// An extension header occurs more often than RFC 2460 allows.
    pub const UNREP: u16 = 1 << 7;
    /// Extension headers are not in RFC 2460's preferred order.
    pub const UNSEQ: u16 = 1 << 8;
}

/// Where a field lives: word index, bit offset of its least significant bit
/// inside the word, and width in bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub word: usize,
    pub shift: u32,
    pub bits: u32,
}

const fn at(word: usize, shift: u32, bits: u32) -> Layout {
    Layout { word, shift, bits }
}

impl Field {
    /// All fields, registers expanded, in the canonical order used when a
    /// match is encoded or printed.
    pub const ALL: [Field; 56] = [
        Field::InPort,
        Field::Metadata,
        Field::Reg(0),
        Field::Reg(1),
        Field::Reg(2),
        Field::Reg(3),
        Field::Reg(4),
        Field::Reg(5),
        Field::Reg(6),
        Field::Reg(7),
        Field::TunId,
        Field::TunSrc,
        Field::TunDst,
        Field::PktMark,
        Field::CtState,
        Field::CtZone,
        Field::CtMark,
        Field::CtLabelLow,
        Field::CtLabelHigh,
        Field::EthSrc,
        Field::EthDst,
        Field::EthType,
        Field::VlanTci,
        Field::IpProto,
        Field::ArpOp,
        Field::IpSrc,
        Field::IpDst,
        Field::ArpSpa,
        Field::ArpTpa,
        Field::ArpSha,
        Field::ArpTha,
        Field::IpDscp,
        Field::IpEcn,
        Field::IpTtl,
        Field::IpFrag,
        Field::TpSrc,
        Field::TpDst,
        Field::IcmpType,
        Field::IcmpCode,
        Field::Ipv6SrcLow,
        Field::Ipv6SrcHigh,
        Field::Ipv6DstLow,
        Field::Ipv6DstHigh,
        Field::Ipv6Label,
        Field::Ipv6Exthdr,
        Field::Icmpv6Type,
        Field::Icmpv6Code,
        Field::NdTargetLow,
        Field::NdTargetHigh,
        Field::NdSll,
        Field::NdTll,
        Field::MplsLabel,
        Field::MplsTc,
        Field::MplsBos,
        Field::MplsTtl,
        Field::PbbIsid,
    ];

    /// The field's place in a [`FlowKey`]. Registers above 7 do not exist;
    /// callers construct `Reg(n)` only for `n < 8` (the codec rejects others).
    pub const fn layout(self) -> Layout {
        match self {
            Field::InPort => at(0, 32, 32),
            Field::PktMark => at(0, 0, 32),
            Field::Reg(n) => at(
                1 + (n as usize & 7) / 2,
                if n % 2 == 0 { 32 } else { 0 },
                32,
            ),
            Field::TunId => at(5, 0, 64),
            Field::TunSrc => at(6, 32, 32),
            Field::TunDst => at(6, 0, 32),
            Field::CtState => at(7, 32, 32),
            Field::CtMark => at(7, 0, 32),
            Field::CtZone => at(8, 48, 16),
            Field::Metadata => at(23, 0, 64),
            Field::CtLabelLow => at(24, 0, 64),
            Field::CtLabelHigh => at(25, 0, 64),
            Field::EthSrc => at(9, 16, 48),
            Field::VlanTci => at(9, 0, 16),
            Field::EthDst => at(10, 16, 48),
            Field::EthType => at(10, 0, 16),
            Field::IpSrc | Field::ArpSpa => at(11, 32, 32),
            Field::IpDst | Field::ArpTpa => at(11, 0, 32),
            Field::IpProto | Field::ArpOp => at(12, 56, 8),
            Field::IpDscp => at(12, 50, 6),
            Field::IpEcn => at(12, 48, 2),
            Field::IpTtl => at(12, 40, 8),
            Field::IpFrag => at(12, 32, 8),
            Field::TpSrc => at(12, 16, 16),
            Field::TpDst => at(12, 0, 16),
            // OXM's 8 bits, the low byte of the port bits: a whole-field
            // set_field and an exact match are the OXM's.
            Field::IcmpType | Field::Icmpv6Type => at(12, 16, 8),
            Field::IcmpCode | Field::Icmpv6Code => at(12, 0, 8),
            Field::ArpSha | Field::NdSll => at(13, 16, 48),
            Field::ArpTha | Field::NdTll => at(14, 16, 48),
            Field::Ipv6SrcHigh => at(15, 0, 64),
            Field::Ipv6SrcLow => at(16, 0, 64),
            Field::Ipv6DstHigh => at(17, 0, 64),
            Field::Ipv6DstLow => at(18, 0, 64),
            Field::NdTargetHigh => at(19, 0, 64),
            Field::NdTargetLow => at(20, 0, 64),
            Field::Ipv6Label => at(21, 32, 20),
            Field::Ipv6Exthdr => at(21, 0, 9),
            // The free bits of the last header word: MPLS has no IPv6
            // header in the key to share them with.
            Field::MplsLabel => at(21, 9, 20),
            Field::MplsTc => at(21, 29, 3),
            Field::MplsBos => at(21, 52, 1),
            Field::MplsTtl => at(21, 56, 8),
            Field::PbbIsid => at(22, 0, 24),
        }
    }

    /// Width of the field in bits.
    pub const fn bits(self) -> u32 {
        self.layout().bits
    }

    /// All-ones value of the field's width.
    pub const fn full_mask(self) -> u64 {
        let bits = self.bits();
        if bits == 64 {
            u64::MAX
        } else {
            (1u64 << bits) - 1
        }
    }

    /// Whether a packet (or action) may write this field. `InPort` is
    /// writable only through NXM actions in OVS; conntrack fields only by
    /// `ct()` (ct_label's writes are checked there, see `validate.rs`).
    /// `ip_proto` is read-only as in OVS (another protocol would need
    /// another L4 header; the datapath never rewrote it), though `arp_op`
    /// on the same bits is writable.
    pub const fn is_writable(self) -> bool {
        !matches!(
            self,
            Field::CtState
                | Field::CtZone
                | Field::CtLabelLow
                | Field::CtLabelHigh
                | Field::IpFrag
                | Field::EthType
                | Field::Ipv6Exthdr
                | Field::IpProto
        )
    }

    /// For the low half of a 128-bit field (ct_label, the IPv6 addresses,
    /// nd_target), its high half. The low half names the whole value
    /// wherever the text or wire form has one name for it.
    pub const fn high_half(self) -> Option<Field> {
        match self {
            Field::CtLabelLow => Some(Field::CtLabelHigh),
            Field::Ipv6SrcLow => Some(Field::Ipv6SrcHigh),
            Field::Ipv6DstLow => Some(Field::Ipv6DstHigh),
            Field::NdTargetLow => Some(Field::NdTargetHigh),
            _ => None,
        }
    }

    /// For either half of a 128-bit field, its low half; `None` for a
    /// field of 64 bits or fewer.
    pub const fn low_half(self) -> Option<Field> {
        match self {
            Field::CtLabelLow | Field::CtLabelHigh => Some(Field::CtLabelLow),
            Field::Ipv6SrcLow | Field::Ipv6SrcHigh => Some(Field::Ipv6SrcLow),
            Field::Ipv6DstLow | Field::Ipv6DstHigh => Some(Field::Ipv6DstLow),
            Field::NdTargetLow | Field::NdTargetHigh => Some(Field::NdTargetLow),
            _ => None,
        }
    }

    /// Whether the field is a half of a 128-bit field.
    pub const fn is_half(self) -> bool {
        self.low_half().is_some()
    }

    /// Whether the field is one half of ct_label.
    pub const fn is_ct_label(self) -> bool {
        self.ct_label_offset().is_some()
    }

    /// For a half of ct_label, which bit of the 128-bit label is its bit 0.
    pub const fn ct_label_offset(self) -> Option<u32> {
        match self {
            Field::CtLabelLow => Some(0),
            Field::CtLabelHigh => Some(64),
            _ => None,
        }
    }

    /// ovs-ofctl's name for the field. Everything else about a field's
    /// names, wire headers and syntax is in the field registry
    /// ([`crate::field`]), whose tests check this agrees with it; the key
    /// keeps its own copy so that it (and `FlowKey`'s `Debug`) need not
    /// depend on the registry, which depends on the key.
    pub fn name(self) -> &'static str {
        match self {
            Field::InPort => "in_port",
            Field::PktMark => "pkt_mark",
            Field::Reg(0) => "reg0",
            Field::Reg(1) => "reg1",
            Field::Reg(2) => "reg2",
            Field::Reg(3) => "reg3",
            Field::Reg(4) => "reg4",
            Field::Reg(5) => "reg5",
            Field::Reg(6) => "reg6",
            Field::Reg(_) => "reg7",
            Field::TunId => "tun_id",
            Field::TunSrc => "tun_src",
            Field::TunDst => "tun_dst",
            Field::CtState => "ct_state",
            Field::CtMark => "ct_mark",
            Field::CtZone => "ct_zone",
            Field::CtLabelLow => "ct_label[0..63]",
            Field::CtLabelHigh => "ct_label[64..127]",
            Field::Metadata => "metadata",
            Field::EthSrc => "dl_src",
            Field::VlanTci => "vlan_tci",
            Field::EthDst => "dl_dst",
            Field::EthType => "dl_type",
            Field::IpSrc => "nw_src",
            Field::IpDst => "nw_dst",
            Field::ArpSpa => "arp_spa",
            Field::ArpTpa => "arp_tpa",
            Field::IpProto => "nw_proto",
            Field::ArpOp => "arp_op",
            Field::IpDscp => "nw_tos",
            Field::IpEcn => "nw_ecn",
            Field::IpTtl => "nw_ttl",
            Field::IpFrag => "ip_frag",
            Field::TpSrc => "tp_src",
            Field::TpDst => "tp_dst",
            Field::IcmpType => "icmp_type",
            Field::IcmpCode => "icmp_code",
            Field::ArpSha => "arp_sha",
            Field::ArpTha => "arp_tha",
            Field::Ipv6SrcLow => "ipv6_src[0..63]",
            Field::Ipv6SrcHigh => "ipv6_src[64..127]",
            Field::Ipv6DstLow => "ipv6_dst[0..63]",
            Field::Ipv6DstHigh => "ipv6_dst[64..127]",
            Field::Ipv6Label => "ipv6_label",
            Field::Ipv6Exthdr => "ipv6_exthdr",
            Field::Icmpv6Type => "icmpv6_type",
            Field::Icmpv6Code => "icmpv6_code",
            Field::NdTargetLow => "nd_target[0..63]",
            Field::NdTargetHigh => "nd_target[64..127]",
            Field::NdSll => "nd_sll",
            Field::NdTll => "nd_tll",
            Field::MplsLabel => "mpls_label",
            Field::MplsTc => "mpls_tc",
            Field::MplsBos => "mpls_bos",
            Field::MplsTtl => "mpls_ttl",
            Field::PbbIsid => "pbb_isid",
        }
    }
}

impl FlowKey {
    /// A key (or mask) with every bit zero.
    pub const fn zero() -> Self {
        FlowKey {
            words: [0; KEY_WORDS],
        }
    }

    /// Reads a field, right-aligned.
    #[inline(always)]
    pub fn get(&self, field: Field) -> u64 {
        let l = field.layout();
        (self.words[l.word] >> l.shift) & field.full_mask()
    }

    /// Writes a field; bits above the field's width are ignored.
    #[inline(always)]
    pub fn set(&mut self, field: Field, value: u64) {
        let l = field.layout();
        let m = field.full_mask() << l.shift;
        let w = &mut self.words[l.word];
        *w = (*w & !m) | ((value << l.shift) & m);
    }

    /// Writes `value` into bits `ofs..ofs+nbits` of a field (NXM sub-field
    /// semantics). The caller guarantees `ofs + nbits <= field.bits()`.
    #[inline(always)]
    pub fn set_bits(&mut self, field: Field, ofs: u32, nbits: u32, value: u64) {
        let l = field.layout();
        let low = if nbits >= 64 {
            u64::MAX
        } else {
            (1u64 << nbits) - 1
        };
        let m = low << (l.shift + ofs);
        let w = &mut self.words[l.word];
        *w = (*w & !m) | ((value << (l.shift + ofs)) & m);
    }

    /// Reads bits `ofs..ofs+nbits` of a field, right-aligned.
    #[inline(always)]
    pub fn get_bits(&self, field: Field, ofs: u32, nbits: u32) -> u64 {
        let low = if nbits >= 64 {
            u64::MAX
        } else {
            (1u64 << nbits) - 1
        };
        (self.get(field) >> ofs) & low
    }

    /// The field as a 6-byte MAC address (meaningful for 48-bit fields).
    pub fn get_mac(&self, field: Field) -> [u8; 6] {
        let v = self.get(field).to_be_bytes();
        [v[2], v[3], v[4], v[5], v[6], v[7]]
    }

    pub fn set_mac(&mut self, field: Field, mac: [u8; 6]) {
        self.set(field, mac_to_u64(mac));
    }

    /// `self & mask`, word by word.
    #[inline(always)]
    pub fn masked(&self, mask: &FlowKey) -> FlowKey {
        let mut out = FlowKey::zero();
        for i in 0..KEY_WORDS {
            out.words[i] = self.words[i] & mask.words[i];
        }
        out
    }

    pub fn is_zero(&self) -> bool {
        self.words.iter().all(|w| *w == 0)
    }

    /// The table a packet recirculated after `ct(table=N)` resumes in
    /// (`None` for a packet that just arrived). Kept in the key's last
    /// word, which no [`Field`] uses and no flow can match, so caches keyed
    /// on the whole key tell a recirculated packet from a fresh one, like
    /// OVS's `recirc_id`.
    pub fn recirc_table(&self) -> Option<u8> {
        let w = self.words[RECIRC_WORD];
        (w & RECIRC_VALID != 0).then_some(w as u8)
    }

    /// Copies the packet header fields (Ethernet through L4, the words
    /// `packet::extract` fills) from `pkt`, keeping this key's metadata:
    /// how a recirculated packet gets its post-conntrack (NATed) headers.
    pub fn set_headers_from(&mut self, pkt: &FlowKey) {
        for i in HEADER_WORDS {
            self.words[i] = pkt.words[i];
        }
    }

    /// `self == other` without a call or an early exit: OR-ing the XOR of
    /// every word pair compiles to a few vector instructions, where the
    /// derived comparison calls `memcmp` (13% of a translation cache
    /// hit). For comparisons that are mostly equal, as a cache hit's;
    /// `==` stays better where most differ early (the classifier).
    #[inline]
    pub fn same_as(&self, other: &FlowKey) -> bool {
        let mut diff = 0;
        for (a, b) in self.words.iter().zip(&other.words) {
            diff |= a ^ b;
        }
        diff == 0
    }

    /// The 128-bit ct_label, joined from its two halves.
    pub fn ct_label(&self) -> u128 {
        join_label(self.get(Field::CtLabelLow), self.get(Field::CtLabelHigh))
    }

    pub fn set_ct_label(&mut self, label: u128) {
        let (low, high) = split_label(label);
        self.set(Field::CtLabelLow, low);
        self.set(Field::CtLabelHigh, high);
    }

    /// A 128-bit field, joined from its halves; `low` is its low half
    /// ([`Field::high_half`]).
    pub fn get128(&self, low: Field) -> u128 {
        let high = low.high_half().map_or(0, |h| self.get(h));
        join_label(self.get(low), high)
    }

    pub fn set128(&mut self, low: Field, value: u128) {
        let (l, h) = split_label(value);
        self.set(low, l);
        if let Some(high) = low.high_half() {
            self.set(high, h);
        }
    }

    /// Marks the key as recirculated to `table` (`None`: fresh packet).
    pub fn set_recirc_table(&mut self, table: Option<u8>) {
        self.words[RECIRC_WORD] = table.map_or(0, |t| RECIRC_VALID | u64::from(t));
    }
}

/// Words of a key holding packet headers (EthSrc..ArpTha, then the IPv6,
/// MPLS and PBB fields); the others are pipeline metadata.
pub const HEADER_WORDS: std::ops::RangeInclusive<usize> = 9..=22;

/// The word holding [`FlowKey::recirc_table`].
const RECIRC_WORD: usize = KEY_WORDS - 1;
const RECIRC_VALID: u64 = 1 << 63;

/// A 128-bit ct_label as its ([`Field::CtLabelLow`], [`Field::CtLabelHigh`])
/// halves.
pub const fn split_label(label: u128) -> (u64, u64) {
    (label as u64, (label >> 64) as u64)
}

/// The 128-bit ct_label of its two halves.
pub const fn join_label(low: u64, high: u64) -> u128 {
    (high as u128) << 64 | low as u128
}

/// Packs a MAC address into the low 48 bits of a u64.
pub fn mac_to_u64(mac: [u8; 6]) -> u64 {
    u64::from_be_bytes([0, 0, mac[0], mac[1], mac[2], mac[3], mac[4], mac[5]])
}

impl fmt::Debug for FlowKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("FlowKey");
        for field in Field::ALL {
            let v = self.get(field);
            if v != 0 {
                s.field(field.name(), &format_args!("{v:#x}"));
            }
        }
        s.finish()
    }
}

#[cfg(test)]
mod tests;
