//! The packet engine over in-memory ports: forwarding, copies for several
//! outputs, rewrites, drops and their reasons, counters, and frame
//! accounting (every frame the engine takes comes back to the store).

mod common;

use common::Rig;
use dataplane::control::port_config;
use flowtable::{Action, Field, FlowFilter, FlowMod, Instructions, Match};
use ofproto::Datapath;
use std::sync::atomic::Ordering;

const N_FRAMES: u32 = 256;
const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];

/// An Ethernet/IPv4/UDP frame from A to B with a correct IP checksum.
fn udp_frame(payload_len: usize) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&MAC_B);
    f.extend_from_slice(&MAC_A);
    f.extend_from_slice(&[0x08, 0x00]);
    let total = (20 + 8 + payload_len) as u16;
    let mut ip = vec![
        0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    let sum = ip
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum::<u32>();
    let sum = (sum & 0xffff) + (sum >> 16);
    let sum = !((sum & 0xffff) + (sum >> 16)) as u16;
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&[0x30, 0x39, 0x00, 0x35]);
    f.extend_from_slice(&(8 + payload_len as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend((0..payload_len).map(|i| i as u8));
    f
}

/// Adds a flow to table 0 (in_port exact or any) with `actions`.
fn flow(rig: &mut Rig, priority: u16, in_port: Option<u32>, actions: Vec<Action>) {
    let mut m = Match::catch_all();
    if let Some(p) = in_port {
        m.set_exact(Field::InPort, u64::from(p));
    }
    let fm = FlowMod::add(0, priority, m, Instructions::apply(actions));
    let changes = rig.tables.flow_mod(&fm).expect("valid flow");
    rig.apply(changes);
}

fn out(port: u32) -> Action {
    Action::Output { port, max_len: 0 }
}

#[test]
fn forwards_unchanged_and_counts_ports_and_rule() {
    let mut rig = Rig::new(2, N_FRAMES);
    flow(&mut rig, 100, Some(1), vec![out(2)]);
    let frame = udp_frame(64);
    for _ in 0..10 {
        rig.inject(1, &frame);
    }
    assert_eq!(rig.engine.round(), 10);
    let sent = rig.sent(2);
    assert_eq!(sent.len(), 10);
    assert!(sent.iter().all(|f| *f == frame));
    assert!(rig.sent(1).is_empty());
    assert_eq!(rig.free_frames(), N_FRAMES as usize, "a frame leaked");

    let s1 = &rig.metas[0].stats;
    let s2 = &rig.metas[1].stats;
    assert_eq!(s1.rx_packets.load(Ordering::Relaxed), 10);
    assert_eq!(s1.rx_bytes.load(Ordering::Relaxed), 10 * frame.len() as u64);
    assert_eq!(s2.tx_packets.load(Ordering::Relaxed), 10);
    // The first packet was translated (and counted) by the pipeline, the
    // other nine came from the translation cache, whose counts reach the
    // flow when the thread goes idle.
    let rules = rig.tables.flows(&FlowFilter::default());
    assert_eq!(rules[0].stats.read(), (1, frame.len() as u64));
    assert_eq!(rig.engine.round(), 0);
    assert_eq!(rules[0].stats.read(), (10, 10 * frame.len() as u64));
    assert_eq!(
        rig.engine.flow_cache_stats().map(|s| (s.hits, s.misses)),
        Some((9, 1))
    );
}

#[test]
fn several_outputs_get_copies_and_rewrites_apply_only_after_them() {
    let mut rig = Rig::new(3, N_FRAMES);
    let new_dst = 0x0200_0000_00ccu64;
    flow(
        &mut rig,
        100,
        Some(1),
        vec![
            out(2),
            Action::SetField {
                field: Field::EthDst,
                value: new_dst,
            },
            out(3),
        ],
    );
    let frame = udp_frame(32);
    rig.inject(1, &frame);
    rig.engine.round();
    let to2 = rig.sent(2);
    let to3 = rig.sent(3);
    assert_eq!(to2, vec![frame.clone()], "output before the rewrite");
    assert_eq!(to3.len(), 1);
    assert_eq!(&to3[0][..6], &[2, 0, 0, 0, 0, 0xcc]);
    assert_eq!(&to3[0][6..], &frame[6..]);
    assert_eq!(rig.free_frames(), N_FRAMES as usize);
}

#[test]
fn in_port_output_hairpins_and_plain_output_to_in_port_is_dropped() {
    let mut rig = Rig::new(2, N_FRAMES);
    flow(
        &mut rig,
        100,
        Some(1),
        vec![out(flowtable::action::port::IN_PORT)],
    );
    flow(&mut rig, 100, Some(2), vec![out(2)]);
    let frame = udp_frame(10);
    rig.inject(1, &frame);
    rig.inject(2, &frame);
    rig.engine.round();
    assert_eq!(rig.sent(1).len(), 1, "IN_PORT sends back out");
    // OpenFlow: output to the ingress port without IN_PORT is not sent.
    assert_eq!(rig.sent(2).len(), 0);
    assert_eq!(rig.free_frames(), N_FRAMES as usize);
}

#[test]
fn table_miss_and_explicit_drop_are_counted_separately() {
    let mut rig = Rig::new(2, N_FRAMES);
    flow(&mut rig, 100, Some(2), vec![]);
    let frame = udp_frame(10);
    rig.inject(1, &frame);
    rig.inject(2, &frame);
    rig.inject(2, &frame);
    rig.engine.round();
    assert_eq!(rig.engine.drops.table_miss, 1);
    assert_eq!(rig.engine.drops.explicit, 2);
    assert!(rig.sent(1).is_empty() && rig.sent(2).is_empty());
    assert_eq!(rig.free_frames(), N_FRAMES as usize);
}

#[test]
fn full_tx_ring_drops_and_frees() {
    let mut rig = Rig::new(2, N_FRAMES);
    flow(&mut rig, 100, Some(1), vec![out(2)]);
    rig.engine.port_io_mut(1).expect("port 2").tx_room = Some(3);
    let frame = udp_frame(10);
    for _ in 0..8 {
        rig.inject(1, &frame);
    }
    rig.engine.round();
    assert_eq!(rig.sent(2).len(), 3);
    assert_eq!(rig.engine.drops.tx_full, 5);
    assert_eq!(rig.metas[1].stats.tx_dropped.load(Ordering::Relaxed), 5);
    assert_eq!(rig.free_frames(), N_FRAMES as usize);
}

#[test]
fn port_mod_down_and_no_fwd_stop_traffic() {
    let mut rig = Rig::new(2, N_FRAMES);
    flow(&mut rig, 100, Some(1), vec![out(2)]);
    let frame = udp_frame(10);

    rig.metas[1]
        .config
        .store(port_config::NO_FWD, Ordering::Relaxed);
    rig.inject(1, &frame);
    rig.engine.round();
    assert!(rig.sent(2).is_empty());

    rig.metas[1].config.store(0, Ordering::Relaxed);
    rig.metas[0]
        .config
        .store(port_config::NO_RECV, Ordering::Relaxed);
    rig.inject(1, &frame);
    rig.engine.round();
    assert!(rig.sent(2).is_empty());
    assert_eq!(rig.engine.drops.port_down, 2);

    rig.metas[0].config.store(0, Ordering::Relaxed);
    rig.inject(1, &frame);
    rig.engine.round();
    assert_eq!(rig.sent(2).len(), 1);
    assert_eq!(rig.free_frames(), N_FRAMES as usize);
}

#[test]
fn output_to_a_port_that_does_not_exist_is_counted() {
    let mut rig = Rig::new(2, N_FRAMES);
    flow(&mut rig, 100, Some(1), vec![out(7)]);
    rig.inject(1, &udp_frame(10));
    rig.engine.round();
    assert_eq!(rig.engine.drops.bad_output_port, 1);
    assert_eq!(rig.free_frames(), N_FRAMES as usize);
}

#[test]
fn runt_and_garbage_frames_never_panic() {
    let mut rig = Rig::new(2, N_FRAMES);
    // Forward everything; UDP frames through rewrites, so hostile frames
    // reach the checksum code too.
    flow(&mut rig, 1, None, vec![out(2)]);
    let mut udp = Match::catch_all();
    udp.set_exact(Field::EthType, 0x0800);
    udp.set_exact(Field::IpProto, 17);
    let fm = FlowMod::add(
        0,
        10,
        udp,
        Instructions::apply(vec![
            Action::SetField {
                field: Field::IpDst,
                value: 0x0a00_0009,
            },
            Action::SetField {
                field: Field::TpDst,
                value: 99,
            },
            out(2),
        ]),
    );
    let changes = rig.tables.flow_mod(&fm).expect("valid flow");
    rig.shared.publish(changes);
    rig.engine.apply_changes();
    let good = udp_frame(20);
    let mut frames: Vec<Vec<u8>> = (0..good.len()).map(|n| good[..n].to_vec()).collect();
    // An IHL below 5 and a total length beyond the frame.
    let mut bad_ihl = good.clone();
    bad_ihl[14] = 0x41;
    frames.push(bad_ihl);
    let mut long_total = good.clone();
    long_total[16] = 0xff;
    frames.push(long_total);
    for chunk in frames.chunks(32) {
        for f in chunk {
            rig.inject(1, f);
        }
        rig.engine.round();
    }
    assert_eq!(rig.sent(2).len(), frames.len());
    assert_eq!(rig.free_frames(), N_FRAMES as usize);
}

#[test]
fn flows_removed_between_rounds_take_effect_on_the_next_round() {
    let mut rig = Rig::new(2, N_FRAMES);
    flow(&mut rig, 100, Some(1), vec![out(2)]);
    let frame = udp_frame(10);
    rig.inject(1, &frame);
    rig.engine.round();
    assert_eq!(rig.sent(2).len(), 1);

    let mut del = FlowMod::add(0, 0, Match::catch_all(), Instructions::default());
    del.command = flowtable::FlowModCommand::Delete;
    let changes = rig.tables.flow_mod(&del).expect("delete");
    let seq = rig.shared.publish(changes);
    rig.engine.apply_changes();
    // The control plane's barrier returns once the engine applied it.
    rig.shared.sync(seq);
    rig.inject(1, &frame);
    rig.engine.round();
    assert!(rig.sent(2).is_empty());
    assert_eq!(rig.engine.drops.table_miss, 1);
}

/// A frame from MAC `src` to MAC `dst` (the UDP test frame, re-addressed).
fn frame_between(src: [u8; 6], dst: [u8; 6]) -> Vec<u8> {
    let mut f = udp_frame(18);
    f[0..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    f
}

const BROADCAST: [u8; 6] = [0xff; 6];

#[test]
fn normal_learns_and_stops_flooding() {
    let mut rig = Rig::new(3, N_FRAMES);
    flow(
        &mut rig,
        0,
        None,
        vec![out(flowtable::action::port::NORMAL)],
    );
    // Unknown destinations flood (not back out of the input port).
    rig.inject(1, &frame_between(MAC_A, BROADCAST));
    rig.engine.round();
    assert_eq!(
        (rig.sent(1).len(), rig.sent(2).len(), rig.sent(3).len()),
        (0, 1, 1)
    );
    // A was learned on 1: B's reply goes there only, and B is learned.
    rig.inject(2, &frame_between(MAC_B, MAC_A));
    rig.engine.round();
    assert_eq!(
        (rig.sent(1).len(), rig.sent(2).len(), rig.sent(3).len()),
        (1, 0, 0)
    );
    rig.inject(1, &frame_between(MAC_A, MAC_B));
    rig.engine.round();
    assert_eq!(
        (rig.sent(1).len(), rig.sent(2).len(), rig.sent(3).len()),
        (0, 1, 0)
    );
    assert_eq!(rig.free_frames(), N_FRAMES as usize, "a frame leaked");
}

#[test]
fn fail_open_forwards_by_normal_whatever_the_flows() {
    use ofproto::Datapath;
    let mut rig = Rig::new(2, N_FRAMES);
    flow(&mut rig, 100, None, vec![]); // drop everything
    rig.inject(1, &frame_between(MAC_A, BROADCAST));
    rig.engine.round();
    assert!(rig.sent(2).is_empty());
    rig.shared.set_fail_open(true);
    rig.inject(1, &frame_between(MAC_A, BROADCAST));
    rig.engine.round();
    assert_eq!(rig.sent(2).len(), 1);
    rig.shared.set_fail_open(false);
    rig.inject(1, &frame_between(MAC_A, BROADCAST));
    rig.engine.round();
    assert!(rig.sent(2).is_empty(), "back to the flows");
    assert_eq!(rig.free_frames(), N_FRAMES as usize, "a frame leaked");
}

#[test]
fn packet_out_runs_its_actions_and_controller_copies_are_queued() {
    use ofproto::Datapath;
    let mut rig = Rig::new(2, N_FRAMES);
    flow(
        &mut rig,
        5,
        Some(1),
        vec![
            Action::Output {
                port: flowtable::action::port::CONTROLLER,
                max_len: 20,
            },
            out(2),
        ],
    );
    let upcalls = rig.shared.upcalls();
    let frame = udp_frame(18);
    rig.inject(1, &frame);
    rig.engine.round();
    assert_eq!(rig.sent(2), vec![frame.clone()]);
    let up = upcalls.try_recv().expect("an upcall");
    assert_eq!(
        (up.in_port, up.reason, up.total_len),
        (1, 1, frame.len() as u16)
    );
    assert_eq!(up.data, frame[..20]);
    // A controller's packet, through the tables (in_port=1 flow) and to 1.
    rig.shared
        .packet_out(
            1,
            Vec::new(),
            vec![
                out(flowtable::action::port::TABLE),
                out(flowtable::action::port::IN_PORT),
            ],
            frame.clone(),
        )
        .expect("queued");
    rig.engine.round();
    assert_eq!(rig.sent(2), vec![frame.clone()]);
    assert_eq!(rig.sent(1), vec![frame.clone()]);
    assert!(
        upcalls.try_recv().is_ok(),
        "the table's controller action ran too"
    );
    // OpenFlow 1.5's packet metadata: the packet starts with reg0=2,
    // which its action outputs to.
    rig.shared
        .packet_out(
            1,
            vec![(flowtable::Field::Reg(0), 2)],
            vec![Action::OutputReg {
                src: flowtable::SubField {
                    field: flowtable::Field::Reg(0),
                    ofs: 0,
                    nbits: 32,
                    named: None,
                },
                max_len: 0,
            }],
            frame.clone(),
        )
        .expect("queued");
    rig.engine.round();
    assert_eq!(rig.sent(2), vec![frame.clone()]);
    assert!(rig.sent(1).is_empty());
    assert_eq!(rig.free_frames(), N_FRAMES as usize, "a frame leaked");
}

/// A long change list (an agent bundle) is applied in chunks, taking the
/// rings' frames aside in between (so a busy port's ring does not
/// overflow); those frames then meet only the new tables. A short list
/// leaves the rings alone.
#[test]
fn a_long_change_list_holds_the_rings_and_the_new_tables_process_them() {
    let mut rig = Rig::new(3, N_FRAMES);
    flow(&mut rig, 100, Some(1), vec![out(2)]);
    let frame = udp_frame(16);
    for _ in 0..5 {
        rig.inject(1, &frame);
    }
    flow(&mut rig, 50, Some(2), vec![out(1)]);
    assert_eq!(
        rig.engine.port_io_mut(0).expect("port").rx.len(),
        5,
        "a short list took frames off the ring"
    );
    assert_eq!(rig.engine.round(), 5);
    assert_eq!(rig.sent(2).len(), 5);

    for _ in 0..40 {
        rig.inject(1, &frame);
    }
    let mut m = Match::catch_all();
    m.set_exact(Field::InPort, 1);
    let mut changes = rig
        .tables
        .flow_mod(&FlowMod::add(0, 100, m, Instructions::apply(vec![out(3)])))
        .expect("valid flow");
    for i in 0..1000u32 {
        let mut m = Match::catch_all();
        m.set_exact(Field::EthType, 0x0800);
        m.set_exact(Field::IpDst, u64::from(0x0ac8_0000 | i));
        let fm = FlowMod::add(0, 200, m, Instructions::default());
        changes.extend(rig.tables.flow_mod(&fm).expect("valid flow"));
    }
    rig.shared.publish(changes);
    rig.engine.apply_changes();
    assert!(
        rig.engine.port_io_mut(0).expect("port").rx.is_empty(),
        "the ring was not drained while the tables changed"
    );
    assert_eq!(rig.engine.round(), 40);
    assert_eq!(rig.sent(3).len(), 40, "held frames met the old tables");
    assert!(rig.sent(2).is_empty());
    assert_eq!(rig.free_frames(), N_FRAMES as usize, "a frame leaked");
}
