//! Tracing on through `ct(table=N)`: the tracked fork resumes in table N
//! with a connection state the tracer cannot know, so the caller names it
//! (`--ct-next`, as for `ovs-appctl ofproto/trace`), each recirculation
//! taking the next one given, `trk|new` once they run out (OVS's
//! default). The resumed key is the one the datapath would build: the
//! translation's metadata, the ct() action's zone, a mark the action
//! commits, and, for `nat(src=...)`/`nat(dst=...)`, the first address and
//! port of the range (what OVS's trace assumes too).

use crate::key::{Field, FlowKey};
use crate::pipeline::Pipeline;
use crate::text::CT_STATE_BITS;
use crate::trace::{format_datapath, TextTrace};
use crate::translation::{DpAction, Xlate};
use std::fmt::Write;
use std::net::Ipv4Addr;

/// ct_state bits the checks below name.
const NEW: u32 = 0x01;
const EST: u32 = 0x02;
const RPL: u32 = 0x08;
const INV: u32 = 0x10;
const TRK: u32 = 0x20;
/// The state a fork resumes with when no `--ct-next` is left.
pub const DEFAULT_CT_NEXT: u32 = TRK | NEW;
/// Passes a trace follows (the first and its recirculations); the
/// datapath drops a packet recirculated more often than this.
pub const MAX_PASSES: usize = 9;

/// Parses a `--ct-next` state: flag names (`trk`, `new`, `est`, `rel`,
/// `rpl`, `inv`, `snat`, `dnat`) separated by `,`, `|` or spaces, or
/// `+trk+est` as in a match. Refuses states no connection can be in, as
/// OVS does (ovs-fields(7)).
pub fn parse_ct_next(s: &str) -> Result<u32, String> {
    let mut state = 0u32;
    for name in s.split([',', '|', ' ', '+']).filter(|n| !n.is_empty()) {
        let bit = CT_STATE_BITS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, b)| *b as u32)
            .ok_or_else(|| format!("{name}: unknown connection tracking state flag"))?;
        state |= bit;
    }
    let text = format_state(state);
    if state == 0 {
        return Err(format!("'{s}': no connection tracking state flag"));
    }
    if state & TRK == 0 {
        return Err(format!(
            "{text}: invalid connection state: if \"trk\" is unset, no other flags are set"
        ));
    }
    if state & INV != 0 && state & !(TRK | INV) != 0 {
        return Err(format!(
            "{text}: invalid connection state: when \"inv\" is set, only \"trk\" may also be set"
        ));
    }
    if state & NEW != 0 && state & (EST | RPL) != 0 {
        return Err(format!(
            "{text}: invalid connection state: \"new\" excludes \"est\" and \"rpl\""
        ));
    }
    Ok(state)
}

/// `trk|new`-style text of a state.
fn format_state(state: u32) -> String {
    let names: Vec<&str> = CT_STATE_BITS
        .iter()
        .filter(|(_, b)| state & *b as u32 != 0)
        .map(|(n, _)| *n)
        .collect();
    names.join("|")
}

/// The `ct(table=N)` fork among `out`'s actions: its zone, the mark it
/// commits and its NAT range, if any.
fn fork(out: &Xlate) -> Option<&DpAction> {
    out.actions()
        .iter()
        .rev()
        .find(|a| matches!(a, DpAction::Ct { table: Some(_), .. }))
}

fn ip_flow(key: &FlowKey) -> String {
    format!(
        "nw_src={},nw_dst={},tp_src={},tp_dst={}",
        Ipv4Addr::from(key.get(Field::IpSrc) as u32),
        Ipv4Addr::from(key.get(Field::IpDst) as u32),
        key.get(Field::TpSrc),
        key.get(Field::TpDst)
    )
}

/// The key the fork of `out` resumes with in state `state`; the lines
/// saying how NAT was simulated go to `text`.
fn resumed_key(out: &Xlate, state: u32, text: &mut String) -> Option<FlowKey> {
    let mut key = *out.recirc()?;
    key.set(Field::CtState, u64::from(state));
    if let Some(DpAction::Ct {
        zone,
        commit,
        nat,
        mark,
        label,
        ..
    }) = fork(out)
    {
        key.set(Field::CtZone, u64::from(*zone));
        if *commit {
            if let Some((value, mask)) = mark {
                let old = key.get(Field::CtMark) as u32;
                key.set(Field::CtMark, u64::from(old & !mask | value & mask));
            }
            if let Some((value, mask)) = label {
                key.set_ct_label(key.ct_label() & !mask | value & mask);
            }
        }
        if let Some(nat) = nat.filter(|n| (n.is_snat() || n.is_dnat()) && !n.v6) {
            let _ = writeln!(text, "Replacing src/dst IP/ports to simulate NAT:");
            let _ = writeln!(text, " Initial flow: {}", ip_flow(&key));
            let addr = nat.first_addr() as u32;
            let (ip, port) = if nat.is_snat() {
                (Field::IpSrc, Field::TpSrc)
            } else {
                (Field::IpDst, Field::TpDst)
            };
            if addr != 0 {
                key.set(ip, u64::from(addr));
            }
            if nat.port_min != 0 {
                key.set(port, u64::from(nat.port_min));
            }
            let _ = writeln!(text, " Modified flow: {}", ip_flow(&key));
        }
    }
    Some(key)
}

/// Traces `key` through `pipe` and renders the walk plus its outcome,
/// going on through conntrack recirculations with the default state
/// (see [`trace_text_ct`]).
pub fn trace_text(pipe: &Pipeline, key: &FlowKey, packet_len: u32) -> String {
    crate::trace_recirc::trace_text_ct(pipe, key, packet_len, &[])
}

/// Traces `key` through `pipe` and every `ct(table=N)` recirculation
/// after it, resuming the n-th with `ct_next[n]` (or
/// [`DEFAULT_CT_NEXT`]); each pass ends with its datapath actions.
pub fn trace_text_ct(pipe: &Pipeline, key: &FlowKey, packet_len: u32, ct_next: &[u32]) -> String {
    let mut text = String::new();
    let mut key = *key;
    let mut next = ct_next.iter();
    for pass in 1..=MAX_PASSES {
        let mut sink = TextTrace::default();
        let mut out = Xlate::new();
        pipe.xlate_traced(&key, packet_len, &mut out, &mut sink);
        text.push_str(&sink.text);
        let _ = writeln!(text);
        let _ = writeln!(text, "Datapath actions: {}", format_datapath(&out));
        let Some(table) = out.recirc().and_then(FlowKey::recirc_table) else {
            return text;
        };
        if fork(&out).is_none() {
            // A recirculation that is not conntrack's (after an MPLS
            // pop): the datapath parses the packet again, which the
            // tracer cannot do without the packet.
            return text;
        }
        if pass == MAX_PASSES {
            let _ = writeln!(
                text,
                "\nThe trace stops here: the datapath drops a packet recirculated \
                 more than {} times.",
                MAX_PASSES - 1
            );
            return text;
        }
        let (state, note) = match next.next() {
            Some(s) => (*s, ""),
            None => (
                DEFAULT_CT_NEXT,
                " (the default; give --ct-next STATE for each ct() to choose)",
            ),
        };
        let rule = "=".repeat(79);
        let _ = writeln!(
            text,
            "\n{rule}\nrecirc(table={table}) - resume conntrack with ct_state={}{note}",
            format_state(state)
        );
        let Some(resumed) = resumed_key(&out, state, &mut text) else {
            return text;
        };
        let _ = writeln!(text, "{rule}\n");
        key = resumed;
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tables::{FlowTables, PipelineMod};
    use crate::text::{parse_flow, parse_packet};

    fn pipeline(flows: &[&str]) -> Pipeline {
        let mut t = FlowTables::new();
        for f in flows {
            let fm = parse_flow(f).unwrap();
            t.apply_batch(&[PipelineMod::Flow(fm)]).unwrap();
        }
        t.pipeline()
    }

    #[test]
    fn states_parse_as_ovs_reads_them_and_impossible_ones_are_refused() {
        assert_eq!(parse_ct_next("trk,est"), Ok(TRK | EST));
        assert_eq!(parse_ct_next("trk|new"), Ok(TRK | NEW));
        assert_eq!(parse_ct_next("+trk+est+rpl"), Ok(TRK | EST | RPL));
        assert_eq!(parse_ct_next("trk dnat"), Ok(TRK | 0x80));
        for (bad, why) in [
            ("", "no connection tracking state flag"),
            ("trk,bogus", "bogus: unknown"),
            ("est", "if \"trk\" is unset"),
            ("trk,inv,est", "when \"inv\" is set"),
            ("trk,new,est", "\"new\" excludes"),
            ("trk,new,rpl", "\"new\" excludes"),
        ] {
            let e = parse_ct_next(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    const FLOWS: [&str; 5] = [
        "table=0, priority=1000, ip, ct_state=-trk, actions=ct(table=0,zone=5)",
        "table=0, priority=100, ip, ct_state=+trk+new, actions=ct(commit,zone=5,exec(set_field:0x7->ct_mark)),output:2",
        "table=0, priority=100, ip, ct_state=+trk+est, ct_zone=5, actions=ct(nat,table=1)",
        "table=1, priority=100, ip, ct_state=+trk+est, ct_mark=0x7, actions=output:3",
        "table=1, priority=50, ip, actions=output:4",
    ];

    #[test]
    fn a_trace_goes_on_through_conntrack_with_the_states_given() {
        let pipe = pipeline(&FLOWS);
        let key = parse_packet("in_port=1,tcp,nw_src=10.0.0.1,nw_dst=10.0.0.2").unwrap();
        // Without --ct-next: the fork resumes as trk|new, in the zone.
        let text = trace_text_ct(&pipe, &key, 60, &[]);
        assert!(
            text.contains("Datapath actions: ct(zone=5),recirc(table=0)\n"),
            "{text}"
        );
        assert!(
            text.contains("recirc(table=0) - resume conntrack with ct_state=new|trk (the default"),
            "{text}"
        );
        assert!(
            text.ends_with("Datapath actions: ct(commit,zone=5,mark=0x7),output:2\n"),
            "{text}"
        );
        // Established: two recirculations. Neither commits, so the mark
        // stays the packet's (none here) and table 1's catch-all wins.
        let est = parse_ct_next("trk,est").unwrap();
        let text = trace_text_ct(&pipe, &key, 60, &[est, est]);
        assert_eq!(
            text.matches("resume conntrack with ct_state=est|trk\n")
                .count(),
            2,
            "{text}"
        );
        assert!(text.ends_with("Datapath actions: output:4\n"), "{text}");
        // The mark comes from the trace's packet, as from the connection.
        let key = parse_packet("in_port=1,tcp,ct_mark=0x7,nw_src=10.0.0.1").unwrap();
        let text = trace_text_ct(&pipe, &key, 60, &[est, est]);
        assert!(text.ends_with("Datapath actions: output:3\n"), "{text}");
    }

    #[test]
    fn nat_is_simulated_with_the_first_address_and_port() {
        let pipe = pipeline(&[
            "table=0, priority=100, tcp, nw_dst=172.30.0.10, tp_dst=80, actions=ct(commit,nat(dst=10.128.0.5-10.128.0.9:8080-8090),table=2)",
            "table=2, priority=100, tcp, nw_dst=10.128.0.5, tp_dst=8080, actions=output:7",
        ]);
        let key =
            parse_packet("in_port=1,tcp,nw_src=10.0.0.1,nw_dst=172.30.0.10,tp_src=999,tp_dst=80")
                .unwrap();
        let text = trace_text_ct(&pipe, &key, 60, &[]);
        assert!(
            text.contains(
                " Initial flow: nw_src=10.0.0.1,nw_dst=172.30.0.10,tp_src=999,tp_dst=80\n \
                 Modified flow: nw_src=10.0.0.1,nw_dst=10.128.0.5,tp_src=999,tp_dst=8080\n"
            ),
            "{text}"
        );
        assert!(text.ends_with("Datapath actions: output:7\n"), "{text}");
    }

    #[test]
    fn a_recirculation_loop_stops_at_the_datapath_limit() {
        let pipe = pipeline(&["table=0, priority=100, ip, actions=ct(table=0)"]);
        let key = parse_packet("in_port=1,ip").unwrap();
        let text = trace_text_ct(&pipe, &key, 60, &[]);
        assert_eq!(
            text.matches("recirc(table=0) - resume").count(),
            MAX_PASSES - 1
        );
        assert!(text.ends_with("more than 8 times.\n"), "{text}");
    }
}
