//! The megaflow cache must be invisible too: packets that share an entry
//! (they agree on every bit the first one's translation examined) get
//! exactly what translating each of them would give, across flows that
//! match masked addresses, rewrite fields (sometimes to the value the
//! packet already has), copy fields into registers and look them up,
//! hash into select groups, decrement TTLs, send packets back where they
//! came from and recirculate through conntrack.

mod common;

use common::*;
use flowtable::action::{port, SubField};
use flowtable::cache::FlowCache;
use flowtable::key::HEADER_WORDS;
use flowtable::matching::{ETH_TYPE_IPV4, IP_PROTO_TCP};
use flowtable::*;
use proptest::prelude::*;

const GROUP: u32 = 7;
const NET_SRC: u32 = 0x0a00_0000;
const NET_DST: u32 = 0x0a00_0100;

fn sub(field: Field, ofs: u32, nbits: u32) -> SubField {
    SubField {
        field,
        ofs,
        nbits,
        named: None,
    }
}

/// Actions of one flow; `table` limits what may follow (no loops).
fn actions(kind: u8, o: u32, table: u8) -> Instructions {
    let a = match kind {
        0 => vec![out(o)],
        1 => vec![out(port::IN_PORT)],
        2 => vec![
            Action::SetField {
                field: Field::IpDst,
                value: u64::from(NET_DST + o % 4),
            },
            out(o),
        ],
        3 if table < 2 => vec![
            Action::RegMove {
                src: sub(Field::IpSrc, 0, 8),
                dst: sub(Field::Reg(1), 0, 8),
            },
            Action::Resubmit {
                in_port: port::IN_PORT,
                table: Some(2),
            },
        ],
        4 if table == 0 => {
            return Instructions {
                apply_actions: Some(vec![Action::RegLoad {
                    dst: sub(Field::Reg(0), 0, 32),
                    value: u64::from(o % 4),
                }]),
                goto_table: Some(1),
                ..Instructions::default()
            }
        }
        5 => vec![Action::Group(GROUP)],
        6 => vec![Action::DecNwTtl, out(o)],
        7 if table == 0 => vec![Action::Ct(CtAction {
            flags: 0,
            zone: CtZone::Immediate(o as u16),
            recirc_table: Some(1),
            alg: 0,
            actions: Vec::new(),
        })],
        8 => vec![
            Action::SetField {
                field: Field::EthDst,
                value: u64::from(o % 3),
            },
            out(port::IN_PORT),
        ],
        9 => vec![Action::SetNwTtl(64), out(o)],
        _ => Vec::new(),
    };
    Instructions::apply(a)
}

#[derive(Debug, Clone)]
struct Flow {
    table: u8,
    prio: u16,
    in_port: Option<u32>,
    src: Option<(u32, u32)>,
    dst: Option<u32>,
    dport: Option<u16>,
    reg: Option<(u8, u32)>,
    kind: u8,
    o: u32,
}

impl Flow {
    fn matching(&self) -> Match {
        let mut m = Match::catch_all();
        m.set_exact(Field::EthType, u64::from(ETH_TYPE_IPV4));
        m.set_exact(Field::IpProto, u64::from(IP_PROTO_TCP));
        if let Some(p) = self.in_port {
            m.set_exact(Field::InPort, u64::from(p));
        }
        if let Some((v, prefix)) = self.src {
            let mask = u32::MAX.checked_shl(32 - prefix).unwrap_or(0);
            m.set_masked(Field::IpSrc, u64::from(NET_SRC + v), u64::from(mask));
        }
        if let Some(d) = self.dst {
            m.set_exact(Field::IpDst, u64::from(NET_DST + d));
        }
        if let Some(p) = self.dport {
            m.set_exact(Field::TpDst, u64::from(p));
        }
        if let Some((r, v)) = self.reg {
            m.set_exact(Field::Reg(r), u64::from(v));
        }
        m
    }
}

#[derive(Debug, Clone)]
enum Step {
    Add(Flow),
    Packet { key: FlowKey, len: u32 },
}

fn arb_flow() -> impl Strategy<Value = Flow> {
    (
        (0u8..3, 0u16..4, prop::option::of(1u32..4)),
        prop::option::of((0u32..8, prop::sample::select(vec![24u32, 29, 30, 31, 32]))),
        prop::option::of(0u32..4),
        prop::option::of(prop::sample::select(vec![10u16, 20, 80])),
        prop::option::of((0u8..2, 0u32..8)),
        (0u8..11, 1u32..9),
    )
        .prop_map(
            |((table, prio, in_port), src, dst, dport, reg, (kind, o))| Flow {
                table,
                prio,
                in_port,
                src,
                dst,
                dport,
                reg,
                kind,
                o,
            },
        )
}

fn arb_key() -> impl Strategy<Value = FlowKey> {
    (
        (1u32..4, 0u32..8, 0u32..4),
        (
            prop::sample::select(vec![10u16, 20]),
            prop::sample::select(vec![10u16, 20, 80]),
        ),
        (prop::sample::select(vec![1u64, 2, 64]), 0u64..3),
        prop::option::of(prop::sample::select(vec![0x21u64, 0x22, 0x2a])),
    )
        .prop_map(|((in_port, s, d), (sp, dp), (ttl, eth_dst), ct)| {
            let mut k = tcp_key(in_port, NET_SRC + s, NET_DST + d, sp, dp);
            k.set(Field::IpTtl, ttl);
            k.set(Field::EthDst, eth_dst);
            if let Some(state) = ct {
                // As the datapath hands back a packet after ct(table=1).
                k.set(Field::CtState, state);
                k.set_recirc_table(Some(1));
            }
            k
        })
}

fn arb_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        1 => arb_flow().prop_map(Step::Add),
        6 => (arb_key(), 60u32..1500).prop_map(|(key, len)| Step::Packet { key, len }),
    ]
}

struct Switch {
    ft: FlowTables,
    pipe: Pipeline,
}

impl Switch {
    fn new() -> Self {
        let (ft, pipe) = with_select_group(GROUP, &[5, 6, 7]);
        Switch { ft, pipe }
    }

    fn add(&mut self, f: &Flow) {
        let fm = FlowMod::add(f.table, f.prio, f.matching(), actions(f.kind, f.o, f.table));
        if let Ok(c) = self.ft.flow_mod(&fm) {
            self.pipe.apply(&c);
        }
    }

    fn counters(&self) -> Counters {
        counters(&self.ft)
    }
}

/// The part of a recirculation key the datapath keeps (it replaces the
/// headers with the packet's after conntrack).
fn kept(recirc: Option<&FlowKey>) -> Option<FlowKey> {
    recirc.map(|k| {
        let mut k = *k;
        for i in HEADER_WORDS {
            k.words[i] = 0;
        }
        k
    })
}

fn run(steps: &[Step], cache: &mut FlowCache) -> Result<(), TestCaseError> {
    let mut plain = Switch::new();
    let mut cached = Switch::new();
    let (mut a, mut b) = (Xlate::new(), Xlate::new());
    for s in steps {
        match s {
            Step::Add(f) => {
                plain.add(f);
                cached.add(f);
            }
            Step::Packet { key, len } => {
                plain.pipe.xlate(key, *len, &mut a);
                cache.xlate(&cached.pipe, key, *len, &mut b);
                prop_assert_eq!(a.actions(), b.actions(), "{:?}", key);
                prop_assert_eq!(a.drop_reason(), b.drop_reason());
                prop_assert_eq!(kept(a.recirc()), kept(b.recirc()));
            }
        }
    }
    cache.flush();
    prop_assert_eq!(plain.counters(), cached.counters());
    Ok(())
}

/// Lets the flows settle first, then sends many packets: most of them
/// then go through megaflows installed by others.
fn arb_steps() -> impl Strategy<Value = Vec<Step>> {
    (
        prop::collection::vec(arb_flow().prop_map(Step::Add), 1..24),
        prop::collection::vec(arb_step(), 1..160),
    )
        .prop_map(|(mut flows, rest)| {
            flows.extend(rest);
            flows
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 384, ..ProptestConfig::default() })]

    #[test]
    fn megaflow_hits_translate_like_the_pipeline(steps in arb_steps()) {
        // A two-entry exact-match cache: nearly every packet after the
        // first of its megaflow is answered by the megaflow cache.
        run(&steps, &mut FlowCache::with_megaflows(2, 1024))?;
    }

    #[test]
    fn a_full_megaflow_cache_empties_and_stays_right(steps in arb_steps()) {
        run(&steps, &mut FlowCache::with_megaflows(2, 3))?;
    }
}

#[test]
fn packets_that_differ_only_where_no_flow_looks_share_one_megaflow() {
    let mut sw = Switch::new();
    sw.add(&Flow {
        table: 0,
        prio: 1,
        in_port: Some(1),
        src: None,
        dst: None,
        dport: None,
        reg: None,
        kind: 0,
        o: 2,
    });
    let mut cache = FlowCache::with_megaflows(2, 1024);
    let mut x = Xlate::new();
    for sport in 1000..1100u16 {
        let key = tcp_key(1, NET_SRC + 1, NET_DST + 1, sport, 80);
        cache.xlate(&sw.pipe, &key, 100, &mut x);
        assert_eq!(outputs(&x), vec![2]);
    }
    let stats = cache.stats();
    assert_eq!(stats.misses, 1, "{stats:?}");
    assert_eq!(cache.megaflows(), 1);
    assert_eq!(stats.hits + stats.megaflow_hits, 99, "{stats:?}");
    assert!(stats.megaflow_hits > 50, "{stats:?}");
    // One megaflow, one subtable: a probe per hit.
    assert_eq!(stats.megaflow_lookups, stats.megaflow_hits, "{stats:?}");
    cache.flush();
    // Every packet is counted once.
    let flows = sw.ft.flows(&FlowFilter::default());
    assert_eq!(flows[0].stats.read(), (100, 10_000));
}
