//! The OXM/NXM field headers xbr understands, as the codec uses them
//! (see [`super::oxm`]): a view of the field registry
//! ([`flowtable::field`]), which holds each header's class, code, width,
//! maskability and prerequisites, with the codec's derived questions
//! (whole, wide, the 32-bit header word) as methods.

use flowtable::field::Prereq;
use flowtable::Field;
use std::sync::LazyLock;

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
    /// What the rest of the match must pin.
    pub prereq: Prereq,
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

/// OpenFlow basic class, Nicira's NXM1 and NXM0.
pub use flowtable::field::{OXM_CLASS_NXM0, OXM_CLASS_NXM1, OXM_CLASS_OPENFLOW_BASIC};

/// Every header the codec speaks, in the registry's wire order (OXM,
/// NXM1, NXM0, each by code; see [`flowtable::field::wire_headers`]).
/// Order matters only for encoding: the first match-capable header of a
/// field is the one a match is dumped with.
pub static HEADERS: LazyLock<Vec<FieldHeader>> = LazyLock::new(|| {
    flowtable::field::wire_headers()
        .iter()
        .map(|(d, h)| FieldHeader {
            class: h.class,
            field: h.code,
            len: d.bytes,
            target: d.key,
            shift: d.shift,
            bits: d.bits,
            wire_shift: d.wire_shift,
            maskable: d.maskable,
            in_match: d.in_match,
            prereq: d.prereq,
            name: h.name,
        })
        .collect()
});
