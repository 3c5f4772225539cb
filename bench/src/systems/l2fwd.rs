//! The `afxdp-l2fwd` system: the `afxdp-l2fwd` binary (next to the xbr
//! binary) between `veth-a` and `veth-b`, pinned to the switch core: the
//! AF_XDP path with no pipeline, the ceiling xbr's packet thread is
//! measured against.

use super::{stop_child, SwitchConfig, SystemError};
use crate::ovs::{unique_tag, OvsError, NAME_PREFIX};
use crate::topo::{Topology, VETH_A, VETH_B};
use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Bound on attaching XDP and binding the two sockets.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// What the forwarder prints once both ports are open.
const READY: &str = "afxdp-l2fwd: forwarding";

fn err(reason: impl Into<String>) -> SystemError {
    SystemError::Start {
        system: "afxdp-l2fwd",
        reason: reason.into(),
    }
}

/// A running forwarder; SIGTERM and a bounded wait on drop.
pub struct L2fwdGuard {
    child: Option<Child>,
    log: PathBuf,
}

impl L2fwdGuard {
    pub fn start(topo: &Topology, cfg: &SwitchConfig) -> Result<L2fwdGuard, SystemError> {
        let bin = cfg.xbr_bin.with_file_name("afxdp-l2fwd");
        if !bin.is_file() {
            return Err(err(format!(
                "{} not found (cargo build --release -p bench --bin afxdp-l2fwd)",
                bin.display()
            )));
        }
        let log = std::env::temp_dir().join(format!("{NAME_PREFIX}l2fwd-{}.log", unique_tag()));
        let file = File::create(&log).map_err(|source| OvsError::Io {
            context: format!("creating {}", log.display()),
            source,
        })?;
        let cpu = cfg.cpu.to_string();
        let child = Command::new("ip")
            .args([
                "netns", "exec", &topo.host, "nice", "-n", "-20", "taskset", "-c", &cpu,
            ])
            .arg(&bin)
            .args(["--port", VETH_A, "--port", VETH_B, "--cpu", &cpu])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .map_err(|e| err(format!("running {}: {e}", bin.display())))?;
        let mut g = L2fwdGuard {
            child: Some(child),
            log,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        while !g.log_text().contains(READY) {
            if let Some(Ok(Some(status))) = g.child.as_mut().map(Child::try_wait) {
                return Err(err(format!("exited ({status}):\n{}", g.log_text())));
            }
            if Instant::now() > deadline {
                return Err(err(format!(
                    "not ready after {START_TIMEOUT:?}:\n{}",
                    g.log_text()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(g)
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for L2fwdGuard {
    fn drop(&mut self) {
        if let Some(c) = self.child.take() {
            stop_child(c);
        }
        let _ = std::fs::remove_file(&self.log);
    }
}
