//! `DIR/lab.json`: what a lab is made of, written by `up`, read by
//! `check`, `down`, tests and other tools.
//!
//! Addresses are strings in the usual notation (`10.128.0.2`,
//! `10.128.0.0/23`, `0a:58:0a:80:00:02`) so that shell tools (`jq`) can use
//! them directly. The planner fills everything except the run-time facts
//! (pids, MACs the kernel chose), which `up` adds before writing the file.

use serde::{Deserialize, Serialize};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use super::LabError;

/// A lab written before `pmd_threads` existed ran one packet thread.
fn yes() -> bool {
    true
}

fn one() -> u32 {
    1
}

/// Bumped on incompatible changes to the file.
pub const SCHEMA_VERSION: u32 = 1;
pub const LAB_JSON: &str = "lab.json";
/// Written first by `up`, so `down` can find a lab's objects even when `up`
/// died before writing `lab.json`.
pub const PREFIX_FILE: &str = "lab.prefix";

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct LabState {
    pub schema_version: u32,
    /// subnet, multitenant or networkpolicy.
    pub mode: String,
    /// Which agent flow set is installed (`legacy-nonconntrack`).
    pub flows: String,
    /// Every namespace of the lab is named `PREFIX-...`.
    pub prefix: String,
    pub dir: PathBuf,
    /// `vxlan0` is a real VXLAN port; without it cross-node traffic has
    /// nowhere to go and `check` reports it as failing.
    pub vxlan: bool,
    /// Each node runs ovsdb-server and is configured with `ovs-vsctl`
    /// (`up --ovsdb`).
    #[serde(default)]
    pub ovsdb: bool,
    /// Pods accept XDP-redirected frames (GRO on) and their ports are
    /// `xdp_redirect=on` (`--xdp-redirect`).
    #[serde(default)]
    pub xdp_redirect: bool,
    /// Each node's xbr runs with `--xdp-peer-gro` on (`--xdp-peer-gro`).
    #[serde(default = "yes")]
    pub xdp_peer_gro: bool,
    /// Each node's xbr runs under `capsh` with only the documented
    /// capabilities in its bounding set (`--least-privilege`).
    #[serde(default)]
    pub least_privilege: bool,
    /// Packet threads of each node's xbr (`--pmd-threads`).
    #[serde(default = "one")]
    pub pmd_threads: u32,
    /// tun0's `internal_backend` (`--tun0-backend`); empty: xbr's default.
    #[serde(default)]
    pub tun0_backend: String,
    pub cluster_network: String,
    pub service_network: String,
    pub vxlan_port: u16,
    /// MTU of tun0 and of the pods' interfaces (underlay MTU - 50).
    pub mtu: u32,
    pub underlay: Underlay,
    pub nodes: Vec<Node>,
    pub namespaces: Vec<Namespace>,
    pub pods: Vec<Pod>,
    pub external: External,
    /// ClusterIP Services the nodes' iptables DNAT to backend pods.
    #[serde(default)]
    pub services: Vec<Service>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Underlay {
    pub netns: String,
    pub bridge: String,
    pub cidr: String,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    pub netns: String,
    /// Address of eth0, the uplink, on the underlay.
    pub uplink_ip: Ipv4Addr,
    /// The node's HostSubnet (a /23 of the cluster network).
    pub subnet: String,
    /// tun0's address: the first address of `subnet`.
    pub gateway: Ipv4Addr,
    pub xbr_pid: u32,
    /// xbr's run directory: br0.mgmt, xbr.log, xbr.pid, flows.bundle.
    pub rundir: PathBuf,
    /// The HostSubnet cookie other nodes' tables 10/50/90 use for this node.
    pub hostsubnet_cookie: u32,
    pub uplink_mac: String,
    pub tun0_mac: String,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Namespace {
    pub name: String,
    pub vnid: u32,
    /// networkpolicy mode: the NetworkPolicies of the namespace, if any
    /// ([`super::flows::POLICY_SAME_NAMESPACE`]: ingress only from the
    /// namespace itself and from VNID 0, egress open).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Pod {
    pub name: String,
    pub netns: String,
    pub ip: Ipv4Addr,
    pub mac: String,
    /// Name of the node (see [`Node::name`]).
    pub node: String,
    /// Name of the namespace (see [`Namespace::name`]).
    pub namespace: String,
    pub vnid: u32,
    pub ofport: u32,
    /// The host-side veth, in the node's namespace.
    pub host_if: String,
}

/// A ClusterIP Service: each node's iptables DNATs `ip`:`port` (TCP) to
/// the backends, which answer every connection with their pod name.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Service {
    pub ip: Ipv4Addr,
    pub port: u16,
    /// Name of the namespace (see [`Namespace::name`]).
    pub namespace: String,
    /// Pod names (see [`Pod::name`]).
    pub backends: Vec<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct External {
    pub netns: String,
    pub ip: Ipv4Addr,
}

impl LabState {
    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.name == name)
    }

    pub fn write(&self, dir: &Path) -> Result<(), LabError> {
        let path = dir.join(LAB_JSON);
        let text = serde_json::to_string_pretty(self)
            .map_err(|e| LabError::Unexpected(format!("encoding lab.json: {e}")))?;
        // Written whole and renamed, so readers never see half a file.
        let tmp = dir.join(format!("{LAB_JSON}.tmp"));
        std::fs::write(&tmp, text + "\n")
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|source| LabError::Io {
                context: format!("writing {}", path.display()),
                source,
            })
    }

    /// Reads `DIR/lab.json`; `Ok(None)` if there is none.
    pub fn read(dir: &Path) -> Result<Option<LabState>, LabError> {
        let path = dir.join(LAB_JSON);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(LabError::Io {
                    context: format!("reading {}", path.display()),
                    source,
                })
            }
        };
        let state: LabState = serde_json::from_str(&text).map_err(|e| LabError::BadState {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        if state.schema_version != SCHEMA_VERSION {
            return Err(LabError::BadState {
                path,
                reason: format!(
                    "schema_version {} (this xbr reads {SCHEMA_VERSION})",
                    state.schema_version
                ),
            });
        }
        Ok(Some(state))
    }
}
