//! The exact-match translation cache must be invisible: same actions,
//! same drop reasons and, once flushed, the same flow, group and table
//! counters as translating every packet, across flow-mods and group-mods.

mod common;

use common::*;
use flowtable::cache::{FlowCache, CACHED_ACTIONS};
use flowtable::*;
use proptest::prelude::*;

const GROUP: u32 = 7;

fn reg0(value: u64) -> Action {
    Action::RegLoad {
        dst: SubField {
            field: Field::Reg(0),
            ofs: 0,
            nbits: 32,
            named: None,
        },
        value,
    }
}

/// Instructions of a few shapes the agent uses: plain output, a register
/// load then goto, a select group, a resubmit into table 1.
fn instructions(kind: u8, o: u32) -> Instructions {
    match kind {
        0 => Instructions::apply(vec![out(o)]),
        1 => Instructions {
            apply_actions: Some(vec![reg0(u64::from(o % 4))]),
            goto_table: Some(1),
            ..Instructions::default()
        },
        2 => Instructions::apply(vec![Action::Group(GROUP)]),
        3 => Instructions::apply(vec![
            Action::Resubmit {
                in_port: action::port::IN_PORT,
                table: Some(1),
            },
            out(o),
        ]),
        _ => Instructions::default(),
    }
}

#[derive(Debug, Clone)]
enum Step {
    Add {
        table: u8,
        prio: u16,
        m: Match,
        kind: u8,
        o: u32,
    },
    Delete {
        table: u8,
        m: Match,
    },
    ModifyGroup {
        o: u32,
    },
    Packet {
        key: FlowKey,
        len: u32,
    },
}

fn arb_match() -> impl Strategy<Value = Match> {
    (prop::option::of(1u64..4), prop::option::of(0u64..4)).prop_map(|(in_port, r)| {
        let mut m = Match::catch_all();
        if let Some(p) = in_port {
            m.set_exact(Field::InPort, p);
        }
        if let Some(r) = r {
            m.set_exact(Field::Reg(0), r);
        }
        m
    })
}

fn arb_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        2 => (0u8..2, 0u16..3, arb_match(), 0u8..5, 1u32..9).prop_map(|(table, prio, m, kind, o)| {
            // Table 1 rules must not resubmit into themselves: only
            // outputs and groups there.
            let kind = if table == 1 { (kind % 3) & !1 } else { kind };
            Step::Add { table, prio, m, kind, o }
        }),
        1 => (0u8..2, arb_match()).prop_map(|(table, m)| Step::Delete { table, m }),
        1 => (1u32..9).prop_map(|o| Step::ModifyGroup { o }),
        12 => (1u64..4, 0u64..6, 60u32..1500).prop_map(|(p, dst, len)| {
            let key = tcp_key(p as u32, 1, dst as u32, 10, 20);
            Step::Packet { key, len }
        }),
    ]
}

struct Switch {
    ft: FlowTables,
    pipe: Pipeline,
}

impl Switch {
    fn new() -> Self {
        let (ft, pipe) = with_select_group(GROUP, &[5, 6]);
        Switch { ft, pipe }
    }

    fn step(&mut self, s: &Step) {
        let changes = match s {
            Step::Add {
                table,
                prio,
                m,
                kind,
                o,
            } => self
                .ft
                .flow_mod(&FlowMod::add(*table, *prio, *m, instructions(*kind, *o))),
            Step::Delete { table, m } => {
                self.ft
                    .flow_mod(&cmd(FlowModCommand::Delete, *table, 0, *m))
            }
            Step::ModifyGroup { o } => {
                let g = group_mod(
                    GroupModCommand::Modify,
                    GroupType::Select,
                    GROUP,
                    vec![vec![out(*o)], vec![out(o + 1)], vec![out(o + 2)]],
                );
                self.ft
                    .group_mod(&g)
                    .map_err(|e| panic!("group modify: {e}"))
            }
            Step::Packet { .. } => return,
        };
        // A flow naming a missing group is refused; that is fine here.
        if let Ok(c) = changes {
            self.pipe.apply(&c);
        }
    }

    /// Flows (with their counters), group counters, table counters.
    fn counters(&self) -> Counters {
        counters(&self.ft)
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn cached_translation_is_invisible(steps in prop::collection::vec(arb_step(), 1..120)) {
        let mut plain = Switch::new();
        let mut cached = Switch::new();
        // A tiny cache, so that eviction with pending counts happens too.
        let mut cache = FlowCache::new(4);
        let (mut a, mut b) = (Xlate::new(), Xlate::new());
        for s in &steps {
            plain.step(s);
            cached.step(s);
            if let Step::Packet { key, len } = s {
                plain.pipe.xlate(key, *len, &mut a);
                cache.xlate(&cached.pipe, key, *len, &mut b);
                prop_assert_eq!(a.actions(), b.actions());
                prop_assert_eq!(a.drop_reason(), b.drop_reason());
            }
        }
        cache.flush();
        prop_assert_eq!(plain.counters(), cached.counters());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// `Pipeline::retranslate` gives the walk's result without counting,
    /// and its attribution, credited, counts what the walk did.
    #[test]
    fn retranslation_is_an_uncounted_walk(steps in prop::collection::vec(arb_step(), 1..120)) {
        let mut plain = Switch::new();
        let mut shadow = Switch::new();
        let (mut a, mut b) = (Xlate::new(), Xlate::new());
        for s in &steps {
            plain.step(s);
            shadow.step(s);
            if let Step::Packet { key, len } = s {
                plain.pipe.xlate(key, *len, &mut a);
                let before = shadow.counters();
                let attribution = shadow.pipe.retranslate(key, &mut b);
                prop_assert_eq!(&before, &shadow.counters(), "retranslate counted");
                prop_assert_eq!(a.actions(), b.actions());
                prop_assert_eq!(a.drop_reason(), b.drop_reason());
                prop_assert_eq!(a.recirc(), b.recirc());
                prop_assert!(attribution.same(&shadow.pipe.retranslate(key, &mut b)));
                attribution.credit(1, u64::from(*len));
            }
        }
        prop_assert_eq!(plain.counters(), shadow.counters());
    }
}

#[test]
fn attributions_differ_when_another_flow_takes_the_packet() {
    let mut sw = Switch::new();
    let m = m_in_port(1);
    let add = |prio, o| Step::Add {
        table: 0,
        prio,
        m,
        kind: 0,
        o,
    };
    sw.step(&add(1, 2));
    let key = tcp_key(1, 1, 2, 3, 4);
    let mut x = Xlate::new();
    let first = sw.pipe.retranslate(&key, &mut x);
    // The same flow with new actions keeps its counters: same attribution.
    sw.step(&add(1, 3));
    assert!(first.same(&sw.pipe.retranslate(&key, &mut x)));
    assert_eq!(outputs(&x), vec![3]);
    // A flow of higher priority takes the packet: a different one.
    sw.step(&add(2, 3));
    assert!(!first.same(&sw.pipe.retranslate(&key, &mut x)));
    assert_eq!(outputs(&x), vec![3]);
}

#[test]
fn hits_skip_the_walk_and_count_on_flush() {
    let mut sw = Switch::new();
    sw.step(&Step::Add {
        table: 0,
        prio: 1,
        m: m_in_port(1),
        kind: 0,
        o: 2,
    });
    let mut cache = FlowCache::default();
    let mut x = Xlate::new();
    let key = tcp_key(1, 1, 2, 3, 4);
    for _ in 0..10 {
        cache.xlate(&sw.pipe, &key, 100, &mut x);
        assert_eq!(outputs(&x), vec![2]);
    }
    let s = cache.stats();
    assert_eq!((s.hits, s.misses), (9, 1));
    // The miss was counted by the walk; the hits wait for the flush.
    let rule = &sw.ft.flows(&FlowFilter::default())[0];
    assert_eq!(rule.stats.read(), (1, 100));
    cache.flush();
    assert_eq!(rule.stats.read(), (10, 1000));
    assert_eq!(sw.ft.table_stats()[0].lookup_count, 10);
}

#[test]
fn a_flow_mod_invalidates_before_the_next_packet() {
    let mut sw = Switch::new();
    let m = m_in_port(1);
    sw.step(&Step::Add {
        table: 0,
        prio: 1,
        m,
        kind: 0,
        o: 2,
    });
    let mut cache = FlowCache::default();
    let mut x = Xlate::new();
    let key = tcp_key(1, 1, 2, 3, 4);
    cache.xlate(&sw.pipe, &key, 100, &mut x);
    cache.xlate(&sw.pipe, &key, 100, &mut x);
    let old = sw.ft.flows(&FlowFilter::default())[0].clone();
    // A flow of higher priority must take later packets to port 3 and
    // leave the old rule with the two packets it saw.
    sw.step(&Step::Add {
        table: 0,
        prio: 2,
        m,
        kind: 0,
        o: 3,
    });
    cache.xlate(&sw.pipe, &key, 100, &mut x);
    assert_eq!(outputs(&x), vec![3]);
    assert_eq!(old.stats.read(), (2, 200));
    assert_eq!(cache.stats().invalidations, 2);
}

#[test]
fn translations_too_big_are_not_cached_but_stay_correct() {
    let mut sw = Switch::new();
    let many: Vec<Action> = (1..=CACHED_ACTIONS as u32 + 1).map(out).collect();
    let changes = sw
        .ft
        .flow_mod(&add(0, 1, m_in_port(20), many.clone()))
        .unwrap();
    sw.pipe.apply(&changes);
    let mut cache = FlowCache::default();
    let mut x = Xlate::new();
    let key = tcp_key(20, 1, 2, 3, 4);
    for _ in 0..3 {
        cache.xlate(&sw.pipe, &key, 64, &mut x);
        assert_eq!(x.actions().len(), many.len());
    }
    assert_eq!(cache.stats().uncacheable, 3);
    cache.flush();
    assert_eq!(
        sw.ft.flows(&FlowFilter::default())[0].stats.read(),
        (3, 192)
    );
}

#[test]
fn an_attribution_credits_what_a_translation_would() {
    let mut sw = Switch::new();
    sw.step(&Step::Add {
        table: 0,
        prio: 1,
        m: m_in_port(1),
        kind: 0,
        o: 2,
    });
    let mut cache = FlowCache::default();
    let mut x = Xlate::new();
    let key = tcp_key(1, 1, 2, 3, 4);
    assert!(
        cache.attribution(&sw.pipe, &key).is_none(),
        "not cached yet"
    );
    cache.xlate(&sw.pipe, &key, 100, &mut x);
    let attr = cache.attribution(&sw.pipe, &key).expect("cached");
    // 5 packets handled elsewhere count like 5 translations.
    attr.credit(5, 500);
    let rule = &sw.ft.flows(&FlowFilter::default())[0];
    assert_eq!(rule.stats.read(), (6, 600));
    assert_eq!(sw.ft.table_stats()[0].lookup_count, 6);
    assert_eq!(sw.ft.table_stats()[0].matched_count, 6);
    // After a change the attribution is no longer handed out.
    sw.step(&Step::Add {
        table: 0,
        prio: 2,
        m: m_in_port(1),
        kind: 0,
        o: 3,
    });
    assert!(cache.attribution(&sw.pipe, &key).is_none());
}

#[test]
fn extended_attributions_credit_every_pass() {
    // Two passes of one packet, as after a ct(table=N) recirculation:
    // each has its own key and flow; one credit must count both.
    let mut sw = Switch::new();
    for (port, o) in [(1, 2), (3, 4)] {
        sw.step(&Step::Add {
            table: 0,
            prio: 1,
            m: m_in_port(port),
            kind: 0,
            o,
        });
    }
    let mut cache = FlowCache::default();
    let mut x = Xlate::new();
    let first = tcp_key(1, 1, 2, 3, 4);
    let second = tcp_key(3, 1, 2, 3, 4);
    cache.xlate(&sw.pipe, &first, 100, &mut x);
    cache.xlate(&sw.pipe, &second, 100, &mut x);
    let mut attr = cache.attribution(&sw.pipe, &first).expect("cached");
    attr.extend(&cache.attribution(&sw.pipe, &second).expect("cached"));
    attr.credit(4, 400);
    for rule in sw.ft.flows(&FlowFilter::default()) {
        assert_eq!(rule.stats.read(), (5, 500));
    }
    assert_eq!(sw.ft.table_stats()[0].lookup_count, 10);
    assert_eq!(sw.ft.table_stats()[0].matched_count, 10);
}

/// Hits and attributions credit a group's buckets as the walk does: a
/// select group's chosen bucket only.
#[test]
fn cache_hits_and_attributions_credit_the_bucket_that_ran() {
    let (ft, pipe) = with_select_group(1, &[2, 3]);
    let mut ft = ft;
    let mut pipe = pipe;
    pipe.apply(
        &ft.flow_mod(&add(0, 1, Match::catch_all(), vec![Action::Group(1)]))
            .unwrap(),
    );
    let mut cache = FlowCache::default();
    let mut x = Xlate::new();
    let key = tcp_key(1, 1, 2, 3, 4);
    for _ in 0..4 {
        cache.xlate(&pipe, &key, 100, &mut x);
    }
    let chosen = if outputs(&x) == [2] { 0 } else { 1 };
    cache.flush();
    cache
        .attribution(&pipe, &key)
        .expect("cached")
        .credit(6, 600);
    let g = ft.group(1).unwrap();
    assert_eq!(g.stats.read(), (10, 1000));
    assert_eq!(g.bucket_stats[chosen].read(), (10, 1000));
    assert_eq!(g.bucket_stats[1 - chosen].read(), (0, 0));
}
