//! `other_config:flow-restore-wait` with the real ovsdb-server and
//! ovs-vsctl, in the order `ovs-ctl restart` uses it (ovs-lib's
//! `restart`): OVS's own `ovs-save save-flows` writes the restore script
//! while xbr runs; xbr is stopped; `flow-restore-wait=true` is set; xbr
//! starts; the script runs (`add-groups`, `replace-flows`); the key is
//! removed. While it is true xbr forwards nothing new and connects to no
//! controller (what the pinned XDP flow cache carried before the restart
//! may go on, as OVS neither flushes nor expires its datapath flows
//! then); once removed it takes over the cache, forwards by the restored
//! flows, connects, and the ports kept their numbers (from the state
//! file, as ovs-vswitchd keeps them from the database).
//!
//! Needs root, a built `xbr`, `ovsdb-server`, `ovs-vsctl`, `ovs-ofctl`
//! and Debian's `ovs-save` script. Traffic: a few pings.

use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, Instant};
use xbr_tests::ovsdb::{agent_pod, OvsDb};
use xbr_tests::{run_timeout, unique_tag, HarnessError, Result, Xbr, CMD_TIMEOUT};

const OVS_SAVE: &str = "/usr/share/openvswitch/scripts/ovs-save";

fn flows(db: &OvsDb, bridge: &str) -> Result<String> {
    Ok(db
        .ofctl(&["dump-flows", "--no-stats", bridge])?
        .ok()?
        .stdout)
}

/// `xbr stats` of `bridge`.
fn stats(db: &OvsDb, bridge: &str) -> Result<String> {
    let bin = Xbr::binary()?;
    let run = db.run_dir().to_string_lossy().into_owned();
    let mut cmd = db.command(&bin.to_string_lossy(), &["stats", "--rundir", &run, bridge]);
    Ok(run_timeout(&mut cmd, CMD_TIMEOUT)?.ok()?.stdout)
}

/// Waits (bounded) for `listener` to be connected to.
fn connected(listener: &TcpListener, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if listener.accept().is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

#[test]
fn ovs_ctl_restart_order_with_flow_restore_wait() -> Result<()> {
    if !Path::new(OVS_SAVE).exists() {
        return Err(HarnessError::Unexpected(format!(
            "{OVS_SAVE} is missing (package openvswitch-switch)"
        )));
    }
    let bridge = format!("xbrt{}", unique_tag());
    let a = agent_pod(2)?;
    let b = agent_pod(3)?;
    let c = agent_pod(4)?;
    a.add_neighbor(&b)?;
    b.add_neighbor(&a)?;
    let controller = TcpListener::bind("127.0.0.1:0")
        .map_err(|e| io_err("binding the controller listener", e))?;
    controller
        .set_nonblocking(true)
        .map_err(|e| io_err("controller listener", e))?;
    let target = format!(
        "tcp:{}",
        controller
            .local_addr()
            .map_err(|e| io_err("controller address", e))?
    );

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
    // c takes 1 and goes: a and b keep 2 and 3 across the restart, where
    // a fresh numbering would give them 1 and 2.
    for p in [&c, &a, &b] {
        db.vsctl(&["add-port", &bridge, p.host_if()])?.ok()?;
    }
    db.vsctl(&["del-port", &bridge, c.host_if()])?.ok()?;
    assert_eq!(
        (db.ofport(a.host_if())?, db.ofport(b.host_if())?),
        ("2".to_string(), "3".to_string())
    );
    db.vsctl(&["set-controller", &bridge, &target])?.ok()?;
    assert!(
        connected(&controller, Duration::from_secs(10)),
        "xbr never connected to its controller"
    );
    let group = "group_id=5,type=all,bucket=actions=output:3";
    db.ofctl(&["add-group", &bridge, group])?.ok()?;
    for f in [
        "table=0, priority=100, ip, nw_dst=10.128.0.3, actions=group:5",
        "table=0, priority=100, ip, nw_dst=10.128.0.2, actions=output:2",
        "cookie=0x77, table=0, priority=10, arp, actions=NORMAL",
    ] {
        db.ofctl(&["add-flow", &bridge, f])?.ok()?;
    }
    let out = a.ping(b.ip(), 2)?;
    assert!(out.success(), "no ping before the restart: {}", out.stdout);
    let before = flows(&db, &bridge)?;

    // ovs-ctl restart: save the flows with OVS's own script.
    let script = db.dir().join("restore-flows.sh");
    let saved = run_timeout(
        &mut db.command("sh", &[OVS_SAVE, "save-flows", &bridge]),
        CMD_TIMEOUT,
    )?
    .ok()?;
    assert!(
        saved.stdout.contains("replace-flows") && saved.stdout.contains("add-groups"),
        "ovs-save wrote no restore commands:\n{}",
        saved.stdout
    );
    std::fs::write(&script, &saved.stdout).map_err(|e| io_err("restore script", e))?;
    db.stop_switch();
    db.vsctl(&[
        "--no-wait",
        "set",
        "open_vswitch",
        ".",
        "other_config:flow-restore-wait=true",
    ])?
    .ok()?;
    db.start_xbr()?;
    // Wait until the bridge serves OpenFlow again.
    let deadline = Instant::now() + Duration::from_secs(20);
    while db.ofctl(&["show", &bridge])?.code() != Some(0) {
        if Instant::now() > deadline {
            return Err(HarnessError::Unexpected(format!(
                "the bridge did not come back:\n{}",
                db.xbr_log()
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }

    // Waiting: what the pinned cache carried goes on (the pings before
    // the restart installed both directions), as OVS's datapath flows do
    // during flow-restore-wait, though the ports were added anew and the
    // tables are empty; nothing new is forwarded (a fragmented echo is
    // never cached); no controller is connected.
    let cached = a.ping(b.ip(), 2)?;
    assert!(
        cached.success(),
        "a cached flow stopped during flow-restore-wait: {}\n{}\n{}",
        cached.stdout,
        stats(&db, &bridge)?,
        db.appctl(&["dpctl/dump-flows"])?.stdout
    );
    let out = a.ping_sized(b.ip(), 2, 3000)?;
    assert!(
        !out.success(),
        "a new flow was forwarded during flow-restore-wait: {}",
        out.stdout
    );
    assert!(
        !connected(&controller, Duration::from_secs(2)),
        "connected to the controller during flow-restore-wait"
    );
    let st = stats(&db, &bridge)?;
    assert!(st.contains("flow_restore_wait"), "no drops counted:\n{st}");

    // The saved script, as ovs-ctl runs it, then the key goes.
    let restored = run_timeout(
        &mut db.command("sh", &[&script.to_string_lossy()]),
        CMD_TIMEOUT,
    )?;
    // Its add-tlv-map line may fail (xbr has no TLV table, as OVS's
    // userspace datapath without Geneve); the groups and flows must not.
    assert!(
        !restored.stderr.contains("add-groups") && !restored.stderr.contains("replace-flows"),
        "the restore script failed: {}",
        restored.stderr
    );
    let log = db.xbr_log();
    assert!(
        log.contains("not applied: flow-restore-wait is on"),
        "the restart under flow-restore-wait did not say it left the pipeline out:\n{log}"
    );
    db.vsctl(&[
        "--no-wait",
        "--if-exists",
        "remove",
        "open_vswitch",
        ".",
        "other_config",
        "flow-restore-wait=true",
    ])?
    .ok()?;

    assert!(
        connected(&controller, Duration::from_secs(10)),
        "no controller connection after flow-restore-wait:\n{}",
        db.xbr_log()
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if a.ping(b.ip(), 1)?.success() {
            break;
        }
        if Instant::now() > deadline {
            return Err(HarnessError::Unexpected(format!(
                "no forwarding after flow-restore-wait was removed:\n{}",
                db.xbr_log()
            )));
        }
    }
    assert_eq!(flows(&db, &bridge)?, before);
    // The pinned cache was taken over when the key cleared, not before.
    let log = xbr_tests::strip_ansi(&db.xbr_log());
    let (cleared, took) = (
        log.find("flow-restore-wait cleared"),
        log.rfind("took over from the previous xbr"),
    );
    assert!(
        matches!((cleared, took), (Some(c), Some(t)) if t > c),
        "no take-over after flow-restore-wait cleared:\n{log}"
    );
    assert_eq!(
        (db.ofport(a.host_if())?, db.ofport(b.host_if())?),
        ("2".to_string(), "3".to_string()),
        "the ports were renumbered"
    );
    let show = db.ofctl(&["show", &bridge])?.ok()?.stdout;
    assert!(
        show.contains(&format!(" 2({}): addr:", a.host_if()))
            && show.contains(&format!(" 3({}): addr:", b.host_if())),
        "{show}"
    );
    Ok(())
}

/// Only bridges the database held when xbr started restore their state
/// files: one deleted while xbr was down and created again afterwards is
/// new and starts empty (as with ovs-vswitchd), and one deleted while xbr
/// runs has its file removed.
#[test]
fn a_bridge_created_anew_starts_empty_and_a_deleted_one_leaves_no_state() -> Result<()> {
    let bridge = format!("xbrt{}", unique_tag());
    let mut db = OvsDb::start(None)?;
    db.start_xbr()?;
    db.add_secure_bridge(&bridge)?;
    db.ofctl(&["add-flow", &bridge, "priority=5,ip,actions=drop"])?
        .ok()?;
    db.stop_switch();
    let file = db.run_dir().join(format!("{bridge}.state"));
    assert!(file.exists(), "no state file after the stop");
    db.vsctl(&["--no-wait", "del-br", &bridge])?.ok()?;
    db.start_xbr()?;
    db.add_secure_bridge(&bridge)?;
    let dump = flows(&db, &bridge)?;
    assert!(
        !dump.contains("actions="),
        "a new bridge restored old flows:\n{dump}"
    );
    assert!(
        db.xbr_log()
            .contains("removed the state file of an earlier bridge"),
        "{}",
        db.xbr_log()
    );
    db.ofctl(&["add-flow", &bridge, "priority=6,ip,actions=drop"])?
        .ok()?;
    db.vsctl(&["del-br", &bridge])?.ok()?;
    assert!(!file.exists(), "a deleted bridge left its state file");
    Ok(())
}

fn io_err(context: &str, source: std::io::Error) -> HarnessError {
    HarnessError::Io {
        context: context.into(),
        source,
    }
}
