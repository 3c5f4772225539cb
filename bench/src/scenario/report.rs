//! What a scenario reports: per switch the median run's figures, xbr's
//! ratios to the others, as JSON (`--json`) and as a markdown table.

use crate::gen::Method;

/// One switch's figures: the median run's, plus every run's.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SystemResult {
    pub system: &'static str,
    /// The `conntrack` case: concurrent connections.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connections: Option<u32>,
    /// The packet scenarios' figures (all but `flowmod`, which sends none).
    #[serde(flatten)]
    pub traffic: Option<TrafficResult>,
    /// Conntrack scenarios: what the switch's table held after the median
    /// run, and what the traffic must have created.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conntrack: Option<CtCheck>,
    /// Conntrack scenarios: whether every run's table held what it must.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ct_verified: Option<bool>,
    /// `conntrack-new`: connections created (and forwarded) per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conns_per_s: Option<f64>,
    /// `churn`: the flow-mods made during the traffic and the delivery check.
    #[serde(flatten)]
    pub churn: Option<ChurnResult>,
    /// `flowmod`: the bundle load's time and the switch's memory.
    #[serde(flatten)]
    pub flowmod: Option<FlowmodResult>,
}

impl SystemResult {
    /// The median run's received rate, for the packet scenarios.
    pub fn mpps(&self) -> Option<f64> {
        self.traffic.as_ref().map(|t| t.mpps)
    }
}

/// What the sink received in the median run of a packet scenario.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TrafficResult {
    pub mpps: f64,
    pub gbps: f64,
    pub loss: f64,
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
    /// What the generator offered in the median run.
    pub offered_mpps: f64,
    /// Of the lost frames, the fraction dropped at the switch's ingress
    /// (its AF_XDP ring or the veth's ring full): the switch did not keep
    /// up. `None` if the counters could not be read or nothing was lost.
    pub lost_at_ingress: Option<f64>,
    pub sent: u64,
    pub received: u64,
    pub generator: Method,
    pub runs_mpps: Vec<f64>,
}

/// `churn`: how fast the flows changed under the traffic, and whether any
/// frame arrived where the flow table in force could not have sent it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ChurnResult {
    /// Flow-mods committed during the median run (all bundles').
    pub flow_mods: u64,
    pub flow_mods_per_s: f64,
    /// Bundles committed during the median run.
    pub bundles: u64,
    /// Frames counted on a port the table in force could not send them
    /// to, over all runs: must be 0.
    pub misdelivered: u64,
    /// Frames whose port was checked against one table version (the rest
    /// straddled a change, see `scenario::churn`), over all runs.
    pub judged: u64,
    /// Where the misdelivered frames were found, over all runs.
    pub misdelivered_by: super::Misdelivered,
}

/// `flowmod`: one bundle of flows into an empty switch.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FlowmodResult {
    /// Flows in the bundle (and found in the switch afterwards).
    pub flows_loaded: u64,
    /// Wall time of `ovs-ofctl bundle` in the median run.
    pub bundle_s: f64,
    pub flows_per_s: f64,
    /// CPU time the switch process spent meanwhile.
    pub switch_cpu_s: f64,
    /// The switch's VmRSS before and after the load, median run.
    pub rss_before_kib: u64,
    pub rss_after_kib: u64,
    /// Whether every run's dump-aggregate and dump-flows showed every flow.
    pub flows_verified: bool,
    pub runs_bundle_s: Vec<f64>,
}

/// The switch's connection count after a run, against the range the run's
/// traffic implies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct CtCheck {
    pub entries: u64,
    pub expected_min: u64,
    pub expected_max: u64,
}

impl CtCheck {
    pub fn ok(&self) -> bool {
        (self.expected_min..=self.expected_max).contains(&self.entries)
    }
}

/// A ratio of two switches' median rates.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Ratio {
    pub of: &'static str,
    pub to: &'static str,
    /// The `conntrack` case the ratio is of.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connections: Option<u32>,
    /// What is compared, when not the received Mpps: `flowmod`'s
    /// `flows_per_s` and `rss_after_kib`, `churn`'s `flow_mods_per_s`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metric: Option<&'static str>,
    pub ratio: f64,
}

/// A scenario's report (the `--json` document).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    pub scenario: &'static str,
    /// Frame size and transport (not for `flowmod`, which sends no traffic).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pkt_size: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proto: Option<&'static str>,
    /// Traffic flows: `flows`' count, for `conntrack` the largest case,
    /// for `conntrack-new` the most connections a run may create; the
    /// destinations of `churn`, the flows loaded by `flowmod`.
    pub flows: u32,
    /// The `conntrack` cases.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub connections: Vec<u32>,
    /// Seconds per measured run (not for `flowmod`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_s: Option<f64>,
    pub runs: usize,
    pub rate_pps: Option<u64>,
    pub date: String,
    pub machine: String,
    pub results: Vec<SystemResult>,
    pub ratios: Vec<Ratio>,
}

/// Reads one figure of a result, if it has it.
type Metric = fn(&SystemResult) -> Option<f64>;

/// xbr's ratios to every other system measured in the same case: of the
/// received Mpps, for `flowmod` of the load rate and of the memory, for
/// `churn` also of the flow-mod rate the loop achieved.
pub(super) fn ratios(results: &[SystemResult], connections: Option<u32>) -> Vec<Ratio> {
    let find = |n: &str| {
        results
            .iter()
            .find(|r| r.system == n && r.connections == connections)
    };
    let Some(x) = find("xbr") else {
        return Vec::new();
    };
    let metrics: [(Option<&'static str>, Metric); 4] = [
        (None, SystemResult::mpps),
        (Some("flow_mods_per_s"), |r| {
            r.churn.as_ref().map(|c| c.flow_mods_per_s)
        }),
        (Some("flows_per_s"), |r| {
            r.flowmod.as_ref().map(|f| f.flows_per_s)
        }),
        (Some("rss_after_kib"), |r| {
            r.flowmod.as_ref().map(|f| f.rss_after_kib as f64)
        }),
    ];
    let mut out = Vec::new();
    for other in ["ovs-afxdp", "xbr-nocache", "xdp-redirect", "linux-bridge"] {
        let Some(o) = find(other) else { continue };
        for (metric, get) in metrics {
            if let (Some(a), Some(b)) = (get(x), get(o).filter(|b| *b > 0.0)) {
                out.push(Ratio {
                    of: "xbr",
                    to: other,
                    connections,
                    metric,
                    ratio: a / b,
                });
            }
        }
    }
    out
}

fn opt(v: Option<f64>) -> String {
    v.map_or("-".to_string(), |v| format!("{v:.1}"))
}

fn mib(kib: u64) -> String {
    format!("{:.1}", kib as f64 / 1024.0)
}

/// The report as a markdown table, with the ratios below it.
pub fn markdown(r: &Report) -> String {
    let mut s = if r.results.iter().any(|x| x.flowmod.is_some()) {
        flowmod_table(r)
    } else {
        traffic_table(r)
    };
    for x in &r.results {
        if let Some(c) = x.churn.as_ref().filter(|c| c.misdelivered > 0) {
            s.push_str(&format!(
                "\n{}: MISDELIVERED {} ({})",
                x.system, c.misdelivered, c.misdelivered_by
            ));
        }
        if let Some(c) = x.conns_per_s {
            s.push_str(&format!(
                "\n{}: {:.0} new connections/s (committed and forwarded)",
                x.system, c
            ));
        }
    }
    for q in &r.ratios {
        let case = q
            .connections
            .map_or(String::new(), |n| format!(" ({n} connections)"));
        let metric = q.metric.map_or(String::new(), |m| format!(" ({m})"));
        s.push_str(&format!(
            "\n{} / {}{case}{metric}: {:.2}x",
            q.of, q.to, q.ratio
        ));
    }
    s.push('\n');
    s
}

fn flowmod_table(r: &Report) -> String {
    let mut s = format!(
        "{} ({} flows in one `ovs-ofctl -O OpenFlow13 bundle`, median of {} by wall time), {} on {}\n\n",
        r.scenario, r.flows, r.runs, r.date, r.machine
    );
    s.push_str("| system | bundle s | flows/s | switch CPU s | RSS before MiB | RSS after MiB | flows verified | runs (s) |\n");
    s.push_str(&"| --- ".repeat(8));
    s.push_str("|\n");
    for x in &r.results {
        let Some(f) = &x.flowmod else { continue };
        let runs: Vec<String> = f.runs_bundle_s.iter().map(|v| format!("{v:.3}")).collect();
        s.push_str(&format!(
            "| {} | {:.3} | {:.0} | {:.3} | {} | {} | {} | {} |\n",
            x.system,
            f.bundle_s,
            f.flows_per_s,
            f.switch_cpu_s,
            mib(f.rss_before_kib),
            mib(f.rss_after_kib),
            if f.flows_verified { "yes" } else { "NO" },
            runs.join(" ")
        ));
    }
    s
}

fn traffic_table(r: &Report) -> String {
    let traffic = match r.scenario {
        "conntrack" => format!(
            "{} concurrent connection(s) per case",
            r.connections
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(" / ")
        ),
        "conntrack-new" => "every frame a new connection".to_string(),
        "churn" => format!(
            "{} destinations, half of them moved port 2 -> 3 -> deleted -> 2 by bundles meanwhile",
            r.flows
        ),
        _ => format!("{} flow(s)", r.flows),
    };
    let generator = r
        .results
        .iter()
        .find_map(|x| x.traffic.as_ref())
        .map_or("-".to_string(), |t| t.generator.to_string());
    let mut s = format!(
        "{} ({generator} {}-byte {} frames, {traffic}, median of {} x {:.0} s{}), {} on {}\n\n",
        r.scenario,
        r.pkt_size.unwrap_or(0),
        r.proto.unwrap_or("-"),
        r.runs,
        r.duration_s.unwrap_or(0.0),
        r.rate_pps
            .map_or(String::new(), |p| format!(", offered {p} pps")),
        r.date,
        r.machine
    );
    let ct = r.results.iter().any(|x| x.conntrack.is_some());
    let case = r.results.iter().any(|x| x.connections.is_some());
    let churn = r.results.iter().any(|x| x.churn.is_some());
    if case {
        s.push_str("| connections ");
    }
    s.push_str("| system | Mpps | Gbps | loss | of it at ingress | p50 us | p99 us | offered Mpps | runs (Mpps) |");
    if ct {
        s.push_str(" conntrack entries (expected) | verified |");
    }
    if churn {
        s.push_str(" flow-mods/s | misdelivered (judged) |");
    }
    s.push('\n');
    let columns = 9 + usize::from(case) + 2 * usize::from(ct) + 2 * usize::from(churn);
    s.push_str(&"| --- ".repeat(columns));
    s.push_str("|\n");
    for x in &r.results {
        let Some(t) = &x.traffic else { continue };
        let runs: Vec<String> = t.runs_mpps.iter().map(|v| format!("{v:.3}")).collect();
        if let Some(n) = x.connections {
            s.push_str(&format!("| {n} "));
        }
        s.push_str(&format!(
            "| {} | {:.3} | {:.3} | {:.1}% | {} | {} | {} | {:.3} | {} |",
            x.system,
            t.mpps,
            t.gbps,
            t.loss * 100.0,
            t.lost_at_ingress
                .map_or("-".to_string(), |f| format!("{:.0}%", f * 100.0)),
            opt(t.p50_us),
            opt(t.p99_us),
            t.offered_mpps,
            runs.join(" ")
        ));
        if ct {
            let entries = x.conntrack.map_or("-".to_string(), |c| {
                if c.expected_min == c.expected_max {
                    format!("{} ({})", c.entries, c.expected_min)
                } else {
                    format!("{} ({}..={})", c.entries, c.expected_min, c.expected_max)
                }
            });
            let verified = match x.ct_verified {
                Some(true) => "yes",
                Some(false) => "NO",
                None => "-",
            };
            s.push_str(&format!(" {entries} | {verified} |"));
        }
        if churn {
            match &x.churn {
                Some(c) => s.push_str(&format!(
                    " {:.0} | {} ({}) |",
                    c.flow_mods_per_s, c.misdelivered, c.judged
                )),
                None => s.push_str(" - | - |"),
            }
        }
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bare(system: &'static str) -> SystemResult {
        SystemResult {
            system,
            connections: None,
            traffic: None,
            conntrack: None,
            ct_verified: None,
            conns_per_s: None,
            churn: None,
            flowmod: None,
        }
    }

    fn churned(system: &'static str, mpps: f64, misdelivered: u64) -> SystemResult {
        SystemResult {
            traffic: Some(TrafficResult {
                mpps,
                gbps: 0.0,
                loss: 0.2,
                p50_us: None,
                p99_us: None,
                offered_mpps: 1.0,
                lost_at_ingress: None,
                sent: 10,
                received: 8,
                generator: Method::LiveFrames,
                runs_mpps: vec![mpps],
            }),
            churn: Some(ChurnResult {
                flow_mods: 1000,
                flow_mods_per_s: 500.0 * mpps,
                bundles: 2,
                misdelivered,
                judged: 100,
                misdelivered_by: super::super::Misdelivered {
                    while_deleted: misdelivered,
                    ..Default::default()
                },
            }),
            ..bare(system)
        }
    }

    #[test]
    fn churn_ratios_and_misdelivery_are_reported() {
        let results = [churned("xbr", 0.4, 0), churned("ovs-afxdp", 0.2, 7)];
        let q = ratios(&results, None);
        let get = |m: Option<&str>| q.iter().find(|r| r.metric == m).map(|r| r.ratio);
        assert_eq!(get(None), Some(2.0));
        assert_eq!(get(Some("flow_mods_per_s")), Some(2.0));
        assert_eq!(get(Some("flows_per_s")), None, "no flowmod figures");
        let report = Report {
            scenario: "churn",
            pkt_size: Some(64),
            proto: Some("udp"),
            flows: 10,
            connections: vec![],
            duration_s: Some(1.0),
            runs: 1,
            rate_pps: None,
            date: String::new(),
            machine: String::new(),
            results: results.to_vec(),
            ratios: q,
        };
        let md = markdown(&report);
        assert!(
            md.contains("| xbr | 0.400 |") && md.contains("| 200 | 0 (100) |"),
            "{md}"
        );
        assert!(md.contains("ovs-afxdp: MISDELIVERED 7 ("), "{md}");
        assert!(!md.contains("xbr: MISDELIVERED"), "{md}");
        let json = serde_json::to_value(&report).unwrap();
        let x = &json["results"][1];
        assert_eq!(x["mpps"], 0.2);
        assert_eq!(x["misdelivered"], 7);
        assert_eq!(x["misdelivered_by"]["while_deleted"], 7);
    }
}
