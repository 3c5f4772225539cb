//! The state file (issue 29, item 2): xbr stopped with SIGTERM, or killed
//! with SIGKILL, and started again comes back with the same flows,
//! groups, meters, port numbers and connections, and a long-lived TCP
//! connection through the agent's conntrack pipeline keeps working; a
//! corrupt, truncated or foreign-version file is refused by name, moved
//! aside, and xbr starts empty.
//!
//! The pipeline is the agent's conntrack skeleton (tables 0/30/31/80, as
//! in conntrack.rs) with a NetworkPolicy that lets only A start
//! connections to B. The TCP connection is A's to B, but B talks first
//! after every pause (it sends, A echoes): had the connection been
//! forgotten, B's next segment would start a new connection from B, which
//! the policy drops, and the conversation would stall.
//!
//! Needs root (namespaces, veths, XDP), a built `xbr` and `python3`.
//! Traffic: one TCP connection, about ten small segments a second, for
//! at most a minute.

use nix::sys::signal::Signal;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use xbr_tests::{require_tool, Conversation, HarnessError, Pod, Result, Xbr, BRIDGE};

const IP_A: Ipv4Addr = Ipv4Addr::new(10, 128, 0, 2);
const IP_B: Ipv4Addr = Ipv4Addr::new(10, 128, 0, 3);
const TCP_PORT: u16 = 7070;

/// The agent's conntrack tables with a policy (A may reach B), plus a
/// flow of each kind the state must keep: cookie, timeouts, flags, a
/// meter and a group.
const FLOWS: &[&str] = &[
    "table=0, priority=1000, ip, ct_state=-trk, actions=ct(table=0)",
    "table=0, priority=900, ip, ct_state=+trk+inv, actions=drop",
    "table=0, priority=100, ip, actions=goto_table:30",
    "table=0, priority=200, arp, actions=NORMAL",
    "table=30, priority=100, ip, ct_state=-rpl, actions=ct(commit,table=31)",
    "table=30, priority=0, actions=goto_table:31",
    "table=31, priority=1000, ip, ct_state=+trk+inv, actions=drop",
    "table=31, priority=100, ip, nw_dst=10.128.0.2, actions=load:1->NXM_NX_REG2[],goto_table:80",
    "table=31, priority=100, ip, nw_dst=10.128.0.3, actions=load:2->NXM_NX_REG2[],goto_table:80",
    "table=80, priority=200, ip, ct_state=+rpl, actions=output:NXM_NX_REG2[]",
    "table=80, priority=150, ip, nw_src=10.128.0.2, nw_dst=10.128.0.3, actions=output:NXM_NX_REG2[]",
    "table=80, priority=0, actions=drop",
    "cookie=0xabc, table=90, priority=50, hard_timeout=3600, idle_timeout=600, send_flow_rem, \
     ip, nw_dst=10.130.0.0/16, actions=meter:1,group:7",
    "table=90, priority=40, ip, nw_dst=10.131.0.0/16, \
     actions=ct(commit,zone=3,exec(load:0x5->NXM_NX_CT_MARK[]),nat(src=10.0.0.11))",
];
const GROUP: &str = "group_id=7,type=select,bucket=actions=output:1,bucket=actions=output:2";
const METER: &str = "meter=1,kbps,burst,stats,band=type=drop,rate=100000,burst_size=1000";

struct Lab {
    xbr: Xbr,
    args: Vec<String>,
    a: Pod,
    b: Pod,
}

fn lab(extra: &[&str]) -> Result<Lab> {
    require_tool("python3")?;
    let a = Pod::new(IP_A, 24, "0a:58:0a:80:00:02")?;
    let b = Pod::new(IP_B, 24, "0a:58:0a:80:00:03")?;
    a.add_neighbor(&b)?;
    b.add_neighbor(&a)?;
    let mut args = vec![
        "--port".to_string(),
        format!("{}=1", a.host_if()),
        "--port".to_string(),
        format!("{}=2", b.host_if()),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let xbr = Xbr::start(&argv)?;
    xbr.ofctl_ok(&["add-meter", BRIDGE, METER])?;
    xbr.ofctl_ok(&["add-group", BRIDGE, GROUP])?;
    for f in FLOWS {
        xbr.add_flow(f)?;
    }
    Ok(Lab { xbr, args, a, b })
}

impl Lab {
    fn restart(&mut self) -> Result<()> {
        let argv: Vec<&str> = self.args.iter().map(String::as_str).collect();
        self.xbr.restart(&argv)
    }
}

/// Everything that must be equal before and after a restart.
#[derive(Debug, PartialEq, Eq)]
struct Snapshot {
    flows: String,
    groups: String,
    meters: String,
    conntrack: String,
    ports: Vec<String>,
}

fn snapshot(xbr: &Xbr) -> Result<Snapshot> {
    let ports = xbr
        .ofctl_ok(&["show", BRIDGE])?
        .lines()
        .filter_map(|l| {
            l.trim_start()
                .split_once(": addr:")
                .map(|(p, _)| p.to_string())
        })
        .collect();
    Ok(Snapshot {
        flows: xbr.ofctl_ok(&["dump-flows", "--no-stats", BRIDGE])?,
        groups: xbr.ofctl_ok(&["dump-groups", BRIDGE])?,
        meters: xbr.ofctl_ok(&["dump-meters", BRIDGE])?,
        conntrack: xbr.client_ok(&["conntrack", "dump", BRIDGE])?,
        ports,
    })
}

fn state_file(xbr: &Xbr) -> PathBuf {
    xbr.rundir().join(format!("{BRIDGE}.state"))
}

/// Stops xbr with `signal`, starts it again, and checks that everything
/// came back and the conversation goes on. Returns the restart's log line.
fn restart_keeps_everything(lab: &mut Lab, signal: Signal, reason: &str) -> Result<()> {
    let talk = Conversation::start(&lab.a, &lab.b, TCP_PORT)?;
    talk.wait_more(10, &lab.xbr)?;
    let before = snapshot(&lab.xbr)?;
    assert!(
        before.conntrack.contains(&format!("dport={TCP_PORT}")),
        "the TCP connection is not tracked:\n{}",
        before.conntrack
    );
    if signal == Signal::SIGKILL {
        // The newest snapshot must hold the connection and every flow.
        std::thread::sleep(Duration::from_millis(2500));
    }
    let status = lab.xbr.stop(signal)?;
    assert_eq!(
        status.success(),
        signal == Signal::SIGTERM,
        "xbr's exit after {signal}: {status}"
    );
    assert!(
        state_file(&lab.xbr).exists(),
        "no state file after {signal}"
    );
    lab.restart()?;
    let after = snapshot(&lab.xbr)?;
    assert_eq!(before, after, "the restart after {signal} lost state");
    let log = lab.xbr.log();
    let line = log
        .lines()
        .find(|l| l.contains("state file restored"))
        .unwrap_or_else(|| panic!("no restore log line:\n{log}"));
    assert!(
        line.contains(&format!("at {reason}")) && line.contains("14 flows, 1 groups, 1 meters"),
        "unexpected restore line: {line}"
    );
    let stats = lab.xbr.client_ok(&["stats", BRIDGE])?;
    assert!(
        stats.contains("restored: written by xbr") && stats.contains(" port numbers"),
        "xbr stats does not report the restore:\n{stats}"
    );
    // The same connection carries on through the restored conntrack.
    talk.wait_more(10, &lab.xbr)?;
    let n = talk.finish()?;
    assert!(n >= 20, "only {n} echoes");
    Ok(())
}

#[test]
fn sigterm_then_start_restores_flows_groups_meters_ports_and_connections() -> Result<()> {
    let mut lab = lab(&[])?;
    restart_keeps_everything(&mut lab, Signal::SIGTERM, "stop")
}

#[test]
fn sigkill_then_start_restores_the_newest_snapshot() -> Result<()> {
    let mut lab = lab(&["--state-snapshot", "1"])?;
    restart_keeps_everything(&mut lab, Signal::SIGKILL, "snapshot")
}

/// Writes `bytes` as the state file, starts xbr, and checks that it
/// refused the file by name with `problem`, started empty and moved the
/// file aside.
fn refused(lab: &mut Lab, bytes: &[u8], problem: &str) -> Result<()> {
    let path = state_file(&lab.xbr);
    std::fs::write(&path, bytes).map_err(|e| io_err("writing the state file", e))?;
    lab.restart()?;
    let flows = lab.xbr.ofctl_ok(&["dump-flows", "--no-stats", BRIDGE])?;
    let groups = lab.xbr.ofctl_ok(&["dump-groups", BRIDGE])?;
    let conns = lab.xbr.client_ok(&["conntrack", "dump", BRIDGE])?;
    assert!(
        !flows.contains("actions=") && !groups.contains("group_id"),
        "a refused file was applied:\n{flows}{groups}"
    );
    assert!(
        conns.trim().is_empty(),
        "connections from a refused file: {conns}"
    );
    let log = lab.xbr.log();
    let shown = path.display().to_string();
    assert!(
        log.lines()
            .any(|l| l.contains(&shown) && l.contains(problem) && l.contains("empty bridge")),
        "no error naming {shown} and `{problem}`:\n{log}"
    );
    let stats = lab.xbr.client_ok(&["stats", BRIDGE])?;
    assert!(stats.contains("started empty: refused"), "{stats}");
    let aside = Path::new(&format!("{shown}.rejected")).to_path_buf();
    assert_eq!(
        std::fs::read(&aside).map_err(|e| io_err("reading the rejected file", e))?,
        bytes,
        "the refused file was not kept aside unchanged"
    );
    lab.xbr.stop(Signal::SIGKILL)?;
    // A clean start leaves no snapshot with the refused contents.
    let _ = std::fs::remove_file(&path);
    Ok(())
}

#[test]
fn corrupt_truncated_and_foreign_files_are_refused_and_xbr_starts_empty() -> Result<()> {
    let mut lab = lab(&["--state-snapshot", "0"])?;
    let talk = Conversation::start(&lab.a, &lab.b, TCP_PORT)?;
    talk.wait_more(3, &lab.xbr)?;
    lab.xbr.stop(Signal::SIGTERM)?;
    let _ = talk.finish();
    let good =
        std::fs::read(state_file(&lab.xbr)).map_err(|e| io_err("reading the state file", e))?;
    let text = String::from_utf8_lossy(&good).into_owned();
    assert!(
        text.starts_with("{\"format\":\"xbr-state\",\"version\":1,"),
        "{text:.200}"
    );

    refused(&mut lab, &good[..good.len() / 2], "truncated")?;
    let mut flipped = good.clone();
    let at = good.len() - 20;
    flipped[at] = if flipped[at] == b'1' { b'2' } else { b'1' };
    refused(&mut lab, &flipped, "corrupt")?;
    let v9 = text.replacen("\"version\":1,", "\"version\":9,", 1);
    refused(&mut lab, v9.as_bytes(), "format version 9")?;
    refused(
        &mut lab,
        b"ovs-ofctl add-flows br0 - << EOF\n",
        "not an xbr state file",
    )?;

    // The good file still restores whole.
    std::fs::write(state_file(&lab.xbr), &good).map_err(|e| io_err("writing the state file", e))?;
    lab.restart()?;
    let flows = lab.xbr.ofctl_ok(&["dump-flows", "--no-stats", BRIDGE])?;
    assert_eq!(flows.matches("actions=").count(), FLOWS.len(), "{flows}");
    Ok(())
}

#[test]
fn state_off_neither_restores_nor_writes() -> Result<()> {
    let mut lab = lab(&["--state", "off"])?;
    lab.xbr.stop(Signal::SIGTERM)?;
    assert!(
        !state_file(&lab.xbr).exists(),
        "--state off wrote a state file"
    );
    lab.restart()?;
    let flows = lab.xbr.ofctl_ok(&["dump-flows", BRIDGE])?;
    assert!(!flows.contains("actions="), "{flows}");
    Ok(())
}

fn io_err(context: &str, source: std::io::Error) -> HarnessError {
    HarnessError::Io {
        context: context.into(),
        source,
    }
}

/// The agent's whole pipeline in each of its modes (gen_flows.py, as in
/// agent_compat.rs: 100 pods, 10 namespaces, 20 nodes, 50 Services),
/// loaded as the agent loads it, comes back whole: every flow and group
/// reads back as it was saved, or the file would be refused.
#[test]
fn the_agents_whole_pipeline_in_every_mode_comes_back() -> Result<()> {
    let gen = xbr_tests::sdn_dir().join("gen_flows.py");
    if !gen.is_file() {
        return Err(HarnessError::Unexpected(format!(
            "{} not found: point XBR_SDN_DIR at the directory holding gen_flows.py",
            gen.display()
        )));
    }
    // The agent's port names and numbers (vxlan0=1, tun0=2, pods from
    // 3), as TAP devices: they hold numbers only (see peers/mod.rs).
    let mut args = vec!["--state-snapshot".to_string(), "0".to_string()];
    for p in bench::ovs::agent_ports(100) {
        args.push("--port".into());
        args.push(format!(
            "{}={},type=internal,internal_backend=tap",
            p.name, p.ofport
        ));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    for mode in ["networkpolicy", "multitenant", "subnet"] {
        let mut xbr = Xbr::start_in(xbr_tests::Netns::new()?, &args)?;
        let bundle = xbr.rundir().join("bundle.txt");
        let out = xbr_tests::run_timeout(
            std::process::Command::new("python3").arg(&gen).args([
                "--mode",
                mode,
                "--pods",
                "100",
                "--namespaces",
                "10",
                "--remote-nodes",
                "20",
                "--services",
                "50",
                "--format",
                "bundle",
            ]),
            Duration::from_secs(60),
        )?
        .ok()?;
        std::fs::write(&bundle, &out.stdout).map_err(|e| io_err("writing the bundle", e))?;
        let bundle_s = bundle.to_string_lossy().into_owned();
        xbr.ofctl_timeout(&["bundle", BRIDGE, &bundle_s], Duration::from_secs(60))?
            .ok()?;
        let flows = xbr.ofctl_ok(&["dump-flows", "--no-stats", BRIDGE])?;
        let groups = xbr.ofctl_ok(&["dump-groups", BRIDGE])?;
        let n = flows.matches("actions=").count();
        assert!(n > 100, "{mode}: only {n} flows loaded");
        xbr.stop(Signal::SIGTERM)?;
        xbr.restart(&args)?;
        assert_eq!(
            xbr.ofctl_ok(&["dump-flows", "--no-stats", BRIDGE])?,
            flows,
            "{mode}: flows differ after the restart. Log:\n{}",
            xbr.log()
        );
        assert_eq!(xbr.ofctl_ok(&["dump-groups", BRIDGE])?, groups, "{mode}");
        assert!(
            xbr.log().contains("state file restored: written by xbr"),
            "{mode}: not restored:\n{}",
            xbr.log()
        );
    }
    Ok(())
}

/// `ovs-appctl exit` (as `ovs-ctl stop` stops ovs-vswitchd) is a graceful
/// stop: the state is saved and the next start restores it.
#[test]
fn ovs_appctl_exit_saves_the_state() -> Result<()> {
    require_tool("ovs-appctl")?;
    let mut xbr = Xbr::start(&["--state-snapshot", "0"])?;
    xbr.add_flow("cookie=0x5, table=3, priority=7, ip, nw_dst=10.9.9.9, actions=drop")?;
    let flows = xbr.ofctl_ok(&["dump-flows", "--no-stats", BRIDGE])?;
    let out = xbr_tests::run_timeout(
        std::process::Command::new("ovs-appctl")
            .arg("exit")
            .env("OVS_RUNDIR", xbr.rundir()),
        Duration::from_secs(10),
    )?;
    assert!(out.success(), "ovs-appctl exit: {}", out.stderr);
    let deadline = Instant::now() + Duration::from_secs(10);
    while xbr.is_running() {
        if Instant::now() > deadline {
            return Err(HarnessError::Unexpected("xbr did not exit".into()));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(xbr.log().contains("state saved"), "{}", xbr.log());
    xbr.restart(&["--state-snapshot", "0"])?;
    assert_eq!(xbr.ofctl_ok(&["dump-flows", "--no-stats", BRIDGE])?, flows);
    Ok(())
}
