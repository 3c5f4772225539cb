//! OVS's port and fail-mode semantics under `xbr run --ovsdb` (issue 28),
//! driven through a real ovsdb-server with `ovs-vsctl`:
//!
//! - a change of an open port's `options`, `ingress_policing_rate` or
//!   `mtu_request` keeps its OpenFlow number and loses none of the
//!   traffic running through it;
//! - a standalone bridge without a controller has OVS's `priority=0
//!   actions=NORMAL` flow and honours a drop flow above it; with a
//!   configured controller that is not there, it fails open;
//! - a flow-based `vxlan0` added before the node has an uplink is numbered
//!   as requested and carries traffic once the uplink and route come;
//! - settings xbr does not implement get an `error` column and a log line.
//!
//! Needs root and a built `xbr`, like every end-to-end test.

use std::net::SocketAddrV4;
use std::path::Path;
use std::time::{Duration, Instant};
use xbr_lab::agent_vsctl as agent;
use xbr_tests::ovsdb::{agent_pod, OvsDb};
use xbr_tests::{udp_send, unique_tag, HarnessError, Netns, Result, UdpReceiver, CMD_TIMEOUT};

const TOOL: &str = env!("CARGO_BIN_EXE_xbr-testtool");

fn fail(msg: impl Into<String>) -> HarnessError {
    HarnessError::Unexpected(msg.into())
}

/// A new bridge of the test's own (its LOCAL device cannot clash).
fn bridge_name() -> String {
    format!("xbrt{}", unique_tag())
}

/// Waits until `f` holds, checking every 200 ms for `limit`.
fn wait_for(limit: Duration, what: &str, mut f: impl FnMut() -> Result<bool>) -> Result<()> {
    let end = Instant::now() + limit;
    loop {
        if f()? {
            return Ok(());
        }
        if Instant::now() > end {
            return Err(fail(format!("timed out waiting for {what}")));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

const UDP_COUNT: u64 = 20_000;
const UDP_RATE: u64 = 4_000;

#[test]
fn settings_changed_in_place_keep_the_number_and_the_traffic() -> Result<()> {
    let bridge = bridge_name();
    let a = agent_pod(2)?;
    let b = agent_pod(3)?;
    a.add_neighbor(&b)?;
    b.add_neighbor(&a)?;
    // The XDP flow cache may redirect to a's veth once asked to.
    a.accept_xdp_redirects()?;
    b.accept_xdp_redirects()?;
    let mut db = OvsDb::start(None)?;
    db.start_xbr()?;
    db.add_secure_bridge(&bridge)?;
    for p in [&a, &b] {
        db.vsctl(&["add-port", &bridge, p.host_if()])?.ok()?;
    }
    let (pa, pb) = (db.ofport(a.host_if())?, db.ofport(b.host_if())?);
    assert_eq!((pa.as_str(), pb.as_str()), ("1", "2"));
    for flow in ["in_port=1,actions=output:2", "in_port=2,actions=output:1"] {
        db.ofctl(&["add-flow", &bridge, flow])?.ok()?;
    }

    let dst = SocketAddrV4::new(b.ip(), 5001);
    let rx = UdpReceiver::start(
        Path::new(TOOL),
        b.ns(),
        dst,
        UDP_COUNT,
        Duration::from_secs(40),
    )?;
    let a_if = a.host_if().to_string();
    let sender = std::thread::spawn(move || {
        let sent = udp_send(Path::new(TOOL), a.ns(), dst, UDP_COUNT, UDP_RATE);
        (sent, a)
    });
    std::thread::sleep(Duration::from_millis(700));

    // While the traffic runs: options (the XDP flow cache starts
    // carrying a -> b, then stops), policing of b (high enough to drop
    // nothing), a's MTU.
    let (ai, bi) = (a_if.as_str(), b.host_if());
    for change in [
        vec!["set", "Interface", bi, "options:xdp_redirect=on"],
        vec!["set", "Interface", ai, "options:xdp_redirect=on"],
        vec!["set", "Interface", bi, "ingress_policing_rate=1000000"],
        vec!["set", "Interface", ai, "mtu_request=1400"],
        vec!["remove", "Interface", ai, "options", "xdp_redirect"],
        vec!["set", "Interface", bi, "ingress_policing_rate=0"],
        vec!["remove", "Interface", bi, "options", "xdp_redirect"],
    ] {
        db.vsctl(&change)?.ok()?;
        assert_eq!(db.ofport(&a_if)?, pa, "after {change:?}\n{}", db.xbr_log());
        assert_eq!(
            db.ofport(b.host_if())?,
            pb,
            "after {change:?}\n{}",
            db.xbr_log()
        );
        let err = db
            .vsctl(&["get", "Interface", &a_if, "error"])?
            .ok()?
            .stdout;
        assert_eq!(err.trim(), "[]", "after {change:?}");
        std::thread::sleep(Duration::from_millis(400));
    }
    let mtu = db.vsctl(&["get", "Interface", &a_if, "mtu"])?;
    let (sent, _a) = sender.join().expect("sender thread");
    assert_eq!(sent?, UDP_COUNT);
    let got = rx.finish()?;
    let log = db.xbr_log();
    assert_eq!(
        got, UDP_COUNT,
        "{got} of {UDP_COUNT} packets arrived across the changes\n{log}"
    );
    assert!(!log.contains("port removed"), "a port was reopened:\n{log}");
    assert!(
        log.contains("XDP redirect target changed in place") && log.contains("MTU set in place"),
        "{log}"
    );
    // ovs-vsctl returns once cur_cfg caught up; mtu is written with it.
    assert_eq!(mtu.ok()?.stdout.trim(), "1400");
    let show = db.ofctl(&["show", &bridge])?.ok()?.stdout;
    assert!(show.contains(&format!(" 1({a_if}): addr:")), "{show}");

    // A new ofport_request renumbers, as in OVS.
    db.vsctl(&["set", "Interface", &a_if, "ofport_request=7"])?
        .ok()?;
    assert_eq!(db.ofport(&a_if)?, "7");

    // An internal port's MAC is set in place too.
    let int = format!("{bridge}i");
    db.vsctl(&[
        "add-port",
        &bridge,
        &int,
        "--",
        "set",
        "Interface",
        &int,
        "type=internal",
    ])?
    .ok()?;
    let n = db.ofport(&int)?;
    db.vsctl(&["set", "Interface", &int, "mac=\"02:00:00:00:00:42\""])?
        .ok()?;
    assert_eq!(db.ofport(&int)?, n);
    wait_for(Duration::from_secs(8), "the new mac_in_use", || {
        Ok(iface_col(&db, &int, "mac_in_use")? == "\"02:00:00:00:00:42\"")
    })?;
    db.vsctl(&["del-br", &bridge])?.ok()?;
    // The redirect was really turned on in place: the XDP flow cache
    // carried some of the traffic (its counts are logged as the bridge
    // stops).
    let hits = xbr_tests::xdp_cache_hits(&db.xbr_log()).unwrap_or(0);
    eprintln!("XDP flow cache hits: {hits} of {UDP_COUNT}");
    assert!(
        hits > 0,
        "the XDP flow cache carried nothing\n{}",
        db.xbr_log()
    );
    Ok(())
}

/// One ping from `from` to `to` answered (static neighbours, so a failed
/// ARP cannot linger).
fn reaches(from: &xbr_tests::Pod, to: &xbr_tests::Pod) -> Result<bool> {
    Ok(from.ping(to.ip(), 1)?.success())
}

#[test]
fn standalone_without_a_controller_honours_the_flows() -> Result<()> {
    let bridge = bridge_name();
    let a = agent_pod(5)?;
    let b = agent_pod(6)?;
    a.add_neighbor(&b)?;
    b.add_neighbor(&a)?;
    let mut db = OvsDb::start(None)?;
    // A 1 s probe: fail-open begins three probe intervals after the
    // controllers are gone, as in OVS (15 s with the default 5 s).
    let target = format!("unix:{}", db.db_sock().display());
    db.start_xbr_with(&target, &["--inactivity-probe", "1"])?;
    // fail_mode unset: standalone, and no controller.
    db.vsctl(&["add-br", &bridge])?.ok()?;
    for p in [&a, &b] {
        db.vsctl(&["add-port", &bridge, p.host_if()])?.ok()?;
    }
    let dump = db.ofctl(&["dump-flows", &bridge])?.ok()?.stdout;
    assert!(
        dump.contains(" priority=0 actions=NORMAL"),
        "no NORMAL flow, as OVS has:\n{dump}"
    );
    if !reaches(&a, &b)? {
        return Err(fail(format!("NORMAL did not forward\n{}", db.xbr_log())));
    }
    // A drop flow above it wins.
    db.ofctl(&[
        "add-flow",
        &bridge,
        "priority=10,ip,nw_src=10.128.0.5,actions=drop",
    ])?
    .ok()?;
    if reaches(&a, &b)? {
        return Err(fail(format!(
            "the drop flow was ignored\n{}",
            db.ofctl(&["dump-flows", &bridge])?.stdout
        )));
    }
    let dump = db.ofctl(&["dump-flows", &bridge])?.ok()?.stdout;
    let dropped = dump
        .lines()
        .find(|l| l.contains("actions=drop"))
        .and_then(|l| l.split("n_packets=").nth(1))
        .and_then(|v| v.split(',').next())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    assert!(dropped >= 1, "{dump}");

    // A configured controller that is not there: fail-open takes over
    // after three probe intervals (OVS flushes the flows when the first
    // controller comes).
    db.vsctl(&["set-controller", &bridge, "tcp:127.0.0.1:9"])?
        .ok()?;
    wait_for(Duration::from_secs(10), "fail-open", || reaches(&a, &b))?;
    // The controller goes: the flows are flushed, the NORMAL flow is back.
    db.vsctl(&["del-controller", &bridge])?.ok()?;
    wait_for(Duration::from_secs(10), "the NORMAL flow", || {
        Ok(db
            .ofctl(&["dump-flows", &bridge])?
            .stdout
            .contains(" priority=0 actions=NORMAL"))
    })?;
    // Secure: flushed, and nothing forwards without flows.
    db.vsctl(&["set-fail-mode", &bridge, "secure"])?.ok()?;
    wait_for(Duration::from_secs(10), "the flush", || {
        Ok(!db
            .ofctl(&["dump-flows", &bridge])?
            .stdout
            .contains("actions=NORMAL"))
    })?;
    if reaches(&a, &b)? {
        return Err(fail("a secure bridge without flows forwarded"));
    }
    db.vsctl(&["del-br", &bridge])?.ok()?;
    Ok(())
}

/// Runs a shell script in `ns`.
fn sh(ns: &Netns, script: &str) -> Result<()> {
    ns.exec(&["sh", "-ec", script], CMD_TIMEOUT)?.ok().map(drop)
}

/// `ovs-vsctl get Interface IFACE COLUMN`, trimmed.
fn iface_col(db: &OvsDb, iface: &str, column: &str) -> Result<String> {
    Ok(db
        .vsctl(&["get", "Interface", iface, column])?
        .ok()?
        .stdout
        .trim()
        .to_string())
}

#[test]
fn vxlan_without_an_uplink_is_numbered_and_carries_traffic_once_routed() -> Result<()> {
    // The node: xbr, its database, a pod's host veth; no uplink, no
    // route yet. The remote node: a kernel VTEP with a "pod" address,
    // sending without outer UDP checksums (`noudpcsum`): across a veth the
    // kernel leaves that checksum unfinished (a NIC would finish it), and
    // xbr's decapsulation drops such frames as bad UDP.
    let node = Netns::new()?;
    let pod = Netns::new()?;
    let remote = Netns::new()?;
    let (n, p, r) = (node.name(), pod.name(), remote.name());
    xbr_tests::run_timeout(
        std::process::Command::new("ip").args([
            "link", "add", "veth1", "netns", n, "type", "veth", "peer", "name", "eth0", "netns", p,
        ]),
        CMD_TIMEOUT,
    )?
    .ok()?;
    sh(&node, "ip link set veth1 up")?;
    sh(
        &pod,
        "ip link set eth0 address 0a:58:0a:80:00:02
         ip addr add 10.128.0.2/16 dev eth0; ip link set eth0 up
         ip neigh add 10.128.1.2 lladdr 0a:58:0a:80:01:02 dev eth0",
    )?;
    let mut db = OvsDb::start(Some(n))?;
    db.start_xbr()?;
    db.vsctl(&[
        "add-br",
        "br0",
        "--",
        "set",
        "Bridge",
        "br0",
        "fail_mode=secure",
    ])?
    .ok()?;
    // As the agent adds it (TABLES.md §5).
    db.vsctl(&agent::as_strs(&agent::add_vxlan(4789)))?.ok()?;
    assert_eq!(db.ofport("vxlan0")?, "1", "{}", db.xbr_log());
    let err = iface_col(&db, "vxlan0", "error")?;
    assert!(err.contains("no default route"), "error column: {err}");
    assert_eq!(iface_col(&db, "vxlan0", "link_state")?, "down");
    assert!(
        db.xbr_log().contains("no default route"),
        "{}",
        db.xbr_log()
    );
    db.vsctl(&["add-port", "br0", "veth1"])?.ok()?;
    assert_eq!(db.ofport("veth1")?, "2");
    for flow in [
        "in_port=2,ip,actions=set_field:5->tun_id,set_field:10.0.0.2->tun_dst,output:1",
        "in_port=1,tun_id=5,ip,actions=output:2",
    ] {
        db.ofctl(&["add-flow", "br0", flow])?.ok()?;
    }
    // Nothing can pass yet.
    let ping = |count: &str| -> Result<bool> {
        Ok(pod
            .exec(&["ping", "-c", count, "-W", "1", "10.128.1.2"], CMD_TIMEOUT)?
            .success())
    };
    assert!(!ping("1")?);

    // The uplink and the route come. xbr follows the kernel's address
    // and route announcements (its fallback lookup is every 30 s), so
    // each change below is seen within the 2 s the waits allow.
    xbr_tests::run_timeout(
        std::process::Command::new("ip").args([
            "link", "add", "eth0", "netns", n, "type", "veth", "peer", "name", "eth0", "netns", r,
        ]),
        CMD_TIMEOUT,
    )?
    .ok()?;
    sh(
        &remote,
        "ip addr add 10.0.0.2/24 dev eth0; ip link set eth0 up
         ip link add vx type vxlan id 5 dstport 4789 local 10.0.0.2 dev eth0 noudpcsum
         ip link set vx address 0a:58:0a:80:01:02
         ip addr add 10.128.1.2/16 dev vx; ip link set vx up
         bridge fdb append 00:00:00:00:00:00 dev vx dst 10.0.0.11
         ip neigh add 10.128.0.2 lladdr 0a:58:0a:80:00:02 dev vx",
    )?;
    sh(
        &node,
        "ip addr add 10.0.0.11/24 dev eth0; ip link set eth0 up
         ip route add default via 10.0.0.1",
    )?;
    wait_for(Duration::from_secs(2), "the underlay", || {
        Ok(iface_col(&db, "vxlan0", "error")? == "[]")
    })?;
    assert_eq!(db.ofport("vxlan0")?, "1");
    let status = iface_col(&db, "vxlan0", "status")?;
    assert!(status.contains("tunnel_egress_iface=eth0"), "{status}");
    wait_for(Duration::from_secs(10), "a ping across the tunnel", || {
        ping("1")
    })
    .map_err(|e| {
        let diag = |ns: &Netns, cmd: &str| {
            ns.exec(&["sh", "-c", cmd], CMD_TIMEOUT)
                .map(|o| format!("{}{}", o.stdout, o.stderr))
                .unwrap_or_default()
        };
        fail(format!(
            "{e}\n{}\n{:?}\n{:?}\nnode: {}\nremote: {}",
            db.xbr_log(),
            db.ofctl(&["dump-flows", "br0"]).map(|o| o.stdout),
            db.ofctl(&["dump-ports", "br0"]).map(|o| o.stdout),
            diag(&node, "ip neigh; ip -s link show eth0; ip route"),
            diag(&remote, "ip neigh; ip -s link; bridge fdb show dev vx"),
        ))
    })?;
    assert!(ping("3")?, "{}", db.xbr_log());

    // The underlay goes, then comes back: followed, number kept.
    sh(&node, "ip route del default; ip addr flush dev eth0")?;
    wait_for(Duration::from_secs(2), "the underlay to go", || {
        Ok(iface_col(&db, "vxlan0", "error")?.contains("no default route"))
    })?;
    assert_eq!(db.ofport("vxlan0")?, "1");
    sh(
        &node,
        "ip addr add 10.0.0.11/24 dev eth0; ip route add default via 10.0.0.1",
    )?;
    wait_for(Duration::from_secs(2), "the underlay again", || {
        Ok(iface_col(&db, "vxlan0", "error")? == "[]")
    })?;
    wait_for(
        Duration::from_secs(10),
        "a ping across the tunnel again",
        || ping("1"),
    )?;
    assert_eq!(db.ofport("vxlan0")?, "1");
    Ok(())
}

#[test]
fn settings_xbr_does_not_implement_are_reported() -> Result<()> {
    let bridge = bridge_name();
    let a = agent_pod(7)?;
    let b = agent_pod(8)?;
    let c = agent_pod(9)?;
    let mut db = OvsDb::start(None)?;
    db.start_xbr()?;
    db.add_secure_bridge(&bridge)?;
    // A VLAN tag and an option xbr does not read: the port opens, and
    // says what it ignores.
    let ai = a.host_if();
    db.vsctl(&[
        "add-port",
        &bridge,
        ai,
        "tag=10",
        "--",
        "set",
        "Interface",
        ai,
        "options:n_rxq=2",
    ])?
    .ok()?;
    assert_eq!(db.ofport(ai)?, "1");
    let err = iface_col(&db, ai, "error")?;
    assert!(
        err.contains("tag: VLAN access ports (tag) is not supported by xbr")
            && err.contains("options:n_rxq is not supported"),
        "error column: {err}"
    );
    let log = db.xbr_log();
    assert!(log.contains("options:n_rxq is not supported"), "{log}");
    // Cleared, the error goes.
    db.vsctl(&["clear", "Port", ai, "tag"])?.ok()?;
    db.vsctl(&["remove", "Interface", ai, "options", "n_rxq"])?
        .ok()?;
    assert_eq!(iface_col(&db, ai, "error")?, "[]");
    assert_eq!(db.ofport(ai)?, "1");

    // A bridge setting goes to its local interface.
    db.vsctl(&["set", "Bridge", &bridge, "stp_enable=true"])?
        .ok()?;
    let err = iface_col(&db, &bridge, "error")?;
    assert!(err.contains("STP is not supported by xbr"), "{err}");
    // So do its controllers' (the one here is secure: it changes nothing).
    db.vsctl(&["set-controller", &bridge, "tcp:127.0.0.1:9"])?
        .ok()?;
    db.vsctl(&["set", "Controller", &bridge, "max_backoff=30000"])?
        .ok()?;
    let err = iface_col(&db, &bridge, "error")?;
    assert!(err.contains("max_backoff"), "{err}");
    db.vsctl(&["del-controller", &bridge])?.ok()?;
    // The Open_vSwitch row has no error column: the log says it.
    db.vsctl(&["set", "Open_vSwitch", ".", "other_config:max-idle=30000"])?
        .ok()?;
    wait_for(Duration::from_secs(5), "the log line", || {
        Ok(db
            .xbr_log()
            .contains("Open_vSwitch other_config:max-idle is not supported"))
    })?;

    // An interface type xbr does not implement, and a bond: not opened.
    let gre = db.vsctl(&[
        "add-port",
        &bridge,
        "gre0",
        "--",
        "set",
        "Interface",
        "gre0",
        "type=gre",
        "options:remote_ip=192.0.2.1",
    ])?;
    assert!(gre.stderr.contains("Error detected"), "{}", gre.stderr);
    assert_eq!(db.ofport("gre0")?, "-1");
    let err = iface_col(&db, "gre0", "error")?;
    assert!(
        err.contains("interface type 'gre' is not supported by xbr"),
        "{err}"
    );
    db.vsctl(&["add-bond", &bridge, "bond0", b.host_if(), c.host_if()])?;
    let err = iface_col(&db, b.host_if(), "error")?;
    assert!(err.contains("bonds"), "{err}");
    assert_eq!(db.ofport(b.host_if())?, "-1");
    let log = db.xbr_log();
    assert!(
        log.contains("'gre' is not supported") && log.contains("bonds") && log.contains("STP"),
        "{log}"
    );
    db.vsctl(&["del-br", &bridge])?.ok()?;
    Ok(())
}
