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
use xbr_tests::ovsdb::{agent_pod, OvsDb};
use xbr_tests::{udp_send, unique_tag, HarnessError, Result, UdpReceiver};

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
    db.vsctl(&[
        "add-br",
        &bridge,
        "--",
        "set",
        "Bridge",
        &bridge,
        "fail_mode=secure",
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

    // While the traffic runs: options (the fast path to a, then back),
    // policing of b (high enough to drop nothing), a's MTU.
    for change in [
        vec!["set", "Interface", a_if.as_str(), "options:xdp_redirect=on"],
        vec![
            "set",
            "Interface",
            b.host_if(),
            "ingress_policing_rate=1000000",
        ],
        vec!["set", "Interface", a_if.as_str(), "mtu_request=1400"],
        vec!["set", "Interface", b.host_if(), "options:xdp_redirect=on"],
        vec![
            "remove",
            "Interface",
            a_if.as_str(),
            "options",
            "xdp_redirect",
        ],
        vec!["set", "Interface", b.host_if(), "ingress_policing_rate=0"],
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
    db.vsctl(&["del-br", &bridge])?.ok()?;
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
    db.start_xbr()?;
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
    // (OVS flushes the flows when the first controller comes).
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
