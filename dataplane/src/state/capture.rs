//! What a bridge's state file holds, taken from the running bridge.

use super::{Body, SavedBand, SavedMeter, SavedPort};
use crate::conntrack::Conntrack;
use crate::control::PortMeta;
use flowtable::flow_mod::FlowFilter;
use flowtable::text::{format_group, format_rule_brief};
use flowtable::{Meter, MeterBandType, Rule};
use ofproto::Bridge;
use std::sync::Arc;

/// The flows (in the order they were added, so that overlapping flows of
/// one priority keep their precedence), groups, meters, port numbers and
/// connections of a bridge.
pub fn capture(bridge: &Bridge, conntrack: &Conntrack, ports: &[Arc<PortMeta>]) -> Body {
    let (flows, groups, meters) = capture_pipeline(bridge);
    Body {
        flows,
        groups,
        meters,
        ports: capture_ports(ports),
        connections: conntrack.export(),
    }
}

/// The flows, groups and meters as the state file keeps them (the costly
/// part of a capture with many flows: a line of text per flow). The
/// OpenFlow lock is held only to copy the `Arc`s; the text is made after.
pub fn capture_pipeline(bridge: &Bridge) -> (Vec<String>, Vec<String>, Vec<SavedMeter>) {
    let (mut rules, mut groups, mut meters) =
        bridge.with_tables(|t| (t.flows(&FlowFilter::default()), t.groups(), t.meters()));
    rules.sort_by_key(|r| r.id);
    groups.sort_by_key(|g| g.id);
    meters.sort_by_key(|m| m.id);
    (
        rules.iter().map(|r| flow_line(r)).collect(),
        groups
            .iter()
            .map(|g| format_group(g).trim_start().to_string())
            .collect(),
        meters.iter().map(|m| saved_meter(m)).collect(),
    )
}

/// The ports' numbers by name, in number order.
pub fn capture_ports(ports: &[Arc<PortMeta>]) -> Vec<SavedPort> {
    let mut ports: Vec<SavedPort> = ports
        .iter()
        .map(|p| SavedPort {
            name: p.name.clone(),
            ofport: p.ofport,
        })
        .collect();
    ports.sort_by_key(|p| p.ofport);
    ports
}

/// A flow as an `add-flow` line: `dump-flows` without its statistics.
pub fn flow_line(rule: &Rule) -> String {
    format_rule_brief(rule)
}

pub fn saved_meter(m: &Meter) -> SavedMeter {
    SavedMeter {
        id: m.id,
        flags: m.flags,
        bands: m
            .bands
            .iter()
            .map(|b| {
                let (kind, prec_level) = match b.band_type {
                    MeterBandType::Drop => ("drop", 0),
                    MeterBandType::DscpRemark { prec_level } => ("dscp_remark", prec_level),
                };
                SavedBand {
                    kind: kind.into(),
                    prec_level,
                    rate: b.rate,
                    burst_size: b.burst_size,
                }
            })
            .collect(),
    }
}
