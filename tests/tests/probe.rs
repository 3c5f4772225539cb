//! `xbr probe` (issue 30), the DaemonSet's liveness and readiness probes:
//! alive when the xbr of the run directory answers on its ovs-appctl
//! socket, ready when it also serves every bridge of the database; not
//! alive before xbr starts, after it stops, or when the run directory's
//! switch is the real ovs-vswitchd.
//!
//! Needs root, Debian's Open vSwitch and a built `xbr`.

use std::process::Command;
use std::time::{Duration, Instant};
use xbr_tests::ovsdb::OvsDb;
use xbr_tests::{run_timeout, CmdOutput, Netns, Result, Xbr, CMD_TIMEOUT};

fn probe(db: &OvsDb, ready: bool) -> Result<CmdOutput> {
    let run = db.run_dir().to_string_lossy().into_owned();
    let target = format!("unix:{}", db.db_sock().display());
    let mut args = vec!["probe", "--rundir", run.as_str()];
    if ready {
        args.extend(["--ovsdb", target.as_str()]);
    }
    run_timeout(Command::new(Xbr::binary()?).args(&args), CMD_TIMEOUT)
}

#[test]
fn alive_and_ready_follow_xbr() -> Result<()> {
    let ns = Netns::new()?;
    let mut db = OvsDb::start(Some(ns.name()))?;
    db.vsctl(&["--no-wait", "add-br", "br0"])?.ok()?;
    for ready in [false, true] {
        let out = probe(&db, ready)?;
        assert_eq!(
            out.code(),
            Some(1),
            "no xbr yet: {}{}",
            out.stdout,
            out.stderr
        );
        assert!(out.stderr.contains("ovs-vswitchd.pid"), "{}", out.stderr);
    }
    db.start_xbr()?;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = probe(&db, true)?;
        if out.success() {
            assert!(
                out.stdout
                    .contains("ready: serving the database's 1 bridge"),
                "{}",
                out.stdout
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never ready: {}\n--- xbr log:\n{}",
            out.stderr,
            db.xbr_log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = probe(&db, false)?;
    assert!(out.success(), "{}", out.stderr);
    assert!(
        out.stdout.contains("alive: ovs-vswitchd (xbr)"),
        "{}",
        out.stdout
    );
    db.stop_switch();
    let out = probe(&db, false)?;
    assert_eq!(out.code(), Some(1), "xbr stopped: {}", out.stdout);
    // The real ovs-vswitchd in the run directory is not xbr.
    db.start_vswitchd()?;
    let out = probe(&db, false)?;
    assert_eq!(out.code(), Some(1), "{}", out.stdout);
    assert!(out.stderr.contains("ovs-vswitchd"), "{}", out.stderr);
    // A bad target is a usage error.
    let out = run_timeout(
        Command::new(Xbr::binary()?).args(["probe", "--ovsdb", "tcp:1.2.3.4:6640"]),
        CMD_TIMEOUT,
    )?;
    assert_eq!(out.code(), Some(2), "{}", out.stderr);
    Ok(())
}
