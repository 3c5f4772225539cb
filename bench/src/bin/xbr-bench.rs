//! xbr-bench: packet-rate comparison of xbr, Open vSwitch 3.1 (userspace
//! datapath, AF_XDP ports), the kernel's XDP redirect and the Linux bridge
//! on veth pairs between network namespaces (see bench::scenario).
//!
//! Without arguments it runs the `p2p` scenario on xdp-redirect, xbr and
//! ovs-afxdp, as `vxlan` (decapsulation), `encap` (encapsulation) and
//! `pipeline` (the agent's multitenant flows, 100 pods) do by default;
//! `--scenario conntrack` (packets of established connections)
//! and `conntrack-new` (every packet a new connection) compare xbr and
//! ovs-afxdp, `flowmod` (100k flows by one bundle: time, RSS) too, and
//! `churn` (flow-mods during traffic: no misdelivery) xbr, xbr-nocache
//! and ovs-afxdp. Needs root. The xbr binary is `--xbr`, else `$XBR_BIN`,
//! else `xbr` next to this program (`cargo build --release -p xbr-daemon
//! --bin xbr -p bench`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use bench::measure::MethodChoice;
use bench::packet::{Proto, MAX_PKT_SIZE};
use bench::scenario::{self, Config, Scenario, DEFAULT_CONNECTIONS, MAX_CONNECTIONS, MAX_FLOWS};
use bench::systems::System;
use clap::Parser;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ProtoArg {
    Udp,
    Tcp,
}

#[derive(Debug, Parser)]
#[command(
    name = "xbr-bench",
    about = "Packet-rate benchmarks: xbr against OVS AF_XDP, the kernel XDP redirect and the Linux bridge"
)]
struct Args {
    /// Scenario to run.
    #[arg(long, value_enum, default_value_t = Scenario::P2p)]
    scenario: Scenario,
    /// Switches to measure, in this order (comma-separated) [default:
    /// xdp-redirect,xbr,ovs-afxdp; conntrack scenarios and flowmod:
    /// xbr,ovs-afxdp; churn: xbr,xbr-nocache,ovs-afxdp].
    #[arg(long, value_enum, value_delimiter = ',')]
    systems: Option<Vec<System>>,
    /// Seconds per measured run.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=600))]
    duration: u64,
    /// Measured runs per switch; the median is reported.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=50))]
    runs: u64,
    /// Unmeasured warm-up before the runs, in seconds.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(0..=60))]
    warmup: u64,
    /// Ethernet frame size with FCS [default: 64; vxlan: 114, a 64-byte
    /// frame encapsulated].
    #[arg(long)]
    pkt_size: Option<usize>,
    /// Transport of the generated frames.
    #[arg(long, value_enum, default_value_t = ProtoArg::Udp)]
    proto: ProtoArg,
    /// Flows (and destinations) of the `flows` scenario, destinations of
    /// `churn` (the odd ones move), flows `flowmod` loads [default: 1000;
    /// flowmod: 100000].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=MAX_FLOWS as i64))]
    flows: Option<u32>,
    /// Concurrent connections of the `conntrack` scenario, one case each
    /// (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = DEFAULT_CONNECTIONS,
          value_parser = clap::value_parser!(u32).range(1..=MAX_CONNECTIONS as i64))]
    connections: Vec<u32>,
    /// Offered load in packets per second (default: as fast as possible).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    rate: Option<u64>,
    /// Transmit method: XDP live frames, AF_XDP, or live frames with AF_XDP as fallback.
    #[arg(long, value_enum, default_value_t = MethodChoice::Auto)]
    generator: MethodChoice,
    /// CPUs: generator core, then switch core.
    #[arg(long, value_delimiter = ',', num_args = 1, default_values_t = [0usize, 1])]
    cores: Vec<usize>,
    /// The xbr binary.
    #[arg(long)]
    xbr: Option<PathBuf>,
    /// Extra argument for `xbr run` (repeatable), e.g. --xbr-arg=--flow-cache=0.
    #[arg(long = "xbr-arg", allow_hyphen_values = true)]
    xbr_args: Vec<String>,
    /// Also write the report as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Also draw the report as an SVG bar chart (median Mpps per system,
    /// whiskers over the runs) into this file.
    #[arg(long)]
    svg: Option<PathBuf>,
}

fn xbr_bin(arg: Option<PathBuf>) -> PathBuf {
    arg.or_else(|| std::env::var_os("XBR_BIN").map(PathBuf::from))
        .unwrap_or_else(|| {
            std::env::current_exe()
                .ok()
                .and_then(|p| p.parent().map(|d| d.join("xbr")))
                .unwrap_or_else(|| PathBuf::from("xbr"))
        })
}

fn usage_error(msg: &str) -> ExitCode {
    eprintln!("xbr-bench: {msg}");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let a = Args::parse();
    if a.cores.len() != 2 {
        return usage_error("--cores takes two CPUs: GEN,SWITCH (e.g. 0,1)");
    }
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
    if let Some(c) = a.cores.iter().find(|c| **c >= ncpu) {
        return usage_error(&format!(
            "--cores: CPU {c} does not exist (this machine has {ncpu})"
        ));
    }
    let pkt_size = a.pkt_size.unwrap_or(a.scenario.default_pkt_size());
    if pkt_size > MAX_PKT_SIZE {
        return usage_error(&format!(
            "--pkt-size {pkt_size} is larger than {MAX_PKT_SIZE}"
        ));
    }
    let mut systems = Vec::new();
    for s in a.systems.unwrap_or_else(|| a.scenario.default_systems()) {
        if !systems.contains(&s) {
            systems.push(s);
        }
    }
    // SIGINT/SIGTERM end the current run; the scenario then unwinds and
    // every guard removes what it made (a default handler would exit
    // without running them, leaving namespaces and daemons behind).
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        if let Err(e) = signal_hook::flag::register(sig, stop.clone()) {
            eprintln!("xbr-bench: installing a handler for signal {sig}: {e}");
            return ExitCode::FAILURE;
        }
    }
    let cfg = Config {
        scenario: a.scenario,
        systems,
        runs: a.runs as usize,
        duration: Duration::from_secs(a.duration),
        warmup: Duration::from_secs(a.warmup),
        pkt_size,
        proto: match a.proto {
            ProtoArg::Udp => Proto::Udp,
            ProtoArg::Tcp => Proto::Tcp,
        },
        n_flows: a.flows.unwrap_or(a.scenario.default_flows()),
        connections: a.connections,
        rate_pps: a.rate,
        method: a.generator,
        gen_cpu: a.cores[0],
        switch_cpu: a.cores[1],
        xbr_bin: xbr_bin(a.xbr),
        xbr_args: a.xbr_args,
        stop,
    };
    if let Err(e) = scenario::validate(&cfg) {
        return usage_error(&e.to_string());
    }
    if cfg
        .systems
        .iter()
        .any(|s| matches!(s, System::Xbr | System::XbrNocache | System::XbrScraped))
        && !cfg.xbr_bin.is_file()
    {
        return usage_error(&format!(
            "xbr binary {} not found (build it, or pass --xbr PATH)",
            cfg.xbr_bin.display()
        ));
    }
    if !nix::unistd::geteuid().is_root() {
        eprintln!("xbr-bench: needs root (namespaces, XDP programs)");
        return ExitCode::FAILURE;
    }
    let report = match scenario::run(&cfg) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("xbr-bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    print!("{}", scenario::markdown(&report));
    if let Some(path) = a.json {
        let text = match serde_json::to_string_pretty(&report) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("xbr-bench: encoding the report: {e}");
                return ExitCode::FAILURE;
            }
        };
        if let Err(e) = std::fs::write(&path, text + "\n") {
            eprintln!("xbr-bench: writing {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    }
    if let Some(path) = a.svg {
        let drawn = bench::plot::svg(&report).map_err(|e| e.to_string());
        if let Err(e) = drawn.and_then(|svg| {
            std::fs::write(&path, svg).map_err(|e| format!("writing {}: {e}", path.display()))
        }) {
            eprintln!("xbr-bench: {e}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
