//! Controller rows changed while the switch runs, as ovs-vswitchd 3.1
//! carries the change out, in place:
//! - `ovs-vsctl set-controller` dropping one of two active targets closes
//!   that controller's connection only; the other controller and a
//!   connection to the bridge's passive `ptcp:` target stay up;
//! - moving the passive target to another port closes the connections
//!   the old one accepted and listens on the new one; the controller and
//!   a connection to the management socket (`BRIDGE.mgmt`) stay up;
//! - a new `inactivity_probe` for the controller is taken on its live
//!   connection, which stays up; a new one for the passive target is
//!   taken by the connection it accepted before (probed once the probe
//!   goes from off to 5 s).
//!
//! xbr restarted its whole OpenFlow server for both, the management
//! socket included, before it changed them in place too. The same
//! commands run against xbr and against ovs-vswitchd, and both must end
//! the same way.
//!
//! Needs root, a built `xbr`, ovsdb-server and ovs-vswitchd (OVS 3.1),
//! like tests/ovsdb.rs.

use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};
use xbr_tests::openflow::{OFPT_ECHO_REPLY, OFPT_ECHO_REQUEST};
use xbr_tests::ovsdb::OvsDb;
use xbr_tests::played_controller::{Heard, PlayedController};
use xbr_tests::{free_local_port, unique_tag, HarnessError, Result};

/// Bound on the switch connecting to each controller.
const CONNECT_WAIT: Duration = Duration::from_secs(20);
/// How long the connections are watched after the change: long enough
/// for a restart to show, short of any probe (they answer echoes anyway).
const WATCH: Duration = Duration::from_secs(4);

/// Which connections were still up after each change.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    /// After one of the two active targets went.
    kept_controller_up: bool,
    removed_controller_up: bool,
    passive_connection_up: bool,
    /// After the passive target moved to another port.
    controller_up_after_move: bool,
    old_passive_connection_up: bool,
    management_connection_up: bool,
    new_passive_target_answers: bool,
    /// After the controller's `inactivity_probe` changed.
    controller_up_after_probe_change: bool,
    /// After the passive target's `inactivity_probe` went from 0 (off)
    /// to 5 s: its connection made before is probed, and stays up.
    passive_probed_after_probe_change: bool,
    passive_up_after_probe_change: bool,
}

/// What one connection did while watched.
#[derive(Clone, Copy, Debug)]
struct Seen {
    open: bool,
    probed: bool,
}

/// Reads what the switch sends on each of `conns` for `d`, answering
/// echo requests; returns which are still open.
fn watch(conns: &mut [PlayedController], d: Duration) -> Result<Vec<bool>> {
    Ok(watch_until(conns, d, |_| false)?
        .iter()
        .map(|s| s.open)
        .collect())
}

/// [`watch`], telling also which were probed, until `d` has passed or
/// `enough` says so.
fn watch_until(
    conns: &mut [PlayedController],
    d: Duration,
    enough: impl Fn(&[Seen]) -> bool,
) -> Result<Vec<Seen>> {
    let mut seen = vec![
        Seen {
            open: true,
            probed: false
        };
        conns.len()
    ];
    let until = Instant::now() + d;
    while Instant::now() < until && !enough(&seen) {
        for (c, s) in conns.iter_mut().zip(seen.iter_mut()) {
            if !s.open {
                continue;
            }
            match c.hear()? {
                Heard::Closed => s.open = false,
                Heard::Message(m) if m[1] == OFPT_ECHO_REQUEST => {
                    s.probed = true;
                    let mut reply = m.clone();
                    reply[1] = OFPT_ECHO_REPLY;
                    c.send(&reply)?;
                }
                Heard::Message(_) | Heard::Quiet => {}
            }
        }
    }
    Ok(seen)
}

/// The `_uuid` of the Controller row of `target`.
fn controller_uuid(db: &OvsDb, target: &str) -> Result<String> {
    Ok(db
        .vsctl(&[
            "--bare",
            "--columns=_uuid",
            "find",
            "Controller",
            &format!("target=\"{target}\""),
        ])?
        .ok()?
        .stdout
        .trim()
        .to_string())
}

fn run(ovs: bool) -> Result<Outcome> {
    let bridge = format!("xbrt{}", unique_tag());
    let kept = TcpListener::bind("127.0.0.1:0").expect("listener");
    let removed = TcpListener::bind("127.0.0.1:0").expect("listener");
    let port = |l: &TcpListener| l.local_addr().expect("address").port();
    // Only reserved here, for the switch to listen on.
    let (passive_port, moved_port) = (free_local_port()?, free_local_port()?);
    let db = OvsDb::with_switch(ovs)?;
    db.add_bridge(&bridge, ovs)?;
    let kept_target = format!("tcp:127.0.0.1:{}", port(&kept));
    let removed_target = format!("tcp:127.0.0.1:{}", port(&removed));
    let passive_target = format!("ptcp:{passive_port}:127.0.0.1");
    let moved_target = format!("ptcp:{moved_port}:127.0.0.1");
    let result = (|| {
        db.vsctl(&[
            "set-controller",
            &bridge,
            &kept_target,
            &removed_target,
            &passive_target,
        ])?
        .ok()?;
        let deadline = Instant::now() + CONNECT_WAIT;
        let mut conns = vec![
            PlayedController::accept(&kept, deadline, || false)?,
            PlayedController::accept(&removed, deadline, || false)?,
            PlayedController::connect(SocketAddr::from(([127, 0, 0, 1], passive_port)), deadline)?,
        ];
        let before = watch(&mut conns, Duration::from_secs(1))?;
        if before != [true, true, true] {
            return Err(HarnessError::Unexpected(format!(
                "a connection closed before the change: {before:?}"
            )));
        }
        db.vsctl(&["set-controller", &bridge, &kept_target, &passive_target])?
            .ok()?;
        let after = watch(&mut conns, WATCH)?;
        // Then the passive target moves, while a management connection
        // is open.
        let mut left = conns.into_iter();
        let (kept_conn, _removed, passive_conn) = (left.next(), left.next(), left.next());
        let mut conns = vec![
            kept_conn.expect("three connections"),
            passive_conn.expect("three connections"),
            PlayedController::connect_unix(&db.run_dir().join(format!("{bridge}.mgmt")))?,
        ];
        db.vsctl(&["set-controller", &bridge, &kept_target, &moved_target])?
            .ok()?;
        let moved = watch(&mut conns, WATCH)?;
        // The new passive target's probe is turned off before a
        // connection is made to it.
        let moved_uuid = controller_uuid(&db, &moved_target)?;
        db.vsctl(&["set", "Controller", &moved_uuid, "inactivity_probe=0"])?
            .ok()?;
        let mut fresh = PlayedController::connect(
            SocketAddr::from(([127, 0, 0, 1], moved_port)),
            Instant::now() + Duration::from_secs(5),
        );
        let answers = match &mut fresh {
            Ok(c) => watch(std::slice::from_mut(c), Duration::from_secs(1))?[0],
            Err(_) => false,
        };
        let passive = fresh?;
        // Then the controller's row gets an inactivity probe of its own,
        // and the passive target's probe is turned on (OVS's least, 5 s).
        let kept_uuid = controller_uuid(&db, &kept_target)?;
        db.vsctl(&[
            "set",
            "Controller",
            &kept_uuid,
            "inactivity_probe=7000",
            "--",
            "set",
            "Controller",
            &moved_uuid,
            "inactivity_probe=5000",
        ])?
        .ok()?;
        let mut conns = vec![conns.swap_remove(0), passive];
        // At least 2 s, for a cut to show; the passive connection's
        // probe comes within 5 s of its last message, and a read tick.
        let started = Instant::now();
        let probed = watch_until(&mut conns, Duration::from_secs(8), |seen| {
            seen[1].probed && started.elapsed() >= Duration::from_secs(2)
        })?;
        Ok(Outcome {
            controller_up_after_probe_change: probed[0].open,
            passive_probed_after_probe_change: probed[1].probed,
            passive_up_after_probe_change: probed[1].open,
            kept_controller_up: after[0],
            removed_controller_up: after[1],
            passive_connection_up: after[2],
            controller_up_after_move: moved[0],
            old_passive_connection_up: moved[1],
            management_connection_up: moved[2],
            new_passive_target_answers: answers,
        })
    })();
    let _ = db.vsctl(&["del-br", &bridge]);
    result.map_err(|e: HarnessError| db.with_xbr_log(e))
}

#[test]
fn removing_a_controller_or_moving_the_listener_leaves_the_rest_like_ovs() -> Result<()> {
    // The two switches side by side: each run mostly waits.
    let (ovs, xbr) = std::thread::scope(|s| {
        let ovs = s.spawn(|| run(true));
        let xbr = run(false);
        (ovs.join().expect("the ovs-vswitchd run panicked"), xbr)
    });
    let (ovs, xbr) = (ovs?, xbr?);
    let expected = Outcome {
        kept_controller_up: true,
        removed_controller_up: false,
        passive_connection_up: true,
        controller_up_after_move: true,
        old_passive_connection_up: false,
        management_connection_up: true,
        new_passive_target_answers: true,
        controller_up_after_probe_change: true,
        passive_probed_after_probe_change: true,
        passive_up_after_probe_change: true,
    };
    assert_eq!(ovs, expected, "ovs-vswitchd");
    assert_eq!(xbr, expected, "xbr (ovs-vswitchd: {ovs:?})");
    Ok(())
}
