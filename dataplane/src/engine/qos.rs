//! The packet thread's side of per-port rate limits (`crate::qos`):
//! buckets refreshed once per round, ingress policing on each received
//! batch, the egress limit on each batch about to be sent.

use super::{Desc, Engine, Frames, PortIo};

impl<F: Frames, P: PortIo<F>> Engine<F, P> {
    /// Picks up changed limits and refills the buckets; once per round.
    /// A port that gains a limit retires the XDP flow cache's entries:
    /// the kernel path applies none, so a port's limited direction is
    /// kept off it (`xdp::fc_action`).
    pub(super) fn sync_qos(&mut self) {
        let started = self.started;
        let mut gained = false;
        for port in &mut self.ports {
            let had = (port.qos.ingress.is_some(), port.qos.egress.is_some());
            port.qos
                .sync(&port.meta.qos, || started.elapsed().as_nanos() as u64);
            gained |=
                (!had.0 && port.qos.ingress.is_some()) || (!had.1 && port.qos.egress.is_some());
        }
        if gained {
            if let Some(x) = &mut self.xdp {
                x.invalidate();
            }
        }
    }

    /// Drops what exceeds the port's ingress policing rate from the
    /// received `batch` (freeing their frames, counting them as the
    /// port's rx_dropped) and returns how many are left, compacted at
    /// the front.
    pub(super) fn police_ingress(&mut self, i: usize, batch: &mut [Desc]) -> usize {
        let port = &mut self.ports[i];
        let Some(bucket) = &mut port.qos.ingress else {
            return batch.len();
        };
        let mut kept = 0;
        for j in 0..batch.len() {
            let d = batch[j];
            if bucket.take(d.len) {
                batch[kept] = d;
                kept += 1;
            } else {
                port.totals.rx_packets += 1;
                port.totals.rx_bytes += u64::from(d.len);
                port.totals.rx_dropped += 1;
                self.drops.qos_policed += 1;
                self.frames.free(d.addr);
            }
        }
        kept
    }

    /// Drops what exceeds the port's egress limit from its TX batch.
    pub(super) fn police_egress(&mut self, idx: usize) {
        let port = &mut self.ports[idx];
        let Some(bucket) = &mut port.qos.egress else {
            return;
        };
        let frames = &mut self.frames;
        let drops = &mut self.drops.qos_policed;
        let totals = &mut port.totals;
        port.tx.retain(|d| {
            if bucket.take(d.len) {
                true
            } else {
                totals.tx_dropped += 1;
                *drops += 1;
                frames.free(d.addr);
                false
            }
        });
    }
}
