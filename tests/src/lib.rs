//! Harness for xbr's end-to-end tests.
//!
//! The tests drive the real `xbr` binary with the real `ovs-ofctl`, and send
//! real packets between network namespaces. Everything a test creates is
//! owned by a guard that removes it in `Drop`, so a failing (panicking) test
//! leaves nothing behind:
//!
//! * [`Netns`]: a network namespace named `xbrt-<tag>`;
//! * [`VethPair`]: a veth pair, host side `xbrt<tag>` in the root namespace,
//!   peer inside a [`Netns`];
//! * [`Pod`]: a namespace plus veth configured like an OpenShift pod;
//! * [`Xbr`]: a running `xbr run` with a private run directory;
//! * [`Background`]: any process started in the background (killed on drop).
//!
//! Every external command runs with a timeout, and every traffic helper
//! bounds its packet count, so a broken switch makes a test fail, not hang.
//!
//! The tests need root. They fail (never skip) without it, with a message
//! saying so. Leftovers of a killed run are all named `xbrt*`; the scripts
//! in `scripts/` delete them before a new run.

#![forbid(unsafe_code)]

mod cmd;
mod conversation;
mod error;
mod netns;
pub mod openflow;
pub mod ovsdb;
pub mod played_controller;
mod tcp;
mod tool;
mod vxlan_sender;
mod xbr;
pub mod xbr_stats;

pub use cmd::{run_timeout, Background, CmdOutput};
pub use conversation::Conversation;
pub use error::HarnessError;
pub use netns::{
    link_exists, link_has_xdp, unique_tag, InNetns, Netns, PeerConfig, Pod, VethPair, NAME_PREFIX,
    POD_IF,
};
pub use tcp::{greeting, greeting_server, tcp_transfer, tcp_transfer_ns, tcp_transfer_via};
pub use tool::{udp_send, udp_send_flows, udp_send_from, udp_send_sized, UdpReceiver};
pub use vxlan_sender::{send_vxlan, InnerFrame, VXLAN_INNER_PORT};
pub use xbr::{
    flow_n_packets, start_xdp_pair, start_xdp_pair_with, strip_ansi, without_durations,
    xdp_cache_count, xdp_cache_counts, xdp_cache_hits, xdp_pods, Counters, RunDir, Xbr, BRIDGE,
};

use std::time::Duration;

/// The two pods of the two-pod tests: A (port 1) and B (port 2), with the
/// agent's `0a:58:` + IPv4 MACs.
pub const POD_A_IP: std::net::Ipv4Addr = std::net::Ipv4Addr::new(10, 128, 0, 2);
pub const POD_B_IP: std::net::Ipv4Addr = std::net::Ipv4Addr::new(10, 128, 0, 3);
pub const POD_A_MAC: &str = "0a:58:0a:80:00:02";
pub const POD_B_MAC: &str = "0a:58:0a:80:00:03";

/// The agent's table 0/30/31/80 conntrack flows for two pods, A
/// (10.128.0.2, port 1) and B (10.128.0.3, port 2), with a policy that
/// lets A start connections to B, lets replies pass and drops the rest:
/// A's packets take three passes (`ct(table=0)`, `ct(commit,table=31)`,
/// the output), B's replies two.
pub const AGENT_CT_FLOWS: &[&str] = &[
    "table=0, priority=1000, ip, ct_state=-trk, actions=ct(table=0)",
    "table=0, priority=900, ip, ct_state=+trk+inv, actions=drop",
    "table=0, priority=100, ip, actions=goto_table:30",
    "table=30, priority=100, ip, ct_state=-rpl, actions=ct(commit,table=31)",
    "table=30, priority=0, actions=goto_table:31",
    "table=31, priority=100, ip, nw_dst=10.128.0.2, actions=load:1->NXM_NX_REG2[],goto_table:80",
    "table=31, priority=100, ip, nw_dst=10.128.0.3, actions=load:2->NXM_NX_REG2[],goto_table:80",
    "table=80, priority=200, ip, ct_state=+rpl, actions=output:NXM_NX_REG2[]",
    "table=80, priority=150, ip, nw_src=10.128.0.2, nw_dst=10.128.0.3, actions=output:NXM_NX_REG2[]",
    "table=80, priority=0, actions=drop",
];

/// A TCP port on 127.0.0.1 that is free now, for a switch to listen on
/// (`ptcp:PORT`): bound and released, so another process may take it in
/// between, which the tests' short runs make unlikely.
pub fn free_local_port() -> Result<u16> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|source| HarnessError::Io {
            context: "finding a free TCP port".into(),
            source,
        })
}

/// Timeout for quick configuration commands (`ip`, `ethtool`, `ovs-ofctl`).
pub const CMD_TIMEOUT: Duration = Duration::from_secs(10);

/// Result type of the harness and of the tests that use it.
pub type Result<T> = std::result::Result<T, HarnessError>;

/// The agent's reference directory (`gen_flows.py`, `validation/`,
/// `pcap/`): `$XBR_SDN_DIR`, else `shared/sdn` beside the repository, else
/// `/work/shared/sdn` (where the development machines and CI have it).
/// The CPUs the thread of process `pid` named `name` may run on
/// (`Cpus_allowed_list`, e.g. `1`); `None` if no such thread.
pub fn thread_cpus(pid: u32, name: &str) -> Option<String> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    for task in tasks.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim() == name {
            let status = std::fs::read_to_string(task.path().join("status")).ok()?;
            return status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .map(|c| c.trim().to_string());
        }
    }
    None
}

pub fn sdn_dir() -> std::path::PathBuf {
    if let Some(dir) = std::env::var_os("XBR_SDN_DIR") {
        return dir.into();
    }
    let beside = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/sdn");
    if beside.is_dir() {
        beside
    } else {
        "/work/shared/sdn".into()
    }
}

/// Fails with [`HarnessError::NotRoot`] unless the effective uid is 0.
///
/// Namespaces, veths and XDP need CAP_SYS_ADMIN and CAP_NET_ADMIN; checking
/// the uid up front turns a pile of confusing `ip` errors into one clear
/// message.
pub fn require_root() -> Result<()> {
    if nix::unistd::geteuid().is_root() {
        Ok(())
    } else {
        Err(HarnessError::NotRoot)
    }
}

/// Fails with [`HarnessError::MissingTool`] if `tool` is not in `PATH`.
pub fn require_tool(tool: &str) -> Result<()> {
    let found = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|dir| dir.join(tool).is_file()))
        .unwrap_or(false);
    if found {
        return Ok(());
    }
    let package = match tool {
        "ovs-ofctl" | "ovs-pki" => "openvswitch-common",
        "ovs-testcontroller" => "openvswitch-testcontroller",
        "ip" => "iproute2",
        "ping" => "iputils-ping",
        "promtool" => "prometheus",
        other => other,
    };
    Err(HarnessError::MissingTool {
        tool: tool.to_string(),
        package: package.to_string(),
    })
}
