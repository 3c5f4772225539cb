//! Conntrack zone limits (`ovs-appctl dpctl/ct-set-limits`,
//! `ct-get-limits`, `ct-del-limits`) as OVS 3.1's userspace datapath
//! applies them, checked against the real ovs-vswitchd
//! (`datapath_type=netdev`) in the same test: the same database, bridge,
//! pods, flows and commands, first under ovs-vswitchd, then under xbr, and
//! the transcripts (command outputs, conntrack counts, datagrams
//! delivered) must be equal.
//!
//! The scenario: a pipeline committing new UDP connections in zone 5 and
//! delivering `+new` and `+est` frames. With `zone=5,limit=3`, six new
//! connections are all delivered (a commit over the limit leaves the
//! packet `+trk+new`, uncommitted) but only three are stored; the limit
//! is deleted (its count goes with it), a default limit of 2 is set, and
//! zones without their own limit share the default's one count.
//!
//! Needs root, Debian's Open vSwitch and a built `xbr`.

use std::net::SocketAddrV4;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use xbr_tests::ovsdb::{agent_pod, OvsDb};
use xbr_tests::{udp_send_flows, unique_tag, Pod, Result, UdpReceiver, POD_IF};

const TOOL: &str = env!("CARGO_BIN_EXE_xbr-testtool");
const PORT: u16 = 7000;

/// ovs-vswitchd's userspace datapath leaves the bridge's TAP device
/// behind when it stops: deleted on drop.
struct DeleteLink(String);

impl Drop for DeleteLink {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.0])
            .stderr(Stdio::null())
            .status();
    }
}

/// The switch's `ovs-appctl`: `-t` its control socket for ovs-vswitchd
/// (started with `--unixctl`), xbr's found by its pidfile.
struct Appctl<'a> {
    db: &'a OvsDb,
    target: Option<String>,
}

impl Appctl<'_> {
    fn run(&self, args: &[&str]) -> Result<xbr_tests::CmdOutput> {
        let mut argv: Vec<&str> = Vec::new();
        if let Some(t) = &self.target {
            argv.extend(["-t", t.as_str()]);
        }
        argv.extend_from_slice(args);
        self.db.appctl(&argv)
    }
}

fn appctl(db: &Appctl, args: &[&str]) -> Result<String> {
    let out = db.run(args)?;
    assert!(out.success(), "ovs-appctl {args:?}: {out:?}");
    Ok(out.stdout)
}

/// `ovs-appctl ARGS` must fail with exit code 2 and `message`.
fn appctl_refused(db: &Appctl, args: &[&str], message: &str) -> Result<String> {
    let out = db.run(args)?;
    assert_eq!(out.code(), Some(2), "ovs-appctl {args:?}: {out:?}");
    assert!(out.stderr.contains(message), "{args:?}: {}", out.stderr);
    Ok(format!("{args:?} refused: {message}"))
}

/// Waits (bounded) until `ct-get-limits ARGS` prints `want`; returns what
/// it printed last.
fn limits_become(db: &Appctl, args: &[&str], want: &str) -> Result<String> {
    let mut argv = vec!["dpctl/ct-get-limits"];
    argv.extend_from_slice(args);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = appctl(db, &argv)?;
        if got == want || Instant::now() >= deadline {
            return Ok(got);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One datagram from each of `ports` (a new connection each); returns how
/// many arrived at `b`.
fn new_connections(a: &Pod, b: &Pod, ports: std::ops::Range<u16>) -> Result<u64> {
    let n = u64::from(ports.end - ports.start);
    let dst = SocketAddrV4::new(b.ip(), PORT);
    let rx = UdpReceiver::start(Path::new(TOOL), b.ns(), dst, n, Duration::from_secs(5))?;
    // One numbered datagram per source port.
    udp_send_flows(
        Path::new(TOOL),
        a.ns(),
        dst,
        n,
        100,
        n as usize,
        ports.start,
    )?;
    rx.finish()
}

/// The scenario under whichever switch serves `bridge`; its transcript.
fn scenario(db: &OvsDb, ovs: bool, bridge: &str, a: &Pod, b: &Pod) -> Result<Vec<String>> {
    let ctl = Appctl {
        db,
        target: ovs.then(|| {
            db.run_dir()
                .join("ovs-vswitchd.ctl")
                .to_string_lossy()
                .into_owned()
        }),
    };
    let mgmt = db.run_dir().join(format!("{bridge}.mgmt"));
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::os::unix::net::UnixStream::connect(&mgmt).is_err() {
        assert!(Instant::now() < deadline, "{} never served", mgmt.display());
        std::thread::sleep(Duration::from_millis(50));
    }
    // The unixctl socket may come a moment after the bridge's.
    loop {
        let out = ctl.run(&["version"])?;
        if out.success() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "ovs-appctl never answered: {out:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Ports forwarding before the scenario counts anything (no ct()).
    db.ofctl(&["add-flow", bridge, "priority=0,actions=NORMAL"])?
        .ok()?;
    while !a.ping(b.ip(), 1)?.success() {
        assert!(Instant::now() < deadline, "no path between the pods");
    }
    db.ofctl(&["del-flows", bridge])?.ok()?;
    for flow in [
        "table=0,priority=100,ip,actions=ct(table=1,zone=5)",
        "table=0,priority=10,actions=NORMAL",
        "table=1,priority=100,ip,ct_state=+trk+new,actions=ct(commit,zone=5),NORMAL",
        "table=1,priority=90,ip,ct_state=+trk+est,actions=NORMAL",
        "table=1,priority=80,ip,actions=drop",
    ] {
        db.ofctl(&["add-flow", bridge, flow])?.ok()?;
    }
    let mut t = Vec::new();
    t.push(appctl(&ctl, &["dpctl/ct-set-limits", "zone=5,limit=3"])?);
    t.push(appctl(&ctl, &["dpctl/ct-get-limits"])?);
    // Over the limit, frames still go on (+trk+new), uncommitted.
    t.push(format!(
        "delivered {}",
        new_connections(a, b, 40001..40007)?
    ));
    t.push(limits_become(
        &ctl,
        &[],
        "default limit=0\nzone=5,limit=3,count=3\n",
    )?);
    t.push(appctl(&ctl, &["dpctl/ct-get-nconns"])?);
    // Asked zones: one with a limit, one with none (limit 0, count 0).
    t.push(appctl(&ctl, &["dpctl/ct-get-limits", "zone=5,9"])?);

    // Deleted: its count goes; a default limit is one count shared by the
    // zones without their own.
    t.push(appctl(&ctl, &["dpctl/ct-del-limits", "zone=5"])?);
    t.push(appctl(&ctl, &["dpctl/ct-get-limits"])?);
    t.push(appctl(&ctl, &["dpctl/ct-set-limits", "default=2"])?);
    t.push(format!(
        "delivered {}",
        new_connections(a, b, 40011..40014)?
    ));
    t.push(limits_become(
        &ctl,
        &["zone=5,7"],
        "default limit=2\nzone=5,limit=2,count=2\nzone=7,limit=2,count=2\n",
    )?);
    t.push(appctl(&ctl, &["dpctl/ct-get-nconns"])?);
    // Raising the limit keeps the count; a zone limit of its own is
    // counted apart from the default's.
    t.push(appctl(
        &ctl,
        &["dpctl/ct-set-limits", "default=4", "zone=5,limit=1"],
    )?);
    t.push(format!(
        "delivered {}",
        new_connections(a, b, 40021..40023)?
    ));
    t.push(limits_become(
        &ctl,
        &[],
        "default limit=4\nzone=5,limit=1,count=1\n",
    )?);
    t.push(appctl(&ctl, &["dpctl/ct-get-nconns"])?);

    t.push(appctl_refused(
        &ctl,
        &["dpctl/ct-set-limits", "zone=5"],
        "failed to parse zone limit",
    )?);
    t.push(appctl_refused(
        &ctl,
        &["dpctl/ct-set-limits", "default=x"],
        "invalid default limit",
    )?);
    t.push(appctl_refused(
        &ctl,
        &["dpctl/ct-set-limits", "zone=5,limit=1,speed=3"],
        "invalid zone limit field: speed",
    )?);
    t.push(appctl_refused(
        &ctl,
        &["dpctl/ct-del-limits", "5"],
        "invalid argument 5",
    )?);
    t.push(appctl_refused(
        &ctl,
        &["dpctl/ct-get-limits", "zone=x"],
        "invalid zone",
    )?);
    // Nothing half-applied by the refusals.
    t.push(appctl(&ctl, &["dpctl/ct-get-limits"])?);
    t.push(appctl(&ctl, &["dpctl/ct-del-limits", "zone=5,6"])?);
    t.push(appctl(&ctl, &["dpctl/ct-get-limits", "zone=5"])?);
    Ok(t)
}

#[test]
fn zone_limits_apply_as_in_ovs_userspace() -> Result<()> {
    let bridge = format!("xbrt{}", unique_tag());
    let _tap = DeleteLink(bridge.clone());
    let a = agent_pod(2)?;
    let b = agent_pod(3)?;
    a.add_neighbor(&b)?;
    b.add_neighbor(&a)?;
    // OVS's userspace conntrack checks L4 checksums: full ones, not the
    // veth's offloaded partial ones.
    for p in [&a, &b] {
        p.exec_ok(&["ethtool", "-K", POD_IF, "tx", "off"])?;
    }
    let mut db = OvsDb::start(None)?;

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
    ])?
    .ok()?;
    for p in [&a, &b] {
        db.vsctl(&["add-port", &bridge, p.host_if()])?.ok()?;
    }
    let ovs = scenario(&db, true, &bridge, &a, &b)?;
    db.stop_switch();

    db.start_xbr()?;
    let xbr = scenario(&db, false, &bridge, &a, &b)?;
    let stats = db.xbr_stats(&bridge)?;

    let want: Vec<&str> = vec![
        "",
        "default limit=0\nzone=5,limit=3,count=0\n",
        "delivered 6",
        "default limit=0\nzone=5,limit=3,count=3\n",
        "3\n",
        "default limit=0\nzone=5,limit=3,count=3\nzone=9,limit=0,count=0\n",
        "",
        "default limit=0\n",
        "",
        "delivered 3",
        "default limit=2\nzone=5,limit=2,count=2\nzone=7,limit=2,count=2\n",
        "5\n",
        "",
        "delivered 2",
        "default limit=4\nzone=5,limit=1,count=1\n",
        "6\n",
    ];
    assert_eq!(&ovs[..want.len()], &want[..], "ovs-vswitchd");
    assert_eq!(xbr, ovs, "xbr against ovs-vswitchd");
    // Each refused commit counted: 3, then 1, then 1.
    assert!(stats.contains("\n  zone_limited: 5\n"), "{stats}");
    Ok(())
}
