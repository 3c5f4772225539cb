use super::*;
use crate::action::{port, Action, SubField};
use crate::flow_mod::FlowModCommand;
use crate::key::Field;

#[test]
fn flow_with_load_and_goto() {
    let fm = parse_flow(
        "table=20, priority=100, ip, in_port=3, nw_src=10.128.0.2, actions=load:0x2a->NXM_NX_REG0[], goto_table:21",
    )
    .unwrap();
    assert_eq!(fm.table_id, 20);
    assert_eq!(fm.priority, 100);
    assert_eq!(fm.matching.exact(Field::InPort), Some(3));
    assert_eq!(fm.matching.exact(Field::IpSrc), Some(0x0a80_0002));
    assert_eq!(fm.instructions.goto_table, Some(21));
    assert_eq!(
        fm.instructions.apply_actions,
        Some(vec![Action::RegLoad {
            dst: SubField::whole(Field::Reg(0)),
            value: 0x2a
        }])
    );
}

#[test]
fn masked_set_field_becomes_load() {
    let fm = parse_flow("table=10, actions=set_field:0a:58:00:00:00:00/ff:ff:00:00:00:00->eth_dst")
        .unwrap();
    assert_eq!(
        fm.instructions.apply_actions,
        Some(vec![Action::RegLoad {
            dst: SubField {
                field: Field::EthDst,
                ofs: 32,
                nbits: 16,
                named: None,
            },
            value: 0x0a58
        }])
    );
}

#[test]
fn delete_defaults_to_all_tables_and_takes_cookie_mask() {
    let m = parse_bundle_line("flow delete cookie=1147582955/-1, table=27").unwrap();
    let PipelineMod::Flow(fm) = m else {
        panic!("not a flow mod")
    };
    assert_eq!(fm.command, FlowModCommand::Delete);
    assert_eq!(fm.cookie_mask, u64::MAX);
    assert_eq!(fm.table_id, 27);
    let PipelineMod::Flow(fm) = parse_bundle_line("flow delete ip, nw_dst=10.128.0.50").unwrap()
    else {
        panic!("not a flow mod")
    };
    assert_eq!(fm.table_id, crate::action::TABLE_ALL);
}

#[test]
fn group_buckets_split_without_commas() {
    let mut names = PortNames::new();
    names.insert("vxlan0".into(), 1);
    let g = parse_group_with(
        "group_id=7,type=select,bucket=actions=set_field:10.0.0.12->tun_dst,output:vxlan0bucket=actions=output:vxlan0",
        &names,
    )
    .unwrap();
    assert_eq!(g.buckets.len(), 2);
    assert_eq!(
        g.buckets[1].actions,
        vec![Action::Output {
            port: 1,
            max_len: 0
        }]
    );
    assert!(parse_group("group_id=7,type=select,bucket=actions=output:vxlan0").is_err());
}

#[test]
fn errors_name_the_token() {
    let e = parse_flow("table=0, nw_srcc=1.2.3.4, actions=drop").unwrap_err();
    assert_eq!(e, TextError::UnknownField("nw_srcc".into()));
    let e = parse_flow("table=0, tp_dst=80, actions=drop").unwrap_err();
    assert!(e.to_string().contains("tp_dst"), "{e}");
    let e = parse_flow("table=0, udp, tcp_dst=80, actions=drop").unwrap_err();
    assert!(e.to_string().contains("tcp_dst"), "{e}");
    let e = parse_flow("ip, actions=load:0x1ffffffff->NXM_NX_REG0[]").unwrap_err();
    assert!(e.to_string().contains("load:0x1ffffffff"), "{e}");
    let e = parse_flow("ip, actions=ct(commit").unwrap_err();
    assert!(matches!(e, TextError::Unbalanced(_)), "{e}");
    assert_eq!(parse_flow("ip").unwrap_err(), TextError::MissingActions);
    assert!(parse_flow("nw_src=1.2.3.4/33, ip, actions=drop").is_err());
    assert!(parse_bundle_line("flow frobnicate ip").is_err());
}

#[test]
fn resubmit_forms() {
    let fm = parse_flow("actions=resubmit:10,resubmit(,20),resubmit(LOCAL,30),IN_PORT").unwrap();
    assert_eq!(
        fm.instructions.apply_actions.unwrap(),
        vec![
            Action::Resubmit {
                in_port: 10,
                table: None
            },
            Action::Resubmit {
                in_port: port::IN_PORT,
                table: Some(20)
            },
            Action::Resubmit {
                in_port: port::LOCAL,
                table: Some(30)
            },
            Action::Output {
                port: port::IN_PORT,
                max_len: 0
            },
        ]
    );
}

#[test]
fn match_prints_in_ovs_order() {
    let m = parse_match("tcp, tp_dst=0x7530/0xfff0, reg0=5, ct_state=+trk-est, in_port=3, nw_src=10.0.0.0/255.0.255.0").unwrap();
    assert_eq!(
        format_match(&m, 150),
        "priority=150,ct_state=-est+trk,tcp,reg0=0x5,in_port=3,nw_src=10.0.0.0/255.0.255.0,tp_dst=0x7530/0xfff0"
    );
    let m = parse_match("ip, nw_dst=172.30.0.1, ip_frag=later").unwrap();
    assert_eq!(
        format_match(&m, 0x8000),
        "ip,nw_dst=172.30.0.1,nw_frag=later"
    );
}

#[test]
fn ct_and_note_print_as_ovs() {
    let fm = parse_flow("actions=ct(nat,table=70)").unwrap();
    assert_eq!(format_instructions(&fm.instructions), "ct(table=70,nat)");
    let fm = parse_flow(
        "actions=ct(commit,zone=NXM_NX_REG0[0..15],exec(set_field:1->ct_mark)),note:02.0D",
    )
    .unwrap();
    assert_eq!(
        format_instructions(&fm.instructions),
        "ct(commit,zone=NXM_NX_REG0[0..15],exec(set_field:0x1->ct_mark)),note:02.0d.00.00.00.00"
    );
    let fm = parse_flow("actions=drop").unwrap();
    assert_eq!(fm.instructions, crate::action::Instructions::default());
}

/// Bit indexes at the top of u32 once overflowed computing the range's
/// end (a panic on hostile text).
#[test]
fn huge_bit_ranges_are_refused() {
    for bad in [
        "actions=load:1->NXM_NX_REG0[0..4294967295]",
        "actions=load:1->NXM_NX_REG0[4294967295]",
        "actions=load:1->NXM_NX_REG0[4294967295..4294967295]",
        "ipv6,actions=load:1->NXM_NX_IPV6_SRC[4294967295]",
        "ip,actions=ct(commit,exec(load:1->NXM_NX_CT_LABEL[4294967295]))",
    ] {
        assert!(parse_flow(bad).is_err(), "{bad}");
    }
}

#[test]
fn packets_for_trace() {
    let k = parse_packet("in_port=3,tcp,nw_src=10.128.0.2,tp_dst=80,tun_id=0x5").unwrap();
    assert_eq!(k.get(Field::InPort), 3);
    assert_eq!(k.get(Field::TpDst), 80);
    assert_eq!(k.get(Field::TunId), 5);
    assert!(parse_packet("in_port=3,bogus=1").is_err());
}

/// Found by the flow_text fuzz target: actions printed NXM names
/// (`NXM_OF_ICMP_CODE`) the parser did not know. Every name a field
/// prints must name that field again.
#[test]
fn every_printed_nxm_name_parses_back() {
    for f in crate::key::Field::ALL {
        let name = super::fields::nxm_name(f);
        // Both halves of a 128-bit field print as the whole field's name.
        let want = f.low_half().unwrap_or(f);
        assert_eq!(
            super::fields::lookup(name).map(|(g, _)| g),
            Some(want),
            "{name}"
        );
    }
}

/// Each line is printed back exactly as ovs-ofctl 3.1 printed it
/// (`ovs-ofctl -O OpenFlow13 parse-flow`).
#[test]
fn ct_label_matches_print_as_ovs() {
    for (text, printed) in [
        ("ct_label=1", "ct_label=0x1"),
        ("ct_label=0x1/0x1", "ct_label=0x1/0x1"),
        ("ct_label=0", "ct_label=0"),
        ("ct_label=0/1", "ct_label=0/0x1"),
        ("NXM_NX_CT_LABEL=0x5", "ct_label=0x5"),
        ("ct_label=0/0", ""),
        (
            "ct_label=0xffffffffffffffff0000000000000000",
            "ct_label=0xffffffffffffffff0000000000000000",
        ),
        (
            "ct_label=0x80000000000000000000000000000001/0x80000000000000010000000000000001",
            "ct_label=0x80000000000000000000000000000001/0x80000000000000010000000000000001",
        ),
    ] {
        let m = parse_match(text).unwrap();
        assert_eq!(format_match(&m, 0x8000), printed, "{text}");
        assert_eq!(parse_match(printed).unwrap(), m, "{printed}");
    }
    let m = parse_match("ct_mark=1,ip,ct_label=2,ct_zone=3,ct_state=+trk,pkt_mark=1").unwrap();
    assert_eq!(
        format_match(&m, 0x8000),
        "pkt_mark=0x1,ct_state=+trk,ct_zone=3,ct_mark=0x1,ct_label=0x2,ip"
    );
    assert!(parse_match("ct_label=0x100000000000000000000000000000001").is_err());
    assert!(parse_match("ct_label=zz").is_err());
}

#[test]
fn ct_label_writes_print_as_ovs() {
    for (actions, printed) in [
        (
            "ct(commit,exec(set_field:0x1->ct_label,load:0x1->NXM_NX_CT_LABEL[0..31],set_field:0x1/0x1->ct_label,set_field:0xf0/0xf0000000000000000000000000000ff0->ct_label))",
            "ct(commit,exec(set_field:0x1->ct_label,load:0x1->NXM_NX_CT_LABEL[0..31],load:0x1->NXM_NX_CT_LABEL[0],load:0xf->NXM_NX_CT_LABEL[4..11],load:0->NXM_NX_CT_LABEL[124..127]))",
        ),
        (
            "ct(commit,exec(load:0xff->NXM_NX_CT_LABEL[]))",
            "ct(commit,exec(load:0xff->NXM_NX_CT_LABEL[0..63],load:0->NXM_NX_CT_LABEL[64..127]))",
        ),
        (
            "ct(commit,exec(set_field:0xffffffffffffffffffffffffffffffff/0xff0000000000000000ff->ct_label))",
            "ct(commit,exec(load:0xff->NXM_NX_CT_LABEL[0..7],load:0xff->NXM_NX_CT_LABEL[72..79]))",
        ),
        (
            "move:NXM_NX_CT_LABEL[64..95]->NXM_NX_REG0[]",
            "move:NXM_NX_CT_LABEL[64..95]->NXM_NX_REG0[]",
        ),
        (
            "move:NXM_NX_CT_LABEL[0..63]->NXM_NX_TUN_ID[]",
            "move:NXM_NX_CT_LABEL[0..63]->NXM_NX_TUN_ID[]",
        ),
    ] {
        let fm = parse_flow(&format!("ip,actions={actions}")).unwrap();
        assert_eq!(format_instructions(&fm.instructions), printed, "{actions}");
        let again = parse_flow(&format!("ip,actions={printed}")).unwrap();
        assert_eq!(again.instructions, fm.instructions, "{printed}");
    }
    let fm = parse_flow("ip,actions=ct(commit,exec(load:0x3->NXM_NX_CT_LABEL[64..65]))").unwrap();
    let Some(Action::Ct(ct)) = fm.instructions.actions().next() else {
        panic!("no ct()");
    };
    assert_eq!(
        ct.actions,
        vec![Action::RegLoad {
            dst: SubField {
                field: Field::CtLabelHigh,
                ofs: 0,
                nbits: 2,
                named: None,
            },
            value: 3
        }]
    );
    // A range across bit 63/64 is one operand in OVS; xbr refuses it.
    for bad in [
        "ip,actions=ct(commit,exec(load:0xff->NXM_NX_CT_LABEL[60..67]))",
        "ip,actions=ct(commit,exec(set_field:0x3/0x18000000000000000->ct_label))",
        "ip,actions=move:NXM_NX_CT_LABEL[32..95]->NXM_NX_TUN_ID[]",
        "ip,actions=ct(commit,exec(load:0x1->NXM_NX_CT_LABEL[128]))",
        "ip,actions=ct(commit,exec(load:0x4->NXM_NX_CT_LABEL[0..1]))",
    ] {
        assert!(parse_flow(bad).is_err(), "{bad}");
    }
}
