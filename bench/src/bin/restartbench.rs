//! restartbench: restarting the switch under load, xbr against Open
//! vSwitch 3.1 userspace in the same run (issue 29; docs/pinning.md,
//! docs/benchmarks.md).
//!
//! Each switch runs in a topology of its own (`bench::topo`, with pod C):
//! pod A's generator sends to pod B (OpenFlow port 2) and pod C (port 3).
//! xbr's port 3 is `xdp_redirect=off`, so the XDP flow cache never
//! forwards to pod C: frames to B are the *cached* flow, frames to C the
//! *uncached* one (every frame through xbr's packet threads). OVS is the
//! `ovs-afxdp` system (`datapath_type=netdev`, `type=afxdp` ports), which
//! has no such split. Both get the same flows: the three the traffic uses
//! and `--flows` more that it never matches (one exact `nw_src,nw_dst`
//! each).
//!
//! Measured, for each switch:
//!
//! 1. **frames lost during a restart under load**: a paced UDP stream
//!    (`--rate` frames/s, `--seconds` long, after a 0.5 s warm-up that
//!    must arrive whole) from A to B, then one from A to C; one second
//!    into each, the switch is restarted: xbr with SIGTERM and the same
//!    command (its state file and pinned XDP state are kept in its run
//!    directory and on a private BPF filesystem), OVS as `ovs-ctl
//!    restart` does (`ovs-save save-flows`, `ovs-appctl exit`,
//!    `flow-restore-wait=true`, ovs-vswitchd started, the saved flows
//!    replaced, `flow-restore-wait` removed);
//! 2. **process start to forwarding**: `--connections` UDP connections
//!    are committed to conntrack (A to a fourth address on pod B's MAC,
//!    through `ct(commit)`), then a probe stream A to C runs while the
//!    switch restarts; measured is the time from the new process's start
//!    to the probe's first frame at C, with `--flows` flows and the
//!    connections to restore. Also the new process's start to ready, and
//!    the flows and connections before and after.
//!
//! A stream goes on until 1 s after the restarted switch is ready if
//! that is later than its end. The run fails (exit 1) if a switch does
//! not get its flows back or the connections were not committed, and
//! stops (exit 2) if a warm-up loses frames.
//! `--short` is a bounded check that the benchmark works (1,000 flows,
//! 100 connections, 10 kpps for 4 s); the figures of record come from
//! the defaults on a quiet machine (bench/RESULTS.md).
//!
//! Usage (root): `restartbench [--short] [--flows N] [--connections N]
//! [--rate PPS] [--seconds S] [--systems xbr,ovs]`; the xbr binary is
//! `$XBR_BIN`, else `xbr` next to this program.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bench::cmd::xbr_bin;
use bench::measure::MeasureError;
use bench::ovs::{run_bounded, unique_tag, OvsError, CMD_TIMEOUT, NAME_PREFIX};
use bench::pod_gen::{Pod, PodPair};
use bench::systems::{self, Ports, Restarted, Running, SwitchConfig, System, SystemError};
use bench::topo::{Topology, MAC_A, MAC_B, MAC_C};
use clap::Parser;
use nix::sys::signal::Signal;

#[derive(Debug, Parser)]
#[command(
    name = "restartbench",
    about = "Restart under load: xbr against OVS 3.1"
)]
struct Args {
    /// A bounded check that the benchmark works (overrides the sizes).
    #[arg(long)]
    short: bool,
    /// Flows beside the ones the traffic uses.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    flows: u32,
    /// Connections in conntrack at the restart of the start-to-forwarding
    /// measurement.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=60_000))]
    connections: u32,
    /// The streams' rate, frames per second.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1000..=2_000_000))]
    rate: u64,
    /// Each stream's least length; the restart comes 1 s into it, and
    /// the stream goes on until 1 s after the switch is back if that is
    /// later.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(3..=600))]
    seconds: u64,
    /// The switches, in this order.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Sys::Xbr, Sys::Ovs])]
    systems: Vec<Sys>,
    /// The generator's core.
    #[arg(long, default_value_t = 0)]
    gen_cpu: usize,
    /// The switch's core.
    #[arg(long, default_value_t = 1)]
    switch_cpu: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Sys {
    Xbr,
    Ovs,
}

#[derive(Debug, thiserror::Error)]
enum BenchError {
    #[error(transparent)]
    Ovs(#[from] OvsError),
    #[error(transparent)]
    System(#[from] SystemError),
    #[error(transparent)]
    Measure(#[from] MeasureError),
    #[error("{0}")]
    Failed(String),
}

/// The sizes of a run.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    flows: u32,
    connections: u32,
    rate: u64,
    stream: Duration,
}

/// When the restart comes, into a stream.
const RESTART_AFTER: Duration = Duration::from_secs(1);
/// How long a stream goes on after the restarted switch is ready.
const TAIL: Duration = Duration::from_secs(1);
/// Bound on a stream (the restart's own bounds are below it).
const STREAM_MAX: Duration = Duration::from_secs(300);
const WARMUP: Duration = Duration::from_millis(500);
/// The probe's rate: one frame every 100 us, the measurement's resolution.
const PROBE_RATE: u64 = 10_000;
/// Bound on the probe's first frame after the restart.
const PROBE_TIMEOUT: Duration = Duration::from_secs(120);

const IP_A: Ipv4Addr = Ipv4Addr::new(10, 128, 0, 2);
const IP_B: Ipv4Addr = Ipv4Addr::new(10, 128, 0, 3);
const IP_C: Ipv4Addr = Ipv4Addr::new(10, 128, 0, 4);
/// The connections' destination: an address on pod B's MAC.
const IP_CONN: Ipv4Addr = Ipv4Addr::new(10, 128, 0, 9);

/// The flows: the traffic's three, then `extra` that never match.
fn flows_text(extra: u32) -> String {
    let mut s = format!(
        "table=0,priority=300,ip,nw_dst={IP_B},actions=output:2\n\
         table=0,priority=300,ip,nw_dst={IP_C},actions=output:3\n\
         table=0,priority=300,ip,nw_dst={IP_CONN},actions=ct(commit,zone=1),output:2\n"
    );
    for i in 0..extra {
        let [_, a, b, c] = i.to_be_bytes();
        s.push_str(&format!(
            "table=0,priority=100,ip,nw_src={IP_A},nw_dst=172.{}.{b}.{c},actions=output:2\n",
            16 + a
        ));
    }
    s
}

/// A BPF filesystem of the run's own, for xbr's `--bpf-pin-root`: xbr
/// runs under `ip netns exec`, whose private `/sys` would take a bpffs
/// (and the pins) with the process (docs/pinning.md, known limits).
/// Unmounted on drop, which unpins what xbr left (its programs detach).
struct BpfMount {
    path: PathBuf,
}

impl BpfMount {
    fn new() -> Result<BpfMount, BenchError> {
        let path = std::env::temp_dir().join(format!("{NAME_PREFIX}-bench-bpf-{}", unique_tag()));
        std::fs::create_dir_all(&path)
            .map_err(|e| BenchError::Failed(format!("creating {}: {e}", path.display())))?;
        let m = BpfMount { path };
        run_bounded(
            Command::new("mount")
                .args(["-t", "bpf", "bpf"])
                .arg(&m.path),
            CMD_TIMEOUT,
        )?
        .ok()?;
        Ok(m)
    }

    fn pin_root(&self) -> PathBuf {
        self.path.join("pins")
    }
}

impl Drop for BpfMount {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.pin_root());
        let _ = run_bounded(Command::new("umount").arg(&self.path), CMD_TIMEOUT);
        let _ = std::fs::remove_dir(&self.path);
    }
}

/// One stream's figures.
#[derive(Debug, Clone, Copy)]
struct Loss {
    sent: u64,
    lost: u64,
}

/// One switch's figures.
#[derive(Debug)]
struct Figures {
    cached: Loss,
    uncached: Loss,
    /// The new process's start to the probe's first frame.
    to_forwarding: Duration,
    restart: Restarted,
    flows_before: usize,
    flows_after: usize,
    conns_before: u64,
    conns_after: u64,
}

fn pod(netns: &str, mac: [u8; 6], ip: Ipv4Addr) -> Pod {
    Pod {
        netns: netns.to_string(),
        mac,
        ip,
    }
}

fn count_flows(sw: &Running, sizes: &Sizes) -> Result<usize, BenchError> {
    let timeout = CMD_TIMEOUT + Duration::from_millis(u64::from(sizes.flows));
    let dump = sw.ofctl(&["dump-flows", "br0"], timeout)?;
    Ok(dump.lines().filter(|l| l.contains("actions=")).count())
}

/// A stream from A to `to` with a restart `RESTART_AFTER` into it.
fn restart_under_load(
    sw: &mut Running,
    a: &Pod,
    to: &Pod,
    sizes: &Sizes,
    cpu: usize,
) -> Result<Loss, BenchError> {
    let pair = PodPair::new(a, to, 1)?;
    let warm = pair.run(WARMUP, Some(sizes.rate), Some(cpu))?;
    if warm.received != warm.sent || warm.sent == 0 {
        return Err(BenchError::Failed(format!(
            "the warm-up to {} lost {} of {} frames before any restart",
            to.ip,
            warm.sent.saturating_sub(warm.received),
            warm.sent
        )));
    }
    let flows = sizes.flows as usize + 3;
    let stop = AtomicBool::new(false);
    let sample = std::thread::scope(|s| -> Result<_, BenchError> {
        let t = Instant::now();
        let gen = s.spawn(|| pair.run_until(STREAM_MAX, Some(sizes.rate), Some(cpu), &stop));
        std::thread::sleep(RESTART_AFTER);
        let restart = sw.restart(Signal::SIGTERM, &OnceLock::new(), flows);
        // The stream goes on for its length, and at least TAIL after the
        // switch is back, so that it measures the whole outage.
        let end = sizes.stream.max(t.elapsed() + TAIL);
        std::thread::sleep(end.saturating_sub(t.elapsed()));
        stop.store(true, Ordering::Relaxed);
        let sample = gen
            .join()
            .map_err(|_| BenchError::Failed("the generator panicked".into()))??;
        restart?;
        Ok(sample)
    })?;
    if sample.elapsed + Duration::from_millis(100) < sizes.stream.min(STREAM_MAX) {
        return Err(BenchError::Failed(format!(
            "the stream to {} ended after {} ms, before its end",
            to.ip,
            sample.elapsed.as_millis()
        )));
    }
    Ok(Loss {
        sent: sample.sent,
        lost: sample.sent.saturating_sub(sample.received),
    })
}

/// Commits `sizes.connections` connections (A to `IP_CONN`, one source
/// port each) and returns how many the switch holds.
fn make_connections(
    sw: &Running,
    a: &Pod,
    b_ns: &str,
    sizes: &Sizes,
    cpu: usize,
) -> Result<u64, BenchError> {
    let pair = PodPair::new(a, &pod(b_ns, MAC_B, IP_CONN), sizes.connections)?;
    let rate = sizes.rate.min(50_000);
    // Every source port twice over.
    let secs = 2.0 * f64::from(sizes.connections) / rate as f64;
    pair.run(
        Duration::from_secs_f64(secs.max(0.2)),
        Some(rate),
        Some(cpu),
    )?;
    Ok(sw.conntrack_entries()?)
}

/// Restarts the switch under a probe stream to C; the new process's
/// start to the probe's first frame through.
fn time_to_forwarding(
    sw: &mut Running,
    a: &Pod,
    c: &Pod,
    sizes: &Sizes,
    cpu: usize,
) -> Result<(Duration, Restarted), BenchError> {
    let pair = PodPair::new(a, c, 1)?;
    let stop = AtomicBool::new(false);
    let spawned = OnceLock::new();
    let flows = sizes.flows as usize + 3;
    std::thread::scope(|s| -> Result<_, BenchError> {
        let gen = s.spawn(|| pair.run_until(PROBE_TIMEOUT * 2, Some(PROBE_RATE), Some(cpu), &stop));
        let (pair, spawned) = (&pair, &spawned);
        let result = (move || -> Result<_, BenchError> {
            let t = Instant::now();
            while pair.received()? == 0 {
                if t.elapsed() > Duration::from_secs(5) {
                    return Err(BenchError::Failed("the probe does not reach pod C".into()));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            let restarting = s.spawn(move || sw.restart(Signal::SIGTERM, spawned, flows));
            let started = loop {
                if let Some(t) = spawned.get() {
                    break *t;
                }
                if restarting.is_finished() {
                    break Instant::now();
                }
                std::thread::sleep(Duration::from_micros(200));
            };
            let base = pair.received()?;
            let first = loop {
                if pair.received()? > base {
                    break Instant::now();
                }
                if started.elapsed() > PROBE_TIMEOUT {
                    return Err(BenchError::Failed(format!(
                        "no probe frame within {PROBE_TIMEOUT:?} of the new process's start"
                    )));
                }
                std::thread::sleep(Duration::from_micros(200));
            };
            let restart = restarting
                .join()
                .map_err(|_| BenchError::Failed("the restart panicked".into()))??;
            Ok((first - restart.spawned, restart))
        })();
        stop.store(true, Ordering::Relaxed);
        let gen = gen
            .join()
            .map_err(|_| BenchError::Failed("the generator panicked".into()));
        let (took, restart) = result?;
        gen??;
        Ok((took, restart))
    })
}

fn measure(sys: Sys, sizes: &Sizes, args: &Args) -> Result<Figures, BenchError> {
    let topo = Topology::with_pod_c()?;
    let pins = match sys {
        Sys::Xbr => Some(BpfMount::new()?),
        Sys::Ovs => None,
    };
    let mut xbr_args = Vec::new();
    if let Some(p) = &pins {
        xbr_args.extend([
            "--xdp-cache".to_string(),
            "on".into(),
            "--bpf-pin-root".into(),
            p.pin_root().display().to_string(),
        ]);
    }
    let cfg = SwitchConfig {
        xbr_bin: xbr_bin(),
        xbr_args,
        cpu: args.switch_cpu,
        flows: flows_text(sizes.flows),
        bundle: false,
        ports: Ports::P2P,
        ct_limit: Some(u64::from(sizes.connections) * 2 + 1000),
        c_uncached: true,
    };
    let system = match sys {
        Sys::Xbr => System::Xbr,
        Sys::Ovs => System::OvsAfxdp,
    };
    eprintln!(
        "restartbench: {}: starting with {} flows",
        system.name(),
        sizes.flows + 3
    );
    let mut sw = systems::start(system, &topo, &cfg)?;
    let pod_c = topo
        .pod_c
        .clone()
        .ok_or_else(|| BenchError::Failed("the topology has no pod C".into()))?;
    let a = pod(&topo.pod_a, MAC_A, IP_A);
    let b = pod(&topo.pod_b, MAC_B, IP_B);
    let c = pod(&pod_c, MAC_C, IP_C);
    let cpu = args.gen_cpu;

    eprintln!(
        "restartbench: {}: restart under a stream to B (cached)",
        system.name()
    );
    let cached = restart_under_load(&mut sw, &a, &b, sizes, cpu)?;
    eprintln!(
        "restartbench: {}: restart under a stream to C (uncached)",
        system.name()
    );
    let uncached = restart_under_load(&mut sw, &a, &c, sizes, cpu)?;

    eprintln!(
        "restartbench: {}: {} connections, then a restart under a probe",
        system.name(),
        sizes.connections
    );
    let conns_before = make_connections(&sw, &a, &topo.pod_b, sizes, cpu)?;
    let flows_before = count_flows(&sw, sizes)?;
    let (to_forwarding, restart) = time_to_forwarding(&mut sw, &a, &c, sizes, cpu)?;
    let flows_after = count_flows(&sw, sizes)?;
    let conns_after = sw.conntrack_entries()?;
    // The switch goes before the pins and the topology.
    drop(sw);
    drop(pins);
    Ok(Figures {
        cached,
        uncached,
        to_forwarding,
        restart,
        flows_before,
        flows_after,
        conns_before,
        conns_after,
    })
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1e3)
}

fn ratio(x: f64, o: f64) -> String {
    if o > 0.0 {
        format!("{:.2}", x / o)
    } else if x == 0.0 {
        "-".into()
    } else {
        "inf".into()
    }
}

fn print_table(sizes: &Sizes, figs: &[(Sys, Figures)]) {
    let get = |s: Sys| figs.iter().find(|(k, _)| *k == s).map(|(_, f)| f);
    let (x, o) = (get(Sys::Xbr), get(Sys::Ovs));
    println!(
        "\nrestart under load: {} flows, {} connections, streams of {} frames/s for at least {} s \
         (until 1 s after the switch is back), \
         restart 1 s in; xbr: SIGTERM and the same command; OVS 3.1 (netdev, afxdp ports): \
         ovs-ctl restart's steps\n",
        sizes.flows + 3,
        sizes.connections,
        sizes.rate,
        sizes.stream.as_secs()
    );
    println!("| | xbr | OVS 3.1 | xbr/OVS |\n|---|---|---|---|");
    type Row<'a> = (&'a str, Box<dyn Fn(&Figures) -> (String, f64)>);
    let loss = |l: &Loss| (format!("{} of {}", l.lost, l.sent), l.lost as f64);
    let d = |t: Duration| (ms(t), t.as_secs_f64());
    let rows: Vec<Row> = vec![
        (
            "frames lost, cached flow (A to B)",
            Box::new(move |f| loss(&f.cached)),
        ),
        (
            "frames lost, uncached flow (A to C)",
            Box::new(move |f| loss(&f.uncached)),
        ),
        (
            "new process start to the probe's first frame",
            Box::new(move |f| d(f.to_forwarding)),
        ),
        (
            "new process start to ready",
            Box::new(move |f| d(f.restart.start_to_ready)),
        ),
        (
            "old process's stop (asked to gone)",
            Box::new(move |f| d(f.restart.stop)),
        ),
        (
            "saving the flows before the stop",
            // xbr writes its state file as it stops (in the stop's time).
            Box::new(move |f| match f.restart.save {
                Some(t) => d(t),
                None => ("(in the stop)".into(), f64::NAN),
            }),
        ),
        (
            "connections before / after the restart",
            Box::new(|f| {
                (
                    format!("{} / {}", f.conns_before, f.conns_after),
                    f.conns_after as f64,
                )
            }),
        ),
        (
            "flows before / after the restart",
            Box::new(|f| {
                (
                    format!("{} / {}", f.flows_before, f.flows_after),
                    f.flows_after as f64,
                )
            }),
        ),
    ];
    for (name, f) in rows {
        let (xs, xv) = x.map(&f).unwrap_or(("-".into(), f64::NAN));
        let (os, ov) = o.map(&f).unwrap_or(("-".into(), f64::NAN));
        let r = if xv.is_nan() || ov.is_nan() {
            "-".into()
        } else {
            ratio(xv, ov)
        };
        println!("| {name} | {xs} | {os} | {r} |");
    }
}

fn run(args: &Args) -> Result<bool, BenchError> {
    let sizes = if args.short {
        Sizes {
            flows: 1000,
            connections: 100,
            rate: 10_000,
            stream: Duration::from_secs(6),
        }
    } else {
        Sizes {
            flows: args.flows,
            connections: args.connections,
            rate: args.rate,
            stream: Duration::from_secs(args.seconds),
        }
    };
    let bin = xbr_bin();
    if args.systems.contains(&Sys::Xbr) && !Path::new(&bin).is_file() {
        return Err(BenchError::Failed(format!(
            "no xbr binary at {} (build it, or set XBR_BIN)",
            bin.display()
        )));
    }
    let mut figs = Vec::new();
    for &sys in &args.systems {
        figs.push((sys, measure(sys, &sizes, args)?));
    }
    print_table(&sizes, &figs);
    let mut ok = true;
    for (sys, f) in &figs {
        if f.flows_after != f.flows_before || f.flows_before < sizes.flows as usize + 3 {
            println!(
                "FAIL {sys:?}: flows {} before, {} after the restart (want {})",
                f.flows_before,
                f.flows_after,
                sizes.flows + 3
            );
            ok = false;
        }
        if f.conns_before < u64::from(sizes.connections) {
            println!(
                "FAIL {sys:?}: only {} of {} connections were committed",
                f.conns_before, sizes.connections
            );
            ok = false;
        }
    }
    println!("{}", if ok { "PASS" } else { "FAIL" });
    Ok(ok)
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("restartbench: {e}");
            ExitCode::from(2)
        }
    }
}
