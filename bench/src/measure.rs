//! One measured traffic run over a [`Topology`]: the generator in pod A,
//! the sink on pod B's interface (and pod C's, where there is one), the
//! switch under test in between.
//!
//! A [`Harness`] attaches the sink once and loads the generator once; each
//! [`Harness::run`] reads the sink's counters before and after (plus a
//! short drain for frames still in flight), so runs never mix. Received
//! means frames carrying the generator's tag; loss is `sent - received`
//! over `sent`. Rates are over the generator's active time. Gbps counts
//! each frame with its 4-byte FCS, as `pkt_size` does (no preamble or gap).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::bpf::{BpfError, Generator, Sink, SinkChecks, SinkClasses, SinkCounters};
use crate::gen::{self, GenBounds, GenError, GenReport, Method};
use crate::packet::{Template, Vary, FCS_LEN};
use crate::topo::{self, NetnsError, Topology, POD_IF, VETH_A};

/// Frames in flight when the generator stops are given this long to land.
const DRAIN: Duration = Duration::from_millis(300);
/// Pace and time bound of [`Harness::send_from_b`]: a rate any switch
/// forwards without loss, and long enough for a million frames.
const REPLY_RATE: u64 = 200_000;
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// Which transmit method to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MethodChoice {
    /// Live frames, AF_XDP if the kernel refuses them.
    Auto,
    Live,
    Afxdp,
}

/// The traffic of a scenario.
#[derive(Debug, Clone)]
pub struct Traffic {
    pub template: Template,
    pub vary: Vary,
    pub n_flows: u32,
    /// Where the sink finds the tag in the frames it receives (differs from
    /// the template's when the switch decapsulates).
    pub sink_tag_off: u16,
    pub method: MethodChoice,
    /// CPU the generator runs on (live frames send from the calling CPU).
    pub cpu: Option<usize>,
    /// How the sinks classify the frames by destination, if they do.
    pub classes: Option<SinkClasses>,
    /// What a tagged frame must look like to count as received, if more
    /// than its tag.
    pub checks: Option<SinkChecks>,
    /// Set (e.g. by a signal handler) to end the current run early.
    pub stop: Arc<AtomicBool>,
}

/// Errors of a measurement.
#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    #[error(transparent)]
    Bpf(#[from] BpfError),
    #[error(transparent)]
    Gen(#[from] GenError),
    #[error(transparent)]
    Netns(#[from] NetnsError),
    #[error("interrupted")]
    Interrupted,
    /// Making the run's frames or interfaces failed.
    #[error("{0}")]
    Setup(String),
}

/// One run's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub method: Method,
    pub sent: u64,
    pub received: u64,
    /// All frames the sink saw, tagged or not, FCS excluded.
    pub bytes: u64,
    pub elapsed: Duration,
    pub p50_ns: Option<f64>,
    pub p99_ns: Option<f64>,
    /// Frames dropped where they enter the switch: the ingress veth's ring
    /// or its XDP program's redirect into the switch (an AF_XDP socket
    /// whose ring is full), from the veths' ethtool counters. `None` if
    /// they could not be read.
    pub ingress_drops: Option<u64>,
}

impl Sample {
    fn new(g: &GenReport, c: &SinkCounters, ingress_drops: Option<u64>) -> Sample {
        Sample {
            method: g.method,
            sent: g.sent,
            received: c.tagged,
            bytes: c.bytes,
            elapsed: g.elapsed,
            p50_ns: c.latency_quantile_ns(0.50),
            p99_ns: c.latency_quantile_ns(0.99),
            ingress_drops,
        }
    }

    fn secs(&self) -> f64 {
        self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Received frames per second, in millions.
    pub fn mpps(&self) -> f64 {
        self.received as f64 / self.secs() / 1e6
    }

    /// Received bits per second (frames with FCS), in 10^9.
    pub fn gbps(&self) -> f64 {
        (self.bytes + self.received * FCS_LEN as u64) as f64 * 8.0 / self.secs() / 1e9
    }

    /// Fraction of sent frames not received (0 when nothing was sent).
    pub fn loss(&self) -> f64 {
        if self.sent == 0 {
            return 0.0;
        }
        self.sent.saturating_sub(self.received) as f64 / self.sent as f64
    }
}

/// The generator and the sink on a topology.
pub struct Harness<'t> {
    topo: &'t Topology,
    traffic: Traffic,
    gen: Generator,
    /// Pod B's sink, then pod C's if the topology has pod C.
    sinks: Vec<Sink>,
    /// Set once live frames were refused under [`MethodChoice::Auto`]
    /// (atomic so that [`Harness::run`] can share `&self` with a thread
    /// reading the sinks meanwhile).
    fell_back: AtomicBool,
}

impl<'t> Harness<'t> {
    /// Attaches a sink to pod B's interface (and pod C's) and loads the
    /// generator.
    pub fn new(topo: &'t Topology, traffic: Traffic) -> Result<Harness<'t>, MeasureError> {
        let tag = traffic.sink_tag_off;
        let classes = traffic.classes;
        let checks = traffic.checks.as_ref();
        let mut sinks = Vec::new();
        for pod in std::iter::once(&topo.pod_b).chain(&topo.pod_c) {
            sinks.push(topo::run_in(pod, || -> Result<Sink, MeasureError> {
                let idx = topo::ifindex(pod, POD_IF)?;
                Ok(Sink::attach(idx, tag, classes, checks)?)
            })?);
        }
        let mut gen = Generator::load(&traffic.template, traffic.n_flows, traffic.vary)?;
        let pinned = topo::run_in(&topo.pod_a, || -> Result<(), MeasureError> {
            let idx = topo::ifindex(&topo.pod_a, topo::GEN_PIN_IF)?;
            Ok(gen.pin(idx)?)
        });
        if let Err(e) = pinned {
            // Still correct, only burstier: each call sleeps ~20 ms.
            eprintln!("warning: generator not pinned in the XDP dispatcher ({e}); live-frames calls will sleep in synchronize_rcu()");
        }
        Ok(Harness {
            topo,
            traffic,
            gen,
            sinks,
            fell_back: AtomicBool::new(false),
        })
    }

    /// The sinks: pod B's (port 2), then pod C's (port 3) if any.
    pub fn sinks(&self) -> &[Sink] {
        &self.sinks
    }

    /// Changes the transmit method for the next runs.
    pub fn set_method(&mut self, m: MethodChoice) {
        self.traffic.method = m;
    }

    /// The sinks' counters so far, added up.
    pub fn sink_counters(&self) -> Result<SinkCounters, MeasureError> {
        let mut sum = self.sinks[0].counters()?;
        for s in &self.sinks[1..] {
            sum.add(&s.counters()?);
        }
        Ok(sum)
    }

    /// Sends under `bounds` and measures what arrived (at every sink).
    pub fn run(&self, bounds: &GenBounds) -> Result<Sample, MeasureError> {
        let drops_before = self.ingress_drops();
        let before = self.sink_counters()?;
        let t = &self.traffic;
        let stop: &AtomicBool = &t.stop;
        let gen = &self.gen;
        let use_live = match t.method {
            MethodChoice::Live => true,
            MethodChoice::Afxdp => false,
            MethodChoice::Auto => !self.fell_back.load(Ordering::Relaxed),
        };
        let pod_a = self.topo.pod_a.clone();
        let report = topo::run_in(&pod_a, || -> Result<(GenReport, bool), MeasureError> {
            if let Some(cpu) = t.cpu {
                pin_and_raise(cpu);
            }
            let idx = topo::ifindex(&pod_a, POD_IF)?;
            if use_live {
                match gen::run_live(gen, idx, bounds, stop) {
                    Ok(r) => return Ok((r, false)),
                    Err(e) if t.method == MethodChoice::Auto => {
                        eprintln!("xdp live frames unavailable ({e}); using AF_XDP");
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            let r = gen::run_afxdp(&t.template, t.vary, t.n_flows, idx, bounds, stop)?;
            Ok((r, use_live))
        })?;
        let (report, fell_back) = report;
        if t.stop.load(Ordering::Relaxed) {
            return Err(MeasureError::Interrupted);
        }
        if fell_back {
            self.fell_back.store(true, Ordering::Relaxed);
        }
        std::thread::sleep(DRAIN);
        let after = self.sink_counters()?;
        let drops = match (drops_before, self.ingress_drops()) {
            (Some(b), Some(a)) => Some(a.saturating_sub(b)),
            _ => None,
        };
        Ok(Sample::new(&report, &after.since(&before), drops))
    }

    /// Sends `count` frames of `t` (varied as `vary` over `n_flows`
    /// flows) from pod B towards pod A, unmeasured, through AF_XDP (it
    /// needs the per-flow fields the generator program may not vary) at
    /// [`REPLY_RATE`]; returns how many were sent. The `conntrack`
    /// scenario answers its connections this way.
    pub fn send_from_b(
        &self,
        t: &Template,
        vary: Vary,
        n_flows: u32,
        count: u64,
    ) -> Result<u64, MeasureError> {
        let pod_b = self.topo.pod_b.clone();
        let stop: &AtomicBool = &self.traffic.stop;
        let bounds = GenBounds {
            duration: REPLY_TIMEOUT,
            count: Some(count),
            rate_pps: Some(REPLY_RATE),
        };
        let report = topo::run_in(&pod_b, || -> Result<GenReport, MeasureError> {
            let idx = topo::ifindex(&pod_b, POD_IF)?;
            Ok(gen::run_afxdp(t, vary, n_flows, idx, &bounds, stop)?)
        })?;
        if stop.load(Ordering::Relaxed) {
            return Err(MeasureError::Interrupted);
        }
        std::thread::sleep(DRAIN);
        Ok(report.sent)
    }

    /// Drops so far at the switch's ingress: veth-a's receive drops (its
    /// ring, or a failed XDP redirect) and its XDP drops, plus what pod A's
    /// veth failed to hand over (`xdp_xmit_errors`).
    fn ingress_drops(&self) -> Option<u64> {
        let h = ethtool_stats(self.topo, &self.topo.host, VETH_A)?;
        let a = ethtool_stats(self.topo, &self.topo.pod_a, POD_IF)?;
        let get = |stats: &[(String, u64)], name: &str| {
            stats.iter().find(|(k, _)| k == name).map_or(0, |(_, v)| *v)
        };
        Some(
            get(&h, "rx_queue_0_drops")
                + get(&h, "rx_queue_0_xdp_drops")
                + get(&a, "tx_queue_0_xdp_xmit_errors"),
        )
    }
}

/// `ethtool -S dev` in namespace `ns` as (name, value) pairs.
fn ethtool_stats(topo: &Topology, ns: &str, dev: &str) -> Option<Vec<(String, u64)>> {
    let out = topo.exec(ns, &["ethtool", "-S", dev]).ok()?;
    Some(
        out.lines()
            .filter_map(|l| {
                let (k, v) = l.split_once(':')?;
                Some((k.trim().to_string(), v.trim().parse().ok()?))
            })
            .collect(),
    )
}

/// Pins the calling thread to `cpu` and gives it the highest priority, as
/// the anchor scripts do, so other work on the shared machine gets little
/// of the generator's core. Best effort: failures only cost precision.
pub fn pin_and_raise(cpu: usize) {
    let mut set = nix::sched::CpuSet::new();
    if set.set(cpu).is_ok() {
        let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set);
    }
    // Linux's setpriority(PRIO_PROCESS, tid) sets one thread's nice value;
    // renice does it without unsafe code here.
    let tid = nix::unistd::gettid().to_string();
    let _ = crate::ovs::run_bounded(
        std::process::Command::new("renice").args(["-n", "-20", "-p", &tid]),
        crate::ovs::CMD_TIMEOUT,
    );
}
