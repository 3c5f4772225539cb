//! Port mirroring (issue 31, item 4): OVSDB `Mirror` rows and
//! `ovs-tcpdump` against xbr on a node configured only with the agent's
//! `ovs-vsctl` commands through a real ovsdb-server, including traffic
//! whose flow is in the XDP flow cache (mirrored ports' traffic is kept
//! off the kernel path, see docs/mirroring.md).
//!
//! Needs root, ovs-tcpdump (openvswitch-switch, python3-openvswitch),
//! tcpdump and a built `xbr`, like every end-to-end test.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};
use xbr_tests::ovsdb::{agent_pod, OvsDb};
use xbr_tests::Background;
use xbr_tests::{require_tool, unique_tag, Pod, Result};

/// How long ovs-tcpdump may take to see its frames.
const CAPTURE_BOUND: Duration = Duration::from_secs(30);

/// `name: value` in `xbr stats`' XDP flow cache section (0 if absent).
fn xdp_stat(stats: &str, name: &str) -> u64 {
    stats
        .lines()
        .skip_while(|l| !l.starts_with("XDP flow cache"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .find_map(|l| l.trim().strip_prefix(&format!("{name}: ")))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// A node as the agent leaves it for two local pods of one VNID: the
/// bridge, the pods' ports (1 and 2) and the flows of tables 0, 20, 70
/// and 80 of TABLES.md that carry pod-to-pod IP.
fn agent_node(db: &mut OvsDb, bridge: &str, pods: &[&Pod]) -> Result<()> {
    db.start_xbr()?;
    db.vsctl(&[
        "--may-exist",
        "add-br",
        bridge,
        "--",
        "set",
        "Bridge",
        bridge,
        "fail_mode=secure",
        "protocols=OpenFlow13",
    ])?
    .ok()?;
    let mut flows = vec![
        "table=0, priority=100, ip, actions=goto_table:20".to_string(),
        "table=20, priority=0, actions=drop".to_string(),
        "table=70, priority=0, actions=drop".to_string(),
        "table=80, priority=0, actions=drop".to_string(),
    ];
    for (i, p) in pods.iter().enumerate() {
        let ids = format!("external_ids=sandbox=\"pod{i}\",ip=\"{}\"", p.ip());
        db.vsctl(&[
            "--may-exist",
            "add-port",
            bridge,
            p.host_if(),
            "--",
            "set",
            "Interface",
            p.host_if(),
            &ids,
        ])?
        .ok()?;
        let (port, ip) = (i + 1, p.ip());
        flows.push(format!(
            "table=20, priority=100, in_port={port}, ip, nw_src={ip}, \
             actions=load:10->NXM_NX_REG0[], goto_table:70"
        ));
        flows.push(format!(
            "table=70, priority=100, ip, nw_dst={ip}, \
             actions=load:10->NXM_NX_REG1[], load:{port}->NXM_NX_REG2[], goto_table:80"
        ));
    }
    flows.push("table=80, priority=100, reg0=10, reg1=10, actions=output:NXM_NX_REG2[]".into());
    for f in &flows {
        db.ofctl(&["add-flow", bridge, f])?.ok()?;
    }
    Ok(())
}

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
    agent_node(&mut db, &bridge, &[&a, &b])?;

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
