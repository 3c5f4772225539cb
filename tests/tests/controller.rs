//! xbr under an OpenFlow controller (`--controller tcp:IP:PORT`): the
//! controller programs it, is killed while traffic flows (fail mode
//! secure: forwarding goes on with the flows it installed), and is
//! reconnected to when it comes back.
//!
//! The controller is this test, speaking OpenFlow 1.3 with the project's
//! codec on loopback; xbr runs in the root namespace on the host sides of
//! two pods' veths. Needs root and a built `xbr` (`./scripts/test`).

use flowtable::{Action, Field, FlowMod, Instructions, Match};
use ofproto::wire::message::split;
use ofproto::wire::Message;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::time::{Duration, Instant};
use xbr_tests::{flow_n_packets, HarnessError, Pod, Result, Xbr};

/// Bound on each wait for xbr to (re)connect: its backoff tops out at 8 s.
const CONNECT_WAIT: Duration = Duration::from_secs(20);

fn fail(what: impl Into<String>) -> HarnessError {
    HarnessError::Unexpected(what.into())
}

fn read_msg(s: &mut TcpStream) -> Result<Message> {
    let mut h = [0u8; 8];
    s.read_exact(&mut h)
        .map_err(|e| fail(format!("reading from xbr: {e}")))?;
    let len = usize::from(u16::from_be_bytes([h[2], h[3]]));
    let mut m = h.to_vec();
    m.resize(len.max(8), 0);
    s.read_exact(&mut m[8..])
        .map_err(|e| fail(format!("reading from xbr: {e}")))?;
    let (hdr, body) = split(&m).map_err(|e| fail(format!("bad framing from xbr: {e}")))?;
    Message::parse(&hdr, body).map_err(|e| fail(format!("bad message from xbr: {e}")))
}

fn send(s: &mut TcpStream, m: &Message, xid: u32) -> Result<()> {
    s.write_all(&m.emit(xid))
        .map_err(|e| fail(format!("writing to xbr: {e}")))
}

/// Waits (bounded) for xbr to connect, and exchanges HELLOs.
fn accept(l: &TcpListener) -> Result<TcpStream> {
    l.set_nonblocking(true)
        .map_err(|e| fail(format!("listener: {e}")))?;
    let start = Instant::now();
    let mut s = loop {
        match l.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if start.elapsed() > CONNECT_WAIT {
                    return Err(fail("xbr did not connect to the controller"));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(fail(format!("accept: {e}"))),
        }
    };
    s.set_nonblocking(false)
        .and_then(|()| s.set_read_timeout(Some(Duration::from_secs(10))))
        .map_err(|e| fail(format!("controller socket: {e}")))?;
    send(&mut s, &Message::Hello { bitmap: Some(0x10) }, 1)?;
    match read_msg(&mut s)? {
        Message::Hello { .. } => Ok(s),
        other => Err(fail(format!("expected HELLO, got {other:?}"))),
    }
}

/// Reads until the reply with `xid` (skipping echo requests, answered).
fn reply(s: &mut TcpStream, xid: u32) -> Result<Message> {
    loop {
        let mut h = [0u8; 8];
        s.peek(&mut h)
            .map_err(|e| fail(format!("reading from xbr: {e}")))?;
        let this_xid = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
        match read_msg(s)? {
            Message::EchoRequest(d) => send(s, &Message::EchoReply(d), this_xid)?,
            m if this_xid == xid => return Ok(m),
            other => return Err(fail(format!("unexpected {other:?}"))),
        }
    }
}

fn patch_flow(from: u32, to: u32) -> Message {
    let mut m = Match::catch_all();
    m.set_exact(Field::InPort, u64::from(from));
    Message::FlowMod(FlowMod::add(
        0,
        100,
        m,
        Instructions::apply(vec![Action::Output {
            port: to,
            max_len: 0,
        }]),
    ))
}

fn pings(a: &Pod, b: &Pod, count: u32) -> Result<()> {
    a.ping(b.ip(), count)?.ok().map(|_| ())
}

/// Two pods on an xbr (their host veths ofports 1 and 2) that connects
/// to a controller listening on loopback; `extra` goes to `xbr run`.
struct Setup {
    xbr: Xbr,
    listener: TcpListener,
    addr: std::net::SocketAddr,
    a: Pod,
    b: Pod,
}

fn setup(extra: &[&str]) -> Result<Setup> {
    let a = Pod::new(Ipv4Addr::new(10, 128, 0, 2), 24, "0a:58:0a:80:00:02")?;
    let b = Pod::new(Ipv4Addr::new(10, 128, 0, 3), 24, "0a:58:0a:80:00:03")?;
    let listener =
        TcpListener::bind("127.0.0.1:0").map_err(|e| fail(format!("controller bind: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| fail(format!("controller address: {e}")))?;
    let target = format!("tcp:{addr}");
    let port_a = format!("{}=1", a.host_if());
    let port_b = format!("{}=2", b.host_if());
    let mut args = vec![
        "--port",
        &port_a,
        "--port",
        &port_b,
        "--controller",
        &target,
    ];
    args.extend_from_slice(extra);
    let xbr = Xbr::start(&args)?;
    Ok(Setup {
        xbr,
        listener,
        addr,
        a,
        b,
    })
}

#[test]
fn forwarding_survives_the_controller_and_xbr_reconnects() -> Result<()> {
    let Setup {
        xbr,
        listener,
        addr,
        a,
        b,
    } = setup(&["--inactivity-probe", "1"])?;
    let mut ctl = accept(&listener)?;
    send(&mut ctl, &patch_flow(1, 2), 2)?;
    send(&mut ctl, &patch_flow(2, 1), 3)?;
    send(&mut ctl, &Message::BarrierRequest, 4)?;
    match reply(&mut ctl, 4)? {
        Message::BarrierReply => {}
        other => return Err(fail(format!("expected BARRIER_REPLY, got {other:?}"))),
    }
    pings(&a, &b, 3)?;

    // The controller dies: the flows it installed keep forwarding.
    drop(ctl);
    drop(listener);
    pings(&a, &b, 5)?;
    let dump = xbr.ofctl_ok(&["dump-flows", "br0"])?;
    let n = flow_n_packets(&dump, "in_port=1").ok_or_else(|| fail(dump.clone()))?;
    if n < 8 {
        return Err(fail(format!("in_port=1 counted {n} packets:\n{dump}")));
    }

    // It comes back on the same address: xbr reconnects by itself.
    let listener = TcpListener::bind(addr).map_err(|e| fail(format!("controller rebind: {e}")))?;
    let mut ctl = accept(&listener)?;
    send(&mut ctl, &Message::FeaturesRequest, 5)?;
    match reply(&mut ctl, 5)? {
        Message::FeaturesReply(_) => {}
        other => return Err(fail(format!("expected FEATURES_REPLY, got {other:?}"))),
    }
    pings(&a, &b, 2)?;
    Ok(())
}

/// The controller as a hub: every packet comes to it (PACKET_IN) and it
/// sends it out of the other pod's port (PACKET_OUT). Pings only work if
/// both directions of controller traffic do.
#[test]
fn a_controller_forwards_through_packet_in_and_packet_out() -> Result<()> {
    use ofproto::wire::packet_io::PacketOut;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;

    let Setup {
        xbr,
        listener,
        a,
        b,
        ..
    } = setup(&[])?;
    let mut ctl = accept(&listener)?;
    // Table-miss flow to the controller, whole packets.
    let mut miss = FlowMod::add(
        0,
        0,
        Match::catch_all(),
        Instructions::apply(vec![Action::Output {
            port: flowtable::action::port::CONTROLLER,
            max_len: 0xffff,
        }]),
    );
    miss.cookie = 0x77;
    send(&mut ctl, &Message::FlowMod(miss), 2)?;
    send(&mut ctl, &Message::BarrierRequest, 3)?;
    match reply(&mut ctl, 3)? {
        Message::BarrierReply => {}
        other => return Err(fail(format!("expected BARRIER_REPLY, got {other:?}"))),
    }

    let stop = Arc::new(AtomicBool::new(false));
    let relayed = Arc::new(AtomicU64::new(0));
    ctl.set_read_timeout(Some(Duration::from_millis(200)))
        .map_err(|e| fail(format!("controller socket: {e}")))?;
    let hub = {
        let (stop, relayed) = (stop.clone(), relayed.clone());
        std::thread::spawn(move || -> Result<()> {
            let mut xid = 100;
            while !stop.load(Ordering::Relaxed) {
                let m = match read_msg(&mut ctl) {
                    Ok(m) => m,
                    // Read timeouts just poll the stop flag.
                    Err(_) => continue,
                };
                let Message::PacketIn(pi) = m else { continue };
                if pi.cookie != 0x77 || pi.reason != 0 {
                    return Err(fail(format!("unexpected packet-in {pi:?}")));
                }
                let in_port = pi
                    .matching
                    .exact(Field::InPort)
                    .ok_or_else(|| fail("packet-in without in_port"))?
                    as u32;
                let out = if in_port == 1 { 2 } else { 1 };
                xid += 1;
                let po = PacketOut {
                    buffer_id: ofproto::wire::NO_BUFFER,
                    in_port,
                    metadata: Vec::new(),
                    actions: vec![Action::Output {
                        port: out,
                        max_len: 0,
                    }],
                    data: pi.data,
                };
                send(&mut ctl, &Message::PacketOut(po), xid)?;
                relayed.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        })
    };
    let pinged = pings(&a, &b, 3);
    stop.store(true, Ordering::Relaxed);
    let hub_result = hub
        .join()
        .map_err(|_| fail("the controller thread panicked"))?;
    pinged?;
    hub_result?;
    // ARP both ways and three echo requests and replies at least.
    let n = relayed.load(Ordering::Relaxed);
    if n < 8 {
        return Err(fail(format!(
            "only {n} packets went through the controller"
        )));
    }
    let dump = xbr.ofctl_ok(&["dump-flows", "br0"])?;
    let hits = flow_n_packets(&dump, "priority=0").ok_or_else(|| fail(dump.clone()))?;
    if hits < n {
        return Err(fail(format!(
            "{n} relayed but the miss flow counted {hits}:\n{dump}"
        )));
    }
    Ok(())
}

/// `--fail-mode standalone`: a learning switch once no controller has
/// been connected for three probe intervals, the controller's flows (none
/// here: nothing passes) while one is.
#[test]
fn standalone_fails_open_without_its_controller() -> Result<()> {
    let Setup {
        xbr: _xbr,
        listener,
        a,
        b,
        ..
    } = setup(&["--fail-mode", "standalone", "--inactivity-probe", "2"])?;
    // Static neighbours: a failed ARP would otherwise make the next pings
    // fail fast for a while.
    a.add_neighbor(&b)?;
    b.add_neighbor(&a)?;
    let mut ctl = accept(&listener)?;
    send(&mut ctl, &Message::BarrierRequest, 2)?;
    reply(&mut ctl, 2)?;
    if a.ping(b.ip(), 2)?.success() {
        return Err(fail("packets passed with a controller and no flows"));
    }
    drop(ctl);
    drop(listener);
    // xbr sees the connection go at once (EOF), and fails open, as OVS
    // does, only three probe intervals (6 s) later: a controller that
    // comes back within them finds its flows in charge.
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(4) {
        if a.ping(b.ip(), 1)?.success() {
            return Err(fail(format!(
                "fail-open {:?} after the controller went, before 3 probe intervals",
                start.elapsed()
            )));
        }
    }
    loop {
        if a.ping(b.ip(), 2)?.success() {
            assert!(start.elapsed() >= Duration::from_secs(6));
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(20) {
            return Err(fail("standalone xbr did not fail open"));
        }
    }
}

/// output:CONTROLLER with no controller connected: the packets are
/// dropped, said once in the log and counted when xbr stops.
#[test]
fn packets_for_an_absent_controller_are_dropped_and_reported() -> Result<()> {
    let a = Pod::new(Ipv4Addr::new(10, 128, 0, 2), 24, "0a:58:0a:80:00:02")?;
    let b = Pod::new(Ipv4Addr::new(10, 128, 0, 3), 24, "0a:58:0a:80:00:03")?;
    let mut xbr = Xbr::with_ports(&[(a.host_if(), 1), (b.host_if(), 2)])?;
    xbr.add_flow("priority=0,actions=CONTROLLER:65535")?;
    a.add_neighbor(&b)?;
    if a.ping(b.ip(), 2)?.success() {
        return Err(fail("packets went somewhere with no controller"));
    }
    xbr.stop(nix::sys::signal::Signal::SIGTERM)?;
    let log = xbr.log();
    if !log.contains("none is connected")
        || !log.contains("packets for the controller dropped: none connected")
    {
        return Err(fail(format!("the drops were not reported:\n{log}")));
    }
    Ok(())
}
