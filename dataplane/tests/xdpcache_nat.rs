//! XDP flow cache entries that rewrite IPv4 addresses and TCP/UDP ports
//! (set_field, or NAT through `ct()`): frames run through the real
//! program (`BPF_PROG_TEST_RUN`) must leave exactly as xbr's packet thread
//! would send them (`csum::complete_partial` on receipt, then
//! `rewrite::set_field` of each field), with complete and offloaded
//! checksums, UDP without a checksum, and ICMP (whose checksum does not
//! cover the addresses).
//!
//! Needs root (loading BPF), as CI runs it.

mod xdp_common;

use dataplane::fastpath::cache::entry::NwRewrite;
use dataplane::fastpath::cache::FcAction;
use flowtable::key::{Field, FlowKey};
use xbr_packet::csum::{complete_partial, fold, ones_sum, pseudo_header};
use xbr_packet::parse;
use xbr_packet::rewrite::set_field;
use xdp_common::{XdpRig, LO, XDP_REDIRECT};

const TCP: u8 = 6;
const UDP: u8 = 17;
const ICMP: u8 = 1;
const SRC: u32 = 0x0a80_0002;
const DST: u32 = 0x0a80_0003;
const VIP: u32 = 0xac1e_0005;
const NODE: u32 = 0x0a00_000b;

/// A frame of `proto` from SRC:40000 to DST:80 with `payload`, its
/// checksums complete (ICMP: an echo request).
fn frame(proto: u8, dst: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![
        0x0a, 0x58, 0x0a, 0x80, 0, 3, 0x0a, 0x58, 0x0a, 0x80, 0, 2, 0x08, 0x00,
    ];
    let hdr = match proto {
        TCP => 20,
        _ => 8,
    };
    let l4_len = hdr + payload.len();
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&((20 + l4_len) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 1, 0x40, 0, 64, proto, 0, 0]);
    f.extend_from_slice(&SRC.to_be_bytes());
    f.extend_from_slice(&dst.to_be_bytes());
    let c = !fold(ones_sum(&f[14..34]));
    f[24..26].copy_from_slice(&c.to_be_bytes());
    let mut l4 = vec![0u8; hdr];
    match proto {
        ICMP => l4[..4].copy_from_slice(&[8, 0, 0, 0]),
        _ => {
            l4[0..2].copy_from_slice(&40000u16.to_be_bytes());
            l4[2..4].copy_from_slice(&80u16.to_be_bytes());
        }
    }
    if proto == UDP {
        l4[4..6].copy_from_slice(&(l4_len as u16).to_be_bytes());
    } else if proto == TCP {
        l4[12] = 0x50;
        l4[13] = 0x10;
    }
    f.extend_from_slice(&l4);
    f.extend_from_slice(payload);
    let at = 34 + csum_off(proto);
    let c = if proto == ICMP {
        !fold(ones_sum(&f[34..]))
    } else {
        let p = pseudo_header(SRC, dst, proto, l4_len as u16);
        let c = !fold(ones_sum(&f[34..]) + u32::from(p));
        if c == 0 && proto == UDP {
            0xffff
        } else {
            c
        }
    };
    f[at..at + 2].copy_from_slice(&c.to_be_bytes());
    f
}

fn csum_off(proto: u8) -> usize {
    match proto {
        TCP => 16,
        UDP => 6,
        _ => 2,
    }
}

/// `f` as a sender with TX checksum offload hands it over.
fn partial(mut f: Vec<u8>) -> Vec<u8> {
    let dst = u32::from_be_bytes([f[30], f[31], f[32], f[33]]);
    let p = pseudo_header(SRC, dst, f[23], (f.len() - 34) as u16);
    let at = 34 + csum_off(f[23]);
    f[at..at + 2].copy_from_slice(&p.to_be_bytes());
    f
}

/// What the packet thread sends for `f` after `nw`.
fn packet_thread(f: &[u8], nw: &NwRewrite) -> Vec<u8> {
    let mut e = f.to_vec();
    complete_partial(&mut e);
    let mut key = FlowKey::zero();
    let layers = parse::extract(&e, 1, &mut key);
    let mut fields = vec![
        (Field::IpSrc, u64::from(nw.src)),
        (Field::IpDst, u64::from(nw.dst)),
    ];
    if f[23] != ICMP {
        fields.push((Field::TpSrc, u64::from(nw.sport)));
        fields.push((Field::TpDst, u64::from(nw.dport)));
    }
    for (field, value) in fields {
        if key.get(field) != value {
            assert!(set_field(&mut e, layers, field, value), "{field:?}");
        }
    }
    e
}

fn rewrite(nw: NwRewrite) -> FcAction {
    FcAction::Redirect {
        out_ifindex: LO,
        set_dst: None,
        set_src: None,
        nw: Some(nw),
        encap: None,
        frags: false,
    }
}

/// Service DNAT (VIP:80 -> DST:8080), egress SNAT (SRC:40000 ->
/// NODE:61000), and both.
fn rewrites() -> Vec<(u32, NwRewrite)> {
    vec![
        (
            VIP,
            NwRewrite {
                src: SRC,
                dst: DST,
                sport: 40000,
                dport: 8080,
            },
        ),
        (
            DST,
            NwRewrite {
                src: NODE,
                dst: DST,
                sport: 61000,
                dport: 80,
            },
        ),
        (
            VIP,
            NwRewrite {
                src: NODE,
                dst: DST,
                sport: 61000,
                dport: 8080,
            },
        ),
    ]
}

#[test]
fn tcp_and_udp_leave_as_the_packet_thread_rewrites_them() {
    for proto in [TCP, UDP] {
        for (i, (dst, nw)) in rewrites().into_iter().enumerate() {
            let mut r = XdpRig::new();
            let f = frame(proto, dst, &[]);
            r.install(&f, rewrite(nw), &[]);
            let mut runs = 0;
            for len in [0usize, 1, 7, 100, 1001, 1400] {
                let payload: Vec<u8> = (0..len).map(|j| (j * 13 + i) as u8).collect();
                for g in [
                    frame(proto, dst, &payload),
                    partial(frame(proto, dst, &payload)),
                ] {
                    let (act, out) = r.run(&g);
                    runs += 1;
                    assert_eq!(act, XDP_REDIRECT, "proto {proto} rewrite {i} len {len}");
                    assert_eq!(
                        out,
                        packet_thread(&g, &nw),
                        "proto {proto} rewrite {i} len {len}"
                    );
                }
            }
            assert_eq!(r.hits(), runs);
        }
    }
}

/// UDP without a checksum (0) keeps none; ICMP gets only its IPv4
/// header's checksum updated.
#[test]
fn udp_without_checksum_and_icmp() {
    let (dst, nw) = rewrites()[2];
    let mut r = XdpRig::new();
    let mut f = frame(UDP, dst, b"no checksum");
    f[40..42].fill(0);
    r.install(&f, rewrite(nw), &[]);
    let (act, out) = r.run(&f);
    assert_eq!(act, XDP_REDIRECT);
    assert_eq!(&out[40..42], &[0, 0]);
    assert_eq!(out, packet_thread(&f, &nw));

    let mut r = XdpRig::new();
    let f = frame(ICMP, VIP, b"ping");
    let nw = NwRewrite {
        src: NODE,
        dst: DST,
        sport: 8,
        dport: 0,
    };
    r.install(&f, rewrite(nw), &[]);
    let (act, out) = r.run(&f);
    assert_eq!(act, XDP_REDIRECT);
    assert_eq!(out, packet_thread(&f, &nw));
    assert_eq!(&out[34..], &f[34..], "the ICMP message is untouched");
}
