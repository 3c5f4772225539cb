//! Any frame through checksum completion, flow extraction and one header
//! rewrite: none may panic; completion is idempotent; a rewrite the frame
//! has room for must read back through extraction, leave the layer
//! offsets alone, and keep a correct IPv4 header checksum correct. IPv6
//! frames (extension header chains, ND options) take the same path. An
//! MPLS push then a pop, and a PBB push then a pop, give back the frame
//! and its layers.

#![no_main]

use flowtable::key::{Field, FlowKey};
use libfuzzer_sys::fuzz_target;
use xbr_packet::csum;
use xbr_packet::parse::extract;
use xbr_packet::rewrite::{self, ipv4_header_checksum, set_field};

/// Every field a SET_FIELD can name; the first input byte picks one.
const FIELDS: [Field; 31] = [
    Field::EthSrc,
    Field::EthDst,
    Field::VlanTci,
    Field::IpSrc,
    Field::IpDst,
    Field::IpDscp,
    Field::IpEcn,
    Field::IpTtl,
    Field::TpSrc,
    Field::TpDst,
    Field::ArpOp,
    Field::ArpSpa,
    Field::ArpTpa,
    Field::ArpSha,
    Field::ArpTha,
    Field::Ipv6SrcHigh,
    Field::Ipv6SrcLow,
    Field::Ipv6DstHigh,
    Field::Ipv6DstLow,
    Field::Ipv6Label,
    Field::Icmpv6Type,
    Field::Icmpv6Code,
    Field::NdTargetHigh,
    Field::NdTargetLow,
    Field::NdSll,
    Field::NdTll,
    Field::MplsLabel,
    Field::MplsTc,
    Field::MplsBos,
    Field::MplsTtl,
    Field::PbbIsid,
];

/// Whether extraction reads the IPv6 header at `l3` (version 6, complete).
fn ipv6_extracted(frame: &[u8], l3: usize) -> bool {
    l3 >= 2
        && frame[l3 - 2..].starts_with(&[0x86, 0xdd])
        && frame.len() >= l3 + 40
        && frame[l3] >> 4 == 6
}

/// The IPv4 header at `l3` if extraction reads it (version 4, complete).
fn ipv4_header(frame: &[u8], l3: usize) -> Option<&[u8]> {
    let first = *frame.get(l3)?;
    let ihl = usize::from(first & 0x0f) * 4;
    let ethertype = frame.get(l3.checked_sub(2)?..l3)?;
    if first >> 4 != 4 || ihl < 20 || ethertype != [0x08, 0x00] {
        return None;
    }
    frame.get(l3..l3 + ihl)
}

/// Whether the IPv4 header checksum verifies (0 and 0xffff are the same
/// number in ones' complement, and receivers accept both).
fn ipv4_checksum_ok(h: &[u8]) -> bool {
    let stored = u16::from_be_bytes([h[10], h[11]]);
    let computed = ipv4_header_checksum(h);
    stored == computed || matches!((stored, computed), (0, 0xffff) | (0xffff, 0))
}

/// Whether extraction reads ARP fields (Ethernet/IPv4 ARP, complete).
fn arp_extracted(frame: &[u8], l3: usize) -> bool {
    frame.len() >= l3 + 28
        && l3 >= 2
        && frame[l3 - 2..l3] == [0x08, 0x06]
        && frame[l3..l3 + 6] == [0, 1, 0x08, 0x00, 6, 4]
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 9 {
        return;
    }
    let field = FIELDS[usize::from(data[0]) % FIELDS.len()];
    let value = u64::from_be_bytes(data[1..9].try_into().expect("8 bytes"));
    let original = &data[9..];
    let mut frame = original.to_vec();

    // Checksum completion (pods with TX offload) sees every pod frame
    // first: it must never panic, and completing twice changes nothing
    // the second time (a completed checksum is no longer "partial").
    let mut completed = frame.clone();
    if csum::complete_partial(&mut completed) {
        let once = completed.clone();
        assert!(
            !csum::complete_partial(&mut completed) && completed == once,
            "checksum completion is not idempotent"
        );
    }

    let mut key = FlowKey::zero();
    let layers = extract(&frame, 1, &mut key);
    let l3 = usize::from(layers.l3);

    // Pushes move the frame in place and pops find its layers again: a
    // push then a pop is no change at all.
    let mut grown = original.to_vec();
    grown.resize(original.len() + rewrite::PBB_HEADER_LEN, 0);
    let len = original.len();
    if let Some(pushed) = rewrite::push_mpls(&mut grown, len, 0x8847, value as u32, layers) {
        let ethertype = u16::from_be_bytes([original[l3 - 2], original[l3 - 1]]);
        let popped = rewrite::pop_mpls(&mut grown[..len + 4], ethertype, pushed);
        assert_eq!(
            popped,
            Some(layers),
            "push_mpls then pop_mpls moved the layers"
        );
        assert_eq!(
            &grown[..len],
            original,
            "push_mpls then pop_mpls changed the frame"
        );
    }
    let mut grown = original.to_vec();
    grown.resize(original.len() + rewrite::PBB_HEADER_LEN, 0);
    if let Some(pushed) = rewrite::push_pbb(&mut grown, len, value as u32) {
        let popped = rewrite::pop_pbb(&mut grown, pushed);
        assert_eq!(
            popped,
            Some((rewrite::PBB_HEADER_LEN, layers)),
            "push_pbb then pop_pbb moved the layers"
        );
        assert_eq!(
            &grown[..len],
            original,
            "push_pbb then pop_pbb changed the frame"
        );
    }
    let ip = l3 != 0 && ipv4_header(&frame, l3).is_some();
    let csum_was_ok = ip && ipv4_header(&frame, l3).is_some_and(ipv4_checksum_ok);
    let arp = l3 != 0 && arp_extracted(&frame, l3);
    let ip6 = l3 != 0 && ipv6_extracted(&frame, l3);
    let behind = |types: &[[u8; 2]]| {
        l3 >= 2 && frame.len() >= l3 + 4 && types.iter().any(|t| frame[l3 - 2..l3] == *t)
    };
    let mpls = behind(&[[0x88, 0x47], [0x88, 0x48]]);
    let pbb = behind(&[[0x88, 0xe7]]);

    let done = set_field(&mut frame, layers, field, value);
    if !done {
        assert_eq!(
            frame, original,
            "a skipped {field:?} rewrite changed the frame"
        );
        return;
    }
    assert_eq!(frame.len(), original.len());
    let layers_after = extract(&frame, 1, &mut key);
    // No settable field positions a later header (ethertype, IHL, ...).
    assert_eq!(layers, layers_after, "{field:?} moved the layers");
    if csum_was_ok {
        let h = ipv4_header(&frame, l3).expect("IPv4 header still there");
        assert!(ipv4_checksum_ok(h), "{field:?} broke the IPv4 checksum");
    }
    let expect = match field {
        // Extraction ignores a runt without a whole Ethernet header.
        Field::EthSrc | Field::EthDst if frame.len() >= 14 => value & 0xffff_ffff_ffff,
        Field::ArpSha | Field::ArpTha if arp => value & 0xffff_ffff_ffff,
        Field::ArpSpa | Field::ArpTpa if arp => value & 0xffff_ffff,
        Field::IpSrc | Field::IpDst if ip => value & 0xffff_ffff,
        Field::IpDscp if ip => value & 0x3f,
        Field::IpEcn if ip => value & 3,
        Field::IpTtl if ip => value & 0xff,
        Field::TpSrc | Field::TpDst if ip || ip6 => value & 0xffff,
        Field::Ipv6SrcHigh | Field::Ipv6SrcLow | Field::Ipv6DstHigh | Field::Ipv6DstLow if ip6 => {
            value
        }
        Field::Ipv6Label if ip6 => value & 0xf_ffff,
        Field::IpDscp if ip6 => value & 0x3f,
        Field::IpEcn if ip6 => value & 3,
        Field::IpTtl if ip6 => value & 0xff,
        Field::Icmpv6Type | Field::Icmpv6Code if ip6 => value & 0xff,
        Field::MplsLabel if mpls => value & 0xf_ffff,
        Field::MplsTc if mpls => value & 7,
        Field::MplsBos if mpls => value & 1,
        Field::MplsTtl if mpls => value & 0xff,
        Field::PbbIsid if pbb => value & 0xff_ffff,
        // VLAN TCI and ARP op keep OVS conventions (CFI bit, low opcode
        // byte only); other fields were written where extraction does not
        // look (not IPv4, not Ethernet/IPv4 ARP).
        _ => return,
    };
    assert_eq!(key.get(field), expect, "{field:?} did not read back");
});
