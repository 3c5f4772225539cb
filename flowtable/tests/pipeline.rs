//! Packet translation through a `Pipeline` replica.

mod common;

use common::*;
use flowtable::action::port;
use flowtable::*;
use std::sync::atomic::Ordering::Relaxed;

fn build(mods: Vec<PipelineMod>) -> (FlowTables, Pipeline) {
    let mut ft = FlowTables::new();
    let mut p = Pipeline::with_counters(ft.counters());
    let changes = ft.apply_batch(&mods).unwrap();
    p.apply(&changes);
    (ft, p)
}

#[test]
fn highest_priority_wins_and_counts() {
    let (ft, p) = build(vec![
        PipelineMod::Flow(add(0, 10, Match::catch_all(), vec![out(1)])),
        PipelineMod::Flow(add(0, 20, m_ip_dst(0x0a00_0000, 0xff00_0000), vec![out(2)])),
        PipelineMod::Flow(add(0, 30, m_ip_dst(0x0a00_0001, 0xffff_ffff), vec![out(3)])),
    ]);
    assert_eq!(
        outputs(&xlate(&p, &tcp_key(9, 1, 0x0a00_0001, 1, 2))),
        vec![3]
    );
    assert_eq!(
        outputs(&xlate(&p, &tcp_key(9, 1, 0x0a00_0002, 1, 2))),
        vec![2]
    );
    assert_eq!(
        outputs(&xlate(&p, &tcp_key(9, 1, 0x0b00_0002, 1, 2))),
        vec![1]
    );
    let flows = ft.flows(&FlowFilter::default());
    assert!(flows.iter().all(|r| r.stats.read() == (1, 100)));
    let t0 = ft.table_stats()[0];
    assert_eq!((t0.lookup_count, t0.matched_count), (3, 3));
}

#[test]
fn table_miss_and_empty_instructions_drop() {
    let (ft, p) = build(vec![
        PipelineMod::Flow(add(0, 10, m_in_port(1), vec![])),
        PipelineMod::Flow({
            let mut fm = add(0, 10, m_in_port(2), vec![out(5)]);
            fm.instructions.goto_table = Some(3);
            fm
        }),
    ]);
    let x = xlate(&p, &tcp_key(3, 0, 0, 0, 0));
    assert_eq!(x.drop_reason(), Some(DropReason::TableMiss));
    assert!(x.actions().is_empty());
    assert_eq!(
        xlate(&p, &tcp_key(1, 0, 0, 0, 0)).drop_reason(),
        Some(DropReason::ExplicitDrop)
    );
    // Outputs made before a later table misses still happen.
    let x = xlate(&p, &tcp_key(2, 0, 0, 0, 0));
    assert_eq!((outputs(&x), x.drop_reason()), (vec![5], None));
    let stats = ft.table_stats();
    assert_eq!((stats[0].lookup_count, stats[0].matched_count), (3, 2));
    assert_eq!((stats[3].lookup_count, stats[3].matched_count), (1, 0));
}

#[test]
fn goto_chain_with_metadata_and_action_set() {
    let mut t0 = add(0, 1, Match::catch_all(), vec![]);
    t0.instructions.write_metadata = Some((0xab00, 0xff00));
    t0.instructions.write_actions = Some(vec![out(7)]);
    t0.instructions.goto_table = Some(10);
    let mut m10 = Match::catch_all();
    m10.set_masked(Field::Metadata, 0xab00, 0xff00);
    let mut t10 = add(10, 1, m10, vec![out(2)]);
    t10.instructions.write_actions = Some(vec![out(8)]);
    t10.instructions.goto_table = Some(20);
    let mut t20 = add(20, 1, Match::catch_all(), vec![]);
    t20.instructions.write_actions = Some(vec![Action::SetField {
        field: Field::EthDst,
        value: 0x0a58_0a80_0001,
    }]);
    let (_, p) = build(vec![
        PipelineMod::Flow(t0),
        PipelineMod::Flow(t10),
        PipelineMod::Flow(t20),
    ]);
    let x = xlate(&p, &tcp_key(1, 0, 0, 0, 0));
    assert_eq!(
        x.actions(),
        &[
            DpAction::Output {
                port: 2,
                tun_id: 0,
                tun_dst: 0
            },
            DpAction::SetField {
                field: Field::EthDst,
                value: 0x0a58_0a80_0001
            },
            DpAction::Output {
                port: 8,
                tun_id: 0,
                tun_dst: 0
            },
        ]
    );
}

#[test]
fn clear_actions_empties_the_action_set() {
    let mut t0 = add(0, 1, Match::catch_all(), vec![]);
    t0.instructions.write_actions = Some(vec![out(7)]);
    t0.instructions.goto_table = Some(1);
    let mut t1 = add(1, 1, Match::catch_all(), vec![]);
    t1.instructions.clear_actions = true;
    let (_, p) = build(vec![PipelineMod::Flow(t0), PipelineMod::Flow(t1)]);
    assert_eq!(
        xlate(&p, &tcp_key(1, 0, 0, 0, 0)).drop_reason(),
        Some(DropReason::ExplicitDrop)
    );
}

#[test]
fn resubmit_restores_in_port_and_returns() {
    let (_, p) = build(vec![
        PipelineMod::Flow(add(
            0,
            1,
            m_in_port(1),
            vec![
                Action::Resubmit {
                    in_port: 9,
                    table: Some(5),
                },
                out(port::IN_PORT),
                out(3),
            ],
        )),
        // Matches on the substituted in_port; its own outputs see the real one.
        PipelineMod::Flow(add(
            5,
            1,
            m_in_port(9),
            vec![out(1), out(4), out(port::IN_PORT)],
        )),
    ]);
    let x = xlate(&p, &tcp_key(1, 0, 0, 0, 0));
    // out(1) inside the resubmit is the packet's in_port: skipped.
    assert_eq!(outputs(&x), vec![4, 1, 1, 3]);
}

#[test]
fn resubmit_loop_hits_the_depth_limit() {
    let (_, p) = build(vec![PipelineMod::Flow(add(
        0,
        1,
        Match::catch_all(),
        vec![
            Action::Resubmit {
                in_port: port::IN_PORT,
                table: None,
            },
            out(2),
        ],
    ))]);
    let x = xlate(&p, &tcp_key(1, 0, 0, 0, 0));
    assert_eq!(x.drop_reason(), Some(DropReason::ResubmitDepth));
    assert!(x.actions().is_empty());
}

#[test]
fn too_many_outputs_drop() {
    let actions = (2..2 + MAX_DP_ACTIONS as u32 + 1).map(out).collect();
    let (_, p) = build(vec![PipelineMod::Flow(add(
        0,
        1,
        Match::catch_all(),
        actions,
    ))]);
    let x = xlate(&p, &tcp_key(1, 0, 0, 0, 0));
    assert_eq!(x.drop_reason(), Some(DropReason::TooManyActions));
}

#[test]
fn reg_load_move_and_output_reg() {
    let reg = |n, ofs, nbits| SubField {
        field: Field::Reg(n),
        ofs,
        nbits,
        named: None,
    };
    let (_, p) = build(vec![
        PipelineMod::Flow({
            let mut fm = add(
                0,
                1,
                m_ip_dst(0, 0),
                vec![
                    Action::RegLoad {
                        dst: reg(0, 0, 16),
                        value: 0x1234,
                    },
                    Action::RegLoad {
                        dst: reg(0, 16, 8),
                        value: 0x56,
                    },
                    Action::RegMove {
                        src: reg(0, 0, 24),
                        dst: SubField {
                            field: Field::TunId,
                            ofs: 0,
                            nbits: 24,
                            named: None,
                        },
                    },
                    Action::RegMove {
                        src: reg(0, 8, 8),
                        dst: SubField {
                            field: Field::IpDst,
                            ofs: 0,
                            nbits: 8,
                            named: None,
                        },
                    },
                    Action::RegLoad {
                        dst: reg(1, 0, 32),
                        value: 6,
                    },
                    Action::OutputReg {
                        src: reg(1, 0, 32),
                        max_len: 0,
                    },
                ],
            );
            fm.instructions.goto_table = Some(1);
            fm
        }),
        PipelineMod::Flow({
            let mut m = Match::catch_all();
            m.set_exact(Field::Reg(0), 0x56_1234);
            add(1, 1, m, vec![out(7)])
        }),
    ]);
    let x = xlate(&p, &tcp_key(1, 0, 0x0a00_0000, 0, 0));
    assert_eq!(
        x.actions(),
        &[
            DpAction::SetField {
                field: Field::IpDst,
                value: 0x0a00_0012
            },
            DpAction::Output {
                port: 6,
                tun_id: 0x56_1234,
                tun_dst: 0
            },
            DpAction::Output {
                port: 7,
                tun_id: 0x56_1234,
                tun_dst: 0
            },
        ]
    );
}

#[test]
fn output_to_in_port_is_skipped_unless_in_port_is_loaded() {
    let (_, p) = build(vec![PipelineMod::Flow(add(
        0,
        1,
        Match::catch_all(),
        vec![
            out(1),
            Action::RegLoad {
                dst: SubField::whole(Field::InPort),
                value: 0,
            },
            out(1),
        ],
    ))]);
    assert_eq!(outputs(&xlate(&p, &tcp_key(1, 0, 0, 0, 0))), vec![1]);
    let (_, p) = build(vec![PipelineMod::Flow(add(
        0,
        1,
        Match::catch_all(),
        vec![out(1)],
    ))]);
    assert_eq!(
        xlate(&p, &tcp_key(1, 0, 0, 0, 0)).drop_reason(),
        Some(DropReason::ExplicitDrop)
    );
    let (_, p) = build(vec![PipelineMod::Flow(add(
        0,
        1,
        Match::catch_all(),
        vec![out(port::CONTROLLER)],
    ))]);
    let x = xlate(&p, &tcp_key(1, 0, 0, 0, 0));
    assert_eq!(x.drop_reason(), None);
    assert_eq!(
        x.actions(),
        [DpAction::Controller {
            max_len: 0,
            reason: flowtable::pipeline::packet_in_reason::ACTION,
            table_id: 0,
            cookie: 0
        }]
    );
    let (_, p) = build(vec![PipelineMod::Flow(add(
        0,
        1,
        Match::catch_all(),
        vec![out(port::FLOOD)],
    ))]);
    assert_eq!(
        xlate(&p, &tcp_key(1, 0, 0, 0, 0)).actions(),
        &[DpAction::Flood]
    );
}

#[test]
fn all_group_buckets_run_on_copies() {
    let set = |v| Action::SetField {
        field: Field::EthDst,
        value: v,
    };
    let (ft, p) = build(vec![
        PipelineMod::Group(group_mod(
            GroupModCommand::Add,
            GroupType::All,
            1,
            vec![vec![set(0xaa), out(2)], vec![out(3)]],
        )),
        PipelineMod::Flow(add(
            0,
            1,
            Match::catch_all(),
            vec![Action::Group(1), out(4)],
        )),
    ]);
    let x = xlate(&p, &tcp_key(1, 0, 0, 0, 0));
    let o = |port| DpAction::Output {
        port,
        tun_id: 0,
        tun_dst: 0,
    };
    assert_eq!(
        x.actions(),
        &[
            DpAction::SetField {
                field: Field::EthDst,
                value: 0xaa
            },
            o(2),
            DpAction::SetField {
                field: Field::EthDst,
                value: 0
            },
            o(3),
            o(4),
        ]
    );
    assert_eq!(ft.group(1).unwrap().stats.read(), (1, 100));
}

#[test]
fn select_group_spreads_flows_and_respects_weights() {
    let mut gm = group_mod(
        GroupModCommand::Add,
        GroupType::Select,
        1,
        vec![vec![out(2)], vec![out(3)], vec![out(4)]],
    );
    gm.buckets[2].weight = 0;
    let (_, p) = build(vec![
        PipelineMod::Group(gm),
        PipelineMod::Flow(add(0, 1, Match::catch_all(), vec![Action::Group(1)])),
    ]);
    let mut hits = [0u32; 5];
    for sport in 0..400u16 {
        let k = tcp_key(1, 0x0a00_0001, 0x0a00_0002, 1000 + sport, 80);
        let o = outputs(&xlate(&p, &k));
        assert_eq!(o.len(), 1);
        // The same flow always takes the same bucket.
        assert_eq!(outputs(&xlate(&p, &k)), o);
        hits[o[0] as usize] += 1;
    }
    assert_eq!(hits[4], 0, "weight 0 bucket never chosen");
    assert!(hits[2] > 120 && hits[3] > 120, "{hits:?}");
}

#[test]
fn a_select_group_with_hash_fields_hashes_only_those() {
    let mut gm = group_mod(
        GroupModCommand::Add,
        GroupType::Select,
        1,
        vec![vec![out(2)], vec![out(3)]],
    );
    // OVS's `selection_method=hash,fields(ip_dst=255.255.255.0)`.
    let mut fields = FlowKey::zero();
    fields.set(Field::IpDst, 0xffff_ff00);
    gm.selection = Some(SelectionMethod {
        method: SelectionKind::Hash,
        param: 0,
        fields,
        wire_fields: Vec::new(),
    });
    let (ft, p) = build(vec![
        PipelineMod::Group(gm),
        PipelineMod::Flow(add(0, 1, Match::catch_all(), vec![Action::Group(1)])),
    ]);
    let mut hits = [0u32; 4];
    for dst in 0..200u32 {
        let net = 0x0a00_0000 | dst << 8;
        let first = outputs(&xlate(&p, &tcp_key(1, 0x0a00_0001, net, 1000, 80)));
        // Other sources, ports and hosts of the /24: the same bucket.
        for (src, sport, host) in [(7, 2000, 9), (8, 3000, 200)] {
            let k = tcp_key(1, src, net | host, sport, 443);
            let x = xlate(&p, &k);
            assert_eq!(outputs(&x), first);
            // The megaflow keeps only the /24 (and the rule's own match).
            assert_eq!(x.wildcards().get(Field::IpDst), 0xffff_ff00);
            assert_eq!(x.wildcards().get(Field::TpSrc), 0);
        }
        hits[first[0] as usize] += 1;
    }
    assert!(hits[2] > 60 && hits[3] > 60, "{hits:?}");
    // A bucket command keeps the selection method.
    let mut tables = ft;
    let insert = group_mod(
        GroupModCommand::InsertBucket(flowtable::flow_mod::BucketPos::Last),
        GroupType::Select,
        1,
        vec![],
    );
    tables.group_mod(&insert).unwrap();
    assert!(tables.group(1).unwrap().selection.is_some());
}

fn text_pipeline(flows: &[&str]) -> Pipeline {
    let mods: Vec<PipelineMod> = flows
        .iter()
        .map(|f| PipelineMod::Flow(flowtable::text::parse_flow(f).unwrap()))
        .collect();
    build(mods).1
}

#[test]
fn ct_with_table_forks_a_recirculation_with_the_metadata_so_far() {
    let p = text_pipeline(&[
        "table=0, priority=1000, ip, ct_state=-trk, actions=ct(table=0)",
        "table=0, priority=100, ip, actions=load:0x2a->NXM_NX_REG0[],goto_table:30",
        "table=30, priority=100, ip, ct_state=-rpl, actions=set_field:0a:58:0a:80:00:05->eth_dst,ct(commit,zone=7,exec(set_field:0x5->ct_mark),table=31),output:9",
        "table=31, priority=100, ip, actions=output:3",
    ]);
    // A fresh packet: untracked, so table 0 sends it to conntrack and
    // resumes in table 0; nothing else happens to the original.
    let k =
        flowtable::text::parse_packet("in_port=1,tcp,nw_src=10.128.0.2,nw_dst=10.128.0.5").unwrap();
    let x = xlate(&p, &k);
    assert_eq!(
        x.actions(),
        &[DpAction::Ct {
            zone: 0,
            commit: false,
            force: false,
            table: Some(0),
            nat: None,
            mark: None,
            label: None
        }]
    );
    assert_eq!(x.drop_reason(), None);
    let r = x.recirc().copied().unwrap();
    assert_eq!(r.recirc_table(), Some(0));
    assert_eq!(r.get(Field::IpDst), k.get(Field::IpDst));

    // The recirculated packet (the datapath set +trk+new) goes on from
    // table 0; table 30 rewrites, commits with a mark and forks to 31,
    // while the original instance continues to output:9.
    let mut k2 = r;
    k2.set(Field::CtState, 0x21);
    let x = xlate(&p, &k2);
    let acts = x.actions();
    assert_eq!(acts.len(), 3, "{acts:?}");
    assert!(matches!(
        acts[0],
        DpAction::SetField {
            field: Field::EthDst,
            ..
        }
    ));
    assert_eq!(
        acts[1],
        DpAction::Ct {
            zone: 7,
            commit: true,
            force: false,
            table: Some(31),
            nat: None,
            mark: Some((5, u32::MAX)),
            label: None
        }
    );
    assert!(matches!(acts[2], DpAction::Output { port: 9, .. }));
    let r = x.recirc().copied().unwrap();
    assert_eq!(r.recirc_table(), Some(31));
    assert_eq!(
        r.get(Field::Reg(0)),
        0x2a,
        "registers survive recirculation"
    );
    assert_eq!(r.get(Field::EthDst), 0x0a58_0a80_0005);

    // After the commit the packet resumes in table 31 only.
    let mut k3 = r;
    k3.set(Field::CtState, 0x21);
    let x = xlate(&p, &k3);
    assert_eq!(outputs(&x), vec![3]);
    assert!(x.recirc().is_none());
}

#[test]
fn ct_label_writes_merge_into_one_masked_label_and_recirculated_flows_match_it() {
    let p = text_pipeline(&[
        "table=0, priority=100, ip, ct_state=-trk, actions=ct(commit,exec(set_field:0x1/0x1->ct_label,load:0x5->NXM_NX_CT_LABEL[64..71]),table=1)",
        "table=0, priority=90, ip, actions=ct(commit,exec(set_field:0xabc->ct_label))",
        "table=1, priority=100, ip, ct_label=0x1/0x1, actions=output:2",
        "table=1, priority=50, ip, actions=output:3",
    ]);
    let k = flowtable::text::parse_packet("in_port=1,udp,nw_src=10.0.0.1,nw_dst=10.0.0.2").unwrap();
    let x = xlate(&p, &k);
    assert_eq!(
        x.actions(),
        &[DpAction::Ct {
            zone: 0,
            commit: true,
            force: false,
            table: Some(1),
            nat: None,
            mark: None,
            label: Some((1 | 5 << 64, 1 | 0xff << 64)),
        }]
    );
    assert_eq!(
        flowtable::trace::format_datapath(&x),
        "ct(commit,label=0x50000000000000001/0xff0000000000000001),recirc(table=1)"
    );
    // The datapath sets the connection's label in the recirculated key.
    let mut tracked = x.recirc().copied().unwrap();
    tracked.set(Field::CtState, 0x21);
    tracked.set_ct_label(1 | 5 << 64);
    assert_eq!(outputs(&xlate(&p, &tracked)), vec![2]);
    tracked.set_ct_label(2);
    assert_eq!(outputs(&xlate(&p, &tracked)), vec![3]);

    let mut tracked = k;
    tracked.set(Field::CtState, 0x21);
    let x = xlate(&p, &tracked);
    assert!(matches!(
        x.actions()[0],
        DpAction::Ct {
            label: Some((0xabc, u128::MAX)),
            ..
        }
    ));
}

#[test]
fn conntrack_field_writes_outside_ct_are_refused() {
    // As OVS refuses them ("cannot set CT fields outside of ct action").
    for flow in [
        "ip, actions=set_field:0x1->ct_label",
        "ip, actions=load:0x1->NXM_NX_CT_LABEL[0..3]",
        "ip, actions=move:NXM_NX_REG0[]->NXM_NX_CT_LABEL[0..31]",
        "ip, actions=set_field:0x1->ct_mark",
        "ip, actions=load:0x1->NXM_NX_CT_MARK[]",
        "ip, actions=move:NXM_NX_REG0[]->NXM_NX_CT_MARK[]",
    ] {
        let fm = flowtable::text::parse_flow(flow).unwrap();
        let mut ft = FlowTables::new();
        let e = ft.apply_batch(&[PipelineMod::Flow(fm)]);
        assert!(e.is_err(), "{flow} was accepted");
    }
    let inside =
        "ip, actions=ct(commit,exec(set_field:0x1->ct_mark,load:0x2->NXM_NX_CT_LABEL[0..3]))";
    let mut ft = FlowTables::new();
    let fm = flowtable::text::parse_flow(inside).unwrap();
    assert!(ft.apply_batch(&[PipelineMod::Flow(fm)]).is_ok());
}

#[test]
fn ct_without_table_continues_and_carries_nat() {
    let p = text_pipeline(&[
        "table=0, priority=10, ip, actions=ct(commit,nat(src=10.0.0.10-10.0.0.11:1024-2047)),output:2",
        "table=0, priority=20, ip, nw_dst=10.128.0.5, actions=ct(nat,table=70)",
        "table=70, priority=0, actions=output:5",
    ]);
    let k =
        flowtable::text::parse_packet("in_port=1,udp,nw_src=10.128.0.2,nw_dst=1.1.1.1").unwrap();
    let x = xlate(&p, &k);
    assert_eq!(
        x.actions()[0],
        DpAction::Ct {
            zone: 0,
            commit: true,
            force: false,
            table: None,
            nat: Some(NatSpec::v4(
                NatSpec::SRC,
                0x0a00_000a,
                0x0a00_000b,
                1024,
                2047
            )),
            mark: None,
            label: None
        }
    );
    assert_eq!(outputs(&x), vec![2]);
    assert!(x.recirc().is_none());
    assert_eq!(
        flowtable::trace::format_datapath(&x),
        "ct(commit,nat(src=10.0.0.10-10.0.0.11:1024-2047)),output:2"
    );
    let k =
        flowtable::text::parse_packet("in_port=1,udp,nw_src=1.1.1.1,nw_dst=10.128.0.5").unwrap();
    let x = xlate(&p, &k);
    assert_eq!(
        flowtable::trace::format_datapath(&x),
        "ct(nat),recirc(table=70)"
    );
}

#[test]
fn ct_alg_is_refused_and_a_second_recirculation_drops_by_name() {
    let ct = |table, alg| {
        Action::Ct(CtAction {
            flags: 0,
            zone: CtZone::Immediate(1),
            recirc_table: table,
            alg,
            actions: vec![],
        })
    };
    let (_, p) = build(vec![PipelineMod::Flow(add(
        0,
        1,
        Match::catch_all(),
        vec![ct(Some(3), 0), ct(Some(5), 0), out(2)],
    ))]);
    let x = xlate(&p, &tcp_key(1, 0, 0, 0, 0));
    assert_eq!(
        x.drop_reason(),
        Some(DropReason::Unsupported("two ct(table=N) in one pass"))
    );
    assert!(x.actions().is_empty());
    assert!(x.recirc().is_none());
    // No ALGs: a flow asking for one is refused with BAD_ACTION.
    let mut ft = FlowTables::new();
    let err = ft
        .flow_mod(&add(0, 1, Match::catch_all(), vec![ct(None, 21), out(2)]))
        .unwrap_err();
    assert_eq!(err.ofp_error(), (2, 0), "{err}");
}

#[test]
fn the_cache_returns_the_recirculation_key() {
    let p =
        text_pipeline(&["table=0, priority=100, ip, actions=load:0x7->NXM_NX_REG3[],ct(table=4)"]);
    let k = flowtable::text::parse_packet("in_port=1,tcp,nw_src=10.0.0.1,nw_dst=10.0.0.2").unwrap();
    let mut cache = flowtable::cache::FlowCache::new(16);
    let mut first = Xlate::new();
    cache.xlate(&p, &k, 60, &mut first);
    let mut hit = Xlate::new();
    cache.xlate(&p, &k, 60, &mut hit);
    assert_eq!(cache.stats().hits, 1);
    assert_eq!(hit.actions(), first.actions());
    let r = hit.recirc().copied().unwrap();
    assert_eq!(r.get(Field::Reg(3)), 7);
    assert_eq!(r.recirc_table(), Some(4));
    // A recirculated key is a different cache key than the fresh one.
    let mut again = Xlate::new();
    cache.xlate(&p, &r, 60, &mut again);
    assert_eq!(cache.stats().misses, 2);
}

#[test]
fn replica_follows_modify_and_delete() {
    let mut ft = FlowTables::new();
    let mut p = Pipeline::new();
    p.apply(&ft.flow_mod(&add(0, 1, m_in_port(1), vec![out(2)])).unwrap());
    let mut m = cmd(FlowModCommand::Modify, 0, 0, Match::catch_all());
    m.instructions = Instructions::apply(vec![out(3)]);
    p.apply(&ft.flow_mod(&m).unwrap());
    assert_eq!(outputs(&xlate(&p, &tcp_key(1, 0, 0, 0, 0))), vec![3]);
    p.apply(
        &ft.flow_mod(&cmd(FlowModCommand::Delete, 0, 0, Match::catch_all()))
            .unwrap(),
    );
    assert_eq!(p.n_rules(), 0);
}

#[test]
fn controller_output_reports_table_flow_and_reason() {
    let mut miss = add(
        3,
        0,
        Match::catch_all(),
        vec![Action::Output {
            port: port::CONTROLLER,
            max_len: 128,
        }],
    );
    miss.cookie = 0xc0;
    let mut to3 = add(0, 5, m_in_port(1), vec![]);
    to3.instructions.goto_table = Some(3);
    let mut explicit = add(0, 9, m_in_port(2), vec![out(port::CONTROLLER), out(7)]);
    explicit.cookie = 0xe1;
    let (_, p) = build(vec![
        PipelineMod::Flow(miss),
        PipelineMod::Flow(to3),
        PipelineMod::Flow(explicit),
    ]);
    assert_eq!(
        xlate(&p, &tcp_key(1, 0, 0, 0, 0)).actions(),
        [DpAction::Controller {
            max_len: 128,
            reason: flowtable::pipeline::packet_in_reason::NO_MATCH,
            table_id: 3,
            cookie: 0xc0
        }]
    );
    let x = xlate(&p, &tcp_key(2, 0, 0, 0, 0));
    assert_eq!(
        x.actions().first(),
        Some(&DpAction::Controller {
            max_len: 0,
            reason: flowtable::pipeline::packet_in_reason::ACTION,
            table_id: 0,
            cookie: 0xe1
        })
    );
    assert_eq!(outputs(&x), vec![7]);
}

#[test]
fn controller_output_reports_where_it_ran_as_openflow_1_4_does() {
    use flowtable::pipeline::packet_in_reason as why;
    let reason = |x: &Xlate| {
        x.actions().iter().find_map(|a| match a {
            DpAction::Controller { reason, .. } => Some(*reason),
            _ => None,
        })
    };
    // in_port 1: a group bucket; 2: the action set; 3: a table-miss flow
    // in table 0; output:TABLE from a packet-out reaches it too.
    let mut by_set = add(0, 5, m_in_port(2), vec![]);
    by_set.instructions.write_actions = Some(vec![out(port::CONTROLLER)]);
    let (_, p) = build(vec![
        PipelineMod::Group(group_mod(
            GroupModCommand::Add,
            GroupType::All,
            1,
            vec![vec![out(port::CONTROLLER)]],
        )),
        PipelineMod::Flow(add(0, 5, m_in_port(1), vec![Action::Group(1)])),
        PipelineMod::Flow(by_set),
        PipelineMod::Flow(add(0, 0, Match::catch_all(), vec![out(port::CONTROLLER)])),
    ]);
    assert_eq!(
        reason(&xlate(&p, &tcp_key(1, 0, 0, 0, 0))),
        Some(why::GROUP)
    );
    assert_eq!(
        reason(&xlate(&p, &tcp_key(2, 0, 0, 0, 0))),
        Some(why::ACTION_SET)
    );
    assert_eq!(
        reason(&xlate(&p, &tcp_key(3, 0, 0, 0, 0))),
        Some(why::NO_MATCH)
    );
    let mut x = Xlate::new();
    for actions in [vec![out(port::CONTROLLER)], vec![out(port::TABLE)]] {
        p.xlate_actions(&tcp_key(3, 0, 0, 0, 0), 60, &actions, &mut x);
        assert_eq!(reason(&x), Some(why::PACKET_OUT));
    }
    // Before OpenFlow 1.4 all of them but the miss are ACTION.
    assert_eq!(why::before_14(why::GROUP), why::ACTION);
    assert_eq!(why::before_14(why::NO_MATCH), why::NO_MATCH);
}

#[test]
fn packet_out_actions_and_output_table() {
    let (ft, p) = build(vec![PipelineMod::Flow(add(
        0,
        1,
        m_in_port(1),
        vec![out(2)],
    ))]);
    let key = tcp_key(1, 0, 0, 0, 0);
    let mut x = Xlate::new();
    p.xlate_actions(&key, 60, &[out(5), out(port::TABLE)], &mut x);
    assert_eq!(outputs(&x), vec![5, 2]);
    assert_eq!(ft.flows(&FlowFilter::default())[0].stats.read(), (1, 60));
    // Without a flow for the packet, output:TABLE is a table miss.
    p.xlate_actions(&tcp_key(9, 0, 0, 0, 0), 60, &[out(port::TABLE)], &mut x);
    assert_eq!(x.drop_reason(), Some(DropReason::TableMiss));
}

#[test]
fn normal_output_is_a_datapath_action() {
    let (_, p) = build(vec![PipelineMod::Flow(add(
        0,
        1,
        Match::catch_all(),
        vec![out(port::NORMAL)],
    ))]);
    let x = xlate(&p, &tcp_key(1, 0, 0, 0, 0));
    assert_eq!(x.actions(), [DpAction::Normal]);
    let mut y = Xlate::new();
    y.set_normal();
    assert_eq!(y.actions(), [DpAction::Normal]);
    assert_eq!(y.drop_reason(), None);
}

/// A translation cache slot holds eight datapath actions: an IPv6 NAT
/// range (its first address and a span) must not make them bigger.
#[test]
fn a_datapath_action_stays_96_bytes() {
    assert!(std::mem::size_of::<DpAction>() <= 96);
    assert!(std::mem::size_of::<Option<NatSpec>>() <= 28);
}

/// Group and bucket counters as OVS credits them: a packet through an ALL
/// (or INDIRECT) group counts in every bucket, through a SELECT or
/// FAST_FAILOVER group in the bucket that ran, and in nothing (not even
/// the group) when no bucket could run.
#[test]
fn group_and_bucket_counters_count_as_ovs_credits_them() {
    let mut ff = group_mod(
        GroupModCommand::Add,
        GroupType::FastFailover,
        3,
        vec![vec![out(2)], vec![out(3)]],
    );
    ff.buckets[0].watch_port = 2;
    ff.buckets[1].watch_port = 3;
    let (ft, mut p) = build(vec![
        PipelineMod::Group(group_mod(
            GroupModCommand::Add,
            GroupType::All,
            1,
            vec![vec![out(2)], vec![out(3)]],
        )),
        PipelineMod::Group(group_mod(
            GroupModCommand::Add,
            GroupType::Select,
            2,
            vec![vec![out(2)], vec![out(3)]],
        )),
        PipelineMod::Group(ff),
        PipelineMod::Flow(add(0, 1, m_in_port(1), vec![Action::Group(1)])),
        PipelineMod::Flow(add(0, 1, m_in_port(2), vec![Action::Group(2)])),
        PipelineMod::Flow(add(0, 1, m_in_port(5), vec![Action::Group(3)])),
    ]);
    let counts = |id| {
        let g = ft.group(id).unwrap();
        let buckets: Vec<(u64, u64)> = g.bucket_stats.iter().map(|b| b.read()).collect();
        (g.stats.read(), buckets)
    };
    xlate(&p, &tcp_key(1, 1, 2, 3, 4));
    assert_eq!(counts(1), ((1, 100), vec![(1, 100), (1, 100)]));
    let o = outputs(&xlate(&p, &tcp_key(2, 1, 2, 3, 4)));
    let (group, buckets) = counts(2);
    assert_eq!(group, (1, 100));
    let chosen = if o == [2] { 0 } else { 1 };
    assert_eq!(buckets[chosen], (1, 100));
    assert_eq!(buckets[1 - chosen], (0, 0));
    // No live bucket: nothing ran, nothing counts.
    assert!(outputs(&xlate(&p, &tcp_key(5, 1, 2, 3, 4))).is_empty());
    assert_eq!(counts(3), ((0, 0), vec![(0, 0), (0, 0)]));
    p.set_live_ports([3]);
    assert_eq!(outputs(&xlate(&p, &tcp_key(5, 1, 2, 3, 4))), vec![3]);
    assert_eq!(counts(3), ((1, 100), vec![(0, 0), (1, 100)]));
}

/// A modified group keeps each bucket's counters by bucket id; a new
/// bucket starts at zero.
#[test]
fn a_modified_group_keeps_its_buckets_counters() {
    let mut ft = FlowTables::new();
    let g = |buckets| group_mod(GroupModCommand::Add, GroupType::All, 1, buckets);
    ft.group_mod(&g(vec![vec![out(2)], vec![out(3)]])).unwrap();
    let before = ft.group(1).unwrap();
    before.bucket_stats[1].packets.store(1, Relaxed);
    before.bucket_stats[1].bytes.store(7, Relaxed);
    let mut m = g(vec![vec![out(2)], vec![out(4)], vec![out(5)]]);
    m.command = GroupModCommand::Modify;
    ft.group_mod(&m).unwrap();
    let after = ft.group(1).unwrap();
    let read: Vec<(u64, u64)> = after.bucket_stats.iter().map(|b| b.read()).collect();
    assert_eq!(read, vec![(0, 0), (1, 7), (0, 0)]);
    assert_eq!(after.created, before.created);
}
