//! What loading the agent's flows costs the switch, without the client:
//! decoding each OFPT_FLOW_MOD as it arrives on the wire, applying them
//! all as one bundle to an empty set of tables, and a packet thread's
//! replica taking the resulting change list. That is xbr's share of an
//! `ovs-ofctl bundle` load (`flowload` measures the whole command against
//! OVS; there `ovs-ofctl`'s own encoding is most of the time).
//!
//! The flow set is the agent's multitenant one (`xbr_lab::flows`)
//! for a node with 2,000 pods in 50 namespaces and 1,000 remote nodes,
//! about 13k flows: per pod flows in tables 20, 25, 40, 70 and 110's
//! multicast, per node flows in 10, 50 and 90.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use flowtable::{FlowTables, Pipeline, PipelineMod};
use ofproto::wire::{Header, HeaderRepr, Message};
use std::net::Ipv4Addr;
use xbr_lab::addr::Cidr;
use xbr_lab::flows::{LocalPod, Mode, NodeFlows, RemoteNode, Variant};

const PODS: u32 = 2_000;
const NAMESPACES: u32 = 50;
const REMOTE_NODES: u32 = 1_000;

fn cidr(s: &str) -> Cidr {
    s.parse().expect("valid CIDR")
}

/// The agent's flows for the node, as ovs-ofctl text.
fn agent_flows() -> Vec<String> {
    let local_subnet = cidr("10.128.0.0/20");
    let node_ip = Ipv4Addr::new(192, 168, 0, 10);
    let node = NodeFlows {
        mode: Mode::Multitenant,
        variant: Variant::Conntrack,
        cluster_networks: vec![cidr("10.128.0.0/14")],
        service_network: cidr("172.30.0.0/16"),
        local_subnet,
        node_ip,
        local_mac: [0x02, 0, 0, 0, 0x0a, 0x0b],
        tun_mac: [0x02, 0, 0, 0, 0x0a, 0x0c],
        vxlan_port: 4789,
        namespace_vnids: (1..=NAMESPACES).collect(),
        isolated_vnids: Vec::new(),
        pods: (0..PODS)
            .map(|j| LocalPod {
                ip: local_subnet.nth(2 + j).expect("room for the pods"),
                ofport: 3 + j,
                vnid: 1 + j % NAMESPACES,
            })
            .collect(),
        remote_nodes: (1..=REMOTE_NODES)
            .map(|k| RemoteNode {
                subnet: cidr(&format!("10.{}.{}.0/23", 129 + k / 128, (2 * k) % 256)),
                node_ip: Ipv4Addr::from(u32::from(node_ip) + k),
                cookie: k,
            })
            .collect(),
        services: Vec::new(),
    };
    node.generate().expect("the agent's flows")
}

/// Each flow as the OFPT_FLOW_MOD ovs-ofctl sends for it.
fn wire_messages(flows: &[String]) -> Vec<Vec<u8>> {
    flows
        .iter()
        .enumerate()
        .map(|(i, line)| {
            let fm = flowtable::text::parse_flow(line).expect("the agent's syntax");
            Message::FlowMod(fm).emit(i as u32)
        })
        .collect()
}

fn decode(msgs: &[Vec<u8>]) -> Vec<PipelineMod> {
    msgs.iter()
        .map(|m| {
            let header = HeaderRepr::parse(&Header::new_checked(&m[..]).expect("a header"));
            match Message::parse(&header, &m[8..]).expect("a valid flow-mod") {
                Message::FlowMod(fm) => PipelineMod::Flow(fm),
                other => panic!("not a flow-mod: {other:?}"),
            }
        })
        .collect()
}

fn bench_load(c: &mut Criterion) {
    let flows = agent_flows();
    let msgs = wire_messages(&flows);
    let mut group = c.benchmark_group("flow_load");
    group.sample_size(10);
    group.throughput(Throughput::Elements(msgs.len() as u64));
    group.bench_function(format!("agent_{}_flows", msgs.len()), |b| {
        b.iter(|| {
            let mods = decode(&msgs);
            let mut tables = FlowTables::new();
            let changes = tables.apply_batch(&mods).expect("the bundle applies");
            let mut replica = Pipeline::new();
            replica.apply(&changes);
            (tables, replica)
        })
    });
    group.finish();
}

criterion_group!(benches, bench_load);
criterion_main!(benches);
