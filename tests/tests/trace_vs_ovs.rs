//! The agent's pipeline walked by xbr and by Open vSwitch 3.1: both
//! loaded with the same flow set (100 pods, 10 namespaces, 20 remote
//! nodes, 50 Services, as agent_compat.rs), then `xbr trace`
//! and `ovs-appctl ofproto/trace` run on the same packets, with the same
//! `--ct-next` states, must visit the same tables and match flows of the
//! same priorities, pass by pass through every `ct(table=N)`.
//!
//! This compares lookups, not text: the traces print flows and datapath
//! actions differently. It covers what the agent's traffic does: pod to
//! pod on the node (same and other namespace), to the gateway, to a
//! Service, to a remote node's subnet, to the outside and to multicast,
//! ARP, from tun0 and from the VXLAN port, as a new connection, an
//! established one and a reply; and 100 pseudo-random packets per mode
//! (subnet, multitenant, networkpolicy) drawn from the addresses, ports
//! and protocols the flows tell apart.

use std::process::Command;
use xbr_tests::{run_timeout, HarnessError, Result, BRIDGE, CMD_TIMEOUT};

mod peers;
use peers::{generate, ovs_err, Peers, PODS, SIZE_ARGS};

/// Table lookups of a trace in order: (table, priority of the flow that
/// matched, or `None` for a miss), with `None` tables marking where a
/// recirculation resumed.
type Walk = Vec<(Option<u8>, Option<u16>)>;

/// `  20. <match>, priority 100[, cookie 0x..]` (OVS) or
/// `  20. table=20, priority=100,<match> actions=...` (xbr), and their
/// misses; `recirc(...)` lines between passes.
fn walk(trace: &str) -> Walk {
    let mut out = Vec::new();
    for line in trace.lines() {
        let t = line.trim_start();
        if t.starts_with("recirc(") {
            out.push((None, None));
            continue;
        }
        let Some((num, rest)) = t.split_once(". ") else {
            continue;
        };
        let Ok(table) = num.parse::<u8>() else {
            continue;
        };
        if rest.starts_with("No match") {
            out.push((Some(table), None));
            continue;
        }
        let priority = rest
            .split_once("priority=")
            .or_else(|| rest.split_once("priority "))
            .and_then(|(_, p)| {
                p.split(|c: char| !c.is_ascii_digit())
                    .next()
                    .and_then(|n| n.parse::<u16>().ok())
            });
        if priority.is_some() {
            out.push((Some(table), priority));
        }
    }
    out
}

fn xbr_trace(peers: &Peers, flow: &str, ct_next: &[&str]) -> Result<String> {
    let mut cmd = Command::new(xbr_tests::Xbr::binary()?);
    cmd.arg("trace").arg("--rundir").arg(peers.xbr.rundir());
    for s in ct_next {
        cmd.args(["--ct-next", s]);
    }
    cmd.args([BRIDGE, flow]);
    let out = run_timeout(&mut cmd, CMD_TIMEOUT)?;
    if !out.success() {
        return Err(HarnessError::Unexpected(format!(
            "xbr trace {flow}: {}",
            out.stderr
        )));
    }
    Ok(out.stdout)
}

fn ovs_trace(peers: &Peers, flow: &str, ct_next: &[&str]) -> Result<String> {
    let mut args = vec!["ofproto/trace", BRIDGE, flow];
    for s in ct_next {
        args.extend(["--ct-next", s]);
    }
    let out = peers.ovs.appctl(&args).map_err(ovs_err)?;
    if !out.success() {
        return Err(HarnessError::Unexpected(format!(
            "ovs-appctl ofproto/trace {flow}: {}",
            out.stderr
        )));
    }
    Ok(out.stdout)
}

/// Packets of the agent's traffic (see the module documentation). Pod
/// N (port 3 + N) has 10.128.0.(2 + N); pods of the same namespace are
/// ten ports apart.
const PACKETS: [&str; 16] = [
    "in_port=3,tcp,nw_src=10.128.0.2,nw_dst=10.128.0.12,tp_src=40000,tp_dst=8080",
    "in_port=3,tcp,nw_src=10.128.0.2,nw_dst=10.128.0.3,tp_src=40000,tp_dst=8080",
    "in_port=4,udp,nw_src=10.128.0.3,nw_dst=10.128.0.50,udp_src=5353,udp_dst=53",
    "in_port=3,icmp,nw_src=10.128.0.2,nw_dst=10.128.0.1,icmp_type=8",
    "in_port=5,tcp,nw_src=10.128.0.4,nw_dst=172.30.0.10,tp_src=41000,tp_dst=80",
    "in_port=5,tcp,nw_src=10.128.0.4,nw_dst=10.128.2.5,tp_src=41000,tp_dst=443",
    "in_port=6,tcp,nw_src=10.128.0.5,nw_dst=8.8.8.8,tp_src=41000,tp_dst=443",
    "in_port=7,udp,nw_src=10.128.0.6,nw_dst=224.0.0.251,udp_src=5353,udp_dst=5353",
    "in_port=3,tcp,nw_src=10.128.0.99,nw_dst=10.128.0.12,tp_src=40000,tp_dst=8080",
    "in_port=3,arp,arp_op=1,arp_spa=10.128.0.2,arp_tpa=10.128.0.12,arp_sha=0a:58:0a:80:00:02",
    "in_port=3,arp,arp_op=1,arp_spa=10.128.0.2,arp_tpa=10.128.0.1,arp_sha=0a:58:0a:80:00:02",
    "in_port=2,tcp,nw_src=10.128.0.1,nw_dst=10.128.0.12,tp_src=50000,tp_dst=8080",
    "in_port=2,tcp,nw_src=172.30.0.10,nw_dst=10.128.0.12,tp_src=80,tp_dst=41000",
    "in_port=2,tcp,nw_src=192.168.1.7,nw_dst=10.128.0.12,tp_src=80,tp_dst=41000",
    "in_port=1,tun_id=0x0,tun_src=10.0.0.11,tcp,nw_src=10.128.2.5,nw_dst=10.128.0.12,tp_src=40000,tp_dst=8080",
    "in_port=1,tun_id=0x123,tun_src=10.0.0.11,arp,arp_op=1,arp_spa=10.128.2.5,arp_tpa=10.128.0.12",
];

/// `--ct-next` lists: a new connection (the default), an established
/// one, and a reply.
const STATES: [&[&str]; 3] = [
    &[],
    &["trk,est", "trk,est", "trk,est"],
    &["trk,est,rpl", "trk,est,rpl", "trk,est,rpl"],
];

/// Loads the agent's flow set for `mode` into both switches, as the
/// agent does.
fn load(peers: &Peers, mode: &str) -> Result<()> {
    let bundle = peers.file("bundle.txt");
    let mut args = vec!["--mode", mode, "--format", "bundle"];
    args.extend(SIZE_ARGS);
    generate(&args, &bundle)?;
    peers.both_ok(&["bundle", BRIDGE, &bundle.to_string_lossy()])
}

/// Loads the agent's flows for `mode` into both switches and compares
/// the walks of every packet in every state.
fn walks_match(mode: &str) -> Result<()> {
    let peers = Peers::start(&bench::ovs::agent_ports(PODS))?;
    load(&peers, mode)?;

    let mut compared = 0;
    let mut recirculated = 0;
    for flow in PACKETS {
        for states in STATES {
            let x = xbr_trace(&peers, flow, states)?;
            let o = ovs_trace(&peers, flow, states)?;
            let (xw, ow) = (walk(&x), walk(&o));
            assert!(
                !ow.is_empty(),
                "no lookups read from OVS's trace of {flow}:\n{o}"
            );
            assert_eq!(
                xw, ow,
                "{flow} with --ct-next {states:?}: xbr and OVS walk the tables differently\n\
                 --- xbr:\n{x}\n--- OVS:\n{o}"
            );
            compared += 1;
            recirculated += usize::from(xw.contains(&(None, None)));
        }
    }
    // The comparison went through conntrack, not only around it.
    assert!(recirculated * 2 > compared, "{recirculated} of {compared}");
    Ok(())
}

/// xorshift64: deterministic, so a failure names a packet that fails
/// again.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }

    /// An address of a kind the agent's flows tell apart: a local pod
    /// (or beyond the 100), any cluster address, a Service, the gateway,
    /// multicast, or the outside.
    fn addr(&mut self) -> String {
        match self.below(6) {
            0 => format!("10.128.0.{}", self.below(110)),
            1 => format!("10.128.{}.{}", self.below(60), self.below(250)),
            2 => format!("172.30.{}.{}", self.below(3), self.below(20)),
            3 => "10.128.0.1".to_string(),
            4 => format!("224.0.0.{}", self.below(255)),
            _ => format!(
                "{}.{}.0.{}",
                1 + self.below(220),
                self.below(250),
                self.below(250)
            ),
        }
    }

    /// A packet from a port of the agent's node (the VXLAN port with a
    /// tunnel id and source) of a protocol its flows tell apart.
    fn packet(&mut self) -> String {
        let in_port = [1, 2, 3, 4, 12, 13, 50, 102, 103][self.below(9) as usize];
        let (src, dst) = (self.addr(), self.addr());
        let tunnel = if in_port == 1 {
            format!(
                ",tun_id={:#x},tun_src=10.0.0.{}",
                self.below(3) * 0x91_b762 % 0x100_0000,
                10 + self.below(25)
            )
        } else {
            String::new()
        };
        let head = format!("in_port={in_port}{tunnel}");
        match self.below(4) {
            0 => format!(
                "{head},arp,arp_op={},arp_spa={src},arp_tpa={dst}",
                1 + self.below(2)
            ),
            1 => format!(
                "{head},udp,nw_src={src},nw_dst={dst},udp_src={},udp_dst={}",
                self.below(65536),
                [53, 4789, 5353, 8080][self.below(4) as usize]
            ),
            2 => format!("{head},icmp,nw_src={src},nw_dst={dst},icmp_type=8"),
            _ => format!(
                "{head},tcp,nw_src={src},nw_dst={dst},tcp_src={},tcp_dst={}",
                self.below(65536),
                [80, 443, 8080, 6443][self.below(4) as usize]
            ),
        }
    }
}

/// 100 pseudo-random packets per mode (subnet, multitenant,
/// networkpolicy), each as a new connection and as a reply.
#[test]
fn random_packets_walk_as_on_ovs() -> Result<()> {
    let peers = Peers::start(&bench::ovs::agent_ports(PODS))?;
    for (mode, seed) in [
        ("subnet", 0x9e37_79b9_7f4a_7c15),
        ("multitenant", 0x1234_5678_9abc_def1),
        ("networkpolicy", 0x0bad_cafe_f00d_d00d),
    ] {
        peers.clear()?;
        load(&peers, mode)?;
        let mut rng = Rng(seed);
        for _ in 0..100 {
            let flow = rng.packet();
            for states in [STATES[0], STATES[2]] {
                let x = xbr_trace(&peers, &flow, states)?;
                let o = ovs_trace(&peers, &flow, states)?;
                let ow = walk(&o);
                assert!(!ow.is_empty(), "no lookups read from OVS's trace:\n{o}");
                assert_eq!(
                    walk(&x),
                    ow,
                    "{mode}: {flow} with --ct-next {states:?}\n--- xbr:\n{x}\n--- OVS:\n{o}"
                );
            }
        }
    }
    Ok(())
}

#[test]
fn the_networkpolicy_pipeline_is_walked_as_ovs_walks_it() -> Result<()> {
    walks_match("networkpolicy")
}

/// Multitenant mode isolates namespaces by VNID (table 80 outputs only
/// when the source's and destination's VNIDs agree, or one is global).
#[test]
fn the_multitenant_pipeline_is_walked_as_ovs_walks_it() -> Result<()> {
    walks_match("multitenant")
}
