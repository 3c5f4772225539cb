//! VXLAN in the XDP flow cache: frames run through the real programs
//! (`BPF_PROG_TEST_RUN`) with real cache entries.
//!
//! - Encapsulating entries must put out exactly what the packet thread's
//!   `VxlanPort::encap` writes (outer headers from the same template, the
//!   same source port for the flow), after completing an inner checksum
//!   left to offload; frames too big for the uplink go to xbr.
//! - The uplink program must decapsulate only what `encap::decap` accepts,
//!   with the same tunnel metadata, and leave every frame it does not
//!   forward untouched (xbr then checks it and counts why it drops it).
//!
//! Needs root (loading BPF), as CI runs it.

mod xdp_common;

use dataplane::fastpath::cache::entry::{frame_key, set_tunnel};
use dataplane::fastpath::cache::FcAction;
use dataplane::vxlan::encap::{decap, src_port, Template};
use flowtable::FlowKey;
use std::net::Ipv4Addr;
use xbr_packet::csum::{complete_partial, fold, ones_sum, pseudo_header};
use xbr_packet::vxlan::OUTER_LEN;
use xdp_common::{taking_frags, XdpRig, LO, TO_XBR, XDP_DROP, XDP_PASS, XDP_REDIRECT};
const LOCAL: u32 = 0x0a00_000b;
const REMOTE: u32 = 0x0a00_000c;
const VNI: u32 = 0x12_3456;
const LOCAL_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x0b];
const REMOTE_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x0c];
const POD_MAC: [u8; 6] = [0x0a, 0x58, 0x0a, 0x80, 0x02, 0x05];
const MTU: u32 = 1500;

/// A pod's UDP frame of `payload` bytes, its checksum complete.
fn inner(payload: usize) -> Vec<u8> {
    let mut f = vec![
        0x0a, 0x58, 0x0a, 0x80, 0, 1, 0x0a, 0x58, 0x0a, 0x80, 0, 2, 0x08, 0x00,
    ];
    let l4_len = 8 + payload;
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&((20 + l4_len) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 1, 0x40, 0, 64, 17, 0, 0, 10, 128, 0, 2, 10, 130, 0, 3]);
    let c = !fold(ones_sum(&f[14..34]));
    f[24..26].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&40000u16.to_be_bytes());
    f.extend_from_slice(&5001u16.to_be_bytes());
    f.extend_from_slice(&(l4_len as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend((0..payload).map(|i| (i * 7 + 3) as u8));
    let p = pseudo_header(0x0a80_0002, 0x0a82_0003, 17, l4_len as u16);
    let c = !fold(ones_sum(&f[34..]) + u32::from(p));
    f[40..42].copy_from_slice(&c.to_be_bytes());
    f
}

/// `f` as a pod with TX checksum offload hands it over.
fn partial(mut f: Vec<u8>) -> Vec<u8> {
    let p = pseudo_header(0x0a80_0002, 0x0a82_0003, 17, (f.len() - 34) as u16);
    f[40..42].copy_from_slice(&p.to_be_bytes());
    f
}

/// The inner flow's hash as the packet thread computes it: from the
/// frame's parse.
fn flow_hash(f: &[u8]) -> u32 {
    let mut key = FlowKey::zero();
    xbr_packet::parse::extract(f, 1, &mut key);
    dataplane::vxlan::encap::flow_hash(&key)
}

fn to_remote() -> Template {
    Template::new(LOCAL_MAC, REMOTE_MAC, LOCAL, REMOTE, 4789)
}

/// `f` as the remote node's xbr sends it to us.
fn from_remote(f: &[u8], vni: u32) -> Vec<u8> {
    let t = Template::new(REMOTE_MAC, LOCAL_MAC, REMOTE, LOCAL, 4789);
    let mut out = vec![0u8; OUTER_LEN];
    t.write(&mut out, f.len(), 99, src_port(flow_hash(f)), vni);
    out.extend_from_slice(f);
    out
}

fn rig() -> XdpRig {
    let mut r = XdpRig::new();
    r.prog
        .configure_vxlan(Ipv4Addr::from(LOCAL), 4789)
        .expect("configuring the uplink program");
    r
}

fn encap_action(f: &[u8], mtu: u32) -> FcAction {
    let key = frame_key(f, LO).unwrap();
    let hash = dataplane::fastpath::cache::entry::flow_hash(
        dataplane::fastpath::cache::entry::key_proto(&key),
        &dataplane::fastpath::cache::entry::key_nw(&key),
    );
    FcAction::Redirect {
        out_ifindex: LO,
        set_dst: None,
        set_src: None,
        nw: None,
        encap: Some(to_remote().flow_outer(VNI, src_port(hash), mtu)),
        frags: false,
    }
}

/// What `VxlanTunnel::encap` sends for `f` with outer IPv4 id `id`.
fn packet_thread_encap(f: &[u8], id: u16) -> Vec<u8> {
    let mut e = f.to_vec();
    complete_partial(&mut e);
    let mut out = vec![0u8; OUTER_LEN];
    to_remote().write(&mut out, e.len(), id, src_port(flow_hash(&e)), VNI);
    out.extend_from_slice(&e);
    out
}

#[test]
fn encapsulation_writes_what_the_packet_thread_writes() {
    let mut r = rig();
    let f = inner(100);
    r.install(&f, encap_action(&f, MTU), &[]);
    let mut runs = 0;
    for (i, frame) in [f.clone(), partial(f.clone()), f.clone()]
        .iter()
        .enumerate()
    {
        let (act, out) = r.run(frame);
        runs += 1;
        assert_eq!(act, XDP_REDIRECT, "run {i}");
        let id = u16::from_be_bytes([out[18], out[19]]);
        assert_eq!(out, packet_thread_encap(frame, id), "run {i}");
        // The receiving side's checks accept it, with our metadata.
        let d = decap(&out, REMOTE, 4789).expect("valid VXLAN");
        assert_eq!((d.meta.tun_id, d.meta.tun_src), (u64::from(VNI), LOCAL));
        assert_eq!(&out[d.offset..d.offset + d.len], &out[OUTER_LEN..]);
    }
    assert_eq!(r.hits(), runs);
    assert_eq!(r.cache.stats().encap_hit_packets, runs);
    assert_eq!(r.cache.stats().decap_hit_packets, 0);
}

#[test]
fn frames_too_big_for_the_uplink_are_left_to_xbr() {
    let mut r = rig();
    let f = inner(100);
    // The largest inner frame the MTU takes passes; one byte more does not.
    let mtu = (f.len() + 36) as u32;
    r.install(&f, encap_action(&f, mtu), &[]);
    let (act, _) = r.run(&f);
    assert_eq!(act, XDP_REDIRECT);

    let mut r = rig();
    r.install(&f, encap_action(&f, mtu - 1), &[]);
    let (act, out) = r.run(&f);
    assert_eq!(act, TO_XBR, "to xbr (no socket here: the kernel)");
    assert_eq!(out, f, "untouched");
    assert_eq!(r.hits(), 0);
}

fn decap_key(f: &[u8], tun_src: u32, vni: u32) -> [u8; 40] {
    let mut k = frame_key(f, LO).unwrap();
    set_tunnel(&mut k, tun_src, vni);
    k
}

fn to_pod() -> FcAction {
    FcAction::Redirect {
        out_ifindex: LO,
        set_dst: Some(POD_MAC),
        set_src: None,
        nw: None,
        encap: None,
        frags: false,
    }
}

#[test]
fn decapsulation_forwards_the_inner_frame() {
    let mut r = rig();
    let f = inner(64);
    r.install_key(decap_key(&f, REMOTE, VNI), to_pod(), &[]);
    let pkt = from_remote(&f, VNI);
    let d = decap(&pkt, LOCAL, 4789).expect("the packet thread accepts it");
    assert_eq!((d.meta.tun_src, d.meta.tun_id), (REMOTE, u64::from(VNI)));
    let (act, out) = r.run_vxlan(&pkt);
    assert_eq!(act, XDP_REDIRECT);
    let mut want = f.clone();
    want[0..6].copy_from_slice(&POD_MAC);
    assert_eq!(out, want);
    // A partial inner checksum (a sender's offload that survived the
    // underlay) is completed as for local frames.
    let (act, out) = r.run_vxlan(&from_remote(&partial(f.clone()), VNI));
    assert_eq!(act, XDP_REDIRECT);
    assert_eq!(out, want);
    assert_eq!(r.hits(), 2);
    assert_eq!(r.cache.stats().decap_hit_packets, 2);
    assert_eq!(r.cache.stats().encap_hit_packets, 0);
}

#[test]
fn decapsulated_drops_are_counted_in_the_kernel() {
    let mut r = rig();
    let f = inner(10);
    r.install_key(decap_key(&f, REMOTE, VNI), FcAction::Drop, &[]);
    let (act, _) = r.run_vxlan(&from_remote(&f, VNI));
    assert_eq!(act, XDP_DROP);
    assert_eq!(r.hits(), 1);
}

/// Malformed variants, and well-formed ones the program leaves to xbr
/// (padding, a UDP checksum to verify) or that are not the entry's flow,
/// reach xbr unchanged and uncounted; xbr checks them and counts its
/// drops.
#[test]
fn only_what_the_packet_thread_accepts_is_decapsulated() {
    let mut r = rig();
    let f = inner(64);
    r.install_key(decap_key(&f, REMOTE, VNI), to_pod(), &[]);
    let good = from_remote(&f, VNI);
    let fix_ip_csum = |p: &mut Vec<u8>| {
        p[24..26].fill(0);
        let c = !fold(ones_sum(&p[14..34]));
        p[24..26].copy_from_slice(&c.to_be_bytes());
    };
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
    let mut v = good.clone();
    v[24] ^= 0x40;
    cases.push(("IPv4 checksum", v));
    let mut v = good.clone();
    v[40..42].copy_from_slice(&[0x12, 0x34]);
    cases.push(("UDP checksum set", v));
    let mut v = good.clone();
    v[42] = 0x0c;
    cases.push(("VXLAN flags", v));
    let mut v = good.clone();
    v[43] = 1;
    cases.push(("reserved bits after the flags", v));
    let mut v = good.clone();
    v[49] = 1;
    cases.push(("reserved byte after the VNI", v));
    let mut v = good.clone();
    v.extend_from_slice(&[0; 4]);
    cases.push(("Ethernet padding", v));
    let mut v = good.clone();
    v[39] = v[39].wrapping_sub(1);
    cases.push(("UDP length", v));
    let mut v = good.clone();
    v[17] = v[17].wrapping_sub(1);
    fix_ip_csum(&mut v);
    cases.push(("IPv4 length", v));
    let mut v = good.clone();
    v[30..34].copy_from_slice(&(LOCAL + 1).to_be_bytes());
    fix_ip_csum(&mut v);
    cases.push(("another address", v));
    cases.push(("another VNI (a miss)", from_remote(&f, VNI + 1)));
    let mut v = good.clone();
    v[26..30].copy_from_slice(&(REMOTE + 1).to_be_bytes());
    fix_ip_csum(&mut v);
    cases.push(("another node (a miss)", v));
    cases.push(("truncated inner frame", good[..OUTER_LEN + 20].to_vec()));
    for (what, pkt) in &cases {
        let (act, out) = r.run_vxlan(pkt);
        if act == XDP_REDIRECT {
            panic!("{what}: forwarded");
        }
        assert_eq!(act, XDP_PASS, "{what}");
        assert_eq!(&out, pkt, "{what}: changed");
    }
    assert_eq!(r.hits(), 0);
    // And the good one goes through.
    let (act, _) = r.run_vxlan(&good);
    assert_eq!(act, XDP_REDIRECT);
}

/// Jumbo frames (in several buffers) both ways, to devices that take
/// them: encapsulated and decapsulated as the packet thread does, the
/// length checks made against the whole frame; to a device that does not,
/// left to xbr.
#[test]
fn jumbo_frames_are_encapsulated_and_decapsulated() {
    let jumbo_mtu = 9000;
    let f = inner(8900);
    let mut r = rig();
    r.install(&f, taking_frags(encap_action(&f, jumbo_mtu)), &[]);
    for frame in [f.clone(), partial(f.clone())] {
        let (act, out) = r.run(&frame);
        assert_eq!(act, XDP_REDIRECT);
        let id = u16::from_be_bytes([out[18], out[19]]);
        assert_eq!(out, packet_thread_encap(&frame, id));
        decap(&out, REMOTE, 4789).expect("valid VXLAN");
    }
    assert_eq!(r.hits(), 2);

    let mut d = rig();
    d.install_key(decap_key(&f, REMOTE, VNI), taking_frags(to_pod()), &[]);
    let pkt = from_remote(&partial(f.clone()), VNI);
    let (act, out) = d.run_vxlan(&pkt);
    assert_eq!(act, XDP_REDIRECT);
    let mut want = f.clone();
    want[0..6].copy_from_slice(&POD_MAC);
    assert_eq!(out, want);
    let mut padded = pkt.clone();
    padded.extend_from_slice(&[0; 4]);
    let mut short_udp = pkt.clone();
    short_udp[39] = short_udp[39].wrapping_sub(1);
    for bad in [padded, short_udp, pkt[..pkt.len() - 1].to_vec()] {
        assert_eq!(d.run_vxlan(&bad), (XDP_PASS, bad.clone()));
    }
    assert_eq!(d.hits(), 1);

    let mut no_frags = rig();
    no_frags.install_key(decap_key(&f, REMOTE, VNI), to_pod(), &[]);
    assert_eq!(no_frags.run_vxlan(&pkt), (XDP_PASS, pkt.clone()));
    no_frags.install(&f, encap_action(&f, jumbo_mtu), &[]);
    assert_eq!(no_frags.run(&f), (TO_XBR, f.clone()));
    assert_eq!(no_frags.hits(), 0);
}
