//! What a sweep of the XDP flow cache costs the packet thread: one forced
//! pass over 10,000 and 100,000 installed entries (hit counts read,
//! nothing removed), the map walked in batches as xbr does, against the
//! same cache read one lookup per entry (the fallback, and what every
//! sweep did before batches) in the same run. Needs root (BPF maps).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use dataplane::conntrack::Conntrack;
use dataplane::fastpath::cache::entry::{FcKey, KEY_SIZE};
use dataplane::fastpath::cache::{CacheMaps, FcAction, Origin, XdpCache};
use flowtable::cache::FlowCache;
use flowtable::pipeline::{DropReason, Pipeline, Xlate};
use flowtable::FlowKey;
use std::sync::Arc;
use std::time::Instant;

fn key(i: u32) -> FcKey {
    let mut k = [0u8; KEY_SIZE];
    k[..4].copy_from_slice(&i.to_be_bytes());
    k
}

/// A cache of xbr's default size holding `n` drop entries.
fn cache(n: u32, by_key: bool, ct: &Conntrack) -> XdpCache {
    let maps = Arc::new(
        CacheMaps::new(dataplane::fastpath::cache::DEFAULT_ENTRIES, 4, 1024)
            .expect("creating BPF maps (run the benchmark as root)"),
    );
    let mut cache = XdpCache::new(maps);
    if by_key {
        cache.sweep_entry_by_entry();
    }
    cache.begin_round();
    let pipe = Pipeline::new();
    let mut fc = FlowCache::default();
    let mut x = Xlate::new();
    fc.xlate(&pipe, &FlowKey::zero(), 64, &mut x);
    let attribution = fc
        .attribution(&pipe, &FlowKey::zero())
        .expect("a table miss is cacheable");
    let now = ct.now_ms();
    for i in 0..n {
        let origin = Origin {
            in_port: 1,
            passes: Box::new([]),
            forks: Box::new([]),
        };
        cache.install(
            key(i),
            FcAction::Drop,
            origin,
            Err(DropReason::ExplicitDrop),
            attribution.clone(),
            &[],
            ct,
            now,
        );
    }
    assert_eq!(cache.len(), n as usize, "not all installed");
    cache
}

fn sweeps(c: &mut Criterion) {
    let ct = Conntrack::default();
    let mut g = c.benchmark_group("xdp_sweep");
    g.sample_size(10);
    for n in [10_000u32, 100_000] {
        g.throughput(Throughput::Elements(u64::from(n)));
        for (name, by_key) in [("batched", false), ("entry_by_entry", true)] {
            let mut cache = cache(n, by_key, &ct);
            // The sweeps' clock stays at install time: with no hits, the
            // entries would otherwise expire after 10 s of measuring.
            let installed = Instant::now();
            g.bench_with_input(BenchmarkId::new(name, n), &n, |b, _| {
                b.iter(|| cache.sweep(installed, true, false, &ct, ct.now_ms()));
            });
            assert_eq!(cache.len(), n as usize, "a sweep removed entries");
        }
    }
    g.finish();
}

criterion_group!(benches, sweeps);
criterion_main!(benches);
