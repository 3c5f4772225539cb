//! Tracing the pipeline walk of one packet (`xbr trace`, like OVS's
//! `ofproto/trace`).
//!
//! # Design
//!
//! The translation in `xlate/` is generic over a [`Tracer`]. Packets use
//! [`NoTrace`], a zero-sized type whose hooks are empty and inlined and
//! whose `COUNTS` is true, so the monomorphised packet path is the same
//! code as without tracing: no allocation, no indirect call. A trace uses
//! [`Traced`], which forwards every step to a `dyn` [`TraceSink`] and sets
//! `COUNTS` false, so tracing never moves flow, group or table counters.
//!
//! [`TextTrace`] is the sink `xbr trace` prints: one line per table looked
//! up (the matched flow in `dump-flows` syntax, or the miss), the actions
//! under it, indented by resubmit depth. `trace_recirc.rs` runs whole
//! traces with it (`trace_text`), appending the datapath actions or the
//! drop reason and following conntrack recirculations.

use crate::action::{Action, Bucket};
use crate::group::Group;
use crate::rule::Rule;
use crate::text;
use crate::translation::{DpAction, Xlate};
use std::fmt::Write;
use std::sync::Arc;

/// Observer of a pipeline walk, resolved at compile time.
pub(crate) trait Tracer {
    /// Whether the walk updates flow, group and table counters.
    const COUNTS: bool;
    fn lookup(&mut self, table: u8, rule: Option<&Arc<Rule>>, depth: u32);
    fn action(&mut self, action: &Action, depth: u32);
    fn goto_table(&mut self, table: u8, depth: u32);
    fn bucket(&mut self, bucket: &Bucket, depth: u32);
    fn action_set(&mut self);
    /// A group whose counters the packet moves (see `group.rs`): the
    /// group's and bucket `bucket`'s, or every bucket's for `None`.
    /// Called once per group run, before its bucket runs.
    fn group(&mut self, _group: &Arc<Group>, _bucket: Option<usize>) {}
}

/// The packet path's tracer: does nothing, counts.
pub(crate) struct NoTrace;

impl Tracer for NoTrace {
    const COUNTS: bool = true;
    #[inline(always)]
    fn lookup(&mut self, _: u8, _: Option<&Arc<Rule>>, _: u32) {}
    #[inline(always)]
    fn action(&mut self, _: &Action, _: u32) {}
    #[inline(always)]
    fn goto_table(&mut self, _: u8, _: u32) {}
    #[inline(always)]
    fn bucket(&mut self, _: &Bucket, _: u32) {}
    #[inline(always)]
    fn action_set(&mut self) {}
}

/// Receives the steps of a traced walk. `depth` is the resubmit nesting
/// (0 for the top-level pipeline).
pub trait TraceSink {
    /// A table lookup and the flow it matched (`None`: table miss).
    fn lookup(&mut self, table: u8, rule: Option<&Rule>, depth: u32);
    /// An action about to run.
    fn action(&mut self, action: &Action, depth: u32);
    /// A goto_table instruction.
    fn goto_table(&mut self, table: u8, depth: u32);
    /// A group bucket about to run.
    fn bucket(&mut self, bucket: &Bucket, depth: u32);
    /// The action set, executed at the end of the pipeline.
    fn action_set(&mut self);
}

/// Adapter from a `dyn TraceSink` to the walk's [`Tracer`].
pub(crate) struct Traced<'a>(pub(crate) &'a mut dyn TraceSink);

impl Tracer for Traced<'_> {
    const COUNTS: bool = false;
    fn lookup(&mut self, table: u8, rule: Option<&Arc<Rule>>, depth: u32) {
        self.0.lookup(table, rule.map(|r| &**r), depth);
    }
    fn action(&mut self, action: &Action, depth: u32) {
        self.0.action(action, depth);
    }
    fn goto_table(&mut self, table: u8, depth: u32) {
        self.0.goto_table(table, depth);
    }
    fn bucket(&mut self, bucket: &Bucket, depth: u32) {
        self.0.bucket(bucket, depth);
    }
    fn action_set(&mut self) {
        self.0.action_set();
    }
}

/// A sink that renders the trace as text.
#[derive(Default, Debug)]
pub struct TextTrace {
    pub text: String,
}

fn indent(depth: u32) -> String {
    " ".repeat(4 * depth as usize)
}

impl TraceSink for TextTrace {
    fn lookup(&mut self, table: u8, rule: Option<&Rule>, depth: u32) {
        let pad = indent(depth);
        match rule {
            Some(r) => {
                let _ = writeln!(self.text, "{pad}{table:>3}. {}", text::format_rule_brief(r));
            }
            None => {
                let _ = writeln!(self.text, "{pad}{table:>3}. No match (table miss): drop");
            }
        }
    }

    fn action(&mut self, action: &Action, depth: u32) {
        let _ = writeln!(
            self.text,
            "{}       {}",
            indent(depth),
            text::format_actions(std::slice::from_ref(action))
        );
    }

    fn goto_table(&mut self, table: u8, depth: u32) {
        let _ = writeln!(self.text, "{}       goto_table:{table}", indent(depth));
    }

    fn bucket(&mut self, bucket: &Bucket, depth: u32) {
        let _ = writeln!(
            self.text,
            "{}       bucket: {}",
            indent(depth),
            text::format_actions(&bucket.actions)
        );
    }

    fn action_set(&mut self) {
        let _ = writeln!(self.text, "       (executing the action set)");
    }
}

/// The datapath actions of a finished translation, in `ofproto/trace`
/// style: `set_field(eth_dst=..),output:3` or `drop (reason)`.
pub fn format_datapath(out: &Xlate) -> String {
    if let Some(reason) = out.drop_reason() {
        return format!("drop ({})", drop_reason_text(reason));
    }
    let parts: Vec<String> = out
        .actions()
        .iter()
        .map(|a| match a {
            DpAction::SetField { field, value } => {
                let v = text::format_actions(&[Action::SetField {
                    field: *field,
                    value: *value,
                }]);
                // `set_field:V->F` is the action syntax; print it as a
                // datapath rewrite `set(F=V)`.
                match v
                    .strip_prefix("set_field:")
                    .and_then(|r| r.rsplit_once("->"))
                {
                    Some((val, name)) => format!("set({name}={val})"),
                    None => v,
                }
            }
            DpAction::Output {
                port,
                tun_id,
                tun_dst,
            } => {
                if *tun_dst != 0 || *tun_id != 0 {
                    format!(
                        "output:{port}(tun_id={tun_id:#x},tun_dst={})",
                        std::net::Ipv4Addr::from(*tun_dst)
                    )
                } else {
                    format!("output:{port}")
                }
            }
            DpAction::Flood => "flood".to_string(),
            DpAction::PushVlan { tci } => {
                format!("push_vlan(vid={},pcp={})", tci & 0xfff, tci >> 13)
            }
            DpAction::PopVlan => "pop_vlan".to_string(),
            DpAction::PushMpls { ethertype, lse } => format!(
                "push_mpls(label={},tc={},ttl={},bos={},eth_type={ethertype:#x})",
                lse >> 12,
                (lse >> 9) & 7,
                lse & 0xff,
                (lse >> 8) & 1
            ),
            DpAction::PopMpls { ethertype } => format!("pop_mpls(eth_type={ethertype:#x})"),
            DpAction::Recirc => "recirc".to_string(),
            DpAction::CopyTtl { out: true } => "copy_ttl_out".to_string(),
            DpAction::CopyTtl { out: false } => "copy_ttl_in".to_string(),
            DpAction::PushPbb { isid } => format!("push_pbb(isid={isid})"),
            DpAction::PopPbb => "pop_pbb".to_string(),
            DpAction::Normal => "normal".to_string(),
            DpAction::Meter(id) => format!("meter({id})"),
            DpAction::Ct {
                zone,
                commit,
                force,
                table,
                nat,
                mark,
                label,
            } => format_ct(*zone, *commit, *force, *table, nat.as_ref(), *mark, *label),
            DpAction::Controller {
                max_len, reason, ..
            } => format!("controller(reason={},max_len={max_len})", {
                use crate::translation::packet_in_reason as why;
                match *reason {
                    why::NO_MATCH => "no_match",
                    why::INVALID_TTL => "invalid_ttl",
                    why::ACTION_SET => "action_set",
                    why::GROUP => "group",
                    why::PACKET_OUT => "packet_out",
                    _ => "action",
                }
            }),
        })
        .collect();
    parts.join(",")
}

/// A datapath conntrack step, in the style of OVS's `ct(...)` datapath
/// action, with `recirc(table=N)` for the fork that resumes in table N.
fn format_ct(
    zone: u16,
    commit: bool,
    force: bool,
    table: Option<u8>,
    nat: Option<&crate::translation::NatSpec>,
    mark: Option<(u32, u32)>,
    label: Option<(u128, u128)>,
) -> String {
    let mut parts: Vec<String> = Vec::new();
    if commit {
        parts.push("commit".into());
    }
    if force {
        parts.push("force".into());
    }
    if zone != 0 {
        parts.push(format!("zone={zone}"));
    }
    if let Some((v, m)) = mark {
        if m == u32::MAX {
            parts.push(format!("mark={v:#x}"));
        } else {
            parts.push(format!("mark={v:#x}/{m:#x}"));
        }
    }
    if let Some((v, m)) = label {
        if m == u128::MAX {
            parts.push(format!("label={v:#x}"));
        } else {
            parts.push(format!("label={v:#x}/{m:#x}"));
        }
    }
    if let Some(n) = nat {
        let kind = if n.is_snat() {
            "src"
        } else if n.is_dnat() {
            "dst"
        } else {
            ""
        };
        if kind.is_empty() {
            parts.push("nat".into());
        } else {
            let mut r = format!("nat({kind}");
            let (lo, hi) = (n.first_addr(), n.last_addr());
            let addr = |a: u128| {
                if n.v6 {
                    std::net::Ipv6Addr::from(a).to_string()
                } else {
                    std::net::Ipv4Addr::from(a as u32).to_string()
                }
            };
            if lo != 0 {
                r.push_str(&format!("={}", addr(lo)));
                if hi != lo {
                    r.push_str(&format!("-{}", addr(hi)));
                }
            }
            if n.port_min != 0 {
                r.push_str(&format!(":{}", n.port_min));
                if n.port_max != n.port_min {
                    r.push_str(&format!("-{}", n.port_max));
                }
            }
            r.push(')');
            parts.push(r);
        }
    }
    let ct = if parts.is_empty() {
        "ct".to_string()
    } else {
        format!("ct({})", parts.join(","))
    };
    match table {
        Some(t) => format!("{ct},recirc(table={t})"),
        None => ct,
    }
}

fn drop_reason_text(r: crate::translation::DropReason) -> String {
    use crate::translation::DropReason as D;
    match r {
        D::TableMiss => "table miss".into(),
        D::ExplicitDrop => "no output action".into(),
        D::ResubmitDepth => "resubmit limit reached".into(),
        D::TooManyActions => "too many datapath actions".into(),
        D::Unsupported(what) => format!("action not supported by the datapath yet: {what}"),
        D::BadOutputPort => "bad output port".into(),
        D::InvalidTtl => "TTL expired (dec_ttl)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tables::{FlowTables, PipelineMod};
    use crate::text::{parse_flow, parse_packet};
    use crate::trace_recirc::trace_text;

    fn tables(flows: &[&str]) -> FlowTables {
        let mut t = FlowTables::new();
        for f in flows {
            let fm = parse_flow(f).unwrap();
            t.apply_batch(&[PipelineMod::Flow(fm)]).unwrap();
        }
        t
    }

    #[test]
    fn packet_ins_are_traced_with_their_reason() {
        let mut t = tables(&["table=0, priority=0, actions=controller"]);
        let gm = crate::text::parse_group("group_id=1,type=all,bucket=actions=controller").unwrap();
        let fm = parse_flow("table=0, priority=10, in_port=1, actions=group:1").unwrap();
        t.apply_batch(&[PipelineMod::Group(gm), PipelineMod::Flow(fm)])
            .unwrap();
        let pipe = t.pipeline();
        let trace = |p: &str| trace_text(&pipe, &parse_packet(p).unwrap(), 60);
        assert!(trace("in_port=1,ip").contains("controller(reason=group,"));
        assert!(trace("in_port=2,ip").contains("controller(reason=no_match,"));
    }

    #[test]
    fn trace_shows_tables_actions_and_outcome_without_counting() {
        let t = tables(&[
            "table=0, priority=100, ip, in_port=3, actions=load:0x2a->NXM_NX_REG0[],goto_table:20",
            "table=20, priority=50, reg0=0x2a, actions=resubmit(,30),output:4",
            "table=30, priority=10, ip, nw_dst=10.129.0.5, actions=set_field:0a:58:0a:81:00:05->eth_dst",
        ]);
        let pipe = t.pipeline();
        let key = parse_packet("in_port=3,ip,nw_src=10.128.0.2,nw_dst=10.129.0.5").unwrap();
        let text = trace_text(&pipe, &key, 100);
        assert!(text.contains("  0. table=0, priority=100,ip,in_port=3 actions=load:0x2a->NXM_NX_REG0[],goto_table:20"), "{text}");
        assert!(text.contains("       goto_table:20"), "{text}");
        assert!(
            text.contains(" 20. table=20, priority=50,reg0=0x2a"),
            "{text}"
        );
        assert!(
            text.contains("\n     30. table=30, priority=10,ip,nw_dst=10.129.0.5"),
            "{text}"
        );
        assert!(
            text.contains("Datapath actions: set(eth_dst=0a:58:0a:81:00:05),output:4"),
            "{text}"
        );
        for rule in t.flows(&crate::FlowFilter::default()) {
            assert_eq!(rule.stats.read(), (0, 0), "trace must not count");
        }
        // The packet path counts, and gives the same result.
        let mut out = Xlate::new();
        pipe.xlate(&key, 100, &mut out);
        assert_eq!(
            format_datapath(&out),
            "set(eth_dst=0a:58:0a:81:00:05),output:4"
        );
        assert!(t
            .flows(&crate::FlowFilter::default())
            .iter()
            .all(|r| r.stats.read() == (1, 100)));
    }

    #[test]
    fn trace_reports_a_miss() {
        let t = tables(&["table=0, priority=100, ip, in_port=3, actions=goto_table:20"]);
        let key = parse_packet("in_port=3,ip").unwrap();
        let text = trace_text(&t.pipeline(), &key, 60);
        assert!(text.contains(" 20. No match (table miss): drop"), "{text}");
        assert!(
            text.contains("Datapath actions: drop (table miss)"),
            "{text}"
        );
    }

    #[test]
    fn trace_shows_the_conntrack_step_and_where_it_resumes() {
        let t = tables(&[
            "table=0, priority=1000, ip, ct_state=-trk, actions=ct(table=0)",
            "table=0, priority=100, ip, actions=ct(commit,zone=3,exec(set_field:0x1->ct_mark)),output:2",
        ]);
        let pipe = t.pipeline();
        let key = parse_packet("in_port=1,tcp,nw_src=10.0.0.1,nw_dst=10.0.0.2").unwrap();
        let text = trace_text(&pipe, &key, 60);
        assert!(
            text.contains("Datapath actions: ct,recirc(table=0)\n"),
            "{text}"
        );
        assert!(
            text.contains("recirc(table=0) - resume conntrack with ct_state=new|trk"),
            "{text}"
        );
        let key = parse_packet("in_port=1,tcp,ct_state=+trk+new,nw_src=10.0.0.1").unwrap();
        let text = trace_text(&pipe, &key, 60);
        assert!(
            text.contains("Datapath actions: ct(commit,zone=3,mark=0x1),output:2\n"),
            "{text}"
        );
        assert!(!text.contains("recirc(table"), "{text}");
    }
}
