//! One lab node's xbr process: its command line, starting it inside the
//! node's namespace, waiting for its management socket, and reading its
//! log when it fails.

use super::plan::VXLAN_PORT;
use super::state::{LabState, Node};
use super::write_file;
use super::LabError;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt};
use std::path::Path;
use std::time::{Duration, Instant};

/// Bound on an xbr's start-up (BPF load, XDP attach, AF_XDP sockets) on a
/// small shared machine.
const XBR_START_TIMEOUT: Duration = Duration::from_secs(30);

pub(super) fn xbr_args(state: &LabState, node: &Node) -> Vec<String> {
    let mut args = vec![
        "run".to_string(),
        "--bridge".into(),
        "br0".into(),
        "--rundir".into(),
        node.rundir.display().to_string(),
        "--pmd-threads".into(),
        state.pmd_threads.to_string(),
    ];
    let vxlan0 = if state.vxlan && state.xdp_redirect {
        // The underlay's end of the uplink has GRO on (see `build`).
        format!("{},xdp_redirect=on", vxlan_port_spec(node.uplink_ip))
    } else if state.vxlan {
        vxlan_port_spec(node.uplink_ip)
    } else {
        // Holds ofport 1 so the agent's flows (output:1) stay valid.
        "vxlan0=1,type=internal".to_string()
    };
    for port in [
        vxlan0,
        if state.tun0_backend.is_empty() {
            format!("tun0=2,type=internal,mtu_request={}", state.mtu)
        } else {
            format!(
                "tun0=2,type=internal,mtu_request={},internal_backend={}",
                state.mtu, state.tun0_backend
            )
        },
    ] {
        args.push("--port".into());
        args.push(port);
    }
    for pod in state.pods.iter().filter(|p| p.node == node.name) {
        args.push("--port".into());
        let redirect = if state.xdp_redirect {
            ",xdp_redirect=on"
        } else {
            ""
        };
        args.push(format!("{}={}{redirect}", pod.host_if, pod.ofport));
    }
    args
}

/// Starts `ip netns exec NODE xbr run ...` detached (own process group,
/// output to the log in its run directory) and records its pid. `ip netns
/// exec` execs xbr, so the pid is xbr's.
pub(super) fn start_xbr(state: &LabState, i: usize) -> Result<u32, LabError> {
    let node = state
        .nodes
        .get(i)
        .ok_or_else(|| LabError::Unexpected(format!("node index {i}")))?;
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&node.rundir)
        .map_err(|source| LabError::Io {
            context: format!("creating {}", node.rundir.display()),
            source,
        })?;
    let exe = std::env::current_exe().map_err(|source| LabError::Io {
        context: "locating the xbr binary".into(),
        source,
    })?;
    let mut args = if state.ovsdb {
        super::ovsdb::start_db(node)?;
        let mut args = super::ovsdb::xbr_args(node);
        args.extend(["--pmd-threads".into(), state.pmd_threads.to_string()]);
        args
    } else {
        xbr_args(state, node)
    };
    if !state.xdp_peer_gro {
        args.extend(["--xdp-peer-gro".into(), "off".into()]);
    }
    let log = node.rundir.join("xbr.log");
    let pid = if state.least_privilege {
        let mut wrapped = capsh_keeping_documented()?;
        wrapped.push(exe.display().to_string());
        wrapped.extend(args);
        super::sys::spawn_detached(&node.netns, Path::new("capsh"), &wrapped, &log)?
    } else {
        super::sys::spawn_detached(&node.netns, &exe, &args, &log)?
    };
    write_file(&node.rundir.join("xbr.pid"), &format!("{pid}\n"))?;
    Ok(pid)
}

/// capsh's arguments (before the program and its own) that remove from
/// the bounding set every capability `xbr run` does not document
/// (`privs::NEEDED`, `privs::OPTIONAL`) and then exec the program: its pid
/// stays the one `ip netns exec` started.
fn capsh_keeping_documented() -> Result<Vec<String>, LabError> {
    let documented: Vec<caps::Capability> = dataplane::privs::NEEDED
        .iter()
        .chain(dataplane::privs::OPTIONAL)
        .map(|(c, _)| *c)
        .collect();
    let bounding = caps::read(None, caps::CapSet::Bounding)
        .map_err(|e| LabError::Unexpected(format!("reading the bounding set: {e}")))?;
    let mut drop: Vec<String> = bounding
        .into_iter()
        .filter(|c| !documented.contains(c))
        .map(|c| c.to_string().to_lowercase())
        .collect();
    drop.sort();
    Ok(vec![
        format!("--drop={}", drop.join(",")),
        "--".into(),
        "-c".into(),
        "exec \"$0\" \"$@\"".into(),
    ])
}

fn is_socket(path: &Path) -> bool {
    std::fs::symlink_metadata(path)
        .map(|m| m.file_type().is_socket())
        .unwrap_or(false)
}

pub fn process_alive(pid: u32) -> bool {
    // A zombie (exited, not yet reaped) counts as dead.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit_once(") ")
                .is_some_and(|(_, rest)| !rest.starts_with('Z'))
        })
        .unwrap_or(false)
}

pub fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

pub(super) fn wait_for_xbr(node: &Node) -> Result<(), LabError> {
    let mgmt = node.rundir.join("br0.mgmt");
    let log = node.rundir.join("xbr.log");
    let deadline = Instant::now() + XBR_START_TIMEOUT;
    loop {
        if is_socket(&mgmt) {
            return Ok(());
        }
        if !process_alive(node.xbr_pid) {
            return Err(LabError::Xbr {
                node: node.name.clone(),
                reason: "exited during start-up".into(),
                log: log_tail(&log, 20),
            });
        }
        if Instant::now() >= deadline {
            return Err(LabError::Xbr {
                node: node.name.clone(),
                reason: format!("no {} after {:?}", mgmt.display(), XBR_START_TIMEOUT),
                log: log_tail(&log, 20),
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The `--port` of the agent's flow-based `vxlan0` over the node's `eth0`.
pub(super) fn vxlan_port_spec(local_ip: std::net::Ipv4Addr) -> String {
    format!("vxlan0=1,type=vxlan,dst_port={VXLAN_PORT},local_ip={local_ip},uplink=eth0")
}
