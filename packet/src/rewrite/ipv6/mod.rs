//! IPv6 header rewrites. IPv6 has no header checksum; the addresses are
//! part of the pseudo-header that TCP, UDP and ICMPv6 checksums cover (and
//! ICMPv6's covers its own type, code and ND fields), so those are updated
//! incrementally like IPv4's. Every rewrite reads what it needs before it
//! writes, so a truncated packet is rewritten whole or not at all.

use super::{csum_replace16, l4_checksum_at};
use crate::bytes::{be16, write16};
use crate::parse::ipv6::{nd_option_at, ND_OPT_SLL, ND_OPT_TLL};
use crate::parse::Layers;
use flowtable::key::Field;
use flowtable::matching::{ICMPV6_ND_NA, ICMPV6_ND_NS, IP_PROTO_ICMPV6, IP_PROTO_UDP};

/// Whether the frame's L3 header is the IPv6 header extraction read.
pub(super) fn is_ipv6(frame: &[u8], layers: Layers) -> bool {
    let l3 = usize::from(layers.l3);
    l3 >= 2 && be16(frame, l3 - 2) == Some(0x86dd) && frame.get(l3).is_some_and(|b| b >> 4 == 6)
}

/// Replaces the bytes at `at` with `new` (2, 6 or 8 bytes) and updates
/// the L4 checksum at `csum_at`, if any, word by word. `at` lies an even
/// number of bytes from the L4 header (or in the pseudo-header), so its
/// words are the checksum's words.
fn replace(
    frame: &mut [u8],
    layers: Layers,
    at: usize,
    new: &[u8],
    csum_at: Option<usize>,
) -> Option<()> {
    let mut old = [0u8; 8];
    let old = old.get_mut(..new.len())?;
    old.copy_from_slice(frame.get(at..at + new.len())?);
    let csum = match csum_at {
        Some(c) => Some((c, be16(frame, c)?)),
        None => None,
    };
    frame.get_mut(at..at + new.len())?.copy_from_slice(new);
    if let Some((c, mut sum)) = csum {
        let word = |b: &[u8]| u16::from_be_bytes([b[0], b.get(1).copied().unwrap_or(0)]);
        for (o, n) in old.chunks(2).zip(new.chunks(2)) {
            sum = csum_replace16(sum, word(o), word(n));
        }
        // UDP sends a computed zero as all ones: its zero means "none",
        // which IPv6 does not allow.
        if sum == 0 && layers.proto == IP_PROTO_UDP && c == usize::from(layers.l4) + 6 {
            sum = 0xffff;
        }
        write16(frame, c, sum)?;
    }
    Some(())
}

/// The ICMPv6 type of the packet, if its L4 header is ICMPv6.
fn icmpv6_type(frame: &[u8], layers: Layers) -> Option<u8> {
    if layers.l4 == 0 || layers.proto != IP_PROTO_ICMPV6 {
        return None;
    }
    frame.get(usize::from(layers.l4)).copied()
}

pub(super) fn set_field(frame: &mut [u8], layers: Layers, field: Field, value: u64) -> Option<()> {
    let l3 = usize::from(layers.l3);
    let l4 = usize::from(layers.l4);
    let mac = |v: u64| {
        let b = v.to_be_bytes();
        [b[2], b[3], b[4], b[5], b[6], b[7]]
    };
    match field {
        Field::IpTtl => {
            *frame.get_mut(l3 + 7)? = value as u8;
            Some(())
        }
        Field::IpDscp | Field::IpEcn => {
            let w = be16(frame, l3)?;
            let tclass = (w >> 4) & 0xff;
            let tclass = if field == Field::IpDscp {
                (tclass & 0x03) | ((value as u16 & 0x3f) << 2)
            } else {
                (tclass & 0xfc) | (value as u16 & 3)
            };
            write16(frame, l3, (w & 0xf00f) | tclass << 4)
        }
        Field::Ipv6Label => {
            let b = frame.get_mut(l3 + 1..l3 + 4)?;
            let label = (value as u32) & 0xf_ffff;
            b[0] = (b[0] & 0xf0) | (label >> 16) as u8;
            b[1] = (label >> 8) as u8;
            b[2] = label as u8;
            Some(())
        }
        Field::Ipv6SrcHigh | Field::Ipv6SrcLow | Field::Ipv6DstHigh | Field::Ipv6DstLow => {
            let at = l3
                + match field {
                    Field::Ipv6SrcHigh => 8,
                    Field::Ipv6SrcLow => 16,
                    Field::Ipv6DstHigh => 24,
                    _ => 32,
                };
            // The pseudo-header covers the addresses.
            let csum = l4_checksum_at(frame, layers);
            replace(frame, layers, at, &value.to_be_bytes(), csum)
        }
        Field::Icmpv6Type | Field::Icmpv6Code => {
            icmpv6_type(frame, layers)?;
            let old = be16(frame, l4)?;
            let new = if field == Field::Icmpv6Type {
                (old & 0x00ff) | (value as u16 & 0xff) << 8
            } else {
                (old & 0xff00) | (value as u16 & 0xff)
            };
            replace(frame, layers, l4, &new.to_be_bytes(), Some(l4 + 2))
        }
        Field::NdTargetHigh | Field::NdTargetLow => {
            if !matches!(icmpv6_type(frame, layers)?, ICMPV6_ND_NS | ICMPV6_ND_NA) {
                return None;
            }
            let at = l4 + if field == Field::NdTargetHigh { 8 } else { 16 };
            replace(frame, layers, at, &value.to_be_bytes(), Some(l4 + 2))
        }
        Field::NdSll | Field::NdTll => {
            if !matches!(icmpv6_type(frame, layers)?, ICMPV6_ND_NS | ICMPV6_ND_NA) {
                return None;
            }
            let opt = if field == Field::NdSll {
                ND_OPT_SLL
            } else {
                ND_OPT_TLL
            };
            // Bounded by the payload length, as extraction reads options.
            let end = crate::parse::ipv6::packet_end(frame, l3)?;
            let at = nd_option_at(frame.get(..end)?, l4, opt)?;
            replace(frame, layers, at, &mac(value), Some(l4 + 2))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests;
