//! `xbr-bench`'s scenarios end to end at a low, paced rate (root):
//! every switch is set up in its own namespaces, forwards the generator's
//! frames to the sink, and loses (next to) none of them; everything it made is gone
//! afterwards. A smoke test of the plumbing, not of speed.
//!
//! The xbr binary is `$XBR_BIN`, else `<target>/<profile>/xbr`
//! (`cargo build -p dataplane --bin xbr` first; scripts/test does).

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
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let bin = xbr_bin();
    assert!(
        bin.is_file(),
        "{} missing: cargo build -p dataplane --bin xbr",
        bin.display()
    );
    let before = namespaces();
    let cfg = Config {
        scenario,
        systems: vec![System::XdpRedirect, System::Xbr, System::OvsAfxdp],
        runs: 1,
        duration: Duration::from_secs(1),
        warmup: Duration::ZERO,
        pkt_size: scenario.default_pkt_size(),
        proto: Proto::Udp,
        n_flows,
        rate_pps: Some(5_000),
        method: MethodChoice::Live,
        gen_cpu: 0,
        switch_cpu: 1 % std::thread::available_parallelism().map_or(1, |n| n.get()),
        xbr_bin: bin,
        xbr_args: vec![],
        stop: Default::default(),
    };
    let report = scenario::run(&cfg).expect("scenario");
    assert_eq!(report.results.len(), 3);
    for r in &report.results {
        assert!(r.sent >= 4_000 && r.sent <= 5_000, "{r:?}");
        assert!(r.received <= r.sent, "{r:?}");
        if r.system == "xdp-redirect" {
            assert_eq!(r.received, r.sent, "{r:?}");
        } else {
            // The switches under test run unoptimised builds (xbr) on a
            // shared machine: a few frames may miss a starved poll loop.
            assert!(r.loss < 0.05, "{r:?}");
        }
        assert!(r.p50_us.is_some() && r.p99_us.is_some(), "{r:?}");
    }
    assert!(report.ratios.iter().any(|q| q.to == "ovs-afxdp"));
    let md = scenario::markdown(&report);
    assert!(
        md.contains("| xbr |") && md.contains("xbr / ovs-afxdp"),
        "{md}"
    );
    // Topology names are xbrt-<tag>-h|a|b, the tag starting with 3
    // characters of this process's pid.
    let mine = format!("xbrt-{}", &bench::ovs::unique_tag()[..3]);
    let leaked: Vec<String> = namespaces()
        .into_iter()
        .filter(|n| n.starts_with(&mine) && !before.contains(n))
        .collect();
    assert!(leaked.is_empty(), "namespaces left behind: {leaked:?}");
}

#[test]
fn p2p_delivers_everything_at_a_low_rate_on_every_switch() {
    check(Scenario::P2p, 1);
}

/// Decapsulation: xbr's and OVS's flow-based VXLAN port over the uplink,
/// the kernel reference stripping the headers in XDP.
#[test]
fn vxlan_decap_delivers_everything_at_a_low_rate_on_every_switch() {
    check(Scenario::Vxlan, 1);
}

/// 100 flows to 100 destinations, one flow each and no catch-all: only a
/// lookup that tells the destinations apart delivers every frame.
#[test]
fn flows_deliver_everything_at_a_low_rate_on_every_switch() {
    check(Scenario::Flows, 100);
}
