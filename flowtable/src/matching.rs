//! A flow's match: a value and a mask over a [`FlowKey`].
//!
//! Invariant: `value == value & mask` (bits outside the mask are zero), so two
//! matches are equal exactly when they match the same packets, and the
//! classifier can hash `value` directly.

use crate::error::MatchError;
use crate::field::{key_prereqs, Pinned, Prereq};
use crate::key::{join_label, split_label, Field, FlowKey};
use std::sync::LazyLock;

pub use crate::field::protocols::{
    is_mpls, ETH_TYPE_ARP, ETH_TYPE_IPV4, ETH_TYPE_IPV6, ETH_TYPE_MPLS, ETH_TYPE_MPLS_MCAST,
    ETH_TYPE_PBB, ICMPV6_ND_NA, ICMPV6_ND_NS, IP_PROTO_ICMP, IP_PROTO_ICMPV6, IP_PROTO_SCTP,
    IP_PROTO_TCP, IP_PROTO_UDP,
};

#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, Debug)]
pub struct Match {
    value: FlowKey,
    mask: FlowKey,
}

impl Match {
    /// The match-everything (table-miss) match.
    pub const fn catch_all() -> Self {
        Match {
            value: FlowKey::zero(),
            mask: FlowKey::zero(),
        }
    }

    pub fn value(&self) -> &FlowKey {
        &self.value
    }

    pub fn mask(&self) -> &FlowKey {
        &self.mask
    }

    /// Requires `field == value` exactly.
    pub fn set_exact(&mut self, field: Field, value: u64) {
        self.set_masked(field, value, field.full_mask());
    }

    /// Requires `field & mask == value & mask`. A zero mask removes the field.
    pub fn set_masked(&mut self, field: Field, value: u64, mask: u64) {
        let mask = mask & field.full_mask();
        self.mask.set(field, mask);
        self.value.set(field, value & mask);
    }

    /// `(value, mask)` of a field; mask 0 means the field is wildcarded.
    pub fn get(&self, field: Field) -> (u64, u64) {
        (self.value.get(field), self.mask.get(field))
    }

    /// Requires `ct_label & mask == value & mask` over all 128 bits (the
    /// label is two key fields, see `key/`).
    pub fn set_ct_label_masked(&mut self, value: u128, mask: u128) {
        let ((low, high), (low_mask, high_mask)) = (split_label(value), split_label(mask));
        self.set_masked(Field::CtLabelLow, low, low_mask);
        self.set_masked(Field::CtLabelHigh, high, high_mask);
    }

    /// `(value, mask)` of the 128-bit ct_label; mask 0 means wildcarded.
    pub fn ct_label(&self) -> (u128, u128) {
        let (low, low_mask) = self.get(Field::CtLabelLow);
        let (high, high_mask) = self.get(Field::CtLabelHigh);
        (join_label(low, high), join_label(low_mask, high_mask))
    }

    /// Requires `field & mask == value & mask` over all 128 bits of the
    /// field whose low half is `low` (see [`Field::high_half`]).
    pub fn set128_masked(&mut self, low: Field, value: u128, mask: u128) {
        let ((l, h), (lm, hm)) = (split_label(value), split_label(mask));
        self.set_masked(low, l, lm);
        if let Some(high) = low.high_half() {
            self.set_masked(high, h, hm);
        }
    }

    /// `(value, mask)` of the 128-bit field whose low half is `low`.
    pub fn get128(&self, low: Field) -> (u128, u128) {
        let (l, lm) = self.get(low);
        let (h, hm) = low.high_half().map_or((0, 0), |f| self.get(f));
        (join_label(l, h), join_label(lm, hm))
    }

    /// The exact value of a field if the match pins every bit of it.
    pub fn exact(&self, field: Field) -> Option<u64> {
        let (v, m) = self.get(field);
        (m == field.full_mask()).then_some(v)
    }

    /// Whether a packet's key satisfies this match.
    #[inline]
    pub fn matches(&self, key: &FlowKey) -> bool {
        self.value
            .words
            .iter()
            .zip(self.mask.words.iter())
            .zip(key.words.iter())
            .all(|((v, m), k)| k & m == *v)
    }

    /// OpenFlow non-strict comparison: true when every packet this match
    /// accepts is also accepted by `wider` (this match is at least as
    /// specific). Used by non-strict DELETE/MODIFY and filtered dumps.
    pub fn is_subset_of(&self, wider: &Match) -> bool {
        self.value
            .words
            .iter()
            .zip(self.mask.words.iter())
            .zip(wider.value.words.iter().zip(wider.mask.words.iter()))
            .all(|((v, m), (wv, wm))| m & wm == *wm && v & wm == *wv)
    }

    /// Fields with a non-zero mask, in canonical order. Overlaid fields are
    /// resolved by prerequisites: ARP names for ARP flows, ICMP names for
    /// ICMP flows, ICMPv6 and ND names for ICMPv6 flows.
    pub fn fields(&self) -> impl Iterator<Item = Field> + '_ {
        let eth_type = self.exact(Field::EthType).map(|v| v as u16);
        let proto = self.exact(Field::IpProto).map(|v| v as u8);
        let is_arp = eth_type == Some(ETH_TYPE_ARP);
        let is_icmp = proto == Some(IP_PROTO_ICMP) && eth_type == Some(ETH_TYPE_IPV4);
        let is_icmp6 = proto == Some(IP_PROTO_ICMPV6) && eth_type == Some(ETH_TYPE_IPV6);
        Field::ALL.into_iter().filter(move |f| {
            if self.mask.get(*f) == 0 {
                return false;
            }
            match f {
                Field::IpSrc | Field::IpDst | Field::IpProto => !is_arp,
                Field::ArpSpa | Field::ArpTpa | Field::ArpOp => is_arp,
                Field::TpSrc | Field::TpDst => !is_icmp && !is_icmp6,
                Field::IcmpType | Field::IcmpCode => is_icmp,
                Field::Icmpv6Type | Field::Icmpv6Code => is_icmp6,
                Field::ArpSha | Field::ArpTha => !is_icmp6,
                Field::NdSll | Field::NdTll => is_icmp6,
                _ => true,
            }
        })
    }

    /// Checks OpenFlow prerequisites (OF1.3 §7.2.3.6, as OVS enforces them):
    /// L3 fields need the `eth_type` that carries them, L4 fields an IP
    /// protocol that carries them, ND fields the ICMPv6 type of their
    /// message. Returns the first field (in [`Field::ALL`]'s order) whose
    /// prerequisite is missing.
    ///
    /// Runs twice per flow-mod (decode and insert), so it reads what the
    /// match pins once and looks only at the fields that have a
    /// prerequisite: the naive loop over every field was a quarter of the
    /// time xbr spent loading a 100k-flow bundle.
    pub fn check_prerequisites(&self) -> Result<(), MatchError> {
        let pinned = self.pinned();
        for c in CONDITIONAL.iter() {
            if self.mask.words[c.word] & c.bits != 0 && !c.prereqs.iter().any(|p| p.met(&pinned)) {
                return Err(MatchError::MissingPrerequisite(c.field));
            }
        }
        Ok(())
    }

    /// Whether this match pins what `field` requires (its `eth_type`,
    /// `ip_proto` and for ND fields the ICMPv6 type), so that a packet it
    /// accepts carries the field. Also used to check that actions only
    /// touch fields the flow's packets have. Overlaid bits accept either
    /// interpretation (the check runs over every field whose bits are
    /// masked, so `arp_spa` is also seen as `nw_src`).
    pub fn prerequisites_met(&self, field: Field) -> bool {
        available(&self.pinned(), field)
    }

    /// What the match pins exactly among the fields prerequisites depend
    /// on.
    pub fn pinned(&self) -> Pinned {
        Pinned {
            eth_type: self.exact(Field::EthType).map(|v| v as u16),
            proto: self.exact(Field::IpProto).map(|v| v as u8),
            icmp6_type: self.exact(Field::Icmpv6Type).map(|v| v as u8),
        }
    }

    /// Whether the match meets a field's prerequisite.
    pub fn meets(&self, prereq: Prereq) -> bool {
        prereq.met(&self.pinned())
    }

    /// Pins what `pinned` names exactly (e.g. [`Prereq::least`]: the
    /// least match meeting a prerequisite).
    pub fn pin(&mut self, pinned: &Pinned) {
        if let Some(t) = pinned.eth_type {
            self.set_exact(Field::EthType, u64::from(t));
        }
        if let Some(p) = pinned.proto {
            self.set_exact(Field::IpProto, u64::from(p));
        }
        if let Some(t) = pinned.icmp6_type {
            self.set_exact(Field::Icmpv6Type, u64::from(t));
        }
    }
}

/// A key field some matches may not use: where its bits are, and the
/// prerequisites of the registry's fields that overlap them (any one
/// makes the bits meaningful, so `arp_spa` is also seen as `nw_src`).
struct Conditional {
    field: Field,
    word: usize,
    bits: u64,
    prereqs: Vec<Prereq>,
}

/// The key fields a catch-all match may not use, in [`Field::ALL`]'s
/// order, worked out once from the field registry's prerequisites.
static CONDITIONAL: LazyLock<Vec<Conditional>> = LazyLock::new(|| {
    Field::ALL
        .into_iter()
        .filter_map(|field| {
            let prereqs = key_prereqs(field);
            if prereqs.is_empty() || prereqs.contains(&Prereq::None) {
                return None;
            }
            let layout = field.layout();
            Some(Conditional {
                field,
                word: layout.word,
                bits: field.full_mask() << layout.shift,
                prereqs,
            })
        })
        .collect()
});

/// Whether `field` is available in a match that pins `pinned`.
fn available(pinned: &Pinned, field: Field) -> bool {
    CONDITIONAL
        .iter()
        .find(|c| c.field == field)
        .is_none_or(|c| c.prereqs.iter().any(|p| p.met(pinned)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditional_fields_are_exactly_those_a_catch_all_lacks() {
        // Field::ALL lists the always-available fields (metadata,
        // registers, tunnel, mark, conntrack, L2) first; every field from
        // ip_proto on needs a prerequisite.
        let first = Field::ALL.iter().position(|f| *f == Field::IpProto);
        let want = Field::ALL[first.expect("ip_proto is a field")..].to_vec();
        assert_eq!(want.last(), Some(&Field::PbbIsid));
        let lacking: Vec<Field> = Field::ALL
            .into_iter()
            .filter(|&f| !Match::catch_all().prerequisites_met(f))
            .collect();
        assert_eq!(lacking, want);
        let conditional: Vec<Field> = CONDITIONAL.iter().map(|c| c.field).collect();
        assert_eq!(conditional, want);
    }

    #[test]
    fn masked_values_are_normalised() {
        let mut a = Match::catch_all();
        a.set_masked(Field::IpDst, 0x0a80_00ff, 0xffff_ff00);
        let mut b = Match::catch_all();
        b.set_masked(Field::IpDst, 0x0a80_0000, 0xffff_ff00);
        assert_eq!(a, b);
    }

    #[test]
    fn subset_relation() {
        let mut wide = Match::catch_all();
        wide.set_exact(Field::EthType, ETH_TYPE_IPV4 as u64);
        wide.set_masked(Field::IpDst, 0x0a80_0000, 0xffff_0000);
        let mut narrow = wide;
        narrow.set_masked(Field::IpDst, 0x0a80_0100, 0xffff_ff00);
        narrow.set_exact(Field::InPort, 3);
        assert!(narrow.is_subset_of(&wide));
        assert!(!wide.is_subset_of(&narrow));
        assert!(narrow.is_subset_of(&Match::catch_all()));
        let mut other = wide;
        other.set_masked(Field::IpDst, 0x0a81_0000, 0xffff_0000);
        assert!(!narrow.is_subset_of(&other));
    }

    #[test]
    fn prerequisites() {
        let mut m = Match::catch_all();
        m.set_exact(Field::TpDst, 80);
        assert!(m.check_prerequisites().is_err());
        m.set_exact(Field::EthType, ETH_TYPE_IPV4 as u64);
        assert!(m.check_prerequisites().is_err());
        m.set_exact(Field::IpProto, IP_PROTO_TCP as u64);
        assert!(m.check_prerequisites().is_ok());
        // The same ports on IPv6; IPv4 addresses are not there.
        m.set_exact(Field::EthType, ETH_TYPE_IPV6 as u64);
        assert!(m.check_prerequisites().is_ok());
        m.set_exact(Field::IpSrc, 1);
        assert_eq!(
            m.check_prerequisites(),
            Err(MatchError::MissingPrerequisite(Field::IpSrc))
        );
    }

    #[test]
    fn nd_fields_need_their_icmpv6_message() {
        let mut m = Match::catch_all();
        m.set_exact(Field::EthType, ETH_TYPE_IPV6 as u64);
        m.set128_masked(Field::NdTargetLow, 1, u128::MAX);
        assert!(m.check_prerequisites().is_err());
        m.set_exact(Field::IpProto, IP_PROTO_ICMPV6 as u64);
        assert!(m.check_prerequisites().is_err(), "no icmpv6_type");
        m.set_exact(Field::Icmpv6Type, ICMPV6_ND_NA as u64);
        assert!(m.check_prerequisites().is_ok());
        m.set_exact(Field::NdSll, 0x0a58_0000_0001);
        assert!(m.check_prerequisites().is_err(), "nd_sll is NS only");
        m.set_exact(Field::Icmpv6Type, ICMPV6_ND_NS as u64);
        assert!(m.check_prerequisites().is_ok());
        assert_eq!(m.get128(Field::NdTargetLow), (1, u128::MAX));
        let names: Vec<_> = m.fields().collect();
        assert!(names.contains(&Field::NdSll) && !names.contains(&Field::ArpSha));
        assert!(names.contains(&Field::Icmpv6Type) && !names.contains(&Field::TpSrc));
    }

    #[test]
    fn ct_label_matches_under_its_128_bit_mask() {
        let mut m = Match::catch_all();
        // Bit 0 and bit 127 set, bit 64 clear: both halves take part.
        let mask = 1u128 | 1 << 64 | 1 << 127;
        m.set_ct_label_masked(1 | 1 << 127 | 1 << 100, mask);
        assert_eq!(m.ct_label(), (1 | 1 << 127, mask));
        let mut key = FlowKey::zero();
        key.set_ct_label(1 | 1 << 127 | 0xff00);
        assert!(m.matches(&key));
        key.set_ct_label(1 | 1 << 127 | 1 << 64);
        assert!(!m.matches(&key), "bit 64 must be clear");
        key.set_ct_label(1);
        assert!(!m.matches(&key), "bit 127 must be set");
        let mut wider = Match::catch_all();
        wider.set_ct_label_masked(1, 1);
        assert!(m.is_subset_of(&wider));
        assert!(!wider.is_subset_of(&m));
    }

    #[test]
    fn mpls_fields_need_an_mpls_eth_type() {
        for f in [
            Field::MplsLabel,
            Field::MplsTc,
            Field::MplsBos,
            Field::MplsTtl,
        ] {
            let mut m = Match::catch_all();
            m.set_exact(f, 1);
            assert_eq!(
                m.check_prerequisites(),
                Err(MatchError::MissingPrerequisite(f))
            );
            m.set_exact(Field::EthType, u64::from(ETH_TYPE_IPV4));
            assert!(m.check_prerequisites().is_err());
            for t in [ETH_TYPE_MPLS, ETH_TYPE_MPLS_MCAST] {
                m.set_exact(Field::EthType, u64::from(t));
                assert_eq!(m.check_prerequisites(), Ok(()));
            }
        }
    }

    #[test]
    fn arp_flows_list_arp_names() {
        let mut m = Match::catch_all();
        m.set_exact(Field::EthType, ETH_TYPE_ARP as u64);
        m.set_exact(Field::ArpTpa, 0x0a80_0001);
        let fields: Vec<_> = m.fields().collect();
        assert_eq!(fields, vec![Field::EthType, Field::ArpTpa]);
    }
}
