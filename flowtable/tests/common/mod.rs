#![allow(dead_code)]

use flowtable::action::port;
use flowtable::matching::{ETH_TYPE_IPV4, IP_PROTO_TCP};
use flowtable::*;

pub fn out(p: u32) -> Action {
    Action::Output {
        port: p,
        max_len: 0,
    }
}

pub fn m_in_port(p: u32) -> Match {
    let mut m = Match::catch_all();
    m.set_exact(Field::InPort, u64::from(p));
    m
}

pub fn m_ip_dst(ip: u32, mask: u32) -> Match {
    let mut m = Match::catch_all();
    m.set_exact(Field::EthType, u64::from(ETH_TYPE_IPV4));
    m.set_masked(Field::IpDst, u64::from(ip), u64::from(mask));
    m
}

pub fn add(t: u8, prio: u16, m: Match, actions: Vec<Action>) -> FlowMod {
    FlowMod::add(t, prio, m, Instructions::apply(actions))
}

pub fn cmd(command: FlowModCommand, t: u8, prio: u16, m: Match) -> FlowMod {
    let mut fm = FlowMod::add(t, prio, m, Instructions::default());
    fm.command = command;
    fm
}

pub fn tcp_key(in_port: u32, src: u32, dst: u32, sport: u16, dport: u16) -> FlowKey {
    let mut k = FlowKey::zero();
    k.set(Field::InPort, u64::from(in_port));
    k.set(Field::EthType, u64::from(ETH_TYPE_IPV4));
    k.set(Field::IpProto, u64::from(IP_PROTO_TCP));
    k.set(Field::IpSrc, u64::from(src));
    k.set(Field::IpDst, u64::from(dst));
    k.set(Field::TpSrc, u64::from(sport));
    k.set(Field::TpDst, u64::from(dport));
    k
}

pub fn group_mod(
    command: GroupModCommand,
    t: GroupType,
    id: u32,
    buckets: Vec<Vec<Action>>,
) -> GroupMod {
    GroupMod {
        command,
        group_type: t,
        group_id: id,
        buckets: buckets
            .into_iter()
            .enumerate()
            .map(|(i, actions)| Bucket {
                bucket_id: i as u32,
                // Only a select group's buckets have weights (OVS).
                weight: u16::from(t == GroupType::Select),
                watch_port: port::ANY,
                watch_group: flowtable::action::group::ANY,
                actions,
            })
            .collect(),
        selection: None,
    }
}

/// A comparable projection of the whole state.
pub fn snapshot(ft: &FlowTables) -> (Vec<String>, Vec<String>) {
    let flows = ft
        .flows(&FlowFilter::default())
        .iter()
        .map(|r| {
            format!(
                "{} {} {} {:?} {:x} {:?} {:?}",
                r.id,
                r.table_id,
                r.priority,
                r.matching,
                r.cookie,
                r.instructions,
                r.stats.read()
            )
        })
        .collect();
    let groups = ft
        .groups()
        .iter()
        .map(|g| format!("{} {:?} {:?}", g.id, g.group_type, g.buckets))
        .collect();
    (flows, groups)
}

pub fn xlate(p: &Pipeline, k: &FlowKey) -> Xlate {
    let mut x = Xlate::new();
    p.xlate(k, 100, &mut x);
    x
}

pub fn outputs(x: &Xlate) -> Vec<u32> {
    x.actions()
        .iter()
        .filter_map(|a| match a {
            DpAction::Output { port, .. } => Some(*port),
            _ => None,
        })
        .collect()
}

/// Flows (with their counters), group and bucket counters, table counters.
pub type Counters = (Vec<String>, Vec<(u64, u64)>, Vec<(u64, u64)>);

/// Every counter of `ft`, for comparing two switches fed the same traffic.
pub fn counters(ft: &FlowTables) -> Counters {
    let flows = snapshot(ft).0;
    // Each group's counters, then its buckets'.
    let groups = ft
        .groups()
        .iter()
        .flat_map(|g| {
            std::iter::once(g.stats.read()).chain(g.bucket_stats.iter().map(|b| b.read()))
        })
        .collect();
    let tables = ft
        .table_stats()
        .iter()
        .map(|t| (t.lookup_count, t.matched_count))
        .collect();
    (flows, groups, tables)
}

/// Control-plane tables and a packet thread's replica, with select group
/// `group` whose buckets output to `ports`.
pub fn with_select_group(group: u32, ports: &[u32]) -> (FlowTables, Pipeline) {
    let mut ft = FlowTables::new();
    let mut pipe = Pipeline::with_counters(ft.counters());
    let g = group_mod(
        GroupModCommand::Add,
        GroupType::Select,
        group,
        ports.iter().map(|p| vec![out(*p)]).collect(),
    );
    pipe.apply(&ft.group_mod(&g).unwrap());
    (ft, pipe)
}
