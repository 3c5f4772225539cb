//! The flow-text parser and printer against what OVS 3.1 printed for the
//! agent's reference flow sets (`shared/sdn/validation` beside the repository): parse the
//! input files, install them, print every flow and group, and compare with
//! the stored `dump-flows` / `dump-groups` output (statistics normalised).

use flowtable::text::{
    format_group, format_rule, parse_bundle_line_with, parse_flow_with, parse_group_with, PortNames,
};
use flowtable::{FlowFilter, FlowTables, PipelineMod};
use std::path::{Path, PathBuf};

fn validation_dir() -> PathBuf {
    // `$XBR_SDN_DIR`, else `shared/sdn` beside the repository, else
    // `/work/shared/sdn` (where the development machines and CI have it).
    let beside = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/sdn");
    let dir = std::env::var_os("XBR_SDN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            if beside.is_dir() {
                beside
            } else {
                PathBuf::from("/work/shared/sdn")
            }
        })
        .join("validation");
    assert!(
        dir.is_dir(),
        "{} is missing; set XBR_SDN_DIR to the sdn reference directory",
        dir.display()
    );
    dir
}

/// The agent's port names, as the captures' bridge had them.
fn ports() -> PortNames {
    let mut p = PortNames::new();
    p.insert("vxlan0".into(), 1);
    p.insert("tun0".into(), 2);
    p
}

fn read_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .map(str::to_string)
        .collect()
}

/// Replaces the value of `key=` (up to the next comma) with `0`.
fn zero_stat(line: &str, key: &str) -> String {
    match line.find(key) {
        Some(i) => {
            let start = i + key.len();
            let end = line[start..].find(',').map_or(line.len(), |j| start + j);
            format!("{}0{}", &line[..start], &line[end..])
        }
        None => line.to_string(),
    }
}

fn normalise(line: &str) -> String {
    let mut l = line.to_string();
    for key in ["duration=", "n_packets=", "n_bytes=", "idle_age="] {
        l = zero_stat(&l, key);
    }
    l
}

/// `(table, priority)` of a dump line, for a stable comparison order.
fn sort_key(line: &str) -> (u32, i64, String) {
    let num = |key: &str| {
        line.split([',', ' '])
            .find_map(|t| t.strip_prefix(key))
            .and_then(|v| v.parse::<i64>().ok())
    };
    (
        num("table=").unwrap_or(0) as u32,
        -num("priority=").unwrap_or(32768),
        line.to_string(),
    )
}

fn dumped(path: &Path) -> Vec<String> {
    read_lines(path)
        .into_iter()
        .filter(|l| l.starts_with(' '))
        .map(|l| normalise(&l))
        .collect()
}

fn compare(name: &str, mut ours: Vec<String>, mut theirs: Vec<String>) {
    ours.sort_by_key(|l| sort_key(l));
    theirs.sort_by_key(|l| sort_key(l));
    for (a, b) in ours.iter().zip(theirs.iter()) {
        assert_eq!(a, b, "{name}: first differing line");
    }
    assert_eq!(ours.len(), theirs.len(), "{name}: number of lines");
}

fn install(tables: &mut FlowTables, m: &PipelineMod, line: &str) {
    tables
        .apply_batch(std::slice::from_ref(m))
        .unwrap_or_else(|(_, e)| panic!("{line}: {e}"));
}

fn check_set(mode: &str) {
    let dir = validation_dir();
    let ports = ports();
    let mut tables = FlowTables::new();
    for line in read_lines(&dir.join(format!("groups-{mode}.txt"))) {
        let gm = parse_group_with(&line, &ports).unwrap_or_else(|e| panic!("{line}: {e}"));
        install(&mut tables, &PipelineMod::Group(gm), &line);
    }
    for line in read_lines(&dir.join(format!("flows-{mode}.txt"))) {
        let fm = parse_flow_with(&line, &ports).unwrap_or_else(|e| panic!("{line}: {e}"));
        install(&mut tables, &PipelineMod::Flow(fm), &line);
    }
    let ours: Vec<String> = tables
        .flows(&FlowFilter::default())
        .iter()
        .map(|r| normalise(&format_rule(r)))
        .collect();
    compare(
        &format!("dump-flows-{mode}"),
        ours,
        dumped(&dir.join(format!("dump-flows-{mode}.txt"))),
    );
    let mut groups = tables.groups();
    groups.sort_by_key(|g| g.id);
    let ours: Vec<String> = groups.iter().map(|g| format_group(g)).collect();
    let mut theirs = dumped(&dir.join(format!("dump-groups-{mode}.txt")));
    theirs.sort_by_key(|l| {
        l.trim_start()
            .strip_prefix("group_id=")
            .and_then(|r| r.split(',').next())
            .and_then(|v| v.parse::<u32>().ok())
    });
    assert_eq!(ours, theirs, "dump-groups-{mode}");
}

#[test]
fn subnet_set_prints_as_ovs_dumps_it() {
    check_set("subnet");
}

#[test]
fn multitenant_set_prints_as_ovs_dumps_it() {
    check_set("multitenant");
}

#[test]
fn networkpolicy_set_prints_as_ovs_dumps_it() {
    check_set("networkpolicy");
}

#[test]
fn legacy_bundle_prints_as_ovs_dumps_it() {
    let dir = validation_dir();
    let ports = ports();
    let mods: Vec<PipelineMod> = read_lines(&dir.join("bundle-legacy-subnet.txt"))
        .iter()
        .map(|l| parse_bundle_line_with(l, Some(&ports)).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    let mut tables = FlowTables::new();
    tables
        .apply_batch(&mods)
        .unwrap_or_else(|(i, e)| panic!("mod {i}: {e}"));
    let ours: Vec<String> = tables
        .flows(&FlowFilter::default())
        .iter()
        .map(|r| normalise(&format_rule(r)))
        .collect();
    compare(
        "dump-flows-legacy-subnet",
        ours,
        dumped(&dir.join("dump-flows-legacy-subnet.txt")),
    );
}

/// A dump line fed back to the parser gives the same flow (ovs-ofctl
/// accepts its own dump output, statistics included).
#[test]
fn dumped_lines_parse_back_to_the_same_flow() {
    let dir = validation_dir();
    let ports = ports();
    let mut tables = FlowTables::new();
    for line in read_lines(&dir.join("groups-networkpolicy.txt")) {
        let gm = parse_group_with(&line, &ports).unwrap();
        install(&mut tables, &PipelineMod::Group(gm), &line);
    }
    let mut n = 0;
    for line in dumped(&dir.join("dump-flows-networkpolicy.txt")) {
        let fm = parse_flow_with(&line, &ports).unwrap_or_else(|e| panic!("{line}: {e}"));
        install(&mut tables, &PipelineMod::Flow(fm), &line);
        n += 1;
    }
    assert_eq!(tables.n_rules(), n);
    let ours: Vec<String> = tables
        .flows(&FlowFilter::default())
        .iter()
        .map(|r| normalise(&format_rule(r)))
        .collect();
    compare(
        "re-parsed dump-flows-networkpolicy",
        ours,
        dumped(&dir.join("dump-flows-networkpolicy.txt")),
    );
}

mod round_trip {
    //! Printing any rule and parsing the line back gives the same flow.

    use flowtable::action::{ct_flags, nat_flags, port, CtAction, CtZone, NatAction};
    use flowtable::matching::{ETH_TYPE_ARP, ETH_TYPE_IPV4};
    use flowtable::rule::PipelineCounters;
    use flowtable::text::{format_rule, parse_flow};
    use flowtable::*;
    use proptest::prelude::*;
    use std::sync::Arc;

    #[derive(Clone, Copy, Debug)]
    enum Proto {
        None,
        Ip,
        Tcp,
        Udp,
        Icmp,
        Arp,
    }

    fn masked(bits: u32) -> impl Strategy<Value = (u64, u64)> {
        let full = if bits == 64 {
            u64::MAX
        } else {
            (1u64 << bits) - 1
        };
        (any::<u64>(), prop_oneof![Just(full), any::<u64>()])
            .prop_map(move |(v, m)| (v & full, m & full))
    }

    fn arb_match() -> impl Strategy<Value = Match> {
        let proto = prop::sample::select(vec![
            Proto::None,
            Proto::Ip,
            Proto::Tcp,
            Proto::Udp,
            Proto::Icmp,
            Proto::Arp,
        ]);
        (
            proto,
            prop::option::of(1u64..0xff00),
            prop::option::of((0u8..8, masked(32))),
            prop::option::of(masked(64)),
            prop::option::of(masked(32)),
            prop::option::of(masked(8)),
            prop::option::of(any::<u16>()),
            (prop::option::of(masked(32)), prop::option::of(masked(32))),
            (prop::option::of(masked(16)), prop::option::of(masked(48))),
            prop::option::of(prop::sample::select(vec![
                (0u64, 1u64),
                (1, 1),
                (1, 3),
                (3, 3),
                (0, 2),
            ])),
        )
            .prop_map(
                |(
                    proto,
                    in_port,
                    reg,
                    tun_id,
                    tun_src,
                    ct_state,
                    zone,
                    (src, dst),
                    (tp, mac),
                    frag,
                )| {
                    let mut m = Match::catch_all();
                    let (eth, ip_proto) = match proto {
                        Proto::None => (None, None),
                        Proto::Ip => (Some(ETH_TYPE_IPV4), None),
                        Proto::Tcp => (Some(ETH_TYPE_IPV4), Some(6)),
                        Proto::Udp => (Some(ETH_TYPE_IPV4), Some(17)),
                        Proto::Icmp => (Some(ETH_TYPE_IPV4), Some(1)),
                        Proto::Arp => (Some(ETH_TYPE_ARP), None),
                    };
                    if let Some(e) = eth {
                        m.set_exact(Field::EthType, u64::from(e));
                    }
                    if let Some(p) = ip_proto {
                        m.set_exact(Field::IpProto, p);
                    }
                    if let Some(p) = in_port {
                        m.set_exact(Field::InPort, p);
                    }
                    if let Some((r, (v, mk))) = reg {
                        m.set_masked(Field::Reg(r), v, mk);
                    }
                    if let Some((v, mk)) = tun_id {
                        m.set_masked(Field::TunId, v, mk);
                    }
                    if let Some((v, mk)) = tun_src {
                        m.set_masked(Field::TunSrc, v, mk);
                    }
                    if let Some((v, mk)) = ct_state {
                        m.set_masked(Field::CtState, v, mk);
                    }
                    if let Some(z) = zone {
                        m.set_exact(Field::CtZone, u64::from(z));
                    }
                    if let Some((v, mk)) = mac {
                        m.set_masked(Field::EthDst, v, mk);
                    }
                    if eth.is_some() {
                        if let Some((v, mk)) = src {
                            m.set_masked(Field::IpSrc, v, mk);
                        }
                        if let Some((v, mk)) = dst {
                            m.set_masked(Field::IpDst, v, mk);
                        }
                    }
                    if matches!(proto, Proto::Tcp | Proto::Udp) {
                        if let Some((v, mk)) = tp {
                            m.set_masked(Field::TpDst, v, mk);
                        }
                    }
                    if matches!(proto, Proto::Icmp) {
                        if let Some((v, _)) = tp {
                            m.set_exact(Field::IcmpType, v & 0xff);
                        }
                    }
                    if matches!(proto, Proto::Arp) {
                        if let Some((v, mk)) = mac {
                            m.set_masked(Field::ArpSha, v, mk);
                        }
                    }
                    if matches!(proto, Proto::Ip | Proto::Tcp | Proto::Udp) {
                        if let Some((v, mk)) = frag {
                            m.set_masked(Field::IpFrag, v, mk);
                        }
                    }
                    m
                },
            )
    }

    fn arb_subfield() -> impl Strategy<Value = SubField> {
        (
            prop::sample::select(vec![
                Field::Reg(0),
                Field::Reg(3),
                Field::TunId,
                Field::EthDst,
                Field::IpDst,
                Field::PktMark,
            ]),
            any::<u32>(),
            any::<u32>(),
        )
            .prop_map(|(field, a, b)| {
                let bits = field.bits();
                let ofs = a % bits;
                let nbits = 1 + b % (bits - ofs);
                SubField {
                    field,
                    ofs,
                    nbits,
                    named: None,
                }
            })
    }

    fn arb_action() -> impl Strategy<Value = Action> {
        prop_oneof![
            (1u32..0xff00).prop_map(|p| Action::Output {
                port: p,
                max_len: 0
            }),
            prop::sample::select(vec![port::IN_PORT, port::LOCAL, port::ALL]).prop_map(|p| {
                Action::Output {
                    port: p,
                    max_len: 0,
                }
            }),
            any::<u16>().prop_map(|l| Action::Output {
                port: port::CONTROLLER,
                max_len: l
            }),
            (arb_subfield(), any::<u64>()).prop_map(|(dst, v)| {
                let v = if dst.nbits == 64 {
                    v
                } else {
                    v & ((1 << dst.nbits) - 1)
                };
                Action::RegLoad { dst, value: v }
            }),
            (arb_subfield(), arb_subfield()).prop_map(|(src, dst)| {
                let n = src.nbits.min(dst.nbits);
                Action::RegMove {
                    src: SubField { nbits: n, ..src },
                    dst: SubField { nbits: n, ..dst },
                }
            }),
            (
                prop::sample::select(vec![
                    Field::TunDst,
                    Field::EthDst,
                    Field::PktMark,
                    Field::Reg(5),
                    Field::TunId
                ]),
                any::<u64>()
            )
                .prop_map(|(field, v)| Action::SetField {
                    field,
                    value: v & field.full_mask()
                }),
            (arb_subfield(), prop_oneof![Just(u16::MAX), any::<u16>()])
                .prop_map(|(src, max_len)| Action::OutputReg { src, max_len }),
            (
                prop_oneof![Just(port::IN_PORT), 1u32..0xff00],
                prop::option::of(0u8..254)
            )
                .prop_filter("resubmit needs a port or table", |(p, t)| *p
                    != port::IN_PORT
                    || t.is_some())
                .prop_map(|(in_port, table)| Action::Resubmit { in_port, table }),
            prop::collection::vec(any::<u8>(), 0..20).prop_map(|mut b| {
                b.resize((10 + b.len()).div_ceil(8) * 8 - 10, 0);
                Action::Note(b)
            }),
            (
                any::<bool>(),
                prop::option::of(0u8..254),
                any::<u16>(),
                any::<bool>(),
                prop::option::of((any::<u32>(), any::<u32>(), any::<u16>()))
            )
                .prop_map(|(commit, table, zone, nat, range)| {
                    let mut actions = Vec::new();
                    if nat {
                        let mut n = NatAction::default();
                        if let Some((lo, hi, p)) = range {
                            n.flags = nat_flags::SRC | nat_flags::PERSISTENT;
                            n.ipv4_min = Some(lo);
                            n.ipv4_max = (hi != lo).then_some(hi);
                            n.proto_min = Some(p);
                        }
                        actions.push(Action::Nat(n));
                    }
                    actions.push(Action::SetField {
                        field: Field::CtMark,
                        value: u64::from(zone),
                    });
                    Action::Ct(CtAction {
                        flags: if commit { ct_flags::COMMIT } else { 0 },
                        zone: if zone % 2 == 0 {
                            CtZone::Immediate(zone)
                        } else {
                            CtZone::Field(SubField {
                                field: Field::Reg(1),
                                ofs: 0,
                                nbits: 16,
                                named: None,
                            })
                        },
                        recirc_table: table,
                        alg: 0,
                        actions,
                    })
                }),
        ]
    }

    fn arb_rule() -> impl Strategy<Value = Rule> {
        (
            0u8..200,
            any::<u16>(),
            prop_oneof![Just(0u64), any::<u64>()],
            arb_match(),
            prop::collection::vec(arb_action(), 0..6),
            prop::option::of(1u8..54),
            (any::<u16>(), any::<u16>()),
        )
            .prop_map(
                |(table, priority, cookie, matching, actions, goto, (idle, hard))| Rule {
                    id: 1,
                    table_id: table,
                    priority,
                    matching,
                    cookie,
                    flags: 0,
                    idle_timeout: idle,
                    hard_timeout: hard,
                    instructions: Instructions {
                        apply_actions: (!actions.is_empty()).then_some(actions),
                        goto_table: goto.map(|g| table + g),
                        ..Default::default()
                    },
                    stats: Arc::default(),
                    installed: std::time::Instant::now(),
                    counters: Arc::new(PipelineCounters::default()),
                    replaces: None,
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn print_then_parse_gives_the_same_flow(rule in arb_rule()) {
            let line = format_rule(&rule);
            let fm = parse_flow(&line).map_err(|e| TestCaseError::fail(format!("{line}: {e}")))?;
            prop_assert_eq!(fm.table_id, rule.table_id, "{}", line);
            prop_assert_eq!(fm.priority, rule.priority, "{}", line);
            prop_assert_eq!(fm.cookie, rule.cookie, "{}", line);
            prop_assert_eq!(fm.idle_timeout, rule.idle_timeout, "{}", line);
            prop_assert_eq!(fm.hard_timeout, rule.hard_timeout, "{}", line);
            prop_assert_eq!(fm.matching, rule.matching, "{}", line);
            prop_assert_eq!(&fm.instructions, &rule.instructions, "{}", line);
        }
    }
}
