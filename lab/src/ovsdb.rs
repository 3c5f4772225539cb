//! `xbr lab up --ovsdb`: every node runs Debian's `ovsdb-server` (its
//! database, socket, log and pid file in the node's run directory) with
//! xbr as its ovs-vswitchd (`xbr run --ovsdb`), and the lab configures
//! br0 through `ovs-vsctl` exactly as the SDN agent does (TABLES.md §1):
//! the bridge, `vxlan0`, `tun0`, then each pod's veth with its
//! `external_ids`, reading the pod's port number back with `get Interface
//! X ofport`. `down` stops the database with everything else running in
//! the node's namespace.

use super::agent_vsctl as agent;
use super::state::{LabState, Node};
use super::sys;
use super::LabError;
use std::time::Duration;

/// ovs-vsctl's own bound (`--timeout`), as the agent sets it.
const VSCTL_TIMEOUT_SECS: u64 = 30;
const SCHEMA: &str = "/usr/share/openvswitch/vswitch.ovsschema";

fn db_target(node: &Node) -> String {
    format!("unix:{}", node.rundir.join("db.sock").display())
}

/// Creates the node's database and starts its ovsdb-server.
pub fn start_db(node: &Node) -> Result<(), LabError> {
    let run = |name: &str| node.rundir.join(name).display().to_string();
    sys::run(
        "ovsdb-tool",
        &["create", &run("conf.db"), SCHEMA],
        sys_timeout(),
    )?
    .ok()?;
    let remote = format!("--remote=p{}", db_target(node));
    let unixctl = format!("--unixctl={}", run("ovsdb-server.ctl"));
    let pidfile = format!("--pidfile={}", run("ovsdb-server.pid"));
    let log = format!("--log-file={}", run("ovsdb-server.log"));
    // --detach returns once the socket is ready.
    sys::in_ns(
        &node.netns,
        "ovsdb-server",
        &[
            &run("conf.db"),
            &remote,
            &unixctl,
            &pidfile,
            &log,
            "--detach",
            "--no-chdir",
            "-vconsole:off",
        ],
    )?;
    vsctl(node, &["--no-wait", "init"])?;
    Ok(())
}

fn sys_timeout() -> Duration {
    Duration::from_secs(10)
}

/// `xbr run` arguments: the bridge comes from the database.
pub fn xbr_args(node: &Node) -> Vec<String> {
    vec![
        "run".into(),
        "--ovsdb".into(),
        db_target(node),
        "--rundir".into(),
        node.rundir.display().to_string(),
    ]
}

fn vsctl(node: &Node, args: &[&str]) -> Result<String, LabError> {
    let db = format!("--db={}", db_target(node));
    let timeout = format!("--timeout={VSCTL_TIMEOUT_SECS}");
    let mut all = vec![db.as_str(), timeout.as_str()];
    all.extend_from_slice(args);
    sys::run(
        "ovs-vsctl",
        &all,
        Duration::from_secs(VSCTL_TIMEOUT_SECS + 5),
    )?
    .ok()
}

/// The agent's `ovs-vsctl` commands for a node's bridge and pods.
pub fn configure(state: &LabState, node: &Node) -> Result<(), LabError> {
    let run = |args: Vec<String>| vsctl(node, &agent::as_strs(&args));
    vsctl(node, &["--if-exists", "del-br", agent::BRIDGE])?;
    run(agent::add_bridge())?;
    run(agent::add_vxlan(state.vxlan_port))?;
    let backend = Some(state.tun0_backend.as_str()).filter(|b| !b.is_empty());
    run(agent::add_tun0(state.mtu, backend))?;
    for pod in state.pods.iter().filter(|p| p.node == node.name) {
        run(agent::add_pod(&pod.host_if, &pod.name, &pod.ip.to_string()))?;
        let got = vsctl(node, &["get", "Interface", &pod.host_if, "ofport"])?;
        if got.trim() != pod.ofport.to_string() {
            return Err(LabError::Unexpected(format!(
                "pod {} got ofport {} from the switch; the lab planned {}",
                pod.name,
                got.trim(),
                pod.ofport
            )));
        }
    }
    Ok(())
}
