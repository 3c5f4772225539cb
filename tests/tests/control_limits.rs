//! The OpenFlow control plane's bounds on the real binary (issue 32;
//! docs/control-plane-limits.md): silent management-socket clients are
//! closed after the HELLO timeout, the connection past `--max-connections`
//! is refused while the others keep working, `--max-flows` and OVSDB's
//! `Flow_Table:flow_limit` give `OFPFMFC_TABLE_FULL`, and each hit is
//! counted in `xbr stats` and logged. The other bounds (probe, bundles,
//! backlog, packet-in rate) are in ofproto/tests/limits.rs.
//!
//! Needs root and a built `xbr`, like every end-to-end test.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};
use xbr_tests::openflow::wait_closed;
use xbr_tests::openflow::OfConn;
use xbr_tests::ovsdb::OvsDb;
use xbr_tests::xbr_stats::limit_count;
use xbr_tests::{unique_tag, HarnessError, Result, Xbr, BRIDGE};

const WAIT: Duration = Duration::from_secs(10);

fn unexpected(what: String) -> HarnessError {
    HarnessError::Unexpected(what)
}

#[test]
fn silent_clients_are_closed_and_the_connection_past_the_limit_is_refused() -> Result<()> {
    let xbr = Xbr::start(&["--xdp-cache", "off", "--max-connections", "3"])?;
    let mgmt = xbr.mgmt_path();
    // The harness's readiness check connected once: let xbr see it go.
    std::thread::sleep(Duration::from_millis(500));
    // Three clients that never say HELLO: closed after about a second
    // (OVS's rconn), freeing their slots.
    let mut silent = Vec::new();
    for _ in 0..3 {
        silent.push(UnixStream::connect(&mgmt).map_err(|e| unexpected(format!("{e}")))?);
    }
    for s in &mut silent {
        let took = wait_closed(s, WAIT)?;
        assert!(took < Duration::from_secs(5), "closed after {took:?}");
    }
    // Three talking clients fill the listener; a fourth is refused, as
    // is ovs-ofctl, while the three keep working.
    let mut talkers = Vec::new();
    for _ in 0..3 {
        talkers.push(OfConn::connect_hello(&mgmt)?);
    }
    let mut fourth = UnixStream::connect(&mgmt).map_err(|e| unexpected(format!("{e}")))?;
    let _ = fourth.write_all(&[4, 0, 0, 8, 0, 0, 0, 1]);
    wait_closed(&mut fourth, WAIT)?;
    let refused = xbr.ofctl(&["dump-flows", BRIDGE])?;
    assert!(
        !refused.success(),
        "ovs-ofctl got through: {}",
        refused.stdout
    );
    for (i, t) in talkers.iter_mut().enumerate() {
        t.echo(100 + i as u32)?;
    }
    // A freed slot serves the next client (`ovs-ofctl show` would open
    // two connections at once).
    drop(talkers.pop());
    let deadline = Instant::now() + WAIT;
    while !xbr.ofctl(&["dump-flows", BRIDGE])?.success() {
        assert!(Instant::now() < deadline, "no slot was freed");
        std::thread::sleep(Duration::from_millis(100));
    }
    let stats = xbr.client_ok(&["stats", BRIDGE])?;
    assert_eq!(limit_count(&stats, "hello_timeouts"), 3, "{stats}");
    assert!(limit_count(&stats, "connections_refused") >= 2, "{stats}");
    let log = xbr.log();
    assert!(log.contains("OpenFlow peer sent nothing"), "{log}");
    assert!(log.contains("OpenFlow connection refused"), "{log}");
    Ok(())
}

#[test]
fn max_flows_refuses_with_table_full_and_counts_it() -> Result<()> {
    let xbr = Xbr::start(&["--xdp-cache", "off", "--max-flows", "2"])?;
    xbr.add_flow("table=0,priority=1,in_port=1,actions=drop")?;
    xbr.add_flow("table=3,priority=1,in_port=1,actions=drop")?;
    let full = xbr.ofctl(&["add-flow", BRIDGE, "table=5,in_port=2,actions=drop"])?;
    assert!(
        !full.success() && full.stderr.contains("OFPFMFC_TABLE_FULL"),
        "{}",
        full.stderr
    );
    // Replacing one is not adding one; deleting makes room.
    xbr.add_flow("table=0,priority=1,in_port=1,actions=output:2")?;
    xbr.ofctl_ok(&["del-flows", BRIDGE, "table=3"])?;
    xbr.add_flow("table=5,in_port=2,actions=drop")?;
    let stats = xbr.client_ok(&["stats", BRIDGE])?;
    assert_eq!(limit_count(&stats, "table_full"), 1, "{stats}");
    assert!(xbr.log().contains("OFPFMFC_TABLE_FULL"));
    Ok(())
}

#[test]
fn flow_table_flow_limit_from_ovsdb_gives_table_full() -> Result<()> {
    let bridge = format!("xbrt{}", unique_tag());
    let mut db = OvsDb::start(None)?;
    db.start_xbr()?;
    db.vsctl(&["add-br", &bridge])?.ok()?;
    db.vsctl(&[
        "--",
        "--id=@ft",
        "create",
        "Flow_Table",
        "flow_limit=2",
        "overflow_policy=refuse",
        "--",
        "set",
        "Bridge",
        &bridge,
        "flow_tables:1=@ft",
    ])?
    .ok()?;
    // The limit applies once xbr has read it: the third flow in table 1
    // is refused (polled, bounded: the database change is asynchronous).
    db.ofctl(&["add-flow", &bridge, "table=1,in_port=1,actions=drop"])?
        .ok()?;
    db.ofctl(&["add-flow", &bridge, "table=1,in_port=2,actions=drop"])?
        .ok()?;
    let deadline = Instant::now() + WAIT;
    let mut n = 3;
    loop {
        let flow = format!("table=1,in_port={n},actions=drop");
        let out = db.ofctl(&["add-flow", &bridge, &flow])?;
        if !out.success() {
            assert!(out.stderr.contains("OFPFMFC_TABLE_FULL"), "{}", out.stderr);
            break;
        }
        // Added before the limit was read: take it out again.
        db.ofctl(&["del-flows", &bridge, &format!("table=1,in_port={n}")])?
            .ok()?;
        n += 1;
        assert!(
            Instant::now() < deadline,
            "flow_limit never applied:\n{}",
            db.xbr_log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Other tables have no limit; clearing the column lifts it.
    db.ofctl(&["add-flow", &bridge, "table=2,in_port=3,actions=drop"])?
        .ok()?;
    db.vsctl(&["clear", "Bridge", &bridge, "flow_tables"])?
        .ok()?;
    let deadline = Instant::now() + WAIT;
    while !db
        .ofctl(&["add-flow", &bridge, "table=1,in_port=3,actions=drop"])?
        .success()
    {
        assert!(Instant::now() < deadline, "flow_limit never lifted");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(db.xbr_log().contains("flow limit set"), "{}", db.xbr_log());
    db.vsctl(&["del-br", &bridge])?.ok()?;
    Ok(())
}
