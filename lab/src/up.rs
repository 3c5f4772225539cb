//! `xbr lab up`: builds the planned lab out of network namespaces, starts
//! one xbr per node and programs it the way the node agent does.
//!
//! Order matters in two places: pods' veths exist before their node's xbr
//! starts (xbr takes its ports on the command line, there is no OVSDB to
//! add them later), and tun0 is configured after xbr created it, as the
//! agent configures it after OVS created the internal port. Any failure
//! tears down everything made so far (see `down`), and shows the tail of
//! the failing xbr's log.

use super::addr::{format_mac, Cidr};
use super::flows::{LocalPod, Mode, NodeFlows, RemoteNode, ServicePort, Variant};
use super::plan::{self, Options, UNDERLAY_BRIDGE, UNDERLAY_PREFIX_LEN, VXLAN_OVERHEAD};
use super::state::{LabState, Node, PREFIX_FILE};
use super::sys::{self, in_ns, ip};
use super::xbr_proc::{start_xbr, vxlan_port_spec, wait_for_xbr};
use super::{write_file, LabError};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `ovs-ofctl bundle` of a few hundred flows.
const OFCTL_TIMEOUT: Duration = Duration::from_secs(30);
/// The agent retries a failed transaction up to 4 attempts, backoff from 10 ms.
const OFCTL_ATTEMPTS: u32 = 4;
/// Longest path a unix socket address holds (sun_path minus the NUL).
const SUN_PATH_MAX: usize = 107;

/// Whether this build's `--port` parser knows `type=vxlan` (the real
/// tunnel port); until it does, vxlan0 is an internal port that leads
/// nowhere and cross-node traffic is honestly lost.
pub fn vxlan_supported() -> bool {
    vxlan_port_spec(std::net::Ipv4Addr::new(10, 0, 0, 11))
        .parse::<dataplane::config::PortSpec>()
        .is_ok()
}

/// The agent's flows for node `node` of the lab.
pub fn node_flows(state: &LabState, node: &Node) -> Result<NodeFlows, LabError> {
    let parse = |s: &str| -> Result<Cidr, LabError> {
        s.parse()
            .map_err(|e: super::addr::BadCidr| LabError::Unexpected(e.to_string()))
    };
    let mode: Mode = state.mode.parse().map_err(LabError::Usage)?;
    let mut remote_nodes = Vec::new();
    for other in state.nodes.iter().filter(|n| n.name != node.name) {
        remote_nodes.push(RemoteNode {
            subnet: parse(&other.subnet)?,
            node_ip: other.uplink_ip,
            cookie: other.hostsubnet_cookie,
        });
    }
    let pods: Vec<LocalPod> = state
        .pods
        .iter()
        .filter(|p| p.node == node.name)
        .map(|p| LocalPod {
            ip: p.ip,
            ofport: p.ofport,
            vnid: p.vnid,
        })
        .collect();
    let namespace_vnids = state
        .namespaces
        .iter()
        .filter(|ns| {
            state
                .pods
                .iter()
                .any(|p| p.node == node.name && p.namespace == ns.name)
        })
        .map(|ns| ns.vnid)
        .collect();
    let isolated_vnids = state
        .namespaces
        .iter()
        .filter(|ns| ns.policy.as_deref() == Some(super::flows::POLICY_SAME_NAMESPACE))
        .map(|ns| ns.vnid)
        .collect();
    let services = state
        .services
        .iter()
        .map(|svc| ServicePort {
            ip: svc.ip,
            tcp_port: svc.port,
            vnid: state
                .namespaces
                .iter()
                .find(|ns| ns.name == svc.namespace)
                .map_or(0, |ns| ns.vnid),
        })
        .collect();
    let mac = |s: &str| dataplane::config::parse_mac(s).unwrap_or_default();
    Ok(NodeFlows {
        mode,
        variant: if state.flows == Variant::Conntrack.name() {
            Variant::Conntrack
        } else {
            Variant::LegacyNonConntrack
        },
        cluster_networks: vec![parse(&state.cluster_network)?],
        service_network: parse(&state.service_network)?,
        local_subnet: parse(&node.subnet)?,
        node_ip: node.uplink_ip,
        local_mac: mac(&node.uplink_mac),
        tun_mac: mac(&node.tun0_mac),
        vxlan_port: state.vxlan_port,
        namespace_vnids,
        isolated_vnids,
        pods,
        remote_nodes,
        services,
    })
}

/// Creates the lab directory: it must not exist, or be empty.
fn make_dir(dir: &Path) -> Result<(), LabError> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(LabError::Usage(format!(
                    "--dir {}: not empty (a lab there? `xbr lab down --dir {}` first)",
                    dir.display(),
                    dir.display()
                )));
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::DirBuilder::new()
            .mode(0o700)
            .create(dir)
            .map_err(|source| LabError::Io {
                context: format!("creating {}", dir.display()),
                source,
            }),
        Err(source) => Err(LabError::Io {
            context: format!("reading {}", dir.display()),
            source,
        }),
    }
}

/// Builds the lab. On error everything created is removed again.
pub fn up(opts: &Options, seed: u64) -> Result<LabState, LabError> {
    let mut state = plan::plan(opts, seed)?;
    if state.mode == Mode::NetworkPolicy.name() && opts.variant == Variant::LegacyNonConntrack {
        return Err(LabError::Usage(
            "--mode networkpolicy --legacy: the networkpolicy plugin always used conntrack; \
             it has no pre-4.13 non-conntrack flow set"
                .into(),
        ));
    }
    let mgmt = opts.dir.join("node000").join("br0.mgmt");
    if mgmt.as_os_str().len() > SUN_PATH_MAX {
        return Err(LabError::Usage(format!(
            "--dir {}: too long for a unix socket path inside it",
            opts.dir.display()
        )));
    }
    let taken: Vec<String> = sys::list_netns()?
        .into_iter()
        .filter(|n| plan::is_lab_netns(&state.prefix, n))
        .collect();
    if !taken.is_empty() {
        return Err(LabError::Usage(format!(
            "a lab with prefix '{}' exists already (namespaces {})",
            state.prefix,
            taken.join(", ")
        )));
    }
    make_dir(&opts.dir)?;
    write_file(&opts.dir.join(PREFIX_FILE), &format!("{}\n", state.prefix))?;
    match build(&mut state) {
        Ok(()) => Ok(state),
        Err(e) => {
            eprintln!("xbr lab: up failed: {e}");
            eprintln!("xbr lab: removing what was built");
            if let Err(d) = super::down::down(&opts.dir, Some(&state.prefix)) {
                eprintln!("xbr lab: cleanup after the failure: {d}");
            }
            Err(e)
        }
    }
}

fn build(state: &mut LabState) -> Result<(), LabError> {
    let prefix_len = UNDERLAY_PREFIX_LEN.to_string();
    let ul = state.underlay.netns.clone();
    let mtu = state.mtu.to_string();
    let underlay_mtu = (state.mtu + VXLAN_OVERHEAD).to_string();
    let cn = state.cluster_network.clone();
    let legacy = state.flows == Variant::LegacyNonConntrack.name();

    // Underlay: a bridge in its own namespace; nothing in the caller's.
    new_netns(&ul)?;
    ip(&["-n", &ul, "link", "add", UNDERLAY_BRIDGE, "type", "bridge"])?;
    ip(&["-n", &ul, "link", "set", UNDERLAY_BRIDGE, "up"])?;

    // The external host.
    let ext = state.external.netns.clone();
    new_netns(&ext)?;
    uplink(&ul, "ext", &ext, &underlay_mtu)?;
    let ext_addr = format!("{}/{prefix_len}", state.external.ip);
    ip(&["-n", &ext, "addr", "add", &ext_addr, "dev", "eth0"])?;
    ip(&["-n", &ext, "link", "set", "eth0", "up"])?;

    for node in &mut state.nodes {
        let ns = node.netns.clone();
        new_netns(&ns)?;
        in_ns(&ns, "sysctl", &["-qw", "net.ipv4.ip_forward=1"])?;
        uplink(&ul, &node.name, &ns, &underlay_mtu)?;
        if state.xdp_redirect {
            // The XDP flow cache encapsulates into eth0: its peer must
            // accept redirected frames (GRO on, as for pods).
            in_ns(&ul, "ethtool", &["-K", &node.name, "gro", "on"])?;
        }
        let addr = format!("{}/{prefix_len}", node.uplink_ip);
        ip(&["-n", &ns, "addr", "add", &addr, "dev", "eth0"])?;
        ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
        node.uplink_mac = format_mac(sys::link_mac(&ns, "eth0")?);
        masquerade(&ns, &cn, legacy)?;
    }

    for pod in &state.pods {
        let node = state
            .node(&pod.node)
            .ok_or_else(|| LabError::Unexpected(format!("pod {} has no node", pod.name)))?;
        let pn = &pod.netns;
        new_netns(pn)?;
        // CNI: a veth pair with the overlay MTU on both ends; the pod end
        // is eth0 with the 0a:58 MAC, the host end stays in the node.
        ip(&[
            "-n",
            &node.netns,
            "link",
            "add",
            &pod.host_if,
            "mtu",
            &mtu,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            pn,
            "address",
            &pod.mac,
            "mtu",
            &mtu,
        ])?;
        ip(&["-n", &node.netns, "link", "set", &pod.host_if, "up"])?;
        let subnet: Cidr = node
            .subnet
            .parse()
            .map_err(|e: super::addr::BadCidr| LabError::Unexpected(e.to_string()))?;
        let addr = format!("{}/{}", pod.ip, subnet.prefix_len());
        ip(&["-n", pn, "addr", "add", &addr, "dev", "eth0"])?;
        ip(&["-n", pn, "link", "set", "eth0", "up"])?;
        // The routes of the agent's IPAM config: default via the gateway,
        // the cluster network and multicast on-link.
        let gw = node.gateway.to_string();
        ip(&["-n", pn, "route", "add", "default", "via", &gw])?;
        ip(&["-n", pn, "route", "add", &cn, "dev", "eth0"])?;
        ip(&["-n", pn, "route", "add", "224.0.0.0/4", "dev", "eth0"])?;
        // Pods keep the kernel's default offloads, as with the agent's CNI
        // plugin: xbr completes checksums left to offload (xbr_packet::csum).
        if state.xdp_redirect {
            // A veth accepts XDP-redirected frames only with GRO (or an
            // XDP program) on its peer.
            in_ns(pn, "ethtool", &["-K", "eth0", "gro", "on"])?;
        }
    }

    // Start every node's xbr, then wait for all of them: the start-ups
    // overlap instead of adding up.
    for i in 0..state.nodes.len() {
        let pid = start_xbr(state, i)?;
        if let Some(node) = state.nodes.get_mut(i) {
            node.xbr_pid = pid;
        }
    }
    for node in &state.nodes {
        if state.ovsdb {
            // The bridge (and its socket) exists once the agent's
            // ovs-vsctl commands returned.
            super::ovsdb::configure(state, node)?;
        }
        wait_for_xbr(node)?;
    }

    for i in 0..state.nodes.len() {
        let Some(node) = state.nodes.get(i) else {
            continue;
        };
        let ns = node.netns.clone();
        setup_tun0(node, &cn, &state.service_network, &mtu)?;
        let tun_mac = format_mac(sys::link_mac(&ns, "tun0")?);
        if let Some(n) = state.nodes.get_mut(i) {
            n.tun0_mac = tun_mac;
        }
    }
    for node in &state.nodes {
        program(state, node)?;
    }
    super::service::install(state)?;
    state.write(&state.dir.clone())?;
    Ok(())
}

fn new_netns(name: &str) -> Result<(), LabError> {
    ip(&["netns", "add", name])?;
    ip(&["-n", name, "link", "set", "lo", "up"])?;
    // IPv6 autoconfiguration would only add noise to captures.
    in_ns(
        name,
        "sysctl",
        &[
            "-qw",
            "net.ipv6.conf.all.disable_ipv6=1",
            "net.ipv6.conf.default.disable_ipv6=1",
        ],
    )?;
    Ok(())
}

/// A veth from the underlay bridge (port `name`) to `eth0` in `ns`, both
/// ends with the underlay's `mtu` (the bridge takes its ports' least).
fn uplink(ul: &str, name: &str, ns: &str, mtu: &str) -> Result<(), LabError> {
    ip(&[
        "-n", ul, "link", "add", name, "mtu", mtu, "type", "veth", "peer", "name", "eth0", "mtu",
        mtu, "netns", ns,
    ])?;
    ip(&[
        "-n",
        ul,
        "link",
        "set",
        name,
        "master",
        UNDERLAY_BRIDGE,
        "up",
    ])?;
    Ok(())
}

/// The agent's egress NAT: POSTROUTING jumps to OPENSHIFT-MASQUERADE,
/// which masquerades everything sourced from the cluster network (traffic
/// between pods never reaches the host's POSTROUTING: it stays in br0).
/// The node's OPENSHIFT-MASQUERADE rules. `legacy`: before 4.13 every
/// pod's traffic leaving through the host was masqueraded, Service
/// traffic too, so that backends' replies came back through the host (the
/// flows had no `ct(nat)` to undo kube-proxy's DNAT).
fn masquerade(ns: &str, cluster_network: &str, legacy: bool) -> Result<(), LabError> {
    let ipt = |args: &[&str]| -> Result<String, LabError> {
        let mut full = vec!["-w", "5", "-t", "nat"];
        full.extend_from_slice(args);
        in_ns(ns, "iptables", &full)
    };
    ipt(&["-N", "OPENSHIFT-MASQUERADE"])?;
    ipt(&[
        "-A",
        "POSTROUTING",
        "-m",
        "comment",
        "--comment",
        "rules for masquerading OpenShift traffic",
        "-j",
        "OPENSHIFT-MASQUERADE",
    ])?;
    if legacy {
        ipt(&[
            "-A",
            "OPENSHIFT-MASQUERADE",
            "-s",
            cluster_network,
            "-m",
            "comment",
            "--comment",
            "masquerade pod-to-service and pod-to-external traffic",
            "-j",
            "MASQUERADE",
        ])?;
        return Ok(());
    }
    // As the agent has it: pods' traffic to the outside is masqueraded,
    // their traffic to pods (also through a Service) keeps its source, so
    // a backend's reply goes straight back through br0 to the client.
    ipt(&["-N", "OPENSHIFT-MASQUERADE-2"])?;
    ipt(&[
        "-A",
        "OPENSHIFT-MASQUERADE",
        "-s",
        cluster_network,
        "-m",
        "comment",
        "--comment",
        "masquerade pod-to-service and pod-to-external traffic",
        "-j",
        "OPENSHIFT-MASQUERADE-2",
    ])?;
    ipt(&[
        "-A",
        "OPENSHIFT-MASQUERADE-2",
        "-d",
        cluster_network,
        "-m",
        "comment",
        "--comment",
        "masquerade pod-to-external traffic",
        "-j",
        "RETURN",
    ])?;
    ipt(&["-A", "OPENSHIFT-MASQUERADE-2", "-j", "MASQUERADE"])?;
    Ok(())
}

/// What the agent does to tun0 after OVS created it (`setup()`): gateway
/// address, MTU, up, the cluster network and the service network routed to
/// it, and the kernel's local-subnet route removed (the cluster route
/// covers it).
fn setup_tun0(
    node: &Node,
    cluster_network: &str,
    service_network: &str,
    mtu: &str,
) -> Result<(), LabError> {
    let ns = node.netns.as_str();
    let subnet: Cidr = node
        .subnet
        .parse()
        .map_err(|e: super::addr::BadCidr| LabError::Unexpected(e.to_string()))?;
    let gw = format!("{}/{}", node.gateway, subnet.prefix_len());
    ip(&["-n", ns, "addr", "add", &gw, "dev", "tun0"])?;
    ip(&["-n", ns, "link", "set", "tun0", "mtu", mtu])?;
    ip(&["-n", ns, "link", "set", "tun0", "up"])?;
    ip(&[
        "-n",
        ns,
        "route",
        "add",
        cluster_network,
        "dev",
        "tun0",
        "scope",
        "link",
    ])?;
    ip(&["-n", ns, "route", "add", service_network, "dev", "tun0"])?;
    let ls = subnet.to_string();
    ip(&[
        "-n", ns, "route", "del", &ls, "dev", "tun0", "proto", "kernel",
    ])?;
    Ok(())
}

fn ofctl(node: &Node, args: &[&str]) -> Result<String, LabError> {
    let rundir = node.rundir.display().to_string();
    let mut full = vec!["-O", "OpenFlow13"];
    full.extend_from_slice(args);
    let mut backoff = Duration::from_millis(10);
    let mut attempt = 1;
    loop {
        let out = sys::run_env(
            "ovs-ofctl",
            &full,
            &[("OVS_RUNDIR", rundir.as_str())],
            OFCTL_TIMEOUT,
        )?;
        if out.success() || attempt >= OFCTL_ATTEMPTS {
            return out.ok();
        }
        std::thread::sleep(backoff);
        backoff *= 2;
        attempt += 1;
    }
}

/// Programs a node's xbr like the agent: `set-frags br0 nx-match`, then one
/// `bundle` with all flows (the file stays in the run directory).
fn program(state: &LabState, node: &Node) -> Result<(), LabError> {
    let bundle = node_flows(state, node)?.bundle()?;
    let path: PathBuf = node.rundir.join("flows.bundle");
    write_file(&path, &bundle)?;
    ofctl(node, &["set-frags", "br0", "nx-match"])?;
    let p = path.display().to_string();
    ofctl(node, &["bundle", "br0", &p])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xbr_proc::xbr_args;

    fn lab(mode: Mode, vxlan: bool) -> LabState {
        let opts = Options {
            prefix: "t".into(),
            dir: "/tmp/t".into(),
            vxlan,
            ..crate::plan::test_options(mode, 3, 2, 2)
        };
        plan::plan(&opts, 11).unwrap()
    }

    #[test]
    fn each_node_gets_its_pods_and_the_other_nodes() {
        let s = lab(Mode::Multitenant, false);
        let node2 = &s.nodes[1];
        let f = node_flows(&s, node2).unwrap();
        assert_eq!(f.local_subnet.to_string(), "10.128.2.0/23");
        assert_eq!(f.node_ip, node2.uplink_ip);
        let ips: Vec<String> = f.pods.iter().map(|p| p.ip.to_string()).collect();
        assert_eq!(ips, ["10.128.2.2", "10.128.2.3"]);
        let remote: Vec<String> = f
            .remote_nodes
            .iter()
            .map(|r| r.subnet.to_string())
            .collect();
        assert_eq!(remote, ["10.128.0.0/23", "10.128.4.0/23"]);
        assert_eq!(f.remote_nodes[0].cookie, s.nodes[0].hostsubnet_cookie);
        assert_eq!(f.namespace_vnids, [0, s.namespaces[1].vnid]);
        let flows = f.generate().unwrap();
        assert!(flows.iter().all(|l| !l.contains("ct(")));
        assert!(flows.contains(&format!(
            "table=90, priority=100, cookie=0x{:08x}, ip, nw_dst=10.128.4.0/23, actions=move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31],set_field:10.0.0.13->tun_dst,output:1",
            s.nodes[2].hostsubnet_cookie
        )));
    }

    #[test]
    fn ports_follow_the_agent_numbering() {
        let s = lab(Mode::Subnet, false);
        let args = xbr_args(&s, &s.nodes[0]);
        let ports: Vec<&str> = args
            .windows(2)
            .filter(|w| w[0] == "--port")
            .map(|w| w[1].as_str())
            .collect();
        assert_eq!(
            ports,
            [
                "vxlan0=1,type=internal",
                "tun0=2,type=internal,mtu_request=1450",
                "veth0a800002=3",
                "veth0a800003=4",
            ]
        );
        for p in &ports {
            assert!(p.parse::<dataplane::config::PortSpec>().is_ok(), "{p}");
        }
        let s = lab(Mode::Subnet, true);
        let args = xbr_args(&s, &s.nodes[1]);
        assert!(args.contains(
            &"vxlan0=1,type=vxlan,dst_port=4789,local_ip=10.0.0.12,uplink=eth0".to_string()
        ));
    }

    #[test]
    fn the_conntrack_variant_is_what_lab_json_names() {
        let mut s = lab(Mode::NetworkPolicy, false);
        s.flows = Variant::Conntrack.name().to_string();
        let f = node_flows(&s, &s.nodes[0]).unwrap();
        assert_eq!(f.variant, Variant::Conntrack);
        let flows = f.generate().unwrap();
        assert!(flows
            .iter()
            .any(|l| l == "table=0, priority=1000, ip, ct_state=-trk, actions=ct(table=0)"));
        assert!(flows
            .iter()
            .any(|l| l.ends_with("actions=ct(commit,table=31)")));
    }

    #[test]
    fn an_isolated_namespace_gets_its_ingress_rules_and_no_default() {
        let mut s = lab(Mode::NetworkPolicy, false);
        s.flows = Variant::Conntrack.name().to_string();
        let v = s.namespaces[1].vnid;
        s.namespaces[1].policy = Some(crate::flows::POLICY_SAME_NAMESPACE.into());
        let flows = node_flows(&s, &s.nodes[0]).unwrap().generate().unwrap();
        let t80: Vec<&String> = flows
            .iter()
            .filter(|l| l.starts_with(&format!("table=80, priority=150, reg1={v},")))
            .collect();
        assert_eq!(
            t80,
            [
                &format!("table=80, priority=150, reg1={v}, reg0=0,  actions=output:NXM_NX_REG2[]"),
                &format!(
                    "table=80, priority=150, reg1={v}, reg0={v},  actions=output:NXM_NX_REG2[]"
                ),
            ]
        );
        assert!(!flows.contains(&format!(
            "table=80, priority=50, reg1={v}, actions=output:NXM_NX_REG2[]"
        )));
        assert!(flows.contains(&format!(
            "table=27, priority=50, reg0={v}, actions=goto_table:30"
        )));
    }
}
