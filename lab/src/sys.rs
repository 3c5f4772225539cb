//! Running the system tools the lab drives (`ip`, `iptables`, `ethtool`,
//! `ping`, `ovs-ofctl`), each with a deadline.
//!
//! Output is drained by one thread per pipe so a chatty child never blocks
//! on a full pipe; collecting it is bounded too, in case a grandchild keeps
//! the pipe open after the child exited.

use super::LabError;
use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Bound for quick configuration commands.
pub const CMD_TIMEOUT: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(5);
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// How a command ended.
#[derive(Debug)]
pub struct Output {
    pub command: String,
    pub status: Option<ExitStatus>,
    pub timed_out: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    pub fn success(&self) -> bool {
        !self.timed_out && self.status.is_some_and(|s| s.success())
    }

    pub fn describe(&self) -> String {
        match (self.timed_out, self.status) {
            (true, _) => "timed out and was killed".to_string(),
            (false, Some(s)) => s.to_string(),
            (false, None) => "could not be waited for".to_string(),
        }
    }

    /// `Ok(stdout)` on success, else an error naming the command.
    pub fn ok(self) -> Result<String, LabError> {
        if self.success() {
            Ok(self.stdout)
        } else {
            Err(LabError::Command {
                status: self.describe(),
                command: self.command,
                stderr: self.stderr.trim().to_string(),
            })
        }
    }
}

/// The command line as a shell would show it.
pub fn describe(program: &str, args: &[&str]) -> String {
    let mut s = program.to_string();
    for a in args {
        s.push(' ');
        if a.is_empty() || a.contains([' ', '"', '\'']) {
            s.push('\'');
            s.push_str(a);
            s.push('\'');
        } else {
            s.push_str(a);
        }
    }
    s
}

fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    if let Some(mut pipe) = pipe {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.read_to_end(&mut buf);
            let _ = tx.send(String::from_utf8_lossy(&buf).into_owned());
        });
    }
    rx
}

fn wait_deadline(child: &mut Child, timeout: Duration) -> (Option<ExitStatus>, bool) {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return (Some(status), false),
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                return (child.wait().ok(), true);
            }
            Ok(None) => std::thread::sleep(POLL),
            Err(_) => return (None, false),
        }
    }
}

/// Runs `program args` with extra environment `env`, killed after `timeout`.
pub fn run_env(
    program: &str,
    args: &[&str],
    env: &[(&str, &str)],
    timeout: Duration,
) -> Result<Output, LabError> {
    let command = describe(program, args);
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().map_err(|source| LabError::Spawn {
        command: command.clone(),
        source,
    })?;
    let out_rx = drain(child.stdout.take());
    let err_rx = drain(child.stderr.take());
    let (status, timed_out) = wait_deadline(&mut child, timeout);
    let stdout = out_rx.recv_timeout(DRAIN_TIMEOUT).unwrap_or_default();
    let stderr = err_rx.recv_timeout(DRAIN_TIMEOUT).unwrap_or_default();
    Ok(Output {
        command,
        status,
        timed_out,
        stdout,
        stderr,
    })
}

pub fn run(program: &str, args: &[&str], timeout: Duration) -> Result<Output, LabError> {
    run_env(program, args, &[], timeout)
}

/// `ip ARGS`, which must succeed.
pub fn ip(args: &[&str]) -> Result<String, LabError> {
    run("ip", args, CMD_TIMEOUT)?.ok()
}

/// `ip netns exec NS PROGRAM ARGS`, which must succeed.
pub fn in_ns(ns: &str, program: &str, args: &[&str]) -> Result<String, LabError> {
    let mut full = vec!["netns", "exec", ns, program];
    full.extend_from_slice(args);
    run("ip", &full, CMD_TIMEOUT)?.ok()
}

/// Starts `ip netns exec NS PROGRAM ARGS` to outlive the caller: stdin
/// closed, stdout and stderr to a new file `log`, in a process group of
/// its own (a Ctrl-C at the terminal after `lab up` returned must not
/// stop the lab's processes). Not waited for: init reaps it. Returns its
/// pid.
pub fn spawn_detached(
    ns: &str,
    program: &std::path::Path,
    args: &[String],
    log: &std::path::Path,
) -> Result<u32, LabError> {
    use std::os::unix::process::CommandExt;
    let out = std::fs::File::create(log).map_err(|source| LabError::Io {
        context: format!("creating {}", log.display()),
        source,
    })?;
    let err = out.try_clone().map_err(|source| LabError::Io {
        context: "duplicating the log file".into(),
        source,
    })?;
    let child = Command::new("ip")
        .args(["netns", "exec", ns])
        .arg(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .spawn()
        .map_err(|source| LabError::Spawn {
            command: format!(
                "ip netns exec {ns} {} {}",
                program.display(),
                args.first().map_or("", String::as_str)
            ),
            source,
        })?;
    Ok(child.id())
}

/// Network namespaces that exist now (`/run/netns`, where `ip netns` keeps them).
pub fn list_netns() -> Result<Vec<String>, LabError> {
    let out = run("ip", &["netns", "list"], CMD_TIMEOUT)?.ok()?;
    // Lines are "NAME" or "NAME (id: N)".
    Ok(out
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect())
}

/// The MAC of `dev` in namespace `ns`, from `ip -o link show`.
pub fn link_mac(ns: &str, dev: &str) -> Result<[u8; 6], LabError> {
    let out = ip(&["-n", ns, "-o", "link", "show", "dev", dev])?;
    out.split_whitespace()
        .skip_while(|w| *w != "link/ether")
        .nth(1)
        .and_then(dataplane::config::parse_mac)
        .ok_or_else(|| LabError::Unexpected(format!("no MAC for {dev} in {ns}: {out}")))
}

/// 8 random bytes from the kernel, for lab names, VNIDs and cookies.
pub fn random_u64() -> Result<u64, LabError> {
    let mut buf = [0u8; 8];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .map_err(|source| LabError::Io {
            context: "reading /dev/urandom".to_string(),
            source,
        })?;
    Ok(u64::from_le_bytes(buf))
}
