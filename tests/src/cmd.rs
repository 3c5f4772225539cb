//! Running external commands with a deadline.
//!
//! Output is drained by one thread per pipe so a chatty child can never
//! block on a full pipe while we wait for it; the threads hand their text
//! back over a channel, and collecting it is itself bounded, in case the
//! child left a grandchild holding the pipe open.

use crate::{HarnessError, Result};
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

/// How long to wait for a pipe's remaining output once its process exited.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);
/// Poll interval while waiting for a child.
const POLL: Duration = Duration::from_millis(5);

/// The outcome of a finished (or timed-out and killed) command.
#[derive(Debug, Clone)]
pub struct CmdOutput {
    /// The command line, for messages.
    pub command: String,
    /// `None` only if the process could not be reaped at all.
    pub status: Option<ExitStatus>,
    /// The deadline passed and the process was killed.
    pub timed_out: bool,
    pub stdout: String,
    pub stderr: String,
}

impl CmdOutput {
    /// Exited by itself with status 0.
    pub fn success(&self) -> bool {
        !self.timed_out && self.status.is_some_and(|s| s.success())
    }

    /// The exit code, if the process exited by itself.
    pub fn code(&self) -> Option<i32> {
        if self.timed_out {
            return None;
        }
        self.status.and_then(|s| s.code())
    }

    /// How the command ended, in words.
    pub fn describe_status(&self) -> String {
        match (self.timed_out, self.status) {
            (true, _) => "timed out and was killed".to_string(),
            (false, Some(s)) => match (s.code(), s.signal()) {
                (Some(c), _) => format!("exited with code {c}"),
                (None, Some(sig)) => format!("was killed by signal {sig}"),
                (None, None) => format!("ended with {s}"),
            },
            (false, None) => "could not be waited for".to_string(),
        }
    }

    /// `self` if the command succeeded, else an error carrying its output.
    pub fn ok(self) -> Result<Self> {
        if self.success() {
            Ok(self)
        } else {
            Err(self.into_error())
        }
    }

    /// An error describing this (unexpected) outcome.
    pub fn into_error(self) -> HarnessError {
        HarnessError::CommandFailed {
            status: self.describe_status(),
            command: self.command,
            stdout: self.stdout,
            stderr: self.stderr,
        }
    }
}

/// A process running in the background; killed and reaped on drop.
pub struct Background {
    command: String,
    child: Child,
    reaped: Option<ExitStatus>,
    stdout: Receiver<String>,
    stderr: Receiver<String>,
}

/// Renders a `Command` as a shell-like line for messages.
pub(crate) fn describe(cmd: &Command) -> String {
    let mut line = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        line.push(' ');
        line.push_str(&arg.to_string_lossy());
    }
    line
}

fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut p) = pipe {
            // A read error just ends the capture; what was read is kept.
            let _ = p.read_to_end(&mut buf);
        }
        let _ = tx.send(String::from_utf8_lossy(&buf).into_owned());
    });
    rx
}

impl Background {
    /// Starts `cmd` with stdin closed and stdout/stderr captured.
    pub fn spawn(cmd: &mut Command) -> Result<Self> {
        let command = describe(cmd);
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| HarnessError::Spawn {
                command: command.clone(),
                source,
            })?;
        let stdout = drain(child.stdout.take());
        let stderr = drain(child.stderr.take());
        Ok(Background {
            command,
            child,
            reaped: None,
            stdout,
            stderr,
        })
    }

    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The exit status if the process has ended, without blocking.
    pub fn try_status(&mut self) -> Option<ExitStatus> {
        if self.reaped.is_none() {
            self.reaped = self.child.try_wait().ok().flatten();
        }
        self.reaped
    }

    /// Waits until the process ends or `timeout` passes (then kills it),
    /// and returns its status and output.
    pub fn wait(mut self, timeout: Duration) -> CmdOutput {
        let deadline = Instant::now() + timeout;
        let mut timed_out = false;
        while self.try_status().is_none() {
            if Instant::now() >= deadline {
                timed_out = true;
                self.kill();
                break;
            }
            std::thread::sleep(POLL);
        }
        CmdOutput {
            command: self.command.clone(),
            status: self.reaped,
            timed_out,
            stdout: self.stdout.recv_timeout(DRAIN_TIMEOUT).unwrap_or_default(),
            stderr: self.stderr.recv_timeout(DRAIN_TIMEOUT).unwrap_or_default(),
        }
    }

    fn kill(&mut self) {
        if self.reaped.is_none() {
            // Fails only if the process is already gone; wait() then reaps it.
            let _ = self.child.kill();
            self.reaped = self.child.wait().ok();
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs `cmd` to completion, killing it after `timeout`.
pub fn run_timeout(cmd: &mut Command, timeout: Duration) -> Result<CmdOutput> {
    Ok(Background::spawn(cmd)?.wait(timeout))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captures_output_and_exit_code() {
        let out = run_timeout(
            Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]),
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(out.code(), Some(3));
        assert!(!out.success());
        assert_eq!(out.stdout, "out\n");
        assert_eq!(out.stderr, "err\n");
        assert!(out.ok().is_err());
    }

    #[test]
    fn kills_at_the_deadline() {
        let start = Instant::now();
        let out = run_timeout(Command::new("sleep").arg("30"), Duration::from_millis(200)).unwrap();
        assert!(out.timed_out);
        assert_eq!(out.code(), None);
        assert!(start.elapsed() < Duration::from_secs(10));
    }
}
