//! Generator traffic between two pods of an `xbr lab`: the packet rate
//! `labbench` reports beside iperf3's.
//!
//! iperf3 in UDP mode sends one datagram per system call from the pod's
//! socket, through the pod's whole IP stack: on this machine that bounds
//! what it measures at about 100 kpps whatever the switch does, and the
//! switch's own work competes with it for the sender's core. Here the
//! live-frames generator ([`crate::bpf::Generator`]) sends 64-byte UDP
//! frames out of pod A's `eth0` from the kernel, several million a second
//! when nothing stops them, and the sink ([`crate::bpf::Sink`]) counts
//! what reaches pod B's `eth0` (and drops it there): what is measured is
//! the path between them, pod A's node encapsulating into VXLAN and pod
//! B's decapsulating.
//!
//! The frames are pod A's own, as its stack would address them (pod B's
//! address is on-link in the cluster network, so its MAC is the
//! destination). The generator's program is pinned to an idle veth pair
//! made in pod A's namespace (see [`crate::bpf::Generator::pin`]); the
//! pair goes with the namespace, or when the [`PodPair`] is dropped.

use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use crate::bpf::{Generator, Sink};
use crate::gen::{self, GenBounds};
use crate::measure::{pin_and_raise, MeasureError, Sample};
use crate::ovs::{run_bounded, CMD_TIMEOUT};
use crate::packet::{FrameSpec, Proto, Vary};
use crate::topo::{self, POD_IF};

/// Frames in flight when the generator stops are given this long to land.
const DRAIN: Duration = Duration::from_millis(300);
/// The idle interface in pod A that holds the generator's program.
pub const PIN_IF: &str = "xbrb-gen-pin";
const PIN_PEER: &str = "xbrb-gen-pinp";
/// UDP ports of the frames (iperf3's, so captures read alike).
const SRC_PORT: u16 = 40000;
const DST_PORT: u16 = 5201;

/// One pod of a lab, as `lab.json` lists it.
#[derive(Debug, Clone)]
pub struct Pod {
    pub netns: String,
    pub mac: [u8; 6],
    pub ip: Ipv4Addr,
}

/// The generator in pod A and the sink in pod B; see the module
/// documentation.
pub struct PodPair {
    pod_a: String,
    gen: Generator,
    sink: Sink,
}

impl PodPair {
    /// Loads the generator for 64-byte frames from `a` to `b` spread over
    /// `n_flows` source ports, and attaches the sink to `b`'s `eth0`.
    pub fn new(a: &Pod, b: &Pod, n_flows: u32) -> Result<PodPair, MeasureError> {
        let template = FrameSpec {
            proto: Proto::Udp,
            pkt_size: 64,
            src_mac: a.mac,
            dst_mac: b.mac,
            src_ip: a.ip,
            dst_ip: b.ip,
            src_port: SRC_PORT,
            dst_port: DST_PORT,
            vxlan: None,
        }
        .build()
        .map_err(|e| MeasureError::Setup(format!("frame template: {e}")))?;
        let sink = topo::run_in(&b.netns, || -> Result<Sink, MeasureError> {
            let idx = topo::ifindex(&b.netns, POD_IF)?;
            Ok(Sink::attach(idx, template.tag_off, None, None)?)
        })?;
        let vary = Vary {
            src_port: n_flows > 1,
            ..Vary::default()
        };
        let mut gen = Generator::load(&template, n_flows, vary)?;
        let pinned = make_pin_pair(&a.netns).and_then(|()| {
            topo::run_in(&a.netns, || -> Result<(), MeasureError> {
                let idx = topo::ifindex(&a.netns, PIN_IF)?;
                Ok(gen.pin(idx)?)
            })
        });
        if let Err(e) = pinned {
            // Still correct, only burstier: each call sleeps ~20 ms.
            eprintln!("warning: generator not pinned in the XDP dispatcher ({e}); live-frames calls will sleep in synchronize_rcu()");
        }
        Ok(PodPair {
            pod_a: a.netns.clone(),
            gen,
            sink,
        })
    }

    /// Sends for `duration` at `rate_pps` (`None`: as fast as the
    /// generator can), from `cpu` if given, and counts what pod B received.
    pub fn run(
        &self,
        duration: Duration,
        rate_pps: Option<u64>,
        cpu: Option<usize>,
    ) -> Result<Sample, MeasureError> {
        self.run_until(duration, rate_pps, cpu, &AtomicBool::new(false))
    }

    /// [`PodPair::run`], ending early once `stop` is set.
    pub fn run_until(
        &self,
        duration: Duration,
        rate_pps: Option<u64>,
        cpu: Option<usize>,
        stop: &AtomicBool,
    ) -> Result<Sample, MeasureError> {
        let before = self.sink.counters()?;
        let bounds = GenBounds {
            duration,
            count: None,
            rate_pps,
        };
        let report = topo::run_in(&self.pod_a, || -> Result<_, MeasureError> {
            if let Some(cpu) = cpu {
                pin_and_raise(cpu);
            }
            let idx = topo::ifindex(&self.pod_a, POD_IF)?;
            Ok(gen::run_live(&self.gen, idx, &bounds, stop)?)
        })?;
        std::thread::sleep(DRAIN);
        let got = self.sink.counters()?.since(&before);
        Ok(Sample {
            method: report.method,
            sent: report.sent,
            received: got.tagged,
            bytes: got.bytes,
            elapsed: report.elapsed,
            p50_ns: got.latency_quantile_ns(0.50),
            p99_ns: got.latency_quantile_ns(0.99),
            ingress_drops: None,
        })
    }
}

impl PodPair {
    /// The generator's frames pod B received so far (the sink's count),
    /// e.g. to see when a flow's first frame came through.
    pub fn received(&self) -> Result<u64, MeasureError> {
        Ok(self.sink.counters()?.tagged)
    }
}

impl Drop for PodPair {
    fn drop(&mut self) {
        // The program stays attached to the pair until the pair goes.
        let _ = run_bounded(
            Command::new("ip").args(["-n", &self.pod_a, "link", "del", PIN_IF]),
            CMD_TIMEOUT,
        );
    }
}

/// Makes the idle veth pair (both ends down, in pod A).
fn make_pin_pair(netns: &str) -> Result<(), MeasureError> {
    let args = [
        "-n", netns, "link", "add", PIN_IF, "type", "veth", "peer", "name", PIN_PEER,
    ];
    run_bounded(Command::new("ip").args(args), CMD_TIMEOUT)
        .and_then(|o| o.ok())
        .map(|_| ())
        .map_err(|e| MeasureError::Setup(format!("making {PIN_IF} in {netns}: {e}")))
}
