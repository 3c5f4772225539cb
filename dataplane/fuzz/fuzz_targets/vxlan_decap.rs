//! Any frame received on a VXLAN port's uplink through decapsulation and
//! the inner frame's flow extraction: no panic, and an accepted frame's
//! inner frame lies inside it with a 24-bit VNI.
//!
//! The port's address and UDP port are taken from the frame itself (the
//! XDP program selected on them already) and, when the first byte's low
//! bit is set, the UDP checksum is cleared (IPv4's "none"), so that the
//! fuzzer reaches past the outer checks.

#![no_main]

use dataplane::vxlan::encap::decap;
use flowtable::key::{Field, FlowKey};
use libfuzzer_sys::fuzz_target;
use xbr_packet::parse::extract;

fuzz_target!(|data: &[u8]| {
    let Some((&ctl, frame)) = data.split_first() else {
        return;
    };
    let mut frame = frame.to_vec();
    if ctl & 1 != 0 {
        if let Some(csum) = frame.get_mut(40..42) {
            csum.fill(0);
        }
    }
    let local_ip = frame
        .get(30..34)
        .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    let dst_port = frame
        .get(36..38)
        .map_or(4789, |b| u16::from_be_bytes([b[0], b[1]]));
    let Ok(d) = decap(&frame, local_ip, dst_port) else {
        return;
    };
    let end = d
        .offset
        .checked_add(d.len)
        .expect("inner frame end overflows");
    assert!(
        end <= frame.len(),
        "inner frame {}..{end} past {}",
        d.offset,
        frame.len()
    );
    assert!(d.meta.tun_id < 1 << 24, "VNI {:#x}", d.meta.tun_id);
    let inner = &frame[d.offset..end];
    let mut key = FlowKey::default();
    extract(inner, 1, &mut key);
    key.set(Field::TunId, d.meta.tun_id);
});
