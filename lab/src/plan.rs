//! Turning `xbr lab up` options into a concrete lab: names, addresses,
//! VNIDs, ofports. Pure (randomness comes in as a seed), so it is unit
//! tested without root.
//!
//! Layout, following the agent's defaults: cluster network 10.128.0.0/14,
//! node `k` (from 1) owns HostSubnet `k-1` of length /23 (10.128.0.0/23,
//! 10.128.2.0/23, ...), with the gateway (tun0) on its first address and
//! pods from the second on (host-local IPAM). Underlay 10.0.0.0/24: node `k`
//! at 10.0.0.(10+k), the external host at 10.0.0.2. Pod `j` of a node is in
//! namespace `j mod M`; namespace 0 is `default` (VNID 0), the others get
//! distinct random VNIDs in [10, 2^24-1] in multitenant and networkpolicy
//! mode, as the master assigns them, and 0 in subnet mode.

use super::addr::{format_mac, pod_mac, Cidr};
use super::flows::Mode;
use super::state::{External, LabState, Namespace, Node, Pod, Underlay, SCHEMA_VERSION};
use super::LabError;
use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

pub const CLUSTER_NETWORK: &str = "10.128.0.0/14";
pub const SERVICE_NETWORK: &str = "172.30.0.0/16";
pub const HOST_SUBNET_LEN: u8 = 23;
pub const UNDERLAY_CIDR: &str = "10.0.0.0/24";
pub const UNDERLAY_PREFIX_LEN: u8 = 24;
pub const EXTERNAL_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
/// The underlay's MTU unless `--underlay-mtu` says otherwise.
pub const UNDERLAY_MTU: u32 = 1500;
/// The underlay MTUs `--underlay-mtu` takes: IPv4's least for the pods
/// (576) plus VXLAN's, up to the largest jumbo frame NICs take.
pub const UNDERLAY_MTU_RANGE: std::ops::RangeInclusive<u32> = 626..=9216;
/// VXLAN's 50 bytes of outer headers, as the agent subtracts them.
pub const VXLAN_OVERHEAD: u32 = 50;
pub const VXLAN_PORT: u16 = 4789;
pub const UNDERLAY_BRIDGE: &str = "br-underlay";
pub const MAX_NODES: u32 = 200;
/// Keeps ofports, veth names and the check's pair count reasonable.
pub const MAX_PODS_PER_NODE: u32 = 250;
pub const MAX_NAMESPACES: u32 = 64;
const MIN_VNID: u32 = 10;
const MAX_VNID: u32 = (1 << 24) - 1;
/// `--prefix`: short enough for the longest netns name to stay readable.
const MAX_PREFIX: usize = 32;

#[derive(Clone, Debug)]
pub struct Options {
    pub mode: Mode,
    pub nodes: u32,
    pub pods_per_node: u32,
    pub namespaces: u32,
    pub prefix: String,
    pub dir: PathBuf,
    pub vxlan: bool,
    /// The agent flow set: the current conntrack one, or the pre-4.13
    /// non-conntrack one (`--legacy`).
    pub variant: super::flows::Variant,
    /// Configure each node through its own ovsdb-server.
    pub ovsdb: bool,
    /// Pods and the underlay's end of each uplink turn GRO on, and the
    /// pods' ports and vxlan0 are `xdp_redirect=on`, so xbr's XDP flow
    /// cache forwards between pods, local and across nodes, in the kernel.
    pub xdp_redirect: bool,
    /// Each node's xbr turns GRO on in pods whose ports it cannot redirect
    /// to (`xbr run --xdp-peer-gro`; on by default, as in xbr).
    pub xdp_peer_gro: bool,
    /// Each node's xbr starts under `capsh` with a bounding set of only
    /// the capabilities `xbr run` documents (privs::NEEDED and OPTIONAL).
    pub least_privilege: bool,
    /// Packet threads of each node's xbr.
    pub pmd_threads: u32,
    /// tun0's `internal_backend` ("tap" or "veth"); empty: xbr's default.
    pub tun0_backend: String,
    /// MTU of the underlay (node uplinks, the external host); tun0 and
    /// the pods get 50 bytes less, as the agent sets them.
    pub underlay_mtu: u32,
}

/// splitmix64: a tiny, well-mixed generator; cryptographic strength is not
/// needed for VNIDs and cookies, only distinctness and spread.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform enough in `lo..=hi` for our purposes (modulo bias < 2^-40).
    fn range(&mut self, lo: u32, hi: u32) -> u32 {
        let span = u64::from(hi - lo) + 1;
        lo + u32::try_from(self.next_u64() % span).unwrap_or(0)
    }
}

/// Checks a user-given lab name prefix.
pub fn check_prefix(prefix: &str) -> Result<(), LabError> {
    let ok = !prefix.is_empty()
        && prefix.len() <= MAX_PREFIX
        && prefix.starts_with(|c: char| c.is_ascii_lowercase())
        && prefix
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        Ok(())
    } else {
        Err(LabError::Usage(format!(
            "--prefix '{prefix}': use 1-{MAX_PREFIX} characters a-z, 0-9, '-', starting with a letter"
        )))
    }
}

pub fn node_netns(prefix: &str, k: u32) -> String {
    format!("{prefix}-n{k}")
}

/// Whether `name` is one of the namespaces a lab with `prefix` creates:
/// `P-ul`, `P-ext`, `P-nK`, `P-nK-pJ`. Exact shapes, so that a lab named
/// `a` never claims the namespaces of a lab named `a-n1`.
pub fn is_lab_netns(prefix: &str, name: &str) -> bool {
    let Some(rest) = name.strip_prefix(prefix).and_then(|r| r.strip_prefix('-')) else {
        return false;
    };
    let number = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
    if rest == "ul" || rest == "ext" {
        return true;
    }
    let Some(node) = rest.strip_prefix('n') else {
        return false;
    };
    match node.split_once("-p") {
        Some((k, j)) => number(k) && number(j),
        None => number(node),
    }
}

fn ofport_of(j: u32) -> u32 {
    3 + j
}

/// The lab as `up` will build it (pids and MACs still 0/empty).
pub fn plan(opts: &Options, seed: u64) -> Result<LabState, LabError> {
    check_prefix(&opts.prefix)?;
    if !(1..=MAX_NODES).contains(&opts.nodes) {
        return Err(LabError::Usage(format!(
            "--nodes {}: must be 1-{MAX_NODES}",
            opts.nodes
        )));
    }
    if opts.pods_per_node > MAX_PODS_PER_NODE {
        return Err(LabError::Usage(format!(
            "--pods-per-node {}: at most {MAX_PODS_PER_NODE}",
            opts.pods_per_node
        )));
    }
    if !(1..=MAX_NAMESPACES).contains(&opts.namespaces) {
        return Err(LabError::Usage(format!(
            "--namespaces {}: must be 1-{MAX_NAMESPACES}",
            opts.namespaces
        )));
    }
    let mut rng = Rng::new(seed);
    let prefix = opts.prefix.as_str();

    let mut used = HashSet::new();
    let namespaces: Vec<Namespace> = (0..opts.namespaces)
        .map(|i| {
            let vnid = if i == 0 || opts.mode == Mode::Subnet {
                0
            } else {
                loop {
                    let v = rng.range(MIN_VNID, MAX_VNID);
                    if used.insert(v) {
                        break v;
                    }
                }
            };
            let name = if i == 0 {
                "default".to_string()
            } else {
                format!("ns{i}")
            };
            // In networkpolicy mode the last namespace (never `default`)
            // is isolated, so the lab has denied pairs and replies that
            // must pass where the reverse direction is denied.
            let policy = (opts.mode == Mode::NetworkPolicy && i > 0 && i + 1 == opts.namespaces)
                .then(|| super::flows::POLICY_SAME_NAMESPACE.to_string());
            Namespace { name, vnid, policy }
        })
        .collect();

    let cluster: Cidr = CLUSTER_NETWORK
        .parse()
        .map_err(|e: super::addr::BadCidr| LabError::Unexpected(e.to_string()))?;
    let mut cookies = HashSet::new();
    let mut nodes = Vec::new();
    let mut pods = Vec::new();
    for k in 1..=opts.nodes {
        let subnet = cluster
            .subnet(HOST_SUBNET_LEN, k - 1)
            .ok_or_else(|| LabError::Usage(format!("no /23 left for node {k}")))?;
        let gateway = subnet
            .nth(1)
            .ok_or_else(|| LabError::Unexpected(format!("{subnet} has no gateway")))?;
        let uplink_ip = Ipv4Addr::new(10, 0, 0, u8::try_from(10 + k).unwrap_or(u8::MAX));
        let cookie = loop {
            let c = u32::try_from(rng.next_u64() >> 32).unwrap_or(1);
            if c != 0 && cookies.insert(c) {
                break c;
            }
        };
        let name = format!("node{k}");
        let rundir = opts.dir.join(&name);
        for j in 0..opts.pods_per_node {
            let ip = subnet
                .nth(2 + j)
                .ok_or_else(|| LabError::Usage(format!("no address left in {subnet}")))?;
            let ns = namespaces
                .get(usize::try_from(j % opts.namespaces).unwrap_or(0))
                .ok_or_else(|| LabError::Unexpected("namespace index".into()))?;
            pods.push(Pod {
                name: format!("{name}-pod{}", j + 1),
                netns: format!("{prefix}-n{k}-p{}", j + 1),
                ip,
                mac: format_mac(pod_mac(ip)),
                node: name.clone(),
                namespace: ns.name.clone(),
                vnid: ns.vnid,
                ofport: ofport_of(j),
                // The agent's host veths are `vethXXXXXXXX`; hex of the
                // pod IP keeps them unique and recognisable.
                host_if: format!("veth{:08x}", u32::from(ip)),
            });
        }
        nodes.push(Node {
            netns: node_netns(prefix, k),
            name,
            uplink_ip,
            subnet: subnet.to_string(),
            gateway,
            xbr_pid: 0,
            rundir,
            hostsubnet_cookie: cookie,
            uplink_mac: String::new(),
            tun0_mac: String::new(),
        });
    }

    let services = namespaces
        .first()
        .and_then(|ns| super::service::plan(&ns.name, &pods))
        .into_iter()
        .collect();
    Ok(LabState {
        schema_version: SCHEMA_VERSION,
        mode: opts.mode.name().to_string(),
        flows: opts.variant.name().to_string(),
        prefix: prefix.to_string(),
        dir: opts.dir.clone(),
        vxlan: opts.vxlan,
        ovsdb: opts.ovsdb,
        xdp_redirect: opts.xdp_redirect,
        xdp_peer_gro: opts.xdp_peer_gro,
        least_privilege: opts.least_privilege,
        pmd_threads: opts.pmd_threads,
        tun0_backend: opts.tun0_backend.clone(),
        cluster_network: CLUSTER_NETWORK.to_string(),
        service_network: SERVICE_NETWORK.to_string(),
        vxlan_port: VXLAN_PORT,
        mtu: opts.underlay_mtu - VXLAN_OVERHEAD,
        underlay: Underlay {
            netns: format!("{prefix}-ul"),
            bridge: UNDERLAY_BRIDGE.to_string(),
            cidr: UNDERLAY_CIDR.to_string(),
        },
        nodes,
        namespaces,
        pods,
        external: External {
            netns: format!("{prefix}-ext"),
            ip: EXTERNAL_IP,
        },
        services,
    })
}

/// The default lab directory: `/tmp/xbr-lab-<hex>` (the caller creates it).
pub fn default_dir(seed: u64) -> PathBuf {
    Path::new("/tmp").join(format!("xbr-lab-{:06x}", seed & 0xff_ffff))
}

/// A plan's options for unit tests: `nodes` nodes of `pods` pods in `ns`
/// namespaces, no VXLAN, the legacy flows, nothing of the host touched.
#[cfg(test)]
pub(crate) fn test_options(mode: Mode, nodes: u32, pods: u32, ns: u32) -> Options {
    Options {
        mode,
        nodes,
        pods_per_node: pods,
        namespaces: ns,
        prefix: "xbrlab-t".into(),
        dir: "/tmp/x".into(),
        vxlan: false,
        variant: crate::flows::Variant::LegacyNonConntrack,
        ovsdb: false,
        xdp_redirect: false,
        xdp_peer_gro: true,
        least_privilege: false,
        pmd_threads: 1,
        tun0_backend: String::new(),
        underlay_mtu: UNDERLAY_MTU,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_node_multitenant_layout() {
        let s = plan(&test_options(Mode::Multitenant, 2, 4, 3), 42).unwrap();
        assert_eq!(s.nodes.len(), 2);
        assert_eq!(s.nodes[1].subnet, "10.128.2.0/23");
        assert_eq!(s.nodes[1].gateway, Ipv4Addr::new(10, 128, 2, 1));
        assert_eq!(s.nodes[1].uplink_ip, Ipv4Addr::new(10, 0, 0, 12));
        assert_eq!(s.nodes[1].netns, "xbrlab-t-n2");
        assert_ne!(s.nodes[0].hostsubnet_cookie, s.nodes[1].hostsubnet_cookie);
        assert_eq!(s.pods.len(), 8);
        let p = &s.pods[5];
        assert_eq!(p.name, "node2-pod2");
        assert_eq!(p.netns, "xbrlab-t-n2-p2");
        assert_eq!(p.ip, Ipv4Addr::new(10, 128, 2, 3));
        assert_eq!(p.mac, "0a:58:0a:80:02:03");
        assert_eq!(p.ofport, 4);
        assert_eq!(p.namespace, "ns1");
        assert_eq!(p.host_if, "veth0a800203");
        assert_eq!(s.namespaces[0].vnid, 0);
        assert!(s.namespaces[1].vnid >= 10 && s.namespaces[1].vnid < 1 << 24);
        assert_ne!(s.namespaces[1].vnid, s.namespaces[2].vnid);
        assert_eq!(p.vnid, s.namespaces[1].vnid);
        // pod 4 wraps around to namespace 0.
        assert_eq!(s.pods[3].namespace, "default");
        assert_eq!(s.pods[3].vnid, 0);
    }

    #[test]
    fn subnet_mode_has_only_vnid_zero() {
        let s = plan(&test_options(Mode::Subnet, 1, 6, 3), 1).unwrap();
        assert!(s.namespaces.iter().all(|n| n.vnid == 0));
        assert!(s.pods.iter().all(|p| p.vnid == 0));
    }

    #[test]
    fn limits_are_usage_errors() {
        for o in [
            test_options(Mode::Subnet, 0, 1, 1),
            test_options(Mode::Subnet, MAX_NODES + 1, 1, 1),
            test_options(Mode::Subnet, 1, MAX_PODS_PER_NODE + 1, 1),
            test_options(Mode::Subnet, 1, 1, 0),
        ] {
            assert!(matches!(plan(&o, 0), Err(LabError::Usage(_))));
        }
        let mut o = test_options(Mode::Subnet, 1, 1, 1);
        o.prefix = "Bad_Name".into();
        assert!(matches!(plan(&o, 0), Err(LabError::Usage(_))));
    }

    #[test]
    fn lab_netns_shapes() {
        for ok in ["x-ul", "x-ext", "x-n1", "x-n12-p3"] {
            assert!(is_lab_netns("x", ok), "{ok}");
        }
        for not in [
            "x", "x-", "x-n", "x-n1-p", "x-nx", "xy-ul", "x-ul2", "y-n1", "x-n1-q2",
        ] {
            assert!(!is_lab_netns("x", not), "{not}");
        }
        // A lab named "x" does not own the namespaces of a lab named "x-n1".
        assert!(!is_lab_netns("x", "x-n1-ul"));
    }

    #[test]
    fn rng_is_deterministic_per_seed() {
        let a = plan(&test_options(Mode::Multitenant, 1, 2, 4), 9).unwrap();
        let b = plan(&test_options(Mode::Multitenant, 1, 2, 4), 9).unwrap();
        assert_eq!(a, b);
    }
}
