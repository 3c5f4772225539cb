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
//! - `conntrack`: every packet through conntrack, as the OpenShift agent's
//!   table 0 puts it: `ip,ct_state=-trk -> ct(table=0)`, then
//!   `+trk+new,in_port=1 -> ct(commit),output:2` and `+trk+est,in_port=1
//!   -> output:2`. The generator cycles over `connections` UDP connections
//!   (source ports 1024 + i, or source addresses 10.128.0.2 + i beyond
//!   64512); the warm-up commits them all, then pod B answers each once
//!   (`Harness::send_from_b`), so every measured packet is `+est` in both
//!   switches (without a warm-up, `--warmup 0`, nothing is answered); one
//!   case per entry of [`Config::connections`], measured in the same
//!   rounds.
//! - `conntrack-new`: the same flows, every packet a new connection (the
//!   source address 10.128.0.2 + i never repeats within a run, so each
//!   packet is `+new` and committed): the received rate is the rate of new
//!   connections. No warm-up run (its connections would be the measured
//!   run's); runs stop after [`CT_NEW_MAX_CONNECTIONS`] packets, and both
//!   switches' tables hold more than that, so none fills.
//!
//! The conntrack scenarios count the switch's connections after each run
//! and report whether the count is what the traffic must have created
//! (`ct_verified`), so a rate can not come from packets that bypassed
//! conntrack's state. xbr's XDP flow cache carries the packets of
//! established connections in the kernel (its conntrack entries, see
//! `dataplane/src/xdpcache`), keeping the connections alive in xbr's
//! conntrack: in `conntrack` `xbr` forwards the measured packets in XDP
//! and `xbr-nocache` through the packet thread; in `conntrack-new` every
//! packet is `+new` and both take the packet thread. The kernel
//! references (`xdp-redirect`, `linux-bridge`) have no conntrack and are
//! refused.
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
use crate::packet::{FrameSpec, Proto, Template, TemplateError, Vary, VxlanOuter};
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
/// Largest `conntrack` case.
pub const MAX_CONNECTIONS: u32 = 1 << 20;
/// The `conntrack` cases run by default.
pub const DEFAULT_CONNECTIONS: [u32; 2] = [1, 10_000];
/// `conntrack-new` stops a run after this many packets (connections):
/// about 1.5 GB of connection state in OVS, and more than either switch
/// creates in a few seconds on this machine.
pub const CT_NEW_MAX_CONNECTIONS: u64 = 4_000_000;
/// The conntrack table limit both switches get in the conntrack
/// scenarios: room for a whole `conntrack-new` run.
const CT_LIMIT: u64 = CT_NEW_MAX_CONNECTIONS + 100_000;
/// Source port of connection 0 in `conntrack`; connection i uses 1024 + i
/// while that stays a port, else source address + i.
const CT_SRC_PORT: u16 = 1024;
/// Destination port of every generated frame (the sink's, iperf's).
const CT_DST_PORT: u16 = 5201;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    P2p,
    Flows,
    Vxlan,
    Conntrack,
    ConntrackNew,
}

impl Scenario {
    pub fn name(self) -> &'static str {
        match self {
            Scenario::P2p => "p2p",
            Scenario::Flows => "flows",
            Scenario::Vxlan => "vxlan",
            Scenario::Conntrack => "conntrack",
            Scenario::ConntrackNew => "conntrack-new",
        }
    }

    /// Whether every packet goes through conntrack.
    pub fn uses_conntrack(self) -> bool {
        matches!(self, Scenario::Conntrack | Scenario::ConntrackNew)
    }

    /// The systems measured when none are named: the kernel references
    /// have no conntrack, so the conntrack scenarios compare xbr and OVS.
    pub fn default_systems(self) -> Vec<System> {
        if self.uses_conntrack() {
            vec![System::Xbr, System::OvsAfxdp]
        } else {
            vec![System::XdpRedirect, System::Xbr, System::OvsAfxdp]
        }
    }

    /// Why `system` cannot run this scenario, if it cannot.
    pub fn refuses(self, system: System) -> Option<&'static str> {
        match (self, system) {
            (Scenario::Vxlan, System::LinuxBridge) => {
                Some("linux-bridge does not apply to the vxlan scenario")
            }
            (Scenario::Vxlan, System::AfxdpL2fwd) => {
                Some("afxdp-l2fwd forwards frames as they are and does not decapsulate")
            }
            (s, System::AfxdpL2fwd) if s.uses_conntrack() => {
                Some("afxdp-l2fwd has no conntrack; leave it out of the conntrack scenarios")
            }
            (s, System::XdpRedirect | System::LinuxBridge) if s.uses_conntrack() => Some(
                "xdp-redirect and linux-bridge have no conntrack; leave them out of the conntrack scenarios",
            ),
            _ => None,
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
    /// Concurrent connections of the `conntrack` scenario, one case each.
    pub connections: Vec<u32>,
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
    Config(#[from] ConfigError),
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

fn flows_text(cfg: &Config) -> String {
    let mut s = String::new();
    match cfg.scenario {
        Scenario::Conntrack | Scenario::ConntrackNew => {
            s.push_str("table=0,priority=100,ip,ct_state=-trk,actions=ct(table=0)\n");
            s.push_str(
                "table=0,priority=90,ip,ct_state=+trk+new,in_port=1,actions=ct(commit),output:2\n",
            );
            s.push_str("table=0,priority=90,ip,ct_state=+trk+est,in_port=1,actions=output:2\n");
        }
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

/// One set of measurements within a scenario: the `conntrack` scenario has
/// one per connection count, the others one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Case {
    connections: Option<u32>,
}

fn cases(cfg: &Config) -> Vec<Case> {
    match cfg.scenario {
        Scenario::Conntrack => cfg
            .connections
            .iter()
            .map(|&n| Case {
                connections: Some(n),
            })
            .collect(),
        _ => vec![Case { connections: None }],
    }
}

/// Whether the `conntrack` case's `n` connections differ by source port
/// (one client's connections, while ports last) or by source address.
fn ct_ports_last(n: u32) -> bool {
    u32::from(u16::MAX - CT_SRC_PORT) + 1 >= n
}

/// `conntrack`: pod B's answer to each of the case's connections (the
/// generator's flow i reversed), and how its flows vary.
fn ct_replies(cfg: &Config, case: Case) -> Result<(Template, Vary, u32), TemplateError> {
    let n = case.connections.unwrap_or(1).max(1);
    let ports_last = ct_ports_last(n);
    let t = FrameSpec {
        proto: cfg.proto,
        pkt_size: cfg.pkt_size,
        src_mac: MAC_B,
        dst_mac: MAC_A,
        src_ip: Ipv4Addr::new(10, 128, 0, 3),
        dst_ip: Ipv4Addr::new(10, 128, 0, 2),
        src_port: CT_DST_PORT,
        dst_port: CT_SRC_PORT,
        vxlan: None,
    }
    .build()?;
    let vary = Vary {
        dst_port: ports_last,
        dst_ip: !ports_last,
        ..Vary::default()
    };
    Ok((t, vary, n))
}

fn traffic(cfg: &Config, case: Case) -> Result<Traffic, TemplateError> {
    let mut src_port = 40000;
    let (dst_ip, n_flows, vary) = match cfg.scenario {
        Scenario::P2p | Scenario::Vxlan => (Ipv4Addr::new(10, 128, 0, 3), 1, Vary::default()),
        Scenario::Conntrack => {
            let n = case.connections.unwrap_or(1).max(1);
            src_port = CT_SRC_PORT;
            // Source ports while they last (one client's connections),
            // source addresses beyond: connection i is always unique.
            let ports_last = ct_ports_last(n);
            let vary = Vary {
                src_port: ports_last,
                src_ip: !ports_last,
                ..Vary::default()
            };
            (Ipv4Addr::new(10, 128, 0, 3), n, vary)
        }
        Scenario::ConntrackNew => (
            Ipv4Addr::new(10, 128, 0, 3),
            // A run stops at this count, so no source address repeats.
            u32::try_from(CT_NEW_MAX_CONNECTIONS).unwrap_or(u32::MAX),
            Vary {
                src_ip: true,
                ..Vary::default()
            },
        ),
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
        src_port,
        dst_port: CT_DST_PORT,
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

/// Errors of a configuration, found before anything is built.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--pkt-size: {0}")]
    Template(#[from] TemplateError),
    #[error("--systems: {0}")]
    System(&'static str),
    #[error("--connections: {0}")]
    Connections(String),
}

/// Checks what can be checked before anything is built.
pub fn validate(cfg: &Config) -> Result<(), ConfigError> {
    for &s in &cfg.systems {
        if let Some(why) = cfg.scenario.refuses(s) {
            return Err(ConfigError::System(why));
        }
    }
    if cfg.scenario == Scenario::Conntrack {
        if cfg.connections.is_empty() {
            return Err(ConfigError::Connections("at least one count".into()));
        }
        if let Some(n) = cfg
            .connections
            .iter()
            .find(|&&n| n == 0 || n > MAX_CONNECTIONS)
        {
            return Err(ConfigError::Connections(format!(
                "{n} is not within 1..={MAX_CONNECTIONS}"
            )));
        }
    }
    for case in cases(cfg) {
        traffic(cfg, case)?;
    }
    Ok(())
}

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

/// xbr's ratios to every other system measured in the same case.
fn ratios(results: &[SystemResult], connections: Option<u32>) -> Vec<Ratio> {
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

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: Case = Case { connections: None };

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
            connections: vec![1, 10_000],
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
        let t = traffic(&cfg(Scenario::Flows), ONE).unwrap();
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
        let t = traffic(&c, ONE).unwrap();
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
    fn conntrack_flows_send_every_packet_through_ct() {
        let c = cfg(Scenario::Conntrack);
        let text = flows_text(&c);
        assert_eq!(
            text.lines().collect::<Vec<_>>(),
            [
                "table=0,priority=100,ip,ct_state=-trk,actions=ct(table=0)",
                "table=0,priority=90,ip,ct_state=+trk+new,in_port=1,actions=ct(commit),output:2",
                "table=0,priority=90,ip,ct_state=+trk+est,in_port=1,actions=output:2",
                "table=0,priority=10,in_port=2,actions=output:1",
            ]
        );
        assert_eq!(flows_text(&cfg(Scenario::ConntrackNew)), text);
        assert_eq!(
            cases(&c),
            [
                Case {
                    connections: Some(1)
                },
                Case {
                    connections: Some(10_000)
                }
            ]
        );
        assert_eq!(cases(&cfg(Scenario::ConntrackNew)), [ONE]);
    }

    #[test]
    fn conntrack_connections_are_distinct_tuples() {
        let c = cfg(Scenario::Conntrack);
        let t = traffic(
            &c,
            Case {
                connections: Some(10_000),
            },
        )
        .unwrap();
        assert_eq!(t.n_flows, 10_000);
        assert!(t.vary.src_port && !t.vary.src_ip && !t.vary.dst_ip);
        assert_eq!(&t.template.frame[34..36], &CT_SRC_PORT.to_be_bytes());
        // Ports run out: addresses vary instead.
        let t = traffic(
            &c,
            Case {
                connections: Some(70_000),
            },
        )
        .unwrap();
        assert!(!t.vary.src_port && t.vary.src_ip);
        let last_port = traffic(
            &c,
            Case {
                connections: Some(64_512),
            },
        )
        .unwrap();
        assert!(last_port.vary.src_port, "1024 + 64511 = 65535 is a port");
        let new = traffic(&cfg(Scenario::ConntrackNew), ONE).unwrap();
        assert!(new.vary.src_ip && !new.vary.src_port);
        assert_eq!(u64::from(new.n_flows), CT_NEW_MAX_CONNECTIONS);
    }

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

    #[test]
    fn conntrack_scenarios_refuse_the_kernel_references() {
        let mut c = cfg(Scenario::Conntrack);
        c.systems = vec![System::Xbr, System::XdpRedirect];
        assert!(matches!(validate(&c), Err(ConfigError::System(_))));
        c.systems = Scenario::Conntrack.default_systems();
        assert_eq!(c.systems, [System::Xbr, System::OvsAfxdp]);
        assert!(validate(&c).is_ok());
        c.connections = vec![0];
        assert!(matches!(validate(&c), Err(ConfigError::Connections(_))));
        c.connections = vec![];
        assert!(matches!(validate(&c), Err(ConfigError::Connections(_))));
        let mut p = cfg(Scenario::P2p);
        p.systems = vec![System::XdpRedirect];
        p.connections = vec![];
        assert!(
            validate(&p).is_ok(),
            "--connections only matters to conntrack"
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
