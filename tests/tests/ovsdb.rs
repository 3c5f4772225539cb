//! xbr as ovs-vswitchd (`xbr run --ovsdb`, issue 7): Debian's real
//! ovsdb-server, started by the test with private directories, and the
//! OpenShift SDN agent's `ovs-vsctl` commands (TABLES.md §1 and §5).
//!
//! - The agent's whole sequence runs against ovsdb-server + xbr and
//!   against ovsdb-server + the real ovs-vswitchd, each in its own
//!   namespace with the same interface names; every command's output and
//!   exit code must be the same once UUIDs, MACs and the private directory
//!   are masked, and `ovs-ofctl show br0` must list the same ports.
//! - Ports added and removed with `ovs-vsctl` while two others carry
//!   traffic lose none of it, and ovsdb-server restarted meanwhile is
//!   reconnected to while xbr keeps forwarding.
//! - One xbr serves several bridges; an internal port's new MTU is set in
//!   place; controllers (active and passive) come from the database; bad
//!   `--ovsdb` targets exit 2. QoS is in ovsdb_qos.rs.
//!
//! Needs root and a built `xbr`, like every end-to-end test.

use std::collections::BTreeSet;
use std::net::SocketAddrV4;
use std::path::Path;
use std::time::Duration;
use xbr_lab::agent_vsctl as agent;
use xbr_tests::ovsdb::{agent_pod, normalise, OvsDb};
use xbr_tests::{
    thread_cpus, udp_send, unique_tag, HarnessError, Netns, Result, UdpReceiver, CMD_TIMEOUT,
};

const TOOL: &str = env!("CARGO_BIN_EXE_xbr-testtool");

/// The namespace a switch runs in for the comparison: an uplink `eth0`
/// with the default route (the VXLAN port's underlay) and three veths for
/// pods (`veth9` is never created: adding it must fail the same way).
fn node() -> Result<Netns> {
    let ns = Netns::new()?;
    let script = "set -e
        ip link set lo up
        ip link add eth0 type veth peer name eth0p
        ip addr add 10.0.0.11/24 dev eth0
        ip link set eth0 up; ip link set eth0p up
        ip route add default via 10.0.0.1
        for v in veth1 veth2 veth3; do
          ip link add $v type veth peer name ${v}p; ip link set $v up; ip link set ${v}p up
        done";
    ns.exec(&["sh", "-c", script], CMD_TIMEOUT)?.ok()?;
    Ok(ns)
}

/// One step's output as compared: exit code, stdout, stderr.
fn step(db: &OvsDb, args: &[&str]) -> Result<String> {
    let out = db.vsctl(args)?;
    Ok(normalise(
        &format!(
            "$ ovs-vsctl {}\nexit {:?}\n{}{}",
            args.join(" "),
            out.code(),
            out.stdout,
            out.stderr
        ),
        db.dir(),
    ))
}

/// "N(name)" of every port `ovs-ofctl show BRIDGE` lists.
fn ofctl_ports(db: &OvsDb, bridge: &str) -> Result<BTreeSet<String>> {
    let out = db.ofctl(&["show", bridge])?.ok()?;
    Ok(out
        .stdout
        .lines()
        .filter_map(|l| {
            l.trim_start()
                .split_once(": addr:")
                .map(|(p, _)| p.to_string())
        })
        .collect())
}

/// The agent's sequence; returns the transcript and the ports OpenFlow
/// listed while the bridge was fully populated.
fn agent_sequence(db: &OvsDb, ovs: bool) -> Result<(Vec<String>, BTreeSet<String>)> {
    let mut t = Vec::new();
    t.push(step(db, &["--if-exists", "del-br", "br0"])?);
    let mut add_br = agent::add_bridge();
    if ovs {
        // The userspace datapath: this machine's OVS has no kernel module.
        add_br.push("datapath_type=netdev".into());
    }
    let add_br_out = step(db, &agent::as_strs(&add_br))?;
    t.push(add_br_out.replace(" datapath_type=netdev", ""));
    for args in [
        agent::add_vxlan(4789),
        agent::add_tun0(1450, None),
        agent::add_pod("veth1", "sb1", "10.128.0.3"),
        agent::add_pod("veth2", "sb2", "10.128.0.4"),
    ] {
        t.push(step(db, &agent::as_strs(&args))?);
    }
    t.push(step(db, &["--may-exist", "add-port", "br0", "veth9"])?);
    for iface in ["vxlan0", "tun0", "veth1", "veth2", "veth9"] {
        for col in ["ofport", "error"] {
            t.push(step(db, &["get", "Interface", iface, col])?);
        }
        // The value differs (a MAC); its presence and form must not.
        t.push(step(db, &["get", "Interface", iface, "mac_in_use"])?);
    }
    t.push(step(
        db,
        &["get", "Interface", "vxlan0", "options:dst_port"],
    )?);
    // The bridge's own port: LOCAL is 65534 in the database.
    t.push(step(db, &["get", "Interface", "br0", "ofport", "type"])?);
    t.push(step(
        db,
        &[
            "--columns=name,ofport",
            "find",
            "interface",
            "external_ids:sandbox=sb1",
        ],
    )?);
    t.push(step(
        db,
        &[
            "--format=csv",
            "--no-headings",
            "--columns=ofport",
            "find",
            "interface",
            "external_ids:sandbox=sb2",
        ],
    )?);
    let ports = ofctl_ports(db, "br0")?;
    // QoS as the agent sets a pod's bandwidth.
    let qos = db
        .vsctl(&[
            "create",
            "qos",
            "type=linux-htb",
            "other_config:max-rate=10000000",
            "external_ids=sandbox=sb1",
        ])?
        .ok()?;
    let qos_uuid = qos.stdout.trim().to_string();
    t.push(normalise(&format!("create qos -> {qos_uuid}"), db.dir()));
    for args in [
        &["set", "port", "veth1", &format!("qos={qos_uuid}")][..],
        &["set", "interface", "veth1", "ingress_policing_rate=10000"],
        &["get", "interface", "veth1", "ingress_policing_rate"],
        &["clear", "port", "veth1", "qos"],
        &["destroy", "qos", &qos_uuid],
        &["set", "interface", "veth1", "ingress_policing_rate=0"],
        &["del-port", "veth9"],
        &["del-port", "br0", "veth1"],
        &["--may-exist", "add-port", "br0", "veth3"],
        &["get", "Interface", "veth3", "ofport"],
        &["--if-exists", "del-port", "br0", "veth1"],
        &["list-ports", "br0"],
        &["del-br", "br0"],
        &["list-br"],
    ] {
        t.push(step(db, args)?);
    }
    Ok((t, ports))
}

#[test]
fn agent_vsctl_sequence_matches_ovs_vswitchd() -> Result<()> {
    let xbr_ns = node()?;
    let mut xbr = OvsDb::start(Some(xbr_ns.name()))?;
    xbr.start_xbr()?;
    let (xbr_t, xbr_ports) = agent_sequence(&xbr, false)?;
    assert!(xbr.xbr_running(), "xbr exited:\n{}", xbr.xbr_log());

    let ovs_ns = node()?;
    let mut ovs = OvsDb::start(Some(ovs_ns.name()))?;
    ovs.start_vswitchd()?;
    let (ovs_t, ovs_ports) = agent_sequence(&ovs, true)?;

    for (x, o) in xbr_t.iter().zip(&ovs_t) {
        assert_eq!(
            x,
            o,
            "xbr and ovs-vswitchd differ\n--- xbr log:\n{}",
            xbr.xbr_log()
        );
    }
    assert_eq!(xbr_t.len(), ovs_t.len());
    let want: BTreeSet<String> = ["1(vxlan0)", "2(tun0)", "3(veth1)", "4(veth2)", "LOCAL(br0)"]
        .map(String::from)
        .into();
    assert_eq!(xbr_ports, want, "xbr's OpenFlow ports");
    assert_eq!(ovs_ports, want, "ovs-vswitchd's OpenFlow ports");
    // The bridge and its devices are gone with del-br.
    let links = xbr_ns
        .exec(&["ip", "-o", "link"], CMD_TIMEOUT)?
        .ok()?
        .stdout;
    assert!(
        !has_link(&links, "tun0") && !has_link(&links, "br0"),
        "{links}"
    );
    Ok(())
}

const UDP_COUNT: u64 = 30_000;
const UDP_RATE: u64 = 5_000;

#[test]
fn ports_change_and_ovsdb_restarts_under_traffic_without_loss() -> Result<()> {
    // xbr in the root namespace with the pods' host veths; a bridge name
    // of its own, so its LOCAL device cannot clash with anything.
    let bridge = format!("xbrt{}", unique_tag());
    let a = agent_pod(2)?;
    let b = agent_pod(3)?;
    let c = agent_pod(4)?;
    a.add_neighbor(&b)?;
    b.add_neighbor(&a)?;
    let mut db = OvsDb::start(None)?;
    db.start_xbr()?;
    db.vsctl(&[
        "add-br",
        &bridge,
        "--",
        "set",
        "Bridge",
        &bridge,
        "fail_mode=secure",
        "protocols=OpenFlow13",
    ])?
    .ok()?;
    for p in [&a, &b] {
        db.vsctl(&["add-port", &bridge, p.host_if()])?.ok()?;
    }
    let (pa, pb) = (db.ofport(a.host_if())?, db.ofport(b.host_if())?);
    assert_eq!((pa.as_str(), pb.as_str()), ("1", "2"));
    for flow in ["in_port=1,actions=output:2", "in_port=2,actions=output:1"] {
        db.ofctl(&["add-flow", &bridge, flow])?.ok()?;
    }

    let dst = SocketAddrV4::new(b.ip(), 5001);
    let timeout = Duration::from_secs(40);
    let rx = UdpReceiver::start(Path::new(TOOL), b.ns(), dst, UDP_COUNT, timeout)?;
    let sender = std::thread::spawn(move || {
        let sent = udp_send(Path::new(TOOL), a.ns(), dst, UDP_COUNT, UDP_RATE);
        (sent, a)
    });
    std::thread::sleep(Duration::from_millis(500));

    // A pod port comes and goes (the agent's setUpPod/tearDownPod).
    db.vsctl(&[
        "add-port",
        &bridge,
        c.host_if(),
        "--",
        "set",
        "Interface",
        c.host_if(),
        "external_ids=sandbox=\"sbc\"",
    ])?
    .ok()?;
    assert_eq!(db.ofport(c.host_if())?, "3");
    db.vsctl(&["del-port", &bridge, c.host_if()])?.ok()?;

    // The database goes away for a while, then comes back.
    db.stop_server();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        db.xbr_running(),
        "xbr exited without its database:\n{}",
        db.xbr_log()
    );
    db.start_server()?;
    db.wait_connections(2)?;
    // Changes flow again after the reconnection (and the numbers moved
    // on, as in OVS: 3 was freed a moment ago).
    db.vsctl(&["add-port", &bridge, c.host_if()])?.ok()?;
    assert_eq!(db.ofport(c.host_if())?, "4");
    let show = db.ofctl(&["show", &bridge])?.ok()?.stdout;
    assert!(
        show.contains(&format!(" 4({}): addr:", c.host_if())),
        "{show}"
    );

    let (sent, _a) = sender.join().expect("sender thread");
    assert_eq!(sent?, UDP_COUNT);
    let got = rx.finish()?;
    assert_eq!(
        got,
        UDP_COUNT,
        "{got} of {UDP_COUNT} packets arrived\n{}",
        db.xbr_log()
    );
    // Statistics are written back (every 5 s).
    let deadline = std::time::Instant::now() + Duration::from_secs(12);
    loop {
        let stats = db.vsctl(&["get", "Interface", b.host_if(), "statistics:tx_packets"])?;
        let n: u64 = stats.stdout.trim().parse().unwrap_or(0);
        if n >= UDP_COUNT {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "tx_packets {n}: {}",
            stats.stderr
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    db.vsctl(&["del-br", &bridge])?.ok()?;
    Ok(())
}

fn set_of(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[test]
fn one_xbr_serves_every_bridge_and_sets_mtu_in_place() -> Result<()> {
    let ns = node()?;
    let mut db = OvsDb::start(Some(ns.name()))?;
    db.start_xbr()?;
    for args in [
        &["add-br", "br0"][..],
        &["add-br", "br1"],
        &[
            "add-port",
            "br0",
            "tun0",
            "--",
            "set",
            "Interface",
            "tun0",
            "type=internal",
            "mtu_request=1450",
        ],
        &["add-port", "br1", "veth1"],
    ] {
        db.vsctl(args)?.ok()?;
    }
    assert_eq!(ofctl_ports(&db, "br0")?, set_of(&["1(tun0)", "LOCAL(br0)"]));
    assert_eq!(
        ofctl_ports(&db, "br1")?,
        set_of(&["1(veth1)", "LOCAL(br1)"])
    );

    // The agent configures tun0; a new MTU must not undo that.
    ns.exec(
        &["ip", "addr", "add", "10.129.0.1/23", "dev", "tun0"],
        CMD_TIMEOUT,
    )?
    .ok()?;
    db.vsctl(&["set", "Interface", "tun0", "mtu_request=1400"])?
        .ok()?;
    let link = ns
        .exec(&["ip", "-o", "addr", "show", "tun0"], CMD_TIMEOUT)?
        .ok()?
        .stdout;
    assert!(
        link.contains("10.129.0.1/23"),
        "tun0 lost its address: {link}"
    );
    let mtu = db.vsctl(&["get", "Interface", "tun0", "mtu"])?.ok()?.stdout;
    assert_eq!(mtu.trim(), "1400");

    // A bridge xbr cannot make is reported, like a port it cannot open.
    let long = "br-name-too-long";
    let out = db.vsctl(&["add-br", long])?;
    assert!(
        out.stderr.contains("Error detected while setting up"),
        "{}",
        out.stderr
    );
    let err = db.vsctl(&["get", "Interface", long, "error"])?.ok()?.stdout;
    assert!(err.contains("is not valid"), "{err}");
    assert_eq!(db.ofport(long)?, "-1");
    db.vsctl(&["del-br", long])?.ok()?;

    db.vsctl(&["del-br", "br0"])?.ok()?;
    assert_eq!(
        ofctl_ports(&db, "br1")?,
        set_of(&["1(veth1)", "LOCAL(br1)"])
    );
    let links = ns.exec(&["ip", "-o", "link"], CMD_TIMEOUT)?.ok()?.stdout;
    assert!(
        !has_link(&links, "tun0") && !has_link(&links, "br0"),
        "{links}"
    );
    assert!(has_link(&links, "br1"), "{links}");
    Ok(())
}

/// Whether `ip -o link` output lists `name` (a veth-backed internal port
/// shows as `name@peer:`).
fn has_link(links: &str, name: &str) -> bool {
    links.contains(&format!(" {name}:")) || links.contains(&format!(" {name}@"))
}

#[test]
fn controllers_come_from_the_database() -> Result<()> {
    let bridge = format!("xbrt{}", unique_tag());
    let active = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    let active_port = active.local_addr().expect("address").port();
    // A free port for the passive target: bound, then released.
    let passive_port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let mut db = OvsDb::start(None)?;
    db.start_xbr()?;
    let active_t = format!("tcp:127.0.0.1:{active_port}");
    let passive_t = format!("ptcp:{passive_port}:127.0.0.1");
    db.vsctl(&[
        "add-br",
        &bridge,
        "--",
        "set-controller",
        &bridge,
        &active_t,
        &passive_t,
    ])?
    .ok()?;
    // xbr connects to the active one and says HELLO (OpenFlow 1.3).
    let (mut conn, _) = {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        active.set_nonblocking(true).expect("nonblocking");
        loop {
            match active.accept() {
                Ok(c) => break c,
                Err(_) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Err(e) => panic!("xbr never connected to {active_t}: {e}\n{}", db.xbr_log()),
            }
        }
    };
    conn.set_nonblocking(false).expect("blocking");
    conn.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut hello = [0u8; 8];
    std::io::Read::read_exact(&mut conn, &mut hello).expect("hello");
    assert_eq!(
        (hello[0], hello[1]),
        (4, 0),
        "not an OpenFlow 1.3 HELLO: {hello:?}"
    );
    // And serves the passive one.
    let target = format!("tcp:127.0.0.1:{passive_port}");
    let show = db.ofctl(&["show", &target])?;
    assert!(show.success(), "{}\n{}", show.stderr, db.xbr_log());
    assert!(
        show.stdout.contains(&format!("LOCAL({bridge})")),
        "{}",
        show.stdout
    );

    // Replacing the active controller and moving the passive target
    // restarts the OpenFlow server, not the bridge: flows stay (OVS
    // flushes them only when the bridge goes from having a primary
    // controller to having none, or back: ovsdb_ports.rs).
    db.ofctl(&["add-flow", &bridge, "priority=7,actions=drop"])?
        .ok()?;
    let moved = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let moved_t = format!("ptcp:{moved}:127.0.0.1");
    // Port 9 (discard) on loopback: nothing listens.
    db.vsctl(&["set-controller", &bridge, "tcp:127.0.0.1:9", &moved_t])?
        .ok()?;
    let mut rest = Vec::new();
    let closed = std::io::Read::read_to_end(&mut conn, &mut rest);
    assert!(
        closed.is_ok(),
        "the dropped controller's connection stayed open: {closed:?}"
    );
    let old = db.ofctl(&["show", &target])?;
    assert!(!old.success(), "the old passive target still answers");
    let flows = db
        .ofctl(&["dump-flows", &format!("tcp:127.0.0.1:{moved}")])?
        .ok()?;
    assert!(
        flows.stdout.contains("priority=7 actions=drop"),
        "{}",
        flows.stdout
    );
    db.vsctl(&["del-br", &bridge])?.ok()?;
    Ok(())
}

#[test]
fn bad_ovsdb_targets_exit_2() -> Result<()> {
    for (args, says) in [
        (
            &["--ovsdb", "tcp:127.0.0.1:6640"][..],
            "not an OVSDB address",
        ),
        (
            &["--ovsdb", "unix:/nonexistent/db.sock", "--port", "veth1"],
            "cannot be used",
        ),
    ] {
        let (out, _dir) = xbr_tests::Xbr::run_once(args, Duration::from_secs(10))?;
        assert_eq!(out.code(), Some(2), "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains(says), "{args:?}: {}", out.stderr);
    }
    Ok(())
}

/// Waits (bounded) until the thread `name` of `pid` may run on `cpus`
/// only.
fn wait_thread_cpus(db: &OvsDb, pid: u32, name: &str, cpus: &str) -> Result<()> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let now = thread_cpus(pid, name);
        if now.as_deref() == Some(cpus) {
            return Ok(());
        }
        if std::time::Instant::now() >= deadline {
            return Err(HarnessError::Unexpected(format!(
                "thread {name} runs on {now:?}, not {cpus}\n{}",
                db.xbr_log()
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// OVS's `other_config:pmd-cpu-mask` places xbr's threads: the packet
/// thread on the mask's first CPU, a transmit thread on each other one;
/// a new mask moves the running packet thread at once, and says that the
/// number of transmit threads changes only with a restart.
#[test]
fn pmd_cpu_mask_places_the_threads() -> Result<()> {
    let ns = node()?;
    let mut db = OvsDb::start(Some(ns.name()))?;
    // Before the switch runs: nobody would confirm the change.
    db.vsctl(&[
        "--no-wait",
        "set",
        "Open_vSwitch",
        ".",
        "other_config:pmd-cpu-mask=0x3",
    ])?
    .ok()?;
    db.start_xbr()?;
    db.vsctl(&["add-br", "br0", "--", "add-port", "br0", "veth1"])?
        .ok()?;
    let pid = db.xbr_pid().expect("xbr is the switch");
    wait_thread_cpus(&db, pid, "xbr-pmd", "0")?;
    wait_thread_cpus(&db, pid, "xbr-tx1", "1")?;

    db.vsctl(&["set", "Open_vSwitch", ".", "other_config:pmd-cpu-mask=0x2"])?
        .ok()?;
    wait_thread_cpus(&db, pid, "xbr-pmd", "1")?;
    let log = db.xbr_log();
    assert!(
        log.contains("0 transmit threads asked for, 1 running"),
        "{log}"
    );
    // A mask xbr cannot use is ignored, with a warning.
    db.vsctl(&["set", "Open_vSwitch", ".", "other_config:pmd-cpu-mask=zz"])?
        .ok()?;
    db.vsctl(&["add-port", "br0", "veth2"])?.ok()?;
    assert!(db
        .xbr_log()
        .contains("pmd-cpu-mask 'zz': not a hexadecimal number"));
    assert_eq!(thread_cpus(pid, "xbr-pmd").as_deref(), Some("1"));
    Ok(())
}
