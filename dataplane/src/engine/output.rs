//! Output to ports: TX batches, tunnel encapsulation, counters.

use super::packet_ctx::PacketCtx;
use super::{live_ports, Desc, Engine, Frames, PortIo};
use crate::control::port_config;
use crate::engine::tunnel::{TunnelDrop, TunnelMeta};
use flowtable::action::port as ofpp;
use std::sync::atomic::Ordering;

impl<F: Frames, P: PortIo<F>> Engine<F, P> {
    /// Queues `desc`, the frame of packet `ctx` (or a copy, unless
    /// `last`), on the TX batch of `port`; a tunnel port's encapsulation
    /// stage writes the outer headers for `tun` first.
    pub(super) fn output(
        &mut self,
        ctx: &mut PacketCtx,
        port: u32,
        desc: Desc,
        last: bool,
        tun: TunnelMeta,
    ) {
        let port = if port == ofpp::IN_PORT {
            ctx.in_port
        } else {
            port
        };
        let Some(idx) = live_ports::index_in(&self.port_index, port) else {
            self.drops.bad_output_port += 1;
            if last {
                self.frames.free(desc.addr);
            }
            return;
        };
        if self.ports[idx].config & (port_config::PORT_DOWN | port_config::NO_FWD) != 0 {
            self.ports[idx].totals.tx_dropped += 1;
            self.drops.port_down += 1;
            if last {
                self.frames.free(desc.addr);
            }
            return;
        }
        // Copied before a handoff: this thread knows which mirrors the
        // packet already went to (the owner's output copies no more).
        let mirror_dst = self.ports[idx].mirrors.dst;
        if mirror_dst != 0 {
            self.mirror_copy(mirror_dst, desc, &mut ctx.mirrored);
        }
        let tunnel = self.ports[idx].tunnel;
        if let Some(owner) = self.ports[idx].owner.filter(|_| self.handoff.is_some()) {
            // The owner encapsulates; the hash comes from this thread's
            // parse.
            let flow_hash = if tunnel { self.flow_hash(ctx, desc) } else { 0 };
            if let Some(h) = &mut self.handoff {
                h.push(
                    owner,
                    port,
                    self.frames.bytes(desc.addr, desc.len),
                    tun,
                    flow_hash,
                );
            }
            if last {
                self.frames.free(desc.addr);
            }
            return;
        }
        let mut out = if last {
            desc
        } else {
            match self.frames.copy(desc) {
                Some(d) => d,
                None => {
                    self.drops.no_frames += 1;
                    self.ports[idx].totals.tx_dropped += 1;
                    return;
                }
            }
        };
        if tunnel {
            let flow_hash = self.flow_hash(ctx, out);
            // Behind frames to the same destination still waiting for its
            // next hop (see `unresolved.rs`).
            let behind = self.unresolved_total > 0 && self.waits_for(idx, tun.tun_dst);
            let result = if behind {
                Err(TunnelDrop::NoNeighbour)
            } else {
                self.encap(idx, out, tun, flow_hash)
            };
            match result {
                Ok(d) => out = d,
                Err(TunnelDrop::NoNeighbour) if self.hold_unresolved(idx, out, tun, flow_hash) => {
                    return
                }
                Err(reason) => {
                    self.drops.tunnel.count(reason);
                    self.ports[idx].totals.tx_dropped += 1;
                    self.frames.free(out.addr);
                    return;
                }
            }
        }
        self.queue_tx(idx, out);
    }

    pub(super) fn flush_port(&mut self, idx: usize) {
        if self.ports[idx].tx.is_empty() {
            return;
        }
        self.police_egress(idx);
        let port = &mut self.ports[idx];
        self.pmd.sent_batches += 1;
        self.pmd.sent_packets += port.tx.len() as u64;
        let sent = port.io.send(&mut self.frames, &port.tx);
        for d in &port.tx[..sent] {
            port.totals.tx_packets += 1;
            port.totals.tx_bytes += d.len as u64;
        }
        for d in &port.tx[sent..] {
            port.totals.tx_dropped += 1;
            self.drops.tx_full += 1;
            self.frames.free(d.addr);
        }
        port.tx.clear();
    }

    /// Transmits every queued batch, hands off what other packet threads
    /// transmit, reclaims frames, publishes counters.
    pub(super) fn flush(&mut self) {
        for idx in 0..self.ports.len() {
            self.flush_port(idx);
        }
        if let Some(h) = &mut self.handoff {
            let (shared, ports, index) = (&self.shared, &mut self.ports, &self.port_index);
            h.deliver(
                |thread| shared.wake_engine(thread),
                |port| {
                    if let Some(i) = live_ports::index_in(index, port) {
                        ports[i].totals.tx_dropped += 1;
                    }
                },
            );
        }
        for port in &mut self.ports {
            if port.owner.is_some() {
                // Another thread's port: what this one counted for it is
                // added to the owner's totals.
                let t = &mut port.totals;
                if t.tx_packets | t.tx_dropped != 0 {
                    port.meta
                        .stats
                        .credit_tx(t.tx_packets, t.tx_bytes, t.tx_dropped);
                    *t = super::Totals::default();
                }
                continue;
            }
            port.io.maintain(&mut self.frames);
            let (t, s) = (&port.totals, &port.meta.stats);
            s.rx_packets.store(t.rx_packets, Ordering::Relaxed);
            s.rx_bytes.store(t.rx_bytes, Ordering::Relaxed);
            s.rx_dropped
                .store(t.rx_dropped + t.io_rx_dropped, Ordering::Relaxed);
            s.tx_packets.store(t.tx_packets, Ordering::Relaxed);
            s.tx_bytes.store(t.tx_bytes, Ordering::Relaxed);
            s.tx_dropped.store(t.tx_dropped, Ordering::Relaxed);
        }
    }
}
