//! Classifier lookup cost: tuple space search against a linear scan (the
//! in-run peer) over the same rules, with 1k and 100k rules.
//!
//! The rule set imitates an SDN node's tables: a few masks (in_port,
//! exact IPv4 destination, /24 subnets per in_port, TCP ports), many values
//! per mask, and a catch-all at priority 0.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};
use flowtable::classifier::linear_lookup;
use flowtable::matching::{ETH_TYPE_IPV4, IP_PROTO_TCP};
use flowtable::{Action, Field, FlowFilter, FlowKey, FlowMod, FlowTables, Instructions, Match};

fn rule_match(i: u32) -> (u16, Match) {
    let mut m = Match::catch_all();
    m.set_exact(Field::EthType, u64::from(ETH_TYPE_IPV4));
    match i % 4 {
        0 => {
            m.set_exact(Field::IpDst, u64::from(0x0a00_0000 | i));
            (300, m)
        }
        1 => {
            m.set_exact(Field::InPort, u64::from(i % 64));
            m.set_masked(Field::IpDst, u64::from(0x0a00_0000 | (i << 8)), 0xffff_ff00);
            (200, m)
        }
        2 => {
            m.set_exact(Field::IpProto, u64::from(IP_PROTO_TCP));
            m.set_exact(Field::IpDst, u64::from(0x0b00_0000 | i));
            m.set_exact(Field::TpDst, u64::from(i % 60000));
            (400, m)
        }
        _ => {
            m.set_exact(Field::InPort, u64::from(i % 64));
            m.set_exact(Field::Reg(0), u64::from(i));
            (100, m)
        }
    }
}

fn tables(n: u32) -> FlowTables {
    let mut ft = FlowTables::new();
    let out = |p| {
        Instructions::apply(vec![Action::Output {
            port: p,
            max_len: 0,
        }])
    };
    ft.flow_mod(&FlowMod::add(0, 0, Match::catch_all(), out(1)))
        .expect("catch-all");
    for i in 1..n {
        let (prio, m) = rule_match(i);
        ft.flow_mod(&FlowMod::add(0, prio, m, out(i % 100 + 2)))
            .expect("valid rule");
    }
    ft
}

/// Keys hitting each rule shape and the catch-all.
fn keys(n: u32) -> Vec<FlowKey> {
    (0..256u32)
        .map(|j| {
            let i = (j.wrapping_mul(2_654_435_761)) % n.max(1);
            let mut k = FlowKey::zero();
            k.set(Field::InPort, u64::from(i % 64));
            k.set(Field::EthType, u64::from(ETH_TYPE_IPV4));
            k.set(Field::IpProto, u64::from(IP_PROTO_TCP));
            let dst = match i % 4 {
                0 => 0x0a00_0000 | i,
                1 => 0x0a00_0000 | (i << 8) | 7,
                2 => 0x0b00_0000 | i,
                _ => 0x0c00_0000,
            };
            k.set(Field::IpDst, u64::from(dst));
            k.set(Field::TpDst, u64::from(i % 60000));
            k.set(Field::Reg(0), u64::from(i));
            k
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("classifier_lookup");
    for n in [1_000u32, 100_000] {
        let ft = tables(n);
        let cls = ft.classifier(0).expect("table 0");
        let rules = ft.flows(&FlowFilter::default());
        let keys = keys(n);
        // Both must agree before their speed means anything.
        for k in &keys {
            let mut wc = FlowKey::zero();
            assert_eq!(
                cls.lookup(k, &mut wc).map(|r| r.id),
                linear_lookup(&rules, k).map(|r| r.id)
            );
        }
        g.bench_with_input(BenchmarkId::new("tss", n), &keys, |b, keys| {
            let mut i = 0;
            b.iter(|| {
                i = (i + 1) % keys.len();
                let mut wc = FlowKey::zero();
                black_box(cls.lookup(black_box(&keys[i]), &mut wc).map(|r| r.id))
            })
        });
        if n > 10_000 {
            g.sample_size(10);
        }
        g.bench_with_input(BenchmarkId::new("linear", n), &keys, |b, keys| {
            let mut i = 0;
            b.iter(|| {
                i = (i + 1) % keys.len();
                black_box(linear_lookup(&rules, black_box(&keys[i])).map(|r| r.id))
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
