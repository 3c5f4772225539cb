//! Printing rules and groups the way `ovs-ofctl -O OpenFlow13 dump-flows`
//! and `dump-groups` print them (OVS 3.1).

use super::fields::{self, format_ipv4, format_mac, format_port, format_value, nxm_name};
use crate::action::{ct_flags, nat_flags, port, Action, CtAction, CtZone, Instructions, SubField};
use crate::flow_mod::{flow_mod_flags, GroupType};
use crate::group::Group;
use crate::key::Field;
use crate::matching::{
    Match, ETH_TYPE_ARP, ETH_TYPE_IPV4, ETH_TYPE_IPV6, IP_PROTO_ICMP, IP_PROTO_SCTP, IP_PROTO_TCP,
    IP_PROTO_UDP,
};
use crate::rule::Rule;
use std::fmt::Write;

const DEFAULT_PRIORITY: u16 = 0x8000;

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

/// Integer field, hex: `name=0x2a` or `name=0x2a/0xff`.
fn put_hex(s: &mut String, name: &str, v: u64, m: u64, full: u64) {
    if m == full {
        let _ = write!(s, "{name}={},", c_hex(v));
    } else {
        let _ = write!(s, "{name}={}/{},", c_hex(v), c_hex(m));
    }
}

/// Decimal when exact, hex value/mask otherwise (OVS's be16 format).
fn put_dec(s: &mut String, name: &str, v: u64, m: u64, full: u64) {
    if m == full {
        let _ = write!(s, "{name}={v},");
    } else {
        let _ = write!(s, "{name}={}/{},", c_hex(v), c_hex(m));
    }
}

fn put_ip(s: &mut String, name: &str, v: u64, m: u64) {
    let m = m as u32;
    if m == u32::MAX {
        let _ = write!(s, "{name}={},", format_ipv4(v));
    } else if m.leading_ones() + m.trailing_zeros() == 32 {
        let _ = write!(s, "{name}={}/{},", format_ipv4(v), m.leading_ones());
    } else {
        let _ = write!(
            s,
            "{name}={}/{},",
            format_ipv4(v),
            format_ipv4(u64::from(m))
        );
    }
}

fn put_mac(s: &mut String, name: &str, v: u64, m: u64) {
    if m == Field::EthDst.full_mask() {
        let _ = write!(s, "{name}={},", format_mac(v));
    } else {
        let _ = write!(s, "{name}={}/{},", format_mac(v), format_mac(m));
    }
}

/// A match with its priority, in OVS's field order, no trailing comma:
/// `priority=100,ct_state=-trk,ip,reg0=0x1,in_port=3,nw_dst=10.0.0.0/8`.
pub fn format_match(m: &Match, priority: u16) -> String {
    let mut s = String::new();
    if priority != DEFAULT_PRIORITY {
        let _ = write!(s, "priority={priority},");
    }
    let get = |f: Field| m.get(f);
    let (v, mk) = get(Field::PktMark);
    if mk != 0 {
        put_hex(&mut s, "pkt_mark", v, mk, Field::PktMark.full_mask());
    }
    let (v, mk) = get(Field::CtState);
    if mk != 0 {
        s.push_str("ct_state=");
        let known: u64 = fields::CT_STATE_BITS.iter().map(|(_, b)| b).sum();
        if mk & !known != 0 {
            let _ = write!(s, "{v:#x}/{mk:#x}");
        } else {
            for (name, bit) in fields::CT_STATE_BITS {
                if mk & bit != 0 {
                    s.push(if v & bit != 0 { '+' } else { '-' });
                    s.push_str(name);
                }
            }
        }
        s.push(',');
    }
    let (v, mk) = get(Field::CtZone);
    if mk != 0 {
        put_dec(&mut s, "ct_zone", v, mk, Field::CtZone.full_mask());
    }
    let (v, mk) = get(Field::CtMark);
    if mk != 0 {
        put_hex(&mut s, "ct_mark", v, mk, Field::CtMark.full_mask());
    }
    let (v, mk) = m.ct_label();
    if mk == u128::MAX {
        let _ = write!(s, "ct_label={},", c_hex128(v));
    } else if mk != 0 {
        let _ = write!(s, "ct_label={}/{},", c_hex128(v), c_hex128(mk));
    }
    let eth_type = m.exact(Field::EthType).map(|t| t as u16);
    let proto = m.exact(Field::IpProto).map(|p| p as u8);
    let mut skip_type = false;
    let mut skip_proto = false;
    match eth_type {
        Some(ETH_TYPE_IPV4) => {
            skip_type = true;
            let name = match proto {
                Some(IP_PROTO_ICMP) => Some("icmp"),
                Some(IP_PROTO_TCP) => Some("tcp"),
                Some(IP_PROTO_UDP) => Some("udp"),
                Some(IP_PROTO_SCTP) => Some("sctp"),
                _ => None,
            };
            match name {
                Some(n) => {
                    skip_proto = true;
                    s.push_str(n);
                }
                None => s.push_str("ip"),
            }
            s.push(',');
        }
        Some(ETH_TYPE_IPV6) => {
            skip_type = true;
            s.push_str("ipv6,");
        }
        Some(ETH_TYPE_ARP) => {
            skip_type = true;
            s.push_str("arp,");
        }
        _ => {}
    }
    for r in 0..8u8 {
        let (v, mk) = get(Field::Reg(r));
        if mk != 0 {
            put_hex(&mut s, &format!("reg{r}"), v, mk, Field::Reg(r).full_mask());
        }
    }
    let (v, mk) = get(Field::TunId);
    if mk != 0 {
        put_hex(&mut s, "tun_id", v, mk, u64::MAX);
    }
    for (f, name) in [(Field::TunSrc, "tun_src"), (Field::TunDst, "tun_dst")] {
        let (v, mk) = get(f);
        if mk != 0 {
            put_ip(&mut s, name, v, mk);
        }
    }
    let (v, mk) = get(Field::Metadata);
    if mk != 0 {
        put_hex(&mut s, "metadata", v, mk, u64::MAX);
    }
    let (v, mk) = get(Field::InPort);
    if mk != 0 {
        let _ = write!(s, "in_port={},", format_port(v as u32));
    }
    let (v, mk) = get(Field::VlanTci);
    if mk != 0 {
        put_hex(&mut s, "vlan_tci", v, mk, Field::VlanTci.full_mask());
    }
    for (f, name) in [(Field::EthSrc, "dl_src"), (Field::EthDst, "dl_dst")] {
        let (v, mk) = get(f);
        if mk != 0 {
            put_mac(&mut s, name, v, mk);
        }
    }
    let (v, mk) = get(Field::EthType);
    if mk != 0 && !skip_type {
        let _ = write!(s, "dl_type=0x{v:04x},");
    }
    let is_arp = eth_type == Some(ETH_TYPE_ARP);
    let (src, dst) = if is_arp {
        ("arp_spa", "arp_tpa")
    } else {
        ("nw_src", "nw_dst")
    };
    for (f, name) in [(Field::IpSrc, src), (Field::IpDst, dst)] {
        let (v, mk) = get(f);
        if mk != 0 {
            put_ip(&mut s, name, v, mk);
        }
    }
    let (v, mk) = get(Field::IpProto);
    if mk != 0 && !skip_proto {
        let name = if is_arp { "arp_op" } else { "nw_proto" };
        let _ = write!(s, "{name}={v},");
    }
    if is_arp {
        for (f, name) in [(Field::ArpSha, "arp_sha"), (Field::ArpTha, "arp_tha")] {
            let (v, mk) = get(f);
            if mk != 0 {
                put_mac(&mut s, name, v, mk);
            }
        }
    }
    let (v, mk) = get(Field::IpDscp);
    if mk != 0 {
        let _ = write!(s, "nw_tos={},", v << 2);
    }
    let (v, mk) = get(Field::IpEcn);
    if mk != 0 {
        let _ = write!(s, "nw_ecn={v},");
    }
    let (v, mk) = get(Field::IpTtl);
    if mk != 0 {
        let _ = write!(s, "nw_ttl={v},");
    }
    let (v, mk) = get(Field::IpFrag);
    let frag = match (mk & 3, v & 3) {
        (3, 3) => Some("later"),
        (3, 1) => Some("first"),
        (3, 0) => Some("no"),
        (3, _) => Some("<error>"),
        (1, 1) => Some("yes"),
        (1, _) => Some("no"),
        (2, 2) => Some("later"),
        (2, _) => Some("not_later"),
        _ => None,
    };
    if let Some(f) = frag {
        let _ = write!(s, "nw_frag={f},");
    }
    let is_icmp = eth_type == Some(ETH_TYPE_IPV4) && proto == Some(IP_PROTO_ICMP);
    let (a, b) = if is_icmp {
        ("icmp_type", "icmp_code")
    } else {
        ("tp_src", "tp_dst")
    };
    for (f, name) in [(Field::TpSrc, a), (Field::TpDst, b)] {
        let (v, mk) = get(f);
        if mk != 0 {
            put_dec(&mut s, name, v, mk, 0xffff);
        }
    }
    if s.ends_with(',') {
        s.pop();
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
    let name = nxm_name(sf.field);
    let ofs = sf.wire_ofs();
    if sf.ofs == 0 && sf.nbits == sf.field.bits() && !sf.field.is_ct_label() {
        format!("{name}[]")
    } else if sf.nbits == 1 {
        format!("{name}[{ofs}]")
    } else {
        format!("{name}[{ofs}..{}]", ofs + sf.nbits - 1)
    }
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
fn c_hex(v: u64) -> String {
    if v == 0 {
        "0".into()
    } else {
        format!("{v:#x}")
    }
}

/// [`c_hex`] of a 128-bit value (ct_label).
fn c_hex128(v: u128) -> String {
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
