//! A private Open vSwitch in a network namespace, as the OVS sides of the
//! benchmarks run it (`ovs_node` on a lab node, `systems::ovs_switch` in
//! a topology's host namespace): its own directory (`run/` for the
//! database, sockets and pidfiles, `log/`, `etc/`), its daemons started
//! detached with pidfiles, and every command run inside the namespace
//! with `OVS_RUNDIR`, `OVS_DBDIR`, `OVS_LOGDIR` and `OVS_SYSCONFDIR`
//! pointing there. It owns no process: its owner stops the daemons
//! ([`PrivateOvs::stop_daemons`]) and removes the directory.

use crate::ovs::{run_bounded, OvsError, CMD_TIMEOUT};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Bound on an `ovs-vsctl` (adding an AF_XDP port loads an XDP program).
const VSCTL_TIMEOUT: Duration = Duration::from_secs(60);

/// See the module documentation.
pub struct PrivateOvs {
    dir: PathBuf,
    netns: String,
}

impl PrivateOvs {
    /// Makes the directory layout under `dir` for an OVS in `netns`.
    pub fn new(dir: &Path, netns: &str) -> Result<PrivateOvs, OvsError> {
        for sub in ["run", "log", "etc"] {
            std::fs::create_dir_all(dir.join(sub)).map_err(|source| OvsError::Io {
                context: format!("creating {}", dir.join(sub).display()),
                source,
            })?;
        }
        Ok(PrivateOvs {
            dir: dir.to_path_buf(),
            netns: netns.to_string(),
        })
    }

    /// The instance's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `rel` under the directory, as an argument.
    pub fn p(&self, rel: &str) -> String {
        self.dir.join(rel).display().to_string()
    }

    /// Runs `args` (program first) in the namespace with the instance's
    /// directories, within `timeout`; its standard output.
    pub fn run(&self, args: &[&str], timeout: Duration) -> Result<String, OvsError> {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.netns])
            .args(args)
            .env("OVS_RUNDIR", self.p("run"))
            .env("OVS_DBDIR", self.p("run"))
            .env("OVS_LOGDIR", self.p("log"))
            .env("OVS_SYSCONFDIR", self.p("etc"));
        Ok(run_bounded(&mut c, timeout)?.ok()?.stdout)
    }

    /// `ovs-vsctl args...` against the instance's database.
    pub fn vsctl(&self, args: &[&str]) -> Result<String, OvsError> {
        let db = format!("--db=unix:{}", self.p("run/db.sock"));
        let mut all = vec!["ovs-vsctl", db.as_str(), "--timeout=60"];
        all.extend_from_slice(args);
        self.run(&all, VSCTL_TIMEOUT)
    }

    /// `ovs-appctl -t ovs-vswitchd args...`.
    pub fn appctl(&self, args: &[&str]) -> Result<String, OvsError> {
        let target = self.p("run/ovs-vswitchd.ctl");
        let mut all = vec!["ovs-appctl", "-t", target.as_str()];
        all.extend_from_slice(args);
        self.run(&all, CMD_TIMEOUT)
    }

    /// A daemon's `--unixctl`, `--pidfile` and `--log-file` options, then
    /// `--detach --no-chdir`.
    fn daemon_options(&self, daemon: &str) -> [String; 5] {
        [
            format!("--unixctl={}", self.p(&format!("run/{daemon}.ctl"))),
            format!("--pidfile={}", self.p(&format!("run/{daemon}.pid"))),
            format!("--log-file={}", self.p(&format!("log/{daemon}.log"))),
            "--detach".into(),
            "--no-chdir".into(),
        ]
    }

    /// Creates the database, starts ovsdb-server on `run/db.sock` and
    /// initialises the database.
    pub fn start_db(&self) -> Result<(), OvsError> {
        let db = self.p("run/conf.db");
        self.run(
            &[
                "ovsdb-tool",
                "create",
                &db,
                "/usr/share/openvswitch/vswitch.ovsschema",
            ],
            CMD_TIMEOUT,
        )?;
        let remote = format!("--remote=punix:{}", self.p("run/db.sock"));
        let opts = self.daemon_options("ovsdb-server");
        let mut args = vec!["ovsdb-server", db.as_str(), remote.as_str()];
        args.extend(opts.iter().map(String::as_str));
        self.run(&args, CMD_TIMEOUT)?;
        self.vsctl(&["--no-wait", "init"])?;
        Ok(())
    }

    /// Starts ovs-vswitchd on the database, behind `wrapper` (e.g. `nice
    /// -n -20 taskset -c 3`, or nothing); returns once it has detached.
    pub fn start_vswitchd(&self, wrapper: &[&str]) -> Result<(), OvsError> {
        let db = format!("unix:{}", self.p("run/db.sock"));
        let opts = self.daemon_options("ovs-vswitchd");
        let mut args = wrapper.to_vec();
        args.extend(["ovs-vswitchd", db.as_str()]);
        args.extend(opts.iter().map(String::as_str));
        self.run(&args, CMD_TIMEOUT)?;
        Ok(())
    }

    /// ovs-vswitchd's process id (its pidfile), if it runs.
    pub fn vswitchd_pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.dir.join("run/ovs-vswitchd.pid"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
    }

    /// Stops ovs-vswitchd, then ovsdb-server, by their pidfiles.
    pub fn stop_daemons(&self) {
        for daemon in ["ovs-vswitchd", "ovsdb-server"] {
            if let Some(pid) = std::fs::read_to_string(self.dir.join(format!("run/{daemon}.pid")))
                .ok()
                .and_then(|s| s.trim().parse::<i32>().ok())
            {
                stop_pid(pid);
            }
        }
    }
}

/// SIGTERM to `pid`, a bounded wait for it to go, then SIGKILL.
pub fn stop_pid(pid: i32) {
    if pid <= 0 {
        return;
    }
    let pid = Pid::from_raw(pid);
    let _ = kill(pid, Signal::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(10);
    while kill(pid, None).is_ok() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = kill(pid, Signal::SIGKILL);
}
