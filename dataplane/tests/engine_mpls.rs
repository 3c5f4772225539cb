//! MPLS through the packet engine over in-memory ports: real frames get
//! label stack entries pushed, rewritten and popped in place (a push then
//! a pop gives back the frame), the TTL rules hold, the translation
//! cache's copies act like the first translation, and no MPLS frame is
//! ever looked up by the XDP flow cache.

mod common;

use common::Rig;
use dataplane::fastpath::cache::entry::frame_key;
use etherparse::PacketBuilder;

const N_FRAMES: u32 = 64;

fn tcp4(ttl: u8) -> Vec<u8> {
    let mut f = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 0xa], [2, 0, 0, 0, 0, 0xb])
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2], ttl)
        .tcp(40000, 80, 1, 1000)
        .write(&mut f, b"payload")
        .unwrap();
    f
}

fn lse(label: u32, tc: u32, bos: u32, ttl: u32) -> [u8; 4] {
    (label << 12 | tc << 9 | bos << 8 | ttl).to_be_bytes()
}

/// `frame` with MPLS ethertype and `entries` in front of its IP header.
fn labelled(frame: &[u8], entries: &[[u8; 4]]) -> Vec<u8> {
    let mut f = frame[..12].to_vec();
    f.extend_from_slice(&[0x88, 0x47]);
    for e in entries {
        f.extend_from_slice(e);
    }
    f.extend_from_slice(&frame[14..]);
    f
}

#[test]
fn push_rewrite_and_pop_move_the_frame_in_place() {
    let mut rig = Rig::new(4, N_FRAMES);
    rig.flow_text("in_port=1,ip,actions=push_mpls:0x8847,set_field:100->mpls_label,output:2");
    rig.flow_text("in_port=2,mpls,mpls_label=100,mpls_bos=1,actions=pop_mpls:0x0800,output:3");
    rig.flow_text("in_port=3,ip,actions=push_mpls:0x8847,set_field:5->mpls_tc,push_mpls:0x8847,set_field:7->mpls_label,output:4");
    let ip = tcp4(64);
    // Twice: the second packet takes the cached translation.
    for _ in 0..2 {
        rig.send(1, &ip);
        let pushed = rig.sent(2);
        assert_eq!(pushed, vec![labelled(&ip, &[lse(100, 0, 1, 64)])]);
        rig.send(2, &pushed[0]);
        assert_eq!(rig.sent(3), vec![ip.clone()], "the pop restored the frame");
    }
    // Two pushes: the first entry is the bottom of the stack, the second
    // a copy of it but for the BOS bit, then rewritten.
    rig.send(3, &ip);
    assert_eq!(
        rig.sent(4),
        vec![labelled(&ip, &[lse(7, 5, 0, 64), lse(0, 5, 1, 64)])]
    );
    assert_eq!(rig.free_frames(), N_FRAMES as usize, "a frame leaked");
}

#[test]
fn mpls_ttl_actions() {
    let mut rig = Rig::new(3, N_FRAMES);
    rig.flow_text("in_port=1,mpls,actions=dec_mpls_ttl,output:2");
    rig.flow_text("in_port=2,mpls,actions=set_mpls_ttl(9),output:3");
    let upcalls = rig.shared.upcalls();
    let ip = tcp4(64);
    rig.send(1, &labelled(&ip, &[lse(16, 1, 1, 64)]));
    assert_eq!(rig.sent(2), vec![labelled(&ip, &[lse(16, 1, 1, 63)])]);
    // TTL 1 would become 0: not forwarded, a packet-in with reason
    // INVALID_TTL (2) queued for controllers that want it.
    let expiring = labelled(&ip, &[lse(16, 1, 1, 1)]);
    rig.send(1, &expiring);
    assert!(rig.sent(2).is_empty());
    let up = upcalls.try_recv().expect("an INVALID_TTL packet-in");
    assert_eq!((up.reason, up.data.clone()), (2, expiring));
    rig.send(2, &labelled(&ip, &[lse(16, 1, 0, 64), lse(3, 0, 1, 8)]));
    assert_eq!(
        rig.sent(3),
        vec![labelled(&ip, &[lse(16, 1, 0, 9), lse(3, 0, 1, 8)])]
    );
    assert_eq!(rig.free_frames(), N_FRAMES as usize, "a frame leaked");
}

/// A minimum-size frame (padded by its sender) that a pop shortens goes
/// out padded to 60 bytes again.
#[test]
fn popped_short_frames_are_padded_to_the_ethernet_minimum() {
    let mut rig = Rig::new(2, N_FRAMES);
    rig.flow_text("mpls,actions=pop_mpls:0x0800,output:2");
    // An ICMP echo request of 28 bytes of IPv4.
    let mut ip = vec![
        0x45, 0, 0, 28, 0, 1, 0, 0, 64, 1, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ];
    ip.extend_from_slice(&[8, 0, 0xf7, 0xff, 0, 0, 0, 0]);
    let mut frame = vec![2, 0, 0, 0, 0, 0xb, 2, 0, 0, 0, 0, 0xa, 0x88, 0x47];
    frame.extend_from_slice(&lse(100, 0, 1, 64));
    frame.extend_from_slice(&ip);
    frame.resize(60, 0);
    // Whatever the sender padded with moves with the frame; the 4 bytes
    // the pop adds at the end are zero, not what was there.
    frame[56..].copy_from_slice(&[0xee; 4]);
    rig.send(1, &frame);
    let mut want = frame[..12].to_vec();
    want.extend_from_slice(&[0x08, 0x00]);
    want.extend_from_slice(&frame[18..]);
    want.resize(60, 0);
    assert_eq!(rig.sent(2), vec![want]);
    // A frame above the minimum just gets shorter.
    let long = labelled(&tcp4(64), &[lse(1, 0, 1, 64)]);
    rig.send(1, &long);
    assert_eq!(rig.sent(2), vec![tcp4(64)]);
    assert_eq!(rig.free_frames(), N_FRAMES as usize, "a frame leaked");
}

/// copy_ttl_out and copy_ttl_in on a received label (os-ken's cases: an
/// IPv4 TTL of 32 under a label TTL of 64).
#[test]
fn ttl_copies_on_received_labels() {
    let mut rig = Rig::new(3, N_FRAMES);
    rig.flow_text("in_port=1,mpls,actions=copy_ttl_out,output:2");
    rig.flow_text("in_port=2,mpls,actions=copy_ttl_in,output:3");
    let inner = tcp4(32);
    rig.send(1, &labelled(&inner, &[lse(100, 3, 1, 64)]));
    assert_eq!(rig.sent(2), vec![labelled(&inner, &[lse(100, 3, 1, 32)])]);
    rig.send(2, &labelled(&inner, &[lse(100, 3, 1, 64)]));
    assert_eq!(
        rig.sent(3),
        vec![labelled(&tcp4(64), &[lse(100, 3, 1, 64)])]
    );
    assert_eq!(rig.free_frames(), N_FRAMES as usize, "a frame leaked");
}

/// A popped received label uncovers headers the first parse never read:
/// goto_table parses the frame again and the next table matches and
/// rewrites them.
#[test]
fn goto_after_pop_matches_the_uncovered_headers() {
    let mut rig = Rig::new(3, N_FRAMES);
    rig.flow_text("table=0,actions=pop_mpls:0x0800,goto_table:1");
    rig.flow_text("table=1,tcp,nw_ttl=64,tp_dst=80,actions=dec_ttl,output:2");
    rig.flow_text("table=1,priority=0,actions=output:3");
    let ip = tcp4(64);
    for _ in 0..2 {
        rig.send(1, &labelled(&ip, &[lse(100, 3, 1, 64)]));
        assert_eq!(rig.sent(2), vec![tcp4(63)]);
        assert!(rig.sent(3).is_empty());
    }
    // Another TTL behind the label: the other flow of table 1.
    rig.send(1, &labelled(&tcp4(9), &[lse(100, 3, 1, 64)]));
    assert_eq!(rig.sent(3), vec![tcp4(9)]);
    // Unlabelled IPv4 goes straight to table 1.
    rig.send(1, &ip);
    assert_eq!(rig.sent(2), vec![tcp4(63)]);
    assert_eq!(rig.free_frames(), N_FRAMES as usize, "a frame leaked");
}

/// The XDP program (and its userspace twin, `frame_key`) looks up
/// untagged IPv4 only, so a labelled frame never meets an entry.
#[test]
fn mpls_frames_are_never_looked_up_by_the_xdp_cache() {
    let ip = tcp4(64);
    assert!(frame_key(&ip, 1).is_some());
    assert_eq!(frame_key(&labelled(&ip, &[lse(1, 0, 1, 64)]), 1), None);
    let mut m = labelled(&ip, &[lse(1, 0, 1, 64)]);
    m[12..14].copy_from_slice(&[0x88, 0x48]);
    assert_eq!(frame_key(&m, 1), None);
}
