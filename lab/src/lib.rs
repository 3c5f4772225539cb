//! `xbr lab up|check|down`: an OpenShift SDN cluster in network namespaces,
//! with one xbr per node in place of ovs-vswitchd.
//!
//! A lab is an underlay (a Linux bridge in namespace `P-ul`) joining the
//! nodes' uplinks and one external host (`P-ext`); per node a namespace
//! (`P-nK`) with uplink `eth0`, an xbr run directory inside the lab
//! directory, ports `vxlan0`=1, `tun0`=2 (internal, the gateway) and the
//! pods' host veths from 3 on, iptables MASQUERADE for traffic leaving the
//! cluster network; pods are namespaces (`P-nK-pJ`) configured the way the
//! openshift-sdn CNI plugin configures them. Each xbr gets the agent's
//! flows for the mode ([`flows`]), through `ovs-ofctl -O OpenFlow13 bundle`,
//! as the agent installs them.
//!
//! This module only orchestrates: it shells out to `ip`, `iptables`,
//! `ethtool`, `ping` and `ovs-ofctl`, each with a deadline ([`sys`]), and
//! never touches objects outside the lab's own namespaces. `DIR/lab.json`
//! ([`state`]) describes the lab for `check`, `down` and other tools.
//!
//! # The crate
//! `xbr-lab` sits above `dataplane`, whose port specs, MAC parsing and
//! capability sets it reuses, and below `xbr-daemon`, whose `xbr lab`
//! subcommand is [`cli`]; `bench` uses its flow generator ([`flows`]) and
//! addressing ([`addr`]) too. Each node's xbr is a separate process, the
//! running binary itself (`current_exe`), never a bridge in this process.
//!
//! # Invariants, threads and costs
//! - Every object a lab makes carries its prefix, so `down` finds and
//!   removes exactly the lab's, also after a crashed or interrupted `up`
//!   ([`down`]), and signals only processes whose command line names the
//!   lab directory.
//! - Bad options exit 2 ([`LabError::is_usage`]); no `unsafe`
//!   (`forbid(unsafe_code)`).
//! - The commands run one at a time on the calling thread, each with a
//!   deadline; `check` probes the pods' connectivity from scoped threads
//!   in parallel. A lab of N nodes with P pods each costs O(N * P)
//!   external commands: seconds to a minute.

#![forbid(unsafe_code)]

pub mod addr;
pub mod agent_vsctl;
pub mod check;
pub mod cli;
pub mod down;
pub mod flows;
pub mod ovsdb;
pub mod plan;
pub mod service;
pub mod state;
pub mod sys;
pub mod up;
pub mod xbr_proc;

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// Bad options or a lab that cannot be built as asked (exit code 2).
    #[error("{0}")]
    Usage(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error("cannot run `{command}`: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("`{command}` {status}: {stderr}")]
    Command {
        command: String,
        status: String,
        stderr: String,
    },
    #[error("xbr of {node} {reason}; its log ends with:\n{log}")]
    Xbr {
        node: String,
        reason: String,
        log: String,
    },
    #[error(transparent)]
    Flows(#[from] flows::FlowGenError),
    #[error("{}: {reason}", path.display())]
    BadState { path: PathBuf, reason: String },
    #[error("xbr lab needs root (network namespaces, veths, XDP)")]
    NotRoot,
    #[error("{0}")]
    Unexpected(String),
}

impl LabError {
    /// Configuration errors exit with 2, like the rest of the CLI.
    pub fn is_usage(&self) -> bool {
        matches!(self, LabError::Usage(_) | LabError::NotRoot)
    }
}

/// Writes a lab file (lab.json's companions, flow bundles, pid files).
pub(crate) fn write_file(path: &std::path::Path, text: &str) -> Result<(), LabError> {
    std::fs::write(path, text).map_err(|source| LabError::Io {
        context: format!("writing {}", path.display()),
        source,
    })
}
