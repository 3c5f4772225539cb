//! `flowmod`: how fast a switch takes a large flow set written the way the
//! agent writes flows, one `ovs-ofctl -O OpenFlow13 bundle br0 FILE`, and
//! what the flows cost in memory.
//!
//! Each round starts every switch fresh on the scenario's topology, with
//! no flow, and loads `n_flows` flows (`flows`' shape: one
//! `ip,in_port=1,nw_dst=X -> output:2` per destination, see
//! [`super::flows::flowmod_bundle`]) in one bundle. The figures: the
//! bundle command's wall time (it returns on the commit's reply, once the
//! switch holds every flow), the switch process's CPU time meanwhile, and
//! its `VmRSS` before and right after (before the dumps, which allocate
//! replies). Then `dump-aggregate` must count exactly `n_flows` flows and
//! `dump-flows` must show each destination's flow once, with its action:
//! a switch that answered the commit without taking the flows fails the
//! run's `flows_verified`.
//!
//! The flows are built here rather than from `gen_flows.py`, so that the
//! dump can be checked flow by flow; the agent's own 100k set is
//! `flowload`'s (see docs/benchmarks.md).

use std::net::Ipv4Addr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::flows::{dst, flowmod_bundle};
use super::report::FlowmodResult;
use super::setup::{bundle, switch_config, ScratchDir};
use super::{Config, ScenarioError};
use crate::ovs::{cpu_time, rss_kib};
use crate::systems::{self, System, SystemError};
use crate::topo::Topology;

/// Bound on the bundle and on each dump: 100k flows take seconds; this
/// is for a switch that hangs.
const LOAD_TIMEOUT: Duration = Duration::from_secs(600);

/// One load's figures.
#[derive(Debug, Clone, PartialEq)]
pub(in crate::scenario) struct FlowmodRun {
    pub(in crate::scenario) flows: u64,
    pub(in crate::scenario) wall: Duration,
    pub(in crate::scenario) switch_cpu: Duration,
    pub(in crate::scenario) rss_before_kib: u64,
    pub(in crate::scenario) rss_after_kib: u64,
    pub(in crate::scenario) verified: bool,
}

impl FlowmodRun {
    pub(in crate::scenario) fn flows_per_s(&self) -> f64 {
        self.flows as f64 / self.wall.as_secs_f64().max(1e-9)
    }

    /// The reported figures: this (median) run's, every run's time, and
    /// whether every run's flows were all there.
    pub(in crate::scenario) fn result(&self, all: &[FlowmodRun]) -> FlowmodResult {
        FlowmodResult {
            flows_loaded: self.flows,
            bundle_s: self.wall.as_secs_f64(),
            flows_per_s: self.flows_per_s(),
            switch_cpu_s: self.switch_cpu.as_secs_f64(),
            rss_before_kib: self.rss_before_kib,
            rss_after_kib: self.rss_after_kib,
            flows_verified: all.iter().all(|r| r.verified),
            runs_bundle_s: all.iter().map(|r| r.wall.as_secs_f64()).collect(),
        }
    }
}

fn no_pid(system: System) -> ScenarioError {
    ScenarioError::System(SystemError::Start {
        system: system.name(),
        reason: "no switch process to measure".into(),
    })
}

/// One round's load into a fresh `system`.
pub(super) fn measure_once(
    system: System,
    cfg: &Config,
    round: usize,
) -> Result<FlowmodRun, ScenarioError> {
    let dir = ScratchDir::new("flowmod")?;
    let file = dir.write("flows.bundle", &flowmod_bundle(cfg.n_flows))?;
    let topo = Topology::new()?;
    let switch = systems::start(system, &topo, &switch_config(cfg)?)?;
    let pid = switch.pid().ok_or_else(|| no_pid(system))?;
    let rss_before_kib = rss_kib(pid)?;
    let cpu_before = cpu_time(pid)?;
    let start = Instant::now();
    bundle(&switch, &file, LOAD_TIMEOUT)?;
    let wall = start.elapsed();
    let switch_cpu = cpu_time(pid)?.saturating_sub(cpu_before);
    let rss_after_kib = rss_kib(pid)?;
    if cfg.stop.load(Ordering::Relaxed) {
        return Err(ScenarioError::Interrupted);
    }
    let aggregate = switch.ofctl(&["dump-aggregate", "br0"], LOAD_TIMEOUT)?;
    let dump = switch.ofctl(&["--no-names", "dump-flows", "br0"], LOAD_TIMEOUT)?;
    let counted = parse_flow_count(&aggregate);
    let check = check_dump(&dump, cfg.n_flows);
    let verified = counted == Some(u64::from(cfg.n_flows)) && check.is_ok();
    let run = FlowmodRun {
        flows: u64::from(cfg.n_flows),
        wall,
        switch_cpu,
        rss_before_kib,
        rss_after_kib,
        verified,
    };
    eprintln!(
        "  round {}/{} {}: {} flows in {:.3} s ({:.0} flows/s, {:.3} s switch CPU), RSS {:.1} -> {:.1} MiB, {}",
        round + 1,
        cfg.runs,
        system.name(),
        cfg.n_flows,
        wall.as_secs_f64(),
        run.flows_per_s(),
        switch_cpu.as_secs_f64(),
        rss_before_kib as f64 / 1024.0,
        rss_after_kib as f64 / 1024.0,
        match (&counted, &check) {
            (Some(n), Ok(())) if *n == u64::from(cfg.n_flows) => "every flow found".to_string(),
            (n, c) => format!(
                "NOT VERIFIED: dump-aggregate flow_count {}, dump-flows: {}",
                n.map_or("missing".to_string(), |n| n.to_string()),
                c.as_ref().err().map_or("as loaded", String::as_str)
            ),
        }
    );
    Ok(run)
}

/// `flow_count=N` of an `ovs-ofctl dump-aggregate` reply.
pub(super) fn parse_flow_count(text: &str) -> Option<u64> {
    text.split([' ', '\n', ','])
        .find_map(|w| w.strip_prefix("flow_count="))
        .and_then(|n| n.trim().parse().ok())
}

/// Checks an `ovs-ofctl --no-names dump-flows` listing against the
/// bundle of `n` flows: each destination's flow exactly once, with
/// `priority=100`, `in_port=1` and `actions=output:2`, and no other flow.
/// The error names the first problems found.
pub(super) fn check_dump(dump: &str, n: u32) -> Result<(), String> {
    let base = u32::from(dst(0));
    let mut seen = vec![0u8; n as usize];
    let mut problems = Vec::new();
    let mut note = |p: String| {
        if problems.len() < 3 {
            problems.push(p);
        }
    };
    // Entries are indented; the reply headers are not.
    for line in dump.lines().filter(|l| l.starts_with(' ')) {
        let entry = line.trim();
        let Some((fields, actions)) = entry.split_once(" actions=") else {
            note(format!("no actions in `{entry}`"));
            continue;
        };
        let matched = fields.rsplit(", ").next().unwrap_or("");
        let parts: Vec<&str> = matched.split(',').collect();
        let nw_dst = parts
            .iter()
            .find_map(|p| p.strip_prefix("nw_dst="))
            .and_then(|a| a.parse::<Ipv4Addr>().ok());
        let i = nw_dst
            .and_then(|a| u32::from(a).checked_sub(base))
            .filter(|i| *i < n);
        let shape = parts.contains(&"priority=100")
            && parts.contains(&"ip")
            && parts.contains(&"in_port=1")
            && actions.trim() == "output:2";
        match i {
            Some(i) if shape => seen[i as usize] = seen[i as usize].saturating_add(1),
            _ => note(format!("unexpected flow `{entry}`")),
        }
    }
    let missing = seen.iter().filter(|c| **c == 0).count();
    let doubled = seen.iter().filter(|c| **c > 1).count();
    if missing > 0 {
        note(format!("{missing} of {n} flows missing"));
    }
    if doubled > 0 {
        note(format!("{doubled} flows listed more than once"));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dump_of(bundle: &str) -> String {
        let mut d = String::from("OFPST_FLOW reply (OF1.3) (xid=0x2):\n");
        for l in bundle.lines() {
            let flow = l.strip_prefix("flow add ").unwrap();
            let (m, a) = flow.split_once(",actions=").unwrap();
            let m = m.strip_prefix("table=0,").unwrap();
            d.push_str(&format!(
                " cookie=0x0, duration=1.5s, table=0, n_packets=0, n_bytes=0, {m} actions={a}\n"
            ));
        }
        d
    }

    #[test]
    fn the_bundle_adds_one_flow_per_destination() {
        let b = flowmod_bundle(3);
        assert_eq!(
            b.lines().collect::<Vec<_>>(),
            [
                "flow add table=0,priority=100,ip,in_port=1,nw_dst=10.128.4.0,actions=output:2",
                "flow add table=0,priority=100,ip,in_port=1,nw_dst=10.128.4.1,actions=output:2",
                "flow add table=0,priority=100,ip,in_port=1,nw_dst=10.128.4.2,actions=output:2",
            ]
        );
        assert_eq!(flowmod_bundle(100_000).lines().count(), 100_000);
        assert!(flowmod_bundle(100_000).contains("nw_dst=10.129.138.159,"));
    }

    #[test]
    fn a_complete_dump_verifies_and_a_short_one_does_not() {
        let dump = dump_of(&flowmod_bundle(300));
        assert_eq!(check_dump(&dump, 300), Ok(()));
        let err = check_dump(&dump, 301).unwrap_err();
        assert!(err.contains("1 of 301 flows missing"), "{err}");
        // One flow lost, one listed twice.
        let mut lines: Vec<&str> = dump.lines().collect();
        lines[5] = lines[6];
        let err = check_dump(&(lines.join("\n") + "\n"), 300).unwrap_err();
        assert!(
            err.contains("1 of 300 flows missing") && err.contains("more than once"),
            "{err}"
        );
        // The right destinations, the wrong action.
        let wrong = dump.replacen("actions=output:2", "actions=output:3", 1);
        let err = check_dump(&wrong, 300).unwrap_err();
        assert!(
            err.contains("unexpected flow") && err.contains("1 of 300"),
            "{err}"
        );
    }

    #[test]
    fn flow_count_comes_from_the_aggregate_reply() {
        let reply = "OFPST_AGGREGATE reply (OF1.3) (xid=0x2): packet_count=0 byte_count=0 flow_count=100000\n";
        assert_eq!(parse_flow_count(reply), Some(100_000));
        assert_eq!(
            parse_flow_count("OFPST_AGGREGATE reply: packet_count=0"),
            None
        );
    }
}
