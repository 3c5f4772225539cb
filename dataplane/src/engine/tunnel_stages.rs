//! The engine's tunnel stages. A tunnel port only moves frames (its
//! uplink's); its endpoint ([`crate::vxlan::VxlanTunnel`], from
//! `PortIo::tunnel_mut`) is used here: decapsulation is a stage over each
//! batch received on the port, before parsing, and encapsulation a stage
//! of each output to it, after the pipeline, with the inner flow's hash
//! from the packet's parse.

use super::tunnel::{TunnelDrop, TunnelMeta};
use super::{Desc, Engine, Frames, PortIo};

impl<F: Frames, P: PortIo<F>> Engine<F, P> {
    /// The decapsulation stage: strips the outer headers of the frames of
    /// `batch`, received on tunnel port `i` (moving each descriptor past
    /// them, nothing copied), writing the `n`th kept frame's tunnel
    /// metadata to `meta[n]`; drops and counts the malformed. Returns how
    /// many are left, compacted at the front.
    pub(super) fn decap_stage(
        &mut self,
        i: usize,
        batch: &mut [Desc],
        meta: &mut [TunnelMeta],
    ) -> usize {
        let port = &mut self.ports[i];
        let Some(tunnel) = port.io.tunnel_mut() else {
            return batch.len();
        };
        let mut kept = 0;
        for j in 0..batch.len() {
            match tunnel.decap(&mut self.frames, batch[j]) {
                Ok((inner, m)) => {
                    // A sender's offload may reach us through an underlay
                    // of veths too (the uplink's XDP program completes
                    // them alike).
                    xbr_packet::csum::complete_partial(self.frames.bytes(inner.addr, inner.len));
                    batch[kept] = inner;
                    meta[kept] = m;
                    kept += 1;
                }
                Err(reason) => {
                    port.totals.rx_dropped += 1;
                    self.drops.tunnel.count(reason);
                    self.frames.free(batch[j].addr);
                }
            }
        }
        kept
    }

    /// The encapsulation stage of one output: writes the outer headers
    /// for `tun` in front of `desc`, whose inner flow hashes to
    /// `flow_hash`, with tunnel port `idx`'s endpoint.
    #[inline]
    pub(super) fn encap(
        &mut self,
        idx: usize,
        desc: Desc,
        tun: TunnelMeta,
        flow_hash: u32,
    ) -> Result<Desc, TunnelDrop> {
        match self.ports[idx].io.tunnel_mut() {
            Some(t) => t.encap(&mut self.frames, desc, tun, flow_hash),
            // Only tunnel ports come here.
            None => Ok(desc),
        }
    }
}
