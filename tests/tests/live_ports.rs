//! Ports added and removed while xbr runs (`xbr port add|del`, the
//! control socket behind `ovs-vsctl add-port|del-port` in OVSDB mode):
//! traffic between two other ports loses nothing, OpenFlow sees the ports
//! come and go (`ovs-ofctl show`, PORT_STATUS), numbers follow OVS's
//! rules, and a removed port is detached.
//!
//! Needs root and a built `xbr`, like every end-to-end test.

use std::net::SocketAddrV4;
use std::path::Path;
use std::time::Duration;
use xbr_tests::openflow::{port_status_listener, OfConn, OFP13_VERSION};
use xbr_tests::{link_has_xdp, udp_send, Pod, Result, UdpReceiver, Xbr, BRIDGE};

const TOOL: &str = env!("CARGO_BIN_EXE_xbr-testtool");

const OFPT_PORT_STATUS: u8 = 12;
const OFPPR_ADD: u8 = 0;
const OFPPR_DELETE: u8 = 1;

/// UDP packets sent between the two steady ports while the others change
/// (4 s, longer than the changes take); the rate is the skeleton test's,
/// which the rings absorb on this shared machine.
const UDP_COUNT: u64 = 40_000;
const UDP_RATE: u64 = 10_000;
const UDP_TIMEOUT: Duration = Duration::from_secs(30);

/// The next PORT_STATUS: (reason, port number, name).
fn next_port_status(conn: &mut OfConn) -> Result<(u8, u32, String)> {
    for _ in 0..16 {
        let m = conn.recv_message()?;
        if m.msg_type != OFPT_PORT_STATUS {
            continue;
        }
        assert_eq!(m.version, OFP13_VERSION);
        // reason, pad[7], ofp_port { port_no, pad, hw_addr, pad, name[16] }
        let reason = m.body[0];
        let port_no = u32::from_be_bytes(m.body[8..12].try_into().unwrap());
        let name = &m.body[24..40];
        let name = String::from_utf8_lossy(name)
            .trim_end_matches('\0')
            .to_string();
        return Ok((reason, port_no, name));
    }
    panic!("no PORT_STATUS among 16 messages");
}

#[test]
fn ports_come_and_go_under_traffic_without_loss_elsewhere() -> Result<()> {
    let a = Pod::numbered(2)?;
    let b = Pod::numbered(3)?;
    let c = Pod::numbered(4)?;
    let d = Pod::numbered(5)?;
    let xbr = Xbr::with_ports(&[(a.host_if(), 1), (b.host_if(), 2)])?;
    xbr.add_flow("in_port=1,actions=output:2")?;
    xbr.add_flow("in_port=2,actions=output:1")?;
    // c (number 3, the next automatic one) and d (requested 10) talk to
    // each other once added.
    xbr.add_flow("in_port=3,actions=output:10")?;
    xbr.add_flow("in_port=10,actions=output:3")?;
    a.add_neighbor(&b)?;
    b.add_neighbor(&a)?;
    c.add_neighbor(&d)?;
    d.add_neighbor(&c)?;
    let mut status = port_status_listener(&xbr.mgmt_path())?;

    let dst = SocketAddrV4::new(b.ip(), 5001);
    let rx = UdpReceiver::start(Path::new(TOOL), b.ns(), dst, UDP_COUNT, UDP_TIMEOUT)?;
    let sender = {
        let ns_pod = a;
        std::thread::spawn(move || {
            let sent = udp_send(Path::new(TOOL), ns_pod.ns(), dst, UDP_COUNT, UDP_RATE);
            (sent, ns_pod)
        })
    };
    std::thread::sleep(Duration::from_millis(300));

    let got_c = xbr.client_ok(&["port", "add", BRIDGE, c.host_if()])?;
    assert_eq!(got_c.trim(), "3");
    assert_eq!(
        next_port_status(&mut status)?,
        (OFPPR_ADD, 3, c.host_if().to_string())
    );
    let spec_d = format!("{}=10", d.host_if());
    assert_eq!(
        xbr.client_ok(&["port", "add", BRIDGE, &spec_d])?.trim(),
        "10"
    );
    assert_eq!(
        next_port_status(&mut status)?,
        (OFPPR_ADD, 10, d.host_if().to_string())
    );
    assert!(link_has_xdp(c.host_if())?);
    let show = xbr.ofctl_ok(&["show", BRIDGE])?;
    for (n, name) in [(3, c.host_if()), (10, d.host_if())] {
        assert!(
            show.contains(&format!(" {n}({name}): addr:")),
            "ovs-ofctl show lacks {n}({name}):\n{show}"
        );
    }
    let ping = c.ping(d.ip(), 3)?;
    assert!(
        ping.success(),
        "ping between the added ports failed: {}\n{}",
        ping.describe_status(),
        xbr.log()
    );

    // A second add of the same name, and an interface that does not
    // exist, are refused with exit code 2.
    let dup = xbr.client(&["port", "add", BRIDGE, c.host_if()])?;
    assert_eq!(dup.code(), Some(2), "{}", dup.stderr);
    assert!(dup.stderr.contains("already exists"), "{}", dup.stderr);
    let missing = xbr.client(&["port", "add", BRIDGE, "xbrt-nosuch0"])?;
    assert_eq!(missing.code(), Some(2), "{}", missing.stderr);
    assert!(missing.stderr.contains("no such network interface"));

    xbr.client_ok(&["port", "del", BRIDGE, c.host_if()])?;
    assert_eq!(
        next_port_status(&mut status)?,
        (OFPPR_DELETE, 3, c.host_if().to_string())
    );
    assert!(!link_has_xdp(c.host_if())?, "XDP still on a removed port");
    // 3 was just freed: like OVS, the next automatic number moves on.
    assert_eq!(
        xbr.client_ok(&["port", "add", BRIDGE, c.host_if()])?.trim(),
        "4"
    );
    xbr.client_ok(&["port", "del", BRIDGE, c.host_if()])?;
    xbr.client_ok(&["port", "del", BRIDGE, d.host_if()])?;
    let gone = xbr.client(&["port", "del", BRIDGE, d.host_if()])?;
    assert_eq!(gone.code(), Some(2));
    let show = xbr.ofctl_ok(&["show", BRIDGE])?;
    assert!(!show.contains(d.host_if()), "{show}");

    let (sent, _a) = sender.join().expect("sender thread");
    assert_eq!(sent?, UDP_COUNT);
    let got = rx.finish()?;
    assert_eq!(
        got,
        UDP_COUNT,
        "{got} of {UDP_COUNT} packets between the steady ports arrived\n{}",
        xbr.log()
    );
    Ok(())
}

#[test]
fn internal_port_added_and_removed_live() -> Result<()> {
    let ns = xbr_tests::Netns::new()?;
    let xbr = Xbr::start_in(ns, &[])?;
    let out = xbr.client_ok(&[
        "port",
        "add",
        BRIDGE,
        "tun0=2,type=internal,mtu_request=1450",
    ])?;
    assert_eq!(out.trim(), "2");
    let ns = xbr.netns().expect("namespace");
    let link = ns.exec(
        &["ip", "-o", "link", "show", "tun0"],
        Duration::from_secs(5),
    )?;
    assert!(link.stdout.contains("mtu 1450"), "{}", link.stdout);
    xbr.client_ok(&["port", "del", BRIDGE, "tun0"])?;
    let link = ns.exec(&["ip", "link", "show", "tun0"], Duration::from_secs(5))?;
    assert!(!link.success(), "tun0 still exists after del");
    Ok(())
}

/// Ports added beyond what the packet memory was sized for (`--spare-ports
/// 0`) still receive: every AF_XDP socket lends the kernel only its share
/// of the frames, so the first ports cannot take them all.
#[test]
fn ports_beyond_the_spare_budget_still_forward() -> Result<()> {
    let pods: Vec<Pod> = (2..14).map(Pod::numbered).collect::<Result<_>>()?;
    let first = format!("{}=1", pods[0].host_if());
    let second = format!("{}=2", pods[1].host_if());
    let xbr = Xbr::start(&["--spare-ports", "0", "--port", &first, "--port", &second])?;
    xbr.add_flow("actions=NORMAL")?;
    for p in &pods[2..] {
        xbr.client_ok(&["port", "add", BRIDGE, p.host_if()])?;
    }
    // Traffic through the first ports fills their rings meanwhile.
    for (from, to) in [(11, 0), (10, 1), (0, 11), (6, 9)] {
        let out = pods[from].ping(pods[to].ip(), 2)?;
        assert!(
            out.success(),
            "ping from pod {from} to pod {to} failed: {}\n{}",
            out.describe_status(),
            xbr.log()
        );
    }
    Ok(())
}
