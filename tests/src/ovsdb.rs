//! A private Debian `ovsdb-server` (vswitch schema) with a switch as its
//! client: xbr (`xbr run --ovsdb`) or the real `ovs-vswitchd`, for
//! comparing the two under the same `ovs-vsctl` commands.
//!
//! Everything lives in one temporary directory (database, sockets, logs,
//! pid files; `OVS_RUNDIR`/`OVS_DBDIR`/`OVS_LOGDIR`/`OVS_SYSCONFDIR` point
//! there), optionally inside a network namespace, so nothing touches the
//! host's Open vSwitch. Daemons are stopped by the pids they wrote and the
//! directory is removed on drop.

use crate::cmd::{describe, run_timeout, CmdOutput};
use crate::netns::{unique_tag, NAME_PREFIX};
use crate::{require_root, require_tool, HarnessError, Pod, Result, Xbr, CMD_TIMEOUT};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::fs::File;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `ovs-vsctl --timeout`, as the agent uses.
pub const VSCTL_TIMEOUT: u64 = 30;
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

enum Switch {
    Xbr(Child),
    Vswitchd(u32),
}

pub struct OvsDb {
    dir: PathBuf,
    netns: Option<String>,
    server_pid: Option<u32>,
    switch: Option<Switch>,
    /// More ovsdb-server arguments (another remote, TLS files).
    server_args: Vec<String>,
}

fn pid_alive(pid: u32) -> bool {
    // A zombie still has a /proc entry; its state is Z.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !s
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

fn stop_pid(pid: u32) {
    let Ok(raw) = i32::try_from(pid) else {
        return;
    };
    let _ = kill(Pid::from_raw(raw), Signal::SIGTERM);
    let deadline = Instant::now() + STOP_TIMEOUT;
    while pid_alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    if pid_alive(pid) {
        let _ = kill(Pid::from_raw(raw), Signal::SIGKILL);
    }
}

impl OvsDb {
    /// Creates the database and starts ovsdb-server (in `netns` if
    /// given).
    pub fn start(netns: Option<&str>) -> Result<Self> {
        Self::start_with(netns, &[])
    }

    /// [`OvsDb::start`], ovsdb-server getting `server_args` too (e.g.
    /// `--remote=pssl:PORT:127.0.0.1` and its `--private-key` ...).
    pub fn start_with(netns: Option<&str>, server_args: &[String]) -> Result<Self> {
        require_root()?;
        for tool in ["ovsdb-server", "ovsdb-tool", "ovs-vsctl"] {
            require_tool(tool)?;
        }
        let dir = std::env::temp_dir().join(format!("{NAME_PREFIX}-ovsdb-{}", unique_tag()));
        for sub in ["run", "db", "log", "etc"] {
            let p = dir.join(sub);
            std::fs::create_dir_all(&p)
                .map_err(|e| HarnessError::io(format!("creating {}", p.display()), e))?;
        }
        let mut db = OvsDb {
            dir,
            netns: netns.map(String::from),
            server_pid: None,
            switch: None,
            server_args: server_args.to_vec(),
        };
        let conf = db.dir.join("db/conf.db");
        run_timeout(
            Command::new("ovsdb-tool").args([
                "create",
                &conf.to_string_lossy(),
                "/usr/share/openvswitch/vswitch.ovsschema",
            ]),
            CMD_TIMEOUT,
        )?
        .ok()?;
        db.start_server()?;
        db.vsctl(&["--no-wait", "init"])?.ok()?;
        Ok(db)
    }

    pub fn run_dir(&self) -> PathBuf {
        self.dir.join("run")
    }

    pub fn db_sock(&self) -> PathBuf {
        self.run_dir().join("db.sock")
    }

    fn log_dir(&self) -> PathBuf {
        self.dir.join("log")
    }

    /// The directory every path in outputs starts with (for normalising).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `program args...`, in the namespace, with the private OVS dirs.
    pub fn command(&self, program: &str, args: &[&str]) -> Command {
        let mut cmd = match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, program]);
                c
            }
            None => Command::new(program),
        };
        cmd.args(args)
            .env("OVS_RUNDIR", self.run_dir())
            .env("OVS_DBDIR", self.dir.join("db"))
            .env("OVS_LOGDIR", self.log_dir())
            .env("OVS_SYSCONFDIR", self.dir.join("etc"));
        cmd
    }

    fn read_pid(&self, name: &str) -> Result<u32> {
        let path = self.run_dir().join(format!("{name}.pid"));
        let text = std::fs::read_to_string(&path)
            .map_err(|e| HarnessError::io(format!("reading {}", path.display()), e))?;
        text.trim()
            .parse()
            .map_err(|_| HarnessError::Unexpected(format!("{} holds {text:?}", path.display())))
    }

    fn daemon_args(&self, name: &str) -> Vec<String> {
        let run = self.run_dir();
        vec![
            format!("--unixctl={}", run.join(format!("{name}.ctl")).display()),
            format!("--pidfile={}", run.join(format!("{name}.pid")).display()),
            format!(
                "--log-file={}",
                self.log_dir().join(format!("{name}.log")).display()
            ),
            "--detach".into(),
            "--no-chdir".into(),
            "-vconsole:off".into(),
        ]
    }

    /// Starts ovsdb-server (again, after [`OvsDb::stop_server`]).
    pub fn start_server(&mut self) -> Result<()> {
        let conf = self.dir.join("db/conf.db").to_string_lossy().into_owned();
        let remote = format!("--remote=punix:{}", self.db_sock().display());
        let mut args = vec![conf, remote];
        args.extend(self.server_args.iter().cloned());
        args.extend(self.daemon_args("ovsdb-server"));
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        // --detach returns once the socket is ready.
        run_timeout(&mut self.command("ovsdb-server", &argv), CMD_TIMEOUT)?.ok()?;
        self.server_pid = Some(self.read_pid("ovsdb-server")?);
        Ok(())
    }

    /// Stops ovsdb-server (the switch stays).
    pub fn stop_server(&mut self) {
        if let Some(pid) = self.server_pid.take() {
            stop_pid(pid);
        }
    }

    /// `ovs-vsctl --db=unix:... --timeout=30 args...`.
    pub fn vsctl(&self, args: &[&str]) -> Result<CmdOutput> {
        let db = format!("--db=unix:{}", self.db_sock().display());
        let timeout = format!("--timeout={VSCTL_TIMEOUT}");
        let mut all = vec![db.as_str(), timeout.as_str()];
        all.extend_from_slice(args);
        run_timeout(
            &mut self.command("ovs-vsctl", &all),
            Duration::from_secs(VSCTL_TIMEOUT + 5),
        )
    }

    /// A private ovsdb-server with a switch on it: ovs-vswitchd (`ovs`)
    /// or xbr ([`OvsDb::start_xbr`]).
    pub fn with_switch(ovs: bool) -> Result<Self> {
        let mut db = Self::start(None)?;
        if ovs {
            db.start_vswitchd()?;
        } else {
            db.start_xbr()?;
        }
        Ok(db)
    }

    /// `ovs-vsctl add-br NAME`; for ovs-vswitchd (`ovs`) with
    /// `datapath_type=netdev`, its userspace datapath (this machine has
    /// no openvswitch kernel module), the one xbr stands for.
    pub fn add_bridge(&self, name: &str, ovs: bool) -> Result<()> {
        let mut add = vec!["add-br", name];
        if ovs {
            add.extend(["--", "set", "Bridge", name, "datapath_type=netdev"]);
        }
        self.vsctl(&add)?.ok()?;
        Ok(())
    }

    /// `ovs-vsctl add-br NAME -- set Bridge NAME fail_mode=secure`, the
    /// agent's bridge.
    pub fn add_secure_bridge(&self, name: &str) -> Result<()> {
        self.vsctl(&[
            "add-br",
            name,
            "--",
            "set",
            "Bridge",
            name,
            "fail_mode=secure",
        ])?
        .ok()?;
        Ok(())
    }

    /// `ovs-ofctl -O OpenFlow13 args...` against the switch's sockets.
    pub fn ofctl(&self, args: &[&str]) -> Result<CmdOutput> {
        let mut all = vec!["-O", "OpenFlow13"];
        all.extend_from_slice(args);
        run_timeout(&mut self.command("ovs-ofctl", &all), CMD_TIMEOUT)
    }

    /// `ovs-appctl args...` against the switch (its pid file in the run
    /// directory names its control socket).
    pub fn appctl(&self, args: &[&str]) -> Result<CmdOutput> {
        run_timeout(&mut self.command("ovs-appctl", args), CMD_TIMEOUT)
    }

    /// `xbr stats BRIDGE` of the xbr this database runs.
    pub fn xbr_stats(&self, bridge: &str) -> Result<String> {
        let bin = Xbr::binary()?;
        let run = self.run_dir().to_string_lossy().into_owned();
        Ok(run_timeout(
            &mut self.command(&bin.to_string_lossy(), &["stats", "--rundir", &run, bridge]),
            CMD_TIMEOUT,
        )?
        .ok()?
        .stdout)
    }

    /// `get Interface IFACE ofport`, trimmed.
    pub fn ofport(&self, iface: &str) -> Result<String> {
        Ok(self
            .vsctl(&["get", "Interface", iface, "ofport"])?
            .ok()?
            .stdout
            .trim()
            .to_string())
    }

    /// Starts `xbr run --ovsdb unix:DB --rundir RUN` as the switch and
    /// waits until it is connected.
    pub fn start_xbr(&mut self) -> Result<()> {
        let target = format!("unix:{}", self.db_sock().display());
        self.start_xbr_with(&target, &[])
    }

    /// [`OvsDb::start_xbr`] with `--ovsdb TARGET` (e.g. `ssl:IP:PORT`)
    /// and more arguments.
    pub fn start_xbr_with(&mut self, target: &str, extra: &[&str]) -> Result<()> {
        let bin = Xbr::binary()?;
        let run = self.run_dir().to_string_lossy().into_owned();
        let pins = self.pin_root().to_string_lossy().into_owned();
        let mut argv = vec![
            "run",
            "--ovsdb",
            target,
            "--rundir",
            &run,
            "--bpf-pin-root",
            &pins,
        ];
        argv.extend_from_slice(extra);
        let mut cmd = self.command(&bin.to_string_lossy(), &argv);
        let log = File::create(self.xbr_log_path())
            .map_err(|e| HarnessError::io("creating the xbr log", e))?;
        let log2 = log
            .try_clone()
            .map_err(|e| HarnessError::io("duplicating the xbr log", e))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(|source| HarnessError::Spawn {
                command: describe(&cmd),
                source,
            })?;
        self.switch = Some(Switch::Xbr(child));
        self.wait_connections(1)
    }

    /// xbr's `--bpf-pin-root`: `/sys/fs/bpf/<this directory's name>`,
    /// unique per instance (parallel tests all have a `br0`), removed on
    /// drop.
    pub fn pin_root(&self) -> PathBuf {
        Path::new(crate::xbr::PIN_MOUNT).join(self.dir.file_name().unwrap_or_default())
    }

    fn xbr_log_path(&self) -> PathBuf {
        self.log_dir().join("xbr.log")
    }

    /// How many times xbr has connected to the database so far.
    pub fn xbr_connections(&self) -> usize {
        self.xbr_log().matches("connected to the database").count()
    }

    /// Waits (bounded) until xbr has connected `n` times.
    pub fn wait_connections(&self, n: usize) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.xbr_connections() < n {
            if Instant::now() >= deadline {
                return Err(HarnessError::Unexpected(format!(
                    "xbr did not connect to the database ({n} times) within 20 s:\n{}",
                    self.xbr_log()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// Starts the real ovs-vswitchd as the switch.
    pub fn start_vswitchd(&mut self) -> Result<()> {
        require_tool("ovs-vswitchd")?;
        let mut args = vec![format!("unix:{}", self.db_sock().display())];
        args.extend(self.daemon_args("ovs-vswitchd"));
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        // Counted under the lock the last one's stop removes the tap
        // under, so no tap is removed under one that has just started.
        let mut host = HOST_VSWITCHDS.lock().unwrap_or_else(|e| e.into_inner());
        run_timeout(&mut self.command("ovs-vswitchd", &argv), CMD_TIMEOUT)?.ok()?;
        let pid = self.read_pid("ovs-vswitchd")?;
        if self.netns.is_none() {
            *host += 1;
        }
        self.switch = Some(Switch::Vswitchd(pid));
        Ok(())
    }

    /// xbr's process id, if it is the switch.
    pub fn xbr_pid(&self) -> Option<u32> {
        match &self.switch {
            Some(Switch::Xbr(c)) => Some(c.id()),
            _ => None,
        }
    }

    /// Whether xbr (if it is the switch) still runs.
    pub fn xbr_running(&mut self) -> bool {
        match &mut self.switch {
            Some(Switch::Xbr(c)) => matches!(c.try_wait(), Ok(None)),
            _ => false,
        }
    }

    /// `e`, followed by xbr's output so far if xbr is the switch: a
    /// failure message to read the cause in.
    pub fn with_xbr_log(&self, e: HarnessError) -> HarnessError {
        match self.switch {
            Some(Switch::Xbr(_)) => HarnessError::Unexpected(format!("{e}\n{}", self.xbr_log())),
            _ => e,
        }
    }

    /// xbr's output so far.
    pub fn xbr_log(&self) -> String {
        std::fs::read(self.xbr_log_path())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// Stops the switch: SIGTERM, bounded wait, SIGKILL.
    pub fn stop_switch(&mut self) {
        match self.switch.take() {
            Some(Switch::Xbr(mut c)) => {
                stop_pid(c.id());
                let _ = c.kill();
                let _ = c.wait();
            }
            Some(Switch::Vswitchd(pid)) => {
                stop_pid(pid);
                if self.netns.is_none() {
                    let mut host = HOST_VSWITCHDS.lock().unwrap_or_else(|e| e.into_inner());
                    *host = host.saturating_sub(1);
                    if *host == 0 {
                        remove_stale_datapath_tap();
                    }
                }
            }
            None => {}
        }
    }
}

/// The netdev datapath's tap device, which ovs-vswitchd creates
/// persistent and leaves behind when it is stopped by a signal.
const DATAPATH_TAP: &str = "ovs-netdev";

/// The ovs-vswitchd processes this test binary runs in the host's
/// namespace (tests run in parallel threads, and share that namespace's
/// tap).
static HOST_VSWITCHDS: std::sync::Mutex<usize> = std::sync::Mutex::new(0);

/// Deletes the host's `ovs-netdev` tap once no ovs-vswitchd runs in the
/// host's namespace any more: none of this binary's
/// ([`HOST_VSWITCHDS`], checked by the caller) and no other process
/// either (another binary's, or the system's). A vswitchd in a test
/// namespace takes its tap with the namespace.
fn remove_stale_datapath_tap() {
    let ns_of = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/net")).ok();
    let Some(ours) = ns_of("self") else {
        return;
    };
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return;
    };
    let another_runs = procs.flatten().any(|e| {
        let pid = e.file_name().to_string_lossy().into_owned();
        pid.bytes().all(|b| b.is_ascii_digit())
            && std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim_end() == "ovs-vswitchd")
            && pid_alive(pid.parse().unwrap_or(0))
            && ns_of(&pid).as_ref() == Some(&ours)
    });
    if !another_runs && Path::new("/sys/class/net").join(DATAPATH_TAP).exists() {
        let _ = run_timeout(
            Command::new("ip").args(["link", "del", DATAPATH_TAP]),
            CMD_TIMEOUT,
        );
    }
}

impl Drop for OvsDb {
    fn drop(&mut self) {
        if std::thread::panicking() && matches!(self.switch, Some(Switch::Xbr(_))) {
            eprintln!("--- xbr log:\n{}--- end of xbr log", self.xbr_log());
        }
        self.stop_switch();
        self.stop_server();
        // The programs and maps a stopped xbr left pinned go with it.
        let _ = std::fs::remove_dir_all(self.pin_root());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A node as the agent leaves it, through `db`'s xbr: `bridge` added as
/// the agent adds br0 (`fail_mode=secure`, OpenFlow 1.3), the pods' ports
/// (numbered 1, 2, ... in `pods`' order, with the CNI plugin's
/// `external_ids`), and the agent's multitenant flows of tables 0, 20, 70
/// and 80 (TABLES.md) for pod-to-pod IP with each pod's VNID. No vxlan0
/// or tun0: those would attach to the test host's interfaces.
pub fn agent_node(db: &mut OvsDb, bridge: &str, pods: &[(&Pod, u32)]) -> Result<()> {
    agent_node_with(db, bridge, pods, &[])
}

/// [`agent_node`] with more Bridge columns (`bridge_extra`) set when the
/// bridge is added.
pub fn agent_node_with(
    db: &mut OvsDb,
    bridge: &str,
    pods: &[(&Pod, u32)],
    bridge_extra: &[&str],
) -> Result<()> {
    db.start_xbr()?;
    let mut add_br = vec![
        "--may-exist",
        "add-br",
        bridge,
        "--",
        "set",
        "Bridge",
        bridge,
        "fail_mode=secure",
        "protocols=OpenFlow13",
    ];
    add_br.extend_from_slice(bridge_extra);
    db.vsctl(&add_br)?.ok()?;
    for (i, (p, _)) in pods.iter().enumerate() {
        let ids = format!("external_ids=sandbox=\"pod{i}\",ip=\"{}\"", p.ip());
        db.vsctl(&[
            "--may-exist",
            "add-port",
            bridge,
            p.host_if(),
            "--",
            "set",
            "Interface",
            p.host_if(),
            &ids,
        ])?
        .ok()?;
        assert_eq!(db.ofport(p.host_if())?, (i + 1).to_string());
    }
    let mut flows = vec![
        "table=0, priority=100, ip, actions=goto_table:20".to_string(),
        "table=20, priority=0, actions=drop".to_string(),
        "table=70, priority=0, actions=drop".to_string(),
        "table=80, priority=0, actions=drop".to_string(),
    ];
    for (i, (p, vnid)) in pods.iter().enumerate() {
        let port = i + 1;
        let ip = p.ip();
        flows.push(format!(
            "table=20, priority=100, in_port={port}, ip, nw_src={ip}, \
             actions=load:{vnid}->NXM_NX_REG0[], goto_table:70"
        ));
        flows.push(format!(
            "table=70, priority=100, ip, nw_dst={ip}, \
             actions=load:{vnid}->NXM_NX_REG1[], load:{port}->NXM_NX_REG2[], goto_table:80"
        ));
        flows.push(format!(
            "table=80, priority=100, reg0={vnid}, reg1={vnid}, actions=output:NXM_NX_REG2[]"
        ));
    }
    for f in &flows {
        db.ofctl(&["add-flow", bridge, f])?.ok()?;
    }
    Ok(())
}

/// A pod as the agent's CNI plugin makes it: 10.128.0.LAST/24 with the
/// `0a:58:` MAC of that address.
pub fn agent_pod(last: u8) -> Result<Pod> {
    Pod::new(
        Ipv4Addr::new(10, 128, 0, last),
        24,
        &format!("0a:58:0a:80:00:{last:02x}"),
    )
}

/// Replaces what legitimately differs between two switches' runs: UUIDs,
/// MAC addresses and the private directory.
pub fn normalise(text: &str, dir: &Path) -> String {
    let text = text.replace(&*dir.to_string_lossy(), "DIR");
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        if let Some(n) = pattern_at(&chars[i..], &[8, 4, 4, 4, 12], '-') {
            out.push_str("UUID");
            i += n;
        } else if let Some(n) = pattern_at(&chars[i..], &[2, 2, 2, 2, 2, 2], ':') {
            out.push_str("MAC");
            i += n;
        } else {
            out.push(chars[i]);
            i += 1;
        }
    }
    out
}

/// Length of a run of hex groups of `lens` separated by `sep` at the
/// start of `s`, not inside a longer word.
fn pattern_at(s: &[char], lens: &[usize], sep: char) -> Option<usize> {
    let mut i = 0;
    for (g, len) in lens.iter().enumerate() {
        if g > 0 {
            if s.get(i) != Some(&sep) {
                return None;
            }
            i += 1;
        }
        for _ in 0..*len {
            if !s.get(i)?.is_ascii_hexdigit() {
                return None;
            }
            i += 1;
        }
    }
    match s.get(i) {
        Some(c) if c.is_ascii_alphanumeric() || *c == sep => None,
        _ => Some(i),
    }
}

#[cfg(test)]
mod tests {
    use super::normalise;
    use std::path::Path;

    #[test]
    fn masks_uuids_macs_and_the_directory() {
        let s =
            "_uuid : 78d41862-7989-4c69-9ec7-07cc8acddded\n\"ce:54:06:d8:54:5d\" /tmp/x/log 10:20";
        assert_eq!(
            normalise(s, Path::new("/tmp/x")),
            "_uuid : UUID\n\"MAC\" DIR/log 10:20"
        );
    }
}
