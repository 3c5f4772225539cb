//! Frames waiting for a tunnel's next hop.
//!
//! The first frame to a remote VTEP finds its next hop unresolved: the
//! resolver (`vxlan::neigh`) learns of the destination from that very
//! lookup, and the kernel may still have to ARP. Dropping the frame, as the
//! tunnel once did, costs the sender a retransmission: a second for an ARP
//! request or a TCP SYN, after every xbr start and for every new node. The
//! kernel's own neighbour table queues such packets (`unres_qlen`), and so
//! does the node's datapath xbr replaces; so does xbr now.
//!
//! A tunnel port keeps up to [`PER_PORT`] frames ([`PER_DESTINATION`] per
//! remote VTEP, so one dead node cannot take every slot), unencapsulated,
//! in arrival order. At the start of every round in which some are
//! waiting, each is encapsulated again: sent once its destination
//! resolved, dropped and counted (`no_neighbour`, or whatever the new
//! reason is) once it failed or after [`WAIT_MS`], the time the kernel
//! gives an ARP resolution. While frames to a destination wait, new
//! frames to it wait behind them, so a flow's order holds. Costs: nothing
//! while none waits (one counter test per round); a scan of the waiting
//! frames (at most [`PER_PORT`]) per frame held or per round otherwise,
//! and an idle packet thread wakes every [`POLL_MS`].

use super::{Desc, Engine, Frames, PortIo, BATCH};
use crate::control::port_config;
use crate::engine::tunnel::{TunnelDrop, TunnelMeta};

/// Frames one tunnel port keeps waiting.
pub(super) const PER_PORT: usize = 256;
/// Frames waiting for one remote VTEP.
pub(super) const PER_DESTINATION: usize = 32;
/// How long a frame waits for its next hop: the kernel's ARP gives up
/// after 3 unanswered requests a second apart.
pub(super) const WAIT_MS: u64 = 3_000;

/// How long the packet thread sleeps, when idle, while frames wait: the
/// resolver does not wake it, so this bounds how late they leave.
pub(super) const POLL_MS: u16 = 5;

/// A frame to a tunnel destination whose next hop is not known yet.
#[derive(Clone, Copy, Debug)]
pub(super) struct Waiting {
    desc: Desc,
    tun: TunnelMeta,
    /// The inner flow's hash, from the packet's parse.
    flow_hash: u32,
    since_ms: u64,
}

impl<F: Frames, P: PortIo<F>> Engine<F, P> {
    /// Whether frames to `dst` wait on tunnel port `idx` (a new one must
    /// then wait behind them).
    pub(super) fn waits_for(&self, idx: usize, dst: u32) -> bool {
        self.ports[idx]
            .unresolved
            .iter()
            .any(|w| w.tun.tun_dst == dst)
    }

    /// Keeps `desc` for `tun` on tunnel port `idx` until its next hop is
    /// known; false if there is no room (the caller drops it).
    pub(super) fn hold_unresolved(
        &mut self,
        idx: usize,
        desc: Desc,
        tun: TunnelMeta,
        flow_hash: u32,
    ) -> bool {
        let waiting = &mut self.ports[idx].unresolved;
        let same = waiting
            .iter()
            .filter(|w| w.tun.tun_dst == tun.tun_dst)
            .count();
        if waiting.len() >= PER_PORT || same >= PER_DESTINATION {
            return false;
        }
        waiting.push(Waiting {
            desc,
            tun,
            flow_hash,
            since_ms: self.elapsed_ms,
        });
        self.unresolved_total += 1;
        self.drops.tunnel.waited_for_neighbour += 1;
        true
    }

    /// Encapsulates the waiting frames again, in order: queues those
    /// whose next hop is now known, drops those that failed or waited
    /// too long, keeps the rest.
    pub(super) fn retry_unresolved(&mut self) {
        for idx in 0..self.ports.len() {
            if self.ports[idx].unresolved.is_empty() {
                continue;
            }
            let mut waiting = std::mem::take(&mut self.ports[idx].unresolved);
            let mut kept = 0;
            // A port taken down meanwhile (PORT_MOD) sends none of them.
            let down = self.ports[idx].config & (port_config::PORT_DOWN | port_config::NO_FWD) != 0;
            for i in 0..waiting.len() {
                let w = waiting[i];
                if down {
                    self.ports[idx].totals.tx_dropped += 1;
                    self.drops.port_down += 1;
                    self.frames.free(w.desc.addr);
                    continue;
                }
                // Behind a frame of the same destination that still waits.
                let queued_behind = waiting[..kept]
                    .iter()
                    .any(|k| k.tun.tun_dst == w.tun.tun_dst);
                let result = if queued_behind {
                    Err(TunnelDrop::NoNeighbour)
                } else {
                    self.encap(idx, w.desc, w.tun, w.flow_hash)
                };
                match result {
                    Ok(out) => self.queue_tx(idx, out),
                    Err(TunnelDrop::NoNeighbour)
                        if self.elapsed_ms.saturating_sub(w.since_ms) < WAIT_MS =>
                    {
                        waiting[kept] = w;
                        kept += 1;
                    }
                    Err(reason) => {
                        self.drops.tunnel.count(reason);
                        self.ports[idx].totals.tx_dropped += 1;
                        self.frames.free(w.desc.addr);
                    }
                }
            }
            self.unresolved_total -= waiting.len() - kept;
            waiting.truncate(kept);
            // The vector goes back with its capacity: no allocation per round.
            self.ports[idx].unresolved = waiting;
        }
    }

    /// Queues an encapsulated or plain frame on port `idx`'s TX batch.
    #[inline]
    pub(super) fn queue_tx(&mut self, idx: usize, out: Desc) {
        self.ports[idx].tx.push(out);
        if self.ports[idx].tx.len() >= BATCH * 4 {
            self.flush_port(idx);
        }
    }

    /// Gives back the frames waiting on port `idx` (it is being removed).
    pub(super) fn free_unresolved(&mut self, idx: usize) {
        let waiting = std::mem::take(&mut self.ports[idx].unresolved);
        self.unresolved_total -= waiting.len();
        for w in waiting {
            self.frames.free(w.desc.addr);
        }
    }
}
