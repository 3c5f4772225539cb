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
//! - `encap`: encapsulation, pod to uplink, the `vxlan` topology in
//!   reverse: pod A (10.128.0.2, OpenFlow port 3, as the agent numbers
//!   pods) sends plain frames to a pod on another node (10.128.2.3);
//!   the agent's table 90 flow encapsulates them (`move:REG0 ->
//!   tun_id`, VNI 42 loaded by table 0, `set_field:10.0.0.12->tun_dst`,
//!   `output:1`) through `vxlan0` over `veth-b`, this node's uplink
//!   (10.0.0.11); pod B plays the remote node. Its sink counts only
//!   frames whose outer headers are right (addresses, UDP port 4789,
//!   lengths and checksum, VXLAN flags and VNI) around the intact inner
//!   frame. The kernel reference pushes the outer headers in XDP and
//!   redirects; the Linux bridge and afxdp-l2fwd do not encapsulate.
//! - `pipeline`: the agent's multitenant flow set for one node with 100
//!   local pods ([`pipeline`]), loaded by one bundle; pod A (port 3) to
//!   pod B (port 4) of the same namespace, every packet through the
//!   agent's conntrack, VNID and policy tables.
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
//! - `flowmod`: no traffic; `n_flows` flows (`flows`' shape) loaded into
//!   an empty switch by one `ovs-ofctl bundle`: wall time, flows/s, the
//!   switch's CPU time and RSS, every flow checked in the dumps
//!   ([`flowmod`]).
//! - `churn`: `flows`' traffic over `n_flows` destinations with a second
//!   sink (pod C, port 3), while bundles move half of the destinations'
//!   flows port 2 -> 3 -> deleted -> 2; the sinks' per-destination-class
//!   counts prove that no frame arrived where the table in force could
//!   not send it ([`churn`]).
//!
//! The conntrack scenarios count the switch's connections after each run
//! and report whether the count is what the traffic must have created
//! (`ct_verified`), so a rate can not come from packets that bypassed
//! conntrack's state. xbr's XDP flow cache carries the packets of
//! established connections in the kernel (its conntrack entries, see
//! `dataplane/src/fastpath/cache`), keeping the connections alive in xbr's
//! conntrack: in `conntrack` `xbr` forwards the measured packets in XDP
//! and `xbr-nocache` through the packet thread; in `conntrack-new` `xbr`'s
//! XDP program creates the new connections from the template the first
//! ones taught it and reports them to conntrack, which stores them
//! (`dataplane/src/conntrack/kernel_new.rs`; the count checked is
//! conntrack's), and `xbr-nocache` creates them all in the packet thread.
//! The kernel
//! references (`xdp-redirect`, `linux-bridge`) have no conntrack and are
//! refused.
//!
//! All switches are measured on the same machine in one
//! invocation; the ratios between them are the result, the absolute
//! figures depend on what else the (shared) machine does meanwhile.

use std::net::Ipv4Addr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use crate::measure::{MeasureError, MethodChoice};
use crate::ovs::OvsError;
use crate::packet::{Proto, TemplateError};
use crate::systems::{System, SystemError};

mod churn;
mod flowmod;
mod flows;
use flows::{cases, traffic};
pub mod pipeline;
mod report;
mod run;
mod setup;

pub use churn::Misdelivered;
pub use flows::traffic_of;
pub use report::{
    markdown, ChurnResult, CtCheck, FlowmodResult, Ratio, Report, SystemResult, TrafficResult,
};
pub use run::run;
pub use setup::switch_config;

/// Destination of flow 0 in the `flows` scenario.
const FLOWS_BASE: Ipv4Addr = Ipv4Addr::new(10, 128, 4, 0);
/// The `vxlan` scenario's node address (on the uplink) and remote node.
const LOCAL_NODE: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 11);
const REMOTE_NODE: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 12);
const VNI: u32 = 42;
/// `encap`: the remote pod the generator sends to (on node 2's subnet).
const ENCAP_DST: Ipv4Addr = Ipv4Addr::new(10, 128, 2, 3);
/// `encap`: pod A's OpenFlow port (the agent numbers pods from 3).
const ENCAP_POD_PORT: u32 = 3;
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
    Encap,
    Pipeline,
    Conntrack,
    ConntrackNew,
    Flowmod,
    Churn,
}

impl Scenario {
    pub fn name(self) -> &'static str {
        match self {
            Scenario::P2p => "p2p",
            Scenario::Flows => "flows",
            Scenario::Vxlan => "vxlan",
            Scenario::Encap => "encap",
            Scenario::Pipeline => "pipeline",
            Scenario::Conntrack => "conntrack",
            Scenario::ConntrackNew => "conntrack-new",
            Scenario::Flowmod => "flowmod",
            Scenario::Churn => "churn",
        }
    }

    /// Whether the generator sends traffic (all but `flowmod`).
    pub fn sends_traffic(self) -> bool {
        self != Scenario::Flowmod
    }

    /// The default `n_flows`: `flowmod` loads 100k flows (issue 6), the
    /// others send to 1000 destinations.
    pub fn default_flows(self) -> u32 {
        match self {
            Scenario::Flowmod => 100_000,
            _ => 1000,
        }
    }

    /// Whether every packet goes through conntrack.
    pub fn uses_conntrack(self) -> bool {
        matches!(self, Scenario::Conntrack | Scenario::ConntrackNew)
    }

    /// The systems measured when none are named: the kernel references
    /// have no conntrack, so the conntrack scenarios compare xbr and OVS.
    /// `flowmod` and `churn` are about an OpenFlow switch's flow table,
    /// which the references do not have.
    pub fn default_systems(self) -> Vec<System> {
        match self {
            Scenario::Churn => vec![System::Xbr, System::XbrNocache, System::OvsAfxdp],
            s if s.uses_conntrack() || s == Scenario::Flowmod => {
                vec![System::Xbr, System::OvsAfxdp]
            }
            _ => vec![System::XdpRedirect, System::Xbr, System::OvsAfxdp],
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
            (Scenario::Encap, System::LinuxBridge) => {
                Some("linux-bridge does not apply to the encap scenario: it does not encapsulate")
            }
            (Scenario::Encap, System::AfxdpL2fwd) => {
                Some("afxdp-l2fwd forwards frames as they are and does not encapsulate")
            }
            (s, System::AfxdpL2fwd) if s.uses_conntrack() => {
                Some("afxdp-l2fwd has no conntrack; leave it out of the conntrack scenarios")
            }
            (s, System::XdpRedirect | System::LinuxBridge) if s.uses_conntrack() => Some(
                "xdp-redirect and linux-bridge have no conntrack; leave them out of the conntrack scenarios",
            ),
            (
                Scenario::Flowmod,
                System::Xbr | System::XbrNocache | System::XbrScraped | System::OvsAfxdp,
            ) => None,
            (Scenario::Flowmod, _) => Some(
                "flowmod loads flows by OpenFlow: only xbr, xbr-nocache and ovs-afxdp have a flow table",
            ),
            // xdp-redirect stays allowed in churn: it ignores flows, so it
            // shows that the misdelivery check catches a switch that does.
            (Scenario::Churn, System::AfxdpL2fwd | System::LinuxBridge) => Some(
                "churn moves flows between ports 2 and 3: afxdp-l2fwd and linux-bridge have no flow table",
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
    /// Flows of the `flows` scenario, destinations of `churn` (half of
    /// them move), flows `flowmod` loads.
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
    /// is torn down and [`run()`](fn@run) returns [`ScenarioError::Interrupted`].
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

/// Errors of a configuration, found before anything is built.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--pkt-size: {0}")]
    Template(#[from] TemplateError),
    #[error("--systems: {0}")]
    System(&'static str),
    #[error("--connections: {0}")]
    Connections(String),
    #[error("--flows: {0}")]
    Flows(String),
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
    let min_flows = if cfg.scenario == Scenario::Churn {
        2
    } else {
        1
    };
    if !(min_flows..=MAX_FLOWS).contains(&cfg.n_flows) {
        return Err(ConfigError::Flows(format!(
            "{} is not within {min_flows}..={MAX_FLOWS}{}",
            cfg.n_flows,
            if min_flows == 2 {
                " (churn needs a fixed and a moving destination)"
            } else {
                ""
            }
        )));
    }
    if !cfg.scenario.sends_traffic() {
        return Ok(());
    }
    for case in cases(cfg) {
        traffic(cfg, case)?;
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::measure::MethodChoice;

    pub(crate) fn cfg(scenario: Scenario) -> Config {
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
    fn flowmod_and_churn_take_only_switches_with_flow_tables() {
        let mut c = cfg(Scenario::Flowmod);
        assert_eq!(
            c.scenario.default_systems(),
            [System::Xbr, System::OvsAfxdp]
        );
        for s in [System::XdpRedirect, System::LinuxBridge, System::AfxdpL2fwd] {
            c.systems = vec![System::Xbr, s];
            assert!(matches!(validate(&c), Err(ConfigError::System(_))), "{s:?}");
        }
        c.systems = vec![System::Xbr, System::XbrNocache, System::OvsAfxdp];
        assert!(validate(&c).is_ok());
        c.pkt_size = 10;
        assert!(validate(&c).is_ok(), "flowmod sends no frames");
        let mut c = cfg(Scenario::Churn);
        assert_eq!(
            c.scenario.default_systems(),
            [System::Xbr, System::XbrNocache, System::OvsAfxdp]
        );
        c.systems = vec![System::Xbr, System::XdpRedirect];
        assert!(validate(&c).is_ok(), "the negative control");
        c.systems = vec![System::LinuxBridge];
        assert!(matches!(validate(&c), Err(ConfigError::System(_))));
        c.systems = vec![System::Xbr];
        c.n_flows = 1;
        let e = validate(&c).unwrap_err().to_string();
        assert!(e.contains("--flows") && e.contains("moving"), "{e}");
        c.n_flows = MAX_FLOWS + 1;
        assert!(matches!(validate(&c), Err(ConfigError::Flows(_))));
    }

    #[test]
    fn encap_refuses_what_does_not_encapsulate_and_pipeline_takes_all() {
        let mut c = cfg(Scenario::Encap);
        for s in [System::LinuxBridge, System::AfxdpL2fwd] {
            c.systems = vec![System::Xbr, s];
            let e = validate(&c).unwrap_err().to_string();
            assert!(e.contains("--systems") && e.contains("encapsulate"), "{e}");
        }
        c.systems = vec![
            System::XdpRedirect,
            System::Xbr,
            System::XbrNocache,
            System::OvsAfxdp,
        ];
        assert!(validate(&c).is_ok());
        assert_eq!(Scenario::Encap.default_pkt_size(), 64, "the pod's frame");
        let mut p = cfg(Scenario::Pipeline);
        p.systems = vec![
            System::XdpRedirect,
            System::Xbr,
            System::XbrNocache,
            System::OvsAfxdp,
            System::AfxdpL2fwd,
            System::LinuxBridge,
        ];
        assert!(validate(&p).is_ok());
        for s in [Scenario::Encap, Scenario::Pipeline] {
            assert_eq!(
                s.default_systems(),
                [System::XdpRedirect, System::Xbr, System::OvsAfxdp]
            );
        }
    }

    #[test]
    fn new_scenarios_number_the_ports_as_the_agent_does() {
        use crate::systems::Ports;
        let sw = switch_config(&cfg(Scenario::Pipeline)).unwrap();
        assert_eq!(sw.ports, Ports::Pods { a: 3, b: 4 });
        assert!(sw.bundle, "loaded the agent's way");
        let sw = switch_config(&cfg(Scenario::Encap)).unwrap();
        assert_eq!(
            sw.ports,
            Ports::VxlanOut {
                cidr: "10.0.0.11/24".into(),
                a: 3,
                remote: REMOTE_NODE,
                remote_mac: crate::topo::MAC_B,
                vni: 42,
            }
        );
        assert!(!sw.bundle);
        let sw = switch_config(&cfg(Scenario::P2p)).unwrap();
        assert_eq!(sw.ports, Ports::P2P);
        assert!(matches!(
            switch_config(&cfg(Scenario::Vxlan)).unwrap().ports,
            Ports::VxlanIn { .. }
        ));
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
