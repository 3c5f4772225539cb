//! `xbr trace` end to end: a running xbr programmed with the real
//! `ovs-ofctl`, traced through its control socket by the real `xbr trace`
//! binary.
//!
//! Needs root (xbr creates TAP ports) and a built `xbr`
//! (`cargo build -p xbr-daemon --bin xbr`; `./scripts/test` does both).
//! Without root every test fails with a message saying so. xbr runs in its
//! own namespace with internal (TAP) ports, so nothing is visible on the
//! host and no traffic is sent: a trace walks the pipeline only.

use nix::sys::signal::Signal;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;
use xbr_tests::{run_timeout, CmdOutput, Netns, Result, Xbr, BRIDGE};

const TRACE_TIMEOUT: Duration = Duration::from_secs(20);

/// xbr with three internal ports p1..p3 = ofports 1..3.
fn start() -> Result<Xbr> {
    let ns = Netns::new()?;
    Xbr::start_in(
        ns,
        &[
            "--port",
            "p1=1,type=internal",
            "--port",
            "p2=2,type=internal",
            "--port",
            "p3=3,type=internal",
        ],
    )
}

fn ctl_path(xbr: &Xbr, bridge: &str) -> PathBuf {
    xbr.rundir().join(format!("xbr.{bridge}.ctl"))
}

/// `xbr trace --rundir DIR BRIDGE FLOW`.
fn trace(xbr: &Xbr, bridge: &str, flow: &str) -> Result<CmdOutput> {
    trace_with(xbr, &[bridge, flow])
}

/// `xbr trace --rundir DIR ARGS...`.
fn trace_with(xbr: &Xbr, args: &[&str]) -> Result<CmdOutput> {
    let mut cmd = Command::new(Xbr::binary()?);
    cmd.arg("trace")
        .arg("--rundir")
        .arg(xbr.rundir())
        .args(args);
    run_timeout(&mut cmd, TRACE_TIMEOUT)
}

fn install(xbr: &Xbr) -> Result<()> {
    xbr.add_flow(
        "table=0, priority=100, in_port=1, ip, actions=load:0x2a->NXM_NX_REG0[],goto_table:10",
    )?;
    xbr.add_flow("table=10, priority=50, ip, reg0=0x2a, actions=resubmit(,20),output:3")?;
    xbr.add_flow("table=20, priority=10, ip, nw_dst=10.129.0.5, actions=output:2")?;
    Ok(())
}

#[test]
fn trace_shows_tables_flows_and_outputs() -> Result<()> {
    let xbr = start()?;
    install(&xbr)?;
    for flow in [
        "in_port=1,tcp,nw_src=10.128.0.2,nw_dst=10.129.0.5,tp_dst=80",
        // Port names resolve like ovs-ofctl's.
        "in_port=p1,tcp,nw_src=10.128.0.2,nw_dst=10.129.0.5,tp_dst=80",
    ] {
        let out = trace(&xbr, BRIDGE, flow)?;
        assert!(out.success(), "{out:?}");
        let text = &out.stdout;
        for expected in [
            "Flow: tcp,in_port=1,nw_src=10.128.0.2,nw_dst=10.129.0.5,tp_dst=80\n",
            "bridge(\"br0\")\n",
            "\n  0. table=0, priority=100,ip,in_port=1 actions=load:0x2a->NXM_NX_REG0[],goto_table:10\n",
            "\n       load:0x2a->NXM_NX_REG0[]\n",
            "\n       goto_table:10\n",
            "\n 10. table=10, priority=50,ip,reg0=0x2a actions=resubmit(,20),output:3\n",
            "\n       resubmit(,20)\n",
            "\n     20. table=20, priority=10,ip,nw_dst=10.129.0.5 actions=output:2\n",
            "\n           output:2\n",
            "\n       output:3\n",
            "\nDatapath actions: output:2,output:3\n",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
        }
    }
    // Tracing counts nothing.
    let dump = xbr.dump_flows()?;
    assert_eq!(dump.matches("n_packets=0,").count(), 3, "{dump}");
    Ok(())
}

#[test]
fn trace_reports_a_table_miss() -> Result<()> {
    let xbr = start()?;
    install(&xbr)?;
    let out = trace(&xbr, BRIDGE, "in_port=1,ip,nw_dst=10.129.0.9")?;
    assert!(out.success(), "{out:?}");
    assert!(
        out.stdout
            .contains("\n     20. No match (table miss): drop\n"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("\nDatapath actions: output:3\n"),
        "{}",
        out.stdout
    );
    let out = trace(&xbr, BRIDGE, "in_port=2,arp")?;
    assert!(out.success(), "{out:?}");
    assert!(
        out.stdout.contains("\n  0. No match (table miss): drop\n"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("\nDatapath actions: drop (table miss)\n"),
        "{}",
        out.stdout
    );
    Ok(())
}

/// Through `ct(table=0)` and on, as `ovs-appctl ofproto/trace` goes with
/// `--ct-next`: by default the fork resumes as a new connection, and
/// each `--ct-next` names the state of the next recirculation.
#[test]
fn trace_goes_on_through_conntrack() -> Result<()> {
    let xbr = start()?;
    xbr.add_flow("table=0, priority=300, ip, ct_state=-trk, actions=ct(table=0,zone=1)")?;
    xbr.add_flow(
        "table=0, priority=100, ip, ct_state=+trk+new, ct_zone=1, actions=ct(commit,zone=1),output:2",
    )?;
    xbr.add_flow("table=0, priority=100, ip, ct_state=+trk+est, ct_zone=1, actions=output:3")?;
    let flow = "in_port=p1,tcp,nw_src=10.128.0.2,nw_dst=10.128.0.3,tp_dst=80";
    let new = trace_with(&xbr, &[BRIDGE, flow])?;
    let est = trace_with(&xbr, &[BRIDGE, "--ct-next", "trk,est", flow])?;
    for (out, state, actions) in [
        (&new, "new|trk (the default", "ct(commit,zone=1),output:2"),
        (&est, "est|trk\n", "output:3"),
    ] {
        assert!(out.success(), "{out:?}");
        let text = &out.stdout;
        assert!(
            text.contains("\nDatapath actions: ct(zone=1),recirc(table=0)\n"),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "recirc(table=0) - resume conntrack with ct_state={state}"
            )),
            "{text}"
        );
        assert!(
            text.ends_with(&format!("\nDatapath actions: {actions}\n")),
            "{text}"
        );
    }
    // A state no connection has is refused before anything is traced.
    let bad = trace_with(&xbr, &[BRIDGE, "--ct-next", "est", flow])?;
    assert_eq!(bad.code(), Some(2), "{bad:?}");
    assert!(bad.stderr.contains("\"trk\" is unset"), "{bad:?}");
    Ok(())
}

#[test]
fn bad_flow_and_unknown_bridge_exit_2() -> Result<()> {
    let mut xbr = start()?;
    let out = trace(&xbr, BRIDGE, "in_port=1,ip,nw_dstt=10.0.0.1")?;
    assert_eq!(out.code(), Some(2), "{out:?}");
    assert!(out.stderr.contains("nw_dstt"), "{out:?}");
    let out = trace(&xbr, BRIDGE, "in_port=1,tp_dst=80")?;
    assert_eq!(out.code(), Some(2), "{out:?}");
    assert!(out.stderr.contains("tp_dst"), "{out:?}");

    let out = trace(&xbr, "br9", "in_port=1")?;
    assert_eq!(out.code(), Some(2), "{out:?}");
    let missing = ctl_path(&xbr, "br9");
    assert!(out.stderr.contains(&*missing.to_string_lossy()), "{out:?}");

    // The socket is private to root and goes away with xbr.
    let path = ctl_path(&xbr, BRIDGE);
    let meta = std::fs::metadata(&path)
        .map_err(|e| xbr_tests::HarnessError::Unexpected(format!("{}: {e}", path.display())))?;
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let status = xbr.stop(Signal::SIGTERM)?;
    assert!(status.success(), "{status:?}");
    assert!(!path.exists(), "{} left behind", path.display());
    let out = trace(&xbr, BRIDGE, "in_port=1")?;
    assert_eq!(out.code(), Some(2), "{out:?}");
    assert!(out.stderr.contains(&*path.to_string_lossy()), "{out:?}");
    Ok(())
}
