//! Controllers: the switch's active connection to a controller
//! (reconnection, inactivity probe, fail-secure tables) and controller
//! roles and async configuration on any connection.

mod common;
use common::{read_msg, Harness};
use flowtable::flow_mod::flow_mod_flags::SEND_FLOW_REM;
use flowtable::{FlowMod, FlowModCommand, Instructions, Match, PipelineMod};
use ofproto::wire::err;
use ofproto::wire::flow_removed::reason::{DELETE, HARD_TIMEOUT, IDLE_TIMEOUT};
use ofproto::wire::flow_removed::FlowRemoved;
use ofproto::wire::message::{role, split, AsyncConfig, RoleMsg, SwitchConfig};
use ofproto::wire::packet_io::{PacketIn, PacketOut};
use ofproto::wire::Message;
use ofproto::WantedController;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
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

fn unix(h: &Harness) -> UnixStream {
    let mut s = UnixStream::connect(&h.sock).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    hello(&mut s);
    s
}

/// Waits (bounded) for the switch to connect to `l`.
fn accept(l: &TcpListener) -> TcpStream {
    l.set_nonblocking(true).unwrap();
    let start = Instant::now();
    loop {
        match l.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false).unwrap();
                s.set_read_timeout(Some(WAIT)).unwrap();
                return s;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(start.elapsed() < WAIT, "the switch did not connect");
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("accept: {e}"),
        }
    }
}

/// A controller the harness's switch connects to (probe `probe`), with
/// HELLOs exchanged and a barrier answered, so the switch has registered
/// the connection for asynchronous messages.
fn controller(h: &mut Harness, probe: Duration) -> (TcpListener, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    h.server
        .as_mut()
        .unwrap()
        .add_controller(l.local_addr().unwrap(), probe, None)
        .unwrap();
    let mut c = accept(&l);
    hello(&mut c);
    c.write_all(&Message::BarrierRequest.emit(0xbb)).unwrap();
    assert_eq!(recv(&mut c), (0xbb, Message::BarrierReply));
    (l, c)
}

fn drop_all_flow() -> Message {
    Message::FlowMod(FlowMod::add(
        0,
        7,
        Match::catch_all(),
        Instructions::default(),
    ))
}

fn role_request(s: &mut (impl Read + Write), xid: u32, wanted: u32, generation_id: u64) -> Message {
    s.write_all(
        &Message::RoleRequest(RoleMsg {
            role: wanted,
            generation_id,
        })
        .emit(xid),
    )
    .unwrap();
    let (x, m) = recv(s);
    assert_eq!(x, xid);
    m
}

#[test]
fn switch_connects_to_its_controller_and_reconnects_keeping_flows() {
    let mut h = Harness::start("ctl-reconnect");
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let target = l.local_addr().unwrap();
    h.server
        .as_mut()
        .unwrap()
        .add_controller(target, Duration::from_secs(5), None)
        .unwrap();

    let mut c = accept(&l);
    hello(&mut c);
    c.write_all(&Message::FeaturesRequest.emit(2)).unwrap();
    assert!(matches!(recv(&mut c), (2, Message::FeaturesReply(_))));
    c.write_all(&drop_all_flow().emit(3)).unwrap();
    c.write_all(&Message::BarrierRequest.emit(4)).unwrap();
    assert_eq!(recv(&mut c), (4, Message::BarrierReply));
    drop(c);

    // Fail mode secure: the controller's flow stays; the switch comes back.
    let mut c = accept(&l);
    hello(&mut c);
    assert_eq!(h.bridge.with_tables(|t| t.n_rules()), 1);
}

#[test]
fn an_idle_controller_is_probed_then_dropped() {
    let mut h = Harness::start("ctl-probe");
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let probe = Duration::from_millis(300);
    h.server
        .as_mut()
        .unwrap()
        .add_controller(l.local_addr().unwrap(), probe, None)
        .unwrap();
    let mut c = accept(&l);
    hello(&mut c);
    // Answering the first probe keeps the connection.
    let (xid, m) = recv(&mut c);
    assert_eq!(m, Message::EchoRequest(Vec::new()));
    c.write_all(&Message::EchoReply(Vec::new()).emit(xid))
        .unwrap();
    // Silence through the second probe: the switch hangs up...
    let start = Instant::now();
    assert_eq!(recv(&mut c).1, Message::EchoRequest(Vec::new()));
    assert!(read_msg(&mut c).is_none(), "the switch must hang up");
    assert!(start.elapsed() < WAIT);
    // ...and connects again.
    let mut c = accept(&l);
    hello(&mut c);
}

/// A new inactivity probe is set on the live connection, as OVS sets a
/// changed `inactivity_probe`: the controller is not reconnected, and,
/// silent, it is probed at the new interval, then dropped.
#[test]
fn a_new_probe_applies_to_the_live_connection() {
    let mut h = Harness::start("ctl-reprobe");
    let (l, mut c) = controller(&mut h, Duration::from_secs(60));
    let target = l.local_addr().unwrap();
    let probe = Duration::from_millis(300);
    let changed = Instant::now();
    h.server
        .as_mut()
        .unwrap()
        .set_controllers(&[WantedController {
            target,
            tls: None,
            probe,
            packet_in_limit: None,
        }])
        .unwrap();
    // On the same connection, within a read tick (1 s) and the interval,
    // where the old one would have waited a minute.
    assert_eq!(recv(&mut c).1, Message::EchoRequest(Vec::new()));
    assert!(
        changed.elapsed() < Duration::from_secs(3),
        "{:?}",
        changed.elapsed()
    );
    assert!(read_msg(&mut c).is_none(), "the switch must hang up");
    assert!(
        changed.elapsed() < Duration::from_secs(5),
        "{:?}",
        changed.elapsed()
    );
    // The change made no other connection: the next one is the
    // reconnection after the silence.
    let mut again = accept(&l);
    hello(&mut again);
}

/// A zero probe (OVS's `inactivity_probe=0`) turns the probe off: a
/// silent controller is neither probed nor dropped.
#[test]
fn a_zero_probe_never_probes() {
    let mut h = Harness::start("ctl-noprobe");
    let (_l, mut c) = controller(&mut h, Duration::ZERO);
    c.set_read_timeout(Some(Duration::from_millis(1500)))
        .unwrap();
    let mut byte = [0u8; 1];
    match c.read(&mut byte) {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("a silent controller got {other:?} with the probe off"),
    }
    // Still connected: a request is answered.
    c.set_read_timeout(Some(WAIT)).unwrap();
    c.write_all(&Message::BarrierRequest.emit(0xcc)).unwrap();
    assert_eq!(recv(&mut c), (0xcc, Message::BarrierReply));
}

#[test]
fn a_slave_may_read_but_not_write() {
    let h = Harness::start("ctl-roles");
    let mut a = unix(&h);
    let mut b = unix(&h);
    assert_eq!(
        role_request(&mut a, 10, role::NOCHANGE, 0),
        Message::RoleReply(RoleMsg {
            role: role::EQUAL,
            generation_id: u64::MAX
        })
    );
    assert_eq!(
        role_request(&mut a, 11, role::MASTER, 1),
        Message::RoleReply(RoleMsg {
            role: role::MASTER,
            generation_id: 1
        })
    );
    assert_eq!(
        role_request(&mut b, 12, role::MASTER, 2),
        Message::RoleReply(RoleMsg {
            role: role::MASTER,
            generation_id: 2
        })
    );
    // a was demoted: its writes are refused, its reads answered.
    a.write_all(&drop_all_flow().emit(13)).unwrap();
    match recv(&mut a) {
        (13, Message::Error { ty, code, .. }) => {
            assert_eq!((ty, code), (err::BAD_REQUEST, err::BRC_IS_SLAVE))
        }
        other => panic!("expected IS_SLAVE, got {other:?}"),
    }
    assert_eq!(h.bridge.with_tables(|t| t.n_rules()), 0);
    a.write_all(&Message::EchoRequest(b"x".to_vec()).emit(14))
        .unwrap();
    assert_eq!(recv(&mut a), (14, Message::EchoReply(b"x".to_vec())));
    // A stale generation id is refused.
    match role_request(&mut a, 15, role::MASTER, 1) {
        Message::Error { ty, code, .. } => {
            assert_eq!((ty, code), (err::ROLE_REQUEST_FAILED, err::RRFC_STALE))
        }
        other => panic!("expected STALE, got {other:?}"),
    }
    // The master writes.
    b.write_all(&drop_all_flow().emit(16)).unwrap();
    b.write_all(&Message::BarrierRequest.emit(17)).unwrap();
    assert_eq!(recv(&mut b), (17, Message::BarrierReply));
    assert_eq!(h.bridge.with_tables(|t| t.n_rules()), 1);
}

#[test]
fn async_configuration_round_trips() {
    let h = Harness::start("ctl-async");
    let mut a = unix(&h);
    // The specification's defaults until a SET_ASYNC (as from OVS; a
    // service connection still gets nothing while its miss_send_len is 0).
    a.write_all(&Message::GetAsyncRequest.emit(20)).unwrap();
    assert_eq!(
        recv(&mut a),
        (20, Message::GetAsyncReply(AsyncConfig::default()))
    );
    let c = AsyncConfig {
        packet_in_mask: [1, 2],
        port_status_mask: [3, 4],
        flow_removed_mask: [5, 6],
    };
    a.write_all(&Message::SetAsync(c).emit(21)).unwrap();
    a.write_all(&Message::GetAsyncRequest.emit(22)).unwrap();
    assert_eq!(recv(&mut a), (22, Message::GetAsyncReply(c)));
    // Another connection has its own configuration.
    let mut b = unix(&h);
    b.write_all(&Message::GetAsyncRequest.emit(23)).unwrap();
    assert_eq!(
        recv(&mut b),
        (23, Message::GetAsyncReply(AsyncConfig::default()))
    );
}

/// SET_CONFIG with a nonzero miss_send_len, which a service connection
/// needs before it gets any asynchronous message.
fn ask_for_async(s: &mut (impl Read + Write), xid: u32) {
    let c = SwitchConfig {
        flags: 0,
        miss_send_len: 0xffff,
    };
    s.write_all(&Message::SetConfig(c).emit(xid)).unwrap();
    s.write_all(&Message::GetConfigRequest.emit(xid + 1))
        .unwrap();
    assert_eq!(recv(s), (xid + 1, Message::GetConfigReply(c)));
}

#[test]
fn service_connections_get_async_messages_once_their_miss_send_len_is_set() {
    let h = Harness::start("ctl-miss-send-len");
    let mut quiet = unix(&h);
    let mut a = unix(&h);
    ask_for_async(&mut a, 30);
    // Each connection has its own miss_send_len.
    quiet
        .write_all(&Message::GetConfigRequest.emit(32))
        .unwrap();
    assert_eq!(
        recv(&mut quiet),
        (
            32,
            Message::GetConfigReply(SwitchConfig {
                flags: 0,
                miss_send_len: 0
            })
        )
    );
    h.bridge
        .packet_in(PacketIn::new(3, 0, 1, 0, 0, 60, vec![0xab; 60]));
    match recv(&mut a) {
        (_, Message::PacketIn(pi)) => assert_eq!(pi.data, vec![0xab; 60]),
        other => panic!("expected PACKET_IN, got {other:?}"),
    }
    quiet
        .write_all(&Message::EchoRequest(Vec::new()).emit(33))
        .unwrap();
    assert_eq!(recv(&mut quiet), (33, Message::EchoReply(Vec::new())));
}

/// A flow on in_port `p` with the given flags and timeouts.
fn timed_flow(p: u64, flags: u16, idle: u16, hard: u16) -> FlowMod {
    let mut m = Match::catch_all();
    m.set_exact(flowtable::Field::InPort, p);
    let mut fm = FlowMod::add(0, 5, m, Instructions::default());
    fm.flags = flags;
    fm.idle_timeout = idle;
    fm.hard_timeout = hard;
    fm
}

fn flow_removed(s: &mut impl Read) -> FlowRemoved {
    match recv(s) {
        (_, Message::FlowRemoved(fr)) => fr,
        other => panic!("expected FLOW_REMOVED, got {other:?}"),
    }
}

#[test]
fn timeouts_remove_flows_and_report_them_to_who_asked() {
    let h = Harness::start("ctl-timeouts");
    let mut a = unix(&h);
    let mut quiet = unix(&h);
    let mut wants = AsyncConfig::NONE;
    wants.flow_removed_mask = [0b1111, 0];
    a.write_all(&Message::SetAsync(wants).emit(40)).unwrap();
    ask_for_async(&mut a, 38);
    let start = Instant::now();
    a.write_all(&Message::FlowMod(timed_flow(1, SEND_FLOW_REM, 0, 1)).emit(41))
        .unwrap();
    a.write_all(&Message::FlowMod(timed_flow(2, SEND_FLOW_REM, 1, 0)).emit(42))
        .unwrap();
    // Permanent, and timed but not asking to be reported.
    a.write_all(&Message::FlowMod(timed_flow(3, SEND_FLOW_REM, 0, 0)).emit(43))
        .unwrap();
    a.write_all(&Message::FlowMod(timed_flow(4, 0, 1, 0)).emit(44))
        .unwrap();
    let mut reasons = [flow_removed(&mut a), flow_removed(&mut a)];
    assert!(start.elapsed() >= Duration::from_secs(1));
    reasons.sort_by_key(|f| f.reason);
    assert_eq!(
        reasons
            .iter()
            .map(|f| (f.reason, f.idle_timeout, f.hard_timeout, f.priority))
            .collect::<Vec<_>>(),
        vec![(IDLE_TIMEOUT, 1, 0, 5), (HARD_TIMEOUT, 0, 1, 5)]
    );
    // The unreported timed flow went too; the permanent one stays.
    let wait = Instant::now();
    while h.bridge.with_tables(|t| t.n_rules()) != 1 {
        assert!(wait.elapsed() < WAIT, "flows did not expire");
        std::thread::sleep(Duration::from_millis(50));
    }
    // A connection that did not ask heard nothing: its next message is
    // the answer to its own request.
    quiet
        .write_all(&Message::EchoRequest(Vec::new()).emit(45))
        .unwrap();
    assert_eq!(recv(&mut quiet), (45, Message::EchoReply(Vec::new())));
}

#[test]
fn deleted_flows_are_reported_to_controllers_modified_ones_are_not() {
    let mut h = Harness::start("ctl-delete");
    let (_l, mut ctl) = controller(&mut h, Duration::from_secs(5));
    let mut a = unix(&h);
    a.write_all(&Message::FlowMod(timed_flow(1, SEND_FLOW_REM, 0, 0)).emit(50))
        .unwrap();
    let mut modify = timed_flow(1, SEND_FLOW_REM, 0, 0);
    modify.command = FlowModCommand::ModifyStrict;
    a.write_all(&Message::FlowMod(modify).emit(51)).unwrap();
    let mut delete = timed_flow(1, 0, 0, 0);
    delete.command = FlowModCommand::Delete;
    a.write_all(&Message::FlowMod(delete).emit(52)).unwrap();
    let fr = flow_removed(&mut ctl);
    assert_eq!((fr.reason, fr.table_id, fr.priority), (DELETE, 0, 5));
    assert_eq!(fr.matching, timed_flow(1, 0, 0, 0).matching);
    // Nothing else was reported (the modify was not a removal).
    ctl.write_all(&Message::EchoRequest(Vec::new()).emit(53))
        .unwrap();
    assert_eq!(recv(&mut ctl), (53, Message::EchoReply(Vec::new())));
}

/// An OFPFC_ADD replacing a flow with the same match and priority is not
/// a removal (OVS 3.1 sends no FLOW_REMOVED for it); a delete followed by
/// an add of the same flow in one bundle still reports the delete.
#[test]
fn a_replacing_add_is_not_reported_as_removed() {
    let mut h = Harness::start("ctl-replace");
    let (_l, mut ctl) = controller(&mut h, Duration::from_secs(5));
    let mut a = unix(&h);
    a.write_all(&Message::FlowMod(timed_flow(1, SEND_FLOW_REM, 0, 0)).emit(80))
        .unwrap();
    let mut replace = timed_flow(1, SEND_FLOW_REM, 0, 0);
    replace.cookie = 0x42;
    a.write_all(&Message::FlowMod(replace).emit(81)).unwrap();
    a.write_all(&Message::BarrierRequest.emit(82)).unwrap();
    assert_eq!(recv(&mut a), (82, Message::BarrierReply));
    assert_eq!(h.bridge.with_tables(|t| t.n_rules()), 1);
    // Nothing was reported.
    ctl.write_all(&Message::EchoRequest(Vec::new()).emit(83))
        .unwrap();
    assert_eq!(recv(&mut ctl), (83, Message::EchoReply(Vec::new())));
    let mut delete = timed_flow(1, 0, 0, 0);
    delete.command = FlowModCommand::DeleteStrict;
    h.bridge
        .apply_batch(
            &[
                PipelineMod::Flow(delete),
                PipelineMod::Flow(timed_flow(1, SEND_FLOW_REM, 0, 0)),
            ],
            None,
        )
        .unwrap();
    let fr = flow_removed(&mut ctl);
    assert_eq!((fr.reason, fr.cookie), (DELETE, 0x42));
    ctl.write_all(&Message::EchoRequest(Vec::new()).emit(84))
        .unwrap();
    assert_eq!(recv(&mut ctl), (84, Message::EchoReply(Vec::new())));
}

#[test]
fn a_short_role_request_is_refused_and_the_connection_survives() {
    let h = Harness::start("ctl-short-role");
    let mut a = unix(&h);
    // A ROLE_REQUEST with 8 of its 16 body bytes.
    let mut m = Message::RoleRequest(RoleMsg {
        role: role::MASTER,
        generation_id: 1,
    })
    .emit(30);
    m.truncate(16);
    m[3] = 16;
    a.write_all(&m).unwrap();
    match recv(&mut a) {
        (30, Message::Error { ty, code, .. }) => {
            assert_eq!((ty, code), (err::BAD_REQUEST, err::BRC_BAD_LEN))
        }
        other => panic!("expected BAD_LEN, got {other:?}"),
    }
    assert_eq!(
        role_request(&mut a, 31, role::NOCHANGE, 0),
        Message::RoleReply(RoleMsg {
            role: role::EQUAL,
            generation_id: u64::MAX
        })
    );
}

#[test]
fn packet_ins_reach_controllers_that_want_them() {
    let mut h = Harness::start("ctl-packet-in");
    let (_l, mut ctl) = controller(&mut h, Duration::from_secs(5));
    let mut quiet = unix(&h);
    let data = vec![0xab; 60];
    h.bridge
        .packet_in(PacketIn::new(3, 0x55, 1, 4, 0xc00c1e, 60, data.clone()));
    match recv(&mut ctl) {
        (_, Message::PacketIn(pi)) => {
            assert_eq!(
                (
                    pi.buffer_id,
                    pi.total_len,
                    pi.reason,
                    pi.table_id,
                    pi.cookie
                ),
                (ofproto::wire::NO_BUFFER, 60, 1, 4, 0xc00c1e)
            );
            assert_eq!(pi.matching.exact(flowtable::Field::InPort), Some(3));
            assert_eq!(pi.matching.exact(flowtable::Field::TunId), Some(0x55));
            assert_eq!(pi.data, data);
        }
        other => panic!("expected PACKET_IN, got {other:?}"),
    }
    quiet
        .write_all(&Message::EchoRequest(Vec::new()).emit(61))
        .unwrap();
    assert_eq!(recv(&mut quiet), (61, Message::EchoReply(Vec::new())));
}

#[test]
fn packet_out_from_ovs_ofctl_runs_its_actions() {
    let h = Harness::start("ctl-packet-out");
    h.ok(&["add-flow", &h.target(), "in_port=1,actions=output:2"]);
    let frame =
        "0a580a8000030a580a80000208004500001c0001000040117b660a8000020a800003000a0014000800ac";
    h.ok(&[
        "packet-out",
        &h.target(),
        &format!("in_port=1,packet={frame},actions=output:3,output:TABLE"),
    ]);
    let outs = h.dp.packet_outs.lock().clone();
    assert_eq!(outs.len(), 1);
    let (in_port, data, actions) = &outs[0];
    assert_eq!(*in_port, 1);
    assert_eq!(data.len(), frame.len() / 2);
    let ports: Vec<u32> = actions
        .iter()
        .filter_map(|a| match a {
            flowtable::DpAction::Output { port, .. } => Some(*port),
            _ => None,
        })
        .collect();
    assert_eq!(ports, vec![3, 2]);
}

#[test]
fn bad_packet_outs_are_refused() {
    let h = Harness::start("ctl-packet-out-bad");
    let mut a = unix(&h);
    let po = |buffer_id, in_port| {
        Message::PacketOut(PacketOut {
            buffer_id,
            in_port,
            metadata: Vec::new(),
            actions: vec![],
            data: vec![0; 60],
        })
    };
    let expect = |s: &mut UnixStream, xid, ty, code| match recv(s) {
        (x, Message::Error { ty: t, code: c, .. }) => assert_eq!((x, t, c), (xid, ty, code)),
        other => panic!("expected an error, got {other:?}"),
    };
    a.write_all(&po(7, 1).emit(70)).unwrap();
    expect(&mut a, 70, err::BAD_REQUEST, err::BRC_BUFFER_UNKNOWN);
    a.write_all(&po(ofproto::wire::NO_BUFFER, 99).emit(71))
        .unwrap();
    expect(&mut a, 71, err::BAD_REQUEST, err::BRC_BAD_PORT);
    // A slave may not send packets.
    let mut b = unix(&h);
    role_request(&mut b, 72, role::MASTER, 1);
    role_request(&mut a, 73, role::SLAVE, 1);
    a.write_all(&po(ofproto::wire::NO_BUFFER, 1).emit(74))
        .unwrap();
    expect(&mut a, 74, err::BAD_REQUEST, err::BRC_IS_SLAVE);
    // The role is checked before the message is: in_port 0 and an
    // unknown buffer are a slave's IS_SLAVE too (as in OVS)...
    a.write_all(&po(ofproto::wire::NO_BUFFER, 0).emit(75))
        .unwrap();
    expect(&mut a, 75, err::BAD_REQUEST, err::BRC_IS_SLAVE);
    a.write_all(&po(7, 1).emit(76)).unwrap();
    expect(&mut a, 76, err::BAD_REQUEST, err::BRC_IS_SLAVE);
    // ...but a body shorter than a PACKET_OUT's fixed part is BAD_LEN.
    let mut short = po(ofproto::wire::NO_BUFFER, 1).emit(77);
    short.truncate(20);
    short[2..4].copy_from_slice(&20u16.to_be_bytes());
    a.write_all(&short).unwrap();
    expect(&mut a, 77, err::BAD_REQUEST, err::BRC_BAD_LEN);
    assert!(h.dp.packet_outs.lock().is_empty());
}

#[test]
fn port_mods_are_reported_as_port_status() {
    let mut h = Harness::start("ctl-port-status");
    let (_l, mut ctl) = controller(&mut h, Duration::from_secs(5));
    h.ok(&["mod-port", &h.target(), "3", "down"]);
    match recv(&mut ctl) {
        (_, Message::PortStatus(ps)) => {
            assert_eq!(ps.reason, ofproto::wire::port_status::reason::MODIFY);
            assert_eq!((ps.port.port_no, ps.port.name.as_str()), (3, "veth0001"));
            assert_eq!(ps.port.config & 1, 1, "OFPPC_PORT_DOWN");
        }
        other => panic!("expected PORT_STATUS, got {other:?}"),
    }
}

#[test]
fn a_port_mod_is_not_reported_back_to_who_sent_it() {
    let mut h = Harness::start("ctl-port-mod-source");
    let (_l, mut ctl) = controller(&mut h, Duration::from_secs(5));
    let mut other = unix(&h);
    ask_for_async(&mut other, 90);
    let down = ofproto::wire::mods::PortMod {
        port_no: 3,
        hw_addr: [0x02, 0, 0, 0, 0, 3],
        config: 1,
        mask: 1,
        advertise: 0,
    };
    ctl.write_all(&Message::PortMod(down).emit(91)).unwrap();
    ctl.write_all(&Message::EchoRequest(Vec::new()).emit(92))
        .unwrap();
    // OpenFlow 1.3: the controller that sent it hears nothing back (its
    // echo reply comes first), everyone else does.
    assert_eq!(recv(&mut ctl), (92, Message::EchoReply(Vec::new())));
    match recv(&mut other) {
        (_, Message::PortStatus(ps)) => assert_eq!((ps.port.port_no, ps.port.config), (3, 1)),
        other => panic!("expected PORT_STATUS, got {other:?}"),
    }
}

#[test]
fn hello_comes_first_even_when_async_messages_are_raised_meanwhile() {
    let mut h = Harness::start("ctl-hello-first");
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    h.server
        .as_mut()
        .unwrap()
        .add_controller(l.local_addr().unwrap(), Duration::from_secs(5), None)
        .unwrap();
    let mut c = accept(&l);
    // Before the controller says HELLO the connection is up on the
    // switch's side; PACKET_INs raised now must neither precede the
    // switch's HELLO nor be sent before the version is agreed.
    for _ in 0..50 {
        h.bridge
            .packet_in(PacketIn::new(3, 0, 1, 0, 0, 60, vec![0xab; 60]));
    }
    assert!(matches!(recv(&mut c).1, Message::Hello { .. }));
    c.write_all(&Message::Hello { bitmap: Some(0x10) }.emit(1))
        .unwrap();
    c.write_all(&Message::BarrierRequest.emit(0xbb)).unwrap();
    assert_eq!(recv(&mut c), (0xbb, Message::BarrierReply));
    // Now subscribed: the next one arrives.
    h.bridge
        .packet_in(PacketIn::new(3, 0, 1, 0, 0, 60, vec![0xcd; 60]));
    match recv(&mut c) {
        (_, Message::PacketIn(pi)) => assert_eq!(pi.data, vec![0xcd; 60]),
        other => panic!("expected PACKET_IN, got {other:?}"),
    }
}
