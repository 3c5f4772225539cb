//! Running a scenario: rounds of one fresh topology and switch per system,
//! a warm-up, one measured run, all torn down again.

use std::sync::atomic::Ordering;

use super::flows::{cases, ct_replies, flows_text, traffic, Case};
use super::report::{ratios, CtCheck, Report, SystemResult};
use super::{
    validate, Config, Scenario, ScenarioError, CT_LIMIT, CT_NEW_MAX_CONNECTIONS, LOCAL_NODE,
};
use crate::gen::GenBounds;
use crate::measure::{Harness, MeasureError, Sample};
use crate::ovs::{run_bounded, CMD_TIMEOUT};
use crate::packet::Proto;
use crate::systems::{self, SwitchConfig, System};
use crate::topo::Topology;

/// One measured run: the traffic's figures, and for the conntrack
/// scenarios the switch's connection count against what it must be.
#[derive(Debug, Clone)]
struct Run {
    sample: Sample,
    conntrack: Option<CtCheck>,
}

fn median(mut runs: Vec<Run>) -> (Run, Vec<f64>) {
    let rates = runs.iter().map(|r| r.sample.mpps()).collect();
    runs.sort_by(|a, b| a.sample.mpps().total_cmp(&b.sample.mpps()));
    let mid = runs.swap_remove((runs.len() - 1) / 2);
    (mid, rates)
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
    let topo = Topology::new()?;
    let sw = SwitchConfig {
        xbr_bin: cfg.xbr_bin.clone(),
        xbr_args: cfg.xbr_args.clone(),
        cpu: cfg.switch_cpu,
        flows: flows_text(cfg),
        vxlan_uplink: (cfg.scenario == Scenario::Vxlan).then(|| format!("{LOCAL_NODE}/24")),
        ct_limit: cfg.scenario.uses_conntrack().then_some(CT_LIMIT),
    };
    let switch = systems::start(system, &topo, &sw)?;
    let m = |source| match source {
        MeasureError::Interrupted => ScenarioError::Interrupted,
        source => ScenarioError::Measure {
            system: system.name(),
            source,
        },
    };
    let mut h = Harness::new(&topo, traffic(cfg, case)?).map_err(m)?;
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
        sample: s,
        conntrack,
    })
}

fn offered_mpps(s: &Sample) -> f64 {
    s.sent as f64 / s.elapsed.as_secs_f64().max(1e-9) / 1e6
}

fn result(system: System, scenario: Scenario, case: Case, runs: Vec<Run>) -> SystemResult {
    let ct_verified = scenario.uses_conntrack().then(|| {
        runs.iter()
            .all(|r| r.conntrack.as_ref().is_some_and(CtCheck::ok))
    });
    let (run, runs_mpps) = median(runs);
    let s = run.sample;
    SystemResult {
        system: system.name(),
        connections: case.connections,
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
        conntrack: run.conntrack,
        ct_verified,
        conns_per_s: (scenario == Scenario::ConntrackNew).then(|| s.mpps() * 1e6),
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
            Scenario::Conntrack => cfg.connections.iter().copied().max().unwrap_or(1),
            Scenario::ConntrackNew => u32::try_from(CT_NEW_MAX_CONNECTIONS).unwrap_or(u32::MAX),
        },
        connections: match cfg.scenario {
            Scenario::Conntrack => cfg.connections.clone(),
            _ => Vec::new(),
        },
        duration_s: cfg.duration.as_secs_f64(),
        runs: cfg.runs,
        rate_pps: cfg.rate_pps,
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
