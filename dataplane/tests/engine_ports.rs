//! Ports added to and removed from a running engine (`PortOp`), over
//! in-memory ports: outputs reach a port once it is added and are dropped
//! as bad outputs once it is gone, LOCAL (0xfffffffe) works as a port
//! number, the removed port comes back to the caller, and frames handed
//! back with `Reclaim` return to the store.

use crossbeam::channel::{bounded, unbounded};
use dataplane::control::{DpShared, PortMeta};
use dataplane::engine::{Engine, Frames, PortOp};
use dataplane::memport::{ArenaFrames, MemPort};
use flowtable::action::port::LOCAL;
use flowtable::{Action, Field, FlowMod, FlowTables, Instructions, Match};
use ofproto::Datapath;
use std::sync::Arc;

const N_FRAMES: u32 = 64;

fn frame() -> Vec<u8> {
    // Broadcast Ethernet with an unknown EtherType: parsed, never rewritten.
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x88, 0xb5]);
    f.extend_from_slice(&[0u8; 50]);
    f
}

fn meta(ofport: u32) -> Arc<PortMeta> {
    Arc::new(PortMeta::new(
        ofport,
        format!("p{ofport}"),
        [2, 0, 0, 0, 0, 9],
    ))
}

fn out(port: u32) -> Action {
    Action::Output { port, max_len: 0 }
}

#[test]
fn ports_join_and_leave_a_running_engine() {
    let first = meta(1);
    let (shared, changes) = DpShared::new(1, vec![first.clone()]).expect("eventfd");
    let mut engine: Engine<ArenaFrames, MemPort> = Engine::new(
        ArenaFrames::new(N_FRAMES, 2048),
        vec![(first, MemPort::default())],
        shared.clone(),
        changes,
    );
    let (ops, rx) = unbounded();
    engine.set_port_ops(rx);
    let mut tables = FlowTables::new();
    for (in_port, to) in [(1u32, 3u32), (3, LOCAL)] {
        let mut m = Match::catch_all();
        m.set_exact(Field::InPort, u64::from(in_port));
        let fm = FlowMod::add(0, 100, m, Instructions::apply(vec![out(to)]));
        shared.publish(tables.flow_mod(&fm).expect("valid flow"));
    }
    engine.apply_changes();

    let send = |engine: &mut Engine<ArenaFrames, MemPort>, idx: usize| {
        let d = engine.frames_mut().load(&frame()).expect("a free frame");
        engine.port_io_mut(idx).expect("port").rx.push_back(d);
        engine.round();
    };

    // Port 3 does not exist yet: the output is a bad one.
    send(&mut engine, 0);
    assert_eq!(engine.drops.bad_output_port, 1);

    // Added between rounds, it receives, and LOCAL (index 2) too.
    for m in [meta(3), meta(LOCAL)] {
        ops.send(PortOp::Add {
            meta: m,
            io: MemPort::default(),
        })
        .unwrap();
    }
    engine.apply_changes();
    send(&mut engine, 0);
    assert_eq!(engine.port_io_mut(1).unwrap().sent.len(), 1);
    send(&mut engine, 1);
    assert_eq!(engine.port_io_mut(2).unwrap().sent.len(), 1, "LOCAL");

    // Removed: the port comes back with what it sent; outputs to it are
    // bad again.
    let (done, back) = bounded(1);
    ops.send(PortOp::Remove { ofport: 3, done }).unwrap();
    engine.apply_changes();
    let removed = back.recv().unwrap().expect("port 3 came back");
    assert_eq!(removed.sent.len(), 1);
    send(&mut engine, 0);
    assert_eq!(engine.drops.bad_output_port, 2);
    // Removing it again finds nothing.
    let (done, back) = bounded(1);
    ops.send(PortOp::Remove { ofport: 3, done }).unwrap();
    engine.apply_changes();
    assert!(back.recv().unwrap().is_none());

    // Frames a closed port held go back to the store.
    let lent: Vec<u64> = (0..4)
        .map(|_| engine.frames_mut().alloc().expect("frame"))
        .collect();
    let before = engine.frames_mut().free_frames();
    ops.send(PortOp::Reclaim(lent)).unwrap();
    engine.apply_changes();
    assert_eq!(engine.frames_mut().free_frames(), before + 4);
    assert_eq!(engine.frames_mut().free_frames(), N_FRAMES as usize);
}
