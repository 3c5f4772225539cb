//! Port mirroring (issue 31, item 4): OVSDB `Mirror` rows and
//! `ovs-tcpdump` against xbr on a node configured only with the agent's
//! `ovs-vsctl` commands through a real ovsdb-server, including traffic
//! whose flow is in the XDP flow cache (mirrored ports' traffic is kept
//! off the kernel path, see docs/mirroring.md).
//!
//! Needs root, ovs-tcpdump (openvswitch-switch, python3-openvswitch),
//! tcpdump and a built `xbr`, like every end-to-end test.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::time::{Duration, Instant};
use xbr_tests::ovsdb::{agent_node, agent_pod, OvsDb};
use xbr_tests::xbr_stats::xdp_stat;
use xbr_tests::{require_tool, udp_send, unique_tag, Background, Pod, Result, UdpReceiver};

const TOOL: &str = env!("CARGO_BIN_EXE_xbr-testtool");
/// How long copies may take to arrive.
const COPY_BOUND: Duration = Duration::from_secs(10);

/// How long ovs-tcpdump may take to see its frames.
const CAPTURE_BOUND: Duration = Duration::from_secs(30);

fn ping_ok(from: &Pod, to: Ipv4Addr, count: u32) -> Result<()> {
    from.ping(to, count)?.ok()?;
    Ok(())
}

#[test]
fn ovs_tcpdump_captures_a_ping_between_pods_whose_flow_is_in_the_xdp_cache() -> Result<()> {
    require_tool("ovs-tcpdump")?;
    require_tool("tcpdump")?;
    let bridge = format!("xbrt{}", unique_tag());
    let a = agent_pod(2)?;
    let b = agent_pod(3)?;
    a.add_neighbor(&b)?;
    b.add_neighbor(&a)?;
    let mut db = OvsDb::start(None)?;
    agent_node(&mut db, &bridge, &[(&a, 10), (&b, 10)])?;

    // The ping's flow is carried by the XDP cache.
    let before = db.xbr_stats(&bridge)?;
    ping_ok(&a, b.ip(), 10)?;
    let after = db.xbr_stats(&bridge)?;
    let hits = xdp_stat(&after, "hit_packets") - xdp_stat(&before, "hit_packets");
    assert!(
        hits >= 10,
        "ping not in the XDP cache: {hits} hits\n{after}"
    );

    // ovs-tcpdump as an operator runs it: it makes the mirror port (a
    // TAP where the kernel has no dummy driver), the Port and the Mirror
    // rows, and tcpdump on the port. A TAP goes with its process; the
    // rows go with the test's database.
    let mirror_port = format!("xbrt{}m", unique_tag());
    let mut dump = Background::spawn(&mut db.command(
        "ovs-tcpdump",
        &[
            "--db-sock",
            &format!("unix:{}", db.db_sock().display()),
            "-i",
            a.host_if(),
            "--mirror-to",
            &mirror_port,
            "-n",
            "-c",
            "4",
            "icmp",
        ],
    ))?;
    // The Mirror row exists (ovs-tcpdump makes its port first); xbr
    // applies it as soon as the database tells it.
    let start = Instant::now();
    while db
        .vsctl(&["--columns=name", "list", "Mirror"])?
        .ok()?
        .stdout
        .trim()
        .is_empty()
    {
        assert!(
            start.elapsed() < CAPTURE_BOUND,
            "no Mirror row from ovs-tcpdump"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    // Pings until tcpdump has its four frames (it starts listening a
    // moment after the mirror exists).
    let mut mirrored_hits = 0;
    while dump.try_status().is_none() && start.elapsed() < CAPTURE_BOUND {
        let s0 = db.xbr_stats(&bridge)?;
        let _ = a.ping(b.ip(), 1)?;
        let s1 = db.xbr_stats(&bridge)?;
        mirrored_hits += xdp_stat(&s1, "hit_packets") - xdp_stat(&s0, "hit_packets");
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = dump.wait(Duration::from_secs(10));
    let text = format!("{}\n{}", out.stdout, out.stderr);
    assert!(out.success(), "{text}\n{}", db.xbr_log());
    let request = format!("{} > {}: ICMP echo request", a.ip(), b.ip());
    let reply = format!("{} > {}: ICMP echo reply", b.ip(), a.ip());
    let lines: Vec<&str> = out.stdout.lines().filter(|l| l.contains("ICMP")).collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(
        lines.iter().any(|l| l.contains(&request)) && lines.iter().any(|l| l.contains(&reply)),
        "both directions of the ping: {text}"
    );
    // While mirrored, the pod's frames crossed the packet thread.
    assert_eq!(mirrored_hits, 0, "mirrored frames forwarded by XDP");
    // ovs-tcpdump removed its rows on exit; the pods' flow goes back to
    // the XDP cache.
    let mirrors = db
        .vsctl(&["--columns=name", "list", "Mirror"])?
        .ok()?
        .stdout;
    assert!(mirrors.trim().is_empty(), "{mirrors}");
    let before = db.xbr_stats(&bridge)?;
    ping_ok(&a, b.ip(), 10)?;
    let after = db.xbr_stats(&bridge)?;
    let hits = xdp_stat(&after, "hit_packets") - xdp_stat(&before, "hit_packets");
    assert!(hits >= 10, "not back in the XDP cache: {hits}\n{after}");
    db.vsctl(&["del-br", &bridge])?.ok()?;
    Ok(())
}

/// Frames pod `p`'s eth0 has received.
fn rx_packets(p: &Pod) -> Result<u64> {
    let out = p
        .ns()
        .exec(
            &["cat", "/sys/class/net/eth0/statistics/rx_packets"],
            xbr_tests::CMD_TIMEOUT,
        )?
        .ok()?
        .stdout;
    out.trim()
        .parse()
        .map_err(|_| xbr_tests::HarnessError::Unexpected(format!("rx_packets: {out}")))
}

/// Sends `n` UDP datagrams from `from` to a receiver in `to`, all
/// delivered (so no ICMP error comes back).
fn udp(from: &Pod, to: &Pod, n: u64) -> Result<()> {
    udp_at(from, to, n, 2_000)
}

/// [`udp`] at `rate` datagrams a second.
fn udp_at(from: &Pod, to: &Pod, n: u64, rate: u64) -> Result<()> {
    let tool = Path::new(TOOL);
    let dst = SocketAddrV4::new(to.ip(), 5001);
    let rx = UdpReceiver::start(tool, to.ns(), dst, n, COPY_BOUND)?;
    assert_eq!(udp_send(tool, from.ns(), dst, n, rate)?, n);
    assert_eq!(rx.finish()?, n, "delivered");
    Ok(())
}

/// How many frames reach `out` while `a` sends 50 datagrams to `b` and
/// `b` 30 to `a`: waits until the count is stable.
fn copies(a: &Pod, b: &Pod, out: &Pod) -> Result<u64> {
    let before = rx_packets(out)?;
    udp(a, b, 50)?;
    udp(b, a, 30)?;
    let start = Instant::now();
    let mut last = rx_packets(out)?;
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let now = rx_packets(out)?;
        if now == last || start.elapsed() > COPY_BOUND {
            return Ok(now - before);
        }
        last = now;
    }
}

/// The Mirror row's `statistics:tx_packets`, once it reaches `want`
/// (or whatever it is after [`COPY_BOUND`]).
fn mirror_tx_packets(db: &OvsDb, want: u64) -> Result<u64> {
    let start = Instant::now();
    loop {
        let out = db
            .vsctl(&["get", "Mirror", "m", "statistics"])?
            .ok()?
            .stdout;
        let n = out
            .trim()
            .trim_matches(['{', '}'])
            .split(", ")
            .find_map(|kv| kv.strip_prefix("tx_packets="))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if n >= want || start.elapsed() > COPY_BOUND {
            return Ok(n);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The frames each Mirror selection copies to the output port (a third
/// pod), for one switch: select_src_port, then select_dst_port, then
/// select_all, changed on the same row with `ovs-vsctl`; and the row's
/// tx_packets at the end.
fn mirror_sequence() -> Result<Vec<u64>> {
    let bridge = format!("xbrt{}", unique_tag());
    let a = agent_pod(2)?;
    let b = agent_pod(3)?;
    let out = agent_pod(4)?;
    a.add_neighbor(&b)?;
    b.add_neighbor(&a)?;
    let mut db = OvsDb::start(None)?;
    agent_node(&mut db, &bridge, &[(&a, 10), (&b, 10)])?;
    db.vsctl(&["add-port", &bridge, out.host_if()])?.ok()?;
    // The bridge's local port is a mirrored source under select_all:
    // the host's IPv6 (router solicitations, MLD) would add frames at
    // random times.
    let knob = format!("net.ipv6.conf.{bridge}.disable_ipv6=1");
    xbr_tests::run_timeout(
        std::process::Command::new("sysctl").args(["-qw", &knob]),
        xbr_tests::CMD_TIMEOUT,
    )?
    .ok()?;
    let mut got = vec![copies(&a, &b, &out)?];
    db.vsctl(&[
        "--",
        "--id=@a",
        "get",
        "Port",
        a.host_if(),
        "--",
        "--id=@o",
        "get",
        "Port",
        out.host_if(),
        "--",
        "--id=@m",
        "create",
        "Mirror",
        "name=m",
        "select_src_port=@a",
        "output_port=@o",
        "--",
        "add",
        "Bridge",
        &bridge,
        "mirrors",
        "@m",
    ])?
    .ok()?;
    got.push(copies(&a, &b, &out)?);
    db.vsctl(&[
        "--",
        "--id=@a",
        "get",
        "Port",
        a.host_if(),
        "--",
        "set",
        "Mirror",
        "m",
        "select_src_port=[]",
        "select_dst_port=@a",
    ])?
    .ok()?;
    got.push(copies(&a, &b, &out)?);
    db.vsctl(&[
        "set",
        "Mirror",
        "m",
        "select_dst_port=[]",
        "select_all=true",
    ])?
    .ok()?;
    got.push(copies(&a, &b, &out)?);
    got.push(mirror_tx_packets(&db, 160)?);
    // xbr stats shows the mirror's copies, none dropped.
    let stats = db.xbr_stats(&bridge)?;
    let line = format!("  m (to {}): tx packets: 160, ", out.host_if());
    assert!(
        stats.contains(&line) && stats.contains("dropped: 0"),
        "{stats}"
    );
    eprintln!("copies: {got:?}");
    db.vsctl(&["del-br", &bridge])?.ok()?;
    Ok(got)
}

#[test]
fn mirror_rows_copy_exactly_the_selected_frames() -> Result<()> {
    let got = mirror_sequence()?;
    // No mirror: nothing; a's received (50); output to a (30); all, each
    // packet once (80); the row's statistics count the copies of the row
    // since it was created (50 + 30 + 80).
    assert_eq!(got, [0, 50, 30, 80, 160]);
    Ok(())
}

/// `xbr capture` against the node's bridge.
fn xbr_capture(db: &OvsDb, bridge: &str, args: &[&str]) -> Result<std::process::Command> {
    let mut cmd = std::process::Command::new(xbr_tests::Xbr::binary()?);
    cmd.args(["capture", "--rundir"])
        .arg(db.run_dir())
        .args(["--bridge", bridge])
        .args(args);
    Ok(cmd)
}

/// Pings from `a` to `b` once every 200 ms until `run` exits (bounded).
fn ping_until_done(run: &mut Background, a: &Pod, b: &Pod) -> Result<()> {
    let start = Instant::now();
    while run.try_status().is_none() && start.elapsed() < CAPTURE_BOUND {
        let _ = a.ping(b.ip(), 1)?;
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}

#[test]
fn xbr_capture_writes_a_pcap_of_a_cached_flow_and_refuses_bad_arguments() -> Result<()> {
    require_tool("tcpdump")?;
    let bridge = format!("xbrt{}", unique_tag());
    let a = agent_pod(2)?;
    let b = agent_pod(3)?;
    a.add_neighbor(&b)?;
    b.add_neighbor(&a)?;
    let mut db = OvsDb::start(None)?;
    agent_node(&mut db, &bridge, &[(&a, 10), (&b, 10)])?;
    let before = db.xbr_stats(&bridge)?;
    ping_ok(&a, b.ip(), 10)?;
    let after = db.xbr_stats(&bridge)?;
    let hits = xdp_stat(&after, "hit_packets") - xdp_stat(&before, "hit_packets");
    assert!(
        hits >= 10,
        "ping not in the XDP cache: {hits} hits\n{after}"
    );

    // -w: a pcap tcpdump reads, with both directions of the ping.
    let pcap = db.dir().join("capture.pcap");
    let pcap_s = pcap.to_string_lossy().into_owned();
    let mut run = Background::spawn(&mut xbr_capture(
        &db,
        &bridge,
        &[a.host_if(), "-w", &pcap_s, "-c", "4"],
    )?)?;
    ping_until_done(&mut run, &a, &b)?;
    let out = run.wait(Duration::from_secs(10));
    assert!(
        out.success(),
        "{}{}\n{}",
        out.stdout,
        out.stderr,
        db.xbr_log()
    );
    assert!(out.stderr.contains("4 frames captured"), "{}", out.stderr);
    let read = xbr_tests::run_timeout(
        std::process::Command::new("tcpdump").args(["-n", "-r", &pcap_s]),
        xbr_tests::CMD_TIMEOUT,
    )?
    .ok()?;
    let lines: Vec<&str> = read.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{}", read.stdout);
    let request = format!("{} > {}: ICMP echo request", a.ip(), b.ip());
    let reply = format!("{} > {}: ICMP echo reply", b.ip(), a.ip());
    assert!(
        lines.iter().any(|l| l.contains(&request)) && lines.iter().any(|l| l.contains(&reply)),
        "{}",
        read.stdout
    );

    // Without -w: one line per frame.
    let mut run = Background::spawn(&mut xbr_capture(&db, &bridge, &[b.host_if(), "-c", "2"])?)?;
    ping_until_done(&mut run, &a, &b)?;
    let out = run.wait(Duration::from_secs(10));
    assert!(out.success(), "{}{}", out.stdout, out.stderr);
    assert_eq!(out.stdout.lines().count(), 2, "{}", out.stdout);
    assert!(
        out.stdout.lines().all(|l| l.contains(": ICMP, length 98")),
        "{}",
        out.stdout
    );
    // Both captures stopped: the flow is back in the XDP cache.
    let before = db.xbr_stats(&bridge)?;
    ping_ok(&a, b.ip(), 10)?;
    let after = db.xbr_stats(&bridge)?;
    let hits = xdp_stat(&after, "hit_packets") - xdp_stat(&before, "hit_packets");
    assert!(hits >= 10, "not back in the XDP cache: {hits}\n{after}");

    // Bad arguments: a message and exit code 2, no file left behind.
    let bad_file = db.dir().join("bad.pcap").to_string_lossy().into_owned();
    let cases: [(&[&str], &str); 6] = [
        (&[], "PORT"),
        (&[a.host_if(), "-c", "0"], "-c"),
        (&[a.host_if(), "-c", "many"], "-c"),
        (&["nosuchport", "-w", &bad_file], "no port nosuchport"),
        (
            &[a.host_if(), "-w", "/nonexistent/dir/x.pcap"],
            "/nonexistent/dir",
        ),
        (&[a.host_if(), "--frobnicate"], "--frobnicate"),
    ];
    for (args, says) in cases {
        let out = xbr_tests::run_timeout(
            &mut xbr_capture(&db, &bridge, args)?,
            xbr_tests::CMD_TIMEOUT,
        )?;
        assert_eq!(out.code(), Some(2), "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains(says), "{args:?}: {}", out.stderr);
    }
    assert!(
        !Path::new(&bad_file).exists(),
        "refused capture left a file"
    );
    let out = xbr_tests::run_timeout(
        &mut xbr_capture(&db, "nosuchbridge", &[a.host_if()])?,
        xbr_tests::CMD_TIMEOUT,
    )?;
    assert_eq!(out.code(), Some(2), "{}", out.stderr);
    db.vsctl(&["del-br", &bridge])?.ok()?;
    Ok(())
}

#[test]
fn a_capture_across_two_packet_threads_copies_each_frame_once() -> Result<()> {
    let a = Pod::numbered(2)?;
    let b = Pod::numbered(3)?;
    a.add_neighbor(&b)?;
    b.add_neighbor(&a)?;
    // Ports are dealt in turn: a's to thread 0, b's to thread 1, so every
    // frame between them is handed off from one thread to the other.
    let spec_a = format!("{}=1", a.host_if());
    let spec_b = format!("{}=2", b.host_if());
    let xbr = xbr_tests::Xbr::start(&[
        "--pmd-threads",
        "2",
        "--pmd-cores",
        "0,1",
        "--port",
        &spec_a,
        "--port",
        &spec_b,
    ])?;
    xbr.add_flow("table=0, in_port=1, actions=output:2")?;
    xbr.add_flow("table=0, in_port=2, actions=output:1")?;
    // 3 pings (6 frames) and a burst of 2,000 datagrams b -> a at 10,000
    // a second: 2,006 frames on a's port. A copy made twice (by both
    // threads) would show as more of one kind before the count is
    // reached. The burst is 200 times what a capture socket held when it
    // was bounded by net.unix.max_dgram_qlen (10): its copies wait in the
    // bridge's send buffer now, and none may be dropped.
    const BURST: usize = 2000;
    let frames = (6 + BURST).to_string();
    let mut cmd = std::process::Command::new("timeout");
    cmd.args(["-s", "INT", "30"])
        .arg(xbr_tests::Xbr::binary()?)
        .args(["capture", "--rundir"])
        .arg(xbr.rundir())
        .args(["--bridge", xbr_tests::BRIDGE, a.host_if(), "-c", &frames]);
    let run = Background::spawn(&mut cmd)?;
    let start = Instant::now();
    while !xbr
        .client_ok(&["stats", xbr_tests::BRIDGE])?
        .contains("(to a capture)")
    {
        assert!(start.elapsed() < CAPTURE_BOUND, "no capture\n{}", xbr.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    ping_ok(&a, b.ip(), 3)?;
    udp_at(&b, &a, BURST as u64, 10_000)?;
    let out = run.wait(CAPTURE_BOUND);
    let icmp = out.stdout.lines().filter(|l| l.contains(": ICMP")).count();
    let udp = out.stdout.lines().filter(|l| l.contains(": UDP")).count();
    // "N frames captured, M dropped by the bridge".
    let summary: Vec<u64> = out
        .stderr
        .lines()
        .find(|l| l.contains("frames captured"))
        .map(|l| {
            l.split(|c: char| !c.is_ascii_digit())
                .filter_map(|w| w.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    let [captured, dropped] = summary[..] else {
        panic!("no summary: {}\n{}", out.stderr, xbr.log());
    };
    assert_eq!(captured as usize, icmp + udp, "{}", out.stdout);
    assert_eq!(dropped, 0, "copies dropped by the bridge: {}", out.stderr);
    assert!(out.success(), "{}\n{}", out.stderr, xbr.log());
    assert_eq!((icmp, udp), (6, BURST), "{}", out.stderr);
    Ok(())
}
