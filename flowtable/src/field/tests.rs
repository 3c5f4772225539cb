//! The registry's invariants (see `registry.rs`).

use super::registry::*;
use super::{Prereq, Syntax};
use crate::key::Field;
use crate::matching::Match;
use std::collections::HashSet;

#[test]
fn class_and_code_are_unique() {
    let mut seen = HashSet::new();
    for d in &FIELDS {
        for h in d.headers() {
            assert!(
                seen.insert((h.class, h.code)),
                "{} reuses class {:#06x} code {}",
                h.name,
                h.class,
                h.code
            );
        }
    }
}

#[test]
fn header_names_are_unique_and_match_their_class() {
    let mut seen = HashSet::new();
    for d in &FIELDS {
        for h in d.headers() {
            assert!(seen.insert(h.name.to_ascii_uppercase()), "{} twice", h.name);
            let prefix = match h.class {
                OXM_CLASS_OPENFLOW_BASIC => "OXM_OF_",
                OXM_CLASS_NXM0 => "NXM_OF_",
                OXM_CLASS_NXM1 => "NXM_NX_",
                c => panic!("{} has unknown class {c:#06x}", h.name),
            };
            assert!(
                h.name.starts_with(prefix),
                "{} in class {:#06x}",
                h.name,
                h.class
            );
        }
    }
}

#[test]
fn every_text_name_denotes_one_field() {
    let mut seen = HashSet::new();
    for d in &FIELDS {
        for n in d.text_names() {
            assert!(seen.insert(n.to_ascii_uppercase()), "{n} names two fields");
            let found = by_name(n).expect(n);
            assert!(std::ptr::eq(found, d), "{n} finds {}", found.name);
        }
        if d.syntax.is_none() {
            assert_eq!(d.text_names().count(), 0);
        }
    }
    // Field names are case-sensitive, header names are not.
    assert!(by_name("nxm_nx_reg0").is_some());
    assert!(by_name("NW_SRC").is_none());
}

#[test]
fn widths_fit_key_and_wire() {
    for d in &FIELDS {
        assert!(d.bits > 0, "{}", d.name);
        assert!(
            d.shift + d.bits <= key_bits(d.key),
            "{} overruns its key field",
            d.name
        );
        assert!(
            d.bits + d.wire_shift <= u32::from(d.bytes) * 8,
            "{} does not fit {} bytes",
            d.name,
            d.bytes
        );
        // A wide field is exactly its 128-bit pair.
        assert_eq!(d.is_wide(), d.key.high_half().is_some(), "{}", d.name);
        if d.is_wide() {
            assert!(matches!(d.syntax, Some(Syntax::Ipv6 | Syntax::Label)));
        }
        assert!(d.oxm.is_some() || d.nxm.is_some() || d.syntax.is_some());
    }
}

#[test]
fn every_key_field_has_a_plain_text_entry() {
    for f in Field::ALL {
        let key = f.low_half().unwrap_or(f);
        let whole = FIELDS
            .iter()
            .any(|d| d.key == key && d.syntax.is_some() && d.is_plain() && d.bits == key_bits(key))
            || key == Field::IpFrag;
        assert!(whole, "{} has no entry carrying it whole", f.name());
        // ...and so a syntax and an NXM/OXM name that parse back.
        let name = nxm_name(f);
        assert_eq!(by_name(name).map(|d| d.key), Some(key), "{name}");
        let _ = syntax_of(f);
    }
}

/// Operands keep the entry they were named by only where a key field
/// has several whole ones: the transport ports' UDP and SCTP names (TCP's
/// are the key's own).
#[test]
fn only_the_other_transport_protocols_names_are_kept_by_operands() {
    let kept: Vec<&str> = FIELDS.iter().filter_map(operand_named).collect();
    assert_eq!(kept, ["udp_src", "udp_dst", "sctp_src", "sctp_dst"]);
    assert_eq!(operand_header_name("udp_src"), Some("NXM_OF_UDP_SRC"));
    assert_eq!(operand_header_name("sctp_dst"), Some("OXM_OF_SCTP_DST"));
}

#[test]
fn wire_headers_are_ordered_and_complete() {
    let hs = wire_headers();
    let total: usize = FIELDS.iter().map(|d| d.headers().count()).sum();
    assert_eq!(hs.len(), total);
    assert_eq!(hs[0].1.name, "OXM_OF_IN_PORT");
    for (d, h) in hs {
        let (d2, h2) = by_header(h.class, h.code).expect(h.name);
        assert!(std::ptr::eq(*d, d2) && std::ptr::eq(*h, h2));
    }
    // The NXM names of fields that also have an OXM header decode to
    // the same field as OVS's meta-flow has them (NXM_OF_UDP_SRC is
    // udp_src, not tcp_src, though both are the key's TpSrc).
    for (class, code, name) in [
        (OXM_CLASS_NXM0, 11, "udp_src"),
        (OXM_CLASS_NXM0, 12, "udp_dst"),
        (OXM_CLASS_NXM0, 13, "icmp_type"),
        (OXM_CLASS_NXM0, 14, "icmp_code"),
        (OXM_CLASS_NXM0, 15, "arp_op"),
        (OXM_CLASS_NXM1, 28, "nw_ecn"),
    ] {
        let (d, _) = by_header(class, code).expect(name);
        assert_eq!(d.name, name);
    }
}

#[test]
fn satisfied_prerequisites_are_met() {
    for d in &FIELDS {
        let mut m = Match::catch_all();
        if d.prereq != Prereq::None {
            assert!(!m.meets(d.prereq), "{}", d.name);
        }
        m.pin(&d.prereq.least());
        assert!(m.meets(d.prereq), "{}", d.name);
        assert!(m.check_prerequisites().is_ok(), "{}", d.name);
        let mut with = m;
        if d.is_wide() {
            with.set128_masked(d.key, 1, u128::MAX);
        } else {
            with.set_exact(d.key, 1);
        }
        assert!(with.prerequisites_met(d.key), "{}", d.name);
    }
}

#[test]
fn the_keys_names_agree_with_the_registry() {
    for f in Field::ALL {
        if f.is_half() {
            let whole = name_of(f);
            assert!(f.name().starts_with(&format!("{whole}[")), "{}", f.name());
        } else {
            assert_eq!(name_of(f), f.name());
        }
    }
}

#[test]
fn the_encode_order_has_every_matchable_key_field_once() {
    let order = encode_order();
    let want: Vec<Field> = Field::ALL
        .into_iter()
        .filter(|f| f.low_half().is_none_or(|low| low == *f))
        .collect();
    assert_eq!(order.len(), want.len());
    for f in want {
        assert!(order.contains(&f), "{} is never encoded", f.name());
    }
    // OVS's order: in_port first, OpenFlow metadata last.
    assert_eq!(order.first(), Some(&Field::InPort));
    assert_eq!(order.last(), Some(&Field::Metadata));
}
