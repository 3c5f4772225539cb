//! The receive side of a round, as stages over one port's batch:
//!
//! 1. **receive**: up to [`BATCH`] frames from the port's rings (or the
//!    frames held during a long pipeline change, `hold.rs`);
//! 2. **police**: the port's ingress rate (`qos.rs`);
//! 3. **admit**: counted as received; dropped if the port may not
//!    receive (down, `no-recv`) or the switch waits for its flows
//!    (`flow-restore-wait`);
//! 4. **decapsulate**: a tunnel port's outer headers (`tunnel_stages.rs`);
//!
//! then, packet by packet:
//!
//! 5. **parse**: the frame into its [`PacketCtx`], once;
//! 6. **mirror** the frame as received, and run it through the
//!    pipeline's passes (`pass.rs`), which queue its outputs on the
//!    ports' TX batches (sent by `output.rs` at the end of the round).
//!
//! Stages 1-4 touch only descriptors and outer headers, so they run over
//! the whole batch, each finishing before the next starts. Parsing and
//! the pipeline run per packet: a packet's context (a 216-byte flow key)
//! stays in the first-level cache between its parse and its translation,
//! and the pipeline sees packets in arrival order (conntrack, MAC
//! learning and meters depend on it).

use super::packet_ctx::PacketCtx;
use super::tunnel::TunnelMeta;
use super::{Desc, Engine, Frames, PortIo, BATCH};
use crate::control::port_config;

impl<F: Frames, P: PortIo<F>> Engine<F, P> {
    /// Runs port `i`'s received frames through every stage; returns how
    /// many frames it received. `batch` is the round's scratch space.
    pub(super) fn receive_port(&mut self, i: usize, batch: &mut [Desc; BATCH]) -> usize {
        let received = self.next_batch(i, batch);
        if received == 0 {
            return 0;
        }
        self.pmd.received += received as u64;
        let n = self.police_ingress(i, &mut batch[..received]);
        let n = self.admit(i, &mut batch[..n]);
        let mut tunnels = [TunnelMeta::default(); BATCH];
        let tunnel_port = self.ports[i].tunnel;
        let n = if tunnel_port {
            self.decap_stage(i, &mut batch[..n], &mut tunnels)
        } else {
            n
        };
        let in_port = self.ports[i].meta.ofport;
        // The XDP cache can take over flows of frames its program looks
        // up: those of ports it runs on.
        let xdp_ifindex = self.ports[i].xdp_ifindex.filter(|_| self.xdp.is_some());
        let mirror_src = self.ports[i].mirrors.src;
        // One context for the batch, reset for each packet: its key is
        // zeroed by the parse itself, not a second time here.
        let mut ctx = PacketCtx::unparsed(in_port, Desc::default());
        for j in 0..n {
            let tunnel = tunnel_port.then_some(tunnels[j]);
            ctx.reset(batch[j]);
            self.parse_received(&mut ctx, tunnel, xdp_ifindex);
            if mirror_src != 0 {
                self.mirror_copy(mirror_src, ctx.desc, &mut ctx.mirrored);
            }
            self.process(&mut ctx);
        }
        received
    }

    /// The admission stage: counts the frames of `batch` as received on
    /// port `i` and drops them all if the port may not receive or the
    /// switch waits for its flows (`flow-restore-wait`). Returns how many
    /// are left.
    fn admit(&mut self, i: usize, batch: &mut [Desc]) -> usize {
        let port = &mut self.ports[i];
        for d in batch.iter() {
            port.totals.rx_packets += 1;
            port.totals.rx_bytes += u64::from(d.len);
        }
        let blocked = port.config & (port_config::PORT_DOWN | port_config::NO_RECV) != 0;
        if !blocked && !self.restore_wait {
            return batch.len();
        }
        for d in batch.iter() {
            port.totals.rx_dropped += 1;
            if blocked {
                self.drops.port_down += 1;
            } else {
                self.drops.restore_wait += 1;
            }
            self.frames.free(d.addr);
        }
        0
    }
}
