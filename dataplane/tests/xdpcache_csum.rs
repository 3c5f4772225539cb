//! The XDP program completes the TCP/UDP checksums senders left to
//! offload before it redirects a cached frame: frames run through the
//! real program (`BPF_PROG_TEST_RUN`) with real cache entries must leave
//! exactly as xbr's packet thread would send them (`csum::complete_partial`
//! after the entry's rewrites), for every tail length the program handles
//! in its own way, for UDP's 0 -> 0xffff rule and through conntrack
//! entries, and over every buffer of frames larger than a page (jumbo
//! MTUs; `BPF_PROG_TEST_RUN` splits them as a veth does); complete
//! checksums, drops and frames the program cannot finish are left alone
//! (and not counted as hits).
//!
//! Needs root (loading BPF), as CI runs it.

mod xdp_common;

use dataplane::conntrack::{Conntrack, CtRequest};
use dataplane::fastpath::cache::{CtConn, FcAction};
use flowtable::key::FlowKey;
use xbr_packet::csum::{complete_partial, fold, ones_sum, pseudo_header};
use xbr_packet::parse;
use xdp_common::{taking_frags, XdpRig, LO, TO_XBR, XDP_DROP, XDP_REDIRECT};

const TCP: u8 = 6;
const UDP: u8 = 17;
const SRC: u32 = 0x0a80_0002;
const DST: u32 = 0x0a80_0003;
const NEW_DST: [u8; 6] = [0x0a, 0x58, 0x0a, 0x80, 0x00, 0x09];
const L4: usize = 34;

/// Ethernet + IPv4 + a TCP (20-byte header) or UDP segment from `sport`
/// with `payload`, its checksum complete.
fn frame(proto: u8, sport: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![
        0x0a, 0x58, 0x0a, 0x80, 0, 3, 0x0a, 0x58, 0x0a, 0x80, 0, 2, 0x08, 0x00,
    ];
    let hdr = if proto == TCP { 20 } else { 8 };
    let l4_len = hdr + payload.len();
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&((20 + l4_len) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 1, 0x40, 0, 64, proto, 0, 0]);
    f.extend_from_slice(&SRC.to_be_bytes());
    f.extend_from_slice(&DST.to_be_bytes());
    let c = !fold(ones_sum(&f[14..34]));
    f[24..26].copy_from_slice(&c.to_be_bytes());
    let mut l4 = vec![0u8; hdr];
    l4[0..2].copy_from_slice(&sport.to_be_bytes());
    l4[2..4].copy_from_slice(&5001u16.to_be_bytes());
    if proto == UDP {
        l4[4..6].copy_from_slice(&(l4_len as u16).to_be_bytes());
    } else {
        l4[12] = 0x50;
        l4[13] = 0x10; // ACK: what a conntrack entry forwards
    }
    f.extend_from_slice(&l4);
    f.extend_from_slice(payload);
    let c = !fold(ones_sum(&f[L4..]) + u32::from(pseudo(&f)));
    let c = if c == 0 && proto == UDP { 0xffff } else { c };
    let at = L4 + csum_off(proto);
    f[at..at + 2].copy_from_slice(&c.to_be_bytes());
    f
}

fn csum_off(proto: u8) -> usize {
    if proto == TCP {
        16
    } else {
        6
    }
}

fn pseudo(f: &[u8]) -> u16 {
    pseudo_header(SRC, DST, f[23], (f.len() - L4) as u16)
}

/// `f` as a sender with TX checksum offload hands it over: the field
/// holds the pseudo-header sum.
fn partial(mut f: Vec<u8>) -> Vec<u8> {
    let at = L4 + csum_off(f[23]);
    let p = pseudo(&f);
    f[at..at + 2].copy_from_slice(&p.to_be_bytes());
    f
}

fn verifies(f: &[u8]) -> bool {
    fold(ones_sum(&f[L4..]) + u32::from(pseudo(f))) == 0xffff
}

fn payload(len: usize, seed: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + seed * 7 + 5) as u8).collect()
}

fn rig() -> XdpRig {
    XdpRig::new()
}

fn redirect() -> FcAction {
    FcAction::Redirect {
        out_ifindex: LO,
        set_dst: Some(NEW_DST),
        set_src: None,
        nw: None,
        encap: None,
        frags: false,
    }
}

/// What the packet thread would send for `f`: checksum completed, then the
/// entry's rewrite.
fn expected(f: &[u8]) -> Vec<u8> {
    let mut e = f.to_vec();
    complete_partial(&mut e);
    e[0..6].copy_from_slice(&NEW_DST);
    e
}

/// Payload lengths whose segments exercise every part of the program's
/// sum: no full 512-byte chunk, several, every tail bit (256 ... 4, 2, 1)
/// on and off, and a 1500-byte MTU's largest segments.
fn lengths(hdr: usize) -> Vec<usize> {
    let mut v: Vec<usize> = (0..=40).collect();
    for seg in [
        255, 256, 257, 510, 511, 512, 513, 515, 1023, 1024, 1027, 1535, 1536, 1537, 2047, 2049,
        2900, 3001,
    ] {
        v.push(seg - hdr);
    }
    v.push(1480 - hdr); // the largest segment of a 1500-byte IP packet
    v
}

#[test]
fn partial_checksums_are_completed_as_the_packet_thread_does() {
    for proto in [TCP, UDP] {
        let mut r = rig();
        r.install(&frame(proto, 40000, b""), redirect(), &[]);
        let hdr = if proto == TCP { 20 } else { 8 };
        let mut runs = 0;
        for (i, len) in lengths(hdr).into_iter().enumerate() {
            let f = partial(frame(proto, 40000, &payload(len, i)));
            let (act, out) = r.run(&f);
            runs += 1;
            assert_eq!(act, XDP_REDIRECT, "proto {proto} payload {len}");
            assert!(verifies(&out), "proto {proto} payload {len}: not completed");
            assert_eq!(out, expected(&f), "proto {proto} payload {len}");
        }
        assert_eq!(r.hits(), runs, "every completed frame is a hit");
    }
}

/// Segments of 0xff bytes give the largest partial sums, then the tail's
/// words go on top (kernels whose bpf_csum_diff returns an unfolded
/// 32-bit sum could take it near 0xffffffff; 6.18's stays small).
#[test]
fn all_ones_segments_do_not_overflow_the_sum() {
    for proto in [TCP, UDP] {
        let mut r = rig();
        r.install(&frame(proto, 40000, b""), redirect(), &[]);
        for len in [3usize, 510, 1023, 1427, 1450, 2999] {
            let f = partial(frame(proto, 40000, &vec![0xff; len]));
            let (act, out) = r.run(&f);
            assert_eq!(act, XDP_REDIRECT);
            assert!(verifies(&out), "proto {proto} payload {len}");
            assert_eq!(out, expected(&f), "proto {proto} payload {len}");
        }
    }
}

#[test]
fn complete_checksums_are_left_as_they_are() {
    for proto in [TCP, UDP] {
        let mut r = rig();
        r.install(&frame(proto, 40000, b""), redirect(), &[]);
        for (i, len) in [0usize, 1, 3, 6, 513, 1400].into_iter().enumerate() {
            let f = frame(proto, 40000, &payload(len, i));
            let (act, out) = r.run(&f);
            assert_eq!(act, XDP_REDIRECT);
            let mut rewritten = f.clone();
            rewritten[0..6].copy_from_slice(&NEW_DST);
            assert_eq!(out, rewritten, "proto {proto} payload {len}");
        }
    }
}

/// A complete checksum that happens to equal the pseudo-header sum looks
/// partial; the program sees that the segment verifies and leaves it.
#[test]
fn a_complete_checksum_equal_to_the_pseudo_header_sum_stays() {
    let mut r = rig();
    r.install(&frame(TCP, 40000, b""), redirect(), &[]);
    let mut f = frame(TCP, 40000, &[0, 0, 9, 8, 7]);
    let at = L4 + 16;
    let p = pseudo(&f);
    // With the field holding P, the segment and pseudo-header must sum to
    // 0xffff: one payload word makes up the difference.
    f[at..at + 2].copy_from_slice(&p.to_be_bytes());
    f[L4 + 20..L4 + 22].copy_from_slice(&[0, 0]);
    let s = fold(ones_sum(&f[L4..]) + u32::from(p));
    f[L4 + 20..L4 + 22].copy_from_slice(&(0xffff - s).to_be_bytes());
    assert!(verifies(&f));
    assert_eq!(f, partial(f.clone()), "its checksum is P");
    let (act, out) = r.run(&f);
    assert_eq!(act, XDP_REDIRECT);
    let mut rewritten = f.clone();
    rewritten[0..6].copy_from_slice(&NEW_DST);
    assert_eq!(out, rewritten);
}

/// A UDP segment whose complete checksum is 0 is sent with 0xffff (0
/// would mean "no checksum"), as the packet thread does.
#[test]
fn a_udp_checksum_of_zero_is_sent_as_ffff() {
    let mut r = rig();
    r.install(&frame(UDP, 40000, b""), redirect(), &[]);
    // Two payload bytes chosen so that the segment and pseudo-header sum
    // to 0xffff without the checksum: the complete checksum is then 0.
    let mut f = frame(UDP, 40000, &[0, 0, 1, 2, 3]);
    let at = L4 + 6;
    f[at..at + 2].copy_from_slice(&[0, 0]);
    let s = fold(ones_sum(&f[L4..]) + u32::from(pseudo(&f)));
    f[L4 + 8..L4 + 10].copy_from_slice(&(0xffff - s).to_be_bytes());
    assert_eq!(fold(ones_sum(&f[L4..]) + u32::from(pseudo(&f))), 0xffff);
    let f = partial(f);
    let (act, out) = r.run(&f);
    assert_eq!(act, XDP_REDIRECT);
    assert_eq!(&out[at..at + 2], &[0xff, 0xff]);
    assert_eq!(out, expected(&f));
}

/// A frame whose segment is not all there (the IP length says more than
/// the frame holds) is left to xbr unchanged and not counted; a drop
/// entry drops without touching the frame.
#[test]
fn truncated_frames_go_to_xbr_and_drops_stay_drops() {
    let mut r = rig();
    let f = partial(frame(UDP, 40000, &payload(600, 1)));
    r.install(&f, redirect(), &[]);
    let cut = f[..f.len() - 3].to_vec();
    assert_eq!(r.run(&cut), (TO_XBR, cut.clone()));
    assert_eq!(r.hits(), 0);
    let (act, _) = r.run(&f);
    assert_eq!(act, XDP_REDIRECT);
    assert_eq!(r.hits(), 1);

    let mut d = rig();
    let g = partial(frame(TCP, 40001, &payload(100, 2)));
    d.install(&g, FcAction::Drop, &[]);
    assert_eq!(d.run(&g).0, XDP_DROP);
    assert_eq!(d.hits(), 1);
}

/// Conntrack entries complete checksums too (their only difference is
/// which TCP segments they take).
#[test]
fn conntrack_entries_complete_checksums() {
    let mut r = rig();
    let f = frame(UDP, 40000, &payload(700, 3));
    let track = |ct: &Conntrack, mut frame: Vec<u8>, commit: bool| {
        let mut key = FlowKey::zero();
        let layers = parse::extract(&frame, 1, &mut key);
        let req = CtRequest {
            commit,
            ..CtRequest::default()
        };
        ct.execute(&mut frame, layers, &key, &req, ct.now_ms())
    };
    track(&r.ct, f.clone(), true);
    let mut reply = frame(UDP, 5001, b"r");
    reply[26..30].copy_from_slice(&DST.to_be_bytes());
    reply[30..34].copy_from_slice(&SRC.to_be_bytes());
    reply[L4 + 2..L4 + 4].copy_from_slice(&40000u16.to_be_bytes());
    track(&r.ct, reply, false);
    let conn = CtConn {
        tuple: dataplane::conntrack::Tuple::v4(0, UDP, SRC, DST, 40000, 5001),
        mark: 0,
        label: 0,
        absent: false,
    };
    r.install(&f, redirect(), &[conn]);
    assert_eq!(r.cache.stats().ct_installs, 1, "a conntrack entry");
    let p = partial(f);
    let (act, out) = r.run(&p);
    assert_eq!(act, XDP_REDIRECT);
    assert!(verifies(&out));
    assert_eq!(out, expected(&p));
}

/// Segment lengths of frames in several buffers: the test run keeps about
/// 3,500 bytes in the first (a page less head- and tailroom), so these
/// cross from one buffer to two, then to three (8,192), with every
/// remainder of a 512-byte chunk's kind; up to the segment of a 9,216-byte
/// IP packet, the largest MTU xbr takes.
const JUMBO_SEGMENTS: [usize; 18] = [
    3400, 3500, 3521, 3600, 4095, 4096, 4097, 5000, 6143, 7777, 8190, 8191, 8192, 8193, 8960, 8980,
    9001, 9196,
];

#[test]
fn checksums_of_frames_in_several_buffers_are_completed_over_all_of_them() {
    for proto in [TCP, UDP] {
        let mut r = rig();
        r.install(&frame(proto, 40000, b""), taking_frags(redirect()), &[]);
        let hdr = if proto == TCP { 20 } else { 8 };
        let mut runs = 0;
        for (i, seg) in JUMBO_SEGMENTS.into_iter().enumerate() {
            for bytes in [payload(seg - hdr, i), vec![0xff; seg - hdr]] {
                let f = partial(frame(proto, 40000, &bytes));
                let (act, out) = r.run(&f);
                runs += 1;
                assert_eq!(act, XDP_REDIRECT, "proto {proto} segment {seg}");
                assert!(verifies(&out), "proto {proto} segment {seg}: not completed");
                assert_eq!(out, expected(&f), "proto {proto} segment {seg}");
            }
            let whole = frame(proto, 40000, &payload(seg - hdr, i));
            let (act, out) = r.run(&whole);
            runs += 1;
            assert_eq!(act, XDP_REDIRECT);
            assert_eq!(out, expected(&whole), "complete: only the rewrite");
        }
        assert_eq!(r.hits(), runs, "every frame is a hit");
    }
}

/// The kernel drops a frame in several buffers redirected to a device that
/// does not take them: such frames of an entry without `frags` go to xbr,
/// as do jumbo frames that are cut short, or whose segment is longer than
/// the program sums; frames in one buffer still hit.
#[test]
fn frames_in_several_buffers_go_to_xbr_unless_the_device_takes_them() {
    let mut r = rig();
    r.install(&frame(UDP, 40000, b""), redirect(), &[]);
    let jumbo = partial(frame(UDP, 40000, &payload(8000, 1)));
    assert_eq!(r.run(&jumbo), (TO_XBR, jumbo.clone()));
    let small = partial(frame(UDP, 40000, &payload(1000, 2)));
    assert_eq!(r.run(&small).0, XDP_REDIRECT);
    assert_eq!(r.hits(), 1);

    let mut t = rig();
    t.install(&frame(UDP, 40000, b""), taking_frags(redirect()), &[]);
    let cut = jumbo[..jumbo.len() - 1].to_vec();
    assert_eq!(t.run(&cut), (TO_XBR, cut.clone()));
    let too_long = partial(frame(UDP, 40000, &payload(9217 - 8, 3)));
    assert_eq!(t.run(&too_long), (TO_XBR, too_long.clone()));
    assert_eq!(t.hits(), 0);
    assert_eq!(t.run(&jumbo).0, XDP_REDIRECT);
    assert_eq!(t.hits(), 1);
}
