//! Open vSwitch 3.1 in place of xbr on one node of an `xbr lab`, set up
//! as a node running OVS's userspace datapath with AF_XDP ports does it.
//!
//! The agent's `br0` gets the same ports and OpenFlow numbers as xbr had:
//! `vxlan0`=1 (flow-based VXLAN), `tun0`=2 (internal, the gateway address
//! and routes re-applied), the pods' host veths from 3 (`type=afxdp`). The
//! userspace datapath carries VXLAN only through a bridge that owns the
//! underlay address, so `eth0` moves into `br-phy` (`type=afxdp`) and the
//! node's address moves to the `br-phy` internal port; OVS then resolves
//! tunnel next hops itself from the kernel's routes. Everything lives in
//! the node's namespace and a private directory; dropping the guard stops
//! both daemons (by their pidfiles) and removes the directory. The lab's
//! own `lab down` removes the namespace afterwards.

use crate::ovs::{run_bounded, OvsError, CMD_TIMEOUT};
pub use crate::private_ovs::stop_pid;
use crate::private_ovs::PrivateOvs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use xbr_lab::agent_vsctl as agent;

/// What OVS needs to know of a lab node (from `lab.json`).
#[derive(Debug, Clone)]
pub struct NodeSpec {
    pub netns: String,
    /// The node's underlay address with its prefix, e.g. `10.0.0.11/24`.
    pub uplink_cidr: String,
    /// The gateway address on `tun0` with its prefix, e.g. `10.128.0.1/23`.
    pub gateway_cidr: String,
    /// Routed to `tun0` (cluster and service networks).
    pub tun0_routes: Vec<String>,
    pub mtu: u32,
    /// Pod host veths, in OpenFlow port order from 3.
    pub pod_ports: Vec<String>,
}

/// OVS running on one node; see the module documentation.
pub struct OvsNode {
    spec: NodeSpec,
    ovs: PrivateOvs,
}

impl OvsNode {
    /// Starts ovsdb-server and ovs-vswitchd in the node's namespace and
    /// builds `br-phy` and `br0`. The node's xbr must be stopped first
    /// (its `tun0` and XDP programs gone).
    pub fn start(spec: NodeSpec, dir: &Path) -> Result<OvsNode, OvsError> {
        let node = OvsNode {
            ovs: PrivateOvs::new(dir, &spec.netns)?,
            spec,
        };
        node.ovs.start_db()?;
        node.ovs.start_vswitchd(&[])?;
        node.bridges()?;
        Ok(node)
    }

    fn vsctl(&self, args: &[&str]) -> Result<String, OvsError> {
        self.ovs.vsctl(args)
    }

    fn ip(&self, args: &[&str]) -> Result<String, OvsError> {
        let mut all = vec!["ip"];
        all.extend_from_slice(args);
        self.ovs.run(&all, CMD_TIMEOUT)
    }

    fn bridges(&self) -> Result<(), OvsError> {
        let s = &self.spec;
        self.vsctl(&[
            "add-br",
            "br-phy",
            "--",
            "set",
            "bridge",
            "br-phy",
            "datapath_type=netdev",
            "--",
            "add-port",
            "br-phy",
            "eth0",
            "--",
            "set",
            "interface",
            "eth0",
            "type=afxdp",
        ])?;
        self.ip(&["addr", "flush", "dev", "eth0"])?;
        self.ip(&["addr", "add", &s.uplink_cidr, "dev", "br-phy"])?;
        self.ip(&["link", "set", "br-phy", "up"])?;
        // The agent's bridge, vxlan0 and tun0, in one transaction.
        let mut args = crate::ovs::agent_bridge_netdev();
        args.push("--".into());
        args.extend(agent::add_vxlan(4789));
        args.push("--".into());
        args.extend(agent::add_tun0(s.mtu, None));
        self.vsctl(&agent::as_strs(&args))?;
        for (i, pod) in s.pod_ports.iter().enumerate() {
            let ofport = format!("ofport_request={}", i + 3);
            self.vsctl(&[
                "add-port",
                "br0",
                pod,
                "--",
                "set",
                "interface",
                pod,
                &ofport,
                "type=afxdp",
            ])?;
        }
        // tun0 is a new tap: give it back the gateway's address and routes.
        let deadline = Instant::now() + CMD_TIMEOUT;
        while self.ip(&["link", "show", "tun0"]).is_err() {
            if Instant::now() > deadline {
                return Err(OvsError::Setup {
                    reason: "tun0 did not appear".into(),
                    log: String::new(),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.ip(&["link", "set", "tun0", "up"])?;
        self.ip(&["addr", "add", &s.gateway_cidr, "dev", "tun0"])?;
        for r in &s.tun0_routes {
            self.ip(&["route", "replace", r, "dev", "tun0"])?;
        }
        Ok(())
    }

    /// `ovs-ofctl -O OpenFlow13 args...` against this node's `br0`.
    pub fn ofctl(&self, args: &[&str]) -> Result<String, OvsError> {
        let mut c = Command::new("ovs-ofctl");
        c.args(["-O", "OpenFlow13"])
            .args(args)
            .env("OVS_RUNDIR", self.ovs.p("run"));
        Ok(run_bounded(&mut c, CMD_TIMEOUT)?.ok()?.stdout)
    }

    /// ovs-vswitchd's process id (its pidfile), if it runs.
    pub fn vswitchd_pid(&self) -> Option<u64> {
        self.ovs.vswitchd_pid().map(u64::from)
    }
}

/// Replaces every node's xbr of the `xbr lab` described by `lab` (its
/// `lab.json`) with OVS, loaded with the very same agent flows (each
/// node's `flows.bundle`); each node's OVS lives under `dir`.
pub fn replace_lab(lab: &serde_json::Value, dir: &Path) -> Result<Vec<OvsNode>, OvsError> {
    let field = |v: &serde_json::Value, key: &str| -> Result<String, OvsError> {
        v[key]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| OvsError::Lab(format!("no '{key}' in {v}")))
    };
    let underlay_prefix = field(&lab["underlay"], "cidr")?
        .split('/')
        .nth(1)
        .unwrap_or("24")
        .to_string();
    let routes = vec![
        field(lab, "cluster_network")?,
        field(lab, "service_network")?,
    ];
    let mtu = lab["mtu"].as_u64().unwrap_or(1450) as u32;
    let pods: Vec<&serde_json::Value> = lab["pods"].as_array().into_iter().flatten().collect();
    let mut nodes = Vec::new();
    for node in lab["nodes"].as_array().into_iter().flatten() {
        let name = field(node, "name")?;
        stop_pid(node["xbr_pid"].as_i64().unwrap_or(0) as i32);
        let subnet = field(node, "subnet")?;
        let subnet_prefix = subnet.split('/').nth(1).unwrap_or("23");
        let pod_ports = pods
            .iter()
            .filter(|p| p["node"].as_str() == Some(name.as_str()))
            .map(|p| field(p, "host_if"))
            .collect::<Result<Vec<_>, _>>()?;
        let spec = NodeSpec {
            netns: field(node, "netns")?,
            uplink_cidr: format!("{}/{underlay_prefix}", field(node, "uplink_ip")?),
            gateway_cidr: format!("{}/{subnet_prefix}", field(node, "gateway")?),
            tun0_routes: routes.clone(),
            mtu,
            pod_ports,
        };
        let ovs = OvsNode::start(spec, &dir.join(format!("ovs-{name}")))?;
        let flows = Path::new(&field(node, "rundir")?).join("flows.bundle");
        ovs.ofctl(&["bundle", "br0", &flows.display().to_string()])?;
        nodes.push(ovs);
    }
    Ok(nodes)
}

impl Drop for OvsNode {
    fn drop(&mut self) {
        self.ovs.stop_daemons();
        let _ = std::fs::remove_dir_all(self.ovs.dir());
    }
}
