//! Printing rules and groups the way `ovs-ofctl -O OpenFlow13 dump-flows`
//! and `dump-groups` print them (OVS 3.1).

use super::fields::{format_ipv4, format_ipv6_masked, format_port, format_value, nxm_name};
pub use super::print_match::format_match;
use crate::action::{ct_flags, nat_flags, port, Action, CtAction, CtZone, Instructions, SubField};
use crate::flow_mod::{flow_mod_flags, GroupType};
use crate::group::Group;
use crate::key::Field;
use crate::rule::Rule;
use std::fmt::Write;

pub(super) const DEFAULT_PRIORITY: u16 = 0x8000;

/// A flow as one `dump-flows` line, leading space included:
/// ` cookie=0x0, duration=1.5s, table=0, n_packets=0, n_bytes=0, priority=100,ip actions=drop`.
pub fn format_rule(rule: &Rule) -> String {
    let (packets, bytes) = rule.stats.read();
    let elapsed = rule.installed.elapsed();
    let mut s = format!(
        " cookie={:#x}, duration={}.{:03}s, table={}, n_packets={}, n_bytes={}, ",
        rule.cookie,
        elapsed.as_secs(),
        elapsed.subsec_millis(),
        rule.table_id,
        packets,
        bytes
    );
    push_rule_body(&mut s, rule);
    s
}

/// A flow without its statistics, for traces:
/// `cookie=0x0, table=0, priority=100,ip actions=drop` (cookie omitted when 0).
pub fn format_rule_brief(rule: &Rule) -> String {
    let mut s = String::new();
    if rule.cookie != 0 {
        let _ = write!(s, "cookie={:#x}, ", rule.cookie);
    }
    let _ = write!(s, "table={}, ", rule.table_id);
    push_rule_body(&mut s, rule);
    s
}

fn push_rule_body(s: &mut String, rule: &Rule) {
    if rule.idle_timeout != 0 {
        let _ = write!(s, "idle_timeout={}, ", rule.idle_timeout);
    }
    if rule.hard_timeout != 0 {
        let _ = write!(s, "hard_timeout={}, ", rule.hard_timeout);
    }
    for (bit, name) in [
        (flow_mod_flags::SEND_FLOW_REM, "send_flow_rem"),
        (flow_mod_flags::CHECK_OVERLAP, "check_overlap"),
        (flow_mod_flags::RESET_COUNTS, "reset_counts"),
        (flow_mod_flags::NO_PKT_COUNTS, "no_packet_counts"),
        (flow_mod_flags::NO_BYT_COUNTS, "no_byte_counts"),
    ] {
        if rule.flags & bit != 0 {
            s.push_str(name);
            s.push(' ');
        }
    }
    let m = format_match(&rule.matching, rule.priority);
    s.push_str(&m);
    if !s.ends_with(' ') {
        s.push(' ');
    }
    s.push_str("actions=");
    s.push_str(&format_instructions(&rule.instructions));
}

/// A group as one `dump-groups` line, leading space included.
pub fn format_group(group: &Group) -> String {
    let ty = match group.group_type {
        GroupType::All => "all",
        GroupType::Select => "select",
        GroupType::Indirect => "indirect",
        GroupType::FastFailover => "ff",
    };
    let mut s = format!(" group_id={},type={}", group.id, ty);
    for b in &group.buckets {
        s.push_str(",bucket=");
        if group.group_type == GroupType::Select && b.weight != 1 {
            let _ = write!(s, "weight:{},", b.weight);
        }
        if b.watch_port != port::ANY {
            let _ = write!(s, "watch_port:{},", format_port(b.watch_port));
        }
        if b.watch_group != crate::action::group::ANY {
            let _ = write!(s, "watch_group:{},", b.watch_group);
        }
        s.push_str("actions=");
        if b.actions.is_empty() {
            s.push_str("drop");
        } else {
            s.push_str(&format_actions(&b.actions));
        }
    }
    s
}

/// Instructions as the text after `actions=` (`drop` when empty).
pub fn format_instructions(ins: &Instructions) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(m) = ins.meter {
        parts.push(format!("meter:{m}"));
    }
    if let Some(a) = &ins.apply_actions {
        if !a.is_empty() {
            parts.push(format_actions(a));
        }
    }
    if ins.clear_actions {
        parts.push("clear_actions".into());
    }
    if let Some(a) = &ins.write_actions {
        parts.push(format!("write_actions({})", format_actions(a)));
    }
    if let Some((v, m)) = ins.write_metadata {
        if m == u64::MAX {
            parts.push(format!("write_metadata:{v:#x}"));
        } else {
            parts.push(format!("write_metadata:{v:#x}/{m:#x}"));
        }
    }
    if let Some(t) = ins.goto_table {
        parts.push(format!("goto_table:{t}"));
    }
    if parts.is_empty() {
        "drop".into()
    } else {
        parts.join(",")
    }
}

/// `NXM_NX_REG0[]`, `NXM_OF_ETH_DST[0..31]`, `NXM_NX_REG1[5]`.
/// A ct_label half prints as its range of the whole label
/// (`NXM_NX_CT_LABEL[64..95]`), never as `[]`.
pub(crate) fn format_subfield(sf: &SubField) -> String {
    let name = sf
        .named
        .and_then(crate::field::registry::operand_header_name)
        .unwrap_or_else(|| nxm_name(sf.field));
    let ofs = sf.wire_ofs();
    if sf.ofs == 0 && sf.nbits == sf.field.bits() && !sf.field.is_half() {
        format!("{name}[]")
    } else if sf.nbits == 1 {
        format!("{name}[{ofs}]")
    } else {
        format!("{name}[{ofs}..{}]", ofs + sf.nbits - 1)
    }
}

/// The name of the 128-bit field whose low half is `low`.
pub(crate) fn wide_name(low: Field) -> &'static str {
    crate::field::name_of(low)
}

/// The name `set_field:` prints for a field.
fn set_field_name(field: Field) -> &'static str {
    match field {
        Field::EthSrc => "eth_src",
        Field::EthDst => "eth_dst",
        Field::EthType => "eth_type",
        Field::IpDscp => "ip_dscp",
        Field::TpSrc => "tcp_src",
        Field::TpDst => "tcp_dst",
        f => f.name(),
    }
}

/// `C`'s `%#x`: `0` for zero, `0x2a` otherwise.
pub(super) fn c_hex(v: u64) -> String {
    if v == 0 {
        "0".into()
    } else {
        format!("{v:#x}")
    }
}

/// [`c_hex`] of a 128-bit value (ct_label).
pub(super) fn c_hex128(v: u128) -> String {
    if v == 0 {
        "0".into()
    } else {
        format!("{v:#x}")
    }
}

/// An action list, comma-separated.
pub fn format_actions(actions: &[Action]) -> String {
    let parts: Vec<String> = actions.iter().map(format_action).collect();
    parts.join(",")
}

fn format_action(a: &Action) -> String {
    match a {
        Action::Output { port: p, max_len } => {
            if *p == port::CONTROLLER {
                format!("CONTROLLER:{max_len}")
            } else if *p < port::MAX {
                format!("output:{p}")
            } else {
                format_port(*p)
            }
        }
        Action::Group(g) => format!("group:{g}"),
        Action::SetField { field, value } => {
            format!(
                "set_field:{}->{}",
                format_value(*field, *value),
                set_field_name(*field)
            )
        }
        Action::SetCtLabel { value } => format!("set_field:{}->ct_label", c_hex128(*value)),
        Action::SetField128 { field, value } => format!(
            "set_field:{}->{}",
            format_ipv6_masked(*value, u128::MAX),
            wide_name(*field)
        ),
        Action::RegLoad { dst, value } => {
            format!("load:{}->{}", c_hex(*value), format_subfield(dst))
        }
        Action::RegMove { src, dst } => {
            format!("move:{}->{}", format_subfield(src), format_subfield(dst))
        }
        Action::OutputReg { src, max_len } => {
            if *max_len == u16::MAX {
                format!("output:{}", format_subfield(src))
            } else {
                format!("output(port={},max_len={max_len})", format_subfield(src))
            }
        }
        Action::Resubmit { in_port, table } => match (*in_port, table) {
            (p, None) if p != port::IN_PORT => format!("resubmit:{}", format_port(p)),
            (p, t) => {
                let p = if p == port::IN_PORT {
                    String::new()
                } else {
                    format_port(p)
                };
                let t = t.map(|t| t.to_string()).unwrap_or_default();
                format!("resubmit({p},{t})")
            }
        },
        Action::Note(bytes) => {
            let hex: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
            format!("note:{}", hex.join("."))
        }
        Action::Ct(ct) => format_ct(ct),
        Action::Nat(nat) => format_nat(nat),
        Action::SetNwTtl(ttl) => format!("mod_nw_ttl:{ttl}"),
        Action::DecNwTtl => "dec_ttl".to_string(),
        Action::PushVlan(ethertype) => format!("push_vlan:{ethertype:#06x}"),
        Action::PopVlan => "pop_vlan".to_string(),
        Action::PushMpls(ethertype) => format!("push_mpls:{ethertype:#06x}"),
        Action::PopMpls(ethertype) => format!("pop_mpls:{ethertype:#06x}"),
        Action::SetMplsTtl(ttl) => format!("set_mpls_ttl({ttl})"),
        Action::DecMplsTtl => "dec_mpls_ttl".to_string(),
        Action::CopyTtlOut => "copy_ttl_out".to_string(),
        Action::CopyTtlIn => "copy_ttl_in".to_string(),
        Action::PushPbb(ethertype) => format!("push_pbb:{ethertype:#06x}"),
        Action::PopPbb => "pop_pbb".to_string(),
        Action::SetVlanVid(v) => format!("set_field:{v}->vlan_vid"),
        Action::SetVlanPcp(p) => format!("set_field:{p}->vlan_pcp"),
    }
}

fn format_ct(ct: &CtAction) -> String {
    let mut s = String::from("ct(");
    if ct.flags & ct_flags::COMMIT != 0 {
        s.push_str("commit,");
    }
    if ct.flags & ct_flags::FORCE != 0 {
        s.push_str("force,");
    }
    if let Some(t) = ct.recirc_table {
        let _ = write!(s, "table={t},");
    }
    match ct.zone {
        CtZone::Field(sf) => {
            let _ = write!(s, "zone={},", format_subfield(&sf));
        }
        CtZone::Immediate(0) => {}
        CtZone::Immediate(z) => {
            let _ = write!(s, "zone={z},");
        }
    }
    let mut rest = ct.actions.as_slice();
    if let Some((Action::Nat(nat), tail)) = rest.split_first() {
        s.push_str(&format_nat(nat));
        s.push(',');
        rest = tail;
    }
    if !rest.is_empty() {
        let _ = write!(s, "exec({}),", format_actions(rest));
    }
    match ct.alg {
        0 => {}
        21 => s.push_str("alg=ftp,"),
        69 => s.push_str("alg=tftp,"),
        a => {
            let _ = write!(s, "alg={a},");
        }
    }
    if s.ends_with(',') {
        s.pop();
    }
    s.push(')');
    s
}

fn format_nat(nat: &crate::action::NatAction) -> String {
    let mut s = String::from("nat");
    let kind = if nat.flags & nat_flags::SRC != 0 {
        Some("src")
    } else if nat.flags & nat_flags::DST != 0 {
        Some("dst")
    } else {
        None
    };
    let mut args: Vec<String> = Vec::new();
    if let Some(kind) = kind {
        let mut r = format!("{kind}=");
        if let Some(lo) = nat.ipv4_min {
            r.push_str(&format_ipv4(u64::from(lo)));
            if let Some(hi) = nat.ipv4_max.filter(|hi| *hi != lo) {
                let _ = write!(r, "-{}", format_ipv4(u64::from(hi)));
            }
        }
        if let Some(lo) = nat.ipv6_min {
            // In brackets when a port range follows, as OVS prints them.
            let addr = |a: u128| {
                let a = std::net::Ipv6Addr::from(a);
                if nat.proto_min.is_some() {
                    format!("[{a}]")
                } else {
                    a.to_string()
                }
            };
            r.push_str(&addr(lo));
            if let Some(hi) = nat.ipv6_max.filter(|hi| *hi != lo) {
                let _ = write!(r, "-{}", addr(hi));
            }
        }
        if let Some(lo) = nat.proto_min {
            let _ = write!(r, ":{lo}");
            if let Some(hi) = nat.proto_max.filter(|hi| *hi != lo) {
                let _ = write!(r, "-{hi}");
            }
        }
        args.push(r);
    }
    for (bit, name) in [
        (nat_flags::PERSISTENT, "persistent"),
        (nat_flags::PROTO_HASH, "hash"),
        (nat_flags::PROTO_RANDOM, "random"),
    ] {
        if nat.flags & bit != 0 {
            args.push(name.into());
        }
    }
    if !args.is_empty() {
        let _ = write!(s, "({})", args.join(","));
    }
    s
}
