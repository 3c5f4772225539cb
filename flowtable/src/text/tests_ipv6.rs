//! IPv6 fields in text: matches and set_field as ovs-ofctl writes and
//! OVS 3.1 dumps them.

use super::*;
use crate::action::{Action, SubField};
use crate::key::Field;

/// Each pair is (what a controller writes, what the dump prints).
#[test]
fn ipv6_matches_print_as_ovs() {
    for (text, dumped) in [
        ("ipv6,ipv6_src=2001:db8::1", "ipv6,ipv6_src=2001:db8::1"),
        (
            "ipv6,ipv6_src=2001:db8::1/64",
            "ipv6,ipv6_src=2001:db8::/64",
        ),
        (
            "ipv6,ipv6_dst=2001:db8::1/ffff::ffff",
            "ipv6,ipv6_dst=2001::1/ffff::ffff",
        ),
        ("ipv6,ipv6_dst=::/0", "ipv6"),
        ("ipv6,ipv6_label=0x12345", "ipv6,ipv6_label=0x12345"),
        ("ipv6,ipv6_label=0x1/0xf", "ipv6,ipv6_label=0x00001/0x0000f"),
        ("tcp6,tp_dst=80", "tcp6,tp_dst=80"),
        ("udp6,udp_src=53", "udp6,tp_src=53"),
        ("sctp6,sctp_dst=9", "sctp6,tp_dst=9"),
        ("ipv6,nw_proto=6,nw_tos=8", "tcp6,nw_tos=8"),
        ("ipv6,nw_ttl=1,nw_ecn=3", "ipv6,nw_ecn=3,nw_ttl=1"),
        ("icmp6,icmpv6_type=128", "icmp6,icmp_type=128"),
        // OVS dumps ICMPv6 type and code under ICMP's names; they parse.
        (
            "icmp6,icmp_type=129,icmp_code=0",
            "icmp6,icmp_type=129,icmp_code=0",
        ),
        (
            "icmp6,icmp_type=135,nd_target=fe80::1,nd_sll=0a:58:00:00:00:01",
            "icmp6,icmp_type=135,nd_target=fe80::1,nd_sll=0a:58:00:00:00:01",
        ),
        (
            "icmp6,icmpv6_type=136,nd_target=fe80::/10,nd_tll=0a:58:00:00:00:02",
            "icmp6,icmp_type=136,nd_target=fe80::/10,nd_tll=0a:58:00:00:00:02",
        ),
        ("ipv6,ipv6_exthdr=0x40/0x40", "ipv6,ipv6_exthdr=0x40/0x40"),
    ] {
        let m = parse_match(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(format_match(&m, 0x8000), dumped, "{text}");
        let again = parse_match(dumped).unwrap_or_else(|e| panic!("{dumped}: {e}"));
        assert_eq!(format_match(&again, 0x8000), dumped, "{dumped}");
    }
}

#[test]
fn ipv6_prerequisites_are_checked() {
    for bad in [
        "ipv6_src=::1",
        "ip,ipv6_dst=::1",
        "ipv6,nw_src=10.0.0.1",
        "ipv6,icmpv6_type=1",
        "icmp,icmpv6_type=1",
        "icmp6,nd_target=::1",
        "icmp6,icmp_type=136,nd_sll=00:00:00:00:00:01",
        "icmp6,icmp_type=135,nd_tll=00:00:00:00:00:01",
        "ip,ipv6_label=1",
        "tcp6,icmp_type=1",
        "ipv6,ipv6_src=2001:db8::1/129",
        "ipv6,ipv6_src=2001:db8::g",
        "ipv6,ipv6_label=0x100000",
    ] {
        assert!(parse_match(bad).is_err(), "{bad} was accepted");
    }
}

#[test]
fn ipv6_set_fields_print_as_ovs() {
    let fm = parse_flow(
        "icmp6,icmp_type=135,actions=set_field:2001:db8::5->ipv6_src,set_field:fe80::1->nd_target,\
         set_field:0x12345->ipv6_label,set_field:136->icmpv6_type,set_field:0a:58:00:00:00:09->nd_sll,\
         mod_nw_ttl:9,dec_ttl",
    )
    .unwrap();
    let apply = fm.instructions.apply_actions.as_ref().unwrap();
    assert_eq!(
        apply[0],
        Action::SetField128 {
            field: Field::Ipv6SrcLow,
            value: 0x2001_0db8_0000_0000_0000_0000_0000_0005,
        }
    );
    assert_eq!(
        format_instructions(&fm.instructions),
        "set_field:2001:db8::5->ipv6_src,set_field:fe80::1->nd_target,\
         set_field:0x12345->ipv6_label,set_field:136->icmpv6_type,set_field:0a:58:00:00:00:09->nd_sll,\
         mod_nw_ttl:9,dec_ttl"
    );
    // A masked address write is refused, not half done.
    assert!(parse_flow("ipv6,actions=set_field:::1/64->ipv6_dst").is_err());
    // ip_proto is read-only (as in OVS); arp_op, on the same bits, is not.
    assert!(parse_flow("ipv6,actions=set_field:17->ip_proto").is_err());
    assert!(parse_flow("arp,actions=set_field:2->arp_op").is_ok());
}

#[test]
fn ipv6_operands_name_one_half() {
    let fm = parse_flow("ipv6,actions=move:NXM_NX_IPV6_SRC[64..127]->NXM_NX_REG0[0..31]");
    assert!(fm.is_err(), "widths differ, yet accepted");
    let fm = parse_flow(
        "ipv6,actions=load:0x1->NXM_NX_IPV6_DST[64..95],move:NXM_NX_IPV6_SRC[0..31]->NXM_NX_REG1[]",
    )
    .unwrap();
    let apply = fm.instructions.apply_actions.as_ref().unwrap();
    assert_eq!(
        apply[0],
        Action::RegLoad {
            dst: SubField {
                field: Field::Ipv6DstHigh,
                ofs: 0,
                nbits: 32,
                named: None,
            },
            value: 1
        }
    );
    assert_eq!(
        format_instructions(&fm.instructions),
        "load:0x1->NXM_NX_IPV6_DST[64..95],move:NXM_NX_IPV6_SRC[0..31]->NXM_NX_REG1[]"
    );
    assert!(parse_flow("ipv6,actions=load:0x1->NXM_NX_IPV6_DST[60..70]").is_err());
    assert!(parse_flow("ipv6,actions=load:0x1->NXM_NX_IPV6_DST[]").is_err());
}
