//! The `xbr lab` driver shared by the lab test crates (lab.rs, vxlan.rs,
//! xdp_cache_vxlan.rs, lab_jumbo.rs): a lab built with `xbr lab up` and removed with
//! `xbr lab down` on drop, small probes (ping, ovs-ofctl counters) and
//! pod traffic (`traffic`). Each crate uses a subset, hence the dead-code
//! allowance.
#![allow(dead_code)]

mod traffic;
// lab.rs uses none of it.
#[allow(unused_imports)]
pub use traffic::*;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use xbr_tests::{
    require_root, run_timeout, strip_ansi, unique_tag, xdp_cache_counts, CmdOutput, Xbr,
    NAME_PREFIX,
};

/// Two nodes of three pods each, the pods spread over three namespaces in
/// multitenant mode: pod2 of each node in ns1, pod3 in ns2.
pub const TWO_NODES_MULTITENANT: [&str; 8] = [
    "--mode",
    "multitenant",
    "--nodes",
    "2",
    "--pods-per-node",
    "3",
    "--namespaces",
    "3",
];

/// `up` starts one xbr per node; generous for a small shared machine.
pub const UP_TIMEOUT: Duration = Duration::from_secs(120);
/// The matrix pings in parallel batches, 3 s per batch at most.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(300);
pub const DOWN_TIMEOUT: Duration = Duration::from_secs(60);
pub const CMD_TIMEOUT: Duration = Duration::from_secs(10);

pub fn xbr(args: &[&str], timeout: Duration) -> CmdOutput {
    let bin = Xbr::binary().expect("xbr binary (cargo build -p xbr-daemon --bin xbr)");
    run_timeout(Command::new(bin).args(args), timeout).expect("running xbr")
}

pub fn sh(program: &str, args: &[&str]) -> CmdOutput {
    run_timeout(Command::new(program).args(args), CMD_TIMEOUT).expect("running a tool")
}

/// A lab built by `xbr lab up`; `xbr lab down` on drop.
pub struct Lab {
    pub dir: PathBuf,
    pub prefix: String,
    pub json: Value,
}

impl Lab {
    pub fn up(extra: &[&str]) -> Lab {
        require_root().expect("the lab tests need root");
        let tag = unique_tag();
        let prefix = format!("{NAME_PREFIX}-lab-{tag}");
        let dir = std::env::temp_dir().join(&prefix);
        let dir_s = dir.display().to_string();
        let mut args = vec!["lab", "up", "--dir", &dir_s, "--prefix", &prefix];
        args.extend_from_slice(extra);
        let out = xbr(&args, UP_TIMEOUT);
        let mut lab = Lab {
            dir,
            prefix,
            json: Value::Null,
        };
        assert!(
            out.success(),
            "xbr lab up {}:\n{}\n{}",
            out.describe_status(),
            out.stdout,
            out.stderr
        );
        assert!(out.stdout.trim_end().ends_with(&dir_s), "{}", out.stdout);
        let text = std::fs::read_to_string(lab.dir.join("lab.json")).expect("lab.json");
        lab.json = serde_json::from_str(&text).expect("lab.json is JSON");
        lab
    }

    pub fn dir_arg(&self) -> String {
        self.dir.display().to_string()
    }

    pub fn check(&self) -> CmdOutput {
        xbr(&["lab", "check", "--dir", &self.dir_arg()], CHECK_TIMEOUT)
    }

    pub fn pods(&self) -> &Vec<Value> {
        self.json["pods"].as_array().expect("pods")
    }

    pub fn nodes(&self) -> &Vec<Value> {
        self.json["nodes"].as_array().expect("nodes")
    }

    pub fn pod(&self, pred: impl Fn(&Value) -> bool) -> &Value {
        self.pods()
            .iter()
            .find(|p| pred(p))
            .expect("a pod like that")
    }

    pub fn namespaces_left(&self) -> Vec<String> {
        let out = sh("ip", &["netns", "list"]);
        out.stdout
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .filter(|n| n.starts_with(&format!("{}-", self.prefix)))
            .map(str::to_string)
            .collect()
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let out = xbr(
            &[
                "lab",
                "down",
                "--dir",
                &self.dir_arg(),
                "--prefix",
                &self.prefix,
            ],
            DOWN_TIMEOUT,
        );
        if !out.success() {
            eprintln!("warning: xbr lab down: {}\n{}", out.stdout, out.stderr);
        }
    }
}

pub fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("{key} is not a string in {v}"))
}

pub fn u(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} is not a number in {v}"))
}

/// At least one of 3 echo requests answered within 3 s.
pub fn ping(netns: &str, ip: &str) -> bool {
    let out = sh(
        "ip",
        &[
            "netns", "exec", netns, "ping", "-n", "-q", "-c", "3", "-i", "0.2", "-w", "3", ip,
        ],
    );
    out.stdout
        .lines()
        .find(|l| l.contains("transmitted"))
        .and_then(|l| l.split(", ").nth(1))
        .and_then(|w| w.split_whitespace().next())
        .and_then(|n| n.parse::<u32>().ok())
        .is_some_and(|n| n > 0)
}

pub fn ofctl(rundir: &str, args: &[&str]) -> String {
    let mut full = vec!["-O", "OpenFlow13", "--timeout=10"];
    full.extend_from_slice(args);
    let out = run_timeout(
        Command::new("ovs-ofctl")
            .args(&full)
            .env("OVS_RUNDIR", rundir),
        CMD_TIMEOUT,
    )
    .expect("ovs-ofctl");
    assert!(out.success(), "ovs-ofctl {full:?}: {}", out.stderr);
    out.stdout
}

/// n_packets of the flow in `dump` whose text contains all of `parts`.
pub fn n_packets(dump: &str, parts: &[&str]) -> u64 {
    let line = dump
        .lines()
        .find(|l| parts.iter().all(|p| l.contains(p)))
        .unwrap_or_else(|| panic!("no flow with {parts:?} in\n{dump}"));
    line.split("n_packets=")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no n_packets in {line}"))
}

/// Stops the node's xbr and returns its XDP flow cache counters, from the
/// line it logs when it stops, and its whole log.
pub fn stop_and_count(node: &Value) -> (Vec<(String, u64)>, String) {
    let pid = u(node, "xbr_pid").to_string();
    assert!(sh("kill", &[&pid]).success());
    let log_path = Path::new(s(node, "rundir")).join("xbr.log");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        if let Some(c) = xdp_cache_counts(&log) {
            return (c, strip_ansi(&log));
        }
        assert!(
            Instant::now() < deadline,
            "no XDP flow cache line in\n{}",
            strip_ansi(&log)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The counter `name` of an XDP flow cache line's counters.
pub fn count(counts: &[(String, u64)], name: &str) -> u64 {
    counts
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| *v)
        .unwrap_or_else(|| panic!("no {name} in {counts:?}"))
}
