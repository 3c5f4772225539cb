//! The life of an xbr process on a node: killed hard and restarted, a
//! second instance refused while the first serves the bridge, and internal
//! (TAP) ports carrying traffic and disappearing with xbr.
//!
//! Needs root and a built `xbr`, like the skeleton tests. Every object is
//! made per test with a unique name and removed by its guard; traffic stays
//! between the test's namespaces.

use nix::sys::signal::Signal;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};
use xbr_tests::{
    link_exists, link_has_xdp, run_timeout, unique_tag, HarnessError, Netns, Pod, Result, Xbr,
    BRIDGE, CMD_TIMEOUT, NAME_PREFIX,
};

const IP_A: Ipv4Addr = Ipv4Addr::new(10, 128, 0, 2);
const IP_B: Ipv4Addr = Ipv4Addr::new(10, 128, 0, 3);
const MAC_A: &str = "0a:58:0a:80:00:02";
const MAC_B: &str = "0a:58:0a:80:00:03";

fn port_args(ports: &[(&str, u32)]) -> Vec<String> {
    ports
        .iter()
        .flat_map(|(n, p)| ["--port".to_string(), format!("{n}={p}")])
        .collect()
}

fn patch_flows(xbr: &Xbr) -> Result<()> {
    xbr.add_flow("in_port=1,actions=output:2")?;
    xbr.add_flow("in_port=2,actions=output:1")
}

fn assert_ping(from: &Pod, dst: Ipv4Addr, xbr: &Xbr) -> Result<()> {
    let out = from.ping(dst, 3)?;
    assert!(
        out.success(),
        "ping {dst} failed: {}\n{}\n--- xbr log:\n{}",
        out.describe_status(),
        out.stdout,
        xbr.log()
    );
    Ok(())
}

/// Waits (bounded) until `dev` has no XDP program.
fn wait_no_xdp(dev: &str) -> Result<bool> {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        if !link_has_xdp(dev)? {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigkill_leaves_the_pinned_program_failing_closed_and_a_restart_takes_over() -> Result<()> {
    let a = Pod::new(IP_A, 24, MAC_A)?;
    let b = Pod::new(IP_B, 24, MAC_B)?;
    let ports = [(a.host_if(), 1), (b.host_if(), 2)];
    let mut args = port_args(&ports);
    // The pods are left as they are (xdp-peer-gro off), so the ports are
    // no redirect targets and the flow cache forwards nothing by itself:
    // what the pinned programs do with no socket bound shows alone.
    args.extend(["--xdp-peer-gro".to_string(), "off".to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut xbr = Xbr::start(&args)?;
    patch_flows(&xbr)?;
    assert_ping(&a, IP_B, &xbr)?;

    let status = xbr.stop(Signal::SIGKILL)?;
    assert!(!status.success(), "SIGKILL must kill xbr, got {status}");
    // The programs hang off pinned bpf_links (docs/pinning.md): they stay
    // when the process dies, and with no socket bound drop what the flow
    // cache does not forward (these ports are no redirect targets, so it
    // forwards nothing).
    for dev in [a.host_if(), b.host_if()] {
        assert!(
            link_has_xdp(dev)?,
            "{dev} lost its pinned XDP program on SIGKILL"
        );
    }
    // Nothing forwards now.
    let out = a.ping(IP_B, 2)?;
    assert!(!out.success(), "ping got through with xbr dead");
    // The dead process's socket file is still there; a new xbr replaces it.
    assert!(xbr.mgmt_path().exists());

    xbr.restart(&args)?;
    patch_flows(&xbr)?;
    assert_ping(&a, IP_B, &xbr)?;
    assert_ping(&b, IP_A, &xbr)?;

    // The teardown detaches them once no xbr holds them.
    xbr.stop(Signal::SIGKILL)?;
    let out = xbr.teardown()?;
    assert!(out.success(), "{}", out.into_error());
    for dev in [a.host_if(), b.host_if()] {
        assert!(
            wait_no_xdp(dev)?,
            "{dev} kept its XDP program after teardown"
        );
    }
    Ok(())
}

#[test]
fn second_xbr_on_a_served_bridge_is_refused_and_attaches_nothing() -> Result<()> {
    let a = Pod::new(IP_A, 24, MAC_A)?;
    let b = Pod::new(IP_B, 24, MAC_B)?;
    let xbr = Xbr::with_ports(&[(a.host_if(), 1)])?;
    let spec = format!("{}=1", b.host_if());
    let out = xbr.run_beside(&["--port", &spec], CMD_TIMEOUT)?;
    assert!(
        !out.success() && out.code().is_some(),
        "a second xbr on the same bridge must exit with an error: {}",
        out.describe_status()
    );
    assert!(
        out.stderr.contains("another running switch"),
        "the error should say the bridge is taken: {}",
        out.stderr
    );
    assert!(
        !link_has_xdp(b.host_if())?,
        "the refused xbr left XDP on {}",
        b.host_if()
    );
    // The first one is untouched and still serving.
    let show = xbr.ofctl_ok(&["show", BRIDGE])?;
    assert!(show.contains(&format!(" 1({}): ", a.host_if())), "{show}");
    Ok(())
}

#[test]
fn internal_port_carries_traffic_and_vanishes_with_xbr() -> Result<()> {
    let a = Pod::new(IP_A, 24, MAC_A)?;
    // The TAP is created in the root namespace; the test moves it into a
    // namespace of its own (xbr keeps its file descriptor), so the
    // traffic to it stays inside the test's namespaces.
    let tap_ns = Netns::new()?;
    let tap = format!("{NAME_PREFIX}{}", unique_tag());
    let a_spec = format!("{}=1", a.host_if());
    let tap_spec = format!("{tap}=2,type=internal,mac={MAC_B}");
    let mut xbr = Xbr::start(&["--port", &a_spec, "--port", &tap_spec])?;

    assert!(link_exists(&tap)?, "internal port {tap} was not created");
    let show = xbr.ofctl_ok(&["show", BRIDGE])?;
    assert!(
        show.contains(&format!(" 2({tap}): addr:{MAC_B}")),
        "`show` lacks the internal port with its MAC:\n{show}"
    );

    let ip = |args: &[&str]| -> Result<()> {
        let mut argv = vec!["ip"];
        argv.extend_from_slice(args);
        tap_ns.exec(&argv, CMD_TIMEOUT)?.ok().map(drop)
    };
    run_timeout(
        std::process::Command::new("ip").args(["link", "set", &tap, "netns", tap_ns.name()]),
        CMD_TIMEOUT,
    )?
    .ok()?;
    ip(&["addr", "add", &format!("{IP_B}/24"), "dev", &tap])?;
    ip(&["link", "set", &tap, "up"])?;

    patch_flows(&xbr)?;
    assert_ping(&a, IP_B, &xbr)?;

    let status = xbr.stop(Signal::SIGTERM)?;
    assert!(status.success(), "xbr exited with {status}\n{}", xbr.log());
    let still_there = tap_ns.exec(&["ip", "link", "show", "dev", &tap], CMD_TIMEOUT)?;
    assert!(
        !still_there.success() && !link_exists(&tap)?,
        "internal port {tap} outlived xbr"
    );
    Ok(())
}

/// User + system CPU time of process `pid` so far.
fn cpu_time(pid: u32) -> Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|e| HarnessError::Unexpected(format!("reading /proc/{pid}/stat: {e}")))?;
    // Fields after the command name, which is in parentheses and may
    // contain spaces: state is field 3, utime 14, stime 15.
    let after = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or_else(|| HarnessError::Unexpected(format!("odd /proc/{pid}/stat: {stat}")))?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| -> Result<u64> {
        fields
            .get(i)
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| HarnessError::Unexpected(format!("odd /proc/{pid}/stat: {stat}")))
    };
    let getconf = run_timeout(
        std::process::Command::new("getconf").arg("CLK_TCK"),
        CMD_TIMEOUT,
    )?
    .ok()?;
    let hz: u64 =
        getconf.stdout.trim().parse().map_err(|_| {
            HarnessError::Unexpected(format!("getconf CLK_TCK: {}", getconf.stdout))
        })?;
    // utime and stime are fields 14 and 15, i.e. 11 and 12 after the name.
    let total = ticks(11)? + ticks(12)?;
    Ok(Duration::from_millis(total * 1000 / hz.max(1)))
}

#[test]
fn idle_xbr_sleeps_instead_of_spinning() -> Result<()> {
    let a = Pod::new(IP_A, 24, MAC_A)?;
    let b = Pod::new(IP_B, 24, MAC_B)?;
    let xbr = Xbr::with_ports(&[(a.host_if(), 1), (b.host_if(), 2)])?;
    let pid = xbr
        .pid()
        .ok_or_else(|| HarnessError::Unexpected("xbr has no pid".into()))?;
    // Let start-up work finish, then watch a quiet bridge.
    std::thread::sleep(Duration::from_millis(500));
    let window = Duration::from_secs(4);
    let before = cpu_time(pid)?;
    std::thread::sleep(window);
    let used = cpu_time(pid)? - before;
    // A busy-polling thread would use the whole window; the sleeping one
    // measured well under 1% here. 3% leaves room for a loaded machine.
    assert!(
        used < window * 3 / 100,
        "idle xbr used {used:?} of CPU in {window:?}"
    );
    Ok(())
}

/// Someone (a cleanup script, a careless operator) removed the socket
/// files: xbr must still stop promptly on SIGTERM, which needs its accept
/// loops woken without connecting to those files.
#[test]
fn sigterm_stops_xbr_whose_socket_files_were_removed() -> Result<()> {
    let a = Pod::new(IP_A, 24, MAC_A)?;
    let mut xbr = Xbr::start(&[
        "--port",
        &format!("{}=1", a.host_if()),
        "--listen",
        "ptcp:0:127.0.0.1",
    ])?;
    let ctl = xbr.rundir().join(format!("xbr.{BRIDGE}.ctl"));
    for file in [xbr.mgmt_path(), ctl] {
        std::fs::remove_file(&file)
            .map_err(|e| HarnessError::Unexpected(format!("removing {}: {e}", file.display())))?;
    }
    // stop() fails if xbr has not exited within its bound.
    let status = xbr.stop(Signal::SIGTERM)?;
    assert!(status.success(), "xbr exited with {status}\n{}", xbr.log());
    Ok(())
}
