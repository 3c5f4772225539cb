//! labbench: pod-to-pod across nodes (VXLAN encap + decap) with xbr and
//! with Open vSwitch 3.1 in the same run (issue 4's benchmark).
//!
//! For each switch a fresh two-node `xbr lab` (subnet mode, one pod per
//! node) is built. For `ovs`, each node's xbr is then stopped and replaced
//! by OVS with the userspace datapath and AF_XDP ports (see
//! `bench::ovs_node`), loaded with the very same agent flows
//! (`ovs-ofctl bundle` of the node's `flows.bundle`). Pods turn TX checksum
//! offload off for both switches: OVS's AF_XDP ports need it, and the same
//! pods make the comparison fair (xbr also works with it on).
//!
//! Both labs are built with `--xdp-redirect` (GRO on the pods and on the
//! underlay's end of the uplinks, xbr's ports `xdp_redirect=on`), so xbr's
//! XDP flow cache encapsulates and decapsulates in the kernel; the same
//! topology serves OVS. `--no-xdp-redirect` builds both without it and
//! with `--xdp-peer-gro off` (xbr's AF_XDP path alone: otherwise xbr makes
//! the pods ready for the cache itself).
//!
//! Measured from node1's pod to node2's pod, each run `--seconds` long,
//! median of `--runs`: with iperf3, TCP throughput and the packet rate of
//! 64-byte UDP datagrams sent as fast as the pod's socket can (`-b 0`),
//! counted at the receiver; and with the project's generator
//! (`bench::pod_gen`), 64-byte UDP frames sent from the kernel out of the
//! pod's interface as fast as the path takes them (generator pinned to
//! CPU 0), counted by a sink on the receiving pod's interface. iperf3's
//! sender bounds its UDP figure (one system call per datagram); the
//! generator's is the switch's. Reports both switches and the ratio
//! xbr/ovs. The machine is shared: read the ratios, not the absolute
//! figures.
//!
//! `--agent` builds xbr's nodes from the SDN agent's own `ovs-vsctl`
//! commands through each node's ovsdb-server (`xbr lab up --ovsdb`) and
//! nothing xbr-specific: no `--xdp-redirect`, xbr's defaults
//! (`xdp_redirect=auto`, `xdp-peer-gro` on) must find the fast path
//! themselves. Each node gets two pods, and the report adds pod to pod on
//! one node and the share of the generator's frames the kernel path (the
//! XDP flow cache) carried, from `xbr stats`. OVS's nodes are built as
//! without `--agent` (the agent's bridge, ports and flows; the userspace
//! datapath with AF_XDP ports, which this machine needs: it has no
//! openvswitch kernel module).
//!
//! `--tun0` measures instead the gateway path of one node: node1's pod to
//! the node's host stack through `tun0` (iperf3 server in the node's
//! namespace on the gateway address; TCP both ways, UDP 64-byte
//! datagrams pod to host), for three switches built one after the other
//! in the same run: xbr with tun0 a TAP (`internal_backend=tap`), xbr
//! with tun0 a veth pair (`internal_backend=veth`), and OVS (whose
//! userspace-datapath internal port is a TAP). Ratios are against OVS.
//!
//! Usage (root): `labbench [--runs N] [--seconds S] [--no-xdp-redirect]
//! [--agent] [--tun0] [--gen-rate PPS] [--json]` (`--gen-rate`: pace the generator
//! instead of sending as fast as it can); the xbr
//! binary is `$XBR_BIN`, else `xbr` next to this program (build both with
//! `cargo build --release -p xbr-daemon --bin xbr -p bench`).

use bench::cmd::{in_ns, xbr_bin};
use bench::ovs::{run_bounded, unique_tag, OvsError, CMD_TIMEOUT};
use bench::ovs_node::OvsNode;
use bench::pod_gen::{Pod, PodPair};
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
enum BenchError {
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Ovs(#[from] OvsError),
    #[error("{0}")]
    Failed(String),
}

struct Args {
    runs: usize,
    seconds: u32,
    json: bool,
    xdp_redirect: bool,
    /// xbr's nodes from the agent's commands only (`lab up --ovsdb`).
    agent: bool,
    tun0: bool,
    /// The generator's pace; `None`: as fast as it can.
    gen_rate: Option<u64>,
}

fn parse_args() -> Result<Args, BenchError> {
    let mut a = Args {
        runs: 3,
        seconds: 5,
        json: false,
        xdp_redirect: true,
        agent: false,
        tun0: false,
        gen_rate: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut num = |name: &str| -> Result<u64, BenchError> {
            it.next()
                .and_then(|v| v.parse().ok())
                .filter(|n| *n > 0)
                .ok_or_else(|| BenchError::Usage(format!("{name} needs a positive number")))
        };
        match arg.as_str() {
            "--runs" => a.runs = num("--runs")? as usize,
            "--seconds" => a.seconds = num("--seconds")?.min(600) as u32,
            "--json" => a.json = true,
            "--no-xdp-redirect" => a.xdp_redirect = false,
            "--agent" => a.agent = true,
            "--tun0" => a.tun0 = true,
            "--gen-rate" => a.gen_rate = Some(num("--gen-rate")?),
            other => {
                return Err(BenchError::Usage(format!(
                    "unknown argument '{other}' (usage: labbench [--runs N] [--seconds S] \
                     [--no-xdp-redirect] [--agent] [--tun0] [--gen-rate PPS] [--json])"
                )))
            }
        }
    }
    if a.agent && (a.tun0 || !a.xdp_redirect) {
        return Err(BenchError::Usage(
            "--agent builds nodes from the agent's commands alone; it takes neither \
             --tun0 nor --no-xdp-redirect"
                .into(),
        ));
    }
    Ok(a)
}

fn run(cmd: &mut Command, timeout: Duration) -> Result<String, BenchError> {
    Ok(run_bounded(cmd, timeout)?.ok()?.stdout)
}

fn field<'a>(v: &'a Value, key: &str) -> Result<&'a str, BenchError> {
    v[key]
        .as_str()
        .ok_or_else(|| BenchError::Failed(format!("lab.json: no '{key}'")))
}

/// How a lab's nodes are configured.
#[derive(Debug, Clone, Copy)]
enum LabKind {
    /// `xbr run` flags, one pod per node; `xdp_redirect`: `--xdp-redirect`
    /// (else `--xdp-peer-gro off`).
    Flags { xdp_redirect: bool },
    /// The agent's `ovs-vsctl` commands through ovsdb-server
    /// (`--ovsdb`), two pods per node.
    Agent,
}

/// A lab built for one switch; `lab down` on drop.
struct LabRun {
    dir: PathBuf,
    prefix: String,
    json: Value,
    ovs: Vec<OvsNode>,
}

impl LabRun {
    /// A lab whose tun0s are `tun0_backend` (tap, veth), or xbr's default.
    fn up(xdp_redirect: bool, tun0_backend: Option<&str>) -> Result<LabRun, BenchError> {
        LabRun::build(LabKind::Flags { xdp_redirect }, tun0_backend)
    }

    /// A lab of two nodes with two pods each, built by the agent's
    /// commands through each node's ovsdb-server and nothing else.
    fn up_agent() -> Result<LabRun, BenchError> {
        LabRun::build(LabKind::Agent, None)
    }

    fn build(kind: LabKind, tun0_backend: Option<&str>) -> Result<LabRun, BenchError> {
        let tag = unique_tag();
        let dir = std::env::temp_dir().join(format!("xbrb-lab-{tag}"));
        let prefix = format!("xbrb-{tag}");
        let mut lab = LabRun {
            dir: dir.clone(),
            prefix: prefix.clone(),
            json: Value::Null,
            ovs: Vec::new(),
        };
        let dir_s = dir.display().to_string();
        let mut up = vec![
            "lab", "up", "--mode", "subnet", "--nodes", "2", "--dir", &dir_s, "--prefix", &prefix,
        ];
        match kind {
            LabKind::Agent => up.extend(["--pods-per-node", "2", "--ovsdb"]),
            LabKind::Flags { xdp_redirect: true } => {
                up.extend(["--pods-per-node", "1", "--xdp-redirect"]);
            }
            // xbr would otherwise make the pods ready itself.
            LabKind::Flags {
                xdp_redirect: false,
            } => up.extend(["--pods-per-node", "1", "--xdp-peer-gro", "off"]),
        }
        if let Some(b) = tun0_backend {
            up.extend(["--tun0-backend", b]);
        }
        run(Command::new(xbr_bin()).args(&up), Duration::from_secs(180))?;
        let text = std::fs::read_to_string(dir.join("lab.json"))
            .map_err(|e| BenchError::Failed(format!("reading lab.json: {e}")))?;
        lab.json = serde_json::from_str(&text)
            .map_err(|e| BenchError::Failed(format!("lab.json: {e}")))?;
        for p in lab.pods() {
            run(
                &mut in_ns(field(p, "netns")?, &["ethtool", "-K", "eth0", "tx", "off"]),
                CMD_TIMEOUT,
            )?;
        }
        Ok(lab)
    }

    fn pods(&self) -> Vec<&Value> {
        self.json["pods"]
            .as_array()
            .map_or(Vec::new(), |a| a.iter().collect())
    }

    /// Replaces every node's xbr with OVS and loads the same flows.
    fn switch_to_ovs(&mut self) -> Result<(), BenchError> {
        self.ovs = bench::ovs_node::replace_lab(&self.json, &self.dir)?;
        Ok(())
    }
}

impl LabRun {
    /// The first two pods of node `node` (same node), or the first pod of
    /// the first node and the first of the second (across nodes).
    fn pair(&self, same_node: bool) -> Result<(&Value, &Value), BenchError> {
        let pods = self.pods();
        let mut nodes: Vec<&str> = pods.iter().filter_map(|p| p["node"].as_str()).collect();
        nodes.dedup();
        let on = |n: Option<&&str>| -> Vec<&Value> {
            pods.iter()
                .filter(|p| n.is_some_and(|n| p["node"].as_str() == Some(*n)))
                .copied()
                .collect()
        };
        let (first, second) = (on(nodes.first()), on(nodes.get(1)));
        let pair = if same_node {
            (first.first(), first.get(1))
        } else {
            (first.first(), second.first())
        };
        match pair {
            (Some(a), Some(b)) => Ok((*a, *b)),
            _ => Err(BenchError::Failed(format!(
                "the lab has no pod pair {}",
                if same_node {
                    "on one node"
                } else {
                    "across nodes"
                }
            ))),
        }
    }

    /// Summed over the nodes' `xbr stats`: (packets the XDP flow cache
    /// forwarded, packets received on the ports by either path: a port's
    /// counters include what the cache forwarded from it).
    fn kernel_and_all_packets(&self) -> Result<(u64, u64), BenchError> {
        let (mut kernel, mut all) = (0, 0);
        for node in self.json["nodes"].as_array().into_iter().flatten() {
            let out = run(
                Command::new(xbr_bin()).args(["stats", "--rundir", field(node, "rundir")?, "br0"]),
                CMD_TIMEOUT,
            )?;
            kernel += stat_after(&out, "XDP flow cache", "hit_packets: ");
            all += out
                .lines()
                .filter_map(|l| l.split("rx packets: ").nth(1))
                .filter_map(|r| r.split(',').next()?.parse::<u64>().ok())
                .sum::<u64>();
        }
        Ok((kernel, all))
    }
}

/// The value of `key` on an indented line of `xbr stats`' section
/// `section` (0 if absent).
fn stat_after(stats: &str, section: &str, key: &str) -> u64 {
    stats
        .lines()
        .skip_while(|l| !l.starts_with(section))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .find_map(|l| l.trim().strip_prefix(key)?.parse().ok())
        .unwrap_or(0)
}

impl Drop for LabRun {
    fn drop(&mut self) {
        self.ovs.clear();
        let _ = run_bounded(
            Command::new(xbr_bin()).args([
                "lab",
                "down",
                "--dir",
                &self.dir.display().to_string(),
                "--prefix",
                &self.prefix,
            ]),
            Duration::from_secs(60),
        );
    }
}

/// One iperf3 run from pod `a` to pod `b`; returns the receiver's JSON
/// summary.
fn iperf3(a: &Value, b: &Value, udp: bool, seconds: u32, port: u16) -> Result<Value, BenchError> {
    let (ans, bns, bip) = (field(a, "netns")?, field(b, "netns")?, field(b, "ip")?);
    iperf3_ns(ans, bns, bip, udp, false, seconds, port)
}

/// One iperf3 run, client in namespace `ans`, server in `bns` at `bip`;
/// `reverse`: the server sends (`-R`).
fn iperf3_ns(
    ans: &str,
    bns: &str,
    bip: &str,
    udp: bool,
    reverse: bool,
    seconds: u32,
    port: u16,
) -> Result<Value, BenchError> {
    let port_s = port.to_string();
    run(
        &mut in_ns(bns, &["iperf3", "-s", "-D", "-1", "-p", &port_s]),
        CMD_TIMEOUT,
    )?;
    std::thread::sleep(Duration::from_millis(300));
    let t = seconds.to_string();
    let mut args = vec!["iperf3", "-c", bip, "-p", &port_s, "-t", &t, "-J"];
    if udp {
        args.extend(["-u", "-b", "0", "-l", "64"]);
    }
    if reverse {
        args.push("-R");
    }
    let out = run(
        &mut in_ns(ans, &args),
        Duration::from_secs(u64::from(seconds) + 30),
    )?;
    serde_json::from_str(&out).map_err(|e| BenchError::Failed(format!("iperf3 output: {e}")))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Medians of a lab's runs.
#[derive(Debug, Clone, Copy)]
struct Figures {
    tcp_gbps: f64,
    /// iperf3's 64-byte datagrams delivered, thousands a second.
    udp_kpps: f64,
    /// The generator's 64-byte frames delivered, thousands a second.
    gen_kpps: f64,
    /// The generator's frames lost, as a fraction of those sent.
    gen_loss: f64,
}

/// The CPU the generator sends from (the switch's threads are not pinned).
const GEN_CPU: usize = 0;

fn pod_of(v: &Value) -> Result<Pod, BenchError> {
    let bad = |what: &str| BenchError::Failed(format!("lab.json: pod {what}"));
    Ok(Pod {
        netns: field(v, "netns")?.to_string(),
        mac: dataplane::config::parse_mac(field(v, "mac")?).ok_or_else(|| bad("mac"))?,
        ip: field(v, "ip")?.parse().map_err(|_| bad("ip"))?,
    })
}

fn measure(lab: &LabRun, args: &Args) -> Result<Figures, BenchError> {
    let pods = lab.pods();
    let (Some(a), Some(b)) = (pods.first(), pods.get(1)) else {
        return Err(BenchError::Failed("the lab has fewer than two pods".into()));
    };
    measure_pair(a, b, args)
}

/// Figures from pod `a` to pod `b` (each run: iperf3 TCP, iperf3 UDP,
/// then the generator).
fn measure_pair(a: &Value, b: &Value, args: &Args) -> Result<Figures, BenchError> {
    // The first packets resolve neighbours; do not time them.
    let _ = run_bounded(
        &mut in_ns(
            field(a, "netns")?,
            &["ping", "-c", "3", "-i", "0.2", "-W", "1", field(b, "ip")?],
        ),
        CMD_TIMEOUT,
    );
    let (mut tcp, mut udp) = (Vec::new(), Vec::new());
    for i in 0..args.runs {
        let port = 5300 + (i as u16) * 2;
        tcp.push(tcp_gbps(&iperf3(a, b, false, args.seconds, port)?));
        udp.push(udp_kpps(&iperf3(a, b, true, args.seconds, port + 1)?));
    }
    let pair = PodPair::new(&pod_of(a)?, &pod_of(b)?, 1)
        .map_err(|e| BenchError::Failed(format!("generator: {e}")))?;
    let (mut gen, mut loss) = (Vec::new(), Vec::new());
    for _ in 0..args.runs {
        let s = pair
            .run(
                Duration::from_secs(args.seconds.into()),
                args.gen_rate,
                Some(GEN_CPU),
            )
            .map_err(|e| BenchError::Failed(format!("generator: {e}")))?;
        if s.received == 0 {
            return Err(BenchError::Failed(format!(
                "generator: none of {} frames reached {}",
                s.sent,
                field(b, "name")?
            )));
        }
        gen.push(s.mpps() * 1e3);
        loss.push(s.loss());
    }
    Ok(Figures {
        tcp_gbps: median(tcp),
        udp_kpps: median(udp),
        gen_kpps: median(gen),
        gen_loss: median(loss),
    })
}

/// Gbit/s a TCP run's receiver counted.
fn tcp_gbps(v: &Value) -> f64 {
    v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or(0.0)
        / 1e9
}

/// Thousands of datagrams per second a UDP run delivered.
fn udp_kpps(v: &Value) -> f64 {
    let sum = &v["end"]["sum"];
    let sent = sum["packets"].as_f64().unwrap_or(0.0);
    let lost = sum["lost_packets"].as_f64().unwrap_or(0.0);
    let secs = sum["seconds"].as_f64().filter(|s| *s > 0.0).unwrap_or(1.0);
    (sent - lost).max(0.0) / secs / 1e3
}

/// Medians of (TCP pod->host Gbit/s, TCP host->pod Gbit/s, UDP 64B
/// pod->host kpps) between node1's first pod and its node's tun0.
fn measure_tun0(lab: &LabRun, args: &Args) -> Result<[f64; 3], BenchError> {
    let pods = lab.pods();
    let pod = pods
        .first()
        .ok_or_else(|| BenchError::Failed("the lab has no pod".into()))?;
    let node_name = field(pod, "node")?;
    let node = lab.json["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|n| n["name"].as_str() == Some(node_name))
        .ok_or_else(|| BenchError::Failed(format!("lab.json: no node {node_name}")))?;
    let (pns, nns, gw) = (
        field(pod, "netns")?,
        field(node, "netns")?,
        field(node, "gateway")?,
    );
    let _ = run_bounded(
        &mut in_ns(pns, &["ping", "-c", "3", "-i", "0.2", "-W", "1", gw]),
        CMD_TIMEOUT,
    );
    let mut out: [Vec<f64>; 3] = Default::default();
    for i in 0..args.runs {
        let port = 5400 + (i as u16) * 3;
        let s = args.seconds;
        out[0].push(tcp_gbps(&iperf3_ns(pns, nns, gw, false, false, s, port)?));
        out[1].push(tcp_gbps(&iperf3_ns(
            pns,
            nns,
            gw,
            false,
            true,
            s,
            port + 1,
        )?));
        out[2].push(udp_kpps(&iperf3_ns(
            pns,
            nns,
            gw,
            true,
            false,
            s,
            port + 2,
        )?));
    }
    Ok(out.map(median))
}

fn bench_tun0(args: &Args) -> Result<(), BenchError> {
    let mut rows: Vec<(&str, [f64; 3])> = Vec::new();
    for (label, backend) in [("xbr-tap", "tap"), ("xbr-veth", "veth")] {
        let lab = LabRun::up(args.xdp_redirect, Some(backend))?;
        rows.push((label, measure_tun0(&lab, args)?));
    }
    {
        let mut lab = LabRun::up(args.xdp_redirect, None)?;
        lab.switch_to_ovs()?;
        rows.push(("ovs", measure_tun0(&lab, args)?));
    }
    let ovs = rows[rows.len() - 1].1;
    let ratio = |x: f64, o: f64| if o > 0.0 { x / o } else { f64::INFINITY };
    if args.json {
        let mut j = serde_json::Map::new();
        for (label, r) in &rows {
            j.insert(
                label.to_string(),
                serde_json::json!({
                    "tcp_to_host_gbps": r[0], "tcp_from_host_gbps": r[1], "udp64_to_host_kpps": r[2],
                    "ratio_vs_ovs": [ratio(r[0], ovs[0]), ratio(r[1], ovs[1]), ratio(r[2], ovs[2])],
                }),
            );
        }
        j.insert("runs".into(), args.runs.into());
        j.insert("seconds".into(), args.seconds.into());
        j.insert("xdp_redirect".into(), args.xdp_redirect.into());
        println!("{}", Value::Object(j));
    } else {
        println!(
            "pod <-> host through tun0, median of {} x {} s",
            args.runs, args.seconds
        );
        println!("switch     TCP->host Gbit/s  TCP<-host Gbit/s  UDP 64B->host kpps");
        for (label, r) in &rows {
            println!(
                "{label:<9}  {:>16.2}  {:>16.2}  {:>18.1}   (x ovs: {:.2} {:.2} {:.2})",
                r[0],
                r[1],
                r[2],
                ratio(r[0], ovs[0]),
                ratio(r[1], ovs[1]),
                ratio(r[2], ovs[2])
            );
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("labbench: {e}");
            return ExitCode::from(2);
        }
    };
    let result = if args.tun0 {
        bench_tun0(&args)
    } else if args.agent {
        bench_agent(&args)
    } else {
        bench(&args)
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("labbench: {e}");
            ExitCode::from(1)
        }
    }
}

fn bench(args: &Args) -> Result<(), BenchError> {
    let xbr = {
        let lab = LabRun::up(args.xdp_redirect, None)?;
        measure(&lab, args)?
    };
    let ovs = {
        let mut lab = LabRun::up(args.xdp_redirect, None)?;
        lab.switch_to_ovs()?;
        measure(&lab, args)?
    };
    let ratio = |x: f64, o: f64| if o > 0.0 { x / o } else { f64::INFINITY };
    let json = |f: &Figures| {
        serde_json::json!({"tcp_gbps": f.tcp_gbps, "udp64_kpps": f.udp_kpps,
                           "gen64_kpps": f.gen_kpps, "gen64_loss": f.gen_loss})
    };
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "runs": args.runs, "seconds": args.seconds, "xdp_redirect": args.xdp_redirect,
                "xbr": json(&xbr), "ovs": json(&ovs),
                "ratio": {"tcp": ratio(xbr.tcp_gbps, ovs.tcp_gbps),
                          "udp64": ratio(xbr.udp_kpps, ovs.udp_kpps),
                          "gen64": ratio(xbr.gen_kpps, ovs.gen_kpps)},
            })
        );
    } else {
        println!(
            "pod to pod across nodes (VXLAN), median of {} x {} s",
            args.runs, args.seconds
        );
        println!("switch   TCP Gbit/s   UDP 64B kpps (iperf3)   UDP 64B kpps (generator, loss)");
        for (name, f) in [("xbr", &xbr), ("ovs", &ovs)] {
            println!(
                "{name:<7}  {:>10.2}   {:>21.1}   {:>21.1} ({:.1}%)",
                f.tcp_gbps,
                f.udp_kpps,
                f.gen_kpps,
                f.gen_loss * 100.0
            );
        }
        println!(
            "xbr/ovs  {:>10.2}x  {:>21.2}x  {:>21.2}x",
            ratio(xbr.tcp_gbps, ovs.tcp_gbps),
            ratio(xbr.udp_kpps, ovs.udp_kpps),
            ratio(xbr.gen_kpps, ovs.gen_kpps)
        );
    }
    Ok(())
}

/// One switch's figures in `--agent` mode.
struct AgentFigures {
    same_node: Figures,
    across: Figures,
    /// The share of forwarding decisions the XDP flow cache made while
    /// each pair was measured (xbr only).
    kernel_share: Option<(f64, f64)>,
}

/// Measures both pairs of an agent-built lab; `xbr`: also reads the
/// kernel path's share from `xbr stats` around each pair.
fn measure_agent(lab: &LabRun, args: &Args, xbr: bool) -> Result<AgentFigures, BenchError> {
    let share = |before: (u64, u64), after: (u64, u64)| {
        let k = after.0.saturating_sub(before.0) as f64;
        let all = after.1.saturating_sub(before.1) as f64;
        if all > 0.0 {
            (k / all).min(1.0)
        } else {
            0.0
        }
    };
    // The cache's counters are collected by the packet threads about
    // once a second: let them catch up before reading.
    let settle = || std::thread::sleep(Duration::from_millis(2500));
    let mut shares = (0.0, 0.0);
    let (a, b) = lab.pair(true)?;
    let before = if xbr {
        lab.kernel_and_all_packets()?
    } else {
        (0, 0)
    };
    let same_node = measure_pair(a, b, args)?;
    if xbr {
        settle();
        let after = lab.kernel_and_all_packets()?;
        shares.0 = share(before, after);
    }
    let (a, b) = lab.pair(false)?;
    let before = if xbr {
        lab.kernel_and_all_packets()?
    } else {
        (0, 0)
    };
    let across = measure_pair(a, b, args)?;
    if xbr {
        settle();
        let after = lab.kernel_and_all_packets()?;
        shares.1 = share(before, after);
    }
    Ok(AgentFigures {
        same_node,
        across,
        kernel_share: xbr.then_some(shares),
    })
}

/// `--agent`: xbr's nodes from the agent's commands only, then OVS's, in
/// the same run; same node and across nodes.
fn bench_agent(args: &Args) -> Result<(), BenchError> {
    let xbr = {
        let lab = LabRun::up_agent()?;
        measure_agent(&lab, args, true)?
    };
    let ovs = {
        let mut lab = LabRun::up_agent()?;
        lab.switch_to_ovs()?;
        measure_agent(&lab, args, false)?
    };
    let ratio = |x: f64, o: f64| if o > 0.0 { x / o } else { f64::INFINITY };
    let fig = |f: &Figures| {
        serde_json::json!({"tcp_gbps": f.tcp_gbps, "udp64_kpps": f.udp_kpps,
                           "gen64_kpps": f.gen_kpps, "gen64_loss": f.gen_loss})
    };
    let ratios = |x: &Figures, o: &Figures| {
        serde_json::json!({"tcp": ratio(x.tcp_gbps, o.tcp_gbps),
                           "udp64": ratio(x.udp_kpps, o.udp_kpps),
                           "gen64": ratio(x.gen_kpps, o.gen_kpps)})
    };
    let (ks, ka) = xbr.kernel_share.unwrap_or_default();
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "mode": "agent", "runs": args.runs, "seconds": args.seconds,
                "same_node": {"xbr": fig(&xbr.same_node), "ovs": fig(&ovs.same_node),
                              "ratio": ratios(&xbr.same_node, &ovs.same_node),
                              "xbr_kernel_share": ks},
                "across_nodes": {"xbr": fig(&xbr.across), "ovs": fig(&ovs.across),
                                 "ratio": ratios(&xbr.across, &ovs.across),
                                 "xbr_kernel_share": ka},
            })
        );
        return Ok(());
    }
    println!(
        "nodes from the agent's commands only; median of {} x {} s",
        args.runs, args.seconds
    );
    for (what, x, o, k) in [
        ("pod to pod, one node", &xbr.same_node, &ovs.same_node, ks),
        (
            "pod to pod across nodes (VXLAN)",
            &xbr.across,
            &ovs.across,
            ka,
        ),
    ] {
        println!("{what}:");
        println!("  switch   TCP Gbit/s   UDP 64B kpps (iperf3)   UDP 64B kpps (generator, loss)");
        for (name, f) in [("xbr", x), ("ovs", o)] {
            println!(
                "  {name:<7}  {:>10.2}   {:>21.1}   {:>21.1} ({:.1}%)",
                f.tcp_gbps,
                f.udp_kpps,
                f.gen_kpps,
                f.gen_loss * 100.0
            );
        }
        println!(
            "  xbr/ovs  {:>10.2}x  {:>21.2}x  {:>21.2}x",
            ratio(x.tcp_gbps, o.tcp_gbps),
            ratio(x.udp_kpps, o.udp_kpps),
            ratio(x.gen_kpps, o.gen_kpps)
        );
        println!(
            "  xbr: the XDP flow cache made {:.1}% of the forwarding decisions",
            k * 100.0
        );
    }
    Ok(())
}
