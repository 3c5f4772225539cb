//! Per-packet cost of VXLAN encapsulation and decapsulation on xbr's
//! packet thread, against the flow extraction every packet pays anyway
//! (`extract`, the in-run peer: read the VXLAN figures as ratios to it).
//!
//! `encap`: the inner flow's hash for the UDP source port (from the flow
//! key the packet was parsed into) and the outer headers written from the
//! remote VTEP's template into the frame's headroom (`VxlanTunnel::encap`'s
//! work past the neighbour lookup).
//! `decap`: the checks of a received packet's outer headers (IPv4
//! checksum, lengths, UDP, VXLAN flags) and the inner frame's location.
//! Both on a 64-byte inner frame, so the fixed cost shows.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use dataplane::vxlan::encap::{decap, flow_hash, src_port, Template};
use flowtable::FlowKey;
use std::hint::black_box;
use xbr_packet::parse;
use xbr_packet::vxlan::OUTER_LEN;

const LOCAL: u32 = 0x0a00_000b;
const REMOTE: u32 = 0x0a00_000c;

/// A 64-byte Ethernet/IPv4/UDP frame between two pods.
fn inner() -> Vec<u8> {
    let mut f = vec![0u8; 64];
    f[..6].copy_from_slice(&[0x0a, 0x58, 0x0a, 0x81, 0x00, 0x03]);
    f[6..12].copy_from_slice(&[0x0a, 0x58, 0x0a, 0x80, 0x00, 0x02]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[16..18].copy_from_slice(&50u16.to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&[10, 128, 0, 2]);
    f[30..34].copy_from_slice(&[10, 129, 0, 3]);
    f[34..36].copy_from_slice(&40000u16.to_be_bytes());
    f[36..38].copy_from_slice(&5001u16.to_be_bytes());
    f[38..40].copy_from_slice(&30u16.to_be_bytes());
    f
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("vxlan");
    g.throughput(Throughput::Elements(1));
    let frame = inner();

    g.bench_function("extract", |b| {
        b.iter(|| {
            let mut key = FlowKey::zero();
            parse::extract(black_box(&frame), 1, &mut key);
            key
        })
    });

    // The frame behind OUTER_LEN bytes of headroom, as in a UMEM frame.
    let template = Template::new(
        [2, 0, 0, 0, 0, 0xb],
        [2, 0, 0, 0, 0, 0xc],
        LOCAL,
        REMOTE,
        4789,
    );
    let mut buf = vec![0u8; OUTER_LEN + frame.len()];
    buf[OUTER_LEN..].copy_from_slice(&frame);
    let mut parsed = FlowKey::zero();
    parse::extract(&frame, 1, &mut parsed);
    let mut ip_id = 0u16;
    g.bench_function("encap", |b| {
        b.iter(|| {
            let hash = flow_hash(black_box(&parsed));
            ip_id = ip_id.wrapping_add(1);
            template.write(&mut buf, frame.len(), ip_id, src_port(hash), 0x12_3456);
            buf[16]
        })
    });

    // What the remote end receives: the encapsulated frame, addressed to us.
    let from_remote = Template::new(
        [2, 0, 0, 0, 0, 0xc],
        [2, 0, 0, 0, 0, 0xb],
        REMOTE,
        LOCAL,
        4789,
    );
    let mut packet = vec![0u8; OUTER_LEN];
    from_remote.write(
        &mut packet,
        frame.len(),
        7,
        src_port(flow_hash(&parsed)),
        0x12_3456,
    );
    packet.extend_from_slice(&frame);
    assert!(decap(&packet, LOCAL, 4789).is_ok());
    g.bench_function("decap", |b| {
        b.iter(|| decap(black_box(&packet), LOCAL, 4789).map(|d| d.len))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
