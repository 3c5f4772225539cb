//! Running the `xbr` binary under test, and talking to it with `ovs-ofctl`.

use crate::cmd::{describe, run_timeout, CmdOutput};
use crate::netns::{unique_tag, Netns, Pod, NAME_PREFIX};
use crate::{require_root, require_tool, HarnessError, Result, CMD_TIMEOUT};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::fs::{DirBuilder, File};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The bridge name every test uses; ovs-ofctl finds `RUNDIR/br0.mgmt`.
pub const BRIDGE: &str = "br0";
/// Bound on xbr's start-up (loading BPF, attaching XDP, AF_XDP sockets),
/// generous because the test machine is small and shared.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// Bound on a clean shutdown after SIGTERM/SIGINT before SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(20);

/// A private directory `/tmp/xbrt-run-<tag>` (mode 0700), removed on drop.
pub struct RunDir {
    path: PathBuf,
}

impl RunDir {
    pub fn new() -> Result<Self> {
        let path = std::env::temp_dir().join(format!("{NAME_PREFIX}-run-{}", unique_tag()));
        DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(|e| HarnessError::io(format!("creating {}", path.display()), e))?;
        Ok(RunDir { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where xbr serves OpenFlow for [`BRIDGE`].
    pub fn mgmt_path(&self) -> PathBuf {
        self.path.join(format!("{BRIDGE}.mgmt"))
    }

    /// The bridge's control socket (`xbr stats`, `xbr dpctl`...), which
    /// xbr opens just after the OpenFlow one.
    pub fn ctl_path(&self) -> PathBuf {
        self.path.join(format!("xbr.{BRIDGE}.ctl"))
    }

    /// The `--bpf-pin-root` of the xbr run on this directory:
    /// `/sys/fs/bpf/xbrt-run-<tag>`, unique as the directory is (tests in
    /// parallel all have a bridge `br0`). Removed with the directory, so a
    /// test leaves no pinned program or map behind.
    pub fn pin_root(&self) -> PathBuf {
        let name = self.path.file_name().unwrap_or_default();
        Path::new(PIN_MOUNT).join(name)
    }
}

/// Where the BPF filesystem is (xbr mounts it if needed).
pub const PIN_MOUNT: &str = "/sys/fs/bpf";

impl Drop for RunDir {
    fn drop(&mut self) {
        // Unlinking the pins detaches the programs a stopped xbr left
        // (nothing holds their links any more) and frees the maps.
        let pins = self.pin_root();
        if pins.exists() {
            if let Err(e) = std::fs::remove_dir_all(&pins) {
                eprintln!("warning: removing {}: {e}", pins.display());
            }
        }
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            eprintln!("warning: removing {}: {e}", self.path.display());
        }
    }
}

/// A running `xbr run --bridge br0 --rundir <private dir> ...`.
///
/// Its stdout and stderr go to a log file in the run directory, shown in
/// start-up errors, by [`Xbr::log`], and on stderr when a test panics while
/// the guard is alive. Drop stops it with SIGTERM (SIGKILL after a bound).
pub struct Xbr {
    child: Option<Child>,
    command: String,
    log_path: PathBuf,
    /// The namespace xbr runs in (`None`: the root namespace). Dropped
    /// after the process is stopped.
    netns: Option<Netns>,
    // Dropped last: the log lives in it.
    rundir: RunDir,
}

fn is_socket(path: &Path) -> bool {
    std::fs::symlink_metadata(path)
        .map(|m| m.file_type().is_socket())
        .unwrap_or(false)
}

fn signal_child(child: &Child, signal: Signal) -> Result<()> {
    let pid = i32::try_from(child.id())
        .map_err(|_| HarnessError::Unexpected(format!("pid {} out of range", child.id())))?;
    kill(Pid::from_raw(pid), signal)
        .map_err(|e| HarnessError::io(format!("sending {signal} to xbr ({pid})"), e.into()))
}

/// Waits at most `timeout` for `child` to exit.
fn wait_bounded(child: &mut Child, timeout: Duration) -> Result<Option<ExitStatus>> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child
            .try_wait()
            .map_err(|e| HarnessError::io("waiting for xbr", e))?
        {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(POLL);
    }
}

/// Spawns `cmd` with stdout and stderr appended to `log_path`.
fn spawn_logged(cmd: &mut Command, command: &str, log_path: &Path) -> Result<Child> {
    let log = File::options()
        .create(true)
        .append(true)
        .open(log_path)
        .map_err(|e| HarnessError::io(format!("opening {}", log_path.display()), e))?;
    let log2 = log
        .try_clone()
        .map_err(|e| HarnessError::io("duplicating the log file", e))?;
    cmd.stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        .spawn()
        .map_err(|source| HarnessError::Spawn {
            command: command.to_string(),
            source,
        })
}

impl Xbr {
    /// The binary under test: `$XBR_BIN`, else `xbr` next to the running
    /// test's profile directory (`<target>/<profile>/deps/<test>` ->
    /// `<target>/<profile>/xbr`), where `cargo build -p xbr-daemon --bin xbr`
    /// puts it. A test cannot make cargo build another package's binary,
    /// so the build is a separate step (see `scripts/test`).
    pub fn binary() -> Result<PathBuf> {
        if let Some(p) = std::env::var_os("XBR_BIN") {
            let path = PathBuf::from(p);
            return if path.is_file() {
                Ok(path)
            } else {
                Err(HarnessError::XbrNotBuilt { path })
            };
        }
        let exe = std::env::current_exe()
            .map_err(|e| HarnessError::io("locating the test executable", e))?;
        let profile_dir = exe
            .parent()
            .filter(|d| d.ends_with("deps"))
            .and_then(Path::parent)
            .or_else(|| exe.parent())
            .ok_or_else(|| HarnessError::Unexpected(format!("{} has no parent", exe.display())))?;
        let path = profile_dir.join("xbr");
        if path.is_file() {
            Ok(path)
        } else {
            Err(HarnessError::XbrNotBuilt { path })
        }
    }

    fn base_command(rundir: &RunDir, netns: Option<&Netns>) -> Result<Command> {
        require_root()?;
        let binary = Self::binary()?;
        let mut cmd = match netns {
            // `ip netns exec` execs the program itself (no fork), so the
            // child's pid is xbr's and signals reach it directly.
            Some(ns) => ns.command(&binary.to_string_lossy(), &[]),
            None => Command::new(binary),
        };
        cmd.arg("run")
            .arg("--bridge")
            .arg(BRIDGE)
            .arg("--rundir")
            .arg(rundir.path())
            .arg("--bpf-pin-root")
            .arg(rundir.pin_root());
        Ok(cmd)
    }

    /// Starts xbr with `args` after `run --bridge br0 --rundir DIR` and
    /// waits until its management socket exists.
    pub fn start(args: &[&str]) -> Result<Self> {
        Self::start_with(None, args)
    }

    /// Like [`Xbr::start`], but xbr runs inside `ns` (`ip netns exec NS
    /// xbr run ...`), so its ports (TAP devices it creates, or interfaces
    /// already in `ns`) can have any names without clashing with the host
    /// or with parallel tests. The namespace is kept until xbr stopped.
    pub fn start_in(ns: Netns, args: &[&str]) -> Result<Self> {
        Self::start_with(Some(ns), args)
    }

    /// Like [`Xbr::start`], but through `wrapper` (a program and its
    /// arguments, e.g. `capsh --drop=... -- -c 'exec "$0" "$@"'`), which
    /// gets xbr's path and arguments appended and must exec xbr (so the
    /// child's pid stays xbr's).
    pub fn start_wrapped(wrapper: &[&str], args: &[&str]) -> Result<Self> {
        Self::start_full(None, Some(wrapper), args)
    }

    /// Like [`Xbr::run_once`], through `wrapper` (see
    /// [`Xbr::start_wrapped`]).
    pub fn run_once_wrapped(
        wrapper: &[&str],
        args: &[&str],
        timeout: Duration,
    ) -> Result<(CmdOutput, RunDir)> {
        let rundir = RunDir::new()?;
        let mut cmd = Self::wrap(Self::base_command(&rundir, None)?, wrapper);
        cmd.args(args);
        let out = run_timeout(&mut cmd, timeout)?;
        Ok((out, rundir))
    }

    /// `wrapper... PROGRAM ARGS...` for the command `cmd`.
    fn wrap(cmd: Command, wrapper: &[&str]) -> Command {
        let Some((first, rest)) = wrapper.split_first() else {
            return cmd;
        };
        let mut wrapped = Command::new(first);
        wrapped
            .args(rest)
            .arg(cmd.get_program())
            .args(cmd.get_args());
        wrapped
    }

    fn start_with(netns: Option<Netns>, args: &[&str]) -> Result<Self> {
        Self::start_full(netns, None, args)
    }

    fn start_full(netns: Option<Netns>, wrapper: Option<&[&str]>, args: &[&str]) -> Result<Self> {
        let rundir = RunDir::new()?;
        let mut cmd = Self::base_command(&rundir, netns.as_ref())?;
        if let Some(w) = wrapper {
            cmd = Self::wrap(cmd, w);
        }
        cmd.args(args);
        let command = describe(&cmd);
        let log_path = rundir.path().join("xbr.log");
        let child = spawn_logged(&mut cmd, &command, &log_path)?;
        let mut xbr = Xbr {
            child: Some(child),
            command,
            log_path,
            netns,
            rundir,
        };
        xbr.wait_ready()?;
        Ok(xbr)
    }

    /// Starts xbr again with `args`, in the same run directory (where a
    /// killed xbr may have left its socket file), once the previous one
    /// has exited. Its output is appended to the same log.
    pub fn restart(&mut self, args: &[&str]) -> Result<()> {
        if self.is_running() {
            return Err(HarnessError::Unexpected(
                "restart while xbr is still running".into(),
            ));
        }
        self.child = None;
        let mut cmd = Self::base_command(&self.rundir, self.netns.as_ref())?;
        cmd.args(args);
        self.command = describe(&cmd);
        self.child = Some(spawn_logged(&mut cmd, &self.command, &self.log_path)?);
        self.wait_ready()
    }

    /// A second xbr on this one's run directory, for arguments that should
    /// make it exit (bounded by `timeout`).
    pub fn run_beside(&self, args: &[&str], timeout: Duration) -> Result<CmdOutput> {
        let mut cmd = Self::base_command(&self.rundir, self.netns.as_ref())?;
        cmd.args(args);
        run_timeout(&mut cmd, timeout)
    }

    /// Starts xbr with one `--port NAME=OFPORT` per entry.
    pub fn with_ports(ports: &[(&str, u32)]) -> Result<Self> {
        let specs: Vec<String> = ports.iter().map(|(n, p)| format!("{n}={p}")).collect();
        let mut args = Vec::with_capacity(specs.len() * 2);
        for spec in &specs {
            args.push("--port");
            args.push(spec.as_str());
        }
        Self::start(&args)
    }

    fn wait_ready(&mut self) -> Result<()> {
        let mgmt = self.mgmt_path();
        let ctl = self.rundir.ctl_path();
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let Some(child) = self.child.as_mut() else {
                return Err(HarnessError::Unexpected("xbr was already stopped".into()));
            };
            if let Some(status) = child.try_wait().ok().flatten() {
                self.child = None;
                return Err(HarnessError::XbrStart {
                    reason: format!("`{}` exited early ({status})", self.command),
                    log: self.log(),
                });
            }
            // Accepting, not merely present: a killed xbr leaves a stale
            // socket file behind. Both: the control socket opens a moment
            // after the OpenFlow one, and tests use either at once.
            let accepting = |p: &Path| is_socket(p) && UnixStream::connect(p).is_ok();
            if accepting(&mgmt) && accepting(&ctl) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(HarnessError::XbrStart {
                    reason: format!(
                        "{} did not appear within {} s of `{}`",
                        mgmt.display(),
                        START_TIMEOUT.as_secs(),
                        self.command
                    ),
                    log: self.log(),
                });
            }
            std::thread::sleep(POLL);
        }
    }

    /// Runs `xbr run --bridge br0 --rundir DIR args...` in a fresh run
    /// directory, for arguments that should make it exit (bounded by
    /// `timeout`). The run directory is returned so the caller can check
    /// what xbr left in it.
    pub fn run_once(args: &[&str], timeout: Duration) -> Result<(CmdOutput, RunDir)> {
        let rundir = RunDir::new()?;
        let mut cmd = Self::base_command(&rundir, None)?;
        cmd.args(args);
        let out = run_timeout(&mut cmd, timeout)?;
        Ok((out, rundir))
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn rundir(&self) -> &Path {
        self.rundir.path()
    }

    /// The namespace xbr runs in, if it was started with [`Xbr::start_in`].
    pub fn netns(&self) -> Option<&Netns> {
        self.netns.as_ref()
    }

    pub fn mgmt_path(&self) -> PathBuf {
        self.rundir.mgmt_path()
    }

    /// The `--bpf-pin-root` this xbr runs with ([`RunDir::pin_root`]).
    pub fn pin_root(&self) -> PathBuf {
        self.rundir.pin_root()
    }

    /// `xbr teardown --bridge br0 --bpf-pin-root ROOT`: removes what this
    /// xbr pinned (its ports' programs detach once no xbr holds them).
    pub fn teardown(&self) -> Result<CmdOutput> {
        let mut cmd = Command::new(Self::binary()?);
        cmd.args(["teardown", "--bridge", BRIDGE, "--bpf-pin-root"])
            .arg(self.pin_root());
        run_timeout(&mut cmd, CMD_TIMEOUT)
    }

    /// Everything xbr wrote to stdout and stderr so far.
    pub fn log(&self) -> String {
        std::fs::read(&self.log_path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_else(|e| format!("(cannot read {}: {e})", self.log_path.display()))
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Sends `signal` and waits (bounded) for xbr to exit; SIGKILLs it and
    /// fails if it does not.
    pub fn stop(&mut self, signal: Signal) -> Result<ExitStatus> {
        let mut child = self
            .child
            .take()
            .ok_or_else(|| HarnessError::Unexpected("xbr was already stopped".into()))?;
        if let Some(status) = child.try_wait().ok().flatten() {
            return Ok(status);
        }
        signal_child(&child, signal)?;
        if let Some(status) = wait_bounded(&mut child, STOP_TIMEOUT)? {
            return Ok(status);
        }
        // Fails only if it exited in between; wait() reaps it either way.
        let _ = child.kill();
        let _ = child.wait();
        Err(HarnessError::Unexpected(format!(
            "xbr did not exit within {} s of {signal}; killed it. Log:\n{}",
            STOP_TIMEOUT.as_secs(),
            self.log()
        )))
    }

    /// Runs `ovs-ofctl -O OpenFlow13 args...` against this xbr.
    pub fn ofctl(&self, args: &[&str]) -> Result<CmdOutput> {
        self.ofctl_timeout(args, CMD_TIMEOUT)
    }

    /// [`Xbr::ofctl`] with another bound, for big flow sets.
    pub fn ofctl_timeout(&self, args: &[&str], timeout: Duration) -> Result<CmdOutput> {
        require_tool("ovs-ofctl")?;
        let mut cmd = Command::new("ovs-ofctl");
        cmd.args(["-O", "OpenFlow13"])
            .args(args)
            .env("OVS_RUNDIR", self.rundir.path());
        run_timeout(&mut cmd, timeout)
    }

    /// Like [`Xbr::ofctl`], but a failure is an error that includes xbr's
    /// log; returns stdout.
    pub fn ofctl_ok(&self, args: &[&str]) -> Result<String> {
        let out = self.ofctl(args)?;
        if out.success() {
            return Ok(out.stdout);
        }
        let mut out = out;
        out.stderr.push_str("\n--- xbr log:\n");
        out.stderr.push_str(&self.log());
        Err(out.into_error())
    }

    /// Runs `xbr ARGS... --rundir DIR` (a client command such as `port
    /// add br0 SPEC`) against this xbr.
    pub fn client(&self, args: &[&str]) -> Result<CmdOutput> {
        let mut cmd = Command::new(Self::binary()?);
        cmd.args(args).arg("--rundir").arg(self.rundir.path());
        run_timeout(&mut cmd, CMD_TIMEOUT)
    }

    /// Like [`Xbr::client`], but a failure is an error saying what
    /// failed, with xbr's log; returns the command's output.
    pub fn client_ok(&self, args: &[&str]) -> Result<String> {
        let out = self.client(args)?;
        if out.success() {
            return Ok(out.stdout);
        }
        Err(HarnessError::Unexpected(format!(
            "`xbr {}` failed: {}\n{}\n--- xbr log:\n{}",
            args.join(" "),
            out.describe_status(),
            out.stderr,
            self.log()
        )))
    }

    /// `ovs-ofctl add-flow br0 FLOW`.
    pub fn add_flow(&self, flow: &str) -> Result<()> {
        self.ofctl_ok(&["add-flow", BRIDGE, flow]).map(drop)
    }

    /// `ovs-ofctl dump-flows br0`.
    pub fn dump_flows(&self) -> Result<String> {
        self.ofctl_ok(&["dump-flows", BRIDGE])
    }

    /// The flows (with their counters) and the log: what a failed
    /// traffic assertion should show.
    pub fn flows_and_log(&self) -> String {
        format!(
            "--- flows:\n{}\n--- xbr log:\n{}",
            self.dump_flows().unwrap_or_default(),
            self.log()
        )
    }

    /// Every OpenFlow counter, as comparable lines ([`without_durations`]):
    /// what a test compares between runs that must count alike.
    pub fn counters(&self) -> Result<Counters> {
        Ok(Counters {
            flows: without_durations(&self.dump_flows()?),
            tables: without_durations(&self.ofctl_ok(&["dump-tables", BRIDGE])?),
            ports: without_durations(&self.ofctl_ok(&["dump-ports", BRIDGE])?),
        })
    }
}

/// `dump-flows`, `dump-tables` and `dump-ports` without durations.
#[derive(Debug, PartialEq, Eq)]
pub struct Counters {
    pub flows: Vec<String>,
    pub tables: Vec<String>,
    pub ports: Vec<String>,
}

impl Drop for Xbr {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- log of `{}`:\n{}--- end of xbr log",
                self.command,
                self.log()
            );
        }
        if self.child.is_some() {
            if let Err(e) = self.stop(Signal::SIGTERM) {
                eprintln!("warning: {e}");
            }
        }
    }
}

/// `n_packets` of the flow in `ovs-ofctl dump-flows` output whose line has
/// `token` (e.g. `in_port=1`) as a whole comma/space separated item; `None`
/// if no line has it.
pub fn flow_n_packets(dump: &str, token: &str) -> Option<u64> {
    dump.lines()
        .find(|line| line.split([',', ' ']).any(|item| item == token))
        .and_then(|line| {
            line.split([',', ' '])
                .find_map(|item| item.strip_prefix("n_packets="))
                .and_then(|n| n.parse().ok())
        })
}

/// An `ovs-ofctl` statistics dump (flows, tables, ports) as comparable
/// lines: without the reply header (it carries an xid) and durations,
/// words separated by single spaces.
pub fn without_durations(dump: &str) -> Vec<String> {
    dump.lines()
        .skip(1)
        .map(|l| {
            l.split([',', ' '])
                .filter(|w| !w.is_empty() && !w.starts_with("duration="))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .filter(|l| !l.is_empty())
        .collect()
}

/// `s` without terminal colour escapes (ESC [ ... letter), as xbr's log
/// has them around field names.
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for e in chars.by_ref() {
                if e.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The counts of the lines xbr logs about the XDP flow cache when it
/// stops (one per packet thread), summed, as `name=value` pairs; `None`
/// without such a line.
pub fn xdp_cache_counts(log: &str) -> Option<Vec<(String, u64)>> {
    let log = strip_ansi(log);
    let mut sum: Option<Vec<(String, u64)>> = None;
    // One line per packet thread: their counts add up.
    for line in log
        .lines()
        .filter(|l| l.contains("XDP flow cache") && l.contains("installs="))
    {
        let counts = sum.get_or_insert_with(Vec::new);
        for (k, v) in line.split_whitespace().filter_map(|w| {
            let (k, v) = w.split_once('=')?;
            Some((k, v.parse::<u64>().ok()?))
        }) {
            match counts.iter_mut().find(|(name, _)| name == k) {
                Some((_, total)) => *total += v,
                None => counts.push((k.to_string(), v)),
            }
        }
    }
    sum
}

/// Packets the XDP flow cache forwarded (its `hit_packets`), from the line
/// xbr logs when it stops; `None` without such a line.
pub fn xdp_cache_hits(log: &str) -> Option<u64> {
    xdp_cache_counts(log)?
        .into_iter()
        .find_map(|(k, v)| (k == "hit_packets").then_some(v))
}

/// The counter `name` of counts [`xdp_cache_counts`] read (0 if absent).
pub fn xdp_cache_count(counts: &[(String, u64)], name: &str) -> u64 {
    counts
        .iter()
        .find(|(k, _)| k == name)
        .map_or(0, |(_, v)| *v)
}

/// Pods A and B ([`crate::POD_A_IP`], [`crate::POD_B_IP`], /24) ready to
/// receive frames the XDP flow cache redirects to them.
pub fn xdp_pods() -> Result<(Pod, Pod)> {
    let a = Pod::new(crate::POD_A_IP, 24, crate::POD_A_MAC)?;
    let b = Pod::new(crate::POD_B_IP, 24, crate::POD_B_MAC)?;
    for p in [&a, &b] {
        p.accept_xdp_redirects()?;
    }
    Ok((a, b))
}

/// Starts xbr with pod `a` on port 1 and `b` on port 2, both marked
/// `xdp_redirect=on` (the pods must accept redirects:
/// `Pod::accept_xdp_redirects`), the XDP flow cache `cache` ("on" or
/// "off"), and `flows`.
pub fn start_xdp_pair(a: &Pod, b: &Pod, cache: &str, flows: &[&str]) -> Result<Xbr> {
    start_xdp_pair_with(a, b, cache, &[], flows)
}

/// [`start_xdp_pair`] with more arguments for xbr (`extra`).
pub fn start_xdp_pair_with(
    a: &Pod,
    b: &Pod,
    cache: &str,
    extra: &[&str],
    flows: &[&str],
) -> Result<Xbr> {
    let specs = [
        format!("{}=1,xdp_redirect=on", a.host_if()),
        format!("{}=2,xdp_redirect=on", b.host_if()),
    ];
    let mut args = vec!["--xdp-cache", cache];
    args.extend_from_slice(extra);
    for s in &specs {
        args.extend(["--port", s.as_str()]);
    }
    let xbr = Xbr::start(&args)?;
    for f in flows {
        xbr.add_flow(f)?;
    }
    Ok(xbr)
}

#[cfg(test)]
mod tests {
    use super::flow_n_packets;

    const DUMP: &str = "\
 cookie=0x0, duration=3.1s, table=0, n_packets=10002, n_bytes=980196, in_port=1 actions=output:2
 cookie=0x0, duration=3.1s, table=0, n_packets=7, n_bytes=294, in_port=10 actions=output:1
 cookie=0x0, duration=3.1s, table=0, n_packets=3, n_bytes=126, priority=5,in_port=2 actions=output:1
";

    #[test]
    fn finds_the_flow_by_whole_token() {
        assert_eq!(flow_n_packets(DUMP, "in_port=1"), Some(10002));
        assert_eq!(flow_n_packets(DUMP, "in_port=10"), Some(7));
        assert_eq!(flow_n_packets(DUMP, "in_port=2"), Some(3));
        assert_eq!(flow_n_packets(DUMP, "in_port=3"), None);
        assert_eq!(flow_n_packets("", "in_port=1"), None);
    }
}
