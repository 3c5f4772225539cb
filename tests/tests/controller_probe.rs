//! `Controller.inactivity_probe` from the database, per controller, as
//! ovs-vswitchd 3.1 carries it out: a controller that answers HELLO but
//! never an ECHO_REQUEST is sent one after a probe interval of silence
//! and dropped after another (OVS's rconn). The same `ovs-vsctl`
//! commands run against xbr (started with a 30 s `--inactivity-probe`,
//! which the row must override) and against ovs-vswitchd; the row asks
//! for 1000 ms, which OVS reads as 1 s and raises to its 5 s floor, so
//! both drop the controller about 10 s after its HELLO. The same holds
//! for a connection the test makes to a passive `ptcp:` row of the same
//! bridge, probed at its row's interval. Fail open (standalone) waits
//! three of the row's intervals.
//!
//! Needs root, a built `xbr`, ovsdb-server and ovs-vswitchd (OVS 3.1),
//! like tests/ovsdb.rs.

use std::net::TcpListener;
use std::time::{Duration, Instant};
use xbr_tests::openflow::OFPT_ECHO_REQUEST;
use xbr_tests::ovsdb::OvsDb;
use xbr_tests::played_controller::{Heard, PlayedController};
use xbr_tests::{free_local_port, unique_tag, HarnessError, Result};

/// What the silent controller saw: when the switch's first ECHO_REQUEST
/// came and when the switch hung up, both from the controller's HELLO.
#[derive(Debug)]
struct Seen {
    echo: Option<Duration>,
    closed: Duration,
}

/// Plays a controller on `listener` that says HELLO, then only reads,
/// until the switch closes (at most `limit`).
fn silent_controller(listener: &TcpListener, limit: Duration) -> Result<Seen> {
    let deadline = Instant::now() + Duration::from_secs(20);
    silent(
        PlayedController::accept(listener, deadline, || false)?,
        limit,
    )
}

/// Reads what the switch sends on `c` (which said HELLO just now) and
/// answers nothing, until the switch closes (at most `limit`).
fn silent(mut c: PlayedController, limit: Duration) -> Result<Seen> {
    let hello = Instant::now();
    let mut echo = None;
    while hello.elapsed() < limit {
        match c.hear()? {
            Heard::Closed => {
                return Ok(Seen {
                    echo,
                    closed: hello.elapsed(),
                })
            }
            Heard::Message(m) if m[1] == OFPT_ECHO_REQUEST && echo.is_none() => {
                echo = Some(hello.elapsed());
            }
            Heard::Message(_) | Heard::Quiet => {}
        }
    }
    Err(HarnessError::Unexpected(format!(
        "the switch kept a controller that answers no echo request for {limit:?}"
    )))
}

/// What the two silent peers of one switch saw: the controller of an
/// active `tcp:` row, and a connection the test made to a passive
/// `ptcp:` row's port.
#[derive(Debug)]
struct Peers {
    active: Seen,
    passive: Seen,
}

/// Runs the sequence against one switch; returns what its peers saw.
/// Both Controller rows ask for 1000 ms, in one transaction.
fn run(ovs: bool) -> Result<Peers> {
    let bridge = format!("xbrt{}", unique_tag());
    let listener = TcpListener::bind("127.0.0.1:0").expect("listener");
    let port = listener.local_addr().expect("address").port();
    // Only reserved here, for the switch to listen on.
    let passive_port = free_local_port()?;
    let mut db = OvsDb::start(None)?;
    if ovs {
        db.start_vswitchd()?;
    } else {
        let target = format!("unix:{}", db.db_sock().display());
        db.start_xbr_with(&target, &["--inactivity-probe", "30"])?;
    }
    db.add_bridge(&bridge, ovs)?;
    let active = format!("target=\"tcp:127.0.0.1:{port}\"");
    let passive = format!("target=\"ptcp:{passive_port}:127.0.0.1\"");
    db.vsctl(&[
        "--",
        "--id=@a",
        "create",
        "controller",
        &active,
        "inactivity_probe=1000",
        "--",
        "--id=@p",
        "create",
        "controller",
        &passive,
        "inactivity_probe=1000",
        "--",
        "set",
        "bridge",
        &bridge,
        "controller=@a,@p",
    ])?
    .ok()?;
    let limit = Duration::from_secs(25);
    let seen = std::thread::scope(|s| {
        let active = s.spawn(|| silent_controller(&listener, limit));
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], passive_port));
        let passive = PlayedController::connect(addr, Instant::now() + Duration::from_secs(20))
            .and_then(|c| silent(c, limit));
        let active = active
            .join()
            .unwrap_or_else(|_| Err(HarnessError::Unexpected("the controller panicked".into())));
        Ok(Peers {
            active: active?,
            passive: passive?,
        })
    });
    let _ = db.vsctl(&["del-br", &bridge]);
    seen.map_err(|e: HarnessError| db.with_xbr_log(e))
}

/// A passive target's row sets the probe of the connections it accepts
/// too, as OVS's service connections take their row's settings (xbr runs
/// with a 30 s `--inactivity-probe`, which both rows override).
#[test]
fn a_silent_controller_is_dropped_after_two_of_its_probe_intervals_like_ovs() -> Result<()> {
    let ovs = run(true)?;
    let xbr = run(false)?;
    for (kind, o, x) in [
        ("tcp:", &ovs.active, &xbr.active),
        ("ptcp:", &ovs.passive, &xbr.passive),
    ] {
        probed_at_the_rows_interval(kind, o, x);
    }
    Ok(())
}

/// Both switches probed their silent `kind` peer after one interval of
/// the row's 5 s and dropped it after two.
fn probed_at_the_rows_interval(kind: &str, ovs: &Seen, xbr: &Seen) {
    // OVS keeps time in whole seconds: the probe goes at 5-6 s, the
    // connection ends at 10-12 s.
    for (who, seen) in [("ovs-vswitchd", ovs), ("xbr", xbr)] {
        let echo = seen
            .echo
            .unwrap_or_else(|| panic!("{who}, {kind}: no echo request: {seen:?}"));
        assert!(
            (Duration::from_millis(4500)..Duration::from_secs(8)).contains(&echo),
            "{who}, {kind}: echo request at {echo:?} ({seen:?}; ovs-vswitchd {ovs:?})"
        );
        assert!(
            (Duration::from_millis(9500)..Duration::from_secs(15)).contains(&seen.closed),
            "{who}, {kind}: dropped at {:?} ({seen:?}; ovs-vswitchd {ovs:?})",
            seen.closed
        );
    }
}

/// Fail open waits three of the controller's own probe intervals: a
/// standalone bridge whose one controller (probe 7 s from its row, 30 s
/// by `--inactivity-probe`) never answers opens at 21 s, not 90 s.
#[test]
fn fail_open_waits_three_of_the_rows_probe_intervals() -> Result<()> {
    let bridge = format!("xbrt{}", unique_tag());
    // A port nobody listens on: the controller never connects.
    let dead = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let mut db = OvsDb::start(None)?;
    let target = format!("unix:{}", db.db_sock().display());
    db.start_xbr_with(&target, &["--inactivity-probe", "30"])?;
    db.vsctl(&[
        "add-br",
        &bridge,
        "--",
        "set",
        "Bridge",
        &bridge,
        "fail_mode=standalone",
    ])?
    .ok()?;
    let controller = format!("tcp:127.0.0.1:{dead}");
    let configured = Instant::now();
    db.vsctl(&[
        "set-controller",
        &bridge,
        &controller,
        "--",
        "set",
        "controller",
        &bridge,
        "inactivity_probe=7000",
    ])?
    .ok()?;
    let opened = loop {
        if db.xbr_log().contains("entering fail-open mode") {
            break configured.elapsed();
        }
        assert!(
            configured.elapsed() < Duration::from_secs(40),
            "no fail-open within 40 s\n{}",
            db.xbr_log()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let _ = db.vsctl(&["del-br", &bridge]);
    assert!(
        (Duration::from_secs(20)..Duration::from_secs(26)).contains(&opened),
        "fail-open after {opened:?}, want 21 s\n{}",
        db.xbr_log()
    );
    let log = db.xbr_log();
    let line = log
        .lines()
        .find(|l| l.contains("entering fail-open mode"))
        .unwrap_or_default();
    assert!(line.trim_end().ends_with("21s"), "{line}");
    Ok(())
}
