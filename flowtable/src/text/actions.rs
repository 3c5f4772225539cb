//! Parsing of `actions=...` (actions and instructions) and of group specs.

use super::fields::{self, parse_port, parse_uint, parse_uint_bits, Syntax};
use super::label::{label_loads, parse_label_range};
use super::set_field::{parse_set_field, parse_u16_literal};
use super::subfield::parse_subfield;
use super::{split_top, PortNames, TextError};
use crate::action::{
    ct_flags, group as group_no, nat_flags, port, Action, Bucket, CtAction, CtZone, Instructions,
    NatAction, CT_LABEL_BITS,
};
use crate::flow_mod::{BucketPos, GroupMod, GroupModCommand, GroupType};
use crate::key::Field;

/// Parses the text after `actions=` into instructions, as ovs-ofctl
/// encodes it for OpenFlow 1.3: plain actions form the apply-actions
/// instruction, `drop` (or nothing) is the empty instruction set.
pub(crate) fn parse_instructions(
    s: &str,
    ports: Option<&PortNames>,
) -> Result<Instructions, TextError> {
    let mut ins = Instructions::default();
    let mut apply = Vec::new();
    let mut saw_drop = false;
    for token in split_top(s)? {
        let (name, arg) = split_action(token);
        match name {
            "drop" if arg.is_none() => saw_drop = true,
            "goto_table" => {
                let t = parse_uint_bits(token, need(token, arg)?, 8)?;
                if ins.goto_table.replace(t as u8).is_some() {
                    return Err(TextError::action(token, "goto_table given twice"));
                }
            }
            "clear_actions" => ins.clear_actions = true,
            "write_actions" => {
                let inner = need(token, arg)?;
                ins.write_actions = Some(parse_action_list(inner, ports)?);
            }
            "write_metadata" => {
                let v = need(token, arg)?;
                let (value, mask) = match v.split_once('/') {
                    Some((a, m)) => (parse_uint(token, a)?, parse_uint(token, m)?),
                    None => (parse_uint(token, v)?, u64::MAX),
                };
                ins.write_metadata = Some((value & mask, mask));
            }
            "meter" => {
                let m = parse_uint_bits(token, need(token, arg)?, 32)?;
                ins.meter = Some(m as u32);
            }
            _ => apply.extend(parse_action(token, ports)?),
        }
    }
    if saw_drop && (!apply.is_empty() || ins != Instructions::default()) {
        return Err(TextError::action("drop", "`drop` must be the only action"));
    }
    if !apply.is_empty() {
        ins.apply_actions = Some(apply);
    }
    Ok(ins)
}

/// Parses a comma-separated action list (no instructions).
pub(crate) fn parse_action_list(
    s: &str,
    ports: Option<&PortNames>,
) -> Result<Vec<Action>, TextError> {
    let mut out = Vec::new();
    for token in split_top(s)? {
        if token == "drop" {
            continue;
        }
        out.extend(parse_action(token, ports)?);
    }
    Ok(out)
}

/// `name:arg`, `name(arg)` or bare `name`.
fn split_action(token: &str) -> (&str, Option<&str>) {
    let colon = token.find(':');
    let paren = token.find('(');
    match (colon, paren) {
        (Some(c), Some(p)) if p < c => paren_arg(token, p),
        (Some(c), _) => (&token[..c], Some(&token[c + 1..])),
        (None, Some(p)) => paren_arg(token, p),
        (None, None) => (token, None),
    }
}

fn paren_arg(token: &str, p: usize) -> (&str, Option<&str>) {
    let inner = token[p + 1..].strip_suffix(')').unwrap_or(&token[p + 1..]);
    (&token[..p], Some(inner))
}

fn need<'a>(token: &str, arg: Option<&'a str>) -> Result<&'a str, TextError> {
    arg.ok_or_else(|| TextError::action(token, "needs an argument"))
}

/// Parses one action; a masked `set_field` may become several loads.
fn parse_action(token: &str, ports: Option<&PortNames>) -> Result<Vec<Action>, TextError> {
    let (name, arg) = split_action(token);
    let one = |a: Action| Ok(vec![a]);
    match name {
        "output" => {
            let a = need(token, arg)?;
            if token.starts_with("output(") {
                return parse_output_paren(token, a, ports).map(|x| vec![x]);
            }
            if a.contains('[') || fields::lookup(a).is_some_and(|(_, s)| s != Syntax::Port) {
                let src = parse_subfield(token, a)?;
                return one(Action::OutputReg {
                    src,
                    max_len: u16::MAX,
                });
            }
            one(output(parse_port(token, a, ports)?, None))
        }
        "controller" => {
            let max_len = match arg {
                None => u16::MAX,
                Some(a) => {
                    let v = a.strip_prefix("max_len=").unwrap_or(a);
                    parse_uint_bits(token, v, 16)? as u16
                }
            };
            one(Action::Output {
                port: port::CONTROLLER,
                max_len,
            })
        }
        "in_port" if arg.is_none() => one(output(port::IN_PORT, None)),
        "group" => {
            let g = parse_uint_bits(token, need(token, arg)?, 32)?;
            one(Action::Group(g as u32))
        }
        "set_field" => parse_set_field(token, need(token, arg)?),
        "load" => {
            let a = need(token, arg)?;
            let (v, dst) = a
                .split_once("->")
                .ok_or_else(|| TextError::action(token, "expected load:VALUE->DST"))?;
            if let Some((ofs, nbits)) = parse_label_range(token, dst)? {
                // OVS turns a load into a masked write of the field and
                // sends that as loads of at most 64 bits each.
                let value = u128::from(parse_uint(token, v)?);
                if nbits < 64 && value >> nbits != 0 {
                    return Err(TextError::action(
                        token,
                        format!("value {v} does not fit in {nbits} bits"),
                    ));
                }
                let mask = (u128::MAX >> (CT_LABEL_BITS - nbits)) << ofs;
                return label_loads(token, value << ofs, mask);
            }
            let dst = parse_subfield(token, dst)?;
            let value = parse_uint(token, v)?;
            if dst.nbits < 64 && value >> dst.nbits != 0 {
                return Err(TextError::action(
                    token,
                    format!("value {v} does not fit in {} bits", dst.nbits),
                ));
            }
            one(Action::RegLoad { dst, value })
        }
        "move" => {
            let a = need(token, arg)?;
            let (src, dst) = a
                .split_once("->")
                .ok_or_else(|| TextError::action(token, "expected move:SRC->DST"))?;
            let src = parse_subfield(token, src)?;
            let dst = parse_subfield(token, dst)?;
            if src.nbits != dst.nbits {
                return Err(TextError::action(
                    token,
                    format!(
                        "source is {} bits wide but destination is {}",
                        src.nbits, dst.nbits
                    ),
                ));
            }
            one(Action::RegMove { src, dst })
        }
        "resubmit" => parse_resubmit(token, need(token, arg)?, ports).map(|a| vec![a]),
        "note" => parse_note(token, arg.unwrap_or("")).map(|a| vec![a]),
        "ct" => parse_ct(token, arg.unwrap_or(""), ports).map(|a| vec![a]),
        "nat" => parse_nat(token, arg).map(|a| vec![Action::Nat(a)]),
        "mod_nw_ttl" => {
            let (ttl, _) = fields::parse_field_value(Field::IpTtl, need(token, arg)?)?;
            one(Action::SetNwTtl(ttl as u8))
        }
        "push_vlan" => {
            let arg = need(token, arg)?;
            let ethertype = parse_u16_literal(arg).ok_or_else(|| TextError::BadAction {
                token: token.to_string(),
                reason: format!("`{arg}` is not a 16-bit ethertype"),
            })?;
            one(Action::PushVlan(ethertype))
        }
        "pop_vlan" | "strip_vlan" if arg.is_none() => one(Action::PopVlan),
        "push_mpls" | "pop_mpls" => {
            let arg = need(token, arg)?;
            let ethertype = parse_u16_literal(arg).ok_or_else(|| TextError::BadAction {
                token: token.to_string(),
                reason: format!("`{arg}` is not a 16-bit ethertype"),
            })?;
            if name == "push_mpls" {
                one(Action::PushMpls(ethertype))
            } else {
                one(Action::PopMpls(ethertype))
            }
        }
        "set_mpls_ttl" => {
            let (ttl, _) = fields::parse_field_value(Field::MplsTtl, need(token, arg)?)?;
            one(Action::SetMplsTtl(ttl as u8))
        }
        "dec_mpls_ttl" if arg.is_none() => one(Action::DecMplsTtl),
        "copy_ttl_out" if arg.is_none() => one(Action::CopyTtlOut),
        "push_pbb" => {
            let arg = need(token, arg)?;
            let ethertype = parse_u16_literal(arg).ok_or_else(|| TextError::BadAction {
                token: token.to_string(),
                reason: format!("`{arg}` is not a 16-bit ethertype"),
            })?;
            one(Action::PushPbb(ethertype))
        }
        "pop_pbb" if arg.is_none() => one(Action::PopPbb),
        "copy_ttl_in" if arg.is_none() => one(Action::CopyTtlIn),
        // OpenFlow 1.1's actions, which OVS sends as set_field in 1.3.
        "set_mpls_label" | "set_mpls_tc" => {
            let field = if name == "set_mpls_label" {
                Field::MplsLabel
            } else {
                Field::MplsTc
            };
            let (value, _) = fields::parse_field_value(field, need(token, arg)?)?;
            one(Action::SetField { field, value })
        }
        // Only the plain form: `dec_ttl(ids)` needs NXAST_DEC_TTL_CNT_IDS.
        "dec_ttl" if arg.is_none() => one(Action::DecNwTtl),
        "mod_dl_src" | "mod_dl_dst" | "mod_nw_src" | "mod_nw_dst" | "mod_tp_src" | "mod_tp_dst" => {
            let field = match name {
                "mod_dl_src" => Field::EthSrc,
                "mod_dl_dst" => Field::EthDst,
                "mod_nw_src" => Field::IpSrc,
                "mod_nw_dst" => Field::IpDst,
                "mod_tp_src" => Field::TpSrc,
                _ => Field::TpDst,
            };
            let (value, _) = fields::parse_field_value(field, need(token, arg)?)?;
            one(Action::SetField { field, value })
        }
        // A bare port number or reserved port name is an output.
        _ if arg.is_none() => match parse_port(token, name, None) {
            Ok(p) => one(output(p, None)),
            Err(_) => Err(TextError::UnknownAction(token.to_string())),
        },
        // `CONTROLLER:65535`, as dumps print it.
        _ if name.eq_ignore_ascii_case("CONTROLLER") => {
            let m = parse_uint_bits(token, need(token, arg)?, 16)?;
            one(Action::Output {
                port: port::CONTROLLER,
                max_len: m as u16,
            })
        }
        _ => Err(TextError::UnknownAction(token.to_string())),
    }
}

/// An OUTPUT action with ovs-ofctl's max_len default (all of the packet
/// for CONTROLLER, 0 otherwise).
fn output(p: u32, max_len: Option<u16>) -> Action {
    let default = if p == port::CONTROLLER { u16::MAX } else { 0 };
    Action::Output {
        port: p,
        max_len: max_len.unwrap_or(default),
    }
}

/// `output(port=P,max_len=N)`.
fn parse_output_paren(
    token: &str,
    inner: &str,
    ports: Option<&PortNames>,
) -> Result<Action, TextError> {
    let mut p = None;
    let mut reg = None;
    let mut max_len = None;
    for kv in split_top(inner)? {
        match kv.split_once('=') {
            Some(("port", v)) if v.contains('[') => reg = Some(parse_subfield(token, v)?),
            Some(("port", v)) => p = Some(parse_port(token, v, ports)?),
            Some(("max_len", v)) => max_len = Some(parse_uint_bits(token, v, 16)? as u16),
            _ => return Err(TextError::action(token, format!("unknown argument `{kv}`"))),
        }
    }
    match (p, reg) {
        (Some(p), None) => Ok(output(p, max_len)),
        (None, Some(src)) => Ok(Action::OutputReg {
            src,
            max_len: max_len.unwrap_or(u16::MAX),
        }),
        _ => Err(TextError::action(token, "needs exactly one port=")),
    }
}

/// `resubmit:PORT` or `resubmit([PORT],[TABLE])`.
fn parse_resubmit(token: &str, a: &str, ports: Option<&PortNames>) -> Result<Action, TextError> {
    if !token.contains('(') {
        return Ok(Action::Resubmit {
            in_port: parse_port(token, a, ports)?,
            table: None,
        });
    }
    let mut parts = a.splitn(3, ',');
    let p = parts.next().unwrap_or("").trim();
    let t = parts.next().unwrap_or("").trim();
    if parts.next().is_some() {
        return Err(TextError::action(
            token,
            "ct/trace arguments are not supported",
        ));
    }
    let in_port = if p.is_empty() {
        port::IN_PORT
    } else {
        parse_port(token, p, ports)?
    };
    let table = if t.is_empty() {
        None
    } else {
        let v = parse_uint_bits(token, t, 8)? as u8;
        (v != 255).then_some(v)
    };
    if in_port == port::IN_PORT && table.is_none() {
        return Err(TextError::action(token, "needs a port or a table"));
    }
    Ok(Action::Resubmit { in_port, table })
}

/// `note:HH.HH...`: hex bytes, padded with zeros the way the wire
/// encoding pads them (the action's 10 header bytes plus the note fill a
/// multiple of 8).
fn parse_note(token: &str, a: &str) -> Result<Action, TextError> {
    let mut bytes = Vec::new();
    let mut rest = a;
    while !rest.is_empty() {
        rest = rest.trim_start_matches('.');
        if rest.is_empty() {
            break;
        }
        let pair = rest
            .get(..2)
            .ok_or_else(|| TextError::action(token, "note bytes are pairs of hex digits"))?;
        let b = u8::from_str_radix(pair, 16)
            .map_err(|_| TextError::action(token, format!("`{pair}` is not a hex byte")))?;
        bytes.push(b);
        rest = &rest[2..];
    }
    let padded = (10 + bytes.len()).div_ceil(8) * 8 - 10;
    bytes.resize(padded, 0);
    Ok(Action::Note(bytes))
}

/// `ct(commit,force,zone=Z,table=T,alg=ftp,nat(...),exec(...))`.
fn parse_ct(token: &str, inner: &str, ports: Option<&PortNames>) -> Result<Action, TextError> {
    let mut ct = CtAction {
        flags: 0,
        zone: CtZone::Immediate(0),
        recirc_table: None,
        alg: 0,
        actions: Vec::new(),
    };
    for arg in split_top(inner)? {
        let (name, val) = split_kv(arg);
        match (name, val) {
            ("commit", None) => ct.flags |= ct_flags::COMMIT,
            ("force", None) => ct.flags |= ct_flags::FORCE,
            ("table", Some(v)) => {
                let t = parse_uint_bits(token, v, 8)? as u8;
                ct.recirc_table = (t != 255).then_some(t);
            }
            ("zone", Some(v)) => {
                ct.zone = if v.starts_with(|c: char| c.is_ascii_digit()) {
                    CtZone::Immediate(parse_uint_bits(token, v, 16)? as u16)
                } else {
                    CtZone::Field(parse_subfield(token, v)?)
                };
            }
            ("alg", Some(v)) => {
                ct.alg = match v {
                    "ftp" => 21,
                    "tftp" => 69,
                    _ => parse_uint_bits(token, v, 16)? as u16,
                }
            }
            ("nat", _) => ct
                .actions
                .push(Action::Nat(parse_nat(token, nat_arg(arg))?)),
            ("exec", _) => {
                let body = nat_arg(arg).unwrap_or("");
                ct.actions.extend(parse_action_list(body, ports)?);
            }
            _ => {
                return Err(TextError::action(
                    token,
                    format!("unknown ct argument `{arg}`"),
                ))
            }
        }
    }
    Ok(Action::Ct(ct))
}

/// `name=value` or bare `name` (also `name(...)`, reported as bare).
fn split_kv(arg: &str) -> (&str, Option<&str>) {
    let paren = arg.find('(');
    match arg.split_once('=') {
        Some((k, v)) if paren.is_none_or(|p| p > k.len()) => (k, Some(v)),
        _ => (paren.map_or(arg, |p| &arg[..p]), None),
    }
}

/// The text inside `name(...)`, if any.
fn nat_arg(arg: &str) -> Option<&str> {
    let p = arg.find('(')?;
    Some(arg[p + 1..].strip_suffix(')').unwrap_or(&arg[p + 1..]))
}

/// `nat` arguments: `src=IP[-IP][:PORT[-PORT]]` or `dst=...`, and the
/// flags `persistent`, `hash`, `random`.
fn parse_nat(token: &str, inner: Option<&str>) -> Result<NatAction, TextError> {
    let mut nat = NatAction::default();
    let Some(inner) = inner else {
        return Ok(nat);
    };
    for arg in split_top(inner)? {
        match split_kv(arg) {
            ("src", v) | ("dst", v) => {
                if nat.flags & (nat_flags::SRC | nat_flags::DST) != 0 {
                    return Err(TextError::action(token, "nat: only one of src/dst"));
                }
                nat.flags |= if arg.starts_with("src") {
                    nat_flags::SRC
                } else {
                    nat_flags::DST
                };
                if let Some(v) = v {
                    parse_nat_range(token, v, &mut nat)?;
                }
            }
            ("persistent", None) => nat.flags |= nat_flags::PERSISTENT,
            ("hash", None) => nat.flags |= nat_flags::PROTO_HASH,
            ("random", None) => nat.flags |= nat_flags::PROTO_RANDOM,
            _ => {
                return Err(TextError::action(
                    token,
                    format!("unknown nat argument `{arg}`"),
                ))
            }
        }
    }
    Ok(nat)
}

/// `IP[-IP][:PORT[-PORT]]`; IPv6 addresses as OVS takes them, bare
/// (`fd00::1-fd00::2`, no port range then: the colons are the address's)
/// or in brackets (`[fd00::1]-[fd00::2]:80`).
fn parse_nat_range(token: &str, v: &str, nat: &mut NatAction) -> Result<(), TextError> {
    let v6 = v.starts_with('[') || v.matches(':').count() > 1;
    let (addrs, ports) = if !v6 {
        match v.split_once(':') {
            Some((a, p)) => (a, Some(p)),
            None => (v, None),
        }
    } else if v.starts_with('[') {
        let end = v
            .rfind(']')
            .ok_or_else(|| TextError::action(token, "nat: `[` without `]`"))?;
        match &v[end + 1..] {
            "" => (&v[..=end], None),
            rest => match rest.strip_prefix(':') {
                Some(p) => (&v[..=end], Some(p)),
                None => return Err(TextError::action(token, format!("nat: garbage `{rest}`"))),
            },
        }
    } else {
        (v, None)
    };
    let (lo, hi) = match addrs.split_once('-') {
        Some((a, b)) => (a, Some(b)),
        None => (addrs, None),
    };
    if v6 {
        let addr = |s: &str| -> Result<u128, TextError> {
            let bare = s
                .strip_prefix('[')
                .and_then(|s| s.strip_suffix(']'))
                .unwrap_or(s);
            match fields::parse_ipv6(token, bare)? {
                (a, u128::MAX) => Ok(a),
                _ => Err(TextError::action(token, "nat: an address, not a prefix")),
            }
        };
        nat.ipv6_min = Some(addr(lo)?);
        if let Some(hi) = hi {
            nat.ipv6_max = Some(addr(hi)?);
        }
    } else {
        nat.ipv4_min = Some(fields::parse_ipv4(token, lo)?);
        if let Some(hi) = hi {
            nat.ipv4_max = Some(fields::parse_ipv4(token, hi)?);
        }
    }
    if let Some(p) = ports {
        let (lo, hi) = match p.split_once('-') {
            Some((a, b)) => (a, Some(b)),
            None => (p, None),
        };
        nat.proto_min = Some(parse_uint_bits(token, lo, 16)? as u16);
        if let Some(hi) = hi {
            nat.proto_max = Some(parse_uint_bits(token, hi, 16)? as u16);
        }
    }
    Ok(())
}

/// Parses a group spec (`group_id=N,type=select,bucket=...`) for
/// `command`. ovs-ofctl splits buckets at every `bucket=`, with or without
/// a comma before it (the agent writes `output:vxlan0bucket=...`).
pub(crate) fn parse_group_mod(
    line: &str,
    command: GroupModCommand,
    ports: Option<&PortNames>,
) -> Result<GroupMod, TextError> {
    let mut pieces = line.split("bucket=");
    let head = pieces.next().unwrap_or("");
    let mut group_id = None;
    let mut group_type = None;
    let mut command = command;
    let bucket_command = matches!(
        command,
        GroupModCommand::InsertBucket(_) | GroupModCommand::RemoveBucket(_)
    );
    let mut at = None;
    for token in split_top(head)? {
        match token.split_once('=') {
            Some(("group_id", v)) => {
                group_id = Some(match v {
                    "all" | "ALL" => group_no::ALL,
                    _ => parse_uint_bits(token, v, 32)? as u32,
                })
            }
            Some(("type", v)) => {
                group_type = Some(match v {
                    "all" => GroupType::All,
                    "select" => GroupType::Select,
                    "indirect" => GroupType::Indirect,
                    "ff" | "fast_failover" => GroupType::FastFailover,
                    _ => {
                        return Err(TextError::value(
                            token,
                            "type must be all, select, indirect or ff",
                        ))
                    }
                })
            }
            Some(("command_bucket_id", v)) if bucket_command => {
                at = Some(match v {
                    "first" => BucketPos::First,
                    "last" => BucketPos::Last,
                    "all" => BucketPos::All,
                    _ => match BucketPos::from_wire(parse_uint_bits(token, v, 32)? as u32) {
                        Some(at) => at,
                        None => return Err(TextError::value(token, "no such bucket position")),
                    },
                })
            }
            Some((k, _)) => return Err(TextError::UnknownField(k.to_string())),
            None => return Err(TextError::UnknownField(token.to_string())),
        }
    }
    match (command, at) {
        (GroupModCommand::InsertBucket(_), Some(BucketPos::All)) => {
            return Err(TextError::value(
                "command_bucket_id=all",
                "buckets are inserted first, last or after a bucket",
            ))
        }
        (GroupModCommand::InsertBucket(_), Some(at)) => command = GroupModCommand::InsertBucket(at),
        (GroupModCommand::InsertBucket(_), None) => {
            return Err(TextError::MissingValue("command_bucket_id".into()))
        }
        (GroupModCommand::RemoveBucket(_), at) => {
            command = GroupModCommand::RemoveBucket(at.unwrap_or(BucketPos::All))
        }
        _ => {}
    }
    let group_id = match (group_id, command) {
        (Some(g), _) => g,
        (None, GroupModCommand::Delete) => group_no::ALL,
        (None, _) => return Err(TextError::MissingValue("group_id".into())),
    };
    // A bucket command keeps the group's type whatever it says.
    let group_type = match (group_type, command) {
        (Some(t), _) => t,
        (None, GroupModCommand::Delete) => GroupType::All,
        (None, _) if bucket_command => GroupType::All,
        (None, _) => return Err(TextError::MissingValue("type".into())),
    };
    let default_weight = if group_type == GroupType::Select {
        1
    } else {
        0
    };
    let mut buckets = Vec::new();
    for (position, b) in pieces.enumerate() {
        if matches!(
            command,
            GroupModCommand::Delete | GroupModCommand::RemoveBucket(_)
        ) {
            return Err(TextError::Invalid {
                token: format!("bucket={b}"),
                reason: "this group command takes no buckets".into(),
            });
        }
        buckets.push(parse_bucket(b, position as u32, default_weight, ports)?);
    }
    Ok(GroupMod {
        command,
        group_type,
        group_id,
        buckets,
        selection: None,
    })
}

/// One bucket, numbered `position` unless it says `bucket_id:N`.
fn parse_bucket(
    s: &str,
    position: u32,
    default_weight: u16,
    ports: Option<&PortNames>,
) -> Result<Bucket, TextError> {
    let mut bucket = Bucket {
        bucket_id: position,
        weight: default_weight,
        watch_port: port::ANY,
        watch_group: group_no::ANY,
        actions: Vec::new(),
    };
    let (params, acts) = match s.find("actions=") {
        Some(i) => (&s[..i], &s[i + "actions=".len()..]),
        None => ("", s),
    };
    let mut bare = Vec::new();
    for token in split_top(params)?.into_iter().chain(split_top(acts)?) {
        let (k, v) = match token.split_once(['=', ':']) {
            Some((k, v)) => (k, v),
            None => ("", token),
        };
        match k {
            "weight" => bucket.weight = parse_uint_bits(token, v, 16)? as u16,
            "bucket_id" => {
                bucket.bucket_id = parse_uint_bits(token, v, 32)? as u32;
                if bucket.bucket_id > crate::flow_mod::BUCKET_ID_MAX {
                    return Err(TextError::value(token, "bucket ids end at 0xffffff00"));
                }
            }
            "watch_port" => bucket.watch_port = parse_port(token, v, ports)?,
            "watch_group" => bucket.watch_group = parse_uint_bits(token, v, 32)? as u32,
            _ => bare.push(token),
        }
    }
    for token in bare {
        if token != "drop" {
            bucket.actions.extend(parse_action(token, ports)?);
        }
    }
    Ok(bucket)
}
