//! Property tests: the tuple-space-search classifier agrees with a linear
//! scan, and a replica fed change lists agrees with one rebuilt from the
//! control copy.

use flowtable::action::TABLE_ALL;
use flowtable::classifier::linear_lookup;
use flowtable::*;
use proptest::prelude::*;

/// Small value domains so that rules overlap, tie and collide often.
fn arb_match() -> impl Strategy<Value = Match> {
    (
        prop::option::of(0u64..4),
        prop::option::of((0u64..8, 0u64..8)),
        prop::option::of((
            0u64..4,
            prop::sample::select(vec![0xffu64, 0xf0, 0x0f, 0x03]),
        )),
        prop::option::of(0u64..3),
    )
        .prop_map(|(in_port, reg0, meta, vlan)| {
            let mut m = Match::catch_all();
            if let Some(p) = in_port {
                m.set_exact(Field::InPort, p);
            }
            if let Some((v, mask)) = reg0 {
                m.set_masked(Field::Reg(0), v, mask);
            }
            if let Some((v, mask)) = meta {
                m.set_masked(Field::Metadata, v, mask);
            }
            if let Some(v) = vlan {
                m.set_exact(Field::VlanTci, v);
            }
            m
        })
}

fn arb_key() -> impl Strategy<Value = FlowKey> {
    (0u64..4, 0u64..8, 0u64..256, 0u64..3).prop_map(|(p, r, m, v)| {
        let mut k = FlowKey::zero();
        k.set(Field::InPort, p);
        k.set(Field::Reg(0), r);
        k.set(Field::Metadata, m);
        k.set(Field::VlanTci, v);
        k
    })
}

#[derive(Debug, Clone)]
enum Op {
    Add(u8, u16, Match, u32),
    Delete(u8, Match),
    DeleteStrict(u8, u16, Match),
    Modify(u8, Match, u32),
}

fn arb_op() -> impl Strategy<Value = Op> {
    let table = prop::sample::select(vec![0u8, 1, TABLE_ALL]);
    prop_oneof![
        6 => (0u8..2, 0u16..4, arb_match(), 1u32..100).prop_map(|(t, p, m, o)| Op::Add(t, p, m, o)),
        1 => (table.clone(), arb_match()).prop_map(|(t, m)| Op::Delete(t, m)),
        2 => (table.clone(), 0u16..4, arb_match()).prop_map(|(t, p, m)| Op::DeleteStrict(t, p, m)),
        1 => (table, arb_match(), 1u32..100).prop_map(|(t, m, o)| Op::Modify(t, m, o)),
    ]
}

fn to_flow_mod(op: &Op) -> FlowMod {
    let out = |p| {
        Instructions::apply(vec![Action::Output {
            port: p,
            max_len: 0,
        }])
    };
    match op {
        Op::Add(t, p, m, o) => FlowMod::add(*t, *p, *m, out(*o)),
        Op::Delete(t, m) => FlowMod {
            command: FlowModCommand::Delete,
            ..FlowMod::add(*t, 0, *m, Instructions::default())
        },
        Op::DeleteStrict(t, p, m) => FlowMod {
            command: FlowModCommand::DeleteStrict,
            ..FlowMod::add(*t, *p, *m, Instructions::default())
        },
        Op::Modify(t, m, o) => FlowMod {
            command: FlowModCommand::Modify,
            ..FlowMod::add(*t, 0, *m, out(*o))
        },
    }
}

fn id(r: Option<&std::sync::Arc<Rule>>) -> Option<u64> {
    r.map(|r| r.id)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn tss_matches_linear_scan_and_replicas_agree(
        ops in prop::collection::vec(arb_op(), 1..120),
        keys in prop::collection::vec(arb_key(), 1..40),
    ) {
        let mut ft = FlowTables::new();
        let mut replica = Pipeline::new();
        for op in &ops {
            let changes = ft.flow_mod(&to_flow_mod(op)).expect("valid flow mod");
            replica.apply(&changes);
        }
        let rebuilt = ft.pipeline();
        prop_assert_eq!(replica.n_rules(), ft.n_rules());
        prop_assert_eq!(rebuilt.n_rules(), ft.n_rules());
        for table in 0..2u8 {
            let filter = FlowFilter { table_id: table, ..FlowFilter::default() };
            let rules = ft.flows(&filter);
            let cls = ft.classifier(table).expect("table exists");
            prop_assert_eq!(cls.len(), rules.len());
            for key in &keys {
                let mut wc = FlowKey::zero();
                let expected = id(linear_lookup(&rules, key));
                let got = id(cls.lookup(key, &mut wc));
                prop_assert_eq!(got, expected, "table {} key {:?}", table, key);
                let mut scratch = FlowKey::zero();
                let a = replica.classifier(table).expect("table").lookup(key, &mut scratch);
                let b = rebuilt.classifier(table).expect("table").lookup(key, &mut scratch);
                prop_assert_eq!(id(a), expected);
                prop_assert_eq!(id(b), expected);
                // The answer depends on the wildcarded bits only.
                for other in &keys {
                    let mut mixed = FlowKey::zero();
                    for i in 0..KEY_WORDS {
                        mixed.words[i] = (key.words[i] & wc.words[i]) | (other.words[i] & !wc.words[i]);
                    }
                    prop_assert_eq!(id(cls.lookup(&mixed, &mut scratch)), expected);
                }
            }
        }
    }
}

/// A mask over more words than a slot keeps inline: rules that agree on
/// the inline words and differ beyond them are still told apart, added
/// and removed. With this many, hash probes meet slots of other rules
/// (same 7-bit tag) all the time, so a comparison that skipped the words
/// beyond the inline ones would return wrong rules.
#[test]
fn matches_wider_than_the_inline_words_are_told_apart() {
    use flowtable::classifier::INLINE_WORDS;
    const N: u64 = 2000;
    let wide = |meta: u64| {
        let mut m = Match::catch_all();
        m.set_exact(Field::TunId, 2);
        for r in 0..8 {
            m.set_exact(Field::Reg(r), u64::from(r) + 10);
        }
        // In the highest-numbered word of those set: beyond the inline
        // ones (checked below).
        m.set_exact(Field::Metadata, meta);
        m
    };
    let mask = wide(0).mask().words;
    let words: Vec<usize> = (0..KEY_WORDS).filter(|&i| mask[i] != 0).collect();
    assert!(words.len() > INLINE_WORDS, "{words:?}");
    let differ = (0..KEY_WORDS)
        .find(|&i| wide(0).value().words[i] != wide(1).value().words[i])
        .expect("the rules differ");
    assert!(
        words[INLINE_WORDS..].contains(&differ),
        "{words:?} {differ}"
    );
    let out = |meta: u64| {
        Instructions::apply(vec![Action::Output {
            port: meta as u32 + 1,
            max_len: 0,
        }])
    };
    let mut ft = FlowTables::new();
    for meta in 0..N {
        ft.flow_mod(&FlowMod::add(0, 5, wide(meta), out(meta)))
            .expect("valid flow mod");
    }
    // Strict delete of the odd ones.
    for meta in (1..N).step_by(2) {
        let del = FlowMod {
            command: FlowModCommand::DeleteStrict,
            ..FlowMod::add(0, 5, wide(meta), Instructions::default())
        };
        ft.flow_mod(&del).expect("valid delete");
    }
    let cls = ft.classifier(0).expect("table 0");
    assert_eq!(cls.len(), N as usize / 2);
    for meta in 0..N + 100 {
        let mut wc = FlowKey::zero();
        let got = cls.lookup(wide(meta).value(), &mut wc);
        let want = (meta < N && meta % 2 == 0).then(|| out(meta));
        assert_eq!(
            got.map(|r| r.instructions.clone()),
            want,
            "metadata = {meta}"
        );
        assert_eq!(wc, *wide(0).mask());
    }
}
