//! A private Open vSwitch 3.1 instance, the peer xbr is compared with.
//!
//! [`Ovs::start`] runs Debian's `ovsdb-server` and `ovs-vswitchd` (package
//! `openvswitch-switch`) with every piece of state in a fresh directory
//! `/tmp/xbrt-ovs-<tag>` (run, db, log, etc), inside a fresh network
//! namespace `xbrt-ovs-<tag>`, and builds `br0` the way the OpenShift SDN
//! agent's `SetupOVS()` does, plus `datapath_type=netdev` (no kernel
//! module is needed or loaded).
//!
//! Why a namespace: the userspace datapath creates tap devices named
//! `ovs-netdev` and `br0`, and internal ports are tap devices too. In a
//! namespace of its own an instance can use the agent's real port names
//! (`vxlan0`, `tun0`, `veth...`) without clashing with the host, with a
//! system OVS, or with tests running in parallel. The system service (if
//! the package started one) is never contacted: every client gets the
//! private socket paths explicitly.
//!
//! [`Ovs`] is a guard: dropping it stops both daemons (by the pids from
//! their pidfiles, never by name), deletes the namespace (and with it the
//! tap devices) and the directory. Every external command runs with a
//! deadline.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::cmd::io_err;
pub use crate::cmd::OvsError;
pub use crate::cmd::{cpu_time, parse_vm_rss, rss_kib, run_bounded, unique_tag, Output};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Prefix of every namespace and directory made here (the test scripts'
/// clean-up removes leftovers by it).
pub const NAME_PREFIX: &str = "xbrt";
/// The bridge, as the agent names it.
pub const BRIDGE: &str = "br0";
/// Bound on quick commands (`ip`, `ovs-vsctl` without reconfiguration).
pub const CMD_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on adding the bridge and its ports: the daemon creates one tap
/// device per internal port, on a small shared machine.
const BRIDGE_TIMEOUT: Duration = Duration::from_secs(120);
/// Bound on a daemon's exit after being asked to.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(10);

fn in_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|dir| dir.join(tool).is_file()))
        .unwrap_or(false)
}

/// What kind of interface a bridge port is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortKind {
    /// A tap device the daemon creates (`type=internal`).
    Internal,
    /// A flow-based VXLAN tunnel as the agent's `vxlan0`
    /// (`remote_ip=flow`, `key=flow`, `dst_port=4789`).
    Vxlan,
}

/// One port of `br0`, with the OpenFlow port number it must get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortSpec {
    pub name: String,
    pub ofport: u32,
    pub kind: PortKind,
}

impl PortSpec {
    pub fn new(name: impl Into<String>, ofport: u32, kind: PortKind) -> Self {
        PortSpec {
            name: name.into(),
            ofport,
            kind,
        }
    }

    fn vsctl_args(&self) -> Vec<String> {
        let mut args = vec![
            "--".into(),
            "add-port".into(),
            BRIDGE.into(),
            self.name.clone(),
            "--".into(),
            "set".into(),
            "Interface".into(),
            self.name.clone(),
            format!("ofport_request={}", self.ofport),
        ];
        match self.kind {
            PortKind::Internal => args.push("type=internal".into()),
            PortKind::Vxlan => args.extend([
                "type=vxlan".into(),
                "options:remote_ip=flow".into(),
                "options:key=flow".into(),
                "options:dst_port=4789".into(),
            ]),
        }
        args
    }
}

/// The agent's node ports: `vxlan0`=1, `tun0`=2 and `pods` pod ports
/// `veth00001000`.. from 3 (the names `lab.sh` gives them).
pub fn agent_ports(pods: u32) -> Vec<PortSpec> {
    let mut ports = vec![
        PortSpec::new("vxlan0", 1, PortKind::Vxlan),
        PortSpec::new("tun0", 2, PortKind::Internal),
    ];
    ports.extend((0..pods).map(|i| PortSpec::new(pod_port_name(i), i + 3, PortKind::Internal)));
    ports
}

/// The name of the `i`th pod port (`veth` and 8 hex digits, like the
/// agent's host-side veths).
pub fn pod_port_name(i: u32) -> String {
    format!("veth{:08x}", 0x1000 + i)
}

/// A running private ovsdb-server + ovs-vswitchd with `br0`; see the
/// module comment. Stopped and removed on drop.
pub struct Ovs {
    netns: String,
    dir: PathBuf,
    vswitchd_pid: Option<u32>,
    ovsdb_pid: Option<u32>,
    netns_made: bool,
}

impl Ovs {
    /// Starts the daemons and creates `br0` (netdev datapath, fail_mode
    /// secure, OpenFlow13, `set-frags nx-match`) with `ports`; returns
    /// once every port has its requested OpenFlow number.
    pub fn start(ports: &[PortSpec]) -> Result<Self, OvsError> {
        for tool in [
            "ovsdb-server",
            "ovs-vswitchd",
            "ovs-vsctl",
            "ovs-ofctl",
            "ip",
        ] {
            if !in_path(tool) {
                return Err(OvsError::NotInstalled(tool.to_string()));
            }
        }
        let tag = unique_tag();
        let dir = std::env::temp_dir().join(format!("{NAME_PREFIX}-ovs-{tag}"));
        let mut ovs = Ovs {
            netns: format!("{NAME_PREFIX}-ovs-{tag}"),
            dir,
            vswitchd_pid: None,
            ovsdb_pid: None,
            netns_made: false,
        };
        for sub in ["run", "db", "log", "etc"] {
            let p = ovs.dir.join(sub);
            std::fs::create_dir_all(&p)
                .map_err(|e| io_err(format!("creating {}", p.display()), e))?;
        }
        run_bounded(
            Command::new("ip").args(["netns", "add", &ovs.netns]),
            CMD_TIMEOUT,
        )?
        .ok()?;
        ovs.netns_made = true;
        ovs.in_netns("ip", &["link", "set", "lo", "up"])?.ok()?;
        ovs.start_daemons()?;
        ovs.add_bridge(ports)?;
        Ok(ovs)
    }

    fn run_dir(&self) -> PathBuf {
        self.dir.join("run")
    }

    fn db_sock(&self) -> String {
        format!("unix:{}", self.run_dir().join("db.sock").display())
    }

    /// The private state directories, for every OVS program.
    fn env(&self, cmd: &mut Command) {
        cmd.env("OVS_RUNDIR", self.run_dir())
            .env("OVS_DBDIR", self.dir.join("db"))
            .env("OVS_LOGDIR", self.dir.join("log"))
            .env("OVS_SYSCONFDIR", self.dir.join("etc"));
    }

    fn netns_command(&self, program: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.netns, program]).args(args);
        self.env(&mut cmd);
        cmd
    }

    fn in_netns(&self, program: &str, args: &[&str]) -> Result<Output, OvsError> {
        run_bounded(&mut self.netns_command(program, args), CMD_TIMEOUT)
    }

    fn read_pid(&self, name: &str) -> Result<u32, OvsError> {
        let path = self.run_dir().join(format!("{name}.pid"));
        let text = std::fs::read_to_string(&path)
            .map_err(|e| io_err(format!("reading {}", path.display()), e))?;
        text.trim().parse().map_err(|_| {
            io_err(
                format!("{} holds {text:?}", path.display()),
                std::io::Error::other("not a pid"),
            )
        })
    }

    fn start_daemons(&mut self) -> Result<(), OvsError> {
        let db = self.dir.join("db/conf.db");
        let db_s = db.to_string_lossy().into_owned();
        let mut create = Command::new("ovsdb-tool");
        create.args(["create", &db_s, "/usr/share/openvswitch/vswitch.ovsschema"]);
        run_bounded(&mut create, CMD_TIMEOUT)?.ok()?;
        let run = self.run_dir();
        let arg = |flag: &str, file: &str| format!("--{flag}={}", run.join(file).display());
        let log = |file: &str| format!("--log-file={}", self.dir.join("log").join(file).display());
        let remote = format!("--remote=p{}", self.db_sock());
        // --detach returns once the daemon is ready; its pid is in the pidfile.
        self.in_netns(
            "ovsdb-server",
            &[
                &db_s,
                &remote,
                &arg("unixctl", "ovsdb-server.ctl"),
                &arg("pidfile", "ovsdb-server.pid"),
                &log("ovsdb-server.log"),
                "--detach",
                "--no-chdir",
                "-vconsole:off",
            ],
        )?
        .ok()?;
        self.ovsdb_pid = Some(self.read_pid("ovsdb-server")?);
        self.vsctl(&["--no-wait", "init"])?.ok()?;
        self.in_netns(
            "ovs-vswitchd",
            &[
                &self.db_sock(),
                &arg("unixctl", "ovs-vswitchd.ctl"),
                &arg("pidfile", "ovs-vswitchd.pid"),
                &log("ovs-vswitchd.log"),
                "--detach",
                "--no-chdir",
                "-vconsole:off",
            ],
        )?
        .ok()?;
        self.vswitchd_pid = Some(self.read_pid("ovs-vswitchd")?);
        Ok(())
    }

    fn add_bridge(&self, ports: &[PortSpec]) -> Result<(), OvsError> {
        let mut args = agent_bridge_netdev();
        for p in ports {
            args.extend(p.vsctl_args());
        }
        let timeout = format!("--timeout={}", BRIDGE_TIMEOUT.as_secs());
        let mut all = vec![timeout.as_str()];
        all.extend(args.iter().map(String::as_str));
        let out = run_bounded(
            &mut self.vsctl_command(&all),
            BRIDGE_TIMEOUT + Duration::from_secs(5),
        )?;
        if !out.success() {
            return Err(self.setup_error(format!("adding {BRIDGE}: {}", out.into_error())));
        }
        let listing = self
            .vsctl(&[
                "--format=csv",
                "--no-headings",
                "--columns=name,ofport,error",
                "list",
                "Interface",
            ])?
            .ok()?;
        for p in ports {
            let want = format!("{},{},", p.name, p.ofport);
            if !listing.stdout.lines().any(|l| l.starts_with(&want)) {
                return Err(self.setup_error(format!(
                    "port {} did not get ofport {}; interfaces (name,ofport,error):\n{}",
                    p.name, p.ofport, listing.stdout
                )));
            }
        }
        self.ofctl(&["set-frags", BRIDGE, "nx-match"])?.ok()?;
        Ok(())
    }

    fn setup_error(&self, reason: String) -> OvsError {
        OvsError::Setup {
            reason,
            log: self.log(),
        }
    }

    /// The last 40 lines of ovs-vswitchd's log.
    pub fn log(&self) -> String {
        let path = self.dir.join("log/ovs-vswitchd.log");
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let lines: Vec<&str> = text.lines().collect();
                lines[lines.len().saturating_sub(40)..].join("\n")
            }
            Err(e) => format!("(cannot read {}: {e})", path.display()),
        }
    }

    fn vsctl_command(&self, args: &[&str]) -> Command {
        let db = format!("--db={}", self.db_sock());
        let mut cmd = Command::new("ovs-vsctl");
        cmd.arg(db).args(args);
        self.env(&mut cmd);
        cmd
    }

    /// `ovs-vsctl --db=<private socket> args...`.
    pub fn vsctl(&self, args: &[&str]) -> Result<Output, OvsError> {
        run_bounded(&mut self.vsctl_command(args), CMD_TIMEOUT)
    }

    /// `ovs-ofctl -O OpenFlow13 args...` with `OVS_RUNDIR` pointing at this
    /// instance (so `br0` means its `br0.mgmt`), bounded by `timeout`.
    pub fn ofctl_timeout(&self, args: &[&str], timeout: Duration) -> Result<Output, OvsError> {
        let mut cmd = self.ofctl_command(args);
        run_bounded(&mut cmd, timeout)
    }

    /// [`Ovs::ofctl_timeout`] with [`CMD_TIMEOUT`].
    pub fn ofctl(&self, args: &[&str]) -> Result<Output, OvsError> {
        self.ofctl_timeout(args, CMD_TIMEOUT)
    }

    /// The `ovs-ofctl -O OpenFlow13 args...` command for this instance,
    /// for callers that run it themselves (e.g. to time it).
    pub fn ofctl_command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("ovs-ofctl");
        cmd.args(["-O", "OpenFlow13"]).args(args);
        self.env(&mut cmd);
        cmd
    }

    /// `ovs-appctl -t ovs-vswitchd args...` against this instance's
    /// daemon (e.g. `ofproto/trace`).
    pub fn appctl(&self, args: &[&str]) -> Result<Output, OvsError> {
        let mut cmd = Command::new("ovs-appctl");
        cmd.arg("-t")
            .arg(self.run_dir().join("ovs-vswitchd.ctl"))
            .args(args);
        self.env(&mut cmd);
        run_bounded(&mut cmd, CMD_TIMEOUT)
    }

    /// The directory holding `br0.mgmt` (what `OVS_RUNDIR` must be).
    pub fn rundir(&self) -> PathBuf {
        self.run_dir()
    }

    /// The namespace the daemons and their tap devices live in.
    pub fn netns(&self) -> &str {
        &self.netns
    }

    /// The pid of ovs-vswitchd (for its RSS).
    pub fn vswitchd_pid(&self) -> Option<u32> {
        self.vswitchd_pid
    }

    fn stop_daemon(&mut self, pid: Option<u32>, ctl: &str) {
        let Some(pid) = pid else { return };
        let Ok(raw) = i32::try_from(pid) else { return };
        let pid = Pid::from_raw(raw);
        let ctl = self.run_dir().join(ctl);
        let ctl = ctl.to_string_lossy().into_owned();
        let mut cmd = Command::new("ovs-appctl");
        cmd.args(["-t", &ctl, "exit", "--cleanup"]);
        let asked = run_bounded(&mut cmd, STOP_TIMEOUT).is_ok_and(|o| o.success());
        if !asked {
            let _ = kill(pid, Signal::SIGTERM);
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        // The daemons are not our children (they detached): poll for the pid.
        while kill(pid, None).is_ok() && Instant::now() < deadline {
            std::thread::sleep(POLL);
        }
        if kill(pid, None).is_ok() {
            eprintln!("warning: {ctl}: pid {pid} still alive after exit, sending SIGKILL");
            let _ = kill(pid, Signal::SIGKILL);
        }
    }
}

impl Drop for Ovs {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- ovs-vswitchd.log (tail):\n{}\n---", self.log());
        }
        let vswitchd = self.vswitchd_pid.take();
        self.stop_daemon(vswitchd, "ovs-vswitchd.ctl");
        let ovsdb = self.ovsdb_pid.take();
        self.stop_daemon(ovsdb, "ovsdb-server.ctl");
        if self.netns_made {
            match run_bounded(
                Command::new("ip").args(["netns", "del", &self.netns]),
                CMD_TIMEOUT,
            ) {
                Ok(o) if o.success() => {}
                Ok(o) => eprintln!("warning: {}", o.into_error()),
                Err(e) => eprintln!("warning: {e}"),
            }
        }
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            eprintln!("warning: removing {}: {e}", self.dir.display());
        }
    }
}

/// Drops the parts of an `ovs-ofctl dump-flows` / `dump-groups` line that
/// change with time and traffic (`duration=`, `n_packets=`, `n_bytes=`,
/// `idle_age=`, `hard_age=`), and the reply header lines, so dumps of two
/// switches compare line by line.
pub fn normalise_dump(dump: &str) -> Vec<String> {
    dump.lines()
        // Entries are indented; header lines (`OFPST_FLOW reply (OF1.3)
        // (xid=..): flags=[more]`) vary with xids and reply splitting.
        .filter(|l| l.starts_with(' ') && !l.trim().is_empty())
        .map(|l| {
            l.trim()
                .split(", ")
                .filter(|item| {
                    ![
                        "duration=",
                        "n_packets=",
                        "n_bytes=",
                        "idle_age=",
                        "hard_age=",
                    ]
                    .iter()
                    .any(|p| item.starts_with(p))
                })
                .collect::<Vec<_>>()
                .join(", ")
        })
        .collect()
}

/// The agent's `br0` (`xbr_lab::agent_vsctl`) on OVS's userspace
/// datapath, as `ovs-vsctl` arguments; more may follow after `--`.
pub fn agent_bridge_netdev() -> Vec<String> {
    let mut args = xbr_lab::agent_vsctl::add_bridge();
    args.push("datapath_type=netdev".into());
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalise_drops_counters_and_headers() {
        let dump = "OFPST_FLOW reply (OF1.3) (xid=0x2):\n cookie=0x0, duration=3.1s, table=0, n_packets=10, n_bytes=980, idle_age=2, priority=5,in_port=1 actions=output:2\n";
        assert_eq!(
            normalise_dump(dump),
            vec!["cookie=0x0, table=0, priority=5,in_port=1 actions=output:2".to_string()]
        );
    }

    #[test]
    fn agent_ports_are_numbered_from_vxlan0() {
        let p = agent_ports(2);
        assert_eq!(p[0], PortSpec::new("vxlan0", 1, PortKind::Vxlan));
        assert_eq!(p[3].name, "veth00001001");
        assert_eq!(p[3].ofport, 4);
    }
}
