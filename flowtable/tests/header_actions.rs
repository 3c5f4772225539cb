//! `mod_nw_ttl` and `dec_ttl`: TTL rewrites in translation, OVS's
//! semantics at TTL 1, text syntax and validation.

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
