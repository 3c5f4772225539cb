//! `xbr-bench`'s scenarios end to end at a low, paced rate (root):
//! every switch is set up in its own namespaces, forwards the generator's
//! frames to the sink, and loses (next to) none of them; everything it made is gone
//! afterwards. A smoke test of the plumbing, not of speed.
//!
//! The xbr binary is `$XBR_BIN`, else `<target>/<profile>/xbr`
//! (`cargo build -p xbr-daemon --bin xbr` first; scripts/test does).

use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use bench::measure::MethodChoice;
use bench::packet::Proto;
use bench::scenario::{self, Config, Scenario};
use bench::systems::System;

fn xbr_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("XBR_BIN") {
        return PathBuf::from(p);
    }
    // <target>/<profile>/deps/<test> -> <target>/<profile>/xbr
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(|deps| deps.parent())
        .map(|profile| profile.join("xbr"))
        .expect("target directory")
}

fn namespaces() -> Vec<String> {
    let out = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

/// The scenarios run one at a time: they pin to the same cores, and the
/// leak check below must not see the other test's namespaces.
static SERIAL: Mutex<()> = Mutex::new(());

fn check(scenario: Scenario, n_flows: u32) {
    let report = run(
        scenario,
        n_flows,
        vec![System::XdpRedirect, System::Xbr, System::OvsAfxdp],
    );
    assert!(report.ratios.iter().any(|q| q.to == "ovs-afxdp"));
    let md = scenario::markdown(&report);
    assert!(
        md.contains("| xbr |") && md.contains("xbr / ovs-afxdp"),
        "{md}"
    );
}

/// Runs `systems` at 5 kpps for 1 s; each must deliver (nearly) all.
fn run(scenario: Scenario, n_flows: u32, systems: Vec<System>) -> scenario::Report {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let bin = xbr_bin();
    assert!(
        bin.is_file(),
        "{} missing: cargo build -p xbr-daemon --bin xbr",
        bin.display()
    );
    let before = namespaces();
    let n_systems = systems.len();
    let cfg = Config {
        scenario,
        systems,
        runs: 1,
        duration: Duration::from_secs(1),
        warmup: Duration::ZERO,
        pkt_size: scenario.default_pkt_size(),
        proto: Proto::Udp,
        n_flows,
        connections: vec![],
        rate_pps: Some(5_000),
        method: MethodChoice::Live,
        gen_cpu: 0,
        switch_cpu: 1 % std::thread::available_parallelism().map_or(1, |n| n.get()),
        xbr_bin: bin,
        xbr_args: vec![],
        stop: Default::default(),
    };
    let report = scenario::run(&cfg).expect("scenario");
    assert_eq!(report.results.len(), n_systems);
    for r in &report.results {
        let t = r.traffic.as_ref().expect("traffic figures");
        assert!(t.sent >= 4_000 && t.sent <= 5_000, "{r:?}");
        assert!(t.received <= t.sent, "{r:?}");
        if r.system == "xdp-redirect" {
            assert_eq!(t.received, t.sent, "{r:?}");
        } else {
            // The switches under test run unoptimised builds (xbr) on a
            // shared machine: a few frames may miss a starved poll loop.
            assert!(t.loss < 0.05, "{r:?}");
        }
        assert!(t.p50_us.is_some() && t.p99_us.is_some(), "{r:?}");
    }
    assert_no_leak(&before);
    report
}

fn assert_no_leak(before: &[String]) {
    // Topology names are xbrt-<tag>-h|a|b, the tag starting with 3
    // characters of this process's pid.
    let mine = format!("xbrt-{}", &bench::ovs::unique_tag()[..3]);
    let leaked: Vec<String> = namespaces()
        .into_iter()
        .filter(|n| n.starts_with(&mine) && !before.contains(n))
        .collect();
    assert!(leaked.is_empty(), "namespaces left behind: {leaked:?}");
}

/// A conntrack scenario on xbr and OVS at 5 kpps for 1 s: the frames are
/// delivered, and each switch's connection table holds exactly what the
/// traffic must have created (the frames went through conntrack).
fn check_conntrack(scenario: Scenario, connections: Vec<u32>) -> scenario::Report {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let bin = xbr_bin();
    assert!(
        bin.is_file(),
        "{} missing: cargo build -p xbr-daemon --bin xbr",
        bin.display()
    );
    let before = namespaces();
    let cfg = Config {
        scenario,
        systems: scenario.default_systems(),
        runs: 1,
        duration: Duration::from_secs(1),
        warmup: Duration::ZERO,
        pkt_size: 64,
        proto: Proto::Udp,
        n_flows: 1,
        connections,
        rate_pps: Some(5_000),
        method: MethodChoice::Live,
        gen_cpu: 0,
        switch_cpu: 1 % std::thread::available_parallelism().map_or(1, |n| n.get()),
        xbr_bin: bin,
        xbr_args: vec![],
        stop: Default::default(),
    };
    let report = scenario::run(&cfg).expect("scenario");
    for r in &report.results {
        let t = r.traffic.as_ref().expect("traffic figures");
        assert!(t.sent >= 4_000 && t.sent <= 5_000, "{r:?}");
        assert!(t.loss < 0.05, "{r:?}");
        let ct = r.conntrack.expect("connections counted");
        assert!(ct.ok(), "{r:?}");
        assert_eq!(r.ct_verified, Some(true), "{r:?}");
    }
    let md = scenario::markdown(&report);
    assert!(
        md.contains("| xbr |") && md.contains("xbr / ovs-afxdp"),
        "{md}"
    );
    assert_no_leak(&before);
    report
}

/// 100 connections cycled: 100 entries in each table after the run.
#[test]
fn conntrack_tracks_every_packet_on_xbr_and_ovs() {
    let report = check_conntrack(Scenario::Conntrack, vec![100]);
    assert_eq!(report.results.len(), 2);
    for r in &report.results {
        assert_eq!(r.connections, Some(100));
        assert_eq!(r.conntrack.map(|c| c.entries), Some(100), "{r:?}");
    }
    assert!(report.ratios.iter().all(|q| q.connections == Some(100)));
}

/// Every frame a new connection: each delivered frame left an entry, so
/// each table holds at least as many connections as frames arrived.
#[test]
fn conntrack_new_creates_a_connection_per_packet_on_xbr_and_ovs() {
    let report = check_conntrack(Scenario::ConntrackNew, vec![]);
    for r in &report.results {
        let ct = r.conntrack.unwrap();
        let t = r.traffic.as_ref().unwrap();
        assert!(ct.entries >= t.received && ct.entries <= t.sent, "{r:?}");
        assert!(ct.entries >= 4_000, "{r:?}");
        let rate = r.conns_per_s.expect("connection rate");
        assert!(rate > 3_000.0, "{r:?}");
    }
    assert!(scenario::markdown(&report).contains("new connections/s"));
}

#[test]
fn p2p_delivers_everything_at_a_low_rate_on_every_switch() {
    check(Scenario::P2p, 1);
}

/// The AF_XDP ceiling: xbr's ports with no pipeline, next to xbr without
/// its XDP cache, which takes the same path with the pipeline.
#[test]
fn afxdp_l2fwd_delivers_everything_at_a_low_rate() {
    let report = run(
        Scenario::P2p,
        1,
        vec![System::XbrNocache, System::AfxdpL2fwd],
    );
    let md = scenario::markdown(&report);
    assert!(md.contains("| afxdp-l2fwd |"), "{md}");
}

/// Decapsulation: xbr's and OVS's flow-based VXLAN port over the uplink,
/// the kernel reference stripping the headers in XDP.
#[test]
fn vxlan_decap_delivers_everything_at_a_low_rate_on_every_switch() {
    check(Scenario::Vxlan, 1);
}

/// Encapsulation: the agent's table 90 flow out of xbr's and OVS's
/// flow-based VXLAN port, the kernel reference pushing the headers in
/// XDP; the sink counts only correctly encapsulated frames.
#[test]
fn encap_delivers_everything_at_a_low_rate_on_every_switch() {
    check(Scenario::Encap, 1);
}

/// The agent's multitenant flows for 100 pods, loaded by one bundle:
/// pod A to pod B of the same namespace through conntrack and the VNID
/// tables.
#[test]
fn pipeline_delivers_everything_at_a_low_rate_on_every_switch() {
    check(Scenario::Pipeline, 1);
}

/// Sets `system` up for `cfg` with its flows passed through `edit`, sends
/// 2000 frames at 5 kpps and returns what the sink counted meanwhile.
fn counts_with_flows(
    cfg: &Config,
    system: System,
    edit: impl Fn(&str) -> String,
) -> bench::bpf::SinkCounters {
    let topo = bench::topo::Topology::new().expect("topology");
    let mut sw = scenario::switch_config(cfg).expect("switch config");
    let edited = edit(&sw.flows);
    assert_ne!(edited, sw.flows, "the edit changed nothing");
    sw.flows = edited;
    let _switch = bench::systems::start(system, &topo, &sw).expect("switch");
    let h = bench::measure::Harness::new(&topo, scenario::traffic_of(cfg).expect("traffic"))
        .expect("harness");
    let before = h.sink_counters().expect("sink");
    let s = h
        .run(&bench::gen::GenBounds {
            duration: Duration::from_secs(2),
            count: Some(2_000),
            rate_pps: Some(5_000),
        })
        .expect("run");
    assert!(s.sent >= 1_900, "{s:?}");
    h.sink_counters().expect("sink").since(&before)
}

/// The new scenarios' verdicts are not vacuous. `pipeline` with pod B
/// moved to another namespace (its table 70 flow loads another VNID):
/// xbr and OVS deliver nothing, so what they deliver in the scenario is
/// what the agent's isolation allows. `encap` with the flow writing VNI
/// 43 instead of 42: the frames reach pod B, and its sink rejects every
/// one, so it counts only correct encapsulations.
#[test]
fn pipeline_isolation_and_encap_checks_refuse_what_they_must() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let before = namespaces();
    let pipe = base_config(Scenario::Pipeline, vec![], 1);
    let isolated = scenario::pipeline::flows(true).expect("flows");
    for system in [System::Xbr, System::OvsAfxdp] {
        let c = counts_with_flows(&pipe, system, |_| isolated.clone());
        assert_eq!((c.packets, c.tagged), (0, 0), "{system:?}: {c:?}");
    }
    let encap = base_config(Scenario::Encap, vec![], 1);
    for system in [System::Xbr, System::XbrNocache, System::OvsAfxdp] {
        let c = counts_with_flows(&encap, system, |f| f.replace("load:42->", "load:43->"));
        assert_eq!(c.tagged, 0, "{system:?}: {c:?}");
        assert!(c.rejected >= 1_900, "{system:?}: {c:?}");
    }
    assert_no_leak(&before);
}

/// 100 flows to 100 destinations, one flow each and no catch-all: only a
/// lookup that tells the destinations apart delivers every frame.
#[test]
fn flows_deliver_everything_at_a_low_rate_on_every_switch() {
    check(Scenario::Flows, 100);
}

fn base_config(scenario: Scenario, systems: Vec<System>, n_flows: u32) -> Config {
    Config {
        scenario,
        systems,
        runs: 1,
        duration: Duration::from_secs(2),
        warmup: Duration::ZERO,
        pkt_size: 64,
        proto: Proto::Udp,
        n_flows,
        connections: vec![],
        rate_pps: Some(5_000),
        method: MethodChoice::Live,
        gen_cpu: 0,
        switch_cpu: 1 % std::thread::available_parallelism().map_or(1, |n| n.get()),
        xbr_bin: xbr_bin(),
        xbr_args: vec![],
        stop: Default::default(),
    }
}

/// 2000 flows by one bundle into xbr and OVS: each load is timed, the
/// switch's memory read, every flow found in the dumps; the JSON record
/// has the load's figures and no packet-rate ones.
#[test]
fn flowmod_loads_and_finds_every_flow_on_xbr_and_ovs() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let before = namespaces();
    let cfg = base_config(
        Scenario::Flowmod,
        Scenario::Flowmod.default_systems(),
        2_000,
    );
    let report = scenario::run(&cfg).expect("scenario");
    assert_eq!(report.results.len(), 2);
    for r in &report.results {
        let f = r.flowmod.as_ref().expect("load figures");
        assert!(r.traffic.is_none(), "{r:?}");
        assert_eq!(f.flows_loaded, 2_000);
        assert!(f.flows_verified, "{r:?}");
        assert!(f.bundle_s > 0.0 && f.flows_per_s > 0.0, "{r:?}");
        assert!(f.rss_before_kib > 1_000 && f.rss_after_kib > 1_000, "{r:?}");
    }
    let json = serde_json::to_value(&report).unwrap();
    let first = &json["results"][0];
    assert!(
        first.get("mpps").is_none() && first.get("flows_per_s").is_some(),
        "{first}"
    );
    assert!(json.get("pkt_size").is_none(), "{json}");
    assert!(report
        .ratios
        .iter()
        .any(|q| q.to == "ovs-afxdp" && q.metric == Some("flows_per_s")));
    let md = scenario::markdown(&report);
    assert!(md.contains("| xbr |") && md.contains("flows/s"), "{md}");
    assert_no_leak(&before);
}

/// Churn at 5 kpps for 2 s over 100 destinations: xbr (cache on and off)
/// delivers every judged frame where the table in force sends it, while
/// the loop moves, deletes and re-adds the moving destinations' flows;
/// the kernel redirect, which ignores flows, is caught. OVS runs the same
/// loop, but its figure is not required to be 0: it is seen delivering
/// by the replaced version after answering the commit (bench/RESULTS.md).
#[test]
fn churn_misdelivers_nothing_on_xbr_and_catches_a_switch_ignoring_flows() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let before = namespaces();
    let cfg = base_config(
        Scenario::Churn,
        vec![
            System::Xbr,
            System::XbrNocache,
            System::OvsAfxdp,
            System::XdpRedirect,
        ],
        100,
    );
    let report = scenario::run(&cfg).expect("scenario");
    for r in &report.results {
        let c = r.churn.as_ref().expect("churn figures");
        let t = r.traffic.as_ref().expect("traffic figures");
        assert!(t.sent >= 8_000, "{r:?}");
        assert!(c.judged > 1_000, "{r:?}");
        if r.system == "xdp-redirect" {
            assert!(c.misdelivered > 100, "{r:?}");
            assert_eq!(c.flow_mods, 0, "{r:?}");
            continue;
        }
        if r.system != "ovs-afxdp" {
            assert_eq!(c.misdelivered, 0, "{r:?}");
        }
        // At least one full cycle: moved, deleted, re-added.
        assert!(c.bundles >= 3 && c.flow_mods == c.bundles * 50, "{r:?}");
    }
    let md = scenario::markdown(&report);
    assert!(md.contains("misdelivered"), "{md}");
    assert_no_leak(&before);
}
