//! The flows the OpenShift SDN node agent installs on br0, for one node of
//! the lab, written from the agent's templates (`shared/sdn/TABLES.md`).
//!
//! Every format string below is the agent's `AddFlow` template verbatim
//! (spacing and separators included), because the lab must feed xbr the
//! same text the agent feeds `ovs-ofctl -O OpenFlow13 bundle br0 -`. The
//! flows come out in the order the agent's code paths run (SetupOVS,
//! AddHostSubnetRules/UpdateVXLANMulticastFlows, the plugin's Start(),
//! setupPodFlows + EnsureVNIDRules, FinishSetupOVS), each flow once: the
//! agent re-adds identical flows (one VNID rule per pod), which the switch
//! treats as a replacement, so only the first one is kept.
//!
//! What the lab topology has no use for is not generated: Services (the
//! 4.13+ agent has no per-Service flows; the lab runs no ≤4.12 userspace
//! proxy), EgressNetworkPolicies, egress IPs, multicast namespaces, and
//! NetworkPolicy objects beyond one set ([`POLICY_SAME_NAMESPACE`]) that
//! isolates a namespace's ingress.
//! The tests compare this output with `gen_flows.py` for the same topology.

use super::addr::Cidr;
use std::collections::HashSet;
use std::fmt::Write as _;
use std::net::Ipv4Addr;

/// The lab's one kind of NetworkPolicy set, by its `lab.json` name: the
/// policies `allow-same-namespace` (ingress from `podSelector: {}`) and
/// `allow-from-host-network` (ingress from the namespaces labelled
/// `policy-group.network.openshift.io/host-network`, i.e. VNID 0), as
/// OpenShift documents them for multitenant-like isolation.
pub const POLICY_SAME_NAMESPACE: &str = "allow-same-namespace";

/// The agent's `ruleVersion` (master, 4.10-4.15, 4.17, 4.18).
const RULE_VERSION: u8 = 13;

/// The plugin, i.e. the isolation model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `redhat/openshift-ovs-subnet`: one flat network, every VNID is 0.
    Subnet,
    /// `redhat/openshift-ovs-multitenant`: VNIDs isolate, VNID 0 is global.
    Multitenant,
    /// `redhat/openshift-ovs-networkpolicy`: per-namespace policy tables.
    NetworkPolicy,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Subnet => "subnet",
            Mode::Multitenant => "multitenant",
            Mode::NetworkPolicy => "networkpolicy",
        }
    }

    fn plugin_id(self) -> u8 {
        match self {
            Mode::Subnet => 0,
            Mode::Multitenant => 1,
            Mode::NetworkPolicy => 2,
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "subnet" => Ok(Mode::Subnet),
            "multitenant" => Ok(Mode::Multitenant),
            "networkpolicy" => Ok(Mode::NetworkPolicy),
            other => Err(format!(
                "unknown mode '{other}' (subnet, multitenant, networkpolicy)"
            )),
        }
    }
}

/// Which generation of the agent's flow set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// ≤4.12 with `useConnTrack=false` (`gen_flows.py --legacy-nonconntrack`):
    /// no `ct()` actions, no table 25, no table-10 MAC fix-ups.
    LegacyNonConntrack,
    /// 4.14 and later (master): conntrack in tables 0, 30, 31, 101.
    Conntrack,
}

impl Variant {
    pub fn name(self) -> &'static str {
        match self {
            Variant::LegacyNonConntrack => "legacy-nonconntrack",
            Variant::Conntrack => "conntrack",
        }
    }
}

/// A pod on this node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalPod {
    pub ip: Ipv4Addr,
    pub ofport: u32,
    pub vnid: u32,
}

/// Another node's HostSubnet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteNode {
    pub subnet: Cidr,
    pub node_ip: Ipv4Addr,
    /// `hostSubnetCookie`: the agent takes the first 4 bytes of
    /// sha256(HostSubnet.UID); any value unique per HostSubnet does the job.
    pub cookie: u32,
}

/// A Service port, for the pre-4.13 per-Service flows of table 60.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServicePort {
    pub ip: Ipv4Addr,
    pub tcp_port: u16,
    /// The Service's namespace's VNID.
    pub vnid: u32,
}

/// Everything the agent's flows on one node depend on.
#[derive(Clone, Debug)]
pub struct NodeFlows {
    pub mode: Mode,
    pub variant: Variant,
    pub cluster_networks: Vec<Cidr>,
    pub service_network: Cidr,
    pub local_subnet: Cidr,
    pub node_ip: Ipv4Addr,
    /// MAC of the node-IP NIC and of tun0; only the conntrack variant's
    /// table-10 fix-ups use them.
    pub local_mac: [u8; 6],
    pub tun_mac: [u8; 6],
    pub vxlan_port: u16,
    /// VNIDs of the namespaces with pods on this node, in namespace order
    /// (networkpolicy installs per-namespace flows only for those).
    pub namespace_vnids: Vec<u32>,
    /// networkpolicy: VNIDs of the namespaces with the
    /// [`POLICY_SAME_NAMESPACE`] policies (the others have none).
    pub isolated_vnids: Vec<u32>,
    pub pods: Vec<LocalPod>,
    pub remote_nodes: Vec<RemoteNode>,
    /// Services; only the pre-4.13 variant has flows for them (since
    /// 4.13 table 60 sends all Service traffic to the host).
    pub services: Vec<ServicePort>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FlowGenError {
    #[error("the networkpolicy plugin always used conntrack; it has no non-conntrack flow set")]
    NetworkPolicyNeedsConntrack,
    #[error("local subnet {0} has no room for a gateway and pods")]
    NoGateway(Cidr),
}

/// Ordered, duplicate-free flow list, as the switch ends up holding it.
struct Flows {
    list: Vec<String>,
    seen: HashSet<String>,
}

impl Flows {
    fn add(&mut self, flow: String) {
        if self.seen.insert(flow.clone()) {
            self.list.push(flow);
        }
    }
}

fn mac(m: [u8; 6]) -> String {
    super::addr::format_mac(m)
}

impl NodeFlows {
    /// The gateway: first address of the local subnet
    /// (`GenerateDefaultGateway`).
    pub fn gateway(&self) -> Result<Ipv4Addr, FlowGenError> {
        self.local_subnet
            .nth(1)
            .filter(|_| self.local_subnet.prefix_len() <= 30)
            .ok_or(FlowGenError::NoGateway(self.local_subnet))
    }

    /// The flows, one `ovs-ofctl` flow string each, in installation order.
    pub fn generate(&self) -> Result<Vec<String>, FlowGenError> {
        if self.mode == Mode::NetworkPolicy && self.variant == Variant::LegacyNonConntrack {
            return Err(FlowGenError::NetworkPolicyNeedsConntrack);
        }
        let mut f = Flows {
            list: Vec::new(),
            seen: HashSet::new(),
        };
        self.setup_ovs(&mut f)?;
        self.host_subnets(&mut f);
        self.policy_start(&mut f);
        self.pod_flows(&mut f);
        // FinishSetupOVS: the version note goes in last.
        f.add(format!(
            "table={}, actions=note:{:02X}.{:02X}",
            253,
            self.mode.plugin_id(),
            RULE_VERSION
        ));
        Ok(f.list)
    }

    /// The `ovs-ofctl bundle` input: one `flow add` line per flow.
    pub fn bundle(&self) -> Result<String, FlowGenError> {
        let mut out = String::new();
        for flow in self.generate()? {
            // Writing to a String cannot fail.
            let _ = writeln!(out, "flow add {flow}");
        }
        Ok(out)
    }

    /// ovscontroller.go SetupOVS().
    fn setup_ovs(&self, f: &mut Flows) -> Result<(), FlowGenError> {
        let ct = self.variant == Variant::Conntrack;
        let ls = self.local_subnet;
        let gw = self.gateway()?;
        let svc = self.service_network;
        // Table 0
        if ct {
            f.add("table=0, priority=1000, ip, ct_state=-trk, actions=ct(table=0)".into());
        }
        for c in &self.cluster_networks {
            f.add(format!("table=0, priority=200, in_port=1, arp, nw_src={c}, nw_dst={ls}, actions=move:NXM_NX_TUN_ID[0..31]->NXM_NX_REG0[],goto_table:10"));
            f.add(format!("table=0, priority=200, in_port=1, ip, nw_src={c}, actions=move:NXM_NX_TUN_ID[0..31]->NXM_NX_REG0[],goto_table:10"));
            f.add(format!("table=0, priority=200, in_port=1, ip, nw_dst={c}, actions=move:NXM_NX_TUN_ID[0..31]->NXM_NX_REG0[],goto_table:10"));
        }
        f.add("table=0, priority=150, in_port=1, actions=drop".into());
        if ct {
            f.add(format!(
                "table=0, priority=400, in_port=2, ip, nw_src={gw}, actions=goto_table:30"
            ));
            for c in &self.cluster_networks {
                f.add(format!("table=0, priority=300, in_port=2, ip, nw_src={ls}, nw_dst={c}, actions=goto_table:25"));
            }
        }
        f.add("table=0, priority=250, in_port=2, ip, nw_dst=224.0.0.0/4, actions=drop".into());
        for c in &self.cluster_networks {
            f.add(format!(
                "table=0, priority=200, in_port=2, arp, nw_src={gw}, nw_dst={c}, actions=goto_table:30"
            ));
        }
        f.add("table=0, priority=200, in_port=2, ip, actions=goto_table:30".into());
        f.add("table=0, priority=150, in_port=2, actions=drop".into());
        f.add("table=0, priority=100, arp, actions=goto_table:20".into());
        f.add("table=0, priority=100, ip, actions=goto_table:20".into());
        f.add("table=0, priority=0, actions=drop".into());
        // Table 10: the MAC fix-ups exist since 4.14 (9e9176a3b).
        if ct {
            f.add(format!(
                "table=10, priority=210, ip, nw_dst={gw}, eth_dst={}, actions=set_field:{}->eth_dst, resubmit:10",
                mac(self.local_mac),
                mac(self.tun_mac)
            ));
            f.add(format!(
                "table=10, priority=200, ip, nw_dst={ls}, eth_dst={}, actions=move:nw_dst->eth_dst[0..31], set_field:0a:58:00:00:00:00/ff:ff:00:00:00:00->eth_dst, resubmit:10",
                mac(self.local_mac)
            ));
        }
        f.add("table=10, priority=0, actions=drop".into());
        // Table 20
        f.add(format!(
            "table=20, priority=300, udp, udp_dst={}, actions=drop",
            self.vxlan_port
        ));
        f.add("table=20, priority=0, actions=drop".into());
        // Table 25
        if ct {
            f.add("table=25, priority=0, actions=drop".into());
        }
        // Table 27
        f.add("table=27, priority=0, actions=drop".into());
        // Table 30
        f.add("table=30, priority=0, actions=goto_table:31".into());
        // Table 31
        f.add(format!(
            "table=31, priority=300, arp, nw_dst={gw}, actions=output:2"
        ));
        f.add(format!(
            "table=31, priority=200, arp, nw_dst={ls}, actions=goto_table:40"
        ));
        for c in &self.cluster_networks {
            f.add(format!(
                "table=31, priority=100, arp, nw_dst={c}, actions=goto_table:50"
            ));
        }
        f.add(format!(
            "table=31, priority=300, ip, nw_dst={gw}, actions=output:2"
        ));
        f.add(format!(
            "table=31, priority=100, ip, nw_dst={svc}, actions=goto_table:60"
        ));
        if ct {
            f.add(format!(
                "table=31, priority=250, ip, nw_dst={ls}, ct_state=+rpl, actions=ct(nat,table=70)"
            ));
        }
        f.add(format!(
            "table=31, priority=200, ip, nw_dst={ls}, actions=goto_table:70"
        ));
        for c in &self.cluster_networks {
            f.add(format!(
                "table=31, priority=100, ip, nw_dst={c}, actions=goto_table:90"
            ));
        }
        f.add(
            "table=31, priority=50, in_port=1, ip, nw_dst=224.0.0.0/4, actions=goto_table:120"
                .into(),
        );
        f.add("table=31, priority=25, ip, nw_dst=224.0.0.0/4, actions=goto_table:110".into());
        f.add("table=31, priority=0, ip, actions=goto_table:99".into());
        f.add("table=31, priority=0, arp, actions=drop".into());
        // Tables 40, 50
        f.add("table=40, priority=0, actions=drop".into());
        f.add("table=50, priority=0, actions=drop".into());
        // Table 60
        if ct {
            f.add("table=60, priority=200, actions=output:2".into());
        } else {
            f.add("table=60, priority=200, reg0=0, actions=output:2".into());
            // AddServiceRules (removed in 4.13): to tun0 through table
            // 80's policy for the Service's VNID.
            for s in &self.services {
                let (ip, port, vnid) = (s.ip, s.tcp_port, s.vnid);
                f.add(format!(
                    "table=60, ip, nw_dst={ip}, ip_frag=later, priority=100, actions=load:{vnid}->NXM_NX_REG1[], load:2->NXM_NX_REG2[], goto_table:80"
                ));
                f.add(format!(
                    "table=60, ip, nw_dst={ip}, tcp, tcp_dst={port}, priority=100, actions=load:{vnid}->NXM_NX_REG1[], load:2->NXM_NX_REG2[], goto_table:80"
                ));
            }
            f.add("table=60, priority=0, actions=drop".into());
        }
        // Tables 70, 80, 90
        f.add("table=70, priority=0, actions=drop".into());
        f.add(format!(
            "table=80, priority=300, ip, nw_src={gw}/32, actions=output:NXM_NX_REG2[]"
        ));
        f.add("table=80, priority=0, actions=drop".into());
        f.add("table=90, priority=0, actions=drop".into());
        // Table 99
        let node = self.node_ip;
        f.add(format!(
            "table=99, priority=200, tcp, tcp_dst=53, nw_dst={node}, actions=output:2"
        ));
        f.add(format!(
            "table=99, priority=200, udp, udp_dst=53, nw_dst={node}, actions=output:2"
        ));
        f.add("table=99, priority=0, actions=goto_table:100".into());
        // Tables 100, 101
        f.add("table=100, priority=0, actions=goto_table:101".into());
        f.add("table=101, priority=150, ct_state=+rpl, actions=output:2".into());
        f.add("table=101, priority=0, actions=output:2".into());
        // Tables 110, 111, 120
        f.add("table=110, priority=0, actions=drop".into());
        if self.remote_nodes.is_empty() {
            // Placeholder until UpdateVXLANMulticastFlows() sees HostSubnets.
            f.add("table=111, priority=100, actions=goto_table:120".into());
        }
        f.add("table=120, priority=0, actions=drop".into());
        Ok(())
    }

    /// AddHostSubnetRules() per remote node, then UpdateVXLANMulticastFlows().
    fn host_subnets(&self, f: &mut Flows) {
        for r in &self.remote_nodes {
            let (cookie, ip, subnet) = (r.cookie, r.node_ip, r.subnet);
            f.add(format!(
                "table=10, priority=100, cookie=0x{cookie:08x}, tun_src={ip}, actions=goto_table:30"
            ));
            f.add(format!("table=50, priority=100, cookie=0x{cookie:08x}, arp, nw_dst={subnet}, actions=move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31],set_field:{ip}->tun_dst,output:1"));
            f.add(format!("table=90, priority=100, cookie=0x{cookie:08x}, ip, nw_dst={subnet}, actions=move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31],set_field:{ip}->tun_dst,output:1"));
        }
        if !self.remote_nodes.is_empty() {
            // sort.Strings over the per-node action strings.
            let mut acts: Vec<String> = self
                .remote_nodes
                .iter()
                .map(|r| format!("set_field:{}->tun_dst,output:1", r.node_ip))
                .collect();
            acts.sort();
            f.add(format!(
                "table=111, priority=100, actions=move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31],{},goto_table:120",
                acts.join(",")
            ));
        }
    }

    /// The plugin's Start().
    fn policy_start(&self, f: &mut Flows) {
        match self.mode {
            Mode::Subnet => {
                f.add("table=27, priority=500, actions=goto_table:30".into());
                f.add("table=80, priority=200, actions=output:NXM_NX_REG2[]".into());
            }
            Mode::Multitenant => {
                f.add("table=27, priority=500, actions=goto_table:30".into());
                f.add("table=80, priority=200, reg0=0, actions=output:NXM_NX_REG2[]".into());
                f.add("table=80, priority=200, reg1=0, actions=output:NXM_NX_REG2[]".into());
            }
            Mode::NetworkPolicy => {
                f.add(format!(
                    "table=27, priority=300, ip, nw_dst={} , actions=goto_table:30",
                    self.service_network
                ));
                f.add(
                    "table=80, priority=200, ip, ct_state=+rpl, actions=output:NXM_NX_REG2[]"
                        .into(),
                );
                f.add("table=27, priority=200, ip, ct_state=+rpl, actions=goto_table:30".into());
                for s in &self.cluster_networks {
                    for d in &self.cluster_networks {
                        f.add(format!("table=30, priority=100, ip, nw_src={s}, nw_dst={d}, ct_state=-rpl, actions=ct(commit,table=31)"));
                    }
                }
            }
        }
    }

    /// setupPodFlows() per pod (+ multitenant EnsureVNIDRules), then the
    /// networkpolicy per-namespace flows.
    fn pod_flows(&self, f: &mut Flows) {
        for p in &self.pods {
            let (ip, port, vnid) = (p.ip, p.ofport, p.vnid);
            let [a, b, c, d] = ip.octets();
            let ipmac = format!("00:00:{a:02x}:{b:02x}:{c:02x}:{d:02x}/00:00:ff:ff:ff:ff");
            f.add(format!("table=20, priority=100, in_port={port}, arp, nw_src={ip}, arp_sha={ipmac}, actions=load:{vnid}->NXM_NX_REG0[], goto_table:30"));
            f.add(format!("table=20, priority=100, in_port={port}, ip, nw_src={ip}, actions=load:{vnid}->NXM_NX_REG0[], goto_table:27"));
            if self.variant == Variant::Conntrack {
                f.add(format!("table=25, priority=100, ip, nw_src={ip}, actions=load:{vnid}->NXM_NX_REG0[], goto_table:27"));
            }
            f.add(format!(
                "table=40, priority=100, arp, nw_dst={ip}, actions=output:{port}"
            ));
            f.add(format!("table=70, priority=100, ip, nw_dst={ip}, actions=load:{vnid}->NXM_NX_REG1[], load:{port}->NXM_NX_REG2[], goto_table:80"));
            if self.mode == Mode::Multitenant && vnid != 0 {
                f.add(format!("table=80, priority=100, reg0={vnid}, reg1={vnid}, actions=output:NXM_NX_REG2[]"));
            }
        }
        if self.mode == Mode::NetworkPolicy {
            for v in &self.namespace_vnids {
                if self.isolated_vnids.contains(v) {
                    // generateNamespaceIngressFlows: one flow per ingress
                    // peer, sorted; every pod is selected, so no default.
                    let mut peers = [format!("reg0={v}, "), "reg0=0, ".to_string()];
                    peers.sort();
                    for peer in peers {
                        f.add(format!(
                            "table=80, priority=150, reg1={v}, {peer} actions=output:NXM_NX_REG2[]"
                        ));
                    }
                } else {
                    // No NetworkPolicies: everything allowed, both ways.
                    f.add(format!(
                        "table=80, priority=50, reg1={v}, actions=output:NXM_NX_REG2[]"
                    ));
                }
                f.add(format!(
                    "table=27, priority=50, reg0={v}, actions=goto_table:30"
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests;
