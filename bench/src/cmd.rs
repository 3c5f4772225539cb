//! Bounded external commands and process figures: what the OVS runner,
//! the topologies and the systems under test all use. Every command runs
//! with a deadline and is killed past it; its output is kept for the
//! error that names it.

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Errors of running external commands: every tool the benches run,
/// Open vSwitch's daemons and tools among them (hence the name; `ovs.rs`
/// re-exports it). Each names the command or file involved.
#[derive(Debug, thiserror::Error)]
pub enum OvsError {
    #[error("could not start `{command}`: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("`{command}` {status}\n--- stdout:\n{stdout}\n--- stderr:\n{stderr}")]
    Failed {
        command: String,
        status: String,
        stdout: String,
        stderr: String,
    },
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error(
        "Open vSwitch is not installed: `{0}` is not in PATH (apt-get install openvswitch-switch)"
    )]
    NotInstalled(String),
    #[error("Open vSwitch did not come up: {reason}\n--- ovs-vswitchd.log:\n{log}")]
    Setup { reason: String, log: String },
    #[error("lab.json: {0}")]
    Lab(String),
}

/// Poll step while waiting for a child.
const POLL: Duration = Duration::from_millis(10);

pub(crate) fn io_err(context: impl Into<String>, source: std::io::Error) -> OvsError {
    OvsError::Io {
        context: context.into(),
        source,
    }
}

/// The outcome of a command run by [`run_bounded`].
#[derive(Debug, Clone)]
pub struct Output {
    pub command: String,
    /// `None` if the deadline passed (the process was killed).
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    pub fn success(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    fn describe_status(&self) -> String {
        match self.status {
            None => "timed out and was killed".to_string(),
            Some(s) => match s.code() {
                Some(c) => format!("exited with code {c}"),
                None => format!("ended with {s}"),
            },
        }
    }

    /// `self` if the command succeeded, else an error with its output.
    pub fn ok(self) -> Result<Self, OvsError> {
        if self.success() {
            Ok(self)
        } else {
            Err(self.into_error())
        }
    }

    pub fn into_error(self) -> OvsError {
        OvsError::Failed {
            status: self.describe_status(),
            command: self.command,
            stdout: self.stdout,
            stderr: self.stderr,
        }
    }
}

fn describe(cmd: &Command) -> String {
    let mut line = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        line.push(' ');
        line.push_str(&arg.to_string_lossy());
    }
    line
}

fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut p) = pipe {
            // A read error ends the capture; what was read is kept.
            let _ = p.read_to_end(&mut buf);
        }
        let _ = tx.send(String::from_utf8_lossy(&buf).into_owned());
    });
    rx
}

fn wait_child(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(POLL),
            _ => {
                // Fails only if it already exited; wait() reaps it either way.
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

/// Runs `cmd` (stdin closed, output captured) and kills it after `timeout`.
/// Output is drained by threads so a chatty child never blocks on a pipe.
pub fn run_bounded(cmd: &mut Command, timeout: Duration) -> Result<Output, OvsError> {
    let command = describe(cmd);
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| OvsError::Spawn {
            command: command.clone(),
            source,
        })?;
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());
    let status = wait_child(&mut child, timeout);
    // A daemonised grandchild may hold the pipes open: collecting is bounded.
    let grace = Duration::from_secs(2);
    Ok(Output {
        command,
        status,
        stdout: out.recv_timeout(grace).unwrap_or_default(),
        stderr: err.recv_timeout(grace).unwrap_or_default(),
    })
}

/// An 8-character name tag, unique across processes and threads: pid,
/// a per-process counter and the clock, in base 36.
pub fn unique_tag() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut tag = String::with_capacity(8);
    for (mut v, width) in [
        (u64::from(std::process::id()), 3),
        (n, 2),
        (nanos.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40, 3),
    ] {
        let mut part = Vec::with_capacity(width);
        for _ in 0..width {
            part.push(b"0123456789abcdefghijklmnopqrstuvwxyz"[(v % 36) as usize]);
            v /= 36;
        }
        part.reverse();
        tag.push_str(&String::from_utf8_lossy(&part));
    }
    tag
}

/// Resident set size of process `pid` in KiB (`VmRSS` of /proc/PID/status).
pub fn rss_kib(pid: u32) -> Result<u64, OvsError> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).map_err(|e| io_err(format!("reading {path}"), e))?;
    parse_vm_rss(&text).ok_or_else(|| io_err(path, std::io::Error::other("no VmRSS line")))
}

/// The `VmRSS:` value of a /proc/PID/status text, in KiB (the kernel
/// writes `kB` and means 1024 bytes). `None` without one, as for a
/// kernel thread or a process that is exiting.
pub fn parse_vm_rss(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB")?.trim().parse().ok())
}

/// CPU time (user + system, all threads) process `pid` has used so far,
/// from /proc/PID/stat.
pub fn cpu_time(pid: u32) -> Result<Duration, OvsError> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path).map_err(|e| io_err(format!("reading {path}"), e))?;
    // Fields after the parenthesised command name (which may hold spaces):
    // state is field 3, utime 14 and stime 15, in clock ticks.
    let ticks: Option<u64> = text.rsplit_once(')').and_then(|(_, rest)| {
        let f: Vec<&str> = rest.split_whitespace().collect();
        let utime = f.get(11)?.parse::<u64>().ok()?;
        let stime = f.get(12)?.parse::<u64>().ok()?;
        Some(utime + stime)
    });
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .and_then(|v| u64::try_from(v).ok())
        .filter(|v| *v > 0)
        .unwrap_or(100);
    ticks
        .map(|t| Duration::from_micros(t * 1_000_000 / hz))
        .ok_or_else(|| io_err(path, std::io::Error::other("unexpected format")))
}

/// The xbr binary the lab benches drive: `$XBR_BIN`, else `xbr` next to
/// the running program, else `xbr` from the PATH.
pub fn xbr_bin() -> std::path::PathBuf {
    std::env::var_os("XBR_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::env::current_exe()
                .ok()
                .and_then(|p| p.parent().map(|d| d.join("xbr")))
                .unwrap_or_else(|| std::path::PathBuf::from("xbr"))
        })
}

/// `ip netns exec NS ARGS...`, to run with [`run_bounded`].
pub fn in_ns(ns: &str, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).args(args);
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_rss_is_read_in_kib() {
        let status =
            "Name:\txbr\nVmPeak:\t  200000 kB\nVmRSS:\t   41236 kB\nRssAnon:\t   30000 kB\n";
        assert_eq!(parse_vm_rss(status), Some(41_236));
        assert_eq!(parse_vm_rss("Name:\tkthreadd\nVmPeak:\t1 kB\n"), None);
        assert_eq!(
            parse_vm_rss("VmRSS:\t12 MB\n"),
            None,
            "only the kernel's kB"
        );
        let me = rss_kib(std::process::id()).unwrap();
        assert!(me > 100, "this test's own RSS: {me} KiB");
    }

    #[test]
    fn tags_are_distinct_and_short() {
        let a = unique_tag();
        let b = unique_tag();
        assert_ne!(a, b);
        assert_eq!(a.len(), 8);
    }
}
