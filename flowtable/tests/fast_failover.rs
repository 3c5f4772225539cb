//! Fast-failover groups: the first bucket whose watched port is up (or
//! whose watched group has a live bucket) runs; with none, nothing does.

mod common;

use common::*;
use flowtable::cache::FlowCache;
use flowtable::text::{parse_flow, parse_group};
use flowtable::*;

fn pipeline(groups: &[&str], flows: &[&str]) -> (FlowTables, Pipeline) {
    let mut mods: Vec<PipelineMod> = groups
        .iter()
        .map(|g| PipelineMod::Group(parse_group(g).unwrap()))
        .collect();
    mods.extend(
        flows
            .iter()
            .map(|f| PipelineMod::Flow(parse_flow(f).unwrap())),
    );
    let mut ft = FlowTables::new();
    let mut p = Pipeline::with_counters(ft.counters());
    p.apply(&ft.apply_batch(&mods).unwrap());
    (ft, p)
}

fn from_port_1() -> FlowKey {
    tcp_key(1, 0x0a00_0001, 0x0a00_0002, 1000, 80)
}

#[test]
fn the_first_live_bucket_runs() {
    let (_, mut p) = pipeline(
        &["group_id=1,type=ff,bucket=watch_port:2,actions=output:2,bucket=watch_port:3,actions=output:3"],
        &["in_port=1,actions=group:1"],
    );
    let k = from_port_1();
    // No port is known to be up yet: no bucket is live.
    assert_eq!(outputs(&xlate(&p, &k)), Vec::<u32>::new());
    assert!(p.set_live_ports([1, 2, 3]));
    assert_eq!(outputs(&xlate(&p, &k)), vec![2]);
    assert!(p.set_live_ports([3, 1]));
    assert_eq!(outputs(&xlate(&p, &k)), vec![3]);
    assert!(!p.set_live_ports([1, 3, 3]), "the same set is no change");
    assert!(p.set_live_ports([1]));
    let x = xlate(&p, &k);
    assert_eq!(outputs(&x), Vec::<u32>::new());
    assert!(x.drop_reason().is_some());
}

#[test]
fn watch_group_follows_that_groups_buckets_and_unwatched_buckets_are_live() {
    let (_, mut p) = pipeline(
        &[
            "group_id=5,type=ff,bucket=watch_port:4,actions=output:4",
            "group_id=1,type=ff,bucket=watch_group:5,actions=output:2,bucket=actions=output:3",
        ],
        &["in_port=1,actions=group:1"],
    );
    let k = from_port_1();
    p.set_live_ports([1]);
    assert_eq!(outputs(&xlate(&p, &k)), vec![3], "bucket without a watch");
    p.set_live_ports([1, 4]);
    assert_eq!(
        outputs(&xlate(&p, &k)),
        vec![2],
        "group 5 has a live bucket"
    );
}

#[test]
fn a_liveness_change_retires_cached_translations() {
    let (_, mut p) = pipeline(
        &["group_id=1,type=ff,bucket=watch_port:2,actions=output:2,bucket=watch_port:3,actions=output:3"],
        &["in_port=1,actions=group:1"],
    );
    p.set_live_ports([1, 2, 3]);
    let mut cache = FlowCache::new(64);
    let mut x = Xlate::new();
    let k = from_port_1();
    for _ in 0..3 {
        cache.xlate(&p, &k, 100, &mut x);
        assert_eq!(outputs(&x), vec![2]);
    }
    // And another microflow of the same megaflow.
    cache.xlate(
        &p,
        &tcp_key(1, 0x0a00_0001, 0x0a00_0002, 1001, 80),
        100,
        &mut x,
    );
    assert_eq!(outputs(&x), vec![2]);
    p.set_live_ports([1, 3]);
    cache.xlate(&p, &k, 100, &mut x);
    assert_eq!(outputs(&x), vec![3]);
}

#[test]
fn fast_failover_groups_are_accepted_and_dump_their_watches() {
    let (ft, _) = pipeline(
        &["group_id=9,type=ff,bucket=watch_port:2,actions=output:2,bucket=watch_group:7,actions=output:3"],
        &[],
    );
    let g = ft.groups();
    assert_eq!(g.len(), 1);
    assert_eq!(g[0].group_type, GroupType::FastFailover);
    assert_eq!(
        (g[0].buckets[0].watch_port, g[0].buckets[1].watch_group),
        (2, 7)
    );
}
