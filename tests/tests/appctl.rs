//! The real `ovs-appctl` against xbr (`xbr_daemon::unixctl`): found
//! through `OVS_RUNDIR` as it finds ovs-vswitchd (a locked pidfile and
//! `ovs-vswitchd.PID.ctl`), answering `ofproto/trace`, `dpctl/*`,
//! `dpif/show`, `vlog/*`, `version` and `exit` as xbr's own commands do, and refusing
//! what it does not know as ovs-vswitchd refuses it (exit code 2); the
//! conntrack limit changed and the table summarised while traffic runs;
//! the NORMAL action's learned stations listed and forgotten.
//!
//! Needs root (xbr creates TAP ports) and a built `xbr`, like trace.rs.

use nix::sys::signal::Signal;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use xbr_tests::{
    run_timeout, udp_send_from, CmdOutput, Netns, Pod, Result, Xbr, BRIDGE, CMD_TIMEOUT, POD_A_IP,
    POD_A_MAC, POD_B_IP, POD_B_MAC,
};

const TOOL: &str = env!("CARGO_BIN_EXE_xbr-testtool");

/// `ovs-appctl ARGS...` with `OVS_RUNDIR` at xbr's run directory.
fn appctl(xbr: &Xbr, args: &[&str]) -> Result<CmdOutput> {
    xbr_tests::require_tool("ovs-appctl")?;
    let mut cmd = Command::new("ovs-appctl");
    cmd.args(args).env("OVS_RUNDIR", xbr.rundir());
    run_timeout(&mut cmd, CMD_TIMEOUT)
}

fn appctl_ok(xbr: &Xbr, args: &[&str]) -> Result<String> {
    let out = appctl(xbr, args)?;
    assert!(out.success(), "ovs-appctl {args:?}: {out:?}\n{}", xbr.log());
    Ok(out.stdout)
}

/// xbr in a namespace of its own with internal ports p1 and p2, tracking
/// IP in zone 1 and sending established traffic to p2, plus `flows`.
fn start_tracking(flows: &[&str]) -> Result<Xbr> {
    let ns = Netns::new()?;
    let xbr = Xbr::start_in(
        ns,
        &[
            "--port",
            "p1=1,type=internal",
            "--port",
            "p2=2,type=internal",
        ],
    )?;
    xbr.add_flow("table=0, priority=300, ip, ct_state=-trk, actions=ct(table=0,zone=1)")?;
    xbr.add_flow("table=0, priority=100, ip, ct_state=+trk+est, actions=output:2")?;
    for f in flows {
        xbr.add_flow(f)?;
    }
    Ok(xbr)
}

#[test]
fn ovs_appctl_reaches_xbr_as_it_reaches_ovs_vswitchd() -> Result<()> {
    let mut xbr = start_tracking(&[])?;

    assert!(
        appctl_ok(&xbr, &["version"])?.starts_with("ovs-vswitchd (xbr) "),
        "version"
    );
    // A control socket a killed xbr left behind is no bridge.
    drop(std::os::unix::net::UnixListener::bind(
        xbr.rundir().join("xbr.stale0.ctl"),
    ));
    assert_eq!(appctl_ok(&xbr, &["ofproto/list"])?, "br0\n");
    let dpif = appctl_ok(&xbr, &["dpif/show"])?;
    let (head, ports) = dpif.split_once('\n').expect("two parts");
    assert!(head.starts_with("netdev@ovs-netdev: hit:"), "{dpif}");
    assert!(head.contains(" missed:"), "{dpif}");
    // Internal ports are veth pairs by default (`internal_backend`).
    assert_eq!(
        ports,
        "  br0:\n    p1 1/1: (internal)\n    p2 2/2: (internal)\n"
    );

    // The same trace as `xbr trace`, through conntrack with --ct-next.
    let flow = "in_port=p1,tcp,nw_src=10.128.0.2,nw_dst=10.128.0.3,tp_dst=80";
    let via_appctl = appctl_ok(
        &xbr,
        &["ofproto/trace", BRIDGE, flow, "--ct-next", "trk,est"],
    )?;
    let own = xbr.client_ok(&["trace", BRIDGE, "--ct-next", "trk,est", flow])?;
    assert_eq!(via_appctl, own);
    assert!(
        via_appctl.ends_with("Datapath actions: output:2\n"),
        "{via_appctl}"
    );

    assert_eq!(
        appctl_ok(&xbr, &["dpctl/dump-flows"])?,
        xbr.client_ok(&["dpctl", "dump-flows", BRIDGE])?
    );
    assert_eq!(
        appctl_ok(&xbr, &["dpctl/dump-conntrack"])?,
        xbr.client_ok(&["conntrack", "dump", BRIDGE])?
    );
    assert_eq!(appctl_ok(&xbr, &["vlog/set", "ANY:file:dbg"])?, "");
    let list = appctl_ok(&xbr, &["vlog/list"])?;
    assert!(
        list.contains("\nconntrack        DBG        OFF       OFF        dataplane::conntrack\n"),
        "{list}"
    );
    assert_eq!(xbr.client_ok(&["log", BRIDGE])?, "debug\n");

    // What xbr does not serve, and a bad flow: errors, exit code 2.
    for (args, says) in [
        (&["nosuch/command"][..], "is not a valid command"),
        (
            &["ofproto/trace", BRIDGE, "in_port=1,nw_dstt=1.2.3.4"],
            "nw_dstt",
        ),
        (
            &["ofproto/trace", "br9", "in_port=1"],
            "br9: no such bridge",
        ),
    ] {
        let out = appctl(&xbr, args)?;
        assert_eq!(out.code(), Some(2), "{args:?}: {out:?}");
        assert!(out.stderr.contains(says), "{args:?}: {}", out.stderr);
    }

    // `exit` stops xbr as SIGTERM does, and it takes its files along.
    let pidfile = xbr.rundir().join("ovs-vswitchd.pid");
    let pid = std::fs::read_to_string(&pidfile).expect("pidfile");
    let socket = xbr
        .rundir()
        .join(format!("ovs-vswitchd.{}.ctl", pid.trim()));
    assert!(socket.exists());
    appctl_ok(&xbr, &["exit", "--cleanup"])?;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while xbr.is_running() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!xbr.is_running(), "xbr did not exit:\n{}", xbr.log());
    let status = xbr.stop(Signal::SIGTERM)?;
    assert!(status.success(), "{status:?}\n{}", xbr.log());
    assert!(!pidfile.exists() && !socket.exists(), "files left behind");
    Ok(())
}

/// What an operator reaches for when conntrack fills: the limit read and
/// lowered while xbr runs (new connections refused, the others kept and
/// counted), the table's size and its summary by protocol; the same
/// through `ovs-appctl` as through `xbr conntrack`.
#[test]
fn the_conntrack_limit_changes_while_running_and_the_table_is_summarised() -> Result<()> {
    let xbr = start_tracking(&[
        "table=0, priority=200, ip, ct_state=+trk+new, actions=ct(commit,zone=1),output:2",
    ])?;
    let ns = xbr.netns().expect("xbr runs in a namespace");
    for argv in [
        &["ip", "addr", "add", "10.9.0.1/24", "dev", "p1"][..],
        &["ip", "link", "set", "p1", "up"],
        &[
            "ip",
            "neigh",
            "add",
            "10.9.0.2",
            "lladdr",
            "02:00:00:00:00:02",
            "dev",
            "p1",
            "nud",
            "permanent",
        ],
    ] {
        assert!(ns.exec(argv, CMD_TIMEOUT)?.success(), "{argv:?}");
    }

    assert_eq!(
        appctl_ok(&xbr, &["dpctl/ct-set-maxconns", "3"])?,
        "setting maxconns successful\n"
    );
    assert_eq!(appctl_ok(&xbr, &["dpctl/ct-get-maxconns"])?, "3\n");
    let dst = SocketAddrV4::new(Ipv4Addr::new(10, 9, 0, 2), 53);
    for sport in 5000..5005 {
        udp_send_from(Path::new(TOOL), ns, sport, dst, 1, 100)?;
    }
    // The TAP port's frames reach the packet thread within moments.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while appctl_ok(&xbr, &["dpctl/ct-get-nconns"])? != "3\n" {
        assert!(
            std::time::Instant::now() < deadline,
            "{}",
            xbr.client_ok(&["conntrack", "stats", BRIDGE])?
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let stats = xbr.client_ok(&["conntrack", "stats", BRIDGE])?;
    assert!(stats.contains("\ntable_full: 2\n"), "{stats}");
    let summary = appctl_ok(&xbr, &["dpctl/ct-stats-show"])?;
    assert_eq!(summary, "Connections Stats:\n    Total: 3\n  UDP: 3\n");
    assert_eq!(summary, xbr.client_ok(&["conntrack", "summary", BRIDGE])?);
    assert_eq!(
        appctl_ok(&xbr, &["dpctl/ct-stats-show", "zone=2"])?,
        "Connections Stats:\n    Total: 0\n"
    );

    // Raised again with xbr's own command: new connections are taken.
    assert_eq!(
        xbr.client_ok(&["conntrack", "limit", BRIDGE, "10"])?,
        "10\n"
    );
    assert_eq!(appctl_ok(&xbr, &["dpctl/ct-get-maxconns"])?, "10\n");
    udp_send_from(Path::new(TOOL), ns, 5009, dst, 1, 100)?;
    while appctl_ok(&xbr, &["dpctl/ct-get-nconns"])? != "4\n" {
        assert!(std::time::Instant::now() < deadline + Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(50));
    }

    for args in [
        &["dpctl/ct-set-maxconns", "many"][..],
        &["dpctl/ct-set-maxconns"],
    ] {
        let out = appctl(&xbr, args)?;
        assert_eq!(out.code(), Some(2), "{args:?}: {out:?}");
        assert!(
            out.stderr.contains("maxconns missing or malformed"),
            "{}",
            out.stderr
        );
    }
    assert_eq!(appctl_ok(&xbr, &["dpctl/ct-get-maxconns"])?, "10\n");
    Ok(())
}

/// `fdb/show` lists the stations NORMAL learned, with their ports, as
/// OVS prints them (and as `xbr fdb show`); `fdb/flush` forgets them and
/// traffic relearns them.
#[test]
fn normal_learned_stations_are_listed_and_flushed() -> Result<()> {
    let a = Pod::new(POD_A_IP, 24, POD_A_MAC)?;
    let b = Pod::new(POD_B_IP, 24, POD_B_MAC)?;
    let (pa, pb) = (format!("{}=1", a.host_if()), format!("{}=2", b.host_if()));
    let xbr = Xbr::start(&["--port", &pa, "--port", &pb])?;
    xbr.add_flow("priority=0,actions=NORMAL")?;
    let header = " port  VLAN  MAC                Age\n";
    assert_eq!(appctl_ok(&xbr, &["fdb/show", BRIDGE])?, header);
    // Rows without the age (which may tick between two listings), the
    // columns as OVS aligns them.
    let rows = |text: &str| -> Vec<String> {
        assert!(text.starts_with(header), "{text}");
        let mut rows: Vec<String> = text
            .lines()
            .skip(1)
            .map(|l| {
                let (row, age) = l.split_at(l.len().saturating_sub(3));
                assert!(age.trim().parse::<u64>().is_ok_and(|s| s < 60), "{l}");
                row.to_string()
            })
            .collect();
        rows.sort();
        rows
    };
    let learned = vec![
        format!("    1     0  {POD_A_MAC}  "),
        format!("    2     0  {POD_B_MAC}  "),
    ];
    assert!(a.ping(POD_B_IP, 2)?.success(), "pings through NORMAL");
    let shown = appctl_ok(&xbr, &["fdb/show", BRIDGE])?;
    assert_eq!(rows(&shown), learned, "{shown}");
    assert_eq!(rows(&xbr.client_ok(&["fdb", "show", BRIDGE])?), learned);

    assert_eq!(
        appctl_ok(&xbr, &["fdb/flush", BRIDGE])?,
        "table successfully flushed\n"
    );
    assert_eq!(appctl_ok(&xbr, &["fdb/show"])?, header);
    assert!(a.ping(POD_B_IP, 2)?.success(), "pings after the flush");
    assert_eq!(rows(&appctl_ok(&xbr, &["fdb/show"])?), learned);
    assert_eq!(
        xbr.client_ok(&["fdb", "flush", BRIDGE])?,
        "table successfully flushed\n"
    );
    assert_eq!(appctl_ok(&xbr, &["fdb/show"])?, header);
    let out = appctl(&xbr, &["fdb/show", "br9"])?;
    assert_eq!(out.code(), Some(2), "{out:?}");
    Ok(())
}
