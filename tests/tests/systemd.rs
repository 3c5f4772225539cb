//! The systemd unit (dist/xbr.service, issue 30): `systemd-analyze verify`
//! accepts it, its capability set is the one xbr keeps, and xbr sends
//! `READY=1` on `$NOTIFY_SOCKET` only once its bridges are up (a datagram
//! socket made here stands in for systemd), then `STOPPING=1` on SIGTERM.
//!
//! Needs root, systemd-analyze (Debian's systemd) and a built `xbr`.

use nix::sys::signal::Signal;
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use xbr_tests::ovsdb::OvsDb;
use xbr_tests::{
    link_has_xdp, require_tool, run_timeout, unique_tag, Netns, Pod, Result, Xbr, CMD_TIMEOUT,
    NAME_PREFIX, POD_A_IP, POD_A_MAC,
};

fn unit_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../dist/xbr.service")
}

/// A private temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(what: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("{NAME_PREFIX}-{what}-{}", unique_tag()));
        std::fs::create_dir_all(&p).expect("creating a temp dir");
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `systemd-analyze verify` of the unit text (as xbr.service, with
/// /usr/bin/xbr pointing at the built binary, which verify requires to
/// exist): its stderr, empty when all is well.
fn verify(text: &str) -> Result<(bool, String)> {
    require_tool("systemd-analyze")?;
    let bin = Xbr::binary()?;
    let dir = TempDir::new("unit");
    let unit = dir.0.join("xbr.service");
    std::fs::write(&unit, text.replace("/usr/bin/xbr", &bin.to_string_lossy()))
        .expect("writing the unit");
    let out = run_timeout(
        Command::new("systemd-analyze").arg("verify").arg(&unit),
        Duration::from_secs(60),
    )?;
    Ok((out.success(), out.stderr))
}

#[test]
fn the_unit_verifies() -> Result<()> {
    let text = std::fs::read_to_string(unit_path()).expect("dist/xbr.service");
    let (ok, stderr) = verify(&text)?;
    assert!(
        ok && stderr.trim().is_empty(),
        "systemd-analyze verify:\n{stderr}"
    );
    // The check can fail: a misspelt key is reported.
    let (_, stderr) = verify(&text.replace("ProtectHome=", "ProtectHomme="))?;
    assert!(
        stderr.contains("ProtectHomme"),
        "a bad key went unnoticed:\n{stderr}"
    );
    for want in [
        "Type=notify",
        "Conflicts=ovs-vswitchd.service",
        "Requires=ovsdb-server.service",
        "Restart=on-failure",
        "ExecStartPre=/usr/bin/xbr doctor --config /etc/xbr/xbr.conf",
        "ExecStart=/usr/bin/xbr run --config /etc/xbr/xbr.conf",
    ] {
        assert!(text.lines().any(|l| l == want), "the unit lacks {want}");
    }
    Ok(())
}

#[test]
fn the_units_capabilities_are_the_ones_xbr_keeps() -> Result<()> {
    let text = std::fs::read_to_string(unit_path()).expect("dist/xbr.service");
    let caps = |key: &str| -> Vec<String> {
        let mut v: Vec<String> = text
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key}"))
            .split_whitespace()
            .map(String::from)
            .collect();
        v.sort();
        v
    };
    // `xbr doctor` lists the set xbr keeps (privs.rs).
    let out = run_timeout(Command::new(Xbr::binary()?).arg("doctor"), CMD_TIMEOUT)?;
    let mut kept: Vec<String> = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("ok    capabilities: holds "))
        .expect("doctor's capabilities line")
        .split(", ")
        .map(String::from)
        .collect();
    kept.sort();
    assert_eq!(caps("CapabilityBoundingSet="), kept);
    assert_eq!(caps("AmbientCapabilities="), kept);
    Ok(())
}

/// A stand-in for systemd's notification socket.
struct NotifySocket {
    _dir: TempDir,
    path: PathBuf,
    sock: UnixDatagram,
}

impl NotifySocket {
    fn new() -> NotifySocket {
        let dir = TempDir::new("notify");
        let path = dir.0.join("notify.sock");
        let sock = UnixDatagram::bind(&path).expect("binding the notify socket");
        NotifySocket {
            _dir: dir,
            path,
            sock,
        }
    }

    fn env(&self) -> String {
        format!("NOTIFY_SOCKET={}", self.path.display())
    }

    /// The next datagram, within `timeout`.
    fn recv(&self, timeout: Duration) -> Option<String> {
        self.sock.set_read_timeout(Some(timeout)).ok()?;
        let mut buf = [0u8; 4096];
        let n = self.sock.recv(&mut buf).ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).into_owned())
    }
}

#[test]
fn ready_is_sent_once_the_bridge_serves() -> Result<()> {
    let pod = Pod::new(POD_A_IP, 24, POD_A_MAC)?;
    let notify = NotifySocket::new();
    let env = notify.env();
    let port = format!("{}=1", pod.host_if());
    let mut xbr = Xbr::start_wrapped(&["env", &env], &["--port", &port])?;
    let msg = notify
        .recv(Duration::from_secs(20))
        .unwrap_or_else(|| panic!("no notification\n{}", xbr.log()));
    assert!(msg.lines().any(|l| l == "READY=1"), "{msg:?}");
    assert!(msg.contains("STATUS="), "{msg:?}");
    // Sent after start-up: the bridge serves, its port is attached.
    assert!(link_has_xdp(pod.host_if())?);
    assert!(UnixStream::connect(xbr.mgmt_path()).is_ok());
    xbr.stop(Signal::SIGTERM)?;
    let msg = notify.recv(Duration::from_secs(10)).expect("STOPPING=1");
    assert!(msg.lines().any(|l| l == "STOPPING=1"), "{msg:?}");
    Ok(())
}

#[test]
fn ready_is_sent_once_the_databases_bridges_are_up() -> Result<()> {
    let ns = Netns::new()?;
    ns.exec(
        &["sh", "-c", "ip link add veth1 type veth peer name veth1p && ip link set veth1 up && ip link set veth1p up"],
        CMD_TIMEOUT,
    )?
    .ok()?;
    let db = OvsDb::start(Some(ns.name()))?;
    db.vsctl(&[
        "--no-wait",
        "add-br",
        "br0",
        "--",
        "set",
        "Bridge",
        "br0",
        "fail-mode=secure",
    ])?
    .ok()?;
    db.vsctl(&["--no-wait", "add-port", "br0", "veth1"])?.ok()?;
    let notify = NotifySocket::new();
    let bin = Xbr::binary()?;
    let target = format!("unix:{}", db.db_sock().display());
    let run = db.run_dir().to_string_lossy().into_owned();
    let child = db
        .command(
            &bin.to_string_lossy(),
            &["run", "--ovsdb", &target, "--rundir", &run],
        )
        .env("NOTIFY_SOCKET", &notify.path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting xbr");
    let _xbr = StopOnDrop(child);
    let started = Instant::now();
    let msg = notify.recv(Duration::from_secs(30));
    // At READY=1 the database's bridge is served and its port attached.
    let served = UnixStream::connect(db.run_dir().join("br0.mgmt")).is_ok();
    let attached = ns
        .exec(&["ip", "-d", "link", "show", "veth1"], CMD_TIMEOUT)?
        .stdout
        .contains("xdp");
    let msg = msg.unwrap_or_else(|| panic!("no READY=1 within {:?}", started.elapsed()));
    assert!(msg.lines().any(|l| l == "READY=1"), "{msg:?}");
    assert!(served, "READY=1 before br0.mgmt served");
    assert!(attached, "READY=1 before veth1 was attached");
    Ok(())
}

/// A child process sent SIGTERM and waited for on drop.
struct StopOnDrop(std::process::Child);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.0.id()) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(self.0.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
