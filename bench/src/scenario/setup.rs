//! What every scenario's runs share: the switches' configuration, naming
//! a measurement's failure, loading a bundle as the agent does, and a
//! scratch directory.

use std::io::Read;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use super::flows::flows_text;
use super::{
    pipeline, Config, ConfigError, Scenario, ScenarioError, CT_LIMIT, ENCAP_POD_PORT, LOCAL_NODE,
    REMOTE_NODE, VNI,
};
use crate::measure::MeasureError;
use crate::ovs::{unique_tag, OvsError, NAME_PREFIX};
use crate::systems::{Ports, Running, SwitchConfig, System};
use crate::topo::MAC_B;

/// How the switches of `cfg` are started.
pub fn switch_config(cfg: &Config) -> Result<SwitchConfig, ConfigError> {
    let node = format!("{LOCAL_NODE}/24");
    Ok(SwitchConfig {
        xbr_bin: cfg.xbr_bin.clone(),
        xbr_args: cfg.xbr_args.clone(),
        cpu: cfg.switch_cpu,
        flows: flows_text(cfg)?,
        // The agent writes its flows with one bundle.
        bundle: cfg.scenario == Scenario::Pipeline,
        ports: match cfg.scenario {
            Scenario::Vxlan => Ports::VxlanIn { cidr: node },
            Scenario::Encap => Ports::VxlanOut {
                cidr: node,
                a: ENCAP_POD_PORT,
                remote: REMOTE_NODE,
                remote_mac: MAC_B,
                vni: VNI,
            },
            Scenario::Pipeline => Ports::Pods {
                a: pipeline::POD_A_PORT,
                b: pipeline::POD_B_PORT,
            },
            _ => Ports::P2P,
        },
        ct_limit: cfg.scenario.uses_conntrack().then_some(CT_LIMIT),
        c_uncached: false,
    })
}

/// Maps a measurement's error to the scenario's, naming the switch.
pub(in crate::scenario) fn measure_err(
    system: System,
) -> impl Fn(MeasureError) -> ScenarioError + Copy {
    move |source| match source {
        MeasureError::Interrupted => ScenarioError::Interrupted,
        source => ScenarioError::Measure {
            system: system.name(),
            source,
        },
    }
}

/// How often [`bundle`] looks whether `ovs-ofctl` has ended.
const EXIT_POLL: Duration = Duration::from_micros(200);

/// `ovs-ofctl bundle br0 FILE`, returning as soon as the command has
/// ended (it ends on the commit's reply), bounded by `timeout`: `churn`
/// opens the new version's window from then and `flowmod` stops its
/// clock, so neither adds `run_bounded`'s 10 ms poll to the switch's
/// time. Its output is read after it ended; it writes only an error, far
/// less than a pipe holds.
pub(in crate::scenario) fn bundle(
    switch: &Running,
    file: &str,
    timeout: Duration,
) -> Result<(), ScenarioError> {
    let mut cmd = switch.ofctl_command(&["bundle", "br0", file])?;
    let what = format!("ovs-ofctl bundle br0 {file}");
    let io = |e: std::io::Error| {
        ScenarioError::Ovs(OvsError::Io {
            context: what.clone(),
            source: e,
        })
    };
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(io)?;
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(s) = child.try_wait().map_err(io)? {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(io(std::io::Error::other(format!(
                "no answer after {timeout:?}"
            ))));
        }
        std::thread::sleep(EXIT_POLL);
    };
    if status.success() {
        return Ok(());
    }
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    Err(io(std::io::Error::other(format!(
        "{status}: {}",
        err.trim()
    ))))
}

/// A private directory for a scenario's files, removed on drop.
pub(in crate::scenario) struct ScratchDir(pub(in crate::scenario) PathBuf);

impl ScratchDir {
    pub(in crate::scenario) fn new(what: &str) -> Result<ScratchDir, ScenarioError> {
        let dir = std::env::temp_dir().join(format!("{NAME_PREFIX}-bench-{what}-{}", unique_tag()));
        std::fs::create_dir_all(&dir).map_err(|source| OvsError::Io {
            context: format!("creating {}", dir.display()),
            source,
        })?;
        Ok(ScratchDir(dir))
    }

    /// Writes `text` to `name` in the directory; returns the path.
    pub(in crate::scenario) fn write(
        &self,
        name: &str,
        text: &str,
    ) -> Result<String, ScenarioError> {
        let path = self.0.join(name);
        std::fs::write(&path, text).map_err(|source| OvsError::Io {
            context: format!("writing {}", path.display()),
            source,
        })?;
        Ok(path.display().to_string())
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
