//! MPLS: matches on the top label stack entry, push_mpls, pop_mpls,
//! set_field of the entry's parts, set_mpls_ttl and dec_mpls_ttl:
//! translation, validation (with the OpenFlow errors), group buckets and
//! the text syntax as OVS 3.1 prints it.

mod common;

use common::*;
use flowtable::matching::{ETH_TYPE_ARP, ETH_TYPE_MPLS};
use flowtable::pipeline::packet_in_reason;
use flowtable::*;
use proptest::prelude::*;

fn build(mods: Vec<PipelineMod>) -> Result<Pipeline, ModError> {
    let mut ft = FlowTables::new();
    let mut p = Pipeline::with_counters(ft.counters());
    let changes = ft.apply_batch(&mods).map_err(|(_, e)| e)?;
    p.apply(&changes);
    Ok(p)
}

fn flow(text: &str) -> PipelineMod {
    PipelineMod::Flow(text::parse_flow(text).unwrap_or_else(|e| panic!("{text}: {e}")))
}

fn pipeline(flows: &[&str]) -> Pipeline {
    build(flows.iter().map(|f| flow(f)).collect()).unwrap()
}

/// The OpenFlow (type, code) a single flow is refused with.
fn refused(text: &str) -> (u16, u16) {
    match build(vec![flow(text)]) {
        Ok(_) => panic!("{text} was accepted"),
        Err(e) => e.ofp_error(),
    }
}

fn lse(label: u32, tc: u32, bos: u32, ttl: u32) -> u32 {
    label << 12 | tc << 9 | bos << 8 | ttl
}

fn ipv4_key(in_port: u32, ttl: u64) -> FlowKey {
    let mut k = tcp_key(in_port, 0x0a00_0001, 0x0a00_0002, 1000, 80);
    k.set(Field::IpTtl, ttl);
    k
}

fn mpls_key(in_port: u32, label: u64, tc: u64, bos: u64, ttl: u64) -> FlowKey {
    let mut k = FlowKey::zero();
    k.set(Field::InPort, u64::from(in_port));
    k.set(Field::EthType, u64::from(ETH_TYPE_MPLS));
    k.set(Field::MplsLabel, label);
    k.set(Field::MplsTc, tc);
    k.set(Field::MplsBos, bos);
    k.set(Field::MplsTtl, ttl);
    k
}

/// The datapath actions that change the packet, outputs as `Output`.
fn changes(x: &Xlate) -> Vec<DpAction> {
    x.actions()
        .iter()
        .map(|a| match a {
            DpAction::Output { port, .. } => DpAction::Output {
                port: *port,
                tun_id: 0,
                tun_dst: 0,
            },
            a => *a,
        })
        .collect()
}

fn output(port: u32) -> DpAction {
    DpAction::Output {
        port,
        tun_id: 0,
        tun_dst: 0,
    }
}

fn set(field: Field, value: u64) -> DpAction {
    DpAction::SetField { field, value }
}

/// Each pair: what a controller writes, what `ovs-ofctl -O OpenFlow13
/// parse-flow` of OVS 3.1 prints for it, but for `set_field:0->mpls_bos`,
/// which ovs-ofctl refuses (OVS keeps mpls_bos read-only) and xbr takes,
/// as OF1.3's SET_FIELD allows it and os-ken tests it.
#[test]
fn text_round_trips_as_ovs_prints_it() {
    for (text, dumped) in [
        (
            "mpls,mpls_label=10,mpls_tc=3,mpls_bos=1,mpls_ttl=64,actions=dec_mpls_ttl,output:2",
            "mpls,mpls_label=10,mpls_tc=3,mpls_ttl=64,mpls_bos=1 actions=dec_mpls_ttl,output:2",
        ),
        (
            "dl_type=0x8848,mpls_label=0xfffff,actions=pop_mpls:0x8847,output:1",
            "mplsm,mpls_label=1048575 actions=pop_mpls:0x8847,output:1",
        ),
        (
            "ip,actions=push_mpls:34887,set_field:10->mpls_label,set_mpls_ttl(5),output:2",
            "ip actions=push_mpls:0x8847,set_field:10->mpls_label,set_mpls_ttl(5),output:2",
        ),
        (
            "mpls,actions=set_mpls_ttl:9,set_mpls_label(7),set_mpls_tc(2),set_field:0->mpls_bos,pop_mpls:0x0800,output:2",
            "mpls actions=set_mpls_ttl(9),set_field:7->mpls_label,set_field:2->mpls_tc,set_field:0->mpls_bos,pop_mpls:0x0800,output:2",
        ),
    ] {
        let fm = text::parse_flow(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        let printed = format!(
            "{} actions={}",
            text::format_match(&fm.matching, fm.priority),
            text::format_instructions(&fm.instructions)
        );
        assert_eq!(printed, dumped, "{text}");
        let again = text::parse_flow(&dumped.replace(" actions=", ",actions=")).unwrap();
        assert_eq!(again.matching, fm.matching, "{dumped}");
        assert_eq!(again.instructions, fm.instructions, "{dumped}");
    }
}

#[test]
fn text_refuses_what_ovs_refuses() {
    for bad in [
        "mpls_label=1,actions=drop",             // no mpls prerequisite
        "ip,mpls_tc=1,actions=drop",             // not MPLS
        "mpls,mpls_label=1/0xff,actions=drop",   // not maskable
        "mpls,mpls_bos=2,actions=drop",          // 1 bit
        "mpls,mpls_label=0x100000,actions=drop", // 20 bits
        "mpls,actions=set_mpls_ttl(256)",
        "mpls,actions=push_mpls",
        "mpls,actions=pop_mpls:0x10000",
        "mpls,actions=dec_mpls_ttl(1)",
    ] {
        assert!(text::parse_flow(bad).is_err(), "{bad} was accepted");
    }
}

/// OVS's checks and errors: push_mpls only of an MPLS ethertype
/// (BAD_ARGUMENT); pop_mpls, set_mpls_ttl and dec_mpls_ttl only on MPLS
/// flows (MATCH_INCONSISTENT); set_field of the label stack entry with
/// the MPLS prerequisite (BAD_PREREQ), which a push earlier in the list
/// meets and which IP fields then no longer meet.
#[test]
fn validation_follows_the_eth_type_through_pushes_and_pops() {
    assert_eq!(refused("ip,actions=push_mpls:0x0800,output:2"), (2, 5));
    assert_eq!(refused("ip,actions=pop_mpls:0x0800,output:2"), (2, 10));
    assert_eq!(refused("ip,actions=dec_mpls_ttl,output:2"), (2, 10));
    assert_eq!(
        refused("in_port=1,actions=set_mpls_ttl(3),output:2"),
        (2, 10)
    );
    assert_eq!(refused("ip,actions=set_field:1->mpls_label"), (4, 9));
    assert_eq!(
        refused("ip,actions=push_mpls:0x8847,set_field:10.0.0.1->nw_dst"),
        (4, 9)
    );
    assert_eq!(
        refused("mpls,actions=pop_mpls:0x0800,dec_mpls_ttl"),
        (2, 10)
    );
    // MPLS actions are apply-actions only.
    assert_eq!(
        refused("mpls,actions=write_actions(pop_mpls:0x0800,output:2)"),
        (2, 0)
    );
    // What a received label hides is not in the key: refused, not guessed
    // (a goto_table gets there by recirculation, which carries no action
    // set).
    assert_eq!(
        refused("mpls,actions=pop_mpls:0x0800,dec_ttl,output:2"),
        (2, 0)
    );
    assert_eq!(
        refused("actions=pop_mpls:0x0800,set_field:1->ip_dscp"),
        (2, 0)
    );
    assert_eq!(
        refused("mpls,actions=pop_mpls:0x0800,write_actions(output:2),goto_table:1"),
        (2, 0)
    );
    pipeline(&[
        "mpls,actions=pop_mpls:0x0800,goto_table:1",
        "mpls,mpls_bos=0,actions=pop_mpls:0x8847,goto_table:1",
        // Unlike OVS, a pop on a flow that may see MPLS is taken.
        "actions=pop_mpls:0x86dd,goto_table:1",
        "ip,actions=push_mpls:0x8847,set_field:5->mpls_label,dec_mpls_ttl,output:2",
        "ip,nw_dst=10.0.0.2,actions=push_mpls:0x8848,pop_mpls:0x0800,dec_ttl,output:2",
        "mpls,actions=pop_mpls:0x8847,pop_mpls:0x0800,output:2",
    ]);
}

/// A pushed entry copies the top one of an MPLS packet with BOS clear;
/// otherwise it is label 0, TC 0, BOS set, with the IP TTL or TTL 0 for
/// a packet that is not IP. Two pushes: the inner entry is the bottom.
#[test]
fn push_mpls_builds_the_entry_as_openflow_1_3_says() {
    let p = pipeline(&[
        "in_port=1,actions=push_mpls:0x8847,output:2",
        "in_port=3,actions=push_mpls:0x8847,push_mpls:0x8847,output:2",
    ]);
    let x = xlate(&p, &ipv4_key(1, 37));
    assert_eq!(
        changes(&x),
        vec![
            DpAction::PushMpls {
                ethertype: 0x8847,
                lse: lse(0, 0, 1, 37),
            },
            output(2)
        ]
    );
    let mut arp = FlowKey::zero();
    arp.set(Field::InPort, 1);
    arp.set(Field::EthType, u64::from(ETH_TYPE_ARP));
    let x = xlate(&p, &arp);
    assert_eq!(
        changes(&x)[0],
        DpAction::PushMpls {
            ethertype: 0x8847,
            lse: lse(0, 0, 1, 0),
        }
    );
    let x = xlate(&p, &mpls_key(1, 100, 3, 1, 64));
    assert_eq!(
        changes(&x)[0],
        DpAction::PushMpls {
            ethertype: 0x8847,
            lse: lse(100, 3, 0, 64),
        }
    );
    let x = xlate(&p, &ipv4_key(3, 9));
    assert_eq!(
        changes(&x),
        vec![
            DpAction::PushMpls {
                ethertype: 0x8847,
                lse: lse(0, 0, 1, 9),
            },
            DpAction::PushMpls {
                ethertype: 0x8847,
                lse: lse(0, 0, 0, 9),
            },
            output(2)
        ]
    );
    // The megaflow depends on what the push read.
    let w = x.wildcards();
    assert_eq!(w.get(Field::EthType), 0xffff);
    assert_eq!(w.get(Field::IpTtl), 0xff);
}

#[test]
fn label_rewrites_and_ttls() {
    let p = pipeline(&[
        "mpls,in_port=1,mpls_label=100,actions=set_field:203->mpls_label,set_field:5->mpls_tc,set_field:0->mpls_bos,output:2",
        "mpls,in_port=2,actions=set_mpls_ttl(127),output:3",
        "mpls,in_port=3,actions=output:4,dec_mpls_ttl,output:2",
        "mpls,in_port=4,actions=pop_mpls:0x0800,output:2",
        "ip,in_port=5,actions=push_mpls:0x8847,set_field:7->mpls_label,dec_mpls_ttl,pop_mpls:0x0800,dec_ttl,output:2",
    ]);
    let x = xlate(&p, &mpls_key(1, 100, 3, 1, 64));
    assert_eq!(
        changes(&x),
        vec![
            set(Field::MplsLabel, 203),
            set(Field::MplsTc, 5),
            set(Field::MplsBos, 0),
            output(2)
        ]
    );
    let x = xlate(&p, &mpls_key(2, 100, 3, 1, 64));
    assert_eq!(changes(&x), vec![set(Field::MplsTtl, 127), output(3)]);
    let x = xlate(&p, &mpls_key(3, 100, 3, 1, 64));
    assert_eq!(
        changes(&x),
        vec![output(4), set(Field::MplsTtl, 63), output(2)]
    );
    assert_eq!(x.wildcards().get(Field::MplsTtl), 0xff);
    let x = xlate(&p, &mpls_key(4, 100, 3, 1, 64));
    assert_eq!(
        changes(&x),
        vec![DpAction::PopMpls { ethertype: 0x0800 }, output(2)]
    );
    // A label pushed and popped again uncovers the IP header the key
    // still knows: dec_ttl works on it.
    let x = xlate(&p, &ipv4_key(5, 64));
    assert_eq!(
        changes(&x),
        vec![
            DpAction::PushMpls {
                ethertype: 0x8847,
                lse: lse(0, 0, 1, 64),
            },
            set(Field::MplsLabel, 7),
            set(Field::MplsTtl, 63),
            DpAction::PopMpls { ethertype: 0x0800 },
            set(Field::IpTtl, 63),
            output(2)
        ]
    );
}

/// copy_ttl_out/in: a rewrite where the key holds both TTLs (a label
/// pushed onto IP), else the datapath's copy; after copying a TTL the key
/// does not hold, a goto_table recirculates.
#[test]
fn ttl_copies() {
    let p = pipeline(&[
        "ip,in_port=1,actions=push_mpls:0x8847,set_mpls_ttl(9),copy_ttl_in,set_mpls_ttl(70),copy_ttl_out,pop_mpls:0x0800,output:2",
        "mpls,in_port=2,actions=copy_ttl_in,copy_ttl_out,output:3",
        "mpls,in_port=3,actions=copy_ttl_out,goto_table:1",
        "table=1,actions=output:4",
    ]);
    let x = xlate(&p, &ipv4_key(1, 64));
    assert_eq!(
        changes(&x),
        vec![
            DpAction::PushMpls {
                ethertype: 0x8847,
                lse: lse(0, 0, 1, 64),
            },
            set(Field::MplsTtl, 9),
            DpAction::CopyTtl { out: false },
            DpAction::PopMpls { ethertype: 0x0800 },
            output(2)
        ],
        "the second copy_ttl_out put back 9, which the pop took away"
    );
    let x = xlate(&p, &mpls_key(2, 1, 0, 1, 64));
    assert_eq!(
        changes(&x),
        vec![
            DpAction::CopyTtl { out: false },
            DpAction::CopyTtl { out: true },
            output(3)
        ]
    );
    let x = xlate(&p, &mpls_key(3, 1, 0, 1, 64));
    assert_eq!(
        changes(&x),
        vec![DpAction::CopyTtl { out: true }, DpAction::Recirc]
    );
    let text = "mpls,actions=copy_ttl_out,copy_ttl_in,output:2";
    let fm = text::parse_flow(text).unwrap();
    assert_eq!(
        text::format_instructions(&fm.instructions),
        "copy_ttl_out,copy_ttl_in,output:2"
    );
    assert_eq!(refused("ip,actions=copy_ttl_in,output:2"), (2, 10));
    assert_eq!(
        refused("mpls,actions=copy_ttl_out,dec_mpls_ttl,output:2"),
        (2, 0)
    );
}

/// As dec_ttl: at TTL 1 or 0 the packet goes no further than where it
/// is, and controllers that asked get reason INVALID_TTL.
#[test]
fn dec_mpls_ttl_at_one_ends_with_an_invalid_ttl_packet_in() {
    let p = pipeline(&["mpls,actions=output:4,dec_mpls_ttl,output:2"]);
    for ttl in [0, 1] {
        let x = xlate(&p, &mpls_key(1, 100, 3, 1, ttl));
        assert_eq!(outputs(&x), vec![4], "ttl {ttl}");
        assert!(x.actions().iter().any(|a| matches!(
            a,
            DpAction::Controller { reason, .. } if *reason == packet_in_reason::INVALID_TTL
        )));
    }
    let p = pipeline(&["mpls,actions=dec_mpls_ttl,output:2"]);
    let x = xlate(&p, &mpls_key(1, 100, 3, 1, 1));
    assert!(outputs(&x).is_empty());
    assert!(!x
        .actions()
        .iter()
        .any(|a| matches!(a, DpAction::SetField { .. })));
}

/// Each bucket of an ALL group sees the packet as it came: a bucket's
/// push is popped again (and a pop pushed back) before the next one.
#[test]
fn group_buckets_undo_their_pushes_and_pops() {
    let mut ft = FlowTables::new();
    let mut p = Pipeline::with_counters(ft.counters());
    let g = group_mod(
        GroupModCommand::Add,
        GroupType::All,
        1,
        vec![
            vec![Action::PushMpls(0x8847), out(2)],
            vec![Action::PopMpls(0x0800), out(3)],
            vec![out(4)],
        ],
    );
    p.apply(&ft.group_mod(&g).unwrap());
    let changes_of = |p: &mut Pipeline, ft: &mut FlowTables, text: &str, key: &FlowKey| {
        p.apply(&ft.apply_batch(&[flow(text)]).unwrap());
        changes(&xlate(p, key))
    };
    let x = changes_of(&mut p, &mut ft, "ip,actions=group:1", &ipv4_key(1, 64));
    let push = DpAction::PushMpls {
        ethertype: 0x8847,
        lse: lse(0, 0, 1, 64),
    };
    let pop_ip = DpAction::PopMpls { ethertype: 0x0800 };
    // The IP packet has nothing to pop in the second bucket.
    assert_eq!(x, vec![push, output(2), pop_ip, output(3), output(4)]);
    let x = changes_of(
        &mut p,
        &mut ft,
        "mpls,actions=group:1",
        &mpls_key(1, 9, 1, 1, 5),
    );
    let push_back = DpAction::PushMpls {
        ethertype: 0x8847,
        lse: lse(9, 1, 1, 5),
    };
    assert_eq!(
        x,
        vec![
            DpAction::PushMpls {
                ethertype: 0x8847,
                lse: lse(9, 1, 0, 5),
            },
            output(2),
            DpAction::PopMpls { ethertype: 0x8847 },
            pop_ip,
            output(3),
            push_back,
            output(4)
        ]
    );
}

/// After a received label is popped, goto_table recirculates: the
/// datapath parses the packet again and the walk resumes at the next
/// table with the metadata as the actions left it. A packet without a
/// label goes straight on.
#[test]
fn goto_after_popping_a_received_label_recirculates() {
    let p = pipeline(&[
        "actions=pop_mpls:0x0800,set_field:0x5->reg0,goto_table:1",
        "table=1,ip,reg0=0x5,nw_ttl=64,actions=dec_ttl,output:3",
    ]);
    let x = xlate(&p, &mpls_key(1, 100, 3, 1, 64));
    assert_eq!(
        changes(&x),
        vec![DpAction::PopMpls { ethertype: 0x0800 }, DpAction::Recirc]
    );
    let mut next = *x.recirc().expect("a recirculation key");
    assert_eq!(next.recirc_table(), Some(1));
    assert_eq!(next.get(Field::Reg(0)), 5);
    // What the datapath parses from the popped packet.
    next.set_headers_from(&ipv4_key(1, 64));
    let x = xlate(&p, &next);
    assert_eq!(changes(&x), vec![set(Field::IpTtl, 63), output(3)]);
    // A packet without a label: nothing popped, no recirculation (reg0 is
    // set by the first flow on this path too).
    let x = xlate(&p, &ipv4_key(1, 64));
    assert_eq!(changes(&x), vec![set(Field::IpTtl, 63), output(3)]);
    assert!(x.recirc().is_none());
}

/// After a received label is popped, a table lookup that is not the
/// flow's last step (here through resubmit, which validation cannot see
/// with the pop) would match headers the key does not hold: the packet
/// is dropped as unsupported.
#[test]
fn lookups_after_popping_a_received_label_are_refused() {
    let p = pipeline(&[
        "mpls,actions=pop_mpls:0x0800,resubmit(,1),output:2",
        "table=1,ip,actions=output:3",
    ]);
    let x = xlate(&p, &mpls_key(1, 100, 3, 1, 64));
    assert!(outputs(&x).is_empty());
    assert!(matches!(x.drop_reason(), Some(DropReason::Unsupported(_))));
}

/// A pushed label whose entry changed is matched by the next table as
/// pushed and changed.
#[test]
fn later_tables_match_the_pushed_entry() {
    let p = pipeline(&[
        "ip,actions=push_mpls:0x8847,set_field:77->mpls_label,goto_table:1",
        "table=1,mpls,mpls_label=77,mpls_bos=1,mpls_ttl=64,actions=output:3",
    ]);
    let x = xlate(&p, &ipv4_key(1, 64));
    assert_eq!(outputs(&x), vec![3]);
    let w = x.wildcards();
    assert_eq!(w.get(Field::MplsLabel), 0xf_ffff);
}

proptest! {
    /// Any label stack entry match and MPLS action arguments print and
    /// parse back to the same flow.
    #[test]
    fn mpls_flows_round_trip_as_text(
        label in 0u64..1 << 20,
        tc in 0u64..8,
        bos in 0u64..2,
        ttl in 0u64..256,
        mcast in any::<bool>(),
        set_ttl in any::<u8>(),
        pop_to in any::<u16>(),
        new_label in 0u64..1 << 20,
    ) {
        let mut m = Match::catch_all();
        m.set_exact(Field::EthType, if mcast { 0x8848 } else { 0x8847 });
        m.set_exact(Field::MplsLabel, label);
        m.set_exact(Field::MplsTc, tc);
        m.set_exact(Field::MplsBos, bos);
        m.set_exact(Field::MplsTtl, ttl);
        let actions = vec![
            Action::SetMplsTtl(set_ttl),
            Action::DecMplsTtl,
            Action::SetField { field: Field::MplsLabel, value: new_label },
            Action::PushMpls(0x8847),
            Action::PopMpls(pop_to),
            out(2),
        ];
        let text = format!(
            "{},actions={}",
            text::format_match(&m, 0x8000),
            text::format_actions(&actions)
        );
        let fm = text::parse_flow(&text).unwrap();
        prop_assert_eq!(fm.matching, m);
        prop_assert_eq!(fm.instructions.apply_actions, Some(actions));
    }
}
