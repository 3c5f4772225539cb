//! `--pmd-threads N`: N packet threads, each serving the ports dealt to
//! it (in turn, as listed; ports added while running go to the thread
//! serving the fewest), on the first N CPUs of `--pmd-cores`. Traffic
//! between ports of different threads is handed off from one to the
//! other and must cross as with one thread, in both directions, counted
//! once on every port; ports added and removed while running take part
//! like the others; bad thread counts are refused with exit code 2.
//! (xdp_cache_ct.rs runs its differential conntrack test with two
//! threads too.)
//!
//! Needs root, two CPUs (the CI machine has two) and a built `xbr`.

use std::net::SocketAddrV4;
use std::path::Path;
use std::time::Duration;
use xbr_tests::{thread_cpus, udp_send, Pod, Result, UdpReceiver, Xbr, BRIDGE};

const TOOL: &str = env!("CARGO_BIN_EXE_xbr-testtool");
/// Every packet through the packet threads: the XDP flow cache off.
const ARGS: [&str; 6] = [
    "--pmd-threads",
    "2",
    "--pmd-cores",
    "0,1",
    "--xdp-cache",
    "off",
];
const COUNT: u64 = 3_000;
const RATE: u64 = 10_000;
const TIMEOUT: Duration = Duration::from_secs(30);

/// Sends `COUNT` UDP packets from `from` to `to`; how many arrived.
fn udp_across(from: &Pod, to: &Pod) -> Result<u64> {
    udp_count(from, to, COUNT, TIMEOUT)
}

/// Sends `count` UDP packets from `from` to `to`; how many arrived
/// within `timeout`.
fn udp_count(from: &Pod, to: &Pod, count: u64, timeout: Duration) -> Result<u64> {
    let dst = SocketAddrV4::new(to.ip(), 5001);
    let rx = UdpReceiver::start(Path::new(TOOL), to.ns(), dst, count, timeout)?;
    let sent = udp_send(Path::new(TOOL), from.ns(), dst, count, RATE)?;
    assert_eq!(sent, count);
    rx.finish()
}

/// (rx, tx) packets of `port`, from `ovs-ofctl dump-ports`.
fn port_packets(xbr: &Xbr, port: u32) -> Result<(u64, u64)> {
    let out = xbr.ofctl_ok(&["dump-ports", BRIDGE, &port.to_string()])?;
    let pkts: Vec<u64> = out
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("pkts=")?.trim_end_matches(',').parse().ok())
        .collect();
    match pkts[..] {
        [rx, tx] => Ok((rx, tx)),
        _ => panic!("port {port}: {out}"),
    }
}

/// Pods `first` and `first + 1` on an xbr with `ARGS`, as ports 1 and 2
/// (thread 0's and thread 1's).
fn two_pods(first: u8) -> Result<(Xbr, Pod, Pod)> {
    let a = Pod::numbered(first)?;
    let b = Pod::numbered(first + 1)?;
    let specs = [format!("{}=1", a.host_if()), format!("{}=2", b.host_if())];
    let mut args = ARGS.to_vec();
    args.extend(["--port", &specs[0], "--port", &specs[1]]);
    Ok((Xbr::start(&args)?, a, b))
}

#[test]
fn two_threads_carry_traffic_between_their_ports_both_ways() -> Result<()> {
    let (xbr, a, b) = two_pods(20)?;
    let pid = xbr.pid().expect("xbr runs");
    assert_eq!(thread_cpus(pid, "xbr-pmd0").as_deref(), Some("0"));
    assert_eq!(thread_cpus(pid, "xbr-pmd1").as_deref(), Some("1"));
    xbr.add_flow("in_port=1,actions=output:2")?;
    xbr.add_flow("in_port=2,actions=output:1")?;
    a.add_neighbor(&b)?;
    b.add_neighbor(&a)?;
    let stats = xbr.client_ok(&["stats", BRIDGE])?;
    assert!(
        stats.contains("packet threads: 2\n  thread 0: ports 1\n  thread 1: ports 2\n"),
        "{stats}"
    );
    // The real ovs-appctl shows the same, as OVS lists its PMD threads.
    let rxq = appctl(&xbr, &["dpif-netdev/pmd-rxq-show"])?;
    for (core, port) in [(0, a.host_if()), (1, b.host_if())] {
        let block = format!(
            "pmd thread numa_id 0 core_id {core}:\n  isolated : false\n  \
             port: {port:<16}  queue-id:  0 (enabled)   pmd usage: NOT AVAIL\n"
        );
        assert!(rxq.contains(&block), "{rxq}");
    }

    let one = appctl(&xbr, &["dpif-netdev/pmd-rxq-show", "-pmd", "1"])?;
    assert!(
        !one.contains("core_id 0:") && one.contains(b.host_if()),
        "{one}"
    );

    // Counts from here on, for pmd-stats-show below.
    assert_eq!(appctl(&xbr, &["dpif-netdev/pmd-stats-clear"])?, "");

    // Port 1 is thread 0's and port 2 thread 1's: every packet is handed
    // from one thread to the other.
    let (rx1, tx1) = port_packets(&xbr, 1)?;
    let (rx2, tx2) = port_packets(&xbr, 2)?;
    assert_eq!(udp_across(&a, &b)?, COUNT, "{}", xbr.log());
    assert_eq!(udp_across(&b, &a)?, COUNT, "{}", xbr.log());
    let out = a.ping(b.ip(), 2)?;
    assert!(out.success(), "ping: {}\n{}", out.stdout, xbr.log());
    // Counted once each, by the thread that sent it (the pods' own
    // packets, e.g. IPv6 neighbour discovery, may add a few).
    let (rx1_after, tx1_after) = port_packets(&xbr, 1)?;
    let (rx2_after, tx2_after) = port_packets(&xbr, 2)?;
    for (what, before, after) in [
        ("port 1 rx", rx1, rx1_after),
        ("port 2 tx", tx2, tx2_after),
        ("port 2 rx", rx2, rx2_after),
        ("port 1 tx", tx1, tx1_after),
    ] {
        let n = after - before;
        assert!((COUNT + 2..COUNT + 20).contains(&n), "{what}: {n} packets");
    }

    // Each thread received its own port's packets, and translated each
    // once (no recirculation here; the handed-off ones are only output).
    let stats = appctl(&xbr, &["dpif-netdev/pmd-stats-show"])?;
    for core in [0, 1] {
        let block = pmd_block(&stats, core);
        let received = pmd_value(block, "packets received");
        assert!((COUNT + 2..COUNT + 20).contains(&received), "{stats}");
        let translated = pmd_value(block, "emc hits")
            + pmd_value(block, "megaflow hits")
            + pmd_value(block, "miss with success upcall");
        assert_eq!(translated, received, "{stats}");
        assert_eq!(pmd_value(block, "packet recirculations"), 0, "{stats}");
        assert!(block.contains("\n  processing time: "), "{stats}");
    }
    // -pmd picks one thread (`xbr pmd stats --core` asks the bridge the
    // same); a clear starts the counts again.
    let one = appctl(&xbr, &["dpif-netdev/pmd-stats-show", "-pmd", "1"])?;
    assert!(
        !one.contains("core_id 0:") && one.contains("core_id 1:"),
        "{one}"
    );
    let own = xbr.client_ok(&["pmd", "stats", BRIDGE, "--core", "1"])?;
    assert!(!own.contains("core_id 0:"), "{own}");
    assert!(
        pmd_value(pmd_block(&own, 1), "packets received") > COUNT,
        "{own}"
    );
    appctl(&xbr, &["dpif-netdev/pmd-stats-clear", "-pmd", "0"])?;
    let stats = appctl(&xbr, &["dpif-netdev/pmd-stats-show"])?;
    // Stray packets of the pods' own (IPv6) may arrive meanwhile.
    assert!(
        pmd_value(pmd_block(&stats, 0), "packets received") < 10,
        "{stats}"
    );
    assert!(
        pmd_value(pmd_block(&stats, 1), "packets received") > COUNT,
        "{stats}"
    );
    Ok(())
}

/// The real `ovs-appctl` against xbr's control sockets; its output.
fn appctl(xbr: &Xbr, args: &[&str]) -> Result<String> {
    xbr_tests::require_tool("ovs-appctl")?;
    let mut cmd = std::process::Command::new("ovs-appctl");
    cmd.args(args).env("OVS_RUNDIR", xbr.rundir());
    let out = xbr_tests::run_timeout(&mut cmd, Duration::from_secs(10))?;
    assert!(out.success(), "{out:?}");
    Ok(out.stdout)
}

/// The `pmd-stats-show` block of the thread on `core`.
fn pmd_block(stats: &str, core: usize) -> &str {
    let head = format!("core_id {core}:\n");
    let at = stats.find(&head).unwrap_or_else(|| panic!("{stats}"));
    let block = &stats[at..];
    match block[head.len()..].find("pmd thread") {
        Some(end) => &block[..head.len() + end],
        None => block,
    }
}

/// The number on line `name: N` of a `pmd-stats-show` block.
fn pmd_value(block: &str, name: &str) -> u64 {
    block
        .lines()
        .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(": "))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no `{name}` in {block}"))
}

#[test]
fn ports_added_while_running_join_a_thread_and_can_be_removed() -> Result<()> {
    let (xbr, a, b) = two_pods(22)?;
    let c = Pod::numbered(24)?;
    let d = Pod::numbered(25)?;
    // 3 goes to thread 0 (a tie), 4 to thread 1; each pair below spans
    // both threads.
    let added = [format!("{}=3", c.host_if()), format!("{}=4", d.host_if())];
    for round in 0..2 {
        for spec in &added {
            xbr.client_ok(&["port", "add", BRIDGE, spec])?;
        }
        if round == 0 {
            for (x, y) in [(1, 4), (4, 1), (3, 2), (2, 3)] {
                xbr.add_flow(&format!("in_port={x},actions=output:{y}"))?;
            }
            for (p, q) in [(&a, &d), (&c, &b)] {
                p.add_neighbor(q)?;
                q.add_neighbor(p)?;
            }
        }
        for (from, to) in [(&a, &d), (&d, &a), (&c, &b), (&b, &c)] {
            let got = udp_across(from, to)?;
            assert_eq!(got, COUNT, "round {round}: {got} arrived\n{}", xbr.log());
        }
        for pod in [&c, &d] {
            xbr.client_ok(&["port", "del", BRIDGE, pod.host_if()])?;
        }
        // Gone from every thread: nothing reaches the removed ports.
        assert_eq!(udp_count(&a, &d, 50, Duration::from_secs(2))?, 0);
    }
    Ok(())
}

#[test]
fn bad_thread_counts_are_refused_with_exit_code_2() -> Result<()> {
    for (args, mention) in [
        (
            vec!["--pmd-threads", "2", "--pmd-cores", "0"],
            "--pmd-threads 2",
        ),
        (vec!["--pmd-threads", "0"], "--pmd-threads"),
        (vec!["--pmd-threads", "65"], "--pmd-threads"),
        (vec!["--pmd-threads", "2", "--cpu", "0"], "--cpu"),
    ] {
        let (out, _dir) = Xbr::run_once(&args, Duration::from_secs(10))?;
        assert_eq!(out.code(), Some(2), "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains(mention), "{args:?}: {}", out.stderr);
    }
    Ok(())
}
