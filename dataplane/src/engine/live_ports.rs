//! Ports added to and removed from a running engine.
//!
//! The control side opens a port (XDP attach, AF_XDP bind, TAP create:
//! the slow, fallible part) on its own thread and hands the ready port to
//! the packet thread as a [`PortOp`]; the packet thread splices it into its
//! port list between rounds, like a pipeline change, so the other ports'
//! batches are never interrupted by a syscall that can take milliseconds.
//! Removal goes the other way: the packet thread sends what is queued for
//! the port and returns it to the caller, which closes it (detaching XDP,
//! deleting the TAP device, closing the AF_XDP socket, which waits for an
//! RCU grace period) off the packet thread and sends back the frames the
//! socket's rings held ([`PortOp::Reclaim`]) for the packet thread to put
//! back in its pool.

use super::{Engine, EnginePort, Frames, PortIo};
use crate::control::PortMeta;
use crate::normal::{MacTable, DEFAULT_AGEING_SECS};
use crossbeam::channel::{Receiver, Sender};
use std::sync::Arc;

/// A change to a running engine's ports.
pub enum PortOp<P> {
    /// Start serving `io` as port `meta.ofport` (which must be free).
    Add { meta: Arc<PortMeta>, io: P },
    /// List port `meta.ofport`, which packet thread `owner` serves (see
    /// `Engine::add_remote_port`).
    AddRemote {
        meta: Arc<PortMeta>,
        stand_in: P,
        owner: usize,
    },
    /// Stop serving port `ofport`; its I/O object (or `None` if there was
    /// no such port) is sent back on `done`.
    Remove {
        ofport: u32,
        done: Sender<Option<P>>,
    },
    /// Frames a closed port's rings held, back to the pool.
    Reclaim(Vec<u64>),
}

impl<F: Frames, P: PortIo<F>> Engine<F, P> {
    /// Takes live port changes from `rx` between rounds.
    pub fn set_port_ops(&mut self, rx: Receiver<PortOp<P>>) {
        self.port_ops = Some(rx);
    }

    /// Applies every pending port change.
    pub(super) fn apply_port_ops(&mut self) {
        let Some(rx) = &self.port_ops else {
            return;
        };
        let ops: Vec<PortOp<P>> = rx.try_iter().collect();
        if ops.is_empty() {
            return;
        }
        self.liveness_dirty = true;
        let mut removed = false;
        for op in ops {
            match op {
                PortOp::Add { meta, io } => self.add_port_owned(meta, io, None),
                PortOp::AddRemote {
                    meta,
                    stand_in,
                    owner,
                } => self.add_port_owned(meta, stand_in, Some(owner)),
                PortOp::Remove { ofport, done } => {
                    // Before the port goes: entries redirecting to its
                    // device must not outlive it, and their last hits
                    // count on it.
                    if let Some(x) = &mut self.xdp {
                        x.forget_port(ofport);
                    }
                    self.xdp_credit();
                    let io = self.remove_port(ofport);
                    removed |= io.is_some();
                    // The caller may have given up waiting; the port then
                    // drops here.
                    let _ = done.send(io);
                }
                PortOp::Reclaim(addrs) => {
                    for a in addrs {
                        self.frames.free(a);
                    }
                }
            }
        }
        // Cached translations name ports by number and stay valid (an
        // output to a missing port is dropped as it is without the cache);
        // NORMAL must forget stations learned behind a removed port. The
        // XDP cache's entries of a removed port went above; the others
        // are revalidated, as a port's coming or going changes which
        // ports are live (fast-failover groups) and which outputs the
        // kernel can carry out.
        self.reindex_ports();
        self.xdp_changed(None);
        if removed {
            self.macs = MacTable::new(super::MAC_TABLE_SIZE, DEFAULT_AGEING_SECS);
        }
    }

    /// Adds a port this thread serves (`owner` None) or one another
    /// thread does.
    pub(super) fn add_port_owned(&mut self, meta: Arc<PortMeta>, io: P, owner: Option<usize>) {
        if let Some(old) = self.ports.iter().position(|p| p.meta.ofport == meta.ofport) {
            // The control side never does this; keep the running port.
            tracing::error!(ofport = meta.ofport, name = %self.ports[old].meta.name,
                "port number already in use; new port not added");
            return;
        }
        let mut port = EnginePort::new(meta, io);
        port.owner = owner;
        if owner.is_none() {
            // Frames for its fill ring at once: its XDP program is
            // already redirecting to its sockets.
            port.io.maintain(&mut self.frames);
        }
        self.ports.push(port);
    }

    fn remove_port(&mut self, ofport: u32) -> Option<P> {
        let idx = self.ports.iter().position(|p| p.meta.ofport == ofport)?;
        self.flush_port(idx);
        for d in std::mem::take(&mut self.ports[idx].held) {
            self.frames.free(d.addr);
        }
        self.free_unresolved(idx);
        Some(self.ports.remove(idx).io)
    }

    pub(super) fn reindex_ports(&mut self) {
        self.mirror_ports_dirty = true;
        let max = self
            .ports
            .iter()
            .map(|p| slot(p.meta.ofport))
            .max()
            .unwrap_or(0);
        self.port_index.clear();
        self.port_index.resize(max + 1, u16::MAX);
        for (i, p) in self.ports.iter().enumerate() {
            self.port_index[slot(p.meta.ofport)] = i as u16;
        }
    }
}

/// Where port `ofport` sits in the engine's port list, by its `port_index`.
#[inline]
pub(super) fn index_in(port_index: &[u16], ofport: u32) -> Option<usize> {
    match port_index.get(slot(ofport)) {
        Some(&i) if i != u16::MAX => Some(usize::from(i)),
        _ => None,
    }
}

/// Where port `ofport` sits in the engine's port index: its number, but
/// LOCAL (a bridge's own internal port, 0xfffffffe) takes slot 0, which no
/// port number uses, so the index stays as small as the largest number.
#[inline]
pub(super) fn slot(ofport: u32) -> usize {
    if ofport == flowtable::action::port::LOCAL {
        0
    } else {
        ofport as usize
    }
}
