//! The control plane's bounds (`ofproto::limits`): each hit as a peer
//! sees it (the OpenFlow error, a closed connection) and as the
//! counters `xbr stats` reports count it, with the switch still serving
//! everyone else.

mod common;
use common::{read_msg, Harness};
use ofproto::limits::{ControlLimits, LimitStats, PacketInLimit};
use ofproto::wire::message::split;
use ofproto::wire::packet_io::PacketIn;
use ofproto::wire::{Message, ONF_VENDOR_ID};
use ofproto::WantedController;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// Bound on any single wait in these tests.
const WAIT: Duration = Duration::from_secs(10);

fn recv(s: &mut impl Read) -> (u32, Message) {
    let m = read_msg(s).expect("a message from the switch");
    let (h, body) = split(&m).unwrap();
    (h.xid, Message::parse(&h, body).unwrap())
}

fn hello(s: &mut (impl Read + Write)) {
    s.write_all(&Message::Hello { bitmap: Some(0x10) }.emit(1))
        .unwrap();
    assert!(matches!(recv(s).1, Message::Hello { .. }));
}

fn connect(h: &Harness) -> UnixStream {
    let s = UnixStream::connect(&h.sock).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    s
}

/// A connection that said HELLO and answers an echo.
fn talking(h: &Harness) -> UnixStream {
    let mut s = connect(h);
    hello(&mut s);
    assert_alive(&mut s);
    s
}

/// The switch answers an echo (its own inactivity probes answered on
/// the way).
fn assert_alive(s: &mut UnixStream) {
    s.write_all(&Message::EchoRequest(vec![7]).emit(77))
        .unwrap();
    loop {
        match recv(s) {
            (xid, Message::EchoRequest(d)) => {
                s.write_all(&Message::EchoReply(d).emit(xid)).unwrap();
            }
            m => return assert_eq!(m, (77, Message::EchoReply(vec![7]))),
        }
    }
}

/// Waits (bounded) until the switch hangs up on `s`, skipping what it
/// sent before; how long that took.
fn wait_closed(s: &mut impl Read) -> Duration {
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return start.elapsed(),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return start.elapsed(),
            Err(e) => panic!("the switch did not hang up: {e}"),
        }
        assert!(start.elapsed() < WAIT, "the switch did not hang up");
    }
}

fn with_limits(h: &Harness, f: impl FnOnce(&mut ControlLimits)) {
    let mut l = h.bridge.control_limits();
    f(&mut l);
    h.bridge.set_control_limits(l);
}

fn count(c: &AtomicU64) -> u64 {
    c.load(Relaxed)
}

fn stats(h: &Harness) -> &LimitStats {
    h.bridge.limit_stats()
}

#[test]
fn a_silent_peer_is_dropped_after_the_hello_timeout() {
    let h = Harness::start("lim-silent");
    let mut silent: Vec<UnixStream> = (0..20).map(|_| connect(&h)).collect();
    let mut talker = talking(&h);
    for s in &mut silent {
        let took = wait_closed(s);
        assert!(took < Duration::from_secs(5), "closed after {took:?}");
    }
    assert_eq!(count(&stats(&h).hello_timeouts), 20);
    // A peer that spoke is not subject to it.
    std::thread::sleep(Duration::from_millis(1500));
    assert_alive(&mut talker);
}

#[test]
fn an_idle_peer_is_probed_then_dropped_and_one_that_answers_stays() {
    let h = Harness::start("lim-probe");
    with_limits(&h, |l| l.mgmt_probe = Duration::from_millis(400));
    let mut mute = talking(&h);
    let mut answering = talking(&h);
    let (xid, m) = recv(&mut answering);
    assert_eq!(m, Message::EchoRequest(Vec::new()));
    answering
        .write_all(&Message::EchoReply(Vec::new()).emit(xid))
        .unwrap();
    assert_eq!(recv(&mut mute).1, Message::EchoRequest(Vec::new()));
    wait_closed(&mut mute);
    assert_eq!(count(&stats(&h).probe_timeouts), 1);
    assert_alive(&mut answering);
}

#[test]
fn a_message_trickling_in_is_given_two_probe_intervals() {
    let h = Harness::start("lim-trickle");
    with_limits(&h, |l| l.mgmt_probe = Duration::from_millis(300));
    let mut s = talking(&h);
    // An ECHO_REQUEST one byte every 100 ms: never silent for a probe
    // interval, never done.
    let start = Instant::now();
    for b in Message::EchoRequest(vec![0; 64]).emit(5) {
        if s.write_all(&[b]).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    wait_closed(&mut s);
    assert!(start.elapsed() < Duration::from_secs(5));
    assert_eq!(count(&stats(&h).message_timeouts), 1);
}

#[test]
fn the_connection_past_the_limit_is_refused_while_the_others_work() {
    let h = Harness::start("lim-conns");
    with_limits(&h, |l| l.max_connections = 3);
    let mut three: Vec<UnixStream> = (0..3).map(|_| talking(&h)).collect();
    let mut fourth = connect(&h);
    wait_closed(&mut fourth);
    assert_eq!(count(&stats(&h).connections_refused), 1);
    for s in &mut three {
        assert_alive(s);
    }
    // A slot freed is a slot for the next peer.
    drop(three.pop());
    let start = Instant::now();
    loop {
        let mut s = connect(&h);
        // Refused (the slot not freed yet): the write or the read fails.
        let hello = Message::Hello { bitmap: Some(0x10) }.emit(1);
        if s.write_all(&hello).is_ok() && read_msg(&mut s).is_some() {
            assert_alive(&mut s);
            break;
        }
        assert!(start.elapsed() < WAIT, "no slot was freed");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// An ONF bundle control message (OpenFlow 1.3).
fn bundle_control(xid: u32, id: u32, ty: u16) -> Vec<u8> {
    let mut data = id.to_be_bytes().to_vec();
    data.extend_from_slice(&ty.to_be_bytes());
    data.extend_from_slice(&0u16.to_be_bytes());
    Message::Experimenter {
        experimenter: ONF_VENDOR_ID,
        exp_type: 2300,
        data,
    }
    .emit(xid)
}

/// An ONF bundle add of a FLOW_MOD adding a flow matching in_port `n`.
fn bundle_add(xid: u32, id: u32, n: u32) -> Vec<u8> {
    let mut m = flowtable::Match::catch_all();
    m.set_exact(flowtable::Field::InPort, u64::from(n));
    let fm = flowtable::FlowMod::add(0, 100, m, flowtable::Instructions::default());
    let mut data = id.to_be_bytes().to_vec();
    data.extend_from_slice(&[0, 0, 0, 0]);
    data.extend_from_slice(&Message::FlowMod(fm).emit(xid + 1000));
    Message::Experimenter {
        experimenter: ONF_VENDOR_ID,
        exp_type: 2301,
        data,
    }
    .emit(xid)
}

/// The ONF experimenter error code of a message (OFPBFC_* as 2300 + n).
fn bundle_error(m: Message) -> u16 {
    match m {
        Message::ExperimenterError {
            exp_type,
            experimenter,
            ..
        } if experimenter == ONF_VENDOR_ID => exp_type,
        other => panic!("expected a bundle error, got {other:?}"),
    }
}

#[test]
fn bundles_past_their_limits_get_ovs_errors_and_change_nothing() {
    let h = Harness::start("lim-bundles");
    with_limits(&h, |l| {
        l.max_bundles = 2;
        l.max_bundle_msgs = 3;
    });
    let mut s = talking(&h);
    for (xid, id) in [(1, 1), (2, 2)] {
        s.write_all(&bundle_control(xid, id, 0)).unwrap();
        assert!(matches!(recv(&mut s), (x, Message::Experimenter { .. }) if x == xid));
    }
    // A third bundle, by OPEN or by an ADD naming it: OUT_OF_BUNDLES.
    s.write_all(&bundle_control(4, 3, 0)).unwrap();
    assert_eq!(bundle_error(recv(&mut s).1), 2305);
    s.write_all(&bundle_add(5, 3, 1)).unwrap();
    assert_eq!(bundle_error(recv(&mut s).1), 2305);
    assert_eq!(count(&stats(&h).bundles_refused), 2);
    // Three messages over both bundles, then MSG_TOO_MANY; the bundle's
    // commit fails and the tables stay as they were.
    for (xid, id, n) in [(10, 1, 1), (11, 2, 2), (12, 1, 3)] {
        s.write_all(&bundle_add(xid, id, n)).unwrap();
    }
    s.write_all(&bundle_add(13, 1, 4)).unwrap();
    let (xid, m) = recv(&mut s);
    assert_eq!((xid, bundle_error(m)), (13, 2312));
    s.write_all(&bundle_control(14, 1, 4)).unwrap();
    let (xid, m) = recv(&mut s);
    assert_eq!((xid, bundle_error(m)), (14, 2313), "MSG_FAILED");
    assert_eq!(h.bridge.with_tables(|t| t.n_rules()), 0);
    assert_eq!(count(&stats(&h).bundle_msgs_refused), 1);
    // The committed bundle's messages left the count: bundle 2 commits.
    s.write_all(&bundle_add(15, 2, 5)).unwrap();
    s.write_all(&bundle_control(16, 2, 4)).unwrap();
    assert_eq!(recv(&mut s).0, 16);
    assert_eq!(h.bridge.with_tables(|t| t.n_rules()), 2);
}

#[test]
fn an_idle_bundle_expires_with_ofpbfc_timeout() {
    let h = Harness::start("lim-bundle-idle");
    with_limits(&h, |l| l.bundle_idle_timeout = Duration::from_secs(1));
    let mut s = talking(&h);
    s.write_all(&bundle_control(21, 9, 0)).unwrap();
    assert_eq!(recv(&mut s).0, 21);
    s.write_all(&bundle_add(22, 9, 1)).unwrap();
    let start = Instant::now();
    let (xid, m) = recv(&mut s);
    assert_eq!((xid, bundle_error(m)), (21, 2314), "for the OPEN");
    assert!(start.elapsed() < Duration::from_secs(5));
    assert_eq!(count(&stats(&h).bundles_expired), 1);
    s.write_all(&bundle_control(23, 9, 4)).unwrap();
    assert_eq!(bundle_error(recv(&mut s).1), 2302, "BAD_ID: it is gone");
    assert_eq!(h.bridge.with_tables(|t| t.n_rules()), 0);
}

#[test]
fn a_bundle_expires_while_its_connection_keeps_talking() {
    // OVS times a bundle from its own last use: other traffic on the
    // connection does not keep it open.
    let h = Harness::start("lim-bundle-busy");
    with_limits(&h, |l| l.bundle_idle_timeout = Duration::from_secs(1));
    let mut s = talking(&h);
    s.write_all(&bundle_control(31, 7, 0)).unwrap();
    assert_eq!(recv(&mut s).0, 31);
    let start = Instant::now();
    // An echo every 100 ms: the connection is never idle.
    let expired = loop {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the bundle outlived 5 s of other traffic"
        );
        s.write_all(&Message::EchoRequest(vec![1]).emit(99))
            .unwrap();
        match recv(&mut s) {
            (99, Message::EchoReply(_)) => {}
            (xid, Message::EchoRequest(d)) => {
                s.write_all(&Message::EchoReply(d).emit(xid)).unwrap();
            }
            (xid, m) => break (xid, bundle_error(m)),
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(expired, (31, 2314), "OFPBFC_TIMEOUT for the OPEN");
    assert!(start.elapsed() >= Duration::from_secs(1));
    assert_eq!(count(&stats(&h).bundles_expired), 1);
}

#[test]
fn table_full_at_the_flow_limit_and_the_overall_limit() {
    let h = Harness::start("lim-table-full");
    h.bridge.set_flow_limit(0, Some(2));
    h.ok(&["add-flow", &h.target(), "table=0,in_port=1,actions=drop"]);
    h.ok(&["add-flow", &h.target(), "table=0,in_port=2,actions=drop"]);
    let (ok, _, err) = h.ofctl(&["add-flow", &h.target(), "table=0,in_port=3,actions=drop"]);
    assert!(!ok && err.contains("OFPFMFC_TABLE_FULL"), "{err}");
    // Replacing a flow is not adding one.
    h.ok(&[
        "add-flow",
        &h.target(),
        "table=0,in_port=1,actions=output:2",
    ]);
    h.bridge.set_max_flows(3);
    h.ok(&["add-flow", &h.target(), "table=1,in_port=1,actions=drop"]);
    let (ok, _, err) = h.ofctl(&["add-flow", &h.target(), "table=2,in_port=1,actions=drop"]);
    assert!(!ok && err.contains("OFPFMFC_TABLE_FULL"), "{err}");
    assert_eq!(count(&stats(&h).table_full), 2);
    assert_eq!(h.bridge.with_tables(|t| t.n_rules()), 3);
}

/// A controller the harness's switch connects to, HELLOs exchanged and a
/// barrier answered (registered for asynchronous messages).
fn controller(h: &mut Harness, probe: Duration, pin: Option<PacketInLimit>) -> TcpStream {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    h.server
        .as_mut()
        .unwrap()
        .add_controller(l.local_addr().unwrap(), probe, pin)
        .unwrap();
    let (mut c, _) = l.accept().unwrap();
    c.set_read_timeout(Some(WAIT)).unwrap();
    hello(&mut c);
    c.write_all(&Message::BarrierRequest.emit(0xbb)).unwrap();
    assert_eq!(recv(&mut c), (0xbb, Message::BarrierReply));
    c
}

/// Reads packet-ins until none comes for `quiet`; returns their first
/// data bytes in order of arrival.
fn packet_ins_until_quiet(c: &mut TcpStream, quiet: Duration) -> Vec<u8> {
    c.set_read_timeout(Some(quiet)).unwrap();
    let mut got = Vec::new();
    while let Some(m) = read_msg(c) {
        let (h, body) = split(&m).unwrap();
        match Message::parse(&h, body).unwrap() {
            Message::PacketIn(pi) => got.push(pi.data[0]),
            other => panic!("unexpected {other:?}"),
        }
    }
    c.set_read_timeout(Some(WAIT)).unwrap();
    got
}

#[test]
fn packet_ins_over_the_rate_are_queued_per_port_and_drained_as_ovs_does() {
    let mut h = Harness::start("lim-pin-rate");
    let limit = PacketInLimit::from_columns(Some(100), Some(5)).unwrap();
    let mut c = controller(&mut h, Duration::from_secs(5), Some(limit));
    // Port 3 floods (data 0xab); then port 7 sends one (0x77).
    for _ in 0..200 {
        h.bridge
            .packet_in(PacketIn::new(3, 0, 1, 0, 0, 60, vec![0xab; 60]));
    }
    h.bridge
        .packet_in(PacketIn::new(7, 0, 1, 0, 0, 60, vec![0x77; 60]));
    // The burst goes at once, the queue (the burst's size again) drains
    // at the rate: every packet-in is sent or counted as dropped.
    let got = packet_ins_until_quiet(&mut c, Duration::from_millis(500));
    let dropped = count(&stats(&h).packet_ins_rate_limited);
    assert_eq!(got.len() as u64 + dropped, 201, "{got:?}");
    assert!((10..=14).contains(&got.len()), "{} packet-ins", got.len());
    // The full queue dropped the flooding port's oldest, not port 7's one.
    assert!(got.contains(&0x77), "{got:x?}");
    let queues = h.bridge.notifier().packet_in_queue_stats();
    let [_, action] = &queues[0].1;
    assert_eq!(action.dropped.load(Relaxed), dropped);
    assert_eq!(action.backlog.load(Relaxed), 0);
    // Drained: the bucket refills at the rate and one goes at once.
    std::thread::sleep(Duration::from_millis(100));
    h.bridge
        .packet_in(PacketIn::new(3, 0, 1, 0, 0, 60, vec![0xcd; 60]));
    assert!(matches!(recv(&mut c).1, Message::PacketIn(pi) if pi.data[0] == 0xcd));
}

/// A new `controller_rate_limit` is taken by the live connection, as OVS
/// takes it: an unlimited controller gets a limit (its flood is cut to
/// the burst and the rate) without reconnecting, and its row reports the
/// queues; without the limit again, everything goes through.
#[test]
fn a_new_packet_in_limit_applies_to_the_live_connection() {
    let mut h = Harness::start("lim-pin-live");
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let target = l.local_addr().unwrap();
    let probe = Duration::from_secs(60);
    let wanted = |packet_in_limit| WantedController {
        target,
        tls: None,
        probe,
        packet_in_limit,
    };
    let server = h.server.as_mut().unwrap();
    server.set_controllers(&[wanted(None)]).unwrap();
    let (mut c, _) = l.accept().unwrap();
    c.set_read_timeout(Some(WAIT)).unwrap();
    hello(&mut c);
    c.write_all(&Message::BarrierRequest.emit(0xbb)).unwrap();
    assert_eq!(recv(&mut c), (0xbb, Message::BarrierReply));
    let status = |h: &Harness| {
        h.server
            .as_ref()
            .unwrap()
            .controller_status(target)
            .unwrap()
    };
    assert_eq!(status(&h).packet_ins, None);
    let limit = PacketInLimit::from_columns(Some(100), Some(5)).unwrap();
    h.server
        .as_mut()
        .unwrap()
        .set_controllers(&[wanted(Some(limit))])
        .unwrap();
    // The connection takes it at its next tick (1 s); a barrier makes
    // sure it has read past the change.
    std::thread::sleep(Duration::from_millis(1100));
    c.write_all(&Message::BarrierRequest.emit(0xbc)).unwrap();
    assert_eq!(recv(&mut c), (0xbc, Message::BarrierReply));
    assert!(status(&h).packet_ins.is_some(), "the row reports no queues");
    for _ in 0..200 {
        h.bridge
            .packet_in(PacketIn::new(3, 0, 1, 0, 0, 60, vec![0xab; 60]));
    }
    let got = packet_ins_until_quiet(&mut c, Duration::from_millis(500));
    assert!((10..=14).contains(&got.len()), "{} packet-ins", got.len());
    // The limit lifted: a flood goes through whole, on the same
    // connection.
    h.server
        .as_mut()
        .unwrap()
        .set_controllers(&[wanted(None)])
        .unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    c.write_all(&Message::BarrierRequest.emit(0xbd)).unwrap();
    assert_eq!(recv(&mut c), (0xbd, Message::BarrierReply));
    assert_eq!(status(&h).packet_ins, None);
    for _ in 0..50 {
        h.bridge
            .packet_in(PacketIn::new(3, 0, 1, 0, 0, 60, vec![0xcd; 60]));
    }
    let got = packet_ins_until_quiet(&mut c, Duration::from_millis(500));
    assert_eq!(got.len(), 50);
    // No other connection was made.
    l.set_nonblocking(true).unwrap();
    assert!(l.accept().is_err());
}

#[test]
fn a_controller_that_stops_reading_is_dropped_not_buffered_for() {
    let mut h = Harness::start("lim-backlog");
    // A long probe, so the backlog bound (not the write timeout) acts.
    with_limits(&h, |l| l.max_backlog = 1 << 20);
    let c = controller(&mut h, Duration::from_secs(60), None);
    c.set_read_timeout(Some(WAIT)).unwrap();
    // PORT_STATUS is never dropped for a slow peer, so it queues: far
    // more than the socket buffers and the bound hold together.
    let port = h.dp.ports.lock()[0].clone();
    let start = Instant::now();
    while count(&stats(&h).backlog_overflows) == 0 {
        for _ in 0..1000 {
            h.bridge.notifier().port_status(2, port.clone());
        }
        assert!(start.elapsed() < WAIT, "the backlog never overflowed");
    }
    // The switch hung up (the controller reads what was written, then
    // EOF) and keeps serving others.
    let mut c = c;
    wait_closed(&mut c);
    assert_alive(&mut talking(&h));
}

/// A connection to the harness's passive target that has said HELLO and
/// asked for packet-ins: a service connection hears them once it asks
/// (miss_send_len).
fn passive_listener(h: &Harness) -> TcpStream {
    let server = h.server.as_ref().unwrap();
    let mut c = TcpStream::connect(server.local_tcp_addr().unwrap()).unwrap();
    c.set_read_timeout(Some(WAIT)).unwrap();
    hello(&mut c);
    let config = ofproto::wire::message::SwitchConfig {
        flags: 0,
        miss_send_len: 128,
    };
    c.write_all(&Message::SetConfig(config).emit(2)).unwrap();
    c.write_all(&Message::BarrierRequest.emit(3)).unwrap();
    assert_eq!(recv(&mut c), (3, Message::BarrierReply));
    c
}

#[test]
fn a_passive_controller_on_ptcp_keeps_to_its_rate_limit() {
    let h = Harness::start_passive(
        "lim-ptcp",
        ControlLimits {
            tcp_packet_in: PacketInLimit::from_columns(Some(100), Some(3)),
            ..ControlLimits::default()
        },
    );
    let bridge = &h.bridge;
    let mut c = passive_listener(&h);
    for _ in 0..100 {
        bridge.packet_in(PacketIn::new(3, 0, 1, 0, 0, 60, vec![0xab; 60]));
    }
    // The burst at once, then as many again from the queue at the rate.
    let got = packet_ins_until_quiet(&mut c, Duration::from_millis(500)).len() as u64;
    assert!((6..=9).contains(&got), "{got} packet-ins");
    assert_eq!(
        count(&bridge.limit_stats().packet_ins_rate_limited),
        100 - got
    );
}

/// The passive target's new `controller_rate_limit` and
/// `inactivity_probe` reach the connections it accepted before, as OVS
/// reconfigures each connection of a service: a flood is cut to the new
/// burst and rate, then let through whole once the limit goes, and a
/// silent connection is probed at the new interval, then dropped, all on
/// the connection made before the change.
#[test]
fn a_passive_targets_new_limits_reach_its_live_connections() {
    let minute = Duration::from_secs(60);
    let h = Harness::start_passive(
        "lim-plive",
        ControlLimits {
            tcp_probe: minute,
            ..ControlLimits::default()
        },
    );
    let bridge = &h.bridge;
    let server = h.server.as_ref().unwrap();
    let mut c = passive_listener(&h);
    let flood = |n: usize, byte: u8| {
        for _ in 0..n {
            bridge.packet_in(PacketIn::new(3, 0, 1, 0, 0, 60, vec![byte; 60]));
        }
    };
    // Unlimited at first.
    flood(50, 0xaa);
    assert_eq!(
        packet_ins_until_quiet(&mut c, Duration::from_millis(500)).len(),
        50
    );
    // A limit: taken at the connection's next tick (1 s); a barrier makes
    // sure it has read past the change.
    server.set_passive_limits(minute, PacketInLimit::from_columns(Some(100), Some(5)));
    std::thread::sleep(Duration::from_millis(1100));
    c.set_read_timeout(Some(WAIT)).unwrap();
    c.write_all(&Message::BarrierRequest.emit(4)).unwrap();
    assert_eq!(recv(&mut c), (4, Message::BarrierReply));
    flood(200, 0xab);
    let got = packet_ins_until_quiet(&mut c, Duration::from_millis(500)).len();
    assert!((10..=14).contains(&got), "{got} packet-ins");
    // The limit lifted: everything goes through again.
    server.set_passive_limits(minute, None);
    std::thread::sleep(Duration::from_millis(1100));
    c.set_read_timeout(Some(WAIT)).unwrap();
    c.write_all(&Message::BarrierRequest.emit(5)).unwrap();
    assert_eq!(recv(&mut c), (5, Message::BarrierReply));
    flood(50, 0xac);
    assert_eq!(
        packet_ins_until_quiet(&mut c, Duration::from_millis(500)).len(),
        50
    );
    // A short probe: the silent connection is probed within a tick and
    // the interval, where the old probe would have waited a minute, then
    // dropped.
    let changed = Instant::now();
    server.set_passive_limits(Duration::from_millis(300), None);
    c.set_read_timeout(Some(WAIT)).unwrap();
    assert_eq!(recv(&mut c).1, Message::EchoRequest(Vec::new()));
    assert!(
        changed.elapsed() < Duration::from_secs(3),
        "{:?}",
        changed.elapsed()
    );
    wait_closed(&mut c);
    assert!(
        changed.elapsed() < Duration::from_secs(5),
        "{:?}",
        changed.elapsed()
    );
}
