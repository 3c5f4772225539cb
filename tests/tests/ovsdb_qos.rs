//! QoS through OVSDB (issue 7), as the SDN agent sets a pod's bandwidth:
//! Interface `ingress_policing_rate` polices what a pod sends, a Port's
//! `linux-htb` QoS `max-rate` limits what it receives, and a QoS type xbr
//! cannot apply is reported in the `error` column. iperf3 measures both
//! limits against 10 Mbit/s, and the unlimited direction in the same run.
//!
//! The XDP flow cache is on and the pods' ports are redirect targets (xbr
//! turns GRO on in the pods: `xdp_redirect=auto`, `xdp-peer-gro`), so
//! the limits must hold although the kernel could carry the traffic
//! (issue 28): a port's limited direction is kept off the cache, and the
//! unlimited one is carried by it.
//!
//! Needs root, iperf3 and a built `xbr`, like every end-to-end test.

use std::time::Duration;
use xbr_tests::ovsdb::{agent_pod, OvsDb};
use xbr_tests::{unique_tag, Pod, Result};

/// Mbit/s the receiver measured in an iperf3 TCP run from `from` to
/// `to`, leaving out the first seconds (slow start, and the policer's
/// initial bucket).
fn iperf3_mbps(from: &Pod, to: &Pod, secs: u32) -> Result<f64> {
    let ip = to.ip().to_string();
    let server =
        xbr_tests::Background::spawn(&mut to.ns().command("iperf3", &["-s", "-1", "-B", &ip]))?;
    std::thread::sleep(Duration::from_millis(500));
    let out = from
        .ns()
        .exec(
            &[
                "iperf3",
                "-c",
                &ip,
                "-t",
                &(secs + 2).to_string(),
                "-O",
                "2",
                "-J",
            ],
            Duration::from_secs(30),
        )?
        .ok()?;
    drop(server);
    let v: serde_json::Value = serde_json::from_str(&out.stdout)
        .map_err(|e| xbr_tests::HarnessError::Unexpected(format!("iperf3 -J: {e}")))?;
    v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .map(|b| b / 1e6)
        .ok_or_else(|| xbr_tests::HarnessError::Unexpected(format!("iperf3: {}", out.stdout)))
}

#[test]
fn ingress_policing_and_htb_max_rate_hold_pods_to_10_mbit() -> Result<()> {
    xbr_tests::require_tool("iperf3")?;
    let bridge = format!("xbrt{}", unique_tag());
    let a = agent_pod(2)?;
    let b = agent_pod(3)?;
    a.add_neighbor(&b)?;
    b.add_neighbor(&a)?;
    let mut db = OvsDb::start(None)?;
    db.start_xbr()?;
    db.add_secure_bridge(&bridge)?;
    for p in [&a, &b] {
        db.vsctl(&["add-port", &bridge, p.host_if()])?.ok()?;
    }
    for flow in ["in_port=1,actions=output:2", "in_port=2,actions=output:1"] {
        db.ofctl(&["add-flow", &bridge, flow])?.ok()?;
    }
    let within = |mbps: f64| (9.0..=11.0).contains(&mbps);
    let dpif = db.appctl(&["dpif/show"])?.ok()?.stdout;
    assert_eq!(
        dpif.matches("xdp_redirect=auto: ready").count(),
        2,
        "{dpif}"
    );
    let hits = |stats: &str| xbr_tests::xbr_stats::xdp_stat(stats, "hit_packets");

    // Pod A's traffic into the switch, policed at 10 Mbit/s.
    db.vsctl(&[
        "set",
        "interface",
        a.host_if(),
        "ingress_policing_rate=10000",
    ])?
    .ok()?;
    let policed = iperf3_mbps(&a, &b, 3)?;
    // The other direction is not limited, and the XDP cache carries it.
    let before = hits(&db.xbr_stats(&bridge)?);
    let free = iperf3_mbps(&b, &a, 1)?;
    let after = db.xbr_stats(&bridge)?;
    assert!(hits(&after) > before + 10_000, "{after}");
    assert!(
        within(policed),
        "policed A->B ran at {policed:.2} Mbit/s\n{}",
        db.xbr_log()
    );
    assert!(free > 50.0, "unlimited B->A ran at only {free:.2} Mbit/s");

    // The agent's egress limit: a linux-htb QoS with max-rate on A's port
    // limits what the switch sends to A.
    db.vsctl(&["set", "interface", a.host_if(), "ingress_policing_rate=0"])?
        .ok()?;
    db.vsctl(&[
        "set",
        "port",
        a.host_if(),
        "qos=@q",
        "--",
        "--id=@q",
        "create",
        "qos",
        "type=linux-htb",
        "other_config:max-rate=10000000",
    ])?
    .ok()?;
    let limited = iperf3_mbps(&b, &a, 3)?;
    assert!(
        within(limited),
        "HTB-limited B->A ran at {limited:.2} Mbit/s\n{}",
        db.xbr_log()
    );

    // A QoS type xbr cannot apply is reported in the error column, not
    // ignored; the port keeps forwarding.
    db.vsctl(&[
        "set",
        "port",
        b.host_if(),
        "qos=@q",
        "--",
        "--id=@q",
        "create",
        "qos",
        "type=linux-hfsc",
    ])?
    .ok()?;
    let err = db
        .vsctl(&["get", "interface", b.host_if(), "error"])?
        .ok()?
        .stdout;
    assert!(
        err.contains("'linux-hfsc' is not supported"),
        "error column: {err}"
    );
    assert_eq!(db.ofport(b.host_if())?, "2");
    db.vsctl(&["del-br", &bridge])?.ok()?;
    eprintln!("iperf3: policed {policed:.2}, unlimited {free:.2}, htb {limited:.2} Mbit/s");
    Ok(())
}
