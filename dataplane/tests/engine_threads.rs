//! Two packet threads over in-memory ports: each serves its own ports and
//! hands off outputs to the other's; both apply every change before a
//! barrier returns; every port's counters add up whoever counted.

use dataplane::control::{port_config, ChangeReceiver, DpShared, PortMeta};
use dataplane::engine::handoff::{Handoffs, MAILBOX_PACKETS};
use dataplane::engine::Engine;
use dataplane::memport::{ArenaFrames, MemPort};
use flowtable::{Change, FlowTables};
use ofproto::Datapath;
use std::sync::Arc;

const N_FRAMES: u32 = 256;

/// Ports 1 and 2 served by thread 0, 3 and 4 by thread 1; each thread
/// knows the other's ports by stand-ins.
struct TwoThreads {
    engines: Vec<Engine<ArenaFrames, MemPort>>,
    shared: Arc<DpShared>,
    metas: Vec<Arc<PortMeta>>,
    tables: FlowTables,
}

fn owner_of(ofport: u32) -> usize {
    if ofport <= 2 {
        0
    } else {
        1
    }
}

impl TwoThreads {
    fn new() -> TwoThreads {
        let metas: Vec<Arc<PortMeta>> = (1..=4)
            .map(|p| Arc::new(PortMeta::new(p, format!("p{p}"), [2, 0, 0, 0, 1, p as u8])))
            .collect();
        let (shared, ends): (Arc<DpShared>, Vec<ChangeReceiver>) =
            DpShared::with_engines(1, metas.clone(), 2).expect("eventfds");
        let mut mesh = Handoffs::mesh(2);
        let meters = Arc::new(dataplane::meter::MeterBank::default());
        let mut engines = Vec::new();
        for (me, end) in ends.into_iter().enumerate() {
            let own = metas
                .iter()
                .filter(|m| owner_of(m.ofport) == me)
                .map(|m| (m.clone(), MemPort::default()))
                .collect();
            let mut e = Engine::new(ArenaFrames::new(N_FRAMES, 2048), own, shared.clone(), end);
            for m in metas.iter().filter(|m| owner_of(m.ofport) != me) {
                e.add_remote_port(m.clone(), MemPort::default(), owner_of(m.ofport));
            }
            e.set_handoffs(mesh.remove(0));
            e.set_meter_bank(meters.clone());
            engines.push(e);
        }
        TwoThreads {
            engines,
            shared,
            metas,
            tables: FlowTables::new(),
        }
    }

    fn apply(&mut self, changes: Vec<Change>) {
        let seq = self.shared.publish(changes);
        for e in &mut self.engines {
            e.apply_changes();
        }
        self.shared.sync(seq);
    }

    fn flow(&mut self, text: &str) {
        let fm = flowtable::text::parse_flow(text).expect("valid flow text");
        let changes = self.tables.flow_mod(&fm).expect("valid flow");
        self.apply(changes);
    }

    /// The position of `ofport` in its owner's port list (own ports come
    /// first, in order).
    fn io(&mut self, ofport: u32) -> &mut MemPort {
        let owner = owner_of(ofport);
        let pos = (ofport - 1) as usize - owner * 2;
        self.engines[owner].port_io_mut(pos).expect("own port")
    }

    fn inject(&mut self, ofport: u32, frame: &[u8]) {
        let owner = owner_of(ofport);
        let desc = self.engines[owner]
            .frames_mut()
            .load(frame)
            .expect("a free frame");
        self.io(ofport).rx.push_back(desc);
    }

    /// Rounds of both threads: the sender's, then the owner's.
    fn rounds(&mut self) {
        for _ in 0..2 {
            for e in &mut self.engines {
                e.round();
            }
        }
    }

    fn sent(&mut self, ofport: u32) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.io(ofport).sent)
    }

    fn free_frames(&mut self) -> [usize; 2] {
        [
            self.engines[0].frames_mut().free_frames(),
            self.engines[1].frames_mut().free_frames(),
        ]
    }
}

fn frame(tag: u8) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 0x0b, 0x02, 0, 0, 0, 0, 0x0a, 0x88, 0xb5];
    f.extend(std::iter::repeat_n(tag, 50));
    f
}

#[test]
fn an_output_to_the_other_threads_port_leaves_by_its_owner() {
    let mut t = TwoThreads::new();
    t.flow("in_port=1,actions=output:3");
    t.flow("in_port=4,actions=output:2");
    for i in 0..5 {
        t.inject(1, &frame(i));
    }
    t.inject(4, &frame(9));
    t.rounds();
    assert_eq!(
        t.sent(3),
        (0..5).map(frame).collect::<Vec<_>>(),
        "in order, unchanged"
    );
    assert_eq!(t.sent(2), [frame(9)]);
    // The stand-ins never transmit.
    for e in &mut t.engines {
        for i in 2..4 {
            assert!(e.port_io_mut(i).expect("stand-in").sent.is_empty());
        }
    }
    assert_eq!(t.free_frames(), [N_FRAMES as usize; 2], "a frame leaked");
    let counts = |p: u32| {
        let c = t.shared.port_stats(p).into_iter().next().expect("the port");
        (c.rx_packets, c.tx_packets)
    };
    assert_eq!(counts(1), (5, 0));
    assert_eq!(counts(3), (0, 5));
    assert_eq!(counts(4), (1, 0));
    assert_eq!(counts(2), (0, 1));
}

#[test]
fn a_flood_reaches_every_port_once_whichever_thread_serves_it() {
    let mut t = TwoThreads::new();
    t.flow("in_port=3,actions=flood");
    t.inject(3, &frame(1));
    t.rounds();
    for p in [1, 2, 4] {
        assert_eq!(t.sent(p), [frame(1)], "port {p}");
    }
    assert!(t.sent(3).is_empty(), "not back to the ingress port");
    assert_eq!(t.free_frames(), [N_FRAMES as usize; 2]);
}

#[test]
fn a_packet_out_runs_on_thread_zero_and_reaches_thread_ones_port() {
    let mut t = TwoThreads::new();
    t.shared
        .packet_out(
            1,
            Vec::new(),
            vec![flowtable::Action::Output {
                port: 4,
                max_len: 0,
            }],
            frame(7),
        )
        .expect("queued");
    t.rounds();
    assert_eq!(t.sent(4), [frame(7)]);
    assert_eq!(t.free_frames(), [N_FRAMES as usize; 2]);
}

#[test]
fn a_down_port_of_the_other_thread_drops_and_counts_there() {
    let mut t = TwoThreads::new();
    t.flow("in_port=1,actions=output:3");
    t.metas[2]
        .config
        .store(port_config::PORT_DOWN, std::sync::atomic::Ordering::Relaxed);
    t.inject(1, &frame(1));
    t.rounds();
    assert!(t.sent(3).is_empty());
    let c = t.shared.port_stats(3).remove(0);
    assert_eq!((c.tx_packets, c.tx_dropped), (0, 1));
}

#[test]
fn outputs_beyond_a_full_mailbox_are_dropped_and_counted_on_the_port() {
    let mut t = TwoThreads::new();
    t.flow("in_port=1,actions=output:3");
    // Thread 0 runs alone: its deliveries pile up until the mailbox is
    // full, then whole rounds' outputs are dropped.
    let mut offered = 0;
    while offered < MAILBOX_PACKETS + 128 {
        for _ in 0..64 {
            t.inject(1, &frame(0));
        }
        offered += 64;
        t.engines[0].round();
    }
    t.engines[1].round();
    let delivered = t.sent(3).len();
    assert_eq!(delivered, MAILBOX_PACKETS);
    let c = t.shared.port_stats(3).remove(0);
    assert_eq!(c.tx_packets, MAILBOX_PACKETS as u64);
    assert_eq!(c.tx_dropped, (offered - MAILBOX_PACKETS) as u64);
    assert_eq!(t.free_frames(), [N_FRAMES as usize; 2]);
}

#[test]
fn a_meter_limits_what_both_threads_carry_together() {
    use flowtable::meter::meter_flags::{BURST, PKTPS};
    use flowtable::{MeterBand, MeterBandType, MeterMod, MeterModCommand};
    let mut t = TwoThreads::new();
    let mm = MeterMod {
        command: MeterModCommand::Add,
        flags: PKTPS | BURST,
        meter_id: 1,
        bands: vec![MeterBand {
            band_type: MeterBandType::Drop,
            // Slow enough that the test's rounds refill nothing.
            rate: 1,
            burst_size: 6,
        }],
    };
    let changes = t.tables.meter_mod(&mm).expect("valid meter");
    t.apply(changes);
    t.flow("in_port=1,actions=meter:1,output:2");
    t.flow("in_port=3,actions=meter:1,output:4");
    for _ in 0..5 {
        t.inject(1, &frame(1));
        t.inject(3, &frame(3));
    }
    t.rounds();
    let passed = t.sent(2).len() + t.sent(4).len();
    assert_eq!(passed, 6, "one bucket for both threads");
    let dropped: u64 = t.engines.iter().map(|e| e.drops.meter).sum();
    assert_eq!(dropped, 4);
}
