//! Frames for tests, here and in the crates above: a UDP/IPv4 frame (and
//! the same packet behind LLC/SNAP), and UDP, TCP and ND frames over IPv6
//! built by etherparse, an encoder independent of the parser under test.
//!
//! Compiled for this crate's own tests and, through the `testframes`
//! feature, for the dev-dependencies of the crates that use it (dataplane's
//! conntrack and XDP cache tests build on these same frames); never part
//! of a release build. Builders panic on an encoder error, which only a
//! bug in the builder itself could cause.

use crate::parse::ipv6::{ND_OPT_SLL, ND_OPT_TLL};
use crate::rewrite::ipv4_header_checksum;
use etherparse::{Icmpv6Type, PacketBuilder};
use flowtable::matching::ICMPV6_ND_NS;

/// A UDP/IPv4 frame 0a:58:0a:80:00:02 -> :03, 10.128.0.2:1234 -> .3:5678.
pub fn udp_frame() -> Vec<u8> {
    let mut f = vec![
        0x0a, 0x58, 0x0a, 0x80, 0x00, 0x03, 0x0a, 0x58, 0x0a, 0x80, 0x00, 0x02, 0x08, 0x00,
    ];
    let payload = [0u8; 18];
    let total = 20 + 8 + payload.len();
    f.extend_from_slice(&[0x45, 0x00]);
    f.extend_from_slice(&(total as u16).to_be_bytes());
    f.extend_from_slice(&[0, 1, 0x40, 0, 64, 17, 0, 0]);
    f.extend_from_slice(&[10, 128, 0, 2, 10, 128, 0, 3]);
    let csum = ipv4_header_checksum(&f[14..34]);
    f[24..26].copy_from_slice(&csum.to_be_bytes());
    f.extend_from_slice(&1234u16.to_be_bytes());
    f.extend_from_slice(&5678u16.to_be_bytes());
    f.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(&payload);
    f
}

/// `udp_frame()`'s IPv4 packet in an 802.3 frame with LLC/SNAP whose
/// organisation code is `oui` and type `ty`, behind `tag` (a VLAN tag
/// with its TPID, or nothing).
pub fn snap_frame(tag: &[u8], oui: [u8; 3], ty: u16) -> Vec<u8> {
    let ip = udp_frame();
    let mut f = ip[..12].to_vec();
    f.extend_from_slice(tag);
    let len = 8 + ip.len() - 14;
    f.extend_from_slice(&(len as u16).to_be_bytes());
    f.extend_from_slice(&[0xaa, 0xaa, 0x03]);
    f.extend_from_slice(&oui);
    f.extend_from_slice(&ty.to_be_bytes());
    f.extend_from_slice(&ip[14..]);
    f
}

pub const MAC_A: [u8; 6] = [0x0a, 0x58, 0, 0, 0, 1];
pub const MAC_B: [u8; 6] = [0x0a, 0x58, 0, 0, 0, 2];
pub const SRC: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
pub const DST: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

fn builder() -> etherparse::PacketBuilderStep<etherparse::IpHeaders> {
    PacketBuilder::ethernet2(MAC_A, MAC_B).ipv6(SRC, DST, 64)
}

/// A UDP/IPv6 frame 2001:db8::1:1234 -> 2001:db8:1::2:5678, traffic class
/// 0x2e (DSCP 11, ECN 2), flow label 0x12345, correct checksum.
pub fn udp6_frame() -> Vec<u8> {
    let mut f = Vec::new();
    builder().udp(1234, 5678).write(&mut f, &[7u8; 18]).unwrap();
    f[14] = 0x60 | 0x02;
    f[15] = 0xe0 | 0x01;
    f[16..18].copy_from_slice(&[0x23, 0x45]);
    f
}

pub fn tcp6_frame() -> Vec<u8> {
    let mut f = Vec::new();
    builder()
        .tcp(40000, 80, 1, 1000)
        .write(&mut f, b"GET /")
        .unwrap();
    f
}

/// An NS (135) for fe80::99 with an SLL option, or an NA (136) with a TLL
/// option, checksum computed by etherparse.
pub fn nd_frame(ty: u8) -> Vec<u8> {
    let mut payload = vec![0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x99];
    let opt = if ty == ICMPV6_ND_NS {
        ND_OPT_SLL
    } else {
        ND_OPT_TLL
    };
    payload.extend_from_slice(&[opt, 1]);
    payload.extend_from_slice(&MAC_A);
    let mut f = Vec::new();
    builder()
        .icmpv6(Icmpv6Type::Unknown {
            type_u8: ty,
            code_u8: 0,
            bytes5to8: [0; 4],
        })
        .write(&mut f, &payload)
        .unwrap();
    f
}
