//! The database's `Controller` status columns (`is_connected`, `role`,
//! `status`) as ovs-vswitchd 3.1 writes them, for the same sequence of
//! `ovs-vsctl` commands run against xbr and against ovs-vswitchd: an
//! active controller that answers HELLO and echo requests, with a
//! packet-in rate limit (connected, role `other`, state ACTIVE, its
//! packet-in queues' `packet-in-{miss,action}-*` counters), an active
//! target nobody listens on (not connected, BACKOFF, `last_error`
//! "Connection refused"), and a passive target (nothing).
//!
//! Bridge rows naming what xbr does not carry out (sFlow, NetFlow,
//! IPFIX) are logged and shown in the Bridge's `status`.
//!
//! Needs root, a built `xbr`, ovsdb-server and ovs-vswitchd (OVS 3.1),
//! like tests/ovsdb.rs.

use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use xbr_tests::openflow::{OFPT_ECHO_REPLY, OFPT_ECHO_REQUEST};
use xbr_tests::ovsdb::OvsDb;
use xbr_tests::played_controller::{Heard, PlayedController};
use xbr_tests::{unique_tag, Result};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Plays the controller on `listener`: accepts the switch's connection,
/// answers its HELLO with OpenFlow 1.3's and each ECHO_REQUEST with a
/// reply (so the inactivity probe keeps it), until `stop`.
fn play_controller(
    listener: TcpListener,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<xbr_tests::Result<()>> {
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut c = PlayedController::accept(&listener, deadline, || stop.load(Ordering::Relaxed))?;
        while !stop.load(Ordering::Relaxed) {
            match c.hear()? {
                Heard::Closed => return Ok(()),
                Heard::Message(mut m) if m[1] == OFPT_ECHO_REQUEST => {
                    m[1] = OFPT_ECHO_REPLY;
                    c.send(&m)?;
                }
                Heard::Message(_) | Heard::Quiet => {}
            }
        }
        Ok(())
    })
}

/// The Controller rows, sorted, with the ports named and the seconds
/// left out (they differ by when the two switches were asked).
fn controllers(db: &OvsDb, names: &[(u16, &str)]) -> Result<String> {
    let out = db
        .vsctl(&[
            "--format=csv",
            "--no-headings",
            "--columns=target,is_connected,role,status",
            "list",
            "Controller",
        ])?
        .ok()?;
    let mut rows: Vec<String> = out
        .stdout
        .lines()
        .map(|l| {
            let mut l = l.to_string();
            for (port, name) in names {
                l = l.replace(&port.to_string(), name);
            }
            // sec_since_connect="3" -> sec_since_connect=N
            let mut out = String::new();
            let mut rest = l.as_str();
            while let Some(i) = rest.find("sec_since_") {
                let (head, tail) = rest.split_at(i);
                out.push_str(head);
                let key_end = tail.find('=').unwrap_or(tail.len());
                out.push_str(&tail[..key_end]);
                out.push_str("=N");
                let after = &tail[key_end..];
                let skip = after
                    .char_indices()
                    .skip(1)
                    .find(|(_, c)| *c == ',' || *c == '}')
                    .map_or(after.len(), |(j, _)| j);
                rest = &after[skip..];
            }
            out.push_str(rest);
            out
        })
        .collect();
    rows.sort();
    Ok(rows.join("\n"))
}

/// Runs the sequence against one switch; returns the rows once the
/// active controller shows connected and the dead one its error (or
/// what they are after 20 s).
fn run(ovs: bool) -> Result<String> {
    let bridge = format!("xbrt{}", unique_tag());
    let active = TcpListener::bind("127.0.0.1:0").expect("listener");
    let active_port = active.local_addr().expect("address").port();
    let (dead_port, passive_port) = (free_port(), free_port());
    let mut db = OvsDb::start(None)?;
    if ovs {
        db.start_vswitchd()?;
    } else {
        db.start_xbr()?;
    }
    let mut add = vec!["add-br", &bridge];
    if ovs {
        add.extend(["--", "set", "Bridge", &bridge, "datapath_type=netdev"]);
    }
    db.vsctl(&add)?.ok()?;
    let targets = [
        format!("tcp:127.0.0.1:{active_port}"),
        format!("tcp:127.0.0.1:{dead_port}"),
        format!("ptcp:{passive_port}:127.0.0.1"),
    ];
    // The three Controller rows as `set-controller` makes them, the
    // active one with a packet-in rate limit (both switches then report
    // its packet-in queues' counters), in one transaction: a later change
    // of the row would make the switch reconnect, and the played
    // controller accepts one connection.
    let quoted: Vec<String> = targets.iter().map(|t| format!("target=\"{t}\"")).collect();
    db.vsctl(&[
        "--",
        "--id=@a",
        "create",
        "Controller",
        &quoted[0],
        "controller_rate_limit=100",
        "controller_burst_limit=25",
        "--",
        "--id=@d",
        "create",
        "Controller",
        &quoted[1],
        "--",
        "--id=@p",
        "create",
        "Controller",
        &quoted[2],
        "--",
        "add",
        "Bridge",
        &bridge,
        "controller",
        "@a",
        "@d",
        "@p",
    ])?
    .ok()?;
    let stop = Arc::new(AtomicBool::new(false));
    let controller = play_controller(active, stop.clone());
    let names = [
        (active_port, "ACTIVE_PORT"),
        (dead_port, "DEAD_PORT"),
        (passive_port, "PASSIVE_PORT"),
    ];
    let deadline = Instant::now() + Duration::from_secs(20);
    let rows = loop {
        let rows = controllers(&db, &names)?;
        let settled =
            rows.contains("ACTIVE_PORT\"\"\",true,other,") && rows.contains("Connection refused");
        if settled || Instant::now() > deadline {
            break rows;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    stop.store(true, Ordering::Relaxed);
    let played = controller.join().expect("the controller thread panicked");
    assert!(
        played.is_ok(),
        "playing the controller: {played:?}\n{}",
        db.xbr_log()
    );
    let _ = db.vsctl(&["del-br", &bridge]);
    Ok(rows)
}

#[test]
fn controller_status_columns_are_written_as_ovs_vswitchd_writes_them() -> Result<()> {
    let ovs = run(true)?;
    let xbr = run(false)?;
    // The dead target alternates between trying and waiting.
    let settle = |s: &str| s.replace("state=CONNECTING", "state=BACKOFF");
    assert_eq!(
        settle(&xbr),
        settle(&ovs),
        "xbr:\n{xbr}\novs-vswitchd:\n{ovs}"
    );
    assert!(xbr.contains("ACTIVE_PORT\"\"\",true,other,"), "{xbr}");
    assert!(xbr.contains("packet-in-miss-queued"), "{xbr}");
    Ok(())
}

/// Waits (bounded) until `get Bridge BR status` is `want`.
fn wait_status(db: &OvsDb, bridge: &str, want: &str) -> Result<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = db.vsctl(&["get", "Bridge", bridge, "status"])?.ok()?.stdout;
        if got.trim() == want || Instant::now() > deadline {
            return Ok(got.trim().to_string());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn sflow_xbr_does_not_carry_out_and_a_mirror_it_cannot_are_logged_and_shown() -> Result<()> {
    // sFlow goes to Bridge status; a Mirror row (now carried out) that
    // names no output port is refused in the log.
    sflow_and_mirror()
}

fn sflow_and_mirror() -> Result<()> {
    let bridge = format!("xbrt{}", unique_tag());
    let mut db = OvsDb::start(None)?;
    db.start_xbr()?;
    db.vsctl(&["add-br", &bridge])?.ok()?;
    assert_eq!(wait_status(&db, &bridge, "{}")?, "{}");
    db.vsctl(&[
        "--",
        "--id=@s",
        "create",
        "sFlow",
        "agent=lo",
        "target=\"127.0.0.1:6343\"",
        "--",
        "set",
        "Bridge",
        &bridge,
        "sflow=@s",
        "--",
        "--id=@m",
        "create",
        "Mirror",
        "name=m0",
        "select_all=true",
        "--",
        "add",
        "Bridge",
        &bridge,
        "mirrors",
        "@m",
    ])?
    .ok()?;
    let want = "{xbr_unsupported=sflow}";
    assert_eq!(wait_status(&db, &bridge, want)?, want, "{}", db.xbr_log());
    assert!(
        db.xbr_log()
            .contains("not supported by xbr, ignored: sflow"),
        "{}",
        db.xbr_log()
    );
    assert!(
        db.xbr_log()
            .contains("mirror not carried out: no output_port"),
        "{}",
        db.xbr_log()
    );
    db.vsctl(&["clear", "Bridge", &bridge, "sflow", "mirrors"])?
        .ok()?;
    assert_eq!(wait_status(&db, &bridge, "{}")?, "{}");
    db.vsctl(&["del-br", &bridge])?.ok()?;
    Ok(())
}
