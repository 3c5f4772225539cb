//! Benchmark scenarios: `runs` rounds, each measuring every switch once on
//! a fresh topology (the switch with the scenario's flows, the sink, the
//! generator, a warm-up run, one measured run, all torn down again); per
//! switch the median run (by received rate) is reported. Only one switch
//! exists at a time, so none steals the CPU of another (OVS's PMD thread
//! polls even when idle).
//!
//! - `p2p`: one flow, pod A -> pod B, flows `in_port=1 -> 2`, `in_port=2 -> 1`.
//! - `vxlan`: decapsulation, uplink to pod: the generator plays a remote
//!   node sending VXLAN (VNI 42, from 10.0.0.12) to this node's address
//!   10.0.0.11 on `veth-a`; port 1 is the agent's flow-based `vxlan0` over
//!   that uplink, and the flow `in_port=1,tun_id=42 -> output:2` delivers
//!   the inner frame to pod B. The kernel reference strips the outer
//!   headers in XDP and redirects; the Linux bridge does not apply.
//! - `flows`: `n_flows` flows to as many destinations: the generator walks
//!   destination addresses 10.128.4.0 + i, and the switch holds one
//!   `ip,in_port=1,nw_dst=X -> output:2` flow per address (plus
//!   `in_port=2 -> 1`); a frame that matches none is dropped, so only a
//!   correct lookup delivers.
//!
//! All switches are measured on the same machine in one
//! invocation; the ratios between them are the result, the absolute
//! figures depend on what else the (shared) machine does meanwhile.

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::gen::{GenBounds, Method};
use crate::measure::{Harness, MeasureError, MethodChoice, Sample, Traffic};
use crate::ovs::{run_bounded, OvsError, CMD_TIMEOUT};
use crate::packet::{FrameSpec, Proto, TemplateError, Vary, VxlanOuter};
use crate::systems::{self, SwitchConfig, System, SystemError};
use crate::topo::{Topology, MAC_A, MAC_B, MAC_VA};

/// Destination of flow 0 in the `flows` scenario.
const FLOWS_BASE: Ipv4Addr = Ipv4Addr::new(10, 128, 4, 0);
/// The `vxlan` scenario's node address (on the uplink) and remote node.
const LOCAL_NODE: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 11);
const REMOTE_NODE: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 12);
const VNI: u32 = 42;
/// Largest `flows` scenario (addresses stay inside 10.128.0.0/9).
pub const MAX_FLOWS: u32 = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    P2p,
    Flows,
    Vxlan,
}

impl Scenario {
    pub fn name(self) -> &'static str {
        match self {
            Scenario::P2p => "p2p",
            Scenario::Flows => "flows",
            Scenario::Vxlan => "vxlan",
        }
    }

    /// The default `pkt_size`: 64-byte frames, encapsulated for `vxlan`
    /// (a 64-byte inner frame plus 50 bytes of outer headers).
    pub fn default_pkt_size(self) -> usize {
        match self {
            Scenario::Vxlan => 64 + crate::packet::VXLAN_OVERHEAD,
            _ => 64,
        }
    }
}

/// Everything a scenario run needs.
#[derive(Debug, Clone)]
pub struct Config {
    pub scenario: Scenario,
    pub systems: Vec<System>,
    pub runs: usize,
    pub duration: Duration,
    pub warmup: Duration,
    pub pkt_size: usize,
    pub proto: Proto,
    /// Flows of the `flows` scenario.
    pub n_flows: u32,
    pub rate_pps: Option<u64>,
    pub method: MethodChoice,
    pub gen_cpu: usize,
    pub switch_cpu: usize,
    pub xbr_bin: std::path::PathBuf,
    pub xbr_args: Vec<String>,
    /// Set (by a signal handler) to stop: the current run ends, everything
    /// is torn down and [`run`] returns [`ScenarioError::Interrupted`].
    pub stop: Arc<AtomicBool>,
}

/// Errors of a scenario.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error(transparent)]
    Template(#[from] TemplateError),
    #[error(transparent)]
    Ovs(#[from] OvsError),
    #[error(transparent)]
    System(#[from] SystemError),
    #[error("interrupted; everything set up was removed")]
    Interrupted,
    #[error("{system}: {source}")]
    Measure {
        system: &'static str,
        source: MeasureError,
    },
}

/// One switch's figures: the median run's, plus every run's rate.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SystemResult {
    pub system: &'static str,
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

/// A ratio of two switches' median rates.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Ratio {
    pub of: &'static str,
    pub to: &'static str,
    pub ratio: f64,
}

/// A scenario's report (the `--json` document).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    pub scenario: &'static str,
    pub pkt_size: usize,
    pub proto: &'static str,
    pub flows: u32,
    pub duration_s: f64,
    pub runs: usize,
    pub rate_pps: Option<u64>,
    pub date: String,
    pub machine: String,
    pub results: Vec<SystemResult>,
    pub ratios: Vec<Ratio>,
}

fn flows_text(cfg: &Config) -> String {
    let mut s = String::new();
    match cfg.scenario {
        Scenario::P2p => {
            s.push_str("table=0,priority=10,in_port=1,actions=output:2\n");
        }
        Scenario::Vxlan => {
            // No way back: output to vxlan0 needs a tunnel destination.
            s.push_str(&format!(
                "table=0,priority=100,in_port=1,tun_id={VNI},actions=output:2\n"
            ));
            return s;
        }
        Scenario::Flows => {
            let base = u32::from(FLOWS_BASE);
            for i in 0..cfg.n_flows {
                let dst = Ipv4Addr::from(base + i);
                s.push_str(&format!(
                    "table=0,priority=100,ip,in_port=1,nw_dst={dst},actions=output:2\n"
                ));
            }
        }
    }
    s.push_str("table=0,priority=10,in_port=2,actions=output:1\n");
    s
}

fn traffic(cfg: &Config) -> Result<Traffic, TemplateError> {
    let (dst_ip, n_flows, vary) = match cfg.scenario {
        Scenario::P2p | Scenario::Vxlan => (Ipv4Addr::new(10, 128, 0, 3), 1, Vary::default()),
        Scenario::Flows => (
            FLOWS_BASE,
            cfg.n_flows,
            Vary {
                dst_ip: true,
                ..Vary::default()
            },
        ),
    };
    let template = FrameSpec {
        proto: cfg.proto,
        pkt_size: cfg.pkt_size,
        src_mac: MAC_A,
        dst_mac: MAC_B,
        src_ip: Ipv4Addr::new(10, 128, 0, 2),
        dst_ip,
        src_port: 40000,
        dst_port: 5201,
        vxlan: (cfg.scenario == Scenario::Vxlan).then_some(VxlanOuter {
            src_mac: MAC_A,
            dst_mac: MAC_VA,
            src_ip: REMOTE_NODE,
            dst_ip: LOCAL_NODE,
            vni: VNI,
        }),
    }
    .build()?;
    let sink_tag_off = match cfg.scenario {
        Scenario::Vxlan => template.decapsulated_tag_off(),
        _ => template.tag_off,
    };
    Ok(Traffic {
        sink_tag_off,
        template,
        vary,
        n_flows,
        method: cfg.method,
        cpu: Some(cfg.gen_cpu),
        stop: cfg.stop.clone(),
    })
}

/// Checks what can be checked before anything is built.
pub fn validate(cfg: &Config) -> Result<(), TemplateError> {
    traffic(cfg).map(|_| ())
}

fn median(mut samples: Vec<Sample>) -> (Sample, Vec<f64>) {
    let rates = samples.iter().map(Sample::mpps).collect();
    samples.sort_by(|a, b| a.mpps().total_cmp(&b.mpps()));
    let mid = samples.swap_remove((samples.len() - 1) / 2);
    (mid, rates)
}

/// One round's run of one switch: a fresh topology and switch, the
/// warm-up, one measured run; everything is torn down before returning.
fn measure_once(system: System, cfg: &Config, round: usize) -> Result<Sample, ScenarioError> {
    let topo = Topology::new()?;
    let sw = SwitchConfig {
        xbr_bin: cfg.xbr_bin.clone(),
        xbr_args: cfg.xbr_args.clone(),
        cpu: cfg.switch_cpu,
        flows: flows_text(cfg),
        vxlan_uplink: (cfg.scenario == Scenario::Vxlan).then(|| format!("{LOCAL_NODE}/24")),
    };
    let _switch = systems::start(system, &topo, &sw)?;
    let m = |source| match source {
        MeasureError::Interrupted => ScenarioError::Interrupted,
        source => ScenarioError::Measure {
            system: system.name(),
            source,
        },
    };
    let mut h = Harness::new(&topo, traffic(cfg)?).map_err(m)?;
    let bounds = GenBounds {
        duration: cfg.duration,
        count: None,
        rate_pps: cfg.rate_pps,
    };
    if !cfg.warmup.is_zero() {
        h.run(&GenBounds {
            duration: cfg.warmup,
            ..bounds
        })
        .map_err(m)?;
    }
    let s = h.run(&bounds).map_err(m)?;
    eprintln!(
        "  round {}/{} {}: {:.3} Mpps received, {:.3} offered, loss {:.1}%",
        round + 1,
        cfg.runs,
        system.name(),
        s.mpps(),
        offered_mpps(&s),
        s.loss() * 100.0
    );
    Ok(s)
}

fn offered_mpps(s: &Sample) -> f64 {
    s.sent as f64 / s.elapsed.as_secs_f64().max(1e-9) / 1e6
}

fn result(system: System, samples: Vec<Sample>) -> SystemResult {
    let (s, runs_mpps) = median(samples);
    SystemResult {
        system: system.name(),
        mpps: s.mpps(),
        gbps: s.gbps(),
        loss: s.loss(),
        p50_us: s.p50_ns.map(|v| v / 1000.0),
        p99_us: s.p99_ns.map(|v| v / 1000.0),
        offered_mpps: offered_mpps(&s),
        lost_at_ingress: s.ingress_drops.and_then(|d| {
            let lost = s.sent.saturating_sub(s.received);
            (lost > 0).then(|| d as f64 / lost as f64)
        }),
        sent: s.sent,
        received: s.received,
        generator: s.method,
        runs_mpps,
    }
}

fn command_line(program: &str, args: &[&str]) -> String {
    run_bounded(std::process::Command::new(program).args(args), CMD_TIMEOUT)
        .ok()
        .filter(|o| o.success())
        .map(|o| o.stdout.trim().to_string())
        .unwrap_or_default()
}

/// Runs the scenario on every configured switch.
pub fn run(cfg: &Config) -> Result<Report, ScenarioError> {
    validate(cfg)?;
    // Round-robin: the machine's load drifts, and interleaving spreads
    // the drift over every switch instead of biasing the last one.
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); cfg.systems.len()];
    for round in 0..cfg.runs {
        for (i, &system) in cfg.systems.iter().enumerate() {
            if cfg.stop.load(Ordering::Relaxed) {
                return Err(ScenarioError::Interrupted);
            }
            samples[i].push(measure_once(system, cfg, round)?);
        }
    }
    let results: Vec<SystemResult> = cfg
        .systems
        .iter()
        .zip(samples)
        .map(|(&system, s)| result(system, s))
        .collect();
    let get = |n: &str| results.iter().find(|r| r.system == n).map(|r| r.mpps);
    let mut ratios = Vec::new();
    if let Some(x) = get("xbr") {
        for other in ["ovs-afxdp", "xbr-nocache", "xdp-redirect", "linux-bridge"] {
            if let Some(o) = get(other).filter(|o| *o > 0.0) {
                ratios.push(Ratio {
                    of: "xbr",
                    to: other,
                    ratio: x / o,
                });
            }
        }
    }
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    Ok(Report {
        scenario: cfg.scenario.name(),
        pkt_size: cfg.pkt_size,
        proto: match cfg.proto {
            Proto::Udp => "udp",
            Proto::Tcp => "tcp",
        },
        flows: match cfg.scenario {
            Scenario::P2p | Scenario::Vxlan => 1,
            Scenario::Flows => cfg.n_flows,
        },
        duration_s: cfg.duration.as_secs_f64(),
        runs: cfg.runs,
        rate_pps: cfg.rate_pps,
        date: command_line("date", &["-u", "+%Y-%m-%dT%H:%M:%SZ"]),
        machine: format!("{} ({cpus} CPUs)", command_line("uname", &["-nrm"])),
        results,
        ratios,
    })
}

fn opt(v: Option<f64>) -> String {
    v.map_or("-".to_string(), |v| format!("{v:.1}"))
}

/// The report as a markdown table, with the ratios below it.
pub fn markdown(r: &Report) -> String {
    let mut s = format!(
        "{} ({} {}-byte {} frames, {} flow(s), median of {} x {:.0} s{}), {} on {}\n\n",
        r.scenario,
        r.results
            .first()
            .map_or("-".to_string(), |x| x.generator.to_string()),
        r.pkt_size,
        r.proto,
        r.flows,
        r.runs,
        r.duration_s,
        r.rate_pps
            .map_or(String::new(), |p| format!(", offered {p} pps")),
        r.date,
        r.machine
    );
    s.push_str("| system | Mpps | Gbps | loss | of it at ingress | p50 us | p99 us | offered Mpps | runs (Mpps) |\n");
    s.push_str("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for x in &r.results {
        let runs: Vec<String> = x.runs_mpps.iter().map(|v| format!("{v:.3}")).collect();
        s.push_str(&format!(
            "| {} | {:.3} | {:.3} | {:.1}% | {} | {} | {} | {:.3} | {} |\n",
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
    }
    for q in &r.ratios {
        s.push_str(&format!("\n{} / {}: {:.2}x", q.of, q.to, q.ratio));
    }
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(scenario: Scenario) -> Config {
        Config {
            scenario,
            systems: vec![System::Xbr],
            runs: 1,
            duration: Duration::from_secs(1),
            warmup: Duration::ZERO,
            pkt_size: 64,
            proto: Proto::Udp,
            n_flows: 3,
            rate_pps: None,
            method: MethodChoice::Auto,
            gen_cpu: 0,
            switch_cpu: 1,
            xbr_bin: "xbr".into(),
            xbr_args: vec![],
            stop: Arc::default(),
        }
    }

    #[test]
    fn flows_scenario_has_one_flow_per_destination() {
        let text = flows_text(&cfg(Scenario::Flows));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4);
        assert_eq!(
            lines[2],
            "table=0,priority=100,ip,in_port=1,nw_dst=10.128.4.2,actions=output:2"
        );
        let t = traffic(&cfg(Scenario::Flows)).unwrap();
        assert_eq!(t.n_flows, 3);
        assert!(t.vary.dst_ip && !t.vary.src_port);
        assert_eq!(&t.template.frame[30..34], &[10, 128, 4, 0]);
        let p2p = flows_text(&cfg(Scenario::P2p));
        assert_eq!(p2p.lines().count(), 2);
    }

    #[test]
    fn vxlan_scenario_encapsulates_and_expects_the_inner_frame() {
        let mut c = cfg(Scenario::Vxlan);
        assert!(validate(&c).is_err(), "64 bytes cannot hold VXLAN");
        c.pkt_size = Scenario::Vxlan.default_pkt_size();
        let t = traffic(&c).unwrap();
        assert_eq!(t.template.frame.len(), 110);
        assert_eq!(&t.template.frame[..6], &MAC_VA);
        assert_eq!(&t.template.frame[30..34], &[10, 0, 0, 11]);
        assert_eq!(t.sink_tag_off, t.template.tag_off - 50);
        assert_eq!(
            flows_text(&c),
            "table=0,priority=100,in_port=1,tun_id=42,actions=output:2\n"
        );
    }

    #[test]
    fn bad_sizes_are_refused_before_anything_runs() {
        let mut c = cfg(Scenario::P2p);
        c.proto = Proto::Tcp;
        assert!(validate(&c).is_err());
        c.pkt_size = 128;
        assert!(validate(&c).is_ok());
    }
}
