//! The hostile-pod soak, short (issue 32; the long run is
//! `hostilebench`, see docs/fair-sharing.md): a one-node `xbr lab` in
//! multitenant mode, programmed with the agent's flows, where a pod of
//! tenant A sends `bench::hostile`'s crafted frames (spoofed source IPs
//! and MACs, VXLAN to 4789, fragment floods, VLAN and double tags, IP
//! options, bad checksums and lengths, TTL 0 and 1, ARP claiming another
//! pod's and the gateway's address, broadcast and multicast storms) with
//! a raw socket, while two pods of tenant B exchange UDP.
//!
//! Checked:
//! - no attack frame reaches tenant B's pods (captures there hold none of
//!   the attack's markers), and no frame with a spoofed source reaches the
//!   node's stack (a capture on tun0, rp_filter off), nor any with the
//!   pod's own source but its limited broadcasts (which the agent's flows
//!   send to tun0). tcpdump may lose frames of the broadcast storm on
//!   tun0; B's captures carry little and lose none (B's own datagrams are
//!   all there);
//! - tenant B keeps its rate, the 90%: at a fixed offered load
//!   (10,000 datagrams a second for 2 s, far below what either switch
//!   carries), at least 90% of what B offers is delivered without the
//!   attack and under it, and under it at least 90% of what was delivered
//!   without (measured: all of them);
//! - xbr's memory (VmRSS) stays within 256 MiB over its start through
//!   both rounds (about 130 MiB measured after the first: caches and
//!   tables filling), and the second identical round adds no
//!   connections beyond what the first left, so it is bounded, not
//!   leaking; xbr still runs with no panic in its log;
//! - the attack's distinct flows are mostly not installed in the XDP
//!   cache (its port went past its budget of first-frame installs; they
//!   are `deferred` in `xbr stats`): more deferred than installed.
//!
//! Needs root, tcpdump and a built `xbr`. About 25 s.

mod lab_common;

use lab_common::*;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use xbr_tests::{require_tool, Background};

const TOOL: &str = env!("CARGO_BIN_EXE_xbr-testtool");
/// B's fixed offered rate (datagrams a second) and datagrams per
/// measurement (2 s of it).
const FIXED_RATE: u64 = 10_000;
const LEGIT: u64 = 2 * FIXED_RATE;
/// The attack: frames, rate and longest duration.
const ATTACK_FRAMES: u64 = 400_000;
const ATTACK_RATE: u64 = 50_000;
const ATTACK_MS: u64 = 8000;

/// A capture into a file, stopped (and flushed) on drop.
struct Capture {
    proc: Option<Background>,
    file: std::path::PathBuf,
}

impl Capture {
    fn start(netns: &str, iface: &str, dir: &Path, name: &str) -> Capture {
        let file = dir.join(format!("{name}.pcap"));
        let proc = Background::spawn(Command::new("ip").args([
            "netns",
            "exec",
            netns,
            "tcpdump",
            "-i",
            iface,
            "-U",
            "-n",
            "-s",
            "256",
            "-w",
            &file.to_string_lossy(),
        ]))
        .expect("tcpdump");
        Capture {
            proc: Some(proc),
            file,
        }
    }

    /// Stops the capture; how many times each of `marks` occurs in it.
    fn stop_and_count(mut self, marks: &[&[u8]]) -> Vec<usize> {
        if let Some(p) = self.proc.take() {
            if let Ok(pid) = i32::try_from(p.id()) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGINT);
            }
            let _ = p.wait(Duration::from_secs(5));
        }
        let bytes = std::fs::read(&self.file).unwrap_or_default();
        marks
            .iter()
            .map(|m| bytes.windows(m.len()).filter(|w| w == m).count())
            .collect()
    }
}

fn rss_kib(pid: u64) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("xbr runs");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS")
}

/// Starts the attacker in pod `a`, aiming at the first pod of tenant B
/// and the gateway.
fn attack(a: &Value, victim: &Value, node: &Value) -> Background {
    Background::spawn(Command::new("ip").args([
        "netns",
        "exec",
        s(a, "netns"),
        TOOL,
        "hostile",
        "--count",
        &ATTACK_FRAMES.to_string(),
        "--rate",
        &ATTACK_RATE.to_string(),
        "--max-ms",
        &ATTACK_MS.to_string(),
        "--own-mac",
        s(a, "mac"),
        "--own-ip",
        s(a, "ip"),
        "--victim-mac",
        s(victim, "mac"),
        "--victim-ip",
        s(victim, "ip"),
        "--gateway-mac",
        s(node, "tun0_mac"),
        "--gateway-ip",
        s(node, "gateway"),
    ]))
    .expect("the attacker")
}

/// Waits for the attacker; the frames it sent.
fn attack_done(attacker: Background) -> u64 {
    let out = attacker.wait(Duration::from_millis(ATTACK_MS) + Duration::from_secs(10));
    assert!(out.success(), "attacker: {out:?}");
    out.stdout.trim().parse().expect("frames sent")
}

/// B's datagrams delivered from `from` to `to`.
fn legit(from: &Value, to: &Value) -> u64 {
    let bind = format!("{}:7000", s(to, "ip"));
    let rx = Receiver::start(s(to, "netns"), &bind, LEGIT);
    let dst = bind.parse().expect("IPv4:port");
    let sent = xbr_tests::udp_send(Path::new(TOOL), s(from, "netns"), dst, LEGIT, FIXED_RATE)
        .expect("udp-send");
    assert_eq!(sent, LEGIT);
    rx.finish()
}

#[test]
fn a_hostile_pod_reaches_no_other_tenant_and_does_not_starve_it() {
    require_tool("tcpdump").expect("tcpdump");
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
    let node = &lab.nodes()[0];
    let names: Vec<&str> = lab.json["namespaces"]
        .as_array()
        .expect("namespaces")
        .iter()
        .map(|n| s(n, "name"))
        .collect();
    let in_ns = |ns: &str| -> Vec<&Value> {
        lab.pods()
            .iter()
            .filter(|p| s(p, "namespace") == ns)
            .collect()
    };
    let (tenant_a, tenant_b) = (in_ns(names[1]), in_ns(names[2]));
    let (a, b1, b2) = (tenant_a[0], tenant_b[0], tenant_b[1]);
    assert_ne!(u(a, "vnid"), u(b1, "vnid"));
    assert!(
        u(a, "vnid") != 0 && u(b1, "vnid") != 0,
        "neither is default"
    );
    let node_ns = s(node, "netns");
    for key in ["all", "default", "tun0"] {
        let out = sh(
            "ip",
            &[
                "netns",
                "exec",
                node_ns,
                "sysctl",
                "-qw",
                &format!("net.ipv4.conf.{key}.rp_filter=0"),
            ],
        );
        assert!(out.success(), "{}", out.stderr);
    }
    let pid = u(node, "xbr_pid");

    // B without the attack.
    let baseline = legit(b1, b2);
    assert!(baseline >= LEGIT * 9 / 10, "baseline {baseline}/{LEGIT}");
    let rss_before = rss_kib(pid);

    let caps = [
        Capture::start(s(b1, "netns"), "eth0", &lab.dir, "b1"),
        Capture::start(s(b2, "netns"), "eth0", &lab.dir, "b2"),
        Capture::start(node_ns, "tun0", &lab.dir, "tun0"),
    ];
    std::thread::sleep(Duration::from_secs(1));
    let attacker = attack(a, b1, node);
    // B under attack, well inside the attack's time.
    std::thread::sleep(Duration::from_secs(2));
    let attacked = legit(b1, b2);
    let sent = attack_done(attacker);
    std::thread::sleep(Duration::from_millis(500));

    use bench::hostile::{MARK_INNER, MARK_OWN, MARK_SPOOF};
    let [c1, c2, ctun] = caps;
    let mut marks: Vec<Vec<u8>> = [&MARK_SPOOF[..], MARK_OWN, MARK_INNER, b"XBRTTOOL"]
        .iter()
        .map(|m| m.to_vec())
        .collect();
    // The node's capture, by kind of frame with the pod's own source.
    for kind in 0..bench::hostile::KINDS as u8 {
        let mut m = MARK_OWN.to_vec();
        m.push(kind);
        marks.push(m);
    }
    let marks: Vec<&[u8]> = marks.iter().map(Vec::as_slice).collect();
    let (in_b1, in_b2, in_node) = (
        c1.stop_and_count(&marks),
        c2.stop_and_count(&marks),
        ctun.stop_and_count(&marks),
    );
    let rss_after = rss_kib(pid);
    let conns = |stats: &str| xbr_tests::xbr_stats::section_stat(stats, "conntrack", "connections");
    let stats_after = xbr(
        &["stats", "--rundir", s(node, "rundir"), "br0"],
        CMD_TIMEOUT,
    )
    .stdout;
    // The same attack again (the same frames: `bench::hostile` builds
    // them from their index): what xbr keeps is bounded, so a second
    // round finds its tables at their size and adds no state.
    let sent2 = attack_done(attack(a, b1, node));
    let rss_again = rss_kib(pid);
    let log =
        std::fs::read_to_string(Path::new(s(node, "rundir")).join("xbr.log")).unwrap_or_default();
    let stats = xbr(
        &["stats", "--rundir", s(node, "rundir"), "br0"],
        CMD_TIMEOUT,
    )
    .stdout;
    eprintln!(
        "attack: {sent} frames; B: {baseline} then {attacked} of {LEGIT}; \
         RSS {rss_before} -> {rss_after} -> {rss_again} KiB (again {sent2} frames); markers (spoof, own, inner, B's, \
         then own by kind) in b1 {in_b1:?}, b2 {in_b2:?}, tun0 {in_node:?}\n{stats}"
    );

    assert!(sent >= ATTACK_FRAMES / 4, "the attack sent {sent} frames");
    // The captures work: B's own datagrams are in b2's.
    assert!(in_b2[3] > 0, "b2's capture saw none of B's traffic");
    for (who, c) in [("b1", &in_b1), ("b2", &in_b2)] {
        assert_eq!(&c[..3], &[0, 0, 0], "attack frames reached {who}\n{stats}");
    }
    assert_eq!(in_node[0], 0, "spoofed frames reached the node\n{stats}");
    // Of the pod's own frames, only its limited broadcast (kind 16) is
    // the node's: the agent's flows deliver 255.255.255.255 to tun0. None
    // of the tagged, malformed, fragment or TTL frames aimed at B is.
    for (kind, n) in in_node[4..].iter().enumerate() {
        assert!(
            kind == 16 || *n == 0,
            "kind {kind}: {n} frames reached the node"
        );
    }
    assert!(
        attacked * 10 >= LEGIT * 9,
        "B lost its rate: {attacked} of {LEGIT} offered at {FIXED_RATE}/s delivered under \
         attack ({baseline} without)\n{stats}"
    );
    assert!(
        attacked * 10 >= baseline * 9,
        "B lost over 10%: {attacked} delivered under attack, {baseline} without\n{stats}"
    );
    assert!(
        rss_after < rss_before + 256 * 1024,
        "xbr grew from {rss_before} to {rss_after} KiB\n{stats}"
    );
    // The allocator may keep freed memory (per-thread arenas), so the
    // second round is held to the same overall bound, and its state to
    // what the first left.
    assert!(
        rss_again < rss_before + 256 * 1024,
        "xbr grew from {rss_before} to {rss_after} then {rss_again} KiB\n{stats}"
    );
    let (conns1, conns2) = (conns(&stats_after), conns(&stats));
    assert!(
        conns2 <= conns1 + conns1 / 10 + 100,
        "the same attack again added connections: {conns1} then {conns2}\n{stats}"
    );
    assert!(
        Path::new(&format!("/proc/{pid}")).exists(),
        "xbr died\n{log}"
    );
    assert!(!log.contains("panicked"), "{log}");
    // The flood of distinct flows went past its port's budget of XDP
    // cache installs: most of its frames installed nothing
    // (docs/xdp-cache.md, `engine/xdp/install_gate.rs`).
    let xdp = |name: &str| xbr_tests::xbr_stats::xdp_stat(&stats, name);
    assert!(
        xdp("deferred") > xdp("installs"),
        "installs {}, deferred {}\n{stats}",
        xdp("installs"),
        xdp("deferred")
    );
}
