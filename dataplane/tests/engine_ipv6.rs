//! IPv6 through the packet engine over in-memory ports: flows on IPv6
//! fields forward and rewrite real frames (checksums checked by
//! etherparse), and the translation cache tells apart packets that differ
//! only in IPv6 bits.

mod common;

use common::Rig;
use etherparse::{Icmpv6Type, NetSlice, PacketBuilder, SlicedPacket, TransportSlice};

const N_FRAMES: u32 = 64;
const SRC: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const DST: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

/// Sends `frame` into port 1 and runs one round.
fn tcp6(src: [u8; 16], dport: u16) -> Vec<u8> {
    let mut f = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 0xa], [2, 0, 0, 0, 0, 0xb])
        .ipv6(src, DST, 64)
        .tcp(40000, dport, 1, 1000)
        .write(&mut f, b"payload")
        .unwrap();
    f
}

/// (destination, hop limit, TCP checksum right) of a sent frame.
fn parsed(f: &[u8]) -> ([u8; 16], u8, bool) {
    let p = SlicedPacket::from_ethernet(f).unwrap();
    let Some(NetSlice::Ipv6(ip)) = p.net else {
        panic!("not IPv6")
    };
    let h = ip.header();
    let ok = match p.transport {
        Some(TransportSlice::Tcp(t)) => {
            t.calc_checksum_ipv6(h.source(), h.destination()).unwrap() == t.checksum()
        }
        Some(TransportSlice::Icmpv6(i)) => i.is_checksum_valid(h.source(), h.destination()),
        _ => false,
    };
    (h.destination(), h.hop_limit(), ok)
}

#[test]
fn ipv6_flows_forward_and_rewrite_with_right_checksums() {
    let mut rig = Rig::new(3, N_FRAMES);
    rig.flow_text("priority=20,tcp6,ipv6_dst=2001:db8:1::/48,tp_dst=80,actions=set_field:fd00::7->ipv6_dst,dec_ttl,output:2");
    rig.flow_text("priority=10,ipv6,actions=output:3");
    for _ in 0..2 {
        rig.send(1, &tcp6(SRC, 80));
        let to2 = rig.sent(2);
        assert_eq!(to2.len(), 1);
        let (dst, hlim, ok) = parsed(&to2[0]);
        assert_eq!(u128::from_be_bytes(dst), 0xfd00 << 112 | 7);
        assert_eq!(hlim, 63);
        assert!(ok, "TCP checksum wrong after the rewrite");
        rig.send(1, &tcp6(SRC, 81));
        assert_eq!(rig.sent(3).len(), 1);
    }
}

#[test]
fn packets_differing_only_in_ipv6_bits_are_not_conflated_by_the_cache() {
    let mut rig = Rig::new(3, N_FRAMES);
    // Bit 0 of the source's low half decides.
    rig.flow_text("priority=20,ipv6,ipv6_src=::1/::1,actions=output:2");
    rig.flow_text("priority=10,ipv6,actions=output:3");
    let mut even = SRC;
    even[15] = 2;
    for _ in 0..3 {
        rig.send(1, &tcp6(SRC, 80));
        rig.send(1, &tcp6(even, 80));
        assert_eq!((rig.sent(2).len(), rig.sent(3).len()), (1, 1));
    }
}

#[test]
fn neighbor_solicitations_match_on_their_target() {
    let mut rig = Rig::new(3, N_FRAMES);
    rig.flow_text("priority=20,icmp6,icmp_type=135,nd_target=fe80::99,actions=set_field:fe80::1->nd_target,output:2");
    rig.flow_text("priority=10,ipv6,actions=output:3");
    let ns = |last: u8| {
        let mut payload = vec![0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, last];
        payload.extend_from_slice(&[1, 1, 2, 0, 0, 0, 0, 0xa]);
        let mut f = Vec::new();
        PacketBuilder::ethernet2([2, 0, 0, 0, 0, 0xa], [0x33, 0x33, 0xff, 0, 0, 0x99])
            .ipv6(SRC, DST, 255)
            .icmpv6(Icmpv6Type::Unknown {
                type_u8: 135,
                code_u8: 0,
                bytes5to8: [0; 4],
            })
            .write(&mut f, &payload)
            .unwrap();
        f
    };
    rig.send(1, &ns(0x99));
    let to2 = rig.sent(2);
    assert_eq!(to2.len(), 1);
    assert_eq!(
        to2[0][62..78],
        [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]
    );
    assert!(parsed(&to2[0]).2, "ICMPv6 checksum wrong after the rewrite");
    rig.send(1, &ns(0x98));
    assert_eq!(rig.sent(3).len(), 1);
}

#[test]
fn dec_ttl_alone_ages_the_hop_limit() {
    let mut rig = Rig::new(3, N_FRAMES);
    rig.flow_text("ipv6,actions=dec_ttl,output:2");
    // A packet at hop limit 1 first (as the kernel's MLD reports are):
    // it goes to no port; the next one still does.
    let mut f = tcp6(SRC, 80);
    f[21] = 1;
    rig.send(1, &f);
    assert!(rig.sent(2).is_empty());
    rig.send(1, &tcp6(SRC, 80));
    let to2 = rig.sent(2);
    assert_eq!(to2.len(), 1);
    assert_eq!(parsed(&to2[0]).1, 63);
}
