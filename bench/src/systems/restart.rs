//! Restarting a running switch in place, for the restart benchmark
//! (`restartbench`): xbr is stopped with a signal and the same command
//! started again on the same run directory (its state file, and the
//! pinned XDP state under its `--bpf-pin-root`); OVS goes through
//! `ovs-ctl restart`'s steps (`OvsGuard::restart_ovs_ctl`). Both report
//! the same phases, and the instant the new process was started is
//! published as soon as it is, so that a probe can time the first frame
//! forwarded after it.

use std::fs::OpenOptions;
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::{start_err, Running, System, SystemError, XbrGuard, START_TIMEOUT};
use crate::ovs::OvsError;

/// Bound on the old process's exit after it was asked to stop.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// The phases of one restart.
#[derive(Debug, Clone, Copy)]
pub struct Restarted {
    /// Saving the flows before the stop (`ovs-save`; xbr saves its own
    /// state as it stops, inside `stop`).
    pub save: Option<Duration>,
    /// From asking the old process to stop until it was gone.
    pub stop: Duration,
    /// When the new process was started.
    pub spawned: Instant,
    /// From the new process's start until it was ready: xbr's OpenFlow
    /// socket accepts (its state is restored before); OVS's restore
    /// script ran and `flow-restore-wait` was removed.
    pub start_to_ready: Duration,
}

impl Running {
    /// Restarts the switch (xbr with `signal`; OVS as `ovs-ctl restart`
    /// does, `signal` unused) and returns once it is ready again. `spawned`
    /// is set when the new process starts; `flows` is how many flows it
    /// holds (bounds the restore).
    pub fn restart(
        &mut self,
        signal: Signal,
        spawned: &OnceLock<Instant>,
        flows: usize,
    ) -> Result<Restarted, SystemError> {
        match self {
            Running::Xbr(x) => x.restart(signal, spawned),
            Running::Ovs(o) => o.restart_ovs_ctl(spawned, flows),
            Running::L2fwd(_) | Running::Redirect(_) | Running::Bridge => Err(SystemError::Start {
                system: "reference",
                reason: "the references have no process to restart".into(),
            }),
        }
    }
}

impl XbrGuard {
    fn restart(
        &mut self,
        signal: Signal,
        spawned: &OnceLock<Instant>,
    ) -> Result<Restarted, SystemError> {
        let mut child = self
            .child
            .take()
            .ok_or_else(|| start_err(System::Xbr, "xbr is not running"))?;
        let pid = i32::try_from(child.id())
            .map_err(|_| start_err(System::Xbr, format!("pid {} out of range", child.id())))?;
        let t = Instant::now();
        kill(Pid::from_raw(pid), signal)
            .map_err(|e| start_err(System::Xbr, format!("sending {signal} to xbr: {e}")))?;
        loop {
            match child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if t.elapsed() < STOP_TIMEOUT => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(start_err(
                        System::Xbr,
                        format!("xbr did not exit within {STOP_TIMEOUT:?} of {signal}"),
                    ));
                }
            }
        }
        let stop = t.elapsed();
        let log_path = self.dir.join("xbr.log");
        let open = || {
            OpenOptions::new()
                .append(true)
                .open(&log_path)
                .map_err(|source| OvsError::Io {
                    context: format!("opening {}", log_path.display()),
                    source,
                })
        };
        let mut cmd = Command::new("ip");
        cmd.args(&self.argv)
            .stdin(Stdio::null())
            .stdout(open()?)
            .stderr(open()?);
        let started = Instant::now();
        let _ = spawned.set(started);
        self.child = Some(
            cmd.spawn()
                .map_err(|e| start_err(System::Xbr, format!("starting xbr again: {e}")))?,
        );
        // Accepting, not merely present: a killed xbr leaves its socket
        // file behind.
        let mgmt = self.dir.join("br0.mgmt");
        loop {
            if UnixStream::connect(&mgmt).is_ok() {
                break;
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                return Err(start_err(
                    System::Xbr,
                    format!("xbr exited ({status}) during its restart:\n{}", self.log()),
                ));
            }
            if started.elapsed() > START_TIMEOUT {
                return Err(start_err(
                    System::Xbr,
                    format!(
                        "not ready {START_TIMEOUT:?} after its restart:\n{}",
                        self.log()
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(Restarted {
            save: None,
            stop,
            spawned: started,
            start_to_ready: started.elapsed(),
        })
    }
}
