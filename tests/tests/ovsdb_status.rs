//! The database's `Controller` status columns (`is_connected`, `role`,
//! `status`) as ovs-vswitchd 3.1 writes them, for the same sequence of
//! `ovs-vsctl` commands run against xbr and against ovs-vswitchd: an
//! active controller that answers HELLO and echo requests, with a
//! packet-in rate limit (connected, role `other`, state ACTIVE, its
//! packet-in queues' `packet-in-{miss,action}-*` counters), an active
//! target nobody listens on (not connected, BACKOFF, `last_error`
//! "Connection refused"), and a passive target (nothing).
//!
//! A burst of packet-ins over the limit moves those counters: they
//! agree with what the controller got and with `xbr stats`.
//!
//! Bridge rows naming what xbr does not carry out (sFlow, NetFlow,
//! IPFIX) are logged and shown in the Bridge's `status`.
//!
//! Needs root, a built `xbr`, ovsdb-server and ovs-vswitchd (OVS 3.1),
//! like tests/ovsdb.rs.

use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use xbr_tests::openflow::{
    message, OfConn, OFPT_BARRIER_REPLY, OFPT_BARRIER_REQUEST, OFPT_ECHO_REPLY, OFPT_ECHO_REQUEST,
};
use xbr_tests::ovsdb::OvsDb;
use xbr_tests::played_controller::{Heard, PlayedController};
use xbr_tests::xbr_stats::limit_count;
use xbr_tests::{free_local_port, unique_tag, HarnessError, Pod, Result};

/// OFPT_PACKET_IN, and its reason for a table miss (OFPR_NO_MATCH).
const OFPT_PACKET_IN: u8 = 10;
const OFPR_NO_MATCH: u8 = 0;

/// Plays the controller on `listener`: accepts the switch's connection,
/// answers its HELLO with OpenFlow 1.3's and each ECHO_REQUEST with a
/// reply (so the inactivity probe keeps it), until `stop`; counts the
/// PACKET_INs it gets in `packet_ins` ([table misses, other reasons]).
fn play_controller(
    listener: TcpListener,
    stop: Arc<AtomicBool>,
    packet_ins: Arc<[AtomicU64; 2]>,
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
                // OFPT_PACKET_IN; its reason after buffer_id and total_len.
                Heard::Message(m) if m[1] == OFPT_PACKET_IN && m.len() > 14 => {
                    let kind = usize::from(m[14] != OFPR_NO_MATCH);
                    packet_ins[kind].fetch_add(1, Ordering::Relaxed);
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
    let (dead_port, passive_port) = (free_local_port()?, free_local_port()?);
    let db = OvsDb::with_switch(ovs)?;
    db.add_bridge(&bridge, ovs)?;
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
    let controller = play_controller(active, stop.clone(), Arc::default());
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

/// A Controller row's `status` map as `ovs-vsctl get` prints it, as pairs
/// (no value of the keys read here holds a comma).
fn controller_status(db: &OvsDb, bridge: &str) -> Result<Vec<(String, String)>> {
    let out = db
        .vsctl(&["get", "Controller", bridge, "status"])?
        .ok()?
        .stdout;
    let inner = out.trim().trim_start_matches('{').trim_end_matches('}');
    Ok(inner
        .split(", ")
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            Some((
                k.trim_matches('"').to_string(),
                v.trim_matches('"').to_string(),
            ))
        })
        .collect())
}

/// The value of `key` in a status map, as a number.
fn status_count(status: &[(String, String)], key: &str) -> Option<u64> {
    status.iter().find(|(k, _)| k == key)?.1.parse().ok()
}

/// An OpenFlow 1.3 PACKET_OUT of a 60-byte frame from the controller
/// port, with one OUTPUT action to `port`.
fn packet_out(xid: u32, port: u32) -> Result<Vec<u8>> {
    let mut body = Vec::new();
    body.extend_from_slice(&u32::MAX.to_be_bytes()); // buffer_id: none
    body.extend_from_slice(&0xffff_fffdu32.to_be_bytes()); // in_port CONTROLLER
    body.extend_from_slice(&16u16.to_be_bytes()); // actions_len
    body.extend_from_slice(&[0; 6]);
    body.extend_from_slice(&0u16.to_be_bytes()); // OFPAT_OUTPUT
    body.extend_from_slice(&16u16.to_be_bytes());
    body.extend_from_slice(&port.to_be_bytes());
    body.extend_from_slice(&0xffffu16.to_be_bytes()); // max_len: all
    body.extend_from_slice(&[0; 6]);
    body.extend_from_slice(&frame());
    message(13, xid, &body)
}

/// A 60-byte Ethernet broadcast from 02:00:00:00:00:01, type 0x88b5
/// (local experimental).
fn frame() -> Vec<u8> {
    let mut frame = vec![0xff; 6];
    frame.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x88, 0xb5]);
    frame.resize(60, 0);
    frame
}

#[test]
fn packet_in_queue_counters_move_with_a_burst_over_the_rate_limit() -> Result<()> {
    let bridge = format!("xbrt{}", unique_tag());
    let listener = TcpListener::bind("127.0.0.1:0").expect("listener");
    let port = listener.local_addr().expect("address").port();
    let mut db = OvsDb::start(None)?;
    db.start_xbr()?;
    db.vsctl(&["add-br", &bridge])?.ok()?;
    let target = format!("tcp:127.0.0.1:{port}");
    db.vsctl(&[
        "set-controller",
        &bridge,
        &target,
        "--",
        "set",
        "Controller",
        &bridge,
        "controller_rate_limit=100",
        "controller_burst_limit=25",
    ])?
    .ok()?;
    let stop = Arc::new(AtomicBool::new(false));
    let got: Arc<[AtomicU64; 2]> = Default::default();
    let controller = play_controller(listener, stop.clone(), got.clone());
    let kinds = ["miss", "action"];
    let key = |kind: &str, what: &str| format!("packet-in-{kind}-{what}");
    // Connected, and the counters are there at 0 (the status is written
    // every 5 s).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let st = controller_status(&db, &bridge)?;
        let zero = kinds.iter().all(|k| {
            ["backlog", "bypassed", "queued", "dropped"]
                .iter()
                .all(|w| status_count(&st, &key(k, w)) == Some(0))
        });
        if zero && st.iter().any(|(k, v)| k == "state" && v == "ACTIVE") {
            break;
        }
        if Instant::now() > deadline {
            return Err(HarnessError::Unexpected(format!(
                "controller status never ACTIVE with zero packet-in counters: {st:?}\n{}",
                db.xbr_log()
            )));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    // Table misses go to the controller: a pod sends 200 frames that
    // miss, and 200 packet-outs output to the controller (reason
    // ACTION), at once: far over 100/s with a burst of 25.
    let pod = Pod::numbered(2)?;
    db.vsctl(&["add-port", &bridge, pod.host_if()])?.ok()?;
    db.ofctl(&["add-flow", &bridge, "priority=0,actions=controller"])?
        .ok()?;
    let sent = 200u64;
    pod.send_raw(&frame(), sent)?;
    let mgmt = db.run_dir().join(format!("{bridge}.mgmt"));
    let mut of = OfConn::connect_hello(&mgmt)?;
    let mut burst = Vec::new();
    for i in 0..sent as u32 {
        burst.extend(packet_out(i + 10, 0xffff_fffd)?);
    }
    burst.extend(message(OFPT_BARRIER_REQUEST, 7, &[])?);
    of.send(&burst)?;
    loop {
        let m = of.recv_message()?;
        if m.msg_type == OFPT_BARRIER_REPLY {
            break;
        }
        assert!(m.error().is_none(), "packet-out refused: {m:?}");
    }
    // Once the queues drained (backlog 0) and the status is written
    // again, each kind's figures add up: what bypassed the queue and
    // what left it reached the controller, the rest was dropped.
    let deadline = Instant::now() + Duration::from_secs(20);
    let (st, received) = loop {
        let st = controller_status(&db, &bridge)?;
        let received = [0, 1].map(|i| got[i].load(Ordering::Relaxed));
        let settled = kinds.iter().zip(received).all(|(k, r)| {
            let n = |w: &str| status_count(&st, &key(k, w)).unwrap_or(0);
            n("backlog") == 0 && n("dropped") > 0 && n("bypassed") + n("queued") - n("dropped") == r
        });
        if settled || Instant::now() > deadline {
            break (st, received);
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    stop.store(true, Ordering::Relaxed);
    let played = controller.join().expect("the controller thread panicked");
    assert!(played.is_ok(), "playing the controller: {played:?}");
    let stats = db.xbr_stats(&bridge)?;
    let mut dropped = 0;
    for (k, r) in kinds.iter().zip(received) {
        let n = |w: &str| status_count(&st, &key(k, w)).unwrap_or(0);
        let why = format!("{k}: status {st:?}, controller got {received:?}\n{stats}");
        assert_eq!(n("backlog"), 0, "{why}");
        // The burst went at once; past it, packet-ins were queued, and
        // the full queue dropped some.
        assert!(n("bypassed") >= 25, "{why}");
        assert!(n("queued") >= 25 && n("dropped") > 0, "{why}");
        // Every packet-out's; every frame of the pod's (and what the
        // bridge's internal port sent meanwhile).
        if *k == "action" {
            assert_eq!(n("bypassed") + n("queued"), sent, "{why}");
        } else {
            assert!(n("bypassed") + n("queued") >= sent, "{why}");
        }
        assert_eq!(n("bypassed") + n("queued") - n("dropped"), r, "{why}");
        dropped += n("dropped");
    }
    // xbr stats counts the same drops, both kinds together.
    assert_eq!(
        limit_count(&stats, "packet_ins_rate_limited"),
        dropped,
        "{stats}"
    );
    // The columns are carried out, not logged as unsupported.
    let log = db.xbr_log();
    assert!(!log.contains("controller_rate_limit: "), "{log}");
    let _ = db.vsctl(&["del-br", &bridge]);
    Ok(())
}
