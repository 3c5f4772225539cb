//! IPv6 in the pipeline: matches on its fields, 128-bit set_field in
//! apply and write actions, the hop limit under the TTL actions, and the
//! ND fields' rewrites named for their packets.

mod common;

use common::*;
use flowtable::matching::{ETH_TYPE_IPV6, IP_PROTO_ICMPV6, IP_PROTO_TCP};
use flowtable::pipeline::packet_in_reason;
use flowtable::*;

fn build(mods: Vec<PipelineMod>) -> Pipeline {
    let mut ft = FlowTables::new();
    let mut p = Pipeline::with_counters(ft.counters());
    let changes = ft.apply_batch(&mods).unwrap();
    p.apply(&changes);
    p
}

const SRC: u128 = 0x2001_0db8_0000_0000_0000_0000_0000_0001;
const DST: u128 = 0x2001_0db8_0000_0001_0000_0000_0000_0002;

fn tcp6_key(hlim: u64) -> FlowKey {
    let mut k = FlowKey::zero();
    k.set(Field::InPort, 1);
    k.set(Field::EthType, u64::from(ETH_TYPE_IPV6));
    k.set(Field::IpProto, u64::from(IP_PROTO_TCP));
    k.set(Field::IpTtl, hlim);
    k.set128(Field::Ipv6SrcLow, SRC);
    k.set128(Field::Ipv6DstLow, DST);
    k.set(Field::Ipv6Label, 0x12345);
    k.set(Field::TpDst, 80);
    k
}

fn sets(x: &Xlate) -> Vec<(Field, u64)> {
    x.actions()
        .iter()
        .filter_map(|a| match a {
            DpAction::SetField { field, value } => Some((*field, *value)),
            _ => None,
        })
        .collect()
}

fn m(text: &str) -> Match {
    text::parse_match(text).unwrap()
}

#[test]
fn flows_match_on_ipv6_addresses_under_any_mask() {
    let p = build(vec![
        PipelineMod::Flow(add(
            0,
            30,
            m("tcp6,ipv6_dst=2001:db8:0:1::/64,tp_dst=80"),
            vec![out(2)],
        )),
        // A non-CIDR mask that covers bits of both halves.
        PipelineMod::Flow(add(
            0,
            20,
            m("ipv6,ipv6_src=::1/::ffff:0:0:0:ffff"),
            vec![out(3)],
        )),
        PipelineMod::Flow(add(0, 10, m("ipv6,ipv6_label=0x12345"), vec![out(4)])),
    ]);
    assert_eq!(outputs(&xlate(&p, &tcp6_key(64))), vec![2]);
    let mut k = tcp6_key(64);
    k.set(Field::TpDst, 81);
    assert_eq!(outputs(&xlate(&p, &k)), vec![3]);
    k.set128(Field::Ipv6SrcLow, SRC | 1 << 64);
    assert_eq!(outputs(&xlate(&p, &k)), vec![4]);
    k.set(Field::Ipv6Label, 0x12344);
    assert!(outputs(&xlate(&p, &k)).is_empty());
}

#[test]
fn set_field_of_an_address_rewrites_only_the_changed_half() {
    let new_dst = DST ^ 0xff;
    let p = build(vec![PipelineMod::Flow(add(
        0,
        10,
        m("ipv6"),
        vec![
            Action::SetField128 {
                field: Field::Ipv6DstLow,
                value: new_dst,
            },
            Action::SetField {
                field: Field::Ipv6Label,
                value: 7,
            },
            out(2),
        ],
    ))]);
    let x = xlate(&p, &tcp6_key(64));
    assert_eq!(
        sets(&x),
        vec![(Field::Ipv6DstLow, new_dst as u64), (Field::Ipv6Label, 7)]
    );
    assert_eq!(outputs(&x), vec![2]);
}

#[test]
fn write_actions_carry_both_halves() {
    let mut fm = add(0, 10, m("ipv6"), vec![]);
    fm.instructions = Instructions {
        write_actions: Some(vec![
            Action::SetField128 {
                field: Field::Ipv6SrcLow,
                value: !SRC,
            },
            out(2),
        ]),
        ..Default::default()
    };
    let p = build(vec![PipelineMod::Flow(fm)]);
    let x = xlate(&p, &tcp6_key(64));
    let got = sets(&x);
    assert!(
        got.contains(&(Field::Ipv6SrcHigh, (!SRC >> 64) as u64)),
        "{got:?}"
    );
    assert!(got.contains(&(Field::Ipv6SrcLow, !SRC as u64)), "{got:?}");
    assert_eq!(outputs(&x), vec![2]);
}

#[test]
fn ttl_actions_age_the_hop_limit() {
    let p = build(vec![PipelineMod::Flow(add(
        0,
        10,
        m("ipv6"),
        vec![out(3), Action::DecNwTtl, out(2)],
    ))]);
    let x = xlate(&p, &tcp6_key(64));
    assert_eq!(sets(&x), vec![(Field::IpTtl, 63)]);
    assert_eq!(outputs(&x), vec![3, 2]);
    let x = xlate(&p, &tcp6_key(1));
    assert_eq!(outputs(&x), vec![3]);
    assert!(x.actions().iter().any(|a| matches!(
        a,
        DpAction::Controller { reason, .. } if *reason == packet_in_reason::INVALID_TTL
    )));
    let p = build(vec![PipelineMod::Flow(add(
        0,
        10,
        m("ipv6"),
        vec![Action::SetNwTtl(5), out(2)],
    ))]);
    assert_eq!(sets(&xlate(&p, &tcp6_key(64))), vec![(Field::IpTtl, 5)]);
}

#[test]
fn icmpv6_rewrites_are_named_for_icmpv6_and_nd() {
    let p = build(vec![PipelineMod::Flow(add(
        0,
        10,
        m("icmp6,icmp_type=135"),
        vec![
            Action::SetField {
                field: Field::Icmpv6Type,
                value: 136,
            },
            Action::SetField {
                field: Field::NdSll,
                value: 0x0a58_0000_0009,
            },
            Action::SetField128 {
                field: Field::NdTargetLow,
                value: 1,
            },
            out(2),
        ],
    ))]);
    let mut k = FlowKey::zero();
    k.set(Field::EthType, u64::from(ETH_TYPE_IPV6));
    k.set(Field::IpProto, u64::from(IP_PROTO_ICMPV6));
    k.set(Field::Icmpv6Type, 135);
    k.set128(Field::NdTargetLow, 0xfe80 << 112);
    assert_eq!(
        sets(&xlate(&p, &k)),
        vec![
            (Field::Icmpv6Type, 136),
            (Field::NdSll, 0x0a58_0000_0009),
            (Field::NdTargetHigh, 0),
            (Field::NdTargetLow, 1),
        ]
    );
}

#[test]
fn writes_to_fields_the_flow_does_not_pin_are_refused() {
    let mut ft = FlowTables::new();
    for (text, action) in [
        (
            "ip",
            Action::SetField128 {
                field: Field::Ipv6SrcLow,
                value: 1,
            },
        ),
        (
            "icmp6,icmp_type=136",
            Action::SetField {
                field: Field::NdSll,
                value: 1,
            },
        ),
        (
            "ipv6",
            Action::SetField {
                field: Field::Ipv6Exthdr,
                value: 1,
            },
        ),
        // ct_label has its own action, valid inside ct() only.
        (
            "ipv6",
            Action::SetField128 {
                field: Field::CtLabelLow,
                value: 1,
            },
        ),
    ] {
        let fm = add(0, 10, m(text), vec![action.clone(), out(2)]);
        assert!(
            ft.apply_batch(&[PipelineMod::Flow(fm)]).is_err(),
            "{text}: {action:?} accepted"
        );
    }
}

/// `nat()` with IPv6 ranges reads and prints as OVS writes it: brackets
/// only before a port range; validation refuses an inverted range.
#[test]
fn ipv6_nat_ranges_read_and_print_as_ovs_does() {
    for actions in [
        "ct(commit,nat(src=fd00::1-fd00::5))",
        "ct(commit,nat(src=[fd00::1]-[fd00::5]:1000-2000))",
        "ct(commit,nat(dst=[fd00::9]:80))",
        "ct(commit,nat(dst=fd00::9,persistent))",
    ] {
        let fm = text::parse_flow(&format!("table=0,ipv6,actions={actions}")).unwrap();
        let printed = text::format_instructions(&fm.instructions);
        assert_eq!(printed, actions);
        let mut ft = FlowTables::new();
        ft.apply_batch(&[PipelineMod::Flow(fm)]).unwrap();
    }
    // Unbracketed, the colons are the address's: no port range there.
    let fm = text::parse_flow("ipv6,actions=ct(commit,nat(src=fd00::1:80))").unwrap();
    assert_eq!(
        text::format_instructions(&fm.instructions),
        "ct(commit,nat(src=fd00::1:80))"
    );
    for bad in [
        "ipv6,actions=ct(commit,nat(src=[fd00::1))",
        "ipv6,actions=ct(commit,nat(src=[fd00::1]x))",
        "ipv6,actions=ct(commit,nat(src=fd00::/64))",
    ] {
        assert!(text::parse_flow(bad).is_err(), "{bad}");
    }
    let inverted = text::parse_flow("ipv6,actions=ct(commit,nat(src=fd00::5-fd00::1))").unwrap();
    assert!(FlowTables::new()
        .apply_batch(&[PipelineMod::Flow(inverted)])
        .is_err());
    // IPv4's too (nat() inside ct() was not checked before).
    let v4 = text::parse_flow("ip,actions=ct(commit,nat(src=10.0.0.5-10.0.0.1))").unwrap();
    assert!(FlowTables::new()
        .apply_batch(&[PipelineMod::Flow(v4)])
        .is_err());
}
