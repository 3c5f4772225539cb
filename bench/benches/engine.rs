//! Per-packet cost of the AF_XDP engine's own work (flow extraction,
//! pipeline, batching, frame accounting) without the kernel: ports are
//! in-memory loops that copy a template frame in on receive, as copy-mode
//! AF_XDP does, and free frames on transmit.
//!
//! The in-run peer is `plumbing`: the same ports and frame store driven by
//! a forwarder that sends every received frame to the other port with no
//! parsing or lookup, i.e. the floor of the engine's loop. Read the engine
//! figures as ratios to it. Each scenario runs with the translation cache
//! and without it, so the cache's gain is a ratio from the same run too.
//! `p2p_1flow/handoff` is p2p with port 1 served by one packet thread and
//! port 2 by another (`--pmd-threads 2`), their rounds run in turn: the
//! cost of handing every packet off, against `p2p_1flow/cached`.
//! `ct_2pass` sends every packet through `ct(commit,table=1)` and out
//! (1,024 established connections): two passes and a conntrack lookup,
//! the agent's path for pod traffic. `agent_pipeline` is `xbr-bench
//! --scenario pipeline` in memory: the agent's flows for a node of 100
//! pods, pod A to pod B through `ct(table=0)` (never committed) and six
//! more tables.

mod common;

use common::out;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use dataplane::control::{DpShared, PortMeta};
use dataplane::engine::{Desc, Engine, Frames, PortIo, BATCH};
use dataplane::memport::ArenaFrames;
use flowtable::cache::DEFAULT_ENTRIES;
use flowtable::{Field, FlowMod, FlowTables, Instructions, Match};
use ofproto::Datapath;
use std::os::fd::BorrowedFd;
use std::sync::Arc;

/// Distinct destination addresses the traffic cycles through.
const DESTINATIONS: u32 = 1024;

/// A 64-byte Ethernet/IPv4/UDP frame to 10.0.x.y.
fn frame(dst: u32) -> [u8; 64] {
    let mut f = [0u8; 64];
    f[..6].copy_from_slice(&[0x0a, 0x58, 0x0a, 0x80, 0x00, 0x03]);
    f[6..12].copy_from_slice(&[0x0a, 0x58, 0x0a, 0x80, 0x00, 0x02]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[16..18].copy_from_slice(&50u16.to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&[10, 128, 0, 2]);
    f[30..34].copy_from_slice(&(0x0a00_0000 | dst).to_be_bytes());
    f[34..36].copy_from_slice(&1234u16.to_be_bytes());
    f[36..38].copy_from_slice(&5678u16.to_be_bytes());
    f[38..40].copy_from_slice(&30u16.to_be_bytes());
    f
}

/// Receives a full batch of template frames on every call (copying each
/// into a fresh frame, like copy-mode RX) and frees whatever it transmits.
struct LoopPort {
    templates: Vec<[u8; 64]>,
    next: usize,
    receives: bool,
}

impl PortIo<ArenaFrames> for LoopPort {
    fn recv(&mut self, frames: &mut ArenaFrames, out: &mut [Desc]) -> usize {
        if !self.receives {
            return 0;
        }
        let mut n = 0;
        for slot in out.iter_mut() {
            let t = &self.templates[self.next % self.templates.len()];
            let Some(d) = frames.load(t) else { break };
            self.next = self.next.wrapping_add(1);
            *slot = d;
            n += 1;
        }
        n
    }

    fn send(&mut self, frames: &mut ArenaFrames, descs: &[Desc]) -> usize {
        for d in descs {
            frames.free(d.addr);
        }
        descs.len()
    }

    fn maintain(&mut self, _frames: &mut ArenaFrames) {}

    fn poll_fds<'a>(&'a self, _out: &mut Vec<BorrowedFd<'a>>) {}
}

fn ports(destinations: u32) -> Vec<(Arc<PortMeta>, LoopPort)> {
    let templates: Vec<[u8; 64]> = (0..destinations).map(frame).collect();
    numbered_ports([1, 2], templates)
}

/// Two ports numbered `numbers`, the first receiving `templates` in turn.
fn numbered_ports(numbers: [u32; 2], templates: Vec<[u8; 64]>) -> Vec<(Arc<PortMeta>, LoopPort)> {
    numbers
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            (
                Arc::new(PortMeta::new(p, format!("p{p}"), [2, 0, 0, 0, 0, p as u8])),
                LoopPort {
                    templates: templates.clone(),
                    next: 0,
                    receives: i == 0,
                },
            )
        })
        .collect()
}

/// One flow: in_port=1 -> output:2.
fn p2p_flows() -> Vec<FlowMod> {
    let mut m = Match::catch_all();
    m.set_exact(Field::InPort, 1);
    vec![FlowMod::add(0, 100, m, Instructions::apply(vec![out(2)]))]
}

fn engine(
    flows: &[FlowMod],
    destinations: u32,
    cache_entries: usize,
) -> Engine<ArenaFrames, LoopPort> {
    engine_on(flows, ports(destinations), cache_entries)
}

fn engine_on(
    flows: &[FlowMod],
    ports: Vec<(Arc<PortMeta>, LoopPort)>,
    cache_entries: usize,
) -> Engine<ArenaFrames, LoopPort> {
    let metas = ports.iter().map(|(m, _)| m.clone()).collect();
    let (shared, changes) = DpShared::new(1, metas).expect("eventfd");
    let mut engine = Engine::new(
        ArenaFrames::new(4 * BATCH as u32, 2048),
        ports,
        shared.clone(),
        changes,
    );
    let mut tables = FlowTables::new();
    for fm in flows {
        let changes = tables.flow_mod(fm).expect("valid flow");
        shared.publish(changes);
    }
    engine.apply_changes();
    engine.set_flow_cache(cache_entries);
    engine
}

/// `xbr-bench --scenario pipeline` in memory: the agent's flows for a
/// node of 100 pods (`bench::scenario::pipeline`), one UDP flow from
/// pod A (port 3, 10.128.0.2) to pod B (port 4, 10.128.0.3): tables 0
/// (`ct(table=0)`, never committed), 20, 27, 30, 31, 70 and 80.
fn agent_engine(cache_entries: usize) -> Engine<ArenaFrames, LoopPort> {
    use bench::scenario::pipeline::{flows, POD_A_PORT, POD_B_PORT};
    let text = flows(false).expect("the agent's flows");
    let mods: Vec<FlowMod> = text
        .lines()
        .map(|l| flowtable::text::parse_flow(l).expect("the agent's flow parses"))
        .collect();
    let mut f = frame(0);
    f[..6].copy_from_slice(&[0x0a, 0x58, 0x0a, 0x80, 0x00, 0x03]);
    f[30..34].copy_from_slice(&[10, 128, 0, 3]);
    let ports = numbered_ports([POD_A_PORT, POD_B_PORT], vec![f]);
    engine_on(&mods, ports, cache_entries)
}

/// Every IPv4 packet from port 1 through `ct(commit,table=1)`, then
/// out of port 2.
fn ct_flows() -> Vec<FlowMod> {
    [
        "table=0, priority=100, in_port=1, ip, actions=ct(commit,zone=1,table=1)",
        "table=1, priority=100, ip, actions=output:2",
    ]
    .iter()
    .map(|f| flowtable::text::parse_flow(f).expect("flow parses"))
    .collect()
}

/// Two engines, as two packet threads: port 1 is the first's, port 2 the
/// second's (each knows the other's by a stand-in that never receives).
fn handoff_engines() -> Vec<Engine<ArenaFrames, LoopPort>> {
    let all = ports(DESTINATIONS);
    let metas: Vec<Arc<PortMeta>> = all.iter().map(|(m, _)| m.clone()).collect();
    let (shared, ends) = DpShared::with_engines(1, metas.clone(), 2).expect("eventfds");
    let mut mesh = dataplane::engine::handoff::Handoffs::mesh(2);
    let mut engines = Vec::new();
    for ((me, end), (meta, io)) in ends.into_iter().enumerate().zip(all) {
        let mut e = Engine::new(
            ArenaFrames::new(4 * BATCH as u32, 2048),
            vec![(meta, io)],
            shared.clone(),
            end,
        );
        let other = 1 - me;
        let stand_in = LoopPort {
            templates: Vec::new(),
            next: 0,
            receives: false,
        };
        e.add_remote_port(metas[other].clone(), stand_in, other);
        e.set_handoffs(mesh.remove(0));
        engines.push(e);
    }
    let mut tables = FlowTables::new();
    for fm in p2p_flows() {
        shared.publish(tables.flow_mod(&fm).expect("valid flow"));
    }
    for e in &mut engines {
        e.apply_changes();
    }
    engines
}

/// The peer: receive a batch, hand it to the other port, nothing else.
fn plumbing_round(frames: &mut ArenaFrames, rx: &mut LoopPort, tx: &mut LoopPort) -> usize {
    let mut batch = [Desc::default(); BATCH];
    let n = rx.recv(frames, &mut batch);
    tx.send(frames, &batch[..n]);
    n
}

fn bench_engine(c: &mut Criterion) {
    let mut group = c.benchmark_group("engine");
    group.throughput(Throughput::Elements(BATCH as u64));

    let mut frames = ArenaFrames::new(4 * BATCH as u32, 2048);
    let mut loops = ports(DESTINATIONS);
    let (_, mut tx) = loops.pop().expect("port 2");
    let (_, mut rx) = loops.pop().expect("port 1");
    group.bench_function("plumbing", |b| {
        b.iter(|| assert_eq!(plumbing_round(&mut frames, &mut rx, &mut tx), BATCH))
    });

    let mut pair = handoff_engines();
    group.bench_function(BenchmarkId::new("p2p_1flow", "handoff"), |b| {
        b.iter(|| {
            assert_eq!(pair[0].round(), BATCH);
            assert_eq!(pair[1].round(), BATCH, "the owner outputs them all");
        })
    });

    // With the exact-match cache (the default) and without it (every
    // packet walks the tables): the cache's gain, measured in this run.
    for (mode, entries) in [("cached", DEFAULT_ENTRIES), ("uncached", 0)] {
        let mut e = engine(&p2p_flows(), DESTINATIONS, entries);
        group.bench_function(BenchmarkId::new("p2p_1flow", mode), |b| {
            b.iter(|| assert_eq!(e.round(), BATCH))
        });
        let mut e = engine(&ct_flows(), DESTINATIONS, entries);
        group.bench_function(BenchmarkId::new("ct_2pass", mode), |b| {
            b.iter(|| assert_eq!(e.round(), BATCH))
        });
        assert_eq!(e.drops.table_miss, 0);
        let mut e = agent_engine(entries);
        group.bench_function(BenchmarkId::new("agent_pipeline", mode), |b| {
            b.iter(|| assert_eq!(e.round(), BATCH))
        });
        assert_eq!(
            e.pmd.sent_packets, e.pmd.received,
            "every packet of pod A reaches pod B"
        );
        for n in [1_000u32, 10_000] {
            let mut e = engine(&common::three_table_flows(n), DESTINATIONS.min(n), entries);
            let id = BenchmarkId::new(format!("pipeline_3tables_{n}"), mode);
            group.bench_function(id, |b| b.iter(|| assert_eq!(e.round(), BATCH)));
            assert_eq!(
                e.drops.table_miss, 0,
                "every packet must hit the pipeline's flows"
            );
        }
    }
    group.finish();
}

criterion_group!(benches, bench_engine);
criterion_main!(benches);
