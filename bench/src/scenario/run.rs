//! Running a scenario: rounds of one fresh topology and switch per system,
//! a warm-up, one measured run, all torn down again.

use std::sync::atomic::Ordering;

use super::churn::{self, ChurnRun};
use super::flowmod::{self, FlowmodRun};
use super::flows::{cases, ct_replies, flows_text, traffic, Case};
use super::report::{ratios, CtCheck, Report, SystemResult, TrafficResult};
use super::setup::{measure_err, switch_config};
use super::{validate, Config, Scenario, ScenarioError, CT_NEW_MAX_CONNECTIONS};
use crate::gen::GenBounds;
use crate::measure::{Harness, Sample};
use crate::ovs::{run_bounded, CMD_TIMEOUT};
use crate::packet::Proto;
use crate::systems::{self, System};
use crate::topo::Topology;

/// One measured run: the traffic's figures (not in `flowmod`), and what
/// the scenario checks besides.
#[derive(Debug, Clone, Default)]
pub(super) struct Run {
    pub(super) sample: Option<Sample>,
    /// Conntrack scenarios: the switch's connection count against what
    /// it must be.
    pub(super) conntrack: Option<CtCheck>,
    pub(super) churn: Option<ChurnRun>,
    pub(super) flowmod: Option<FlowmodRun>,
}

impl Run {
    /// What the median is taken of: the received rate, or how fast
    /// `flowmod` loaded its flows.
    fn rank(&self) -> f64 {
        match (&self.sample, &self.flowmod) {
            (Some(s), _) => s.mpps(),
            (None, Some(f)) => f.flows_per_s(),
            (None, None) => 0.0,
        }
    }
}

fn median(mut runs: Vec<Run>) -> Run {
    runs.sort_by(|a, b| a.rank().total_cmp(&b.rank()));
    runs.swap_remove((runs.len() - 1) / 2)
}

/// What the connection table must hold after a run that sent `sent`
/// frames in all (warm-up included) of which `received` measured ones
/// arrived: in `conntrack`, every connection the generator cycled through
/// (it reaches them all once it sent as many frames); in `conntrack-new`,
/// one per frame that went through (each delivered frame was committed,
/// a frame lost at the ingress never reached conntrack).
fn expected_entries(scenario: Scenario, case: Case, sent: u64, received: u64) -> (u64, u64) {
    match scenario {
        Scenario::ConntrackNew => (received, sent),
        _ => {
            let n = u64::from(case.connections.unwrap_or(1));
            if sent >= n {
                (n, n)
            } else {
                (received.min(n), sent)
            }
        }
    }
}

/// One round's run of one switch: a fresh topology and switch, the
/// warm-up, one measured run; everything is torn down before returning.
fn measure_once(
    system: System,
    cfg: &Config,
    case: Case,
    round: usize,
) -> Result<Run, ScenarioError> {
    match cfg.scenario {
        Scenario::Flowmod => {
            return Ok(Run {
                flowmod: Some(flowmod::measure_once(system, cfg, round)?),
                ..Run::default()
            })
        }
        Scenario::Churn => {
            let (sample, churn) = churn::measure_once(system, cfg, round)?;
            return Ok(Run {
                sample: Some(sample),
                churn: Some(churn),
                ..Run::default()
            });
        }
        _ => {}
    }
    let topo = Topology::new()?;
    let switch = systems::start(system, &topo, &switch_config(cfg)?)?;
    let m = measure_err(system);
    let h = Harness::new(&topo, traffic(cfg, case)?).map_err(m)?;
    let new_conns = cfg.scenario == Scenario::ConntrackNew;
    let bounds = GenBounds {
        duration: cfg.duration,
        count: new_conns.then_some(CT_NEW_MAX_CONNECTIONS),
        rate_pps: cfg.rate_pps,
    };
    let mut warmup_sent = 0;
    // conntrack-new: a warm-up would create connections the measured run
    // then finds established (and the AF_XDP generator restarts its
    // sequence every run); the measured run starts on an empty table.
    if !cfg.warmup.is_zero() && !new_conns {
        warmup_sent = h
            .run(&GenBounds {
                duration: cfg.warmup,
                ..bounds
            })
            .map_err(m)?
            .sent;
    }
    if let (Scenario::Conntrack, Some(n)) = (cfg.scenario, case.connections) {
        // The warm-up committed every connection; one answer each from
        // pod B makes them established (+est) in both switches, as a
        // pod's connections are. Without it xbr's conntrack keeps
        // unreplied UDP +new (as the kernel's does), while OVS's
        // userspace conntrack calls it +est from its third packet.
        if warmup_sent >= u64::from(n) {
            let (t, vary, n) = ct_replies(cfg, case)?;
            h.send_from_b(&t, vary, n, u64::from(n)).map_err(m)?;
        }
    }
    let s = h.run(&bounds).map_err(m)?;
    let conntrack = if cfg.scenario.uses_conntrack() {
        let entries = switch.conntrack_entries()?;
        let (expected_min, expected_max) =
            expected_entries(cfg.scenario, case, warmup_sent + s.sent, s.received);
        Some(CtCheck {
            entries,
            expected_min,
            expected_max,
        })
    } else {
        None
    };
    let case_name = case
        .connections
        .map_or(String::new(), |n| format!(" ({n} connections)"));
    eprintln!(
        "  round {}/{} {}{case_name}: {:.3} Mpps received, {:.3} offered, loss {:.1}%{}",
        round + 1,
        cfg.runs,
        system.name(),
        s.mpps(),
        offered_mpps(&s),
        s.loss() * 100.0,
        conntrack.map_or(String::new(), |c| format!(
            ", {} connections in the table ({})",
            c.entries,
            if c.ok() {
                "as expected".to_string()
            } else {
                format!("expected {}..={}", c.expected_min, c.expected_max)
            }
        ))
    );
    Ok(Run {
        sample: Some(s),
        conntrack,
        ..Run::default()
    })
}

pub(super) fn offered_mpps(s: &Sample) -> f64 {
    s.sent as f64 / s.elapsed.as_secs_f64().max(1e-9) / 1e6
}

fn traffic_result(s: &Sample, runs_mpps: Vec<f64>) -> TrafficResult {
    TrafficResult {
        mpps: s.mpps(),
        gbps: s.gbps(),
        loss: s.loss(),
        p50_us: s.p50_ns.map(|v| v / 1000.0),
        p99_us: s.p99_ns.map(|v| v / 1000.0),
        offered_mpps: offered_mpps(s),
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

fn result(system: System, scenario: Scenario, case: Case, runs: Vec<Run>) -> SystemResult {
    let ct_verified = scenario.uses_conntrack().then(|| {
        runs.iter()
            .all(|r| r.conntrack.as_ref().is_some_and(CtCheck::ok))
    });
    let runs_mpps: Vec<f64> = runs
        .iter()
        .filter_map(|r| r.sample.as_ref().map(Sample::mpps))
        .collect();
    let churn_all: Vec<ChurnRun> = runs.iter().filter_map(|r| r.churn.clone()).collect();
    let loads: Vec<FlowmodRun> = runs.iter().filter_map(|r| r.flowmod.clone()).collect();
    let run = median(runs);
    SystemResult {
        system: system.name(),
        connections: case.connections,
        traffic: run.sample.as_ref().map(|s| traffic_result(s, runs_mpps)),
        conntrack: run.conntrack,
        ct_verified,
        conns_per_s: run
            .sample
            .as_ref()
            .filter(|_| scenario == Scenario::ConntrackNew)
            .map(|s| s.mpps() * 1e6),
        churn: run.churn.as_ref().map(|c| c.result(&churn_all)),
        flowmod: run.flowmod.as_ref().map(|f| f.result(&loads)),
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
    let cases = cases(cfg);
    // Round-robin: the machine's load drifts, and interleaving spreads
    // the drift over every switch (and case) instead of biasing the last.
    let mut runs: Vec<Vec<Vec<Run>>> = vec![vec![Vec::new(); cfg.systems.len()]; cases.len()];
    for round in 0..cfg.runs {
        for (c, &case) in cases.iter().enumerate() {
            for (i, &system) in cfg.systems.iter().enumerate() {
                if cfg.stop.load(Ordering::Relaxed) {
                    return Err(ScenarioError::Interrupted);
                }
                runs[c][i].push(measure_once(system, cfg, case, round)?);
            }
        }
    }
    let mut results = Vec::new();
    let mut all_ratios = Vec::new();
    for (&case, case_runs) in cases.iter().zip(runs) {
        let first = results.len();
        for (&system, r) in cfg.systems.iter().zip(case_runs) {
            results.push(result(system, cfg.scenario, case, r));
        }
        all_ratios.extend(ratios(&results[first..], case.connections));
    }
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let traffic = cfg.scenario.sends_traffic();
    Ok(Report {
        scenario: cfg.scenario.name(),
        pkt_size: traffic.then_some(cfg.pkt_size),
        proto: traffic.then_some(match cfg.proto {
            Proto::Udp => "udp",
            Proto::Tcp => "tcp",
        }),
        flows: match cfg.scenario {
            Scenario::P2p | Scenario::Vxlan | Scenario::Encap => 1,
            Scenario::Pipeline => u32::try_from(flows_text(cfg)?.lines().count()).unwrap_or(0),
            Scenario::Flows | Scenario::Churn | Scenario::Flowmod => cfg.n_flows,
            Scenario::Conntrack => cfg.connections.iter().copied().max().unwrap_or(1),
            Scenario::ConntrackNew => u32::try_from(CT_NEW_MAX_CONNECTIONS).unwrap_or(u32::MAX),
        },
        connections: match cfg.scenario {
            Scenario::Conntrack => cfg.connections.clone(),
            _ => Vec::new(),
        },
        duration_s: traffic.then_some(cfg.duration.as_secs_f64()),
        runs: cfg.runs,
        rate_pps: cfg.rate_pps.filter(|_| traffic),
        date: command_line("date", &["-u", "+%Y-%m-%dT%H:%M:%SZ"]),
        machine: format!("{} ({cpus} CPUs)", command_line("uname", &["-nrm"])),
        results,
        ratios: all_ratios,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: Case = Case { connections: None };

    #[test]
    fn expected_entries_follow_the_traffic() {
        let ten = Case {
            connections: Some(10),
        };
        assert_eq!(
            expected_entries(Scenario::Conntrack, ten, 500, 400),
            (10, 10)
        );
        assert_eq!(expected_entries(Scenario::Conntrack, ten, 5, 3), (3, 5));
        assert_eq!(
            expected_entries(Scenario::ConntrackNew, ONE, 500, 400),
            (400, 500)
        );
        let c = CtCheck {
            entries: 450,
            expected_min: 400,
            expected_max: 500,
        };
        assert!(c.ok());
        assert!(!CtCheck { entries: 399, ..c }.ok());
    }
}
