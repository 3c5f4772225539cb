//! The kernel fast path on a node configured only as the SDN agent does
//! it (issue 28): the bridge and the pods' ports come from the agent's
//! `ovs-vsctl` commands through a real ovsdb-server (TABLES.md: `add-br
//! ... fail_mode=secure protocols=OpenFlow13`, `add-port br0 vethX -- set
//! Interface vethX external_ids=...`), nothing xbr-specific, and the
//! pods are made as the agent's CNI plugin makes them (GRO off on their
//! eth0). xbr must find out itself that it can redirect to them
//! (`xdp_redirect=auto`, making the pods ready with GRO: `xdp-peer-gro`,
//! on by default), carry pod-to-pod UDP and TCP in the XDP flow cache,
//! keep VNIDs apart there, and follow a pod whose readiness changes while
//! traffic runs.
//!
//! The flows are the agent's multitenant pipeline for local pods (tables
//! 0, 20, 70 and 80 of TABLES.md, without the ARP, service and
//! conntrack tables the test does not exercise; neighbours are static).
//! No vxlan0 and tun0: they would attach to the test host's own
//! interfaces (the issue's cross-node and lab checks cover them).
//!
//! Needs root, python3 and a built `xbr`, like every end-to-end test.

use std::net::SocketAddrV4;
use std::path::Path;
use std::time::{Duration, Instant};
use xbr_tests::ovsdb::{agent_node, agent_node_with as node_with, agent_pod, OvsDb};
use xbr_tests::xbr_stats::{port_rx_packets as rx_packets, xdp_stat};
use xbr_tests::{tcp_transfer, udp_send, unique_tag, Pod, Result, UdpReceiver, POD_IF};

const TOOL: &str = env!("CARGO_BIN_EXE_xbr-testtool");
const RECV_TIMEOUT: Duration = Duration::from_secs(20);
/// How fast xbr must notice a pod's readiness change.
const FOLLOW_BOUND: Duration = Duration::from_secs(1);

/// `iface`'s line of `ovs-appctl dpif/show`.
fn dpif_line(db: &OvsDb, iface: &str) -> Result<String> {
    let out = db.appctl(&["dpif/show"])?.ok()?.stdout;
    Ok(out
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{iface} ")))
        .unwrap_or_default()
        .to_string())
}

/// Waits (up to [`FOLLOW_BOUND`] and a little more) until `iface`'s
/// `dpif/show` line says `ready` (`want`) or `not ready`; returns how
/// long it took.
fn wait_ready(db: &OvsDb, iface: &str, want: bool) -> Result<Duration> {
    let start = Instant::now();
    loop {
        let line = dpif_line(db, iface)?;
        let ready = line.contains(": ready") && !line.contains("not ready");
        if ready == want {
            return Ok(start.elapsed());
        }
        if start.elapsed() > 2 * FOLLOW_BOUND {
            return Err(xbr_tests::HarnessError::Unexpected(format!(
                "{iface} still not {}ready after {:?}: {line}",
                if want { "" } else { "not " },
                start.elapsed()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether GRO is on for the pod's eth0, as the pod sees it.
fn pod_gro(p: &Pod) -> Result<bool> {
    let out = p
        .ns()
        .exec(&["ethtool", "-k", POD_IF], xbr_tests::CMD_TIMEOUT)?
        .ok()?
        .stdout;
    Ok(out.contains("generic-receive-offload: on"))
}

/// Sends `n` UDP datagrams from `from` to `dst` in `to` at `rate` per
/// second (all must leave) and returns how many `to` received within
/// `timeout`.
fn received(
    from: &Pod,
    to: &Pod,
    dst: SocketAddrV4,
    n: u64,
    rate: u64,
    timeout: Duration,
) -> Result<u64> {
    let tool = Path::new(TOOL);
    let rx = UdpReceiver::start(tool, to.ns(), dst, n, timeout)?;
    assert_eq!(udp_send(tool, from.ns(), dst, n, rate)?, n);
    rx.finish()
}

#[test]
fn agent_configured_pods_ride_the_xdp_cache_and_stay_isolated() -> Result<()> {
    let bridge = format!("xbrt{}", unique_tag());
    let a = agent_pod(2)?;
    let b = agent_pod(3)?;
    let c = agent_pod(4)?;
    for (x, y) in [(&a, &b), (&b, &a), (&a, &c), (&c, &a)] {
        x.add_neighbor(y)?;
    }
    // As the CNI plugin leaves them: no GRO, so no NAPI for redirects.
    assert!(!pod_gro(&a)? && !pod_gro(&b)?);
    let mut db = OvsDb::start(None)?;
    agent_node(&mut db, &bridge, &[(&a, 10), (&b, 10), (&c, 20)])?;

    // xbr made every pod ready, and says so.
    for p in [&a, &b, &c] {
        let line = dpif_line(&db, p.host_if())?;
        assert!(
            line.contains("xdp_redirect=auto: ready (GRO turned on in the peer by xbr)"),
            "{line}\n{}",
            db.xbr_log()
        );
        assert!(pod_gro(p)?, "GRO in {}", p.host_if());
    }
    let stats = db.xbr_stats(&bridge)?;
    assert!(stats.contains("xdp_redirect=auto: ready"), "{stats}");

    // UDP A -> B (same VNID): the cache carries it after the first packets.
    const UDP: u64 = 5000;
    let before = db.xbr_stats(&bridge)?;
    let dst = SocketAddrV4::new(b.ip(), 5001);
    assert_eq!(
        received(&a, &b, dst, UDP, 20_000, RECV_TIMEOUT)?,
        UDP,
        "A->B UDP delivered"
    );
    let after = db.xbr_stats(&bridge)?;
    let hits = xdp_stat(&after, "hit_packets") - xdp_stat(&before, "hit_packets");
    let sent = rx_packets(&after, a.host_if()) - rx_packets(&before, a.host_if());
    assert!(sent >= UDP, "port counters: {sent}\n{after}");
    assert!(
        hits * 10 >= sent * 9,
        "UDP: {hits} XDP hits of {sent}\n{after}"
    );
    eprintln!("UDP: {hits} XDP hits of {sent} packets");

    // TCP A -> B, both directions' segments counted.
    let before = after;
    let bytes = 20 << 20;
    assert_eq!(
        tcp_transfer(&a, &b, 40_000, 8080, bytes, false)?,
        bytes.to_string()
    );
    let after = db.xbr_stats(&bridge)?;
    let hits = xdp_stat(&after, "hit_packets") - xdp_stat(&before, "hit_packets");
    let sent = rx_packets(&after, a.host_if()) - rx_packets(&before, a.host_if())
        + rx_packets(&after, b.host_if())
        - rx_packets(&before, b.host_if());
    assert!(
        hits * 10 >= sent * 9,
        "TCP: {hits} XDP hits of {sent}\n{after}"
    );
    eprintln!("TCP: {hits} XDP hits of {sent} packets");

    // VNID 10 and 20 stay apart on that path: nothing from A reaches C,
    // nor from C A, and A -> B still flows through the same entries.
    let dst_c = SocketAddrV4::new(c.ip(), 5002);
    assert_eq!(
        received(&a, &c, dst_c, 500, 20_000, Duration::from_secs(3))?,
        0,
        "A (VNID 10) reached C (VNID 20)"
    );
    let dst_a = SocketAddrV4::new(a.ip(), 5003);
    assert_eq!(
        received(&c, &a, dst_a, 500, 20_000, Duration::from_secs(3))?,
        0,
        "C (VNID 20) reached A (VNID 10)"
    );
    assert_eq!(received(&a, &b, dst, 500, 20_000, RECV_TIMEOUT)?, 500);
    let end = db.xbr_stats(&bridge)?;
    assert!(
        xdp_stat(&end, "hit_packets") > xdp_stat(&after, "hit_packets") + 450,
        "{end}"
    );
    db.vsctl(&["del-br", &bridge])?.ok()?;
    Ok(())
}

#[test]
fn a_pod_whose_readiness_changes_under_traffic_is_followed() -> Result<()> {
    let tool = Path::new(TOOL);
    let bridge = format!("xbrt{}", unique_tag());
    let a = agent_pod(2)?;
    let b = agent_pod(3)?;
    a.add_neighbor(&b)?;
    b.add_neighbor(&a)?;
    let mut db = OvsDb::start(None)?;
    agent_node(&mut db, &bridge, &[(&a, 0), (&b, 0)])?;
    wait_ready(&db, b.host_if(), true)?;

    // 4 s of UDP A -> B; B's peer loses GRO after 1 s and gets it back
    // after 2 s, as if the pod's owner changed it.
    const COUNT: u64 = 20_000;
    const RATE: u64 = 5_000;
    let dst = SocketAddrV4::new(b.ip(), 5001);
    let rx = UdpReceiver::start(tool, b.ns(), dst, COUNT, RECV_TIMEOUT)?;
    let sender = std::thread::scope(|s| -> Result<(u64, Duration, Duration, String)> {
        let send = s.spawn(|| udp_send(tool, a.ns(), dst, COUNT, RATE));
        std::thread::sleep(Duration::from_secs(1));
        b.exec_ok(&["ethtool", "-K", POD_IF, "gro", "off"])?;
        let off = wait_ready(&db, b.host_if(), false)?;
        let while_off = dpif_line(&db, b.host_if())?;
        std::thread::sleep(Duration::from_secs(1));
        b.exec_ok(&["ethtool", "-K", POD_IF, "gro", "on"])?;
        let on = wait_ready(&db, b.host_if(), true)?;
        let sent = send.join().expect("sender thread")?;
        Ok((sent, off, on, while_off))
    })?;
    let (sent, off, on, while_off) = sender;
    assert_eq!(sent, COUNT);
    let got = rx.finish()?;
    eprintln!("not ready seen after {off:?}, ready after {on:?}; {got} of {COUNT} delivered");
    assert!(off <= FOLLOW_BOUND, "not-ready noticed after {off:?}");
    assert!(on <= FOLLOW_BOUND, "ready noticed after {on:?}");
    assert!(
        while_off.contains("not ready") && while_off.contains("neither GRO nor an XDP program"),
        "{while_off}"
    );
    // While B was not ready its frames went by AF_XDP: delivered. Only
    // frames the kernel redirected between the pod's change and xbr
    // hearing of it may be lost (the kernel drops them): at most the
    // sending rate times the time it took to see the change (measured by
    // polling dpif/show, an upper bound) and a 20 ms margin.
    let window = off + Duration::from_millis(20);
    let allowed = (RATE as f64 * window.as_secs_f64()).ceil() as u64;
    assert!(
        COUNT - got <= allowed,
        "{got} of {COUNT} delivered across the change, {allowed} may be lost\n{}",
        db.xbr_log()
    );
    // And the cache carries B's traffic again.
    let before = db.xbr_stats(&bridge)?;
    assert_eq!(received(&a, &b, dst, 2000, 20_000, RECV_TIMEOUT)?, 2000);
    let after = db.xbr_stats(&bridge)?;
    let hits = xdp_stat(&after, "hit_packets") - xdp_stat(&before, "hit_packets");
    assert!(
        hits >= 1800,
        "{hits} XDP hits after B was ready again\n{after}"
    );
    db.vsctl(&["del-br", &bridge])?.ok()?;
    Ok(())
}

#[test]
fn without_peer_gro_pods_are_left_alone_and_served_by_the_packet_thread() -> Result<()> {
    let bridge = format!("xbrt{}", unique_tag());
    let a = agent_pod(2)?;
    let b = agent_pod(3)?;
    a.add_neighbor(&b)?;
    b.add_neighbor(&a)?;
    let mut db = OvsDb::start(None)?;
    node_with(
        &mut db,
        &bridge,
        &[(&a, 0), (&b, 0)],
        &["other_config:xdp-peer-gro=false"],
    )?;
    for p in [&a, &b] {
        let line = dpif_line(&db, p.host_if())?;
        assert!(
            line.contains("xdp_redirect=auto: not ready"),
            "{line}\n{}",
            db.xbr_log()
        );
        assert!(!pod_gro(p)?, "xbr touched {}", p.host_if());
    }
    // Delivered all the same, by the packet thread: no XDP hits.
    let before = db.xbr_stats(&bridge)?;
    let dst = SocketAddrV4::new(b.ip(), 5001);
    assert_eq!(received(&a, &b, dst, 2000, 10_000, RECV_TIMEOUT)?, 2000);
    let after = db.xbr_stats(&bridge)?;
    assert_eq!(
        xdp_stat(&after, "hit_packets"),
        xdp_stat(&before, "hit_packets"),
        "{after}"
    );
    // The pod turns GRO on itself: the port becomes ready, and the cache
    // carries its traffic.
    b.exec_ok(&["ethtool", "-K", POD_IF, "gro", "on"])?;
    let took = wait_ready(&db, b.host_if(), true)?;
    assert!(took <= FOLLOW_BOUND, "ready noticed after {took:?}");
    assert!(dpif_line(&db, b.host_if())?.contains(": ready, multi-buffer"));
    assert_eq!(received(&a, &b, dst, 2000, 10_000, RECV_TIMEOUT)?, 2000);
    let end = db.xbr_stats(&bridge)?;
    assert!(
        xdp_stat(&end, "hit_packets") >= xdp_stat(&after, "hit_packets") + 1800,
        "{end}"
    );
    // Turning the setting on makes the open ports' pods ready (A's).
    assert!(dpif_line(&db, a.host_if())?.contains("not ready"));
    db.vsctl(&["set", "Bridge", &bridge, "other_config:xdp-peer-gro=true"])?
        .ok()?;
    if let Err(e) = wait_ready(&db, a.host_if(), true) {
        eprintln!("{}", db.xbr_log());
        return Err(e);
    }
    let line = dpif_line(&db, a.host_if())?;
    assert!(
        line.contains("ready (GRO turned on in the peer by xbr)"),
        "{line}"
    );
    assert!(pod_gro(&a)?);
    db.vsctl(&["del-br", &bridge])?.ok()?;
    Ok(())
}
