//! Every field of the registry through the text syntax: each of its
//! names parses to the match built directly, and the printed match
//! parses back to itself, exact and (where maskable) masked.

use super::{format_match, parse_match};
use crate::field::{FieldDef, Syntax, FIELDS};
use crate::matching::Match;

/// An exact and, if the field is maskable, a masked (text, value, mask)
/// example of the field's syntax, value and mask in key coordinates.
fn examples(d: &FieldDef) -> Vec<(String, u128, u128)> {
    // A text name denotes its key field whole (NXM_OF_IN_PORT=7 is
    // in_port=7), so an exact value's mask is the key field's.
    let bits = crate::field::key_bits(d.key);
    let ones = if bits >= 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    };
    let mut out = Vec::new();
    match d.syntax.expect("text fields only") {
        Syntax::Port => out.push(("7".into(), 7, ones)),
        Syntax::Hex | Syntax::Dec => {
            let v = 0x5a5a_5a5a_5a5a_5a5a & ones;
            out.push((format!("{v:#x}"), v, ones));
            out.push((format!("{v}"), v, ones));
            if d.maskable {
                let m = 0xf0f0_f0f0_f0f0_f0f0 & ones;
                out.push((format!("{:#x}/{m:#x}", v & m), v & m, m));
            }
        }
        Syntax::Ipv4 => {
            out.push(("10.1.2.3".into(), 0x0a01_0203, ones));
            out.push(("10.1.0.0/16".into(), 0x0a01_0000, 0xffff_0000));
            out.push(("10.1.0.0/255.255.0.255".into(), 0x0a01_0000, 0xffff_00ff));
        }
        Syntax::Mac => {
            out.push(("0a:58:0a:01:02:03".into(), 0x0a58_0a01_0203, ones));
            out.push((
                "0a:58:00:00:00:00/ff:ff:00:00:00:00".into(),
                0x0a58_0000_0000,
                0xffff_0000_0000,
            ));
        }
        Syntax::CtState => {
            out.push(("0x22".into(), 0x22, ones));
            out.push(("+trk+est-new".into(), 0x22, 0x23));
        }
        Syntax::Frag => {
            for (t, v, m) in [
                ("no", 0, 1),
                ("yes", 1, 1),
                ("first", 1, 3),
                ("later", 3, 3),
                ("not_later", 0, 2),
            ] {
                out.push((t.into(), v, m));
            }
        }
        Syntax::Tos => out.push(("40".into(), 10, ones)),
        Syntax::Label => {
            out.push(("0x1234".into(), 0x1234, ones));
            out.push(("0x1/0x3".into(), 1, 3));
            out.push((
                format!("{:#x}/{:#x}", 1u128 << 100, 1u128 << 100),
                1 << 100,
                1 << 100,
            ));
        }
        Syntax::Ipv6 => {
            let a = 0x2001_0db8_0000_0000_0000_0000_0000_0001u128;
            out.push(("2001:db8::1".into(), a, ones));
            out.push(("2001:db8::/32".into(), a & !0 << 96, !0 << 96));
        }
    }
    out
}

fn expected(d: &FieldDef, v: u128, m: u128) -> Match {
    let mut want = Match::catch_all();
    want.pin(&d.prereq.least());
    if d.is_wide() {
        want.set128_masked(d.key, v, m);
    } else {
        want.set_masked(d.key, (v as u64) << d.shift, (m as u64) << d.shift);
    }
    want
}

#[test]
fn every_name_parses_and_every_match_prints_back() {
    let mut checked = 0;
    for d in FIELDS.iter().filter(|d| d.syntax.is_some()) {
        for (text, v, m) in examples(d) {
            let want = expected(d, v, m);
            let prefix = format_match(&expected(d, 0, 0), 0x8000);
            for name in d.text_names() {
                let line = if prefix.is_empty() {
                    format!("{name}={text}")
                } else {
                    format!("{prefix},{name}={text}")
                };
                let got = parse_match(&line).unwrap_or_else(|e| panic!("{line}: {e}"));
                assert_eq!(got, want, "{line}");
                checked += 1;
            }
            let printed = format_match(&want, 0x8000);
            let back = parse_match(&printed).unwrap_or_else(|e| panic!("{printed}: {e}"));
            assert_eq!(back, want, "{} printed as {printed}", d.name);
        }
    }
    assert!(checked > 150, "only {checked} names checked");
}

#[test]
fn exact_only_fields_refuse_a_partial_mask() {
    for d in FIELDS.iter().filter(|d| !d.maskable && d.syntax.is_some()) {
        if matches!(d.syntax, Some(Syntax::Port | Syntax::Tos)) || d.key.bits() == 1 {
            continue;
        }
        let mut m = Match::catch_all();
        m.pin(&d.prereq.least());
        let prefix = format_match(&m, 0x8000);
        let sep = if prefix.is_empty() { "" } else { "," };
        for name in d.text_names() {
            let line = format!("{prefix}{sep}{name}=1/1");
            assert!(parse_match(&line).is_err(), "{line} was accepted");
        }
    }
}

#[test]
fn protocol_specific_fields_need_their_protocol_by_any_name() {
    for ok in [
        "tcp,tcp_src=80",
        "tcp,NXM_OF_TCP_SRC=80",
        "udp,OXM_OF_UDP_DST=53",
        "udp,tp_src=53",
        "sctp6,sctp_dst=9",
        "icmp,icmpv4_type=8",
        "icmp6,icmp_type=135",
        "icmp6,NXM_NX_ICMPV6_TYPE=135",
    ] {
        assert!(parse_match(ok).is_ok(), "{ok} refused");
    }
    for bad in [
        "udp,tcp_src=80",
        "udp,NXM_OF_TCP_SRC=80",
        "tcp,OXM_OF_SCTP_SRC=1",
        "icmp6,icmpv4_type=1",
        "tcp,NXM_NX_ICMPV6_TYPE=1",
        "icmp,icmpv6_code=0",
    ] {
        assert!(
            matches!(
                parse_match(bad),
                Err(super::TextError::MissingPrerequisite { .. })
            ),
            "{bad} accepted"
        );
    }
}

#[test]
fn transport_ports_on_icmp_flows_take_what_icmp_type_and_code_take() {
    use crate::text::{format_match, parse_flow};
    // Accepted as in OVS, and printed as the ICMP fields they are.
    let fm = parse_flow("icmp,tp_src=8,tp_dst=0,actions=drop").unwrap();
    let printed = format_match(&fm.matching, fm.priority);
    assert_eq!(printed, "icmp,icmp_type=8,icmp_code=0");
    assert!(parse_flow(&format!("{printed},actions=drop")).is_ok());
    // What icmp_type/icmp_code would refuse when printed back.
    for bad in [
        "icmp,tp_src=256,actions=drop",
        "icmp,tp_src=5/0xf,actions=drop",
        "icmp6,tp_dst=3/0x3,actions=drop",
    ] {
        let e = parse_flow(bad).unwrap_err().to_string();
        assert!(e.contains("0 to 255, no mask"), "{bad}: {e}");
    }
}
