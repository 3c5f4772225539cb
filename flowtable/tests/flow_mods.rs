//! OpenFlow 1.3 flow-mod and group-mod semantics of `FlowTables`.

mod common;

use common::*;
use flowtable::action::{group as group_no, port, TABLE_ALL};
use flowtable::flow_mod::flow_mod_flags::{CHECK_OVERLAP, RESET_COUNTS};
use flowtable::*;
use std::sync::atomic::Ordering;

fn counts_of(ft: &FlowTables) -> Vec<(u64, u64)> {
    ft.flows(&FlowFilter::default())
        .iter()
        .map(|r| r.stats.read())
        .collect()
}

#[test]
fn add_replaces_identical_flow_and_keeps_counters() {
    let mut ft = FlowTables::new();
    ft.flow_mod(&add(0, 100, m_in_port(1), vec![out(2)]))
        .unwrap();
    let first = ft.flows(&FlowFilter::default()).remove(0);
    first.stats.packets.store(7, Ordering::Relaxed);
    let changes = ft
        .flow_mod(&add(0, 100, m_in_port(1), vec![out(3)]))
        .unwrap();
    assert!(
        matches!(&changes[..], [Change::RemoveRule(a), Change::AddRule(b)] if a.id == first.id && b.id != first.id)
    );
    let flows = ft.flows(&FlowFilter::default());
    assert_eq!(flows.len(), 1);
    assert_eq!(flows[0].instructions, Instructions::apply(vec![out(3)]));
    assert_eq!(counts_of(&ft), vec![(7, 0)]);

    let mut fm = add(0, 100, m_in_port(1), vec![out(4)]);
    fm.flags = RESET_COUNTS;
    ft.flow_mod(&fm).unwrap();
    assert_eq!(counts_of(&ft), vec![(0, 0)]);
    // A different priority is a different flow.
    ft.flow_mod(&add(0, 101, m_in_port(1), vec![out(4)]))
        .unwrap();
    assert_eq!(ft.n_rules(), 2);
}

#[test]
fn check_overlap_rejects_same_priority_overlap_only() {
    let mut ft = FlowTables::new();
    ft.flow_mod(&add(0, 10, m_ip_dst(0x0a00_0000, 0xff00_0000), vec![]))
        .unwrap();
    let mut fm = add(0, 10, m_ip_dst(0x0a01_0000, 0xffff_0000), vec![]);
    fm.flags = CHECK_OVERLAP;
    assert_eq!(ft.flow_mod(&fm).err(), Some(FlowModError::Overlap));
    fm.priority = 11;
    ft.flow_mod(&fm).unwrap();
    let mut disjoint = add(0, 10, m_ip_dst(0x0b00_0000, 0xff00_0000), vec![]);
    disjoint.flags = CHECK_OVERLAP;
    ft.flow_mod(&disjoint).unwrap();
    assert_eq!(ft.n_rules(), 3);
}

#[test]
fn modify_changes_instructions_keeps_cookie_and_counters() {
    let mut ft = FlowTables::new();
    let mut a = add(0, 100, m_in_port(1), vec![out(2)]);
    a.cookie = 0x11;
    ft.flow_mod(&a).unwrap();
    ft.flow_mod(&add(0, 50, m_in_port(2), vec![out(1)]))
        .unwrap();
    ft.flows(&FlowFilter::default())[0]
        .stats
        .packets
        .store(5, Ordering::Relaxed);

    // Non-strict with a catch-all match: every flow.
    let mut m = cmd(FlowModCommand::Modify, TABLE_ALL, 0, Match::catch_all());
    m.instructions = Instructions::apply(vec![out(9)]);
    m.cookie = 0x22; // a filter with mask 0, never the new cookie
    let changes = ft.flow_mod(&m).unwrap();
    assert_eq!(changes.len(), 4);
    let flows = ft.flows(&FlowFilter::default());
    assert!(flows.iter().all(|r| r.instructions == m.instructions));
    assert_eq!(flows[0].cookie, 0x11);
    assert_eq!(flows[0].stats.read().0, 5);

    // Strict needs the exact priority; a miss is a no-op, not an add.
    let mut s = cmd(FlowModCommand::ModifyStrict, 0, 99, m_in_port(1));
    s.instructions = Instructions::apply(vec![out(3)]);
    assert!(ft.flow_mod(&s).unwrap().is_empty());
    let mut nomatch = cmd(FlowModCommand::Modify, 0, 0, m_in_port(77));
    nomatch.instructions = Instructions::apply(vec![out(3)]);
    assert!(ft.flow_mod(&nomatch).unwrap().is_empty());
    assert_eq!(ft.n_rules(), 2);
    s.priority = 100;
    s.flags = RESET_COUNTS;
    ft.flow_mod(&s).unwrap();
    let r = &ft.flows(&FlowFilter::default())[0];
    assert_eq!((r.priority, r.stats.read().0), (100, 0));
    assert_eq!(r.instructions, s.instructions);

    // Cookie mask filters modifications.
    let mut c = cmd(FlowModCommand::Modify, 0, 0, Match::catch_all());
    c.cookie = 0x10;
    c.cookie_mask = 0xf0;
    c.instructions = Instructions::apply(vec![out(4)]);
    assert_eq!(ft.flow_mod(&c).unwrap().len(), 2);
}

#[test]
fn strict_and_non_strict_delete() {
    let mut ft = FlowTables::new();
    let mut wide = m_in_port(1);
    ft.flow_mod(&add(0, 100, wide, vec![])).unwrap();
    wide.set_exact(Field::EthType, 0x0800);
    ft.flow_mod(&add(0, 200, wide, vec![])).unwrap();
    ft.flow_mod(&add(0, 100, m_in_port(2), vec![])).unwrap();

    // Strict: same priority and identical match only.
    assert!(ft
        .flow_mod(&cmd(FlowModCommand::DeleteStrict, 0, 100, wide))
        .unwrap()
        .is_empty());
    assert_eq!(
        ft.flow_mod(&cmd(FlowModCommand::DeleteStrict, 0, 200, wide))
            .unwrap()
            .len(),
        1
    );
    ft.flow_mod(&add(0, 200, wide, vec![])).unwrap();

    // Non-strict: every flow at least as specific, any priority.
    let changes = ft
        .flow_mod(&cmd(FlowModCommand::Delete, 0, 0, m_in_port(1)))
        .unwrap();
    assert_eq!(changes.len(), 2);
    assert!(changes.iter().all(|c| matches!(c, Change::RemoveRule(_))));
    assert_eq!(ft.n_rules(), 1);
}

#[test]
fn delete_filters_cookie_out_port_out_group_and_table_all() {
    let mut ft = FlowTables::new();
    ft.group_mod(&group_mod(
        GroupModCommand::Add,
        GroupType::All,
        5,
        vec![vec![out(1)]],
    ))
    .unwrap();
    for (t, cookie, action) in [
        (0, 0x100, out(1)),
        (1, 0x101, out(2)),
        (2, 0x200, out(1)),
        (3, 0x201, Action::Group(5)),
    ] {
        let mut fm = add(t, 10, m_in_port(u32::from(t) + 10), vec![action]);
        fm.cookie = cookie;
        ft.flow_mod(&fm).unwrap();
    }
    // Cookie mask: 0x1xx only.
    let mut d = cmd(FlowModCommand::Delete, TABLE_ALL, 0, Match::catch_all());
    d.cookie = 0x100;
    d.cookie_mask = 0xf00;
    d.out_port = port::ANY;
    d.out_group = group_no::ANY;
    let mut probe = d.clone();
    probe.out_port = 1;
    assert_eq!(ft.flow_mod(&probe).unwrap().len(), 1, "0x100 outputs to 1");
    assert_eq!(ft.flow_mod(&d).unwrap().len(), 1, "0x101 left");
    let mut g = cmd(FlowModCommand::Delete, TABLE_ALL, 0, Match::catch_all());
    g.out_group = 5;
    assert_eq!(ft.flow_mod(&g).unwrap().len(), 1);
    // Deleting from one table does not touch others.
    assert!(ft
        .flow_mod(&cmd(FlowModCommand::Delete, 0, 0, Match::catch_all()))
        .unwrap()
        .is_empty());
    assert_eq!(
        ft.flow_mod(&cmd(FlowModCommand::Delete, 2, 0, Match::catch_all()))
            .unwrap()
            .len(),
        1
    );
    assert_eq!(ft.n_rules(), 0);
}

#[test]
fn table_ids_goto_and_groups_are_validated() {
    let mut ft = FlowTables::new();
    assert_eq!(
        ft.flow_mod(&add(254, 1, Match::catch_all(), vec![])).err(),
        Some(FlowModError::BadTableId(254))
    );
    assert_eq!(
        ft.flow_mod(&add(TABLE_ALL, 1, Match::catch_all(), vec![]))
            .err(),
        Some(FlowModError::BadTableId(255))
    );
    let mut back = add(5, 1, Match::catch_all(), vec![]);
    back.instructions.goto_table = Some(5);
    assert_eq!(
        ft.flow_mod(&back).err(),
        Some(FlowModError::BadGotoTable { from: 5, to: 5 })
    );
    back.instructions.goto_table = Some(254);
    assert!(matches!(
        ft.flow_mod(&back),
        Err(FlowModError::BadGotoTable { .. })
    ));
    back.instructions.goto_table = Some(6);
    ft.flow_mod(&back).unwrap();
    assert_eq!(
        ft.flow_mod(&add(0, 1, Match::catch_all(), vec![Action::Group(9)]))
            .err(),
        Some(FlowModError::UnknownGroup(9))
    );
    let mut tp = Match::catch_all();
    tp.set_exact(Field::TpDst, 80);
    assert!(matches!(
        ft.flow_mod(&add(0, 1, tp, vec![])),
        Err(FlowModError::Match(_))
    ));
    // set_field of an IP field needs an IP match.
    let set = Action::SetField {
        field: Field::IpDst,
        value: 1,
    };
    assert!(matches!(
        ft.flow_mod(&add(0, 1, Match::catch_all(), vec![set.clone()])),
        Err(FlowModError::Match(_))
    ));
    ft.flow_mod(&add(0, 1, m_ip_dst(0, 0), vec![set])).unwrap();
    assert_eq!(
        ft.flow_mod(&add(0, 1, Match::catch_all(), vec![out(port::ANY)]))
            .err(),
        Some(FlowModError::BadOutPort(port::ANY))
    );
    assert_eq!(ft.n_rules(), 2);
}

#[test]
fn sub_field_ranges_are_validated() {
    let mut ft = FlowTables::new();
    let reg0 = |ofs, nbits| SubField {
        field: Field::Reg(0),
        ofs,
        nbits,
        named: None,
    };
    let bad = [
        Action::RegLoad {
            dst: reg0(16, 17),
            value: 0,
        },
        Action::RegLoad {
            dst: reg0(0, 0),
            value: 0,
        },
        Action::RegLoad {
            dst: reg0(0, 4),
            value: 0x10,
        },
        Action::RegMove {
            src: reg0(0, 8),
            dst: SubField {
                field: Field::Reg(1),
                ofs: 0,
                nbits: 16,
                named: None,
            },
        },
        Action::RegMove {
            src: reg0(30, 8),
            dst: reg0(0, 8),
        },
        Action::OutputReg {
            src: reg0(0, 33),
            max_len: 0,
        },
        Action::RegLoad {
            dst: SubField::whole(Field::CtState),
            value: 0,
        },
    ];
    for a in bad {
        let r = ft.flow_mod(&add(0, 1, Match::catch_all(), vec![a.clone()]));
        assert!(
            matches!(r, Err(FlowModError::BadField { .. })),
            "{a:?}: {r:?}"
        );
    }
    let good = vec![
        Action::RegLoad {
            dst: reg0(16, 16),
            value: 0xffff,
        },
        Action::RegMove {
            src: reg0(0, 16),
            dst: SubField {
                field: Field::TunId,
                ofs: 48,
                nbits: 16,
                named: None,
            },
        },
        Action::OutputReg {
            src: reg0(0, 32),
            max_len: 0,
        },
    ];
    ft.flow_mod(&add(0, 1, Match::catch_all(), good)).unwrap();
}

#[test]
fn group_mods() {
    let mut ft = FlowTables::new();
    let g = |c, id| group_mod(c, GroupType::Select, id, vec![vec![out(1)], vec![out(2)]]);
    ft.group_mod(&g(GroupModCommand::Add, 1)).unwrap();
    assert_eq!(
        ft.group_mod(&g(GroupModCommand::Add, 1)).err(),
        Some(GroupModError::Exists(1))
    );
    assert_eq!(
        ft.group_mod(&g(GroupModCommand::Modify, 2)).err(),
        Some(GroupModError::Unknown(2))
    );
    assert_eq!(
        ft.group_mod(&g(GroupModCommand::Add, 0xffff_ff01)).err(),
        Some(GroupModError::InvalidId(0xffff_ff01))
    );
    let chained = group_mod(
        GroupModCommand::Add,
        GroupType::All,
        3,
        vec![vec![Action::Group(1)]],
    );
    assert!(matches!(
        ft.group_mod(&chained),
        Err(GroupModError::BadAction(_))
    ));
    let two = group_mod(
        GroupModCommand::Add,
        GroupType::Indirect,
        3,
        vec![vec![], vec![]],
    );
    assert!(matches!(
        ft.group_mod(&two),
        Err(GroupModError::InvalidGroup(_))
    ));
    ft.group_mod(&g(GroupModCommand::Add, 2)).unwrap();
    let before = ft.group(1).unwrap();
    before.stats.packets.store(3, Ordering::Relaxed);
    let mut m = g(GroupModCommand::Modify, 1);
    m.group_type = GroupType::All;
    // Only a select group's buckets have weights.
    assert!(matches!(
        ft.group_mod(&m),
        Err(GroupModError::InvalidGroup(_))
    ));
    m.buckets.iter_mut().for_each(|b| b.weight = 0);
    ft.group_mod(&m).unwrap();
    let after = ft.group(1).unwrap();
    assert_eq!(
        (after.group_type, after.stats.read().0),
        (GroupType::All, 3)
    );
    assert_eq!(
        ft.groups().iter().map(|g| g.id).collect::<Vec<_>>(),
        vec![1, 2]
    );

    // Deleting a group removes the flows that use it, then the group.
    ft.flow_mod(&add(0, 1, m_in_port(1), vec![Action::Group(1)]))
        .unwrap();
    ft.flow_mod(&add(3, 1, m_in_port(1), vec![out(4), Action::Group(1)]))
        .unwrap();
    ft.flow_mod(&add(0, 1, m_in_port(2), vec![Action::Group(2)]))
        .unwrap();
    let changes = ft.group_mod(&g(GroupModCommand::Delete, 1)).unwrap();
    let removed = changes
        .iter()
        .filter(|c| matches!(c, Change::RemoveRule(_)))
        .count();
    assert_eq!(removed, 2);
    assert!(matches!(changes.last(), Some(Change::RemoveGroup(1))));
    assert_eq!(ft.n_rules(), 1);
    // Deleting an unknown group is not an error (OpenFlow 1.3).
    assert!(ft
        .group_mod(&g(GroupModCommand::Delete, 1))
        .unwrap()
        .is_empty());
    // ALL deletes every group and its flows.
    ft.group_mod(&g(GroupModCommand::Delete, group_no::ALL))
        .unwrap();
    assert!(ft.groups().is_empty());
    assert_eq!(ft.n_rules(), 0);
}

#[test]
fn apply_batch_is_all_or_nothing() {
    let mut ft = FlowTables::new();
    ft.group_mod(&group_mod(
        GroupModCommand::Add,
        GroupType::All,
        1,
        vec![vec![out(1)]],
    ))
    .unwrap();
    ft.flow_mod(&add(0, 5, m_in_port(1), vec![Action::Group(1)]))
        .unwrap();
    ft.flow_mod(&add(1, 5, m_in_port(2), vec![out(3)])).unwrap();
    ft.flows(&FlowFilter::default())[0]
        .stats
        .packets
        .store(9, Ordering::Relaxed);
    let before = snapshot(&ft);

    let batch = vec![
        PipelineMod::Group(group_mod(
            GroupModCommand::Add,
            GroupType::All,
            2,
            vec![vec![out(2)]],
        )),
        PipelineMod::Flow(add(0, 7, m_in_port(4), vec![Action::Group(2)])),
        PipelineMod::Flow(add(0, 5, m_in_port(1), vec![out(8)])), // replaces
        PipelineMod::Flow(cmd(FlowModCommand::Delete, 1, 0, Match::catch_all())),
        PipelineMod::Group(group_mod(
            GroupModCommand::Modify,
            GroupType::Select,
            1,
            vec![vec![out(5)]],
        )),
        PipelineMod::Group(group_mod(
            GroupModCommand::Delete,
            GroupType::All,
            2,
            vec![],
        )),
        PipelineMod::Flow(add(0, 1, Match::catch_all(), vec![Action::Group(2)])), // group 2 is gone
    ];
    let err = ft.apply_batch(&batch).unwrap_err();
    assert_eq!(err, (6, ModError::Flow(FlowModError::UnknownGroup(2))));
    assert_eq!(snapshot(&ft), before);
    assert_eq!(ft.group(1).unwrap().group_type, GroupType::All);

    // The same batch minus the bad mod applies, in order.
    let changes = ft.apply_batch(&batch[..6]).unwrap();
    assert!(!changes.is_empty());
    assert_eq!(ft.n_rules(), 1);
    assert_eq!(ft.groups().len(), 1);
    assert_eq!(ft.flows(&FlowFilter::default())[0].stats.read().0, 9);
}

#[test]
fn flows_are_ordered_and_filtered() {
    let mut ft = FlowTables::new();
    ft.flow_mod(&add(1, 10, m_in_port(1), vec![])).unwrap();
    ft.flow_mod(&add(0, 10, m_in_port(2), vec![])).unwrap();
    ft.flow_mod(&add(0, 30, m_in_port(3), vec![])).unwrap();
    let all = ft.flows(&FlowFilter::default());
    let order: Vec<_> = all.iter().map(|r| (r.table_id, r.priority)).collect();
    assert_eq!(order, vec![(0, 30), (0, 10), (1, 10)]);
    let f = FlowFilter {
        matching: m_in_port(2),
        ..Default::default()
    };
    assert_eq!(ft.flows(&f).len(), 1);
    let stats = ft.table_stats();
    assert_eq!(stats.len(), 254);
    assert_eq!((stats[0].active_count, stats[1].active_count), (2, 1));
}

#[test]
fn flow_limits_refuse_new_flows_but_not_replacements() {
    let mut ft = FlowTables::new();
    ft.set_flow_limit(1, Some(2));
    ft.flow_mod(&add(1, 100, m_in_port(1), vec![out(2)]))
        .unwrap();
    ft.flow_mod(&add(1, 100, m_in_port(2), vec![out(2)]))
        .unwrap();
    let full = ft
        .flow_mod(&add(1, 100, m_in_port(3), vec![out(2)]))
        .unwrap_err();
    assert!(matches!(full, FlowModError::TableFull(1)));
    assert_eq!(full.ofp_error(), (5, 1), "OFPFMFC_TABLE_FULL");
    // Replacing a flow adds none; other tables have no limit.
    ft.flow_mod(&add(1, 100, m_in_port(1), vec![out(3)]))
        .unwrap();
    ft.flow_mod(&add(0, 100, m_in_port(3), vec![out(2)]))
        .unwrap();
    // The overall limit counts every table; a batch that passes it
    // changes nothing.
    ft.set_max_flows(4);
    let batch = vec![
        PipelineMod::Flow(add(2, 1, m_in_port(1), vec![out(2)])),
        PipelineMod::Flow(add(2, 1, m_in_port(2), vec![out(2)])),
    ];
    let (i, e) = ft.apply_batch(&batch).unwrap_err();
    assert_eq!(i, 1);
    assert!(matches!(e, ModError::Flow(FlowModError::TableFull(2))));
    assert_eq!(ft.n_rules(), 3);
    // Lifting the limit lets the table grow again.
    ft.set_flow_limit(1, None);
    ft.set_max_flows(usize::MAX);
    ft.flow_mod(&add(1, 100, m_in_port(3), vec![out(2)]))
        .unwrap();
}
