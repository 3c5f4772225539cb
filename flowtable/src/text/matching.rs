//! Parsing of a flow's match and flow-mod parameters (everything before
//! `actions=`).

use super::actions::parse_instructions;
use super::fields::{
    self, parse_ipv6, parse_label, parse_port, parse_uint, parse_uint_bits, parse_value, Syntax,
};
use super::{split_top, PortNames, TextError};
use crate::action::{group, port, Instructions, TABLE_ALL};
use crate::field::{FieldDef, Prereq};
use crate::flow_mod::{flow_mod_flags, FlowMod, FlowModCommand};
use crate::key::{Field, FlowKey};
use crate::matching::{
    Match, ETH_TYPE_ARP, ETH_TYPE_IPV4, ETH_TYPE_IPV6, ETH_TYPE_MPLS, ETH_TYPE_MPLS_MCAST,
    IP_PROTO_ICMP, IP_PROTO_ICMPV6, IP_PROTO_SCTP, IP_PROTO_TCP, IP_PROTO_UDP,
};

/// Protocol shorthands: (name, eth_type, ip_proto).
const PROTOCOLS: [(&str, u16, Option<u8>); 13] = [
    ("ip", ETH_TYPE_IPV4, None),
    ("arp", ETH_TYPE_ARP, None),
    ("ipv6", ETH_TYPE_IPV6, None),
    ("tcp", ETH_TYPE_IPV4, Some(IP_PROTO_TCP)),
    ("udp", ETH_TYPE_IPV4, Some(IP_PROTO_UDP)),
    ("sctp", ETH_TYPE_IPV4, Some(IP_PROTO_SCTP)),
    ("icmp", ETH_TYPE_IPV4, Some(IP_PROTO_ICMP)),
    ("tcp6", ETH_TYPE_IPV6, Some(IP_PROTO_TCP)),
    ("udp6", ETH_TYPE_IPV6, Some(IP_PROTO_UDP)),
    ("sctp6", ETH_TYPE_IPV6, Some(IP_PROTO_SCTP)),
    ("icmp6", ETH_TYPE_IPV6, Some(IP_PROTO_ICMPV6)),
    ("mpls", ETH_TYPE_MPLS, None),
    ("mplsm", ETH_TYPE_MPLS_MCAST, None),
];

/// What a field demands of `ip_proto` beyond `Match::check_prerequisites`
/// (which accepts any protocol whose header has the key field's bits):
/// the registry's protocol-specific fields (`tcp_src`, `NXM_OF_UDP_DST`,
/// `icmpv6_type`) need that very protocol, as in OVS. Written as
/// `icmp_type`/`icmp_code`, ICMP's serve ICMPv6 too, since OVS dumps
/// ICMPv6 flows with them (and its parser takes them back).
fn name_prerequisite(name: &str, def: &FieldDef) -> Option<(&'static [u8], &'static str)> {
    match def.prereq {
        Prereq::Proto(IP_PROTO_ICMP) if matches!(name, "icmp_type" | "icmp_code") => {
            Some((&[IP_PROTO_ICMP, IP_PROTO_ICMPV6], "icmp or icmp6"))
        }
        Prereq::Proto(IP_PROTO_TCP) => Some((&[IP_PROTO_TCP], "tcp")),
        Prereq::Proto(IP_PROTO_UDP) => Some((&[IP_PROTO_UDP], "udp")),
        Prereq::Proto(IP_PROTO_SCTP) => Some((&[IP_PROTO_SCTP], "sctp")),
        Prereq::Proto(IP_PROTO_ICMP) => Some((&[IP_PROTO_ICMP], "icmp")),
        Prereq::Proto(IP_PROTO_ICMPV6) => Some((&[IP_PROTO_ICMPV6], "icmp6")),
        _ => None,
    }
}

/// Accumulates match tokens.
struct MatchBuilder {
    m: Match,
    /// Names used, to check name-specific prerequisites at the end.
    named: Vec<(String, &'static FieldDef)>,
}

impl MatchBuilder {
    fn new() -> Self {
        MatchBuilder {
            m: Match::catch_all(),
            named: Vec::new(),
        }
    }

    /// Applies one token if it is a protocol or field; `Ok(false)` if it
    /// is neither.
    fn token(
        &mut self,
        token: &str,
        name: &str,
        value: Option<&str>,
        ports: Option<&PortNames>,
    ) -> Result<bool, TextError> {
        if value.is_none() {
            if let Some((_, eth, proto)) = PROTOCOLS.iter().find(|(n, _, _)| *n == name) {
                self.m.set_exact(Field::EthType, u64::from(*eth));
                if let Some(p) = proto {
                    self.m.set_exact(Field::IpProto, u64::from(*p));
                }
                return Ok(true);
            }
        }
        let Some(def) = fields::lookup_def(name) else {
            return Ok(false);
        };
        let Some(syntax) = def.syntax else {
            return Ok(false);
        };
        let field = def.key;
        let v = value.ok_or_else(|| TextError::MissingValue(name.to_string()))?;
        if syntax == Syntax::Label {
            let (value, mask) = parse_label(token, v)?;
            if mask != 0 {
                self.m.set_ct_label_masked(value, mask);
                self.named.push((name.to_string(), def));
            }
            return Ok(true);
        }
        if syntax == Syntax::Ipv6 {
            let (value, mask) = parse_ipv6(token, v)?;
            if mask != 0 {
                self.m.set128_masked(field, value, mask);
                self.named.push((name.to_string(), def));
            }
            return Ok(true);
        }
        let (value, mask) = parse_value(token, field, syntax, v, ports)?;
        // Maskability is the registry's, as meta-flow's "Maskable" is
        // OVS's: a partial mask on an exact-only field is refused.
        if !def.maskable && mask != field.full_mask() && mask != 0 {
            return Err(TextError::value(
                token,
                format!("{name} does not support masking"),
            ));
        }
        if mask == 0 {
            return Ok(true);
        }
        // A repeated field replaces the earlier value: the last one wins,
        // as in ovs-ofctl.
        self.m.set_masked(field, value, mask);
        self.named.push((name.to_string(), def));
        Ok(true)
    }

    fn finish(self) -> Result<Match, TextError> {
        let proto = self.m.exact(Field::IpProto).map(|p| p as u8);
        for (name, def) in &self.named {
            let field = &def.key;
            // On an ICMP flow the transport ports' bits are the ICMP type
            // and code, which print as `icmp_type`/`icmp_code`: only what
            // those take back (8 bits, no mask) is accepted, so that a
            // flow's printed form always parses. OVS takes more here and
            // then prints a flow its own parser refuses.
            if matches!(field, Field::TpSrc | Field::TpDst)
                && matches!(proto, Some(IP_PROTO_ICMP | IP_PROTO_ICMPV6))
            {
                let (value, mask) = self.m.get(*field);
                if mask != 0xffff || value > 0xff {
                    let what = if *field == Field::TpSrc {
                        "type"
                    } else {
                        "code"
                    };
                    return Err(TextError::value(
                        name,
                        format!("on an icmp flow {name} is the ICMP {what}: 0 to 255, no mask"),
                    ));
                }
            }
            if let Some((want, kw)) = name_prerequisite(name, def) {
                if !proto.is_some_and(|p| want.contains(&p)) {
                    return Err(TextError::MissingPrerequisite {
                        field: name.clone(),
                        needs: kw,
                    });
                }
            }
            if !self.m.prerequisites_met(*field) {
                let needs = match field {
                    Field::ArpSha | Field::ArpTha | Field::ArpOp => "arp",
                    Field::TpSrc | Field::TpDst => "tcp, udp or sctp",
                    Field::IcmpType | Field::IcmpCode => "icmp or icmp6",
                    Field::Icmpv6Type | Field::Icmpv6Code => "icmp6",
                    Field::IpSrc | Field::IpDst | Field::ArpSpa | Field::ArpTpa => "ip or arp",
                    Field::NdTargetLow | Field::NdTargetHigh => "icmp6 with icmp_type 135 or 136",
                    Field::NdSll => "icmp6 with icmp_type 135",
                    Field::NdTll => "icmp6 with icmp_type 136",
                    Field::Ipv6SrcLow
                    | Field::Ipv6SrcHigh
                    | Field::Ipv6DstLow
                    | Field::Ipv6DstHigh
                    | Field::Ipv6Label
                    | Field::Ipv6Exthdr => "ipv6",
                    Field::MplsLabel | Field::MplsTc | Field::MplsBos | Field::MplsTtl => {
                        "mpls or mplsm"
                    }
                    Field::PbbIsid => "dl_type=0x88e7",
                    _ => "ip",
                };
                return Err(TextError::MissingPrerequisite {
                    field: name.clone(),
                    needs,
                });
            }
        }
        Ok(self.m)
    }
}

/// Splits `key=value`; also `key:value` is not a match syntax, so only `=`.
fn kv(token: &str) -> (&str, Option<&str>) {
    match token.split_once('=') {
        Some((k, v)) => (k.trim(), Some(v.trim())),
        None => (token, None),
    }
}

/// Parses a bare match (`ip,nw_dst=10.0.0.0/8`), with prerequisites checked.
pub fn parse_match(s: &str) -> Result<Match, TextError> {
    parse_match_with(s, None)
}

/// [`parse_match`] resolving port names (`in_port=veth1`) through `ports`.
pub fn parse_match_with(s: &str, ports: Option<&PortNames>) -> Result<Match, TextError> {
    let mut b = MatchBuilder::new();
    for token in split_top(s)? {
        let (k, v) = kv(token);
        if !b.token(token, k, v, ports)? {
            return Err(TextError::UnknownField(k.to_string()));
        }
    }
    b.finish()
}

/// Parses a packet description for tracing (`in_port=3,tcp,nw_dst=...`)
/// into the flow key it denotes: given fields set, all others zero.
pub fn parse_packet(s: &str) -> Result<FlowKey, TextError> {
    let m = parse_match(s)?;
    Ok(*m.value())
}

/// Parses a whole flow line for `command`.
pub(crate) fn parse_flow_mod(
    line: &str,
    command: FlowModCommand,
    ports: Option<&PortNames>,
) -> Result<FlowMod, TextError> {
    let (head, actions) = match find_actions(line) {
        Some(i) => (&line[..i], Some(&line[i + "actions=".len()..])),
        None => (line, None),
    };
    let mut fm = FlowMod {
        cookie: 0,
        cookie_mask: 0,
        table_id: TABLE_ALL,
        command,
        idle_timeout: 0,
        hard_timeout: 0,
        priority: 0x8000,
        buffer_id: u32::MAX,
        out_port: port::ANY,
        out_group: group::ANY,
        flags: 0,
        matching: Match::catch_all(),
        instructions: Instructions::default(),
    };
    let is_add = command == FlowModCommand::Add;
    let sets_actions = matches!(
        command,
        FlowModCommand::Add | FlowModCommand::Modify | FlowModCommand::ModifyStrict
    );
    let mut b = MatchBuilder::new();
    let mut table_given = false;
    for token in split_top(head)? {
        let (k, v) = kv(token);
        let val = || v.ok_or_else(|| TextError::MissingValue(k.to_string()));
        match k {
            "table" => {
                fm.table_id = parse_uint_bits(token, val()?, 8)? as u8;
                table_given = true;
            }
            "priority" => fm.priority = parse_uint_bits(token, val()?, 16)? as u16,
            "idle_timeout" => fm.idle_timeout = parse_uint_bits(token, val()?, 16)? as u16,
            "hard_timeout" => fm.hard_timeout = parse_uint_bits(token, val()?, 16)? as u16,
            "cookie" => {
                let v = val()?;
                match v.split_once('/') {
                    Some((c, m)) => {
                        if is_add {
                            return Err(TextError::Invalid {
                                token: token.to_string(),
                                reason: "flow additions cannot use a cookie mask".into(),
                            });
                        }
                        fm.cookie = parse_uint(token, c)?;
                        fm.cookie_mask = parse_uint(token, m)?;
                    }
                    None => {
                        if !sets_actions {
                            return Err(TextError::Invalid {
                                token: token.to_string(),
                                reason: "a delete cannot set a cookie; use cookie=VALUE/MASK"
                                    .into(),
                            });
                        }
                        fm.cookie = parse_uint(token, v)?;
                    }
                }
            }
            "out_port" => fm.out_port = parse_port(token, val()?, ports)?,
            "out_group" => fm.out_group = parse_uint_bits(token, val()?, 32)? as u32,
            "send_flow_rem" if v.is_none() => fm.flags |= flow_mod_flags::SEND_FLOW_REM,
            "check_overlap" if v.is_none() => fm.flags |= flow_mod_flags::CHECK_OVERLAP,
            "reset_counts" if v.is_none() => fm.flags |= flow_mod_flags::RESET_COUNTS,
            "no_packet_counts" if v.is_none() => fm.flags |= flow_mod_flags::NO_PKT_COUNTS,
            "no_byte_counts" if v.is_none() => fm.flags |= flow_mod_flags::NO_BYT_COUNTS,
            // dump-flows statistics, ignored so that a dump can be fed back.
            "duration" | "n_packets" | "n_bytes" | "idle_age" | "hard_age" if v.is_some() => {}
            _ => {
                if !b.token(token, k, v, ports)? {
                    return Err(TextError::UnknownField(k.to_string()));
                }
            }
        }
    }
    if !table_given && is_add {
        fm.table_id = 0;
    }
    if is_add && fm.table_id == TABLE_ALL {
        return Err(TextError::Invalid {
            token: "table=255".into(),
            reason: "a flow cannot be added to all tables".into(),
        });
    }
    fm.matching = b.finish()?;
    match (actions, sets_actions) {
        (Some(a), true) => fm.instructions = parse_instructions(a, ports)?,
        (None, true) => return Err(TextError::MissingActions),
        (Some(_), false) => return Err(TextError::UnexpectedActions("delete")),
        (None, false) => {}
    }
    Ok(fm)
}

/// Byte offset of the `actions=` keyword at a token start (not inside a
/// field value).
fn find_actions(line: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = line[from..].find("actions=") {
        let at = from + i;
        let before = line[..at].chars().next_back();
        if before.is_none_or(|c| c == ',' || c.is_whitespace()) {
            return Some(at);
        }
        from = at + 1;
    }
    None
}
