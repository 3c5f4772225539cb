//! docs/operations.md's "Switch a node from OVS to xbr" and "Switch back
//! to OVS", end to end without systemd (issue 30): a private
//! ovsdb-server with the real ovs-vswitchd serving an agent-style bridge
//! (two pods, flows, ping); `xbr doctor` refuses while ovs-vswitchd runs;
//! ovs-vswitchd stops, doctor passes, `xbr run --config FILE` (the unit's
//! command) takes over the same database and sends READY=1 (a
//! NOTIFY_SOCKET made here); the flows are set up again and the pods ping
//! through xbr; `xbr probe` says ready; then back: xbr stops (STOPPING=1,
//! its XDP programs gone) and ovs-vswitchd serves the same bridge again.
//!
//! Needs root, Debian's Open vSwitch and a built `xbr`.

use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use xbr_tests::ovsdb::{agent_pod, OvsDb};
use xbr_tests::{link_has_xdp, run_timeout, unique_tag, CmdOutput, Pod, Result, Xbr, CMD_TIMEOUT};

/// A child sent SIGTERM (then SIGKILL) and waited for on drop.
struct Running(Child);

impl Running {
    fn stop(&mut self) {
        if let Ok(pid) = i32::try_from(self.0.id()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(self.0.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
    }
}

fn doctor(conf: &str) -> Result<CmdOutput> {
    run_timeout(
        Command::new(Xbr::binary()?).args(["doctor", "--config", conf]),
        Duration::from_secs(30),
    )
}

fn ping(from: &Pod, to: &Pod, who: &str) -> Result<()> {
    let out = from.ping(to.ip(), 3)?;
    assert!(
        out.success(),
        "ping through {who}: {}\n{}",
        out.describe_status(),
        out.stdout
    );
    Ok(())
}

/// Adds the two patch flows, once the switch serves `bridge` (bounded).
fn add_flows(db: &OvsDb, bridge: &str) -> Result<()> {
    let mgmt = db.run_dir().join(format!("{bridge}.mgmt"));
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::os::unix::net::UnixStream::connect(&mgmt).is_err() {
        assert!(Instant::now() < deadline, "{} never served", mgmt.display());
        std::thread::sleep(Duration::from_millis(50));
    }
    for flow in ["in_port=1,actions=output:2", "in_port=2,actions=output:1"] {
        db.ofctl(&["add-flow", bridge, flow])?.ok()?;
    }
    Ok(())
}

/// ovs-vswitchd's userspace datapath leaves the bridge's TAP device
/// behind when it stops: deleted on drop (after everything else).
struct DeleteLink(String);

impl Drop for DeleteLink {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.0])
            .stderr(Stdio::null())
            .status();
    }
}

#[test]
fn switch_a_node_from_ovs_to_xbr_and_back() -> Result<()> {
    let bridge = format!("xbrt{}", unique_tag());
    let _tap = DeleteLink(bridge.clone());
    let a = agent_pod(2)?;
    let b = agent_pod(3)?;
    let mut db = OvsDb::start(None)?;
    let run = db.run_dir().to_string_lossy().into_owned();
    let conf_path: PathBuf = db.dir().join("xbr.conf");
    // A pin root of the test's own (removed by the teardown below, or by
    // scripts/clean after a killed run), so it touches no other xbr's.
    let pin_root = format!("/sys/fs/bpf/xbrt-walk-{}", unique_tag());
    std::fs::write(
        &conf_path,
        format!(
            "ovsdb = unix:{}\nrundir = {run}\nbpf-pin-root = {pin_root}\n",
            db.db_sock().display()
        ),
    )
    .expect("writing xbr.conf");
    let conf = conf_path.to_string_lossy().into_owned();

    // The node as it runs today: ovs-vswitchd (userspace datapath, so no
    // kernel module) with the agent's bridge, ports and flows.
    db.start_vswitchd()?;
    db.vsctl(&[
        "add-br",
        &bridge,
        "--",
        "set",
        "Bridge",
        &bridge,
        "datapath_type=netdev",
        "fail_mode=secure",
        "protocols=OpenFlow13",
    ])?
    .ok()?;
    for p in [&a, &b] {
        db.vsctl(&["add-port", &bridge, p.host_if()])?.ok()?;
    }
    add_flows(&db, &bridge)?;
    ping(&a, &b, "ovs-vswitchd")?;

    // Preflight refuses while ovs-vswitchd runs on the database.
    let out = doctor(&conf)?;
    assert_eq!(out.code(), Some(1), "{}", out.stdout);
    assert!(out.stdout.contains("FAIL  ovs-vswitchd:"), "{}", out.stdout);
    assert!(
        out.stdout.contains(&format!("FAIL  bridge {bridge}:")),
        "{}",
        out.stdout
    );

    // Switch: stop ovs-vswitchd, preflight passes, start xbr as the unit does.
    db.stop_switch();
    let out = doctor(&conf)?;
    assert_eq!(out.code(), Some(0), "{}{}", out.stdout, out.stderr);
    let notify_path = db.dir().join("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).expect("notify socket");
    notify
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let log = std::fs::File::create(db.dir().join("xbr-walkthrough.log")).expect("log");
    let mut xbr = Running(
        db.command(
            &Xbr::binary()?.to_string_lossy(),
            &["run", "--config", &conf],
        )
        .env("NOTIFY_SOCKET", &notify_path)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("starting xbr"),
    );
    let mut buf = [0u8; 512];
    let n = notify.recv(&mut buf).expect("READY=1 within 30 s");
    assert!(String::from_utf8_lossy(&buf[..n]).contains("READY=1"));
    assert!(link_has_xdp(a.host_if())? && link_has_xdp(b.host_if())?);
    assert_eq!(db.ofport(a.host_if())?, "1");
    assert_eq!(db.ofport(b.host_if())?, "2");
    // The agent sets its flows up again after the switch restarted.
    add_flows(&db, &bridge)?;
    ping(&a, &b, "xbr")?;
    let target = format!("unix:{}", db.db_sock().display());
    let out = run_timeout(
        Command::new(Xbr::binary()?).args(["probe", "--rundir", &run, "--ovsdb", &target]),
        CMD_TIMEOUT,
    )?;
    assert!(out.success(), "{}", out.stderr);

    // And back: stop xbr, start ovs-vswitchd on the same database.
    xbr.stop();
    let n = notify.recv(&mut buf).expect("STOPPING=1");
    assert!(String::from_utf8_lossy(&buf[..n]).contains("STOPPING=1"));
    // A stopped xbr leaves its programs pinned (cached flows keep
    // forwarding, the rest is dropped) for the next xbr; switching back
    // to OVS removes them, as docs/operations.md says.
    assert!(
        link_has_xdp(a.host_if())?,
        "a stop keeps the pinned programs"
    );
    let out = run_timeout(
        Command::new(Xbr::binary()?).args([
            "teardown",
            "--bridge",
            &bridge,
            "--bpf-pin-root",
            &pin_root,
        ]),
        CMD_TIMEOUT,
    )?;
    assert!(out.success(), "{}", out.stderr);
    let _ = std::fs::remove_dir(&pin_root);
    assert!(
        !link_has_xdp(a.host_if())?,
        "xbr teardown left an XDP program"
    );
    db.start_vswitchd()?;
    // ovs-vswitchd takes the bridge back from the database.
    let deadline = Instant::now() + Duration::from_secs(20);
    while db.ofport(b.host_if())? != "2" {
        assert!(
            Instant::now() < deadline,
            "ovs-vswitchd did not take the ports back"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    add_flows(&db, &bridge)?;
    ping(&a, &b, "ovs-vswitchd again")?;
    Ok(())
}
