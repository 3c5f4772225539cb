//! Per-packet cost of `ct()` in the connection tracker, against the flow
//! extraction every packet pays anyway (`extract`, the in-run peer: read
//! the conntrack figures as ratios to it).
//!
//! Scenarios: a packet of one established UDP connection, of 10k
//! established connections in turn (cache misses in the table), of an
//! established SNATed connection (lookup plus the rewrite with checksum
//! updates), and a new committed connection per packet (the table grows;
//! it is emptied, outside the measurement, when a pass is done).

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use dataplane::conntrack::{Conntrack, CtConfig, CtRequest, Timeouts};
use flowtable::{FlowKey, NatSpec};
use xbr_packet::parse;

/// A 64-byte Ethernet/IPv4/UDP frame from 10.128.x.y:sport to 10.129.0.5:53.
fn frame(src: u32, sport: u16) -> Vec<u8> {
    let mut f = vec![0u8; 64];
    f[..6].copy_from_slice(&[0x0a, 0x58, 0x0a, 0x80, 0x00, 0x03]);
    f[6..12].copy_from_slice(&[0x0a, 0x58, 0x0a, 0x80, 0x00, 0x02]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[16..18].copy_from_slice(&50u16.to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&(0x0a80_0000 | src).to_be_bytes());
    f[30..34].copy_from_slice(&[10, 129, 0, 5]);
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&53u16.to_be_bytes());
    f[38..40].copy_from_slice(&30u16.to_be_bytes());
    f
}

fn ct_once(ct: &Conntrack, f: &mut [u8], req: &CtRequest) -> u32 {
    let mut key = FlowKey::zero();
    let layers = parse::extract(f, 1, &mut key);
    ct.execute(f, layers, &key, req, 0).state
}

const COMMIT: CtRequest = CtRequest {
    zone: 0,
    commit: true,
    force: false,
    nat: None,
    mark: None,
    label: None,
    from_host: false,
    in_port: 0,
};
const LOOKUP: CtRequest = CtRequest {
    commit: false,
    ..COMMIT
};

fn tracker() -> Conntrack {
    Conntrack::new(CtConfig {
        limit: 4_000_000,
        timeouts: Timeouts::default(),
    })
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("conntrack");
    g.throughput(Throughput::Elements(1));

    let mut f = frame(2, 1000);
    g.bench_function("extract", |b| {
        b.iter(|| {
            let mut key = FlowKey::zero();
            parse::extract(std::hint::black_box(&f), 1, &mut key);
            key
        })
    });

    let ct = tracker();
    ct_once(&ct, &mut f, &COMMIT);
    g.bench_function("established_1", |b| {
        b.iter(|| ct_once(&ct, std::hint::black_box(&mut f), &LOOKUP))
    });

    let ct = tracker();
    let mut frames: Vec<Vec<u8>> = (0..10_000u32)
        .map(|i| frame(i / 1000 + 2, 1000 + (i % 1000) as u16))
        .collect();
    for f in &mut frames {
        ct_once(&ct, f, &COMMIT);
    }
    assert_eq!(ct.len(), 10_000);
    let mut i = 0;
    g.bench_function("established_10k", |b| {
        b.iter(|| {
            i = (i + 1) % frames.len();
            ct_once(&ct, &mut frames[i], &LOOKUP)
        })
    });

    let ct = tracker();
    let snat = CtRequest {
        nat: Some(NatSpec::v4(NatSpec::SRC, 0x0a00_000b, 0x0a00_000b, 0, 0)),
        ..COMMIT
    };
    let bare_nat = CtRequest {
        commit: false,
        nat: Some(NatSpec::default()),
        ..COMMIT
    };
    let template = frame(2, 1000);
    ct_once(&ct, &mut template.clone(), &snat);
    g.bench_function("established_snat", |b| {
        b.iter_batched_ref(
            || template.clone(),
            |f| ct_once(&ct, f, &bare_nat),
            BatchSize::SmallInput,
        )
    });

    let ct = tracker();
    let mut n = 0u32;
    g.bench_function("new_commit", |b| {
        b.iter_batched_ref(
            || {
                n += 1;
                if n.is_multiple_of(100_000) {
                    ct.flush(None);
                }
                frame(n >> 16, n as u16)
            },
            |f| ct_once(&ct, f, &COMMIT),
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
