//! PBB (802.1ah): matches on the I-SID, push_pbb, pop_pbb and set_field
//! of pbb_isid: translation, validation with the OpenFlow errors, group
//! buckets and the text syntax (OVS has no PBB; xbr prints it as it
//! prints other integer fields).

mod common;

use common::*;
use flowtable::matching::ETH_TYPE_PBB;
use flowtable::*;

fn pipeline(flows: &[&str]) -> Pipeline {
    let mut ft = FlowTables::new();
    let mut p = Pipeline::with_counters(ft.counters());
    let mods: Vec<PipelineMod> = flows
        .iter()
        .map(|f| PipelineMod::Flow(text::parse_flow(f).unwrap_or_else(|e| panic!("{f}: {e}"))))
        .collect();
    p.apply(&ft.apply_batch(&mods).unwrap());
    p
}

fn refused(text: &str) -> (u16, u16) {
    let mut ft = FlowTables::new();
    let fm = text::parse_flow(text).unwrap_or_else(|e| panic!("{text}: {e}"));
    match ft.apply_batch(&[PipelineMod::Flow(fm)]) {
        Ok(_) => panic!("{text} was accepted"),
        Err((_, e)) => e.ofp_error(),
    }
}

fn pbb_key(in_port: u32, isid: u64) -> FlowKey {
    let mut k = FlowKey::zero();
    k.set(Field::InPort, u64::from(in_port));
    k.set(Field::EthDst, 0x22_2222_2222);
    k.set(Field::EthSrc, 0x12_1111_1111);
    k.set(Field::EthType, u64::from(ETH_TYPE_PBB));
    k.set(Field::PbbIsid, isid);
    k
}

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

#[test]
fn text_round_trips() {
    for (text, printed) in [
        (
            "dl_type=0x88e7,pbb_isid=100,actions=pop_pbb,output:2",
            "dl_type=0x88e7,pbb_isid=100 actions=pop_pbb,output:2",
        ),
        (
            "dl_type=0x88e7,pbb_isid=0x64/0xff,actions=set_field:203->pbb_isid,output:2",
            "dl_type=0x88e7,pbb_isid=0x64/0xff actions=set_field:203->pbb_isid,output:2",
        ),
        (
            "ip,actions=push_pbb:0x88e7,push_pbb:35047,output:2",
            "ip actions=push_pbb:0x88e7,push_pbb:0x88e7,output:2",
        ),
    ] {
        let fm = text::parse_flow(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        let got = format!(
            "{} actions={}",
            text::format_match(&fm.matching, fm.priority),
            text::format_instructions(&fm.instructions)
        );
        assert_eq!(got, printed, "{text}");
        let again = text::parse_flow(&printed.replace(" actions=", ",actions=")).unwrap();
        assert_eq!(
            (again.matching, again.instructions),
            (fm.matching, fm.instructions)
        );
    }
    for bad in [
        "pbb_isid=1,actions=drop",
        "ip,pbb_isid=1,actions=drop",
        "dl_type=0x88e7,pbb_isid=0x1000000,actions=drop",
        "ip,actions=push_pbb",
        "dl_type=0x88e7,actions=pop_pbb(1)",
    ] {
        assert!(text::parse_flow(bad).is_err(), "{bad} was accepted");
    }
}

#[test]
fn validation() {
    assert_eq!(refused("ip,actions=push_pbb:0x8100,output:2"), (2, 5));
    assert_eq!(refused("ip,actions=pop_pbb,output:2"), (2, 10));
    assert_eq!(refused("ip,actions=set_field:1->pbb_isid"), (4, 9));
    // Behind a received tag the key knows nothing, not even Ethernet.
    assert_eq!(
        refused("actions=pop_pbb,set_field:00:00:00:00:00:01->eth_dst"),
        (2, 0)
    );
    assert_eq!(refused("actions=pop_pbb,push_vlan:0x8100,output:2"), (2, 0));
    pipeline(&[
        "actions=pop_pbb,goto_table:1",
        "dl_type=0x88e7,actions=pop_pbb,set_field:0x1->reg0,output:2",
        "ip,actions=push_pbb:0x88e7,set_field:7->pbb_isid,pop_pbb,dec_ttl,output:2",
    ]);
}

#[test]
fn translation() {
    let p = pipeline(&[
        "in_port=1,actions=push_pbb:0x88e7,output:2",
        "in_port=3,actions=push_pbb:0x88e7,push_pbb:0x88e7,set_field:9->pbb_isid,output:2",
        "in_port=4,dl_type=0x88e7,pbb_isid=100,actions=set_field:203->pbb_isid,output:2",
        "in_port=5,actions=pop_pbb,goto_table:1",
        "ip,in_port=6,actions=push_pbb:0x88e7,set_field:02:00:00:00:00:01->eth_dst,pop_pbb,output:2",
        "table=1,ip,actions=output:3",
    ]);
    let ip = tcp_key(1, 1, 2, 3, 4);
    assert_eq!(
        changes(&xlate(&p, &ip)),
        vec![DpAction::PushPbb { isid: 0 }, output(2)]
    );
    // A second tag copies the I-SID; the rewrite is of the outer one.
    assert_eq!(
        changes(&xlate(&p, &tcp_key(3, 1, 2, 3, 4))),
        vec![
            DpAction::PushPbb { isid: 0 },
            DpAction::PushPbb { isid: 0 },
            DpAction::SetField {
                field: Field::PbbIsid,
                value: 9
            },
            output(2)
        ]
    );
    assert_eq!(
        changes(&xlate(&p, &pbb_key(1, 100))),
        vec![DpAction::PushPbb { isid: 100 }, output(2)]
    );
    assert_eq!(
        changes(&xlate(&p, &pbb_key(4, 100))),
        vec![
            DpAction::SetField {
                field: Field::PbbIsid,
                value: 203
            },
            output(2)
        ]
    );
    // A received tag: the customer frame is parsed again for table 1.
    let x = xlate(&p, &pbb_key(5, 100));
    assert_eq!(changes(&x), vec![DpAction::PopPbb, DpAction::Recirc]);
    assert_eq!(x.recirc().and_then(|k| k.recirc_table()), Some(1));
    // A tag pushed and popped again: the frame is as the key says, and the
    // rewrite of the outer destination went with the outer header.
    let x = xlate(&p, &tcp_key(6, 1, 2, 3, 4));
    assert_eq!(
        changes(&x),
        vec![
            DpAction::PushPbb { isid: 0 },
            DpAction::SetField {
                field: Field::EthDst,
                value: 0x0200_0000_0001
            },
            DpAction::PopPbb,
            output(2)
        ]
    );
}

#[test]
fn group_buckets_undo_their_pushes() {
    let mut ft = FlowTables::new();
    let mut p = Pipeline::with_counters(ft.counters());
    let g = group_mod(
        GroupModCommand::Add,
        GroupType::All,
        1,
        vec![vec![Action::PushPbb(0x88e7), out(2)], vec![out(3)]],
    );
    p.apply(&ft.group_mod(&g).unwrap());
    let fm = text::parse_flow("ip,actions=group:1").unwrap();
    p.apply(&ft.apply_batch(&[PipelineMod::Flow(fm)]).unwrap());
    assert_eq!(
        changes(&xlate(&p, &tcp_key(1, 1, 2, 3, 4))),
        vec![
            DpAction::PushPbb { isid: 0 },
            output(2),
            DpAction::PopPbb,
            output(3)
        ]
    );
}
