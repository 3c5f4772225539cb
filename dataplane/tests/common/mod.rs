//! The packet engine over in-memory ports, as the engine tests drive it.

#![allow(dead_code)]

use dataplane::control::{ChangeReceiver, DpShared, PortMeta};
use dataplane::engine::Engine;
use dataplane::memport::{ArenaFrames, MemPort};
use flowtable::{Change, FlowTables};
use ofproto::Datapath;
use std::sync::Arc;

/// An engine with ports 1..=n on in-memory wires, its control-plane
/// tables, and the channel between them.
pub struct Rig {
    pub engine: Engine<ArenaFrames, MemPort>,
    pub shared: Arc<DpShared>,
    pub metas: Vec<Arc<PortMeta>>,
    pub tables: FlowTables,
}

impl Rig {
    /// Ports with ofports 1..=n over an arena of `frames` frames.
    pub fn new(n: u32, frames: u32) -> Rig {
        let metas: Vec<Arc<PortMeta>> = (1..=n)
            .map(|p| Arc::new(PortMeta::new(p, format!("p{p}"), [2, 0, 0, 0, 1, p as u8])))
            .collect();
        let (shared, changes): (Arc<DpShared>, ChangeReceiver) =
            DpShared::new(1, metas.clone()).expect("eventfd");
        let ports = metas
            .iter()
            .map(|m| (m.clone(), MemPort::default()))
            .collect();
        let engine = Engine::new(
            ArenaFrames::new(frames, 2048),
            ports,
            shared.clone(),
            changes,
        );
        Rig {
            engine,
            shared,
            metas,
            tables: FlowTables::new(),
        }
    }

    /// Publishes `changes` and lets the engine apply them.
    pub fn apply(&mut self, changes: Vec<Change>) {
        self.shared.publish(changes);
        self.engine.apply_changes();
    }

    /// Adds a flow given in ovs-ofctl syntax.
    pub fn flow_text(&mut self, text: &str) {
        let fm = flowtable::text::parse_flow(text).expect("valid flow text");
        let changes = self.tables.flow_mod(&fm).expect("valid flow");
        self.apply(changes);
    }

    /// Queues `frame` on the receive side of port `ofport`.
    pub fn inject(&mut self, ofport: u32, frame: &[u8]) {
        let desc = self.engine.frames_mut().load(frame).expect("a free frame");
        self.engine
            .port_io_mut((ofport - 1) as usize)
            .expect("port")
            .rx
            .push_back(desc);
    }

    /// Queues `frame` on port `ofport` and runs one engine round.
    pub fn send(&mut self, ofport: u32, frame: &[u8]) {
        self.inject(ofport, frame);
        self.engine.round();
    }

    /// What port `ofport` transmitted since the last call.
    pub fn sent(&mut self, ofport: u32) -> Vec<Vec<u8>> {
        std::mem::take(
            &mut self
                .engine
                .port_io_mut((ofport - 1) as usize)
                .expect("port")
                .sent,
        )
    }

    pub fn free_frames(&mut self) -> usize {
        self.engine.frames_mut().free_frames()
    }
}
