//! IPv6 flow extraction: the fixed header, the extension header chain
//! (summarised in OpenFlow's IPV6_EXTHDR bits), and behind it the ports,
//! or ICMPv6 type and code with Neighbor Discovery's target and
//! link-layer address options.
//!
//! Like the rest of `parse`, every read is bounds-checked and a truncated
//! or malformed header ends extraction at the last complete layer. The
//! chain walk makes progress of at least 8 bytes per header and gives up
//! after [`MAX_EXT_HEADERS`], so a hostile chain costs a bounded amount of
//! work.

use super::{extract_ports, mac, FRAG_ANY, FRAG_LATER, L4, NO_L4};
use crate::bytes::be16;
use flowtable::key::{exthdr, Field, FlowKey};
use flowtable::matching::{
    ICMPV6_ND_NA, ICMPV6_ND_NS, IP_PROTO_ICMPV6, IP_PROTO_SCTP, IP_PROTO_TCP, IP_PROTO_UDP,
};

/// Length of the fixed IPv6 header.
pub const IPV6_HEADER_LEN: usize = 40;

/// Extension headers walked before giving up (OVS walks without a limit
/// but every real chain is far shorter).
pub const MAX_EXT_HEADERS: usize = 16;

const NH_HOP: u8 = 0;
const NH_ROUTING: u8 = 43;
const NH_FRAGMENT: u8 = 44;
const NH_ESP: u8 = 50;
const NH_AUTH: u8 = 51;
const NH_NONE: u8 = 59;
const NH_DEST: u8 = 60;

/// ND option types (RFC 4861 §4.6.1).
pub const ND_OPT_SLL: u8 = 1;
pub const ND_OPT_TLL: u8 = 2;

/// Where the chain walk stopped.
struct Chain {
    /// The next-header value after the last extension header walked: the
    /// upper-layer protocol, as OVS's nw_proto has it.
    proto: u8,
    /// Offset of the upper-layer header; `None` when there is none to read
    /// (a later fragment, ESP, no next header, a truncated chain).
    l4: Option<usize>,
    frag: u64,
    exthdr: u16,
}

/// Position of each extension header in RFC 8200 §4.1's recommended order;
/// destination options count as the first (before routing) until routing
/// or a later header appears.
fn rank(nh: u8, after_routing: bool) -> u8 {
    match nh {
        NH_HOP => 0,
        NH_DEST if !after_routing => 1,
        NH_ROUTING => 2,
        NH_FRAGMENT => 3,
        NH_AUTH => 4,
        NH_ESP => 5,
        _ => 6,
    }
}

fn walk(frame: &[u8], mut at: usize, mut nh: u8) -> Chain {
    let mut chain = Chain {
        proto: nh,
        l4: None,
        frag: 0,
        exthdr: 0,
    };
    let mut last_rank = 0;
    let mut dest_seen = 0u8;
    for i in 0..MAX_EXT_HEADERS {
        chain.proto = nh;
        let bit = match nh {
            NH_HOP => exthdr::HOP,
            NH_DEST => exthdr::DEST,
            NH_ROUTING => exthdr::ROUTER,
            NH_FRAGMENT => exthdr::FRAG,
            NH_AUTH => exthdr::AUTH,
            NH_ESP => exthdr::ESP,
            NH_NONE => {
                chain.exthdr |= exthdr::NONEXT;
                return chain;
            }
            _ => {
                chain.l4 = Some(at);
                return chain;
            }
        };
        // Destination options may appear twice (before routing and
        // last); every other header once.
        let repeated = if nh == NH_DEST {
            dest_seen += 1;
            dest_seen > 2
        } else {
            chain.exthdr & bit != 0
        };
        if repeated {
            chain.exthdr |= exthdr::UNREP;
        }
        let r = rank(
            nh,
            chain.exthdr & (exthdr::ROUTER | exthdr::FRAG | exthdr::AUTH) != 0,
        );
        if r < last_rank || (nh == NH_HOP && i != 0) {
            chain.exthdr |= exthdr::UNSEQ;
        }
        last_rank = last_rank.max(r);
        chain.exthdr |= bit;
        if nh == NH_ESP {
            // Everything behind ESP's SPI and sequence number is encrypted.
            return chain;
        }
        let (Some(&next), Some(&len)) = (frame.get(at), frame.get(at + 1)) else {
            return chain;
        };
        let size = match nh {
            NH_AUTH => (usize::from(len) + 2) * 4,
            NH_FRAGMENT => 8,
            _ => (usize::from(len) + 1) * 8,
        };
        if frame.len() < at + size {
            return chain;
        }
        if nh == NH_FRAGMENT {
            let Some(off_flags) = be16(frame, at + 2) else {
                return chain;
            };
            if off_flags >> 3 != 0 {
                chain.frag = FRAG_ANY | FRAG_LATER;
                chain.proto = next;
                return chain;
            }
            if off_flags & 1 != 0 {
                chain.frag = FRAG_ANY;
            }
        }
        nh = next;
        at += size;
    }
    chain.proto = nh;
    chain
}

/// Fills the IPv6 fields of `key` from the header at `l3`.
pub(super) fn extract(frame: &[u8], l3: usize, key: &mut FlowKey) -> L4 {
    let Some(ip) = frame.get(l3..l3 + IPV6_HEADER_LEN) else {
        return NO_L4;
    };
    if ip[0] >> 4 != 6 {
        return NO_L4;
    }
    let tclass = (ip[0] & 0x0f) << 4 | ip[1] >> 4;
    key.set(Field::IpDscp, u64::from(tclass >> 2));
    key.set(Field::IpEcn, u64::from(tclass & 3));
    key.set(
        Field::Ipv6Label,
        u64::from(u32::from_be_bytes([0, ip[1] & 0x0f, ip[2], ip[3]])),
    );
    key.set(Field::IpTtl, u64::from(ip[7]));
    let addr = |b: &[u8]| b.try_into().map_or(0, u128::from_be_bytes);
    key.set128(Field::Ipv6SrcLow, addr(&ip[8..24]));
    key.set128(Field::Ipv6DstLow, addr(&ip[24..40]));
    let chain = walk(frame, l3 + IPV6_HEADER_LEN, ip[6]);
    key.set(Field::IpProto, u64::from(chain.proto));
    key.set(Field::IpFrag, chain.frag);
    key.set(Field::Ipv6Exthdr, u64::from(chain.exthdr));
    let Some(l4) = chain.l4 else {
        return NO_L4;
    };
    match chain.proto {
        IP_PROTO_TCP | IP_PROTO_UDP | IP_PROTO_SCTP => extract_ports(frame, l4, chain.proto, key),
        // Bytes behind the payload length (Ethernet padding) are not
        // options.
        IP_PROTO_ICMPV6 => {
            let end = packet_end(frame, l3).unwrap_or(frame.len());
            extract_icmpv6(frame.get(..end).unwrap_or(frame), l4, key)
        }
        _ => NO_L4,
    }
}

fn extract_icmpv6(frame: &[u8], l4: usize, key: &mut FlowKey) -> L4 {
    let (Some(&ty), Some(&code)) = (frame.get(l4), frame.get(l4 + 1)) else {
        return NO_L4;
    };
    key.set(Field::Icmpv6Type, u64::from(ty));
    key.set(Field::Icmpv6Code, u64::from(code));
    let found = (l4 as u16, IP_PROTO_ICMPV6);
    if code != 0 || !matches!(ty, ICMPV6_ND_NS | ICMPV6_ND_NA) {
        return found;
    }
    let Some(target) = frame.get(l4 + 8..l4 + 24) else {
        return found;
    };
    let (sll, tll) = match nd_options(frame, l4 + 24) {
        Some(opts) => opts,
        // As OVS: a malformed option list leaves the ND fields all zero.
        None => return found,
    };
    key.set128(
        Field::NdTargetLow,
        target.try_into().map_or(0, u128::from_be_bytes),
    );
    key.set(Field::NdSll, sll);
    key.set(Field::NdTll, tll);
    found
}

/// The (SLL, TLL) options of an ND message whose options start at `at`;
/// `None` for a malformed list (a zero length, an option past the end, an
/// address given twice), as OVS judges it (which also takes either
/// option from either message).
fn nd_options(frame: &[u8], mut at: usize) -> Option<(u64, u64)> {
    let (mut sll, mut tll) = (0, 0);
    while at < frame.len() {
        let opt_type = *frame.get(at)?;
        let len = usize::from(*frame.get(at + 1)?) * 8;
        if len == 0 || frame.len() < at + len {
            return None;
        }
        if len == 8 {
            let addr = mac(frame, at + 2)?;
            match opt_type {
                ND_OPT_SLL => {
                    if sll != 0 {
                        return None;
                    }
                    sll = addr;
                }
                ND_OPT_TLL => {
                    if tll != 0 {
                        return None;
                    }
                    tll = addr;
                }
                _ => {}
            }
        }
        at += len;
    }
    Some((sll, tll))
}

/// Where the SLL (`opt_type` 1) or TLL (2) address of the ND message at
/// `l4` is, for rewrites: the first option of that type.
pub fn nd_option_at(frame: &[u8], l4: usize, opt_type: u8) -> Option<usize> {
    let mut at = l4 + 24;
    for _ in 0..frame.len() / 8 + 1 {
        let t = *frame.get(at)?;
        let len = usize::from(*frame.get(at + 1)?) * 8;
        if len == 0 || frame.len() < at + len {
            return None;
        }
        if t == opt_type && len == 8 {
            return Some(at + 2);
        }
        at += len;
    }
    None
}

/// The end of the IPv6 packet at `l3` as its payload length bounds it
/// (never past the frame).
pub fn packet_end(frame: &[u8], l3: usize) -> Option<usize> {
    let payload = usize::from(be16(frame, l3 + 4)?);
    Some((l3 + IPV6_HEADER_LEN + payload).min(frame.len()))
}

/// The Identification of a fragmented packet whose IPv6 header starts at
/// `l3`: the fragment header's, found by walking the extension headers
/// before it (hop-by-hop, routing, destination options, authentication;
/// at most [`MAX_EXT_HEADERS`]). `None` when there is no fragment header
/// or the chain is truncated.
pub fn fragment_id(frame: &[u8], l3: usize) -> Option<u32> {
    let mut nh = *frame.get(l3 + 6)?;
    let mut at = l3 + IPV6_HEADER_LEN;
    for _ in 0..MAX_EXT_HEADERS {
        let len = usize::from(*frame.get(at + 1)?);
        match nh {
            NH_FRAGMENT => {
                let b = frame.get(at + 4..at + 8)?;
                return Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
            }
            NH_HOP | NH_ROUTING | NH_DEST => {
                nh = *frame.get(at)?;
                at += (len + 1) * 8;
            }
            NH_AUTH => {
                nh = *frame.get(at)?;
                at += (len + 2) * 4;
            }
            _ => return None,
        }
    }
    None
}

#[cfg(test)]
pub(crate) mod tests;
