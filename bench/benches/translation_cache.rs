//! The packet thread's translation caches under many short flows: 64k
//! distinct TCP connections (source ports) through a three-table pipeline
//! with 10k destination flows, so the 8192-entry exact-match cache
//! thrashes. Compared in the same run: the exact-match cache alone (every
//! packet a full pipeline walk), with the megaflow cache behind it, and
//! the walk without any cache.

mod common;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use flowtable::cache::{FlowCache, DEFAULT_ENTRIES};
use flowtable::matching::{ETH_TYPE_IPV4, IP_PROTO_TCP};
use flowtable::{Field, FlowKey, FlowTables, Pipeline, Xlate};

const CONNECTIONS: u32 = 65_536;
const DESTINATIONS: u32 = 10_000;
/// Packets per iteration.
const BATCH: usize = 32;

fn pipeline() -> Pipeline {
    let mut ft = FlowTables::new();
    let mut pipe = Pipeline::with_counters(ft.counters());
    for fm in common::three_table_flows(DESTINATIONS) {
        pipe.apply(&ft.flow_mod(&fm).expect("flow"));
    }
    pipe
}

fn key(i: u32) -> FlowKey {
    let mut k = FlowKey::zero();
    k.set(Field::InPort, 1);
    k.set(Field::EthType, u64::from(ETH_TYPE_IPV4));
    k.set(Field::IpProto, u64::from(IP_PROTO_TCP));
    k.set(Field::IpSrc, 0x0a80_0002);
    k.set(Field::IpDst, u64::from(0x0a00_0000 | (i % 16)));
    k.set(Field::TpSrc, u64::from(1024 + i % CONNECTIONS));
    k.set(Field::TpDst, 80);
    k
}

fn bench_caches(c: &mut Criterion) {
    let mut group = c.benchmark_group("translation_cache");
    group.throughput(Throughput::Elements(BATCH as u64));
    let pipe = pipeline();
    let keys: Vec<FlowKey> = (0..CONNECTIONS).map(key).collect();
    let mut out = Xlate::new();
    for (name, mut cache) in [
        (
            "exact_only",
            Some(FlowCache::with_megaflows(DEFAULT_ENTRIES, 0)),
        ),
        ("exact_and_megaflow", Some(FlowCache::new(DEFAULT_ENTRIES))),
        ("walk", None),
    ] {
        let mut next = 0usize;
        group.bench_function(BenchmarkId::new("64k_connections", name), |b| {
            b.iter(|| {
                for _ in 0..BATCH {
                    let k = &keys[next % keys.len()];
                    next = next.wrapping_add(7919);
                    match &mut cache {
                        Some(c) => c.xlate(&pipe, k, 64, &mut out),
                        None => pipe.xlate(k, 64, &mut out),
                    }
                    assert_eq!(out.actions().len(), 1);
                }
                if let Some(c) = &mut cache {
                    c.flush();
                }
            })
        });
    }
    group.finish();
}

/// Exact-match hits alone: 1,024 flows that all fit in the cache.
/// Pending counts are flushed every 16,384 lookups: under load the
/// engine flushes every 20 ms, rarer still.
fn bench_hits(c: &mut Criterion) {
    const FLOWS: u32 = 1024;
    const FLUSH_EVERY: usize = 256 * 64 / BATCH;
    let mut rounds = 0usize;
    let mut group = c.benchmark_group("translation_cache_hits");
    group.throughput(Throughput::Elements(BATCH as u64));
    let pipe = pipeline();
    let keys: Vec<FlowKey> = (0..FLOWS).map(key).collect();
    let mut out = Xlate::new();
    let mut cache = FlowCache::with_megaflows(DEFAULT_ENTRIES, 0);
    for k in &keys {
        cache.xlate(&pipe, k, 64, &mut out);
    }
    let mut next = 0usize;
    group.bench_function("1k_flows", |b| {
        b.iter(|| {
            for k in &keys[next..next + BATCH] {
                cache.xlate(&pipe, k, 64, &mut out);
                assert_eq!(out.actions().len(), 1);
            }
            next = (next + BATCH) % keys.len();
            rounds += 1;
            if rounds.is_multiple_of(FLUSH_EVERY) {
                cache.flush();
            }
        })
    });
    // Nearly every lookup hits: a few keys share both slots with others.
    let s = cache.stats();
    assert!(s.misses * 100 < s.hits, "{s:?}");
    group.finish();
}

criterion_group!(benches, bench_caches, bench_hits);
criterion_main!(benches);
