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

const TOOL: &str = env!("CARGO_BIN_EXE_xbr-testtool");

/// With `--xdp-peer-gro off` the pods stay as the CNI plugin made them
/// (no GRO): xbr cannot redirect to them and says so; what goes to them
/// goes through its packet threads (the XDP cache still forwards to tun0,
/// xbr's own veth).
#[test]
fn subnet_single_node_everything_reaches() {
    let lab = Lab::up(&[
        "--mode",
        "subnet",
        "--nodes",
        "1",
        "--legacy",
        "--xdp-peer-gro",
        "off",
    ]);
    let out = lab.check();
    assert!(out.success(), "check:\n{}\n{}", out.stdout, out.stderr);
    let stats = xbr(
        &["stats", "br0", "--rundir", s(&lab.nodes()[0], "rundir")],
        CMD_TIMEOUT,
    );
    assert_eq!(
        stats.stdout.matches("xdp_redirect=auto: not ready").count(),
        // The four pods and vxlan0's uplink.
        5,
        "{}",
        stats.stdout
    );
    // 4 pods: 12 pod pairs + 4 gateway + 4 external + the Service + 1
    // uplink.
    assert!(
        out.stdout
            .contains("22 probes, 22 as expected, 0 mismatched"),
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

/// The agent's pipeline with the XDP flow cache forwarding between local
/// pods: isolation holds on the kernel path too, and the kernel path is
/// really taken, with nothing xbr-specific asked for (no `--xdp-redirect`:
/// the ports are `xdp_redirect=auto` and xbr turns GRO on in the pods).
#[test]
fn multitenant_with_the_xdp_cache_forwarding_still_isolates_vnids() {
    let lab = Lab::up(&["--mode", "multitenant", "--nodes", "1", "--legacy"]);
    let out = lab.check();
    assert!(out.success(), "check:\n{}\n{}", out.stdout, out.stderr);
    // pod1/pod4 default (VNID 0), pod2 ns1, pod3 ns2.
    let by_name = |n: &str| lab.pod(|p| s(p, "name") == n);
    let (d1, a, b, d2) = (
        by_name("node1-pod1"),
        by_name("node1-pod2"),
        by_name("node1-pod3"),
        by_name("node1-pod4"),
    );
    assert_ne!(u(a, "vnid"), u(b, "vnid"));
    // Twice each: the second time the entries the first installed are
    // in place (forwarding for VNID 0, drops for ns1 -> ns2).
    for _ in 0..2 {
        assert!(!ping(s(a, "netns"), s(b, "ip")), "ns1 reached ns2");
        assert!(!ping(s(b, "netns"), s(a, "ip")), "ns2 reached ns1");
        assert!(ping(s(d1, "netns"), s(d2, "ip")), "VNID 0 pods lost");
        assert!(ping(s(a, "netns"), s(d1, "ip")), "ns1 did not reach VNID 0");
    }
    // xbr's own account when it stops: entries installed and used.
    let (counts, _) = stop_and_count(&lab.nodes()[0]);
    let hits = count(&counts, "hit_packets");
    assert!(
        hits >= 4,
        "the XDP cache forwarded {hits} packets: {counts:?}"
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
    // The current (conntrack) agent flows unless --legacy.
    assert_eq!(s(j, "flows"), "conntrack");
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
        // An MTU that leaves pods less than IPv4's 576, or beyond jumbo.
        vec!["lab", "up", "--dir", &d, "--underlay-mtu", "600"],
        vec!["lab", "up", "--dir", &d, "--underlay-mtu", "65000"],
        // The networkpolicy plugin never had a non-conntrack flow set.
        vec![
            "lab",
            "up",
            "--dir",
            &d,
            "--prefix",
            &prefix,
            "--mode",
            "networkpolicy",
            "--legacy",
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
    let lab = Lab::up(&TWO_NODES_MULTITENANT);
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

/// `--ovsdb`: each node's ovsdb-server, xbr as its ovs-vswitchd, br0 and
/// its ports made with the agent's `ovs-vsctl` commands (issue 7), on two
/// packet threads per node (`xbr run --ovsdb --pmd-threads 2`).
#[test]
fn two_nodes_subnet_over_ovsdb_under_the_documented_capabilities_check_passes() {
    let lab = Lab::up(&[
        "--mode",
        "subnet",
        "--nodes",
        "2",
        "--pods-per-node",
        "2",
        "--ovsdb",
        "--pmd-threads",
        "2",
        "--least-privilege",
    ]);
    // Each node's xbr runs with a bounding set of exactly the documented
    // capabilities (docs/operations.md: NET_ADMIN, NET_RAW, IPC_LOCK,
    // PERFMON, BPF, and SYS_ADMIN for xdp-peer-gro), as the unit and the
    // DaemonSet grant them; the whole scenario below runs under it.
    let documented: u64 = [12u32, 13, 14, 38, 39, 21]
        .iter()
        .fold(0, |m, bit| m | 1 << bit);
    for node in lab.nodes() {
        let pid = u(node, "xbr_pid");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let bnd = status
            .lines()
            .find_map(|l| l.strip_prefix("CapBnd:"))
            .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
            .unwrap();
        assert_eq!(bnd, documented, "node {}: CapBnd {bnd:#x}", s(node, "name"));
    }
    let out = lab.check();
    assert!(out.success(), "check:\n{}\n{}", out.stdout, out.stderr);
    // Two packet threads, the ports ovs-vsctl added dealt to both (each
    // to the one serving fewer).
    for node in lab.nodes() {
        let stats = xbr(
            &["stats", "br0", "--rundir", s(node, "rundir")],
            CMD_TIMEOUT,
        );
        let threads: Vec<&str> = stats
            .stdout
            .lines()
            .filter(|l| l.starts_with("  thread "))
            .collect();
        assert_eq!(threads.len(), 2, "{}", stats.stdout);
        assert!(
            threads
                .iter()
                .all(|l| l.contains("ports ") && !l.ends_with("ports ")),
            "{}",
            stats.stdout
        );
    }
    // The database has the agent's configuration, and the numbers xbr
    // gave the pods' ports are the ones lab.json (and the flows) use.
    for pod in lab.pods() {
        let node = lab
            .nodes()
            .iter()
            .find(|n| s(n, "name") == s(pod, "node"))
            .unwrap();
        let db = format!("--db=unix:{}/db.sock", s(node, "rundir"));
        let got = sh(
            "ovs-vsctl",
            &[&db, "get", "Interface", s(pod, "host_if"), "ofport"],
        );
        assert_eq!(
            got.stdout.trim(),
            u(pod, "ofport").to_string(),
            "{}",
            got.stderr
        );
        let sandbox = format!("external_ids:sandbox={}", s(pod, "name"));
        let found = sh(
            "ovs-vsctl",
            &[
                &db,
                "--bare",
                "--columns=name",
                "find",
                "interface",
                &sandbox,
            ],
        );
        assert_eq!(found.stdout.trim(), s(pod, "host_if"));
    }
    let node = &lab.nodes()[0];
    let db = format!("--db=unix:{}/db.sock", s(node, "rundir"));
    let vxlan = sh(
        "ovs-vsctl",
        &[&db, "get", "Interface", "vxlan0", "ofport", "error"],
    );
    assert_eq!(vxlan.stdout, "1\n[]\n", "{}", vxlan.stderr);
    // Configured with the agent's commands only, the nodes still use the
    // XDP flow cache: every pod's port is ready (xbr made it so) and the
    // check's traffic hit the cache.
    for node in lab.nodes() {
        let stats = xbr(
            &["stats", "br0", "--rundir", s(node, "rundir")],
            CMD_TIMEOUT,
        );
        // The pods' ports and vxlan0 (its uplink, whose peer is the
        // underlay bridge's port).
        let ready = stats.stdout.matches("xdp_redirect=auto: ready").count();
        assert!(ready >= 3, "{}", stats.stdout);
        let count = |name: &str| -> u64 {
            stats
                .stdout
                .lines()
                .find_map(|l| l.trim().strip_prefix(&format!("{name}: ")))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        // Local and cross-node traffic alike: encapsulated and
        // decapsulated in the kernel too.
        for name in ["hit_packets", "encap_hit_packets", "decap_hit_packets"] {
            assert!(count(name) > 0, "{name}\n{}", stats.stdout);
        }
    }
    // UDP and TCP from a pod on node 1 to one on node 2: at least 90% of
    // what each node forwarded went through the XDP flow cache (issue 28).
    let a = lab.pods()[0].clone();
    let b = lab
        .pods()
        .iter()
        .find(|p| s(p, "node") != s(&a, "node"))
        .unwrap()
        .clone();
    let dst: std::net::SocketAddrV4 = format!("{}:7101", s(&b, "ip")).parse().unwrap();
    let before = kernel_share_counts(&lab);
    let rx = xbr_tests::UdpReceiver::start(
        Path::new(TOOL),
        s(&b, "netns"),
        format!("0.0.0.0:{}", dst.port()).parse().unwrap(),
        2000,
        Duration::from_secs(20),
    )
    .unwrap();
    xbr_tests::udp_send(Path::new(TOOL), s(&a, "netns"), dst, 2000, 2000).unwrap();
    let got = rx.finish().unwrap();
    assert!(got >= 1990, "{got} of 2000 datagrams across nodes");
    let tcp = sh(
        "sh",
        &[
            "-c",
            &format!(
                "ip netns exec {bns} timeout 20 iperf3 -s -1 -p 7102 >/dev/null 2>&1 & sleep 0.5; \
                 ip netns exec {ans} timeout 20 iperf3 -c {bip} -p 7102 -t 2 -J; wait",
                bns = s(&b, "netns"),
                ans = s(&a, "netns"),
                bip = s(&b, "ip"),
            ),
        ],
    );
    assert!(
        tcp.success(),
        "iperf3 across nodes: {}{}",
        tcp.stdout,
        tcp.stderr
    );
    // The packet threads publish the cache's hits about once a second.
    std::thread::sleep(Duration::from_millis(2500));
    let after = kernel_share_counts(&lab);
    for (i, node) in lab.nodes().iter().enumerate() {
        let hits = after[i].0 - before[i].0;
        let all = after[i].1 - before[i].1;
        assert!(
            all > 2000 && hits * 10 >= all * 9,
            "node {}: the XDP cache forwarded {hits} of {all} packets",
            s(node, "name")
        );
    }
}

/// Per node: (packets the XDP flow cache forwarded, packets received on
/// the bridge's ports by either path), from `xbr stats` (a port's receive
/// counter includes what the cache forwarded from it).
fn kernel_share_counts(lab: &Lab) -> Vec<(u64, u64)> {
    lab.nodes()
        .iter()
        .map(|node| {
            let out = xbr(
                &["stats", "br0", "--rundir", s(node, "rundir")],
                CMD_TIMEOUT,
            )
            .stdout;
            (
                xbr_tests::xbr_stats::xdp_stat(&out, "hit_packets"),
                xbr_tests::xbr_stats::all_rx_packets(&out),
            )
        })
        .collect()
}

/// A one-connection TCP server in namespace `netns` on `ip`:8080 that
/// greets its client; returns once it listens.
fn tcp_server(netns: &str, ip: &str) -> Background {
    let ready = std::env::temp_dir().join(format!("{NAME_PREFIX}-ready-{}", unique_tag()));
    let script = format!(
        "import socket\n\
         s = socket.socket()\n\
         s.bind(('{ip}', 8080))\n\
         s.listen(4)\n\
         open('{ready}', 'w').close()\n\
         s.settimeout(15)\n\
         c, _ = s.accept()\n\
         c.sendall(b'hello from {ip}\\n')\n\
         c.recv(100)\n",
        ready = ready.display()
    );
    let server = Background::spawn(
        Command::new("ip").args(["netns", "exec", netns, "python3", "-c", &script]),
    )
    .expect("python3 TCP server");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ready.exists() {
        assert!(Instant::now() < deadline, "TCP server never listened");
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = std::fs::remove_file(&ready);
    server
}

/// Connects from `netns` to `ip`:8080 and reads the greeting; `None` when
/// no connection is made within 3 s.
fn tcp_greeting(netns: &str, ip: &str) -> Option<String> {
    let script = format!(
        "exec 3<>/dev/tcp/{ip}/8080 && read -t 3 line <&3 && echo \"$line\" && echo bye >&3"
    );
    let out = sh(
        "ip",
        &[
            "netns", "exec", netns, "timeout", "3", "bash", "-c", &script,
        ],
    );
    out.success().then(|| out.stdout.trim().to_string())
}

#[test]
fn networkpolicy_conntrack_lab_reaches_and_tracks_connections() {
    let lab = Lab::up(&[
        "--mode",
        "networkpolicy",
        "--nodes",
        "2",
        "--pods-per-node",
        "3",
    ]);
    assert_eq!(s(&lab.json, "flows"), "conntrack");
    let out = lab.check();
    assert!(out.success(), "check:\n{}\n{}", out.stdout, out.stderr);
    // 6 pods: 30 pod pairs + 6 gateway + 6 external; the Service from a
    // client on each node; 2 nodes: 4 uplink.
    assert!(
        out.stdout
            .contains("48 probes, 48 as expected, 0 mismatched"),
        "{}",
        out.stdout
    );
    // ns1 -> the isolated ns2 is denied, on each node and across; the
    // other way round (and its replies) passes.
    let denied = out
        .stdout
        .lines()
        .filter(|l| l.contains("isolated  isolated  ok"))
        .count();
    assert_eq!(denied, 4, "{}", out.stdout);
    let pod = |name: &str| {
        lab.json["pods"]
            .as_array()
            .expect("pods")
            .iter()
            .find(|p| s(p, "name") == name)
            .unwrap_or_else(|| panic!("no pod {name}"))
            .clone()
    };
    let (ns1_a, ns2_b) = (pod("node1-pod2"), pod("node2-pod3"));
    assert_eq!(s(&ns2_b, "namespace"), "ns2");
    // TCP: into the isolated namespace only from its own namespace (or
    // VNID 0); out of it to anyone, the replies passing.
    let server = tcp_server(s(&ns2_b, "netns"), s(&ns2_b, "ip"));
    assert_eq!(tcp_greeting(s(&ns1_a, "netns"), s(&ns2_b, "ip")), None);
    let same_ns = pod("node1-pod3");
    assert_eq!(
        tcp_greeting(s(&same_ns, "netns"), s(&ns2_b, "ip")).as_deref(),
        Some(format!("hello from {}", s(&ns2_b, "ip")).as_str())
    );
    let _ = server.wait(Duration::from_secs(5));
    let server = tcp_server(s(&ns1_a, "netns"), s(&ns1_a, "ip"));
    assert_eq!(
        tcp_greeting(s(&ns2_b, "netns"), s(&ns1_a, "ip")).as_deref(),
        Some(format!("hello from {}", s(&ns1_a, "ip")).as_str())
    );
    let _ = server.wait(Duration::from_secs(5));

    let node = &lab.nodes()[0];
    let rundir = s(node, "rundir");
    // Every untracked IP packet went through conntrack, pod-network
    // connections were committed in table 30, and replies to local pods
    // took table 31's ct(nat,table=70).
    let all = ofctl(rundir, &["dump-flows", "br0"]);
    for tokens in [
        &["priority=1000", "actions=ct(table=0)"][..],
        &["table=30", "actions=ct(commit,table=31)"][..],
        &["table=31", "priority=250", "ct(table=70,nat)"][..],
    ] {
        assert!(n_packets(&all, tokens) >= 6, "{tokens:?}:\n{all}");
    }
    let dump = xbr(
        &["conntrack", "dump", "br0", "--rundir", rundir],
        CMD_TIMEOUT,
    );
    assert!(dump.success(), "{}", dump.stderr);
    let tcp = format!(
        "tcp,orig=(src={},dst={},sport=",
        s(&same_ns, "ip"),
        s(&ns2_b, "ip")
    );
    assert!(
        dump.stdout.lines().any(|l| l.starts_with(&tcp)),
        "no {tcp}... in:\n{}",
        dump.stdout
    );
    let stats = xbr(
        &["conntrack", "stats", "br0", "--rundir", rundir],
        CMD_TIMEOUT,
    );
    assert!(
        stats.stdout.contains("\ntable_full: 0\n"),
        "{}",
        stats.stdout
    );
}

/// The lab's Service: a client pod connects to the ClusterIP over TCP;
/// the nodes' iptables DNAT it to a backend on the same node and on the
/// other in turn, and each backend's answer comes back from the ClusterIP
/// (the TCP connection could not be made otherwise): xbr learned the
/// host's DNAT and undid it in table 31's ct(nat).
#[test]
fn service_answers_from_backends_on_both_nodes_via_the_cluster_ip() {
    let lab = Lab::up(&[
        "--mode",
        "multitenant",
        "--nodes",
        "2",
        "--pods-per-node",
        "2",
    ]);
    let svc = &lab.json["services"][0];
    let ip = s(svc, "ip");
    assert!(ip.starts_with("172.30."), "{svc}");
    let port = svc["port"].as_u64().expect("port");
    let backends: Vec<&str> = svc["backends"]
        .as_array()
        .expect("backends")
        .iter()
        .map(|b| b.as_str().expect("a pod name"))
        .collect();
    let backend_nodes: std::collections::BTreeSet<&str> = backends
        .iter()
        .map(|b| s(lab.pod(|p| s(p, "name") == *b), "node"))
        .collect();
    assert_eq!(backend_nodes.len(), 2, "a backend on each node: {svc}");
    let client = lab.pod(|p| !backends.contains(&s(p, "name")) && s(p, "node") == "node1");
    let dst = format!("{ip}:{port}");
    let exe = Xbr::binary().expect("xbr binary");
    let mut answers = Vec::new();
    for _ in 0..4 {
        let out = sh(
            "ip",
            &[
                "netns",
                "exec",
                s(client, "netns"),
                &exe.display().to_string(),
                "lab",
                "fetch",
                "--dst",
                &dst,
            ],
        );
        assert!(out.success(), "fetch {dst}: {}", out.stderr);
        answers.push(out.stdout.trim().to_string());
    }
    for b in &backends {
        assert!(
            answers.iter().any(|a| a == b),
            "{b} never answered: {answers:?}"
        );
    }
    let rundir = s(&lab.nodes()[0], "rundir");
    let stats = xbr(
        &["conntrack", "stats", "br0", "--rundir", rundir],
        CMD_TIMEOUT,
    );
    let learned: u64 = stats
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("learned_from_host: "))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no learned_from_host in {}", stats.stdout));
    assert!(learned >= 4, "{}", stats.stdout);
}

/// A networkpolicy lab (the agent's conntrack flows, policies, the
/// Service) with two packet threads per node and the XDP cache
/// forwarding: each node's ports are split over the threads (vxlan0 and
/// the first and third pods on one, tun0 and the others on the other),
/// so pod to pod, pod to gateway, Service and cross-node traffic is
/// handed between threads, and `check` must still pass every pair.
#[test]
fn two_packet_threads_per_node_pass_the_networkpolicy_check() {
    let lab = Lab::up(&[
        "--mode",
        "networkpolicy",
        "--pmd-threads",
        "2",
        "--xdp-redirect",
    ]);
    for node in lab.nodes() {
        let rundir = s(node, "rundir");
        let stats = xbr(&["stats", "br0", "--rundir", rundir], CMD_TIMEOUT);
        assert!(
            stats.stdout.contains(
                "packet threads: 2\n  thread 0: ports 1, 3, 5\n  thread 1: ports 2, 4, 6\n"
            ),
            "{}",
            stats.stdout
        );
    }
    let out = lab.check();
    assert!(out.success(), "check:\n{}\n{}", out.stdout, out.stderr);
}
