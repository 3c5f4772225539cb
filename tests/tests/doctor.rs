//! `xbr doctor` (issue 30): passes on this machine, and each check fails
//! (or warns) when a test creates its condition: no bpffs (a private mount
//! namespace), a capability dropped (`capsh`), an ovs-vswitchd on the same
//! database (a private OVS), a bridge already served, a foreign XDP program
//! attached to a port.
//!
//! Needs root, `unshare`, `capsh`, `clang` and a built `xbr`.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;
use xbr_tests::ovsdb::OvsDb;
use xbr_tests::{
    require_root, require_tool, run_timeout, unique_tag, CmdOutput, Netns, Pod, Result, Xbr,
    NAME_PREFIX, POD_A_IP, POD_A_MAC,
};

const TIMEOUT: Duration = Duration::from_secs(30);

fn xbr_bin() -> Result<String> {
    Ok(Xbr::binary()?.to_string_lossy().into_owned())
}

/// `xbr doctor args...`, through `wrap` (e.g. `capsh ... --`) if given.
fn doctor(wrap: &[&str], args: &[&str]) -> Result<CmdOutput> {
    doctor_after(wrap, None, args)
}

/// [`doctor`], with the shell command `setup` run first inside `wrap`
/// (`unshare -m sh -c`, `capsh ... -- -c`), e.g. a mount or a ulimit.
fn doctor_after(wrap: &[&str], setup: Option<&str>, args: &[&str]) -> Result<CmdOutput> {
    require_root()?;
    let bin = xbr_bin()?;
    let mut cmd = match wrap.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest);
            c
        }
        None => Command::new(&bin),
    };
    if !wrap.is_empty() {
        // capsh and `sh -c` take the command as one string.
        let mut line = match setup {
            Some(setup) => format!("{setup} && exec {bin} doctor"),
            None => format!("exec {bin} doctor"),
        };
        for a in args {
            line.push(' ');
            line.push_str(a);
        }
        cmd.arg(line);
    } else {
        cmd.arg("doctor").args(args);
    }
    run_timeout(&mut cmd, TIMEOUT)
}

/// The output's line for check `name` (`STATUS  name: ...`).
fn line<'a>(out: &'a CmdOutput, name: &str) -> &'a str {
    let tag = format!("  {name}: ");
    out.stdout
        .lines()
        .find(|l| l.contains(&tag))
        .unwrap_or_else(|| panic!("no line for {name} in:\n{}{}", out.stdout, out.stderr))
}

fn assert_status(out: &CmdOutput, name: &str, status: &str) {
    let l = line(out, name);
    assert!(
        l.starts_with(status),
        "{name} should be {status}:\n{}",
        out.stdout
    );
    if status != "ok" {
        assert!(l.contains(" -- fix: "), "{name} has no fix:\n{l}");
    }
}

#[test]
fn passes_on_this_machine() -> Result<()> {
    let out = doctor(&[], &[])?;
    assert_eq!(out.code(), Some(0), "{}{}", out.stdout, out.stderr);
    for name in [
        "kernel",
        "bpf",
        "af_xdp",
        "memlock",
        "capabilities",
        "bridges",
    ] {
        assert_status(&out, name, "ok");
    }
    // With a bpffs (mounted in a private mount namespace) that is ok too.
    require_tool("unshare")?;
    let out = doctor_after(
        &["unshare", "-m", "sh", "-c"],
        Some("mount -t bpf bpf /sys/fs/bpf"),
        &[],
    )?;
    assert_eq!(out.code(), Some(0), "{}{}", out.stdout, out.stderr);
    assert_status(&out, "bpffs", "ok");
    Ok(())
}

#[test]
fn no_bpffs_is_reported() -> Result<()> {
    require_tool("unshare")?;
    // A private mount namespace where /sys/fs/bpf is a tmpfs.
    let out = doctor_after(
        &["unshare", "-m", "sh", "-c"],
        Some("mount -t tmpfs none /sys/fs/bpf"),
        &[],
    )?;
    assert_status(&out, "bpffs", "WARN");
    assert!(line(&out, "bpffs").contains("mount -t bpf bpf /sys/fs/bpf"));
    Ok(())
}

#[test]
fn a_dropped_capability_fails() -> Result<()> {
    require_tool("capsh")?;
    for (cap, name, check) in [
        ("cap_net_raw", "CAP_NET_RAW", "af_xdp"),
        // CAP_SYS_ADMIN would stand in for CAP_BPF (bpf_capable()).
        ("cap_bpf,cap_sys_admin", "CAP_BPF", "bpf"),
        ("cap_ipc_lock", "CAP_IPC_LOCK", "capabilities"),
    ] {
        let drop = format!("--drop={cap}");
        let out = doctor(&["capsh", &drop, "--", "-c"], &[])?;
        assert_eq!(
            out.code(),
            Some(1),
            "without {cap}:\n{}{}",
            out.stdout,
            out.stderr
        );
        assert_status(&out, "capabilities", "FAIL");
        assert!(line(&out, "capabilities").contains(name), "{}", out.stdout);
        assert_status(&out, check, "FAIL");
    }
    // Without CAP_IPC_LOCK and with the default 8 MiB RLIMIT_MEMLOCK,
    // AF_XDP memory cannot be pinned.
    let out = doctor_after(
        &["capsh", "--drop=cap_ipc_lock", "--", "-c"],
        Some("ulimit -l 8192"),
        &[],
    )?;
    assert_eq!(out.code(), Some(1), "{}{}", out.stdout, out.stderr);
    assert_status(&out, "memlock", "FAIL");
    assert!(line(&out, "memlock").contains("8192 KiB"), "{}", out.stdout);
    Ok(())
}

#[test]
fn an_ovs_vswitchd_on_the_same_database_fails() -> Result<()> {
    let ns = Netns::new()?;
    let mut db = OvsDb::start(Some(ns.name()))?;
    let target = format!("unix:{}", db.db_sock().display());
    let rundir = db.run_dir().to_string_lossy().into_owned();
    // ovsdb-server alone: all well.
    let out = doctor(&[], &["--ovsdb", &target, "--rundir", &rundir])?;
    assert_eq!(out.code(), Some(0), "{}{}", out.stdout, out.stderr);
    assert_status(&out, "ovsdb", "ok");
    assert_status(&out, "ovs-vswitchd", "ok");
    // A database interface whose device is gone: a warning (xbr marks it
    // failed and retries), not a failure.
    db.vsctl(&[
        "--no-wait",
        "add-br",
        "br0",
        "--",
        "set",
        "Bridge",
        "br0",
        "datapath_type=netdev",
    ])?
    .ok()?;
    db.vsctl(&["--no-wait", "add-port", "br0", "xbrt-gone0"])?
        .ok()?;
    let out = doctor(&[], &["--ovsdb", &target, "--rundir", &rundir])?;
    assert_eq!(out.code(), Some(0), "{}{}", out.stdout, out.stderr);
    assert_status(&out, "port xbrt-gone0", "WARN");
    db.vsctl(&["--no-wait", "del-port", "br0", "xbrt-gone0"])?
        .ok()?;
    // The real ovs-vswitchd on it, serving a bridge.
    db.start_vswitchd()?;
    db.vsctl(&[
        "--may-exist",
        "add-br",
        "br0",
        "--",
        "set",
        "Bridge",
        "br0",
        "datapath_type=netdev",
    ])?
    .ok()?;
    let out = doctor(&[], &["--ovsdb", &target, "--rundir", &rundir])?;
    assert_eq!(out.code(), Some(1), "{}{}", out.stdout, out.stderr);
    assert_status(&out, "ovs-vswitchd", "FAIL");
    assert!(line(&out, "ovs-vswitchd").contains(&db.db_sock().display().to_string()));
    assert_status(&out, "bridge br0", "FAIL");
    assert!(
        line(&out, "bridge br0").contains("ovs-vswitchd"),
        "{}",
        out.stdout
    );
    // A database nobody serves.
    let gone = format!("unix:/nonexistent/{NAME_PREFIX}-{}/db.sock", unique_tag());
    let out = doctor(&[], &["--ovsdb", &gone])?;
    assert_eq!(out.code(), Some(1));
    assert_status(&out, "ovsdb", "FAIL");
    Ok(())
}

#[test]
fn a_served_bridge_and_attached_xdp_programs_are_reported() -> Result<()> {
    let pod = Pod::new(POD_A_IP, 24, POD_A_MAC)?;
    let port = pod.host_if().to_string();
    {
        let xbr = Xbr::with_ports(&[(&port, 1)])?;
        let rundir = xbr.rundir().to_string_lossy().into_owned();
        let out = doctor(&[], &["--rundir", &rundir, "--port", &port])?;
        assert_eq!(out.code(), Some(1), "{}{}", out.stdout, out.stderr);
        assert_status(&out, "bridge br0", "FAIL");
        assert!(line(&out, "bridge br0").contains("xbr"), "{}", out.stdout);
        // xbr's own program: a warning (that xbr serves the port).
        assert_status(&out, &format!("xdp {port}"), "WARN");
    }
    // Another program on the port: xbr could not attach.
    require_tool("clang")?;
    let dir = std::env::temp_dir().join(format!("{NAME_PREFIX}-doctor-{}", unique_tag()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let _cleanup = RemoveDir(dir.clone());
    let src = dir.join("other.c");
    let obj = dir.join("other.o");
    std::fs::write(
        &src,
        "__attribute__((section(\"xdp\"), used)) int other_xdp(void *ctx) { return 2; }\n\
         char _license[] __attribute__((section(\"license\"), used)) = \"GPL\";\n",
    )
    .expect("writing the program");
    run_timeout(
        Command::new("clang")
            .args(["-O2", "-target", "bpf", "-c"])
            .arg(&src)
            .arg("-o")
            .arg(&obj),
        TIMEOUT,
    )?
    .ok()?;
    run_timeout(
        Command::new("ip")
            .args(["link", "set", "dev", &port, "xdpgeneric", "obj"])
            .arg(&obj)
            .args(["sec", "xdp"]),
        TIMEOUT,
    )?
    .ok()?;
    let out = doctor(&[], &["--port", &port])?;
    assert_eq!(out.code(), Some(1), "{}{}", out.stdout, out.stderr);
    assert_status(&out, &format!("xdp {port}"), "FAIL");
    assert!(
        line(&out, &format!("xdp {port}")).contains("other_xdp"),
        "{}",
        out.stdout
    );
    assert_status(&out, &format!("port {port}"), "ok");
    // A port that does not exist.
    let out = doctor(&[], &["--port", "xbrt-nosuch0"])?;
    assert_eq!(out.code(), Some(1));
    assert_status(&out, "port xbrt-nosuch0", "FAIL");
    Ok(())
}

struct RemoveDir(PathBuf);

impl Drop for RemoveDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn bad_flags_or_files_exit_2() -> Result<()> {
    let out = doctor(&[], &["--ovsdb", "tcp:1.2.3.4:6640"])?;
    assert_eq!(out.code(), Some(2), "{}{}", out.stdout, out.stderr);
    let conf = std::env::temp_dir().join(format!("{NAME_PREFIX}-doctor-{}.conf", unique_tag()));
    std::fs::write(&conf, "bogus = 1\n").expect("writing the file");
    let out = doctor(&[], &["--config", &conf.to_string_lossy()]);
    let _ = std::fs::remove_file(&conf);
    let out = out?;
    assert_eq!(out.code(), Some(2), "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains(":1: unknown key 'bogus'"),
        "{}",
        out.stderr
    );
    Ok(())
}
