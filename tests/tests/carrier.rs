//! A port whose device loses its carrier (a pod's end of the veth goes
//! down) is reported as OVS reports it: PORT_STATUS MODIFY with
//! OFPPS_LINK_DOWN, `LINK_DOWN` in `ovs-ofctl show`, and no longer live,
//! so a fast-failover group moves to its next bucket; the carrier coming
//! back undoes all three.
//!
//! Needs root and a built `xbr`, like every end-to-end test.

use std::time::{Duration, Instant};
use xbr_tests::openflow::{port_status_listener, OfConn, OFP13_VERSION};
use xbr_tests::{Pod, Result, Xbr};

const BRIDGE: &str = xbr_tests::BRIDGE;
const OFPT_PORT_STATUS: u8 = 12;
const OFPPR_MODIFY: u8 = 2;
const OFPPS_LINK_DOWN: u32 = 1 << 0;
const OFPPS_LIVE: u32 = 1 << 2;

/// The next PORT_STATUS: (reason, port number, state).
fn next_port_status(conn: &mut OfConn) -> Result<(u8, u32, u32)> {
    for _ in 0..16 {
        let m = conn.recv_message()?;
        if m.msg_type != OFPT_PORT_STATUS {
            continue;
        }
        assert_eq!(m.version, OFP13_VERSION);
        // reason, pad[7], ofp_port { port_no, pad[4], hw_addr, pad[2],
        // name[16], config, state, ... }
        let word = |at: usize| u32::from_be_bytes(m.body[at..at + 4].try_into().unwrap());
        return Ok((m.body[0], word(8), word(44)));
    }
    panic!("no PORT_STATUS among 16 messages");
}

/// The `tx pkts` of `port` in `ovs-ofctl dump-ports`.
fn tx_packets(xbr: &Xbr, port: u32) -> Result<u64> {
    let out = xbr.ofctl_ok(&["dump-ports", BRIDGE, &port.to_string()])?;
    let tx = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("tx pkts="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok());
    Ok(tx.unwrap_or_else(|| panic!("no tx pkts for port {port}:\n{out}")))
}

/// `ovs-ofctl show`'s state line of the port named `name`.
fn shown_state(xbr: &Xbr, name: &str) -> Result<String> {
    let show = xbr.ofctl_ok(&["show", BRIDGE])?;
    let mut lines = show
        .lines()
        .skip_while(|l| !l.contains(&format!("({name}): addr:")));
    lines.next();
    let state = lines
        .take_while(|l| l.starts_with("     "))
        .find_map(|l| l.trim().strip_prefix("state:"))
        .map(|s| s.trim().to_string());
    Ok(state.unwrap_or_else(|| panic!("no state for {name}:\n{show}")))
}

fn set_pod_link(pod: &Pod, state: &str) -> Result<()> {
    pod.exec_ok(&["ip", "link", "set", xbr_tests::POD_IF, state])
}

/// Pings from `from` (which may go unanswered) until `port`'s transmit
/// counter grows, within 10 s.
fn traffic_reaches(xbr: &Xbr, from: &Pod, to: &Pod, port: u32) -> Result<bool> {
    let before = tx_packets(xbr, port)?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let _ = from.ping(to.ip(), 1)?;
        if tx_packets(xbr, port)? > before {
            return Ok(true);
        }
    }
    Ok(false)
}

#[test]
fn carrier_loss_is_link_down_and_fast_failover_moves_on() -> Result<()> {
    let a = Pod::numbered(2)?;
    let b = Pod::numbered(3)?;
    let c = Pod::numbered(4)?;
    let xbr = Xbr::with_ports(&[(a.host_if(), 1), (b.host_if(), 2), (c.host_if(), 3)])?;
    xbr.ofctl_ok(&[
        "add-group",
        BRIDGE,
        "group_id=1,type=ff,bucket=watch_port:2,output:2,bucket=watch_port:3,output:3",
    ])?;
    xbr.add_flow("in_port=1,actions=group:1")?;
    xbr.add_flow("in_port=2,actions=output:1")?;
    xbr.add_flow("in_port=3,actions=output:1")?;
    let mut status = port_status_listener(&xbr.mgmt_path())?;

    assert_eq!(shown_state(&xbr, b.host_if())?, "LIVE");
    assert!(
        traffic_reaches(&xbr, &a, &b, 2)?,
        "the group's first bucket (port 2) got nothing\n{}",
        xbr.log()
    );

    // The pod's end goes down: the host end loses its carrier.
    set_pod_link(&b, "down")?;
    let (reason, port, state) = next_port_status(&mut status)?;
    assert_eq!((reason, port), (OFPPR_MODIFY, 2));
    assert_eq!(state & (OFPPS_LINK_DOWN | OFPPS_LIVE), OFPPS_LINK_DOWN);
    assert_eq!(shown_state(&xbr, b.host_if())?, "LINK_DOWN");
    assert!(
        traffic_reaches(&xbr, &a, &b, 3)?,
        "the fast-failover group did not move to port 3\n{}",
        xbr.log()
    );
    assert!(xbr.log().contains("link down"), "{}", xbr.log());

    // And back.
    set_pod_link(&b, "up")?;
    let (reason, port, state) = next_port_status(&mut status)?;
    assert_eq!((reason, port), (OFPPR_MODIFY, 2));
    assert_eq!(state & (OFPPS_LINK_DOWN | OFPPS_LIVE), OFPPS_LIVE);
    assert_eq!(shown_state(&xbr, b.host_if())?, "LIVE");
    assert!(
        traffic_reaches(&xbr, &a, &b, 2)?,
        "the group did not return to port 2\n{}",
        xbr.log()
    );
    Ok(())
}
