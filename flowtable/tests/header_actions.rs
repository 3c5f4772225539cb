//! Actions that add, remove or age headers: `push_vlan`, `pop_vlan`,
//! `mod_nw_ttl` and `dec_ttl`: translation, OVS's semantics at TTL 1,
//! text syntax and validation.

mod common;

use common::*;
use flowtable::pipeline::packet_in_reason;
use flowtable::*;

fn build(mods: Vec<PipelineMod>) -> Pipeline {
    let mut ft = FlowTables::new();
    let mut p = Pipeline::with_counters(ft.counters());
    let changes = ft.apply_batch(&mods).unwrap();
    p.apply(&changes);
    p
}

fn key_with_ttl(ttl: u64) -> FlowKey {
    let mut k = tcp_key(1, 0x0a00_0001, 0x0a00_0002, 1000, 80);
    k.set(Field::IpTtl, ttl);
    k
}

fn ttl_set(x: &Xlate) -> Option<u64> {
    x.actions().iter().find_map(|a| match a {
        DpAction::SetField {
            field: Field::IpTtl,
            value,
        } => Some(*value),
        _ => None,
    })
}

fn ip_match() -> Match {
    let mut m = m_in_port(1);
    m.set_exact(Field::EthType, 0x0800);
    m
}

#[test]
fn dec_ttl_decrements_and_mod_nw_ttl_sets() {
    let p = build(vec![PipelineMod::Flow(add(
        0,
        10,
        ip_match(),
        vec![Action::DecNwTtl, out(2)],
    ))]);
    let x = xlate(&p, &key_with_ttl(64));
    assert_eq!(ttl_set(&x), Some(63));
    assert_eq!(outputs(&x), vec![2]);

    let p = build(vec![PipelineMod::Flow(add(
        0,
        10,
        ip_match(),
        vec![Action::SetNwTtl(9), Action::DecNwTtl, out(2)],
    ))]);
    let x = xlate(&p, &key_with_ttl(64));
    assert_eq!(ttl_set(&x), Some(8));
}

/// At TTL 1 the translation stops where it is: an earlier output stays, a
/// later one does not happen, and controllers get reason INVALID_TTL.
#[test]
fn dec_ttl_at_one_stops_with_an_invalid_ttl_packet_in() {
    let p = build(vec![PipelineMod::Flow(add(
        0,
        10,
        ip_match(),
        vec![out(3), Action::DecNwTtl, out(2)],
    ))]);
    let x = xlate(&p, &key_with_ttl(1));
    assert_eq!(outputs(&x), vec![3]);
    assert!(x.actions().iter().any(|a| matches!(
        a,
        DpAction::Controller { reason, .. } if *reason == packet_in_reason::INVALID_TTL
    )));

    let p = build(vec![PipelineMod::Flow(add(
        0,
        10,
        ip_match(),
        vec![Action::DecNwTtl, out(2)],
    ))]);
    let x = xlate(&p, &key_with_ttl(0));
    assert!(outputs(&x).is_empty());
}

#[test]
fn ttl_actions_need_an_ip_match_and_round_trip_as_text() {
    let mut ft = FlowTables::new();
    let no_ip = add(0, 10, m_in_port(1), vec![Action::DecNwTtl, out(2)]);
    assert!(ft.apply_batch(&[PipelineMod::Flow(no_ip)]).is_err());
    let no_ip = add(0, 10, m_in_port(1), vec![Action::SetNwTtl(3), out(2)]);
    assert!(ft.apply_batch(&[PipelineMod::Flow(no_ip)]).is_err());
    // On IPv6 the same actions age the hop limit (see tests/ipv6.rs).
    let mut ipv6 = m_in_port(1);
    ipv6.set_exact(Field::EthType, 0x86dd);
    let fm = add(0, 10, ipv6, vec![Action::DecNwTtl, out(2)]);
    assert!(ft.apply_batch(&[PipelineMod::Flow(fm)]).is_ok());

    let fm = text::parse_flow("ip,actions=dec_ttl,mod_nw_ttl:32,output:2").unwrap();
    let acts = fm.instructions.apply_actions.unwrap();
    assert_eq!(acts, vec![Action::DecNwTtl, Action::SetNwTtl(32), out(2)]);
    assert_eq!(
        text::format_actions(&acts),
        "dec_ttl,mod_nw_ttl:32,output:2"
    );
    assert!(text::parse_flow("ip,actions=dec_ttl(1,2)").is_err());
    assert!(text::parse_flow("ip,actions=mod_nw_ttl:256").is_err());
}

fn vlan_tci(x: &Xlate) -> Vec<DpAction> {
    x.actions()
        .iter()
        .filter(|a| {
            matches!(
                a,
                DpAction::PushVlan { .. }
                    | DpAction::PopVlan
                    | DpAction::SetField {
                        field: Field::VlanTci,
                        ..
                    }
            )
        })
        .copied()
        .collect()
}

#[test]
fn push_and_pop_vlan_become_datapath_pushes_and_pops() {
    let set_vid = Action::SetField {
        field: Field::VlanTci,
        value: 0x1000 | 100,
    };
    let p = build(vec![
        PipelineMod::Flow(add(
            0,
            10,
            m_in_port(1),
            vec![Action::PushVlan(0x8100), out(2)],
        )),
        PipelineMod::Flow(add(
            0,
            10,
            m_in_port(3),
            vec![Action::PushVlan(0x8100), set_vid, out(2)],
        )),
        PipelineMod::Flow(add(0, 10, m_in_port(4), vec![Action::PopVlan, out(2)])),
    ]);
    let untagged = |port| tcp_key(port, 1, 2, 3, 4);
    let tagged = |port| {
        let mut k = untagged(port);
        k.set(Field::VlanTci, 0x1000 | 7);
        k
    };
    let x = xlate(&p, &untagged(1));
    assert_eq!(vlan_tci(&x), vec![DpAction::PushVlan { tci: 0 }]);
    assert_eq!(outputs(&x), vec![2]);
    // The VID set after the push goes into the pushed tag.
    let x = xlate(&p, &untagged(3));
    assert_eq!(vlan_tci(&x), vec![DpAction::PushVlan { tci: 100 }]);
    let x = xlate(&p, &tagged(4));
    assert_eq!(vlan_tci(&x), vec![DpAction::PopVlan]);
    // Popping nothing changes nothing.
    let x = xlate(&p, &untagged(4));
    assert!(vlan_tci(&x).is_empty());
    assert_eq!(outputs(&x), vec![2]);
    // A second tag cannot be described by the key: dropped, never sent
    // wrong.
    let x = xlate(&p, &tagged(1));
    assert!(outputs(&x).is_empty());
}

#[test]
fn push_vlan_takes_8021q_and_round_trips_as_text() {
    let mut ft = FlowTables::new();
    for ethertype in [0x88a8, 0x1234] {
        let fm = add(
            0,
            10,
            m_in_port(1),
            vec![Action::PushVlan(ethertype), out(2)],
        );
        let (_, err) = ft.apply_batch(&[PipelineMod::Flow(fm)]).unwrap_err();
        assert_eq!(err.ofp_error(), (2, 5), "{err}"); // OFPBAC_BAD_ARGUMENT
    }
    let fm = text::parse_flow("in_port=1,actions=push_vlan:0x8100,pop_vlan,strip_vlan").unwrap();
    let acts = fm.instructions.apply_actions.unwrap();
    assert_eq!(
        acts,
        vec![Action::PushVlan(0x8100), Action::PopVlan, Action::PopVlan]
    );
    assert_eq!(
        text::format_actions(&acts),
        "push_vlan:0x8100,pop_vlan,pop_vlan"
    );
    assert!(text::parse_flow("in_port=1,actions=push_vlan:0x10000").is_err());
}

#[test]
fn set_field_of_vlan_vid_and_pcp_keep_the_other_and_push_when_untagged() {
    let p = build(vec![
        PipelineMod::Flow(add(
            0,
            10,
            m_in_port(1),
            vec![Action::SetVlanVid(0x1000 | 100), out(2)],
        )),
        PipelineMod::Flow(add(
            0,
            10,
            m_in_port(3),
            vec![Action::SetVlanPcp(5), out(2)],
        )),
    ]);
    let key = |port, tci| {
        let mut k = tcp_key(port, 1, 2, 3, 4);
        k.set(Field::VlanTci, tci);
        k
    };
    // Tagged VID 7, PCP 1: the VID changes, the PCP stays.
    let x = xlate(&p, &key(1, 0x2000 | 0x1000 | 7));
    assert_eq!(
        vlan_tci(&x),
        vec![DpAction::SetField {
            field: Field::VlanTci,
            value: 0x2000 | 0x1000 | 100
        }]
    );
    // Untagged: a tag appears, as OVS does it.
    let x = xlate(&p, &key(1, 0));
    assert_eq!(vlan_tci(&x), vec![DpAction::PushVlan { tci: 100 }]);
    let x = xlate(&p, &key(3, 0x1000 | 7));
    assert_eq!(
        vlan_tci(&x),
        vec![DpAction::SetField {
            field: Field::VlanTci,
            value: 0xa000 | 0x1000 | 7
        }]
    );
    let fm = text::parse_flow("in_port=1,actions=set_field:4196->vlan_vid,set_field:3->vlan_pcp")
        .unwrap();
    let acts = fm.instructions.apply_actions.unwrap();
    assert_eq!(acts, vec![Action::SetVlanVid(4196), Action::SetVlanPcp(3)]);
    assert_eq!(
        text::format_actions(&acts),
        "set_field:4196->vlan_vid,set_field:3->vlan_pcp"
    );
    assert!(text::parse_flow("in_port=1,actions=set_field:8->vlan_pcp").is_err());
}
