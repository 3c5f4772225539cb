//! PBB through the packet engine over in-memory ports: a frame pushed
//! into a PBB tag and popped out again is the frame it was, and a popped
//! received tag's customer frame is matched by the next table.

mod common;

use common::Rig;
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

/// `inner` behind an outer header with these addresses and I-SID `isid`.
fn tagged(inner: &[u8], outer_macs: &[u8; 12], isid: u32) -> Vec<u8> {
    let mut f = outer_macs.to_vec();
    f.extend_from_slice(&[0x88, 0xe7]);
    f.extend_from_slice(&isid.to_be_bytes());
    f.extend_from_slice(inner);
    f
}

#[test]
fn push_then_pop_and_pop_then_goto() {
    let mut rig = Rig::new(4, N_FRAMES);
    rig.flow_text("table=0,in_port=1,actions=push_pbb:0x88e7,set_field:100->pbb_isid,output:2");
    rig.flow_text("table=0,in_port=2,actions=pop_pbb,goto_table:1");
    rig.flow_text("table=1,tcp,tp_dst=80,actions=dec_ttl,output:3");
    rig.flow_text("table=1,priority=0,actions=output:4");
    let ip = tcp4(64);
    let macs: [u8; 12] = ip[..12].try_into().unwrap();
    for _ in 0..2 {
        rig.send(1, &ip);
        let pushed = rig.sent(2);
        assert_eq!(pushed, vec![tagged(&ip, &macs, 100)]);
        rig.send(2, &pushed[0]);
        assert_eq!(rig.sent(3), vec![tcp4(63)], "popped, parsed, matched");
    }
    // Other outer addresses: the customer frame's are what come out.
    let other = [0xb, 0, 0, 0, 0, 1, 0xb, 0, 0, 0, 0, 2];
    let mut not_80 = ip.clone();
    not_80[36..38].copy_from_slice(&81u16.to_be_bytes());
    rig.send(2, &tagged(&not_80, &other, 5));
    assert_eq!(rig.sent(4), vec![not_80]);
    assert_eq!(rig.free_frames(), N_FRAMES as usize, "a frame leaked");
}

/// A popped customer frame below Ethernet's minimum goes out padded to
/// 60 bytes.
#[test]
fn popped_short_customer_frames_are_padded() {
    let mut rig = Rig::new(2, N_FRAMES);
    rig.flow_text("dl_type=0x88e7,actions=pop_pbb,output:2");
    // A 42-byte ARP request as the customer frame.
    let mut arp = vec![0xff; 6];
    arp.extend_from_slice(&[2, 0, 0, 0, 0, 0xa, 0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
    arp.extend_from_slice(&[
        2, 0, 0, 0, 0, 0xa, 10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 10, 0, 0, 2,
    ]);
    assert_eq!(arp.len(), 42);
    let outer = [0xb, 0, 0, 0, 0, 1, 0xb, 0, 0, 0, 0, 2];
    rig.send(1, &tagged(&arp, &outer, 9));
    let mut want = arp.clone();
    want.resize(60, 0);
    assert_eq!(rig.sent(2), vec![want]);
    assert_eq!(rig.free_frames(), N_FRAMES as usize, "a frame leaked");
}
