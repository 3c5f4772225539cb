//! Codec round trips: hand-picked encodings from the captures and
//! proptest-generated matches, action lists and flow mods.

use super::action::{emit_actions, operand_is_encodable, parse_actions};
use super::message::{split, Message};
use super::oxm::{emit_oxms, parse_oxms};
use super::{err, WireError};
use flowtable::action::{CtAction, CtZone, NatAction};
use flowtable::matching::{ETH_TYPE_ARP, ETH_TYPE_IPV4};
use flowtable::{Action, Field, FlowMod, FlowModCommand, Instructions, Match, SubField};
use proptest::prelude::*;

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn captured_nicira_actions_round_trip() {
    // Encodings listed in FEATURES.md section 5b.
    for (bytes, action) in [
        (
            "ffff0018 00002320 0007 001f 00010204 000000000000002a",
            Action::RegLoad {
                dst: SubField::whole(Field::Reg(1)),
                value: 0x2a,
            },
        ),
        (
            "ffff0018 00002320 0006 0020 0000 0000 00012008 00010004",
            Action::RegMove {
                src: SubField {
                    field: Field::TunId,
                    ofs: 0,
                    nbits: 32,
                    named: None,
                },
                dst: SubField::whole(Field::Reg(0)),
            },
        ),
        (
            "ffff0018 00002320 0007 080f 00000206 0000000000000a58",
            Action::RegLoad {
                dst: SubField {
                    field: Field::EthDst,
                    ofs: 32,
                    nbits: 16,
                    named: None,
                },
                value: 0x0a58,
            },
        ),
        (
            "ffff0018 00002320 000f 001f 00010404 ffff 000000000000",
            Action::OutputReg {
                src: SubField::whole(Field::Reg(2)),
                max_len: 0xffff,
            },
        ),
        (
            "ffff0010 00002320 000e 000a ff 000000",
            Action::Resubmit {
                in_port: 10,
                table: None,
            },
        ),
        (
            "ffff0010 00002320 0008 020d00000000",
            Action::Note(vec![2, 0x0d, 0, 0, 0, 0]),
        ),
        (
            "0019 0010 00014004 0a000001 00000000",
            Action::SetField {
                field: Field::TunDst,
                value: 0x0a00_0001,
            },
        ),
    ] {
        let b = hex(bytes);
        assert_eq!(parse_actions(&b).unwrap(), vec![action.clone()], "{bytes}");
        let mut out = Vec::new();
        emit_actions(&[action], &mut out);
        assert_eq!(out, b);
    }
}

#[test]
fn ct_nat_round_trips() {
    // ct(nat,table=70): 24-byte CT with a nested 16-byte NAT.
    let b = hex("ffff0028 00002320 0023 0000 00000000 0000 46 000000 0000 ffff0010 00002320 0024 0000 0000 0000");
    let a = Action::Ct(CtAction {
        flags: 0,
        zone: CtZone::Immediate(0),
        recirc_table: Some(70),
        alg: 0,
        actions: vec![Action::Nat(NatAction::default())],
    });
    assert_eq!(parse_actions(&b).unwrap(), vec![a.clone()]);
    let mut out = Vec::new();
    emit_actions(&[a], &mut out);
    assert_eq!(out, b);
}

/// `ct(commit,nat(src=[fd00::1]-[fd00::5]:1000-2000))`, which
/// `ovs-ofctl ofp-print` reads back as such inside a FLOW_MOD.
const CT_NAT6: &str = "ffff0050 00002320 0023 0001 00000000 0000 ff 000000 0000 \
     ffff0038 00002320 0024 0000 0001 003c fd000000000000000000000000000001 \
     fd000000000000000000000000000005 03e8 07d0 00000000";

#[test]
fn ipv6_nat_ranges_round_trip_and_bad_ones_are_refused() {
    let b = hex(CT_NAT6);
    let nat = NatAction {
        flags: 1,
        ipv6_min: Some(0xfd00_0000_0000_0000_0000_0000_0000_0001),
        ipv6_max: Some(0xfd00_0000_0000_0000_0000_0000_0000_0005),
        proto_min: Some(1000),
        proto_max: Some(2000),
        ..NatAction::default()
    };
    let a = Action::Ct(CtAction {
        flags: 1,
        zone: CtZone::Immediate(0),
        recirc_table: None,
        alg: 0,
        actions: vec![Action::Nat(nat)],
    });
    assert_eq!(parse_actions(&b).unwrap(), vec![a.clone()]);
    let mut out = Vec::new();
    emit_actions(&[a], &mut out);
    assert_eq!(out, b);
    // Byte 24 starts the NAT action: flags at 24+12, range_present at
    // 24+14, the IPv6 minimum at 24+16, the ports at 24+48.
    let bad = |at: usize, bytes: &[u8]| {
        let mut b = hex(CT_NAT6);
        b[at..at + bytes.len()].copy_from_slice(bytes);
        code(parse_actions(&b).unwrap_err())
    };
    let bad_argument = (err::BAD_ACTION, err::BAC_BAD_ARGUMENT);
    // Both families present; a maximum without its minimum.
    assert_eq!(bad(24 + 14, &[0x00, 0x3d]), bad_argument);
    assert_eq!(bad(24 + 14, &[0x00, 0x38]), bad_argument);
    // Unknown flags; src and dst; hash and random.
    assert_eq!(bad(24 + 12, &[0x00, 0x21]), bad_argument);
    assert_eq!(bad(24 + 12, &[0x00, 0x03]), bad_argument);
    assert_eq!(bad(24 + 12, &[0x00, 0x19]), bad_argument);
    // The range from fd00::9 down to fd00::5; from address 0.
    assert_eq!(bad(24 + 31, &[9]), bad_argument);
    assert_eq!(bad(24 + 16, &[0; 16]), bad_argument);
    // Ports 1000 down to 999.
    assert_eq!(bad(24 + 50, &[0x03, 0xe7]), bad_argument);
}

fn code(e: WireError) -> (u16, u16) {
    e.ofp_error()
}

#[test]
fn match_errors_have_their_codes() {
    // Unknown field.
    assert_eq!(
        code(parse_oxms(&hex("80007804 00000001")).unwrap_err()),
        (err::BAD_MATCH, err::BMC_BAD_FIELD)
    );
    // Wrong length for in_port.
    assert_eq!(
        code(parse_oxms(&hex("80000002 0001")).unwrap_err()),
        (err::BAD_MATCH, err::BMC_BAD_LEN)
    );
    // Truncated value.
    assert_eq!(
        code(parse_oxms(&hex("80000004 0001")).unwrap_err()),
        (err::BAD_MATCH, err::BMC_BAD_LEN)
    );
    // nw_dst without dl_type.
    assert_eq!(
        code(parse_oxms(&hex("80001804 0a000001")).unwrap_err()),
        (err::BAD_MATCH, err::BMC_BAD_PREREQ)
    );
    // tcp_dst in a UDP flow.
    assert_eq!(
        code(parse_oxms(&hex("80000a02 0800 80001401 11 80001c02 0050")).unwrap_err()),
        (err::BAD_MATCH, err::BMC_BAD_PREREQ)
    );
    // tcp_src of IPv6 packets (tests_ipv6.rs has the IPv6 fields).
    assert!(parse_oxms(&hex("80000a02 86dd 80001401 06 80001a02 2b67")).is_ok());
    // in_port twice.
    assert_eq!(
        code(parse_oxms(&hex("80000004 00000001 80000004 00000002")).unwrap_err()),
        (err::BAD_MATCH, err::BMC_DUP_FIELD)
    );
    // Value bits outside the mask.
    assert_eq!(
        code(parse_oxms(&hex("80000a02 0800 80001708 0a000001 ffffff00")).unwrap_err()),
        (err::BAD_MATCH, err::BMC_BAD_WILDCARDS)
    );
}

#[test]
fn action_errors_have_their_codes() {
    // OFPAT_SET_QUEUE.
    assert_eq!(
        code(parse_actions(&hex("00150008 00000001")).unwrap_err()),
        (err::BAD_ACTION, err::BAC_BAD_TYPE)
    );
    // Another vendor.
    assert_eq!(
        code(parse_actions(&hex("ffff0010 00001234 0000 000000000000")).unwrap_err()),
        (err::BAD_ACTION, err::BAC_BAD_EXPERIMENTER)
    );
    // Nicira learn (unsupported subtype).
    assert_eq!(
        code(parse_actions(&hex("ffff0010 00002320 0010 000000000000")).unwrap_err()),
        (err::BAD_ACTION, err::BAC_BAD_EXP_TYPE)
    );
    // Length not a multiple of 8.
    assert_eq!(
        code(parse_actions(&hex("0000000c 00000001 0000")).unwrap_err()),
        (err::BAD_ACTION, err::BAC_BAD_LEN)
    );
    // Length past the end.
    assert_eq!(
        code(parse_actions(&hex("00000018 00000001 0000 000000000000")).unwrap_err()),
        (err::BAD_ACTION, err::BAC_BAD_LEN)
    );
}

#[test]
fn hello_and_error_encodings() {
    let hello = Message::Hello { bitmap: Some(0x10) }.emit(3);
    assert_eq!(hello, hex("04000010 00000003 00010008 00000010"));
    let (h, body) = split(&hello).unwrap();
    assert_eq!(
        Message::parse(&h, body).unwrap(),
        Message::Hello { bitmap: Some(0x10) }
    );
    let e = WireError::BadRequest(err::BRC_BAD_TYPE, String::new());
    // The whole offending message, as OVS echoes it...
    let offending = [0u8; 100];
    let m = Message::error_for(&e, &offending).emit(9);
    assert_eq!(m.len(), 8 + 4 + 100);
    // ...as far as one message holds it.
    let huge = vec![0u8; 65535];
    let m = Message::error_for(&e, &huge).emit(9);
    assert_eq!(m.len(), 65535 - 4);
    assert_eq!(usize::from(u16::from_be_bytes([m[2], m[3]])), m.len());
}

// ---- proptest strategies ----

fn any_mac_field() -> impl Strategy<Value = u64> {
    any::<u64>().prop_map(|v| v & 0xffff_ffff_ffff)
}

/// A match as the decoder could produce it: prerequisites satisfied, every
/// field either exact or (where maskable) masked.
fn arb_match() -> impl Strategy<Value = Match> {
    (
        prop::option::of(any::<u32>()),
        prop::option::of((any::<u32>(), any::<u32>())),
        prop::option::of(any_mac_field()),
        prop::option::of(any::<u64>()),
        prop::option::of((any::<u32>(), any::<u32>())),
        0u8..4,
        prop::option::of((any::<u32>(), any::<u32>())),
        prop::option::of((any::<u16>(), any::<u16>())),
        prop::option::of(0u64..4),
        prop::option::of(0u64..0x2000),
    )
        .prop_map(|(in_port, reg, eth_dst, tun, ct, l3, ip, tp, frag, vlan)| {
            let mut m = Match::catch_all();
            if let Some(p) = in_port {
                m.set_exact(Field::InPort, u64::from(p));
            }
            if let Some((v, mask)) = reg {
                m.set_masked(Field::Reg(3), u64::from(v), u64::from(mask));
            }
            if let Some(d) = eth_dst {
                m.set_exact(Field::EthDst, d);
            }
            if let Some(t) = tun {
                m.set_exact(Field::TunId, t);
            }
            if let Some((v, mask)) = ct {
                m.set_masked(Field::CtState, u64::from(v), u64::from(mask));
            }
            if let Some(v) = vlan {
                m.set_masked(Field::VlanTci, v, 0x1fff);
            }
            match l3 {
                1 | 2 => {
                    m.set_exact(Field::EthType, u64::from(ETH_TYPE_IPV4));
                    if let Some((v, mask)) = ip {
                        m.set_masked(Field::IpDst, u64::from(v), u64::from(mask));
                    }
                    if let Some(f) = frag {
                        m.set_masked(Field::IpFrag, f, 3);
                    }
                    if l3 == 2 {
                        m.set_exact(Field::IpProto, 17);
                        if let Some((v, mask)) = tp {
                            m.set_masked(Field::TpDst, u64::from(v), u64::from(mask));
                        }
                    }
                }
                3 => {
                    m.set_exact(Field::EthType, u64::from(ETH_TYPE_ARP));
                    if let Some((v, mask)) = ip {
                        m.set_masked(Field::ArpTpa, u64::from(v), u64::from(mask));
                    }
                    m.set_exact(Field::ArpOp, 1);
                }
                _ => {}
            }
            m
        })
}

fn arb_subfield() -> impl Strategy<Value = SubField> {
    (
        prop::sample::select(Field::ALL.to_vec()),
        0u32..64,
        1u32..65,
    )
        .prop_map(|(field, ofs, nbits)| {
            let bits = field.bits();
            let ofs = ofs % bits;
            let nbits = 1 + (nbits - 1) % (bits - ofs);
            SubField {
                field,
                ofs,
                nbits,
                named: None,
            }
        })
        .prop_filter("encodable operand", operand_is_encodable)
}

fn arb_leaf_action() -> impl Strategy<Value = Action> {
    let writable = [
        Field::EthDst,
        Field::TunDst,
        Field::PktMark,
        Field::Reg(5),
        Field::IpSrc,
        Field::TunId,
    ];
    prop_oneof![
        (any::<u32>(), any::<u16>()).prop_map(|(port, max_len)| Action::Output { port, max_len }),
        any::<u32>().prop_map(Action::Group),
        (prop::sample::select(writable.to_vec()), any::<u64>()).prop_map(|(field, v)| {
            Action::SetField {
                field,
                value: v & field.full_mask(),
            }
        }),
        (arb_subfield(), any::<u64>()).prop_map(|(dst, v)| {
            let value = if dst.nbits >= 64 {
                v
            } else {
                v & ((1 << dst.nbits) - 1)
            };
            Action::RegLoad { dst, value }
        }),
        (arb_subfield(), arb_subfield()).prop_filter_map("same width", |(src, dst)| {
            let n = src.nbits.min(dst.nbits);
            let src = SubField { nbits: n, ..src };
            let dst = SubField { nbits: n, ..dst };
            (operand_is_encodable(&src) && operand_is_encodable(&dst))
                .then_some(Action::RegMove { src, dst })
        }),
        (arb_subfield(), any::<u16>())
            .prop_map(|(src, max_len)| Action::OutputReg { src, max_len }),
        (
            prop_oneof![0u32..0xff00, Just(flowtable::action::port::IN_PORT)],
            prop::option::of(0u8..254)
        )
            .prop_map(|(in_port, table)| Action::Resubmit { in_port, table }),
        prop::collection::vec(any::<u8>(), 0..3)
            .prop_map(|n| Action::Note((0..6 + 8 * n.len()).map(|i| i as u8).collect())),
    ]
}

fn arb_action() -> impl Strategy<Value = Action> {
    prop_oneof![
        4 => arb_leaf_action(),
        1 => (any::<u16>(), prop::option::of(any::<u8>().prop_filter("not 255", |t| *t != 255)),
              prop::option::of((1u32.., any::<u16>(), any::<bool>(), 1u128..)))
            .prop_map(|(zone, recirc_table, range)| {
                // An IPv4 or an IPv6 range (never from address 0).
                let v6 = range.is_some_and(|r| r.2);
                let nat = NatAction {
                    flags: 1,
                    ipv4_min: range.filter(|_| !v6).map(|r| r.0),
                    ipv4_max: None,
                    ipv6_min: range.filter(|_| v6).map(|r| r.3),
                    ipv6_max: range.filter(|_| v6).map(|r| r.3),
                    proto_min: range.map(|r| r.1),
                    proto_max: range.map(|r| r.1),
                };
                Action::Ct(CtAction {
                    flags: 1,
                    zone: CtZone::Immediate(zone),
                    recirc_table,
                    alg: 0,
                    actions: vec![Action::Nat(nat)],
                })
            }),
    ]
}

fn arb_instructions() -> impl Strategy<Value = Instructions> {
    (
        prop::option::of(prop::collection::vec(arb_action(), 0..6)),
        prop::option::of(prop::collection::vec(arb_leaf_action(), 0..3)),
        any::<bool>(),
        prop::option::of((any::<u64>(), any::<u64>()).prop_map(|(v, m)| (v & m, m))),
        prop::option::of(0u8..254),
        prop::option::of(any::<u32>()),
    )
        .prop_map(|(apply, write, clear, md, goto, meter)| Instructions {
            meter,
            apply_actions: apply,
            clear_actions: clear,
            write_actions: write,
            write_metadata: md,
            goto_table: goto,
        })
}

proptest! {
    #[test]
    fn match_round_trip(m in arb_match()) {
        let mut b = Vec::new();
        emit_oxms(&m, &mut b);
        prop_assert_eq!(parse_oxms(&b).unwrap(), m);
    }

    #[test]
    fn action_list_round_trip(actions in prop::collection::vec(arb_action(), 0..8)) {
        let mut b = Vec::new();
        emit_actions(&actions, &mut b);
        let back = parse_actions(&b).unwrap();
        prop_assert_eq!(&back, &actions);
        let mut again = Vec::new();
        emit_actions(&back, &mut again);
        prop_assert_eq!(again, b);
    }

    #[test]
    fn flow_mod_round_trip(
        m in arb_match(),
        ins in arb_instructions(),
        cookie in any::<u64>(),
        prio in any::<u16>(),
        cmd in prop::sample::select(vec![FlowModCommand::Add, FlowModCommand::Modify, FlowModCommand::ModifyStrict, FlowModCommand::Delete, FlowModCommand::DeleteStrict]),
        xid in any::<u32>(),
    ) {
        let mut fm = FlowMod::add(3, prio, m, ins);
        fm.cookie = cookie;
        fm.command = cmd;
        let bytes = Message::FlowMod(fm.clone()).emit(xid);
        let (h, body) = split(&bytes).unwrap();
        prop_assert_eq!(h.xid, xid);
        prop_assert_eq!(Message::parse(&h, body).unwrap(), Message::FlowMod(fm));
    }

    /// Garbage never panics the decoder.
    #[test]
    fn garbage_is_rejected_gracefully(ty in any::<u8>(), body in prop::collection::vec(any::<u8>(), 0..200)) {
        let mut msg = vec![4, ty, 0, 0, 0, 0, 0, 1];
        msg.extend_from_slice(&body);
        let len = msg.len() as u16;
        msg[2..4].copy_from_slice(&len.to_be_bytes());
        let (h, b) = split(&msg).unwrap();
        let _ = Message::parse(&h, b);
        let _ = parse_actions(&body);
        let _ = parse_oxms(&body);
    }
}

/// A PCP match on any tagged packet is written as OXM's masked vlan_vid
/// plus vlan_pcp, the way it came (os-ken compares the dumped match).
#[test]
fn vlan_pcp_with_present_only_vid_stays_oxm() {
    let mut m = Match::catch_all();
    m.set_masked(Field::VlanTci, 0x1000 | 3 << 13, 0x1000 | 0xe000);
    let mut out = Vec::new();
    emit_oxms(&m, &mut out);
    assert_eq!(
        out,
        [
            0x80, 0x00, 0x0d, 0x04, 0x10, 0x00, 0x10, 0x00, // vlan_vid=0x1000/0x1000
            0x80, 0x00, 0x0e, 0x01, 0x03, // vlan_pcp=3
        ]
    );
    assert_eq!(parse_oxms(&out).unwrap(), m);
}

/// L4 ports are one field in the key: a flow matching UDP or SCTP dumps
/// its set_field of a port with that protocol's OXM header, as it was
/// written (os-ken's set_field tests compare the dumped actions).
#[test]
fn set_field_of_ports_keeps_the_flows_protocol() {
    use super::instruction::emit_instructions_for;
    let oxm_header = |field: u8| [0x80, 0x00, field << 1, 2];
    for (proto, src, dst) in [(6u8, 13u8, 14u8), (17, 15, 16), (132, 17, 18)] {
        let ins = Instructions {
            apply_actions: Some(vec![
                Action::SetField {
                    field: Field::TpSrc,
                    value: 12345,
                },
                Action::SetField {
                    field: Field::TpDst,
                    value: 80,
                },
            ]),
            ..Instructions::default()
        };
        let mut out = Vec::new();
        emit_instructions_for(&ins, Some(proto), &mut out);
        for (field, value) in [(src, 12345u16), (dst, 80)] {
            let mut tlv = oxm_header(field).to_vec();
            tlv.extend_from_slice(&value.to_be_bytes());
            assert!(
                out.windows(tlv.len()).any(|w| w == tlv),
                "ip_proto {proto}: OXM field {field} not in {out:02x?}"
            );
        }
    }
}

/// What `ovs-ofctl -O OpenFlow15 add-flow br0 reg0=5,reg1=0x7/0xf,...`
/// sends: one masked packet register holding both.
#[test]
fn openflow15_packet_registers_match_two_registers() {
    let mut b = Vec::new();
    b.extend_from_slice(&0x8001_0110u32.to_be_bytes());
    b.extend_from_slice(&0x0000_0005_0000_0007u64.to_be_bytes());
    b.extend_from_slice(&0xffff_ffff_0000_000fu64.to_be_bytes());
    let m = super::oxm::parse_oxms(&b).unwrap();
    assert_eq!(m.get(Field::Reg(0)), (5, 0xffff_ffff));
    assert_eq!(m.get(Field::Reg(1)), (7, 0xf));
    // A half with no mask bits is not matched; xreg3 is reg6 and reg7.
    let mut b = Vec::new();
    b.extend_from_slice(&0x8001_0608u32.to_be_bytes());
    b.extend_from_slice(&9u64.to_be_bytes());
    let m = super::oxm::parse_oxms(&b).unwrap();
    assert_eq!(
        (m.get(Field::Reg(6)), m.get(Field::Reg(7))),
        ((0, u64::from(u32::MAX)), (9, u64::from(u32::MAX)))
    );
    let err_of = |bytes: &[u8]| super::oxm::parse_oxms(bytes).unwrap_err().ofp_error();
    // Beyond xbr's registers; a value outside its mask; reg0 twice.
    assert_eq!(
        err_of(&[0x80, 0x01, 0x08, 0x08, 0, 0, 0, 0, 0, 0, 0, 0]).1,
        err::BMC_BAD_FIELD
    );
    let mut outside = vec![0x80, 0x01, 0x01, 0x10];
    outside.extend_from_slice(&0x1_0000_0000u64.to_be_bytes());
    outside.extend_from_slice(&0xffu64.to_be_bytes());
    assert_eq!(err_of(&outside).1, err::BMC_BAD_WILDCARDS);
    let mut twice = vec![0x80, 0x01, 0x00, 0x08, 0, 0, 0, 1, 0, 0, 0, 0];
    twice.extend_from_slice(&[0x00, 0x01, 0x00, 0x04, 0, 0, 0, 1]);
    assert_eq!(err_of(&twice).1, err::BMC_DUP_FIELD);
}

#[test]
fn a_packet_ins_reason_sits_where_the_notifier_patches_it() {
    use super::packet_io::{PacketIn, PACKET_IN_REASON_AT};
    use super::HEADER_LEN;
    let pi = PacketIn::new(3, 0, 5, 1, 0xc0, 60, vec![0xaa; 60]);
    let m = Message::PacketIn(pi).emit(7);
    assert_eq!(m[HEADER_LEN + PACKET_IN_REASON_AT], 5);
    assert_eq!(
        m[HEADER_LEN + PACKET_IN_REASON_AT + 1],
        1,
        "table id follows"
    );
}
