//! `xbr lab up|check|down` (issue 4): an OpenShift SDN cluster in network
//! namespaces with one xbr per node, programmed with the agent's
//! (pre-4.13, non-conntrack) flows through the real `ovs-ofctl`.
//!
//! Needs root and a built `xbr` (`./scripts/test` does both). Every lab is
//! named `xbrt-lab-<tag>` (namespaces) with its directory under
//! /tmp/xbrt-lab-<tag>, so `scripts/clean` also removes what a killed run
//! left; the guard runs `xbr lab down` even when a test fails.
//!
//! The two-node tests cross the underlay through the `vxlan` port type;
//! more of its behaviour is tested in vxlan.rs.

mod lab_common;

use lab_common::*;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use xbr_tests::{require_root, run_timeout, unique_tag, Background, Xbr, NAME_PREFIX};

#[test]
fn subnet_single_node_everything_reaches() {
    let lab = Lab::up(&["--mode", "subnet", "--nodes", "1"]);
    let out = lab.check();
    assert!(out.success(), "check:\n{}\n{}", out.stdout, out.stderr);
    // 4 pods: 12 pod pairs + 4 gateway + 4 external + 1 uplink.
    assert!(
        out.stdout
            .contains("21 probes, 21 as expected, 0 mismatched"),
        "{}",
        out.stdout
    );
    // The external host was reached through the node's MASQUERADE.
    let node = &lab.nodes()[0];
    let nat = sh(
        "ip",
        &[
            "netns",
            "exec",
            s(node, "netns"),
            "iptables",
            "-t",
            "nat",
            "-L",
            "OPENSHIFT-MASQUERADE",
            "-v",
            "-n",
            "-x",
        ],
    );
    let masq = nat
        .stdout
        .lines()
        .find(|l| l.contains("MASQUERADE") && l.contains("10.128.0.0/14"))
        .unwrap_or_else(|| panic!("no MASQUERADE rule:\n{}", nat.stdout));
    let pkts: u64 = masq.split_whitespace().next().unwrap().parse().unwrap();
    assert!(
        pkts >= 4,
        "MASQUERADE matched {pkts} packets:\n{}",
        nat.stdout
    );
    // The pods' traffic to the outside left through table 101 to tun0.
    let dump = ofctl(s(node, "rundir"), &["dump-flows", "br0", "table=101"]);
    assert!(n_packets(&dump, &["priority=0", "output:2"]) >= 4, "{dump}");
    // No conntrack action anywhere: the legacy set is installed.
    let all = ofctl(s(node, "rundir"), &["dump-flows", "br0"]);
    assert!(!all.contains("ct("), "{all}");
    assert!(all.contains("note:00.0d"), "{all}");
}

#[test]
fn multitenant_single_node_isolates_vnids() {
    let lab = Lab::up(&[
        "--mode",
        "multitenant",
        "--nodes",
        "1",
        "--pods-per-node",
        "6",
        "--namespaces",
        "3",
    ]);
    let out = lab.check();
    assert!(out.success(), "check:\n{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("isolated  isolated  ok"),
        "{}",
        out.stdout
    );

    // The same facts, probed directly: pod1/pod4 default (VNID 0),
    // pod2/pod5 ns1, pod3/pod6 ns2.
    let by_name = |n: &str| lab.pod(|p| s(p, "name") == n);
    let (d, a1, b1, a2) = (
        by_name("node1-pod1"),
        by_name("node1-pod2"),
        by_name("node1-pod5"),
        by_name("node1-pod3"),
    );
    assert_eq!(u(d, "vnid"), 0);
    assert_ne!(u(a1, "vnid"), 0);
    assert_eq!(u(a1, "vnid"), u(b1, "vnid"));
    assert_ne!(u(a1, "vnid"), u(a2, "vnid"));
    let node = &lab.nodes()[0];
    let rundir = s(node, "rundir");
    let drops_before = n_packets(
        &ofctl(rundir, &["dump-flows", "br0", "table=80"]),
        &["priority=0 "],
    );
    assert!(!ping(s(a1, "netns"), s(a2, "ip")), "ns1 reached ns2");
    assert!(ping(s(a1, "netns"), s(b1, "ip")), "ns1 did not reach ns1");
    assert!(ping(s(d, "netns"), s(a2, "ip")), "VNID 0 did not reach ns2");
    assert!(ping(s(a2, "netns"), s(d, "ip")), "ns2 did not reach VNID 0");
    // The isolated echo requests were dropped, and counted, by table 80.
    let drops = n_packets(
        &ofctl(rundir, &["dump-flows", "br0", "table=80"]),
        &["priority=0 "],
    );
    assert!(
        drops >= drops_before + 3,
        "table 80 drops {drops_before} -> {drops}"
    );
}

#[test]
fn lab_json_schema() {
    let lab = Lab::up(&[
        "--mode",
        "multitenant",
        "--nodes",
        "1",
        "--pods-per-node",
        "3",
    ]);
    let j = &lab.json;
    assert_eq!(s(j, "mode"), "multitenant");
    assert_eq!(s(j, "flows"), "legacy-nonconntrack");
    assert_eq!(s(j, "prefix"), lab.prefix);
    let nodes = lab.nodes();
    assert_eq!(nodes.len(), 1);
    let n = &nodes[0];
    assert_eq!(s(n, "name"), "node1");
    assert_eq!(s(n, "netns"), format!("{}-n1", lab.prefix));
    assert_eq!(s(n, "uplink_ip"), "10.0.0.11");
    assert_eq!(s(n, "subnet"), "10.128.0.0/23");
    let pid = u(n, "xbr_pid");
    assert!(
        Path::new(&format!("/proc/{pid}")).exists(),
        "xbr {pid} not running"
    );
    let rundir = s(n, "rundir");
    assert!(Path::new(rundir).starts_with(&lab.dir));
    assert!(Path::new(rundir).join("br0.mgmt").exists());
    let pods = lab.pods();
    assert_eq!(pods.len(), 3);
    for (j, p) in pods.iter().enumerate() {
        for key in ["name", "netns", "ip", "mac", "node", "namespace"] {
            assert!(p[key].is_string(), "{key} in {p}");
        }
        let ip: Ipv4Addr = s(p, "ip").parse().unwrap();
        let o = ip.octets();
        assert_eq!(
            s(p, "mac"),
            format!("0a:58:{:02x}:{:02x}:{:02x}:{:02x}", o[0], o[1], o[2], o[3])
        );
        assert_eq!(ip, Ipv4Addr::new(10, 128, 0, 2 + j as u8));
        assert_eq!(u(p, "ofport"), 3 + j as u64);
        assert_eq!(s(p, "node"), "node1");
        assert!(u(p, "vnid") < 1 << 24);
        // The namespace exists and holds the address.
        let addr = sh(
            "ip",
            &["-n", s(p, "netns"), "-o", "addr", "show", "dev", "eth0"],
        );
        assert!(addr.stdout.contains(&format!("{ip}/23")), "{}", addr.stdout);
    }
    assert_eq!(
        u(&pods[0], "vnid"),
        0,
        "the first pod is in namespace default"
    );
    let ext = &j["external"];
    assert_eq!(s(ext, "netns"), format!("{}-ext", lab.prefix));
    assert_eq!(s(ext, "ip"), "10.0.0.2");
}

fn xbr_procs_in(dir: &Path) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        if let Ok(raw) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&raw).replace('\0', " ");
            if cmd.contains(" run ") && cmd.contains(&dir.display().to_string()) {
                out.push(pid);
            }
        }
    }
    out
}

#[test]
fn down_leaves_nothing_behind_and_is_idempotent() {
    let lab = Lab::up(&["--mode", "subnet", "--nodes", "2", "--pods-per-node", "2"]);
    assert_eq!(
        lab.namespaces_left().len(),
        2 + 2 + 4,
        "{:?}",
        lab.namespaces_left()
    );
    assert_eq!(xbr_procs_in(&lab.dir).len(), 2);
    let out = xbr(&["lab", "down", "--dir", &lab.dir_arg()], DOWN_TIMEOUT);
    assert!(out.success(), "{}\n{}", out.stdout, out.stderr);
    assert!(
        lab.namespaces_left().is_empty(),
        "{:?}",
        lab.namespaces_left()
    );
    assert!(xbr_procs_in(&lab.dir).is_empty());
    assert!(!lab.dir.exists());
    // Nothing of the lab in the caller's namespace either.
    let links = sh("ip", &["-o", "link", "show"]);
    assert!(!links.stdout.contains(&lab.prefix), "{}", links.stdout);
    // Again: nothing to do, still success.
    let out = xbr(&["lab", "down", "--dir", &lab.dir_arg()], DOWN_TIMEOUT);
    assert!(out.success(), "{}\n{}", out.stdout, out.stderr);
}

#[test]
fn killed_xbr_leaves_no_xdp_and_down_cleans_up() {
    let lab = Lab::up(&["--mode", "subnet", "--nodes", "1", "--pods-per-node", "2"]);
    let node = &lab.nodes()[0];
    let ns = s(node, "netns");
    let host_if = s(&lab.pods()[0], "host_if");
    let show = sh("ip", &["-n", ns, "link", "show", "dev", host_if]);
    assert!(
        show.stdout.contains("prog/xdp"),
        "no XDP while running: {}",
        show.stdout
    );
    let uplink = sh("ip", &["-n", ns, "link", "show", "dev", "eth0"]);
    assert!(
        uplink.stdout.contains("prog/xdp"),
        "no XDP on the vxlan0 uplink while running: {}",
        uplink.stdout
    );
    let pid = u(node, "xbr_pid");
    assert!(sh("kill", &["-KILL", &pid.to_string()]).success());
    let deadline = Instant::now() + Duration::from_secs(10);
    while Path::new(&format!("/proc/{pid}/cmdline")).exists()
        && std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| !c.is_empty())
    {
        assert!(Instant::now() < deadline, "xbr {pid} survived SIGKILL");
        std::thread::sleep(Duration::from_millis(20));
    }
    // bpf_links die with their process: no program left on any port.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let links = sh("ip", &["-n", ns, "link", "show"]);
        if !links.stdout.contains("xdp") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "XDP left after SIGKILL:\n{}",
            links.stdout
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = lab.check();
    assert_eq!(out.code(), Some(1), "{}", out.stdout);
    assert!(
        out.stdout.contains("xbr of node1 is not running"),
        "{}",
        out.stdout
    );
    let out = xbr(&["lab", "down", "--dir", &lab.dir_arg()], DOWN_TIMEOUT);
    assert!(out.success(), "{}\n{}", out.stdout, out.stderr);
    assert!(lab.namespaces_left().is_empty());
    assert!(!lab.dir.exists());
}

#[test]
fn bad_options_exit_2_and_leave_nothing() {
    require_root().expect("the lab tests need root");
    let tag = unique_tag();
    let prefix = format!("{NAME_PREFIX}-lab-{tag}");
    let dir = std::env::temp_dir().join(&prefix);
    let d = dir.display().to_string();
    for args in [
        vec![
            "lab", "up", "--dir", &d, "--prefix", &prefix, "--nodes", "0",
        ],
        vec![
            "lab", "up", "--dir", &d, "--prefix", &prefix, "--mode", "flat",
        ],
        vec!["lab", "up", "--dir", &d, "--prefix", "Bad_Prefix"],
        // Needs conntrack, which xbr does not have yet.
        vec![
            "lab",
            "up",
            "--dir",
            &d,
            "--prefix",
            &prefix,
            "--mode",
            "networkpolicy",
        ],
    ] {
        let out = xbr(&args, UP_TIMEOUT);
        assert_eq!(out.code(), Some(2), "{args:?}: {}", out.stderr);
        assert!(
            out.stderr.contains("xbr lab:") || out.stderr.contains("error"),
            "{}",
            out.stderr
        );
    }
    assert!(!dir.exists());
    let out = xbr(&["lab", "check", "--dir", &d], CHECK_TIMEOUT);
    assert_eq!(out.code(), Some(2), "{}", out.stderr);
}

fn which(tool: &str) -> PathBuf {
    std::env::split_paths(&std::env::var_os("PATH").expect("PATH"))
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{tool} not in PATH"))
}

#[test]
fn failed_up_removes_what_it_built() {
    require_root().expect("the lab tests need root");
    // A PATH without iptables: `up` fails at the first node's MASQUERADE,
    // after the underlay, the external host and the node namespace exist.
    let tag = unique_tag();
    let prefix = format!("{NAME_PREFIX}-lab-{tag}");
    let dir = std::env::temp_dir().join(&prefix);
    let bin = std::env::temp_dir().join(format!("{prefix}-bin"));
    std::fs::create_dir(&bin).unwrap();
    for tool in ["ip", "sysctl", "ethtool", "ovs-ofctl", "ping"] {
        std::os::unix::fs::symlink(which(tool), bin.join(tool)).unwrap();
    }
    let xbr_bin = Xbr::binary().unwrap();
    let d = dir.display().to_string();
    let out = run_timeout(
        Command::new(xbr_bin)
            .args([
                "lab", "up", "--nodes", "1", "--dir", &d, "--prefix", &prefix,
            ])
            .env("PATH", &bin),
        UP_TIMEOUT,
    )
    .unwrap();
    std::fs::remove_dir_all(&bin).unwrap();
    let left: Vec<String> = sh("ip", &["netns", "list"])
        .stdout
        .lines()
        .filter(|l| l.starts_with(&format!("{prefix}-")))
        .map(str::to_string)
        .collect();
    // Clean up for real before asserting, in case the lab's cleanup failed.
    xbr(
        &["lab", "down", "--dir", &d, "--prefix", &prefix],
        DOWN_TIMEOUT,
    );
    assert_eq!(out.code(), Some(1), "{}\n{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("iptables"), "{}", out.stderr);
    assert!(
        out.stderr.contains("removing what was built"),
        "{}",
        out.stderr
    );
    assert!(left.is_empty(), "left behind: {left:?}");
    assert!(!dir.exists());
}

/// The VNI of the first VXLAN packet tcpdump printed (`vni N`).
fn vni_in(tcpdump: &str) -> Option<u64> {
    tcpdump
        .split("vni ")
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
}

#[test]
fn two_nodes_multitenant_across_the_underlay() {
    let lab = Lab::up(&[
        "--mode",
        "multitenant",
        "--nodes",
        "2",
        "--pods-per-node",
        "3",
        "--namespaces",
        "3",
    ]);
    assert!(
        lab.json["vxlan"].as_bool() == Some(true),
        "this xbr has no vxlan port type: vxlan0 is a placeholder and nothing crosses nodes"
    );
    // pod2 of each node is in ns1, pod3 in ns2.
    let a = lab.pod(|p| s(p, "name") == "node1-pod2");
    let b = lab.pod(|p| s(p, "name") == "node2-pod2");
    let c = lab.pod(|p| s(p, "name") == "node2-pod3");
    let vnid = u(a, "vnid");
    assert_ne!(vnid, 0);
    let ul = s(&lab.json["underlay"], "netns");
    let capture = Background::spawn(Command::new("ip").args([
        "netns", "exec", ul, "tcpdump", "-nn", "-v", "-l", "-c", "2", "-i", "node1", "udp", "dst",
        "port", "4789",
    ]))
    .expect("tcpdump");
    // tcpdump is listening once it says so; bounded.
    std::thread::sleep(Duration::from_secs(1));
    assert!(ping(s(a, "netns"), s(b, "ip")), "same VNID across nodes");
    let out = capture.wait(Duration::from_secs(10));
    assert_eq!(
        vni_in(&out.stdout),
        Some(vnid),
        "capture:\n{}\n{}",
        out.stdout,
        out.stderr
    );
    assert!(
        !ping(s(a, "netns"), s(c, "ip")),
        "ns1 reached ns2 across nodes"
    );
    let out = lab.check();
    assert!(out.success(), "check:\n{}\n{}", out.stdout, out.stderr);
}

#[test]
fn two_nodes_subnet_check_passes() {
    let lab = Lab::up(&["--mode", "subnet", "--nodes", "2", "--pods-per-node", "2"]);
    let out = lab.check();
    assert!(out.success(), "check:\n{}\n{}", out.stdout, out.stderr);
}
