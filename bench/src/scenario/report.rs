//! What a scenario reports: per switch the median run's figures, xbr's
//! ratios to the others, as JSON (`--json`) and as a markdown table.

use crate::gen::Method;

/// One switch's figures: the median run's, plus every run's rate.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SystemResult {
    pub system: &'static str,
    /// The `conntrack` case: concurrent connections.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connections: Option<u32>,
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
    pub ratio: f64,
}

/// A scenario's report (the `--json` document).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    pub scenario: &'static str,
    pub pkt_size: usize,
    pub proto: &'static str,
    /// Traffic flows: `flows`' count, for `conntrack` the largest case,
    /// for `conntrack-new` the most connections a run may create.
    pub flows: u32,
    /// The `conntrack` cases.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub connections: Vec<u32>,
    pub duration_s: f64,
    pub runs: usize,
    pub rate_pps: Option<u64>,
    pub date: String,
    pub machine: String,
    pub results: Vec<SystemResult>,
    pub ratios: Vec<Ratio>,
}

/// xbr's ratios to every other system measured in the same case.
pub(super) fn ratios(results: &[SystemResult], connections: Option<u32>) -> Vec<Ratio> {
    let get = |n: &str| {
        results
            .iter()
            .find(|r| r.system == n && r.connections == connections)
            .map(|r| r.mpps)
    };
    let mut out = Vec::new();
    if let Some(x) = get("xbr") {
        for other in ["ovs-afxdp", "xbr-nocache", "xdp-redirect", "linux-bridge"] {
            if let Some(o) = get(other).filter(|o| *o > 0.0) {
                out.push(Ratio {
                    of: "xbr",
                    to: other,
                    connections,
                    ratio: x / o,
                });
            }
        }
    }
    out
}

fn opt(v: Option<f64>) -> String {
    v.map_or("-".to_string(), |v| format!("{v:.1}"))
}

/// The report as a markdown table, with the ratios below it.
pub fn markdown(r: &Report) -> String {
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
        _ => format!("{} flow(s)", r.flows),
    };
    let mut s = format!(
        "{} ({} {}-byte {} frames, {traffic}, median of {} x {:.0} s{}), {} on {}\n\n",
        r.scenario,
        r.results
            .first()
            .map_or("-".to_string(), |x| x.generator.to_string()),
        r.pkt_size,
        r.proto,
        r.runs,
        r.duration_s,
        r.rate_pps
            .map_or(String::new(), |p| format!(", offered {p} pps")),
        r.date,
        r.machine
    );
    let ct = r.results.iter().any(|x| x.conntrack.is_some());
    let case = r.results.iter().any(|x| x.connections.is_some());
    if case {
        s.push_str("| connections ");
    }
    s.push_str("| system | Mpps | Gbps | loss | of it at ingress | p50 us | p99 us | offered Mpps | runs (Mpps) |");
    if ct {
        s.push_str(" conntrack entries (expected) | verified |");
    }
    s.push('\n');
    let columns = 9 + usize::from(case) + 2 * usize::from(ct);
    s.push_str(&"| --- ".repeat(columns));
    s.push_str("|\n");
    for x in &r.results {
        let runs: Vec<String> = x.runs_mpps.iter().map(|v| format!("{v:.3}")).collect();
        if let Some(n) = x.connections {
            s.push_str(&format!("| {n} "));
        }
        s.push_str(&format!(
            "| {} | {:.3} | {:.3} | {:.1}% | {} | {} | {} | {:.3} | {} |",
            x.system,
            x.mpps,
            x.gbps,
            x.loss * 100.0,
            x.lost_at_ingress
                .map_or("-".to_string(), |f| format!("{:.0}%", f * 100.0)),
            opt(x.p50_us),
            opt(x.p99_us),
            x.offered_mpps,
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
        s.push('\n');
    }
    for x in &r.results {
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
        s.push_str(&format!("\n{} / {}{case}: {:.2}x", q.of, q.to, q.ratio));
    }
    s.push('\n');
    s
}
