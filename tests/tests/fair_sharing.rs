//! Fair sharing between ports (docs/fair-sharing.md): one pod flooding
//! the fragment table does not stop another pod's fragmented datagrams;
//! zone limits hold for the connections the XDP program creates.
//!
//! Three pods on xbr with a conntrack pipeline (new UDP committed, `+inv`
//! dropped, as the agent's policy tables do). A, the flooder, sends 6,000
//! fragmented datagrams (each a new record in the fragment table, held
//! 15 s: beyond the table's 4,096); then B sends fragmented datagrams to
//! C while A's records are still live. Without shares, B's later
//! fragments find no record of their first (the table is A's) and are
//! `+inv`: nothing arrives. With shares, A holds at most half the table,
//! every one of B's datagrams arrives, and `xbr stats` shows A's port
//! hitting its share.
//!
//! Needs root and a built `xbr`.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::time::Duration;
use xbr_tests::{udp_send_sized, Pod, Result, UdpReceiver, Xbr, BRIDGE, POD_IF};

const TOOL: &str = env!("CARGO_BIN_EXE_xbr-testtool");

/// The conntrack pipeline: every IP frame tracked in zone 1, new ones
/// committed, invalid ones dropped; forwarding by destination address.
fn pipeline(xbr: &Xbr, pods: &[&Pod]) -> Result<()> {
    for f in [
        "table=0,priority=100,ip,actions=ct(table=1,zone=1)",
        "table=1,priority=100,ip,ct_state=+trk+inv,actions=drop",
        "table=1,priority=90,ip,ct_state=+trk+new,actions=ct(commit,zone=1),goto_table:2",
        "table=1,priority=80,ip,ct_state=+trk+est,actions=goto_table:2",
    ] {
        xbr.add_flow(f)?;
    }
    for (i, p) in pods.iter().enumerate() {
        xbr.add_flow(&format!(
            "table=2,priority=100,ip,nw_dst={},actions=output:{}",
            p.ip(),
            i + 1
        ))?;
    }
    Ok(())
}

#[test]
fn a_fragment_flood_from_one_pod_does_not_stop_another_pods_fragments() -> Result<()> {
    let tool = Path::new(TOOL);
    let a = Pod::numbered(2)?;
    let b = Pod::numbered(3)?;
    let c = Pod::numbered(4)?;
    for p in [&a, &b] {
        // Complete checksums (conntrack checks them on first fragments).
        p.exec_ok(&["ethtool", "-K", POD_IF, "tx", "off"])?;
        p.add_neighbor(&c)?;
    }
    let specs: Vec<String> = [&a, &b, &c]
        .iter()
        .enumerate()
        .map(|(i, p)| format!("{}={}", p.host_if(), i + 1))
        .collect();
    let metrics = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .to_string();
    let mut args = vec!["--metrics", metrics.as_str()];
    for s in &specs {
        args.extend(["--port", s.as_str()]);
    }
    let xbr = Xbr::start(&args)?;
    pipeline(&xbr, &[&a, &b, &c])?;

    // The flood: 6,000 datagrams of 3 fragments each, to an address no
    // pod has (tracked, then dropped for want of a route: a flood at C
    // would fill C's own kernel's reassembly buffers, which is not
    // xbr's to share).
    a.exec_ok(&[
        "ip",
        "neigh",
        "replace",
        "10.128.0.99",
        "lladdr",
        "0a:58:0a:80:00:63",
        "dev",
        POD_IF,
        "nud",
        "permanent",
    ])?;
    let flood = SocketAddrV4::new(Ipv4Addr::new(10, 128, 0, 99), 9);
    let sent = udp_send_sized(tool, a.ns(), 40000, flood, 6000, 10_000, 3000)?;
    assert_eq!(sent, 6000);

    // B's datagrams, while A's records live (15 s).
    let dst = SocketAddrV4::new(c.ip(), 7000);
    let rx = UdpReceiver::start(tool, c.ns(), dst, 100, Duration::from_secs(10))?;
    udp_send_sized(tool, b.ns(), 40001, dst, 100, 1000, 3000)?;
    let got = rx.finish()?;
    let stats = xbr.client_ok(&["stats", BRIDGE])?;
    assert_eq!(got, 100, "B's fragmented datagrams\n{stats}");
    // A (port 1) was held to its share: half the table.
    let line = stats
        .lines()
        .find(|l| l.contains("fragment_share_full: port 1 "))
        .unwrap_or_else(|| panic!("no share hit for A's port\n{stats}"));
    assert!(line.contains("held 2048 refused "), "{line}");
    assert!(
        !stats.contains("fragment_share_full: port 2 "),
        "B never reached its share\n{stats}"
    );
    // And in the metrics, by port name.
    let text = scrape(&metrics);
    let want = format!(
        "xbr_port_share_refused_total{{bridge=\"{BRIDGE}\",port=\"{}\",resource=\"fragment_table\"}} ",
        a.host_if()
    );
    let line = text
        .lines()
        .find(|l| l.starts_with(&want))
        .unwrap_or_else(|| panic!("no {want} in\n{text}"));
    assert!(
        line[want.len()..].parse::<u64>().is_ok_and(|n| n > 0),
        "{line}"
    );
    Ok(())
}

/// `GET /metrics` from `addr`: the body.
fn scrape(addr: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("the metrics endpoint");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: xbr\r\n\r\n")
        .expect("request");
    let mut reply = String::new();
    s.read_to_string(&mut reply).expect("reply");
    reply
        .split_once("\r\n\r\n")
        .map_or(reply.clone(), |(_, b)| b.to_string())
}

/// A conntrack counter of `xbr conntrack stats`.
fn ct_stat(xbr: &Xbr, name: &str) -> Result<u64> {
    let out = xbr.client_ok(&["conntrack", "stats", BRIDGE])?;
    Ok(out
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {out}")))
}

/// Zone limits hold for the connections the XDP program creates too
/// (docs/fair-sharing.md): with the kernel creating new UDP connections
/// (one `ct()` fork, commit, one output), a zone limit of 3 stores three
/// of 40 new connections, the others' frames still go on (`+new`
/// uncommitted, as OVS forwards them), and the refusals are counted.
#[test]
fn zone_limits_hold_for_connections_the_kernel_creates() -> Result<()> {
    let tool = Path::new(TOOL);
    let (a, b) = xbr_tests::xdp_pods()?;
    a.add_neighbor(&b)?;
    b.add_neighbor(&a)?;
    let xbr = xbr_tests::start_xdp_pair_with(
        &a,
        &b,
        "on",
        &[],
        &[
            "table=0,priority=100,ip,ct_state=-trk,actions=ct(table=0,zone=5)",
            "table=0,priority=90,ip,ct_state=+trk+new,in_port=1,actions=ct(commit,zone=5),output:2",
            "table=0,priority=90,ip,ct_state=+trk+est,in_port=1,actions=output:2",
            "table=0,priority=0,actions=drop",
        ],
    )?;
    let dst = SocketAddrV4::new(b.ip(), 5001);
    // The first connection, by the packet thread, installs the template.
    let rx = UdpReceiver::start(tool, b.ns(), dst, 1, Duration::from_secs(10))?;
    xbr_tests::udp_send_from(tool, a.ns(), 20000, dst, 1, 100)?;
    assert_eq!(rx.finish()?, 1);
    let reply = xbr_tests::run_timeout(
        std::process::Command::new("ovs-appctl")
            .args(["dpctl/ct-set-limits", "zone=5,limit=3"])
            .env("OVS_RUNDIR", xbr.rundir()),
        xbr_tests::CMD_TIMEOUT,
    )?;
    assert!(reply.success(), "{reply:?}");
    let rx = UdpReceiver::start(tool, b.ns(), dst, 40, Duration::from_secs(10))?;
    xbr_tests::udp_send_flows(tool, a.ns(), dst, 40, 200, 40, 21000)?;
    assert_eq!(rx.finish()?, 40, "every frame goes on");
    let limits = xbr_tests::run_timeout(
        std::process::Command::new("ovs-appctl")
            .args(["dpctl/ct-get-limits"])
            .env("OVS_RUNDIR", xbr.rundir()),
        xbr_tests::CMD_TIMEOUT,
    )?;
    assert_eq!(limits.stdout, "default limit=0\nzone=5,limit=3,count=3\n");
    assert_eq!(ct_stat(&xbr, "connections")?, 4, "the first and three more");
    assert_eq!(ct_stat(&xbr, "zone_limited")?, 37);
    let kernel = ct_stat(&xbr, "created_in_kernel")?;
    let refused = ct_stat(&xbr, "kernel_reports_refused")?;
    assert!(
        kernel > 0 && refused > 0,
        "kernel {kernel}, refused {refused}"
    );
    Ok(())
}
