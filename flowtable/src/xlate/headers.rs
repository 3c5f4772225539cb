//! Header changes in translation: the commit of rewrites into datapath
//! actions, and the actions that add, remove or age headers (`push_vlan`,
//! `pop_vlan`, set_field of VLAN parts, `dec_ttl`).

use super::{Ctx, HEADER_FIELDS, VLAN_PRESENT};
use crate::key::{Field, HEADER_WORDS};
use crate::matching::{ETH_TYPE_ARP, ETH_TYPE_IPV4, ETH_TYPE_IPV6, IP_PROTO_ICMP, IP_PROTO_ICMPV6};
use crate::trace::Tracer;
use crate::translation::{packet_in_reason, DpAction, DropReason};

impl<T: Tracer> Ctx<'_, '_, T> {
    /// Writes `value` under `mask` into the key's vlan_tci; a tag that was
    /// not there appears (the commit pushes it), as OVS does for set_field
    /// of vlan_vid or vlan_pcp.
    pub(super) fn set_vlan_tci(&mut self, mask: u64, value: u64) {
        self.unwildcard(Field::VlanTci, 0, 16);
        let tci = self.key.get(Field::VlanTci);
        self.key.set(Field::VlanTci, (tci & !mask) | (value & mask));
    }

    /// `push_vlan`: the key holds one tag, so a packet that has one gets no
    /// second (it is dropped as unsupported rather than sent with a tag its
    /// key does not describe); an untagged packet gets VID 0, PCP 0.
    pub(super) fn push_vlan(&mut self) {
        self.unwildcard(Field::VlanTci, 0, 16);
        if self.key.get(Field::VlanTci) & VLAN_PRESENT != 0 {
            self.fail(DropReason::Unsupported(
                "push_vlan on a tagged packet (QinQ)",
            ));
            return;
        }
        self.key.set(Field::VlanTci, VLAN_PRESENT);
    }

    /// Whether the packet is IPv4 or IPv6, whose TTL and hop limit are
    /// the one key field `nw_ttl`, as in OVS.
    pub(super) fn is_ip(&mut self) -> bool {
        self.unwildcard(Field::EthType, 0, 16);
        let eth_type = self.key.get(Field::EthType);
        eth_type == u64::from(ETH_TYPE_IPV4) || eth_type == u64::from(ETH_TYPE_IPV6)
    }

    /// `dec_ttl`: OVS's semantics. Not IP: nothing. A TTL (hop limit) that would
    /// reach zero ends the translation where it is (what was output so
    /// far stays) with a packet-in of reason INVALID_TTL, which only
    /// controllers that asked for that reason receive.
    pub(super) fn dec_ttl(&mut self) {
        if !self.is_ip() {
            return;
        }
        self.unwildcard(Field::IpTtl, 0, 8);
        let ttl = self.key.get(Field::IpTtl);
        if ttl > 1 {
            self.key.set(Field::IpTtl, ttl - 1);
            return;
        }
        // OFPCML_NO_BUFFER: xbr never buffers, the whole packet goes up.
        self.packet_in(u16::MAX, packet_in_reason::INVALID_TTL);
        self.halted = true;
        if self.note.is_none() {
            self.note = Some(DropReason::InvalidTtl);
        }
    }

    /// Emits SetFields for every header field the actions changed since the
    /// last output.
    pub(super) fn commit(&mut self) {
        if HEADER_WORDS
            .clone()
            .all(|i| self.key.words.get(i) == self.base.words.get(i))
        {
            return;
        }
        // Which OXM a rewrite is named by depends on these.
        self.unwildcard(Field::EthType, 0, 16);
        self.unwildcard(Field::IpProto, 0, 8);
        let eth_type = self.key.get(Field::EthType) as u16;
        let is_arp = eth_type == ETH_TYPE_ARP;
        let proto = self.key.get(Field::IpProto) as u8;
        let is_icmp = eth_type == ETH_TYPE_IPV4 && proto == IP_PROTO_ICMP;
        let is_icmp6 = eth_type == ETH_TYPE_IPV6 && proto == IP_PROTO_ICMPV6;
        // A tag that appeared or went is a push or a pop, before the other
        // rewrites (which may then change the new tag's VID/PCP).
        let (had_tag, has_tag) = (
            self.base.get(Field::VlanTci) & VLAN_PRESENT != 0,
            self.key.get(Field::VlanTci) & VLAN_PRESENT != 0,
        );
        if had_tag != has_tag {
            if has_tag {
                let tci = (self.key.get(Field::VlanTci) & !VLAN_PRESENT) as u16;
                self.push(DpAction::PushVlan { tci });
            } else {
                self.push(DpAction::PopVlan);
            }
        }
        for field in HEADER_FIELDS {
            let value = self.key.get(field);
            if value == self.base.get(field) || (field == Field::VlanTci && had_tag != has_tag) {
                continue;
            }
            let named = match field {
                Field::IpSrc if is_arp => Field::ArpSpa,
                Field::IpDst if is_arp => Field::ArpTpa,
                Field::IpProto if is_arp => Field::ArpOp,
                Field::TpSrc if is_icmp => Field::IcmpType,
                Field::TpDst if is_icmp => Field::IcmpCode,
                Field::TpSrc if is_icmp6 => Field::Icmpv6Type,
                Field::TpDst if is_icmp6 => Field::Icmpv6Code,
                Field::ArpSha if is_icmp6 => Field::NdSll,
                Field::ArpTha if is_icmp6 => Field::NdTll,
                f => f,
            };
            self.push(DpAction::SetField {
                field: named,
                value,
            });
        }
        for i in HEADER_WORDS {
            if let (Some(b), Some(k)) = (self.base.words.get_mut(i), self.key.words.get(i)) {
                *b = *k;
            }
        }
    }
}
