//! Large pipeline changes without overflowing the receive rings.
//!
//! The packet thread applies a change list between two rounds, so that
//! every packet meets one version of the tables. A bundle of 10k flows
//! (the agent's node set-up) takes long enough to apply that a busy port's
//! AF_XDP ring (2048 frames) overflows meanwhile and the kernel drops what
//! does not fit. So a long list is applied in chunks of [`APPLY_CHUNK`]
//! changes, and between two chunks the thread takes what the rings hold
//! without processing it: the frames wait in `EnginePort::held` (at most
//! [`HELD_MAX`] per port, then the rings fill and drop as before) and are
//! processed, in arrival order and before anything newer, by the next
//! round, under the new tables. Atomicity is kept: no packet is processed
//! while the tables are half changed.

use super::{Desc, Engine, Frames, PortIo, BATCH};
use flowtable::Change;

/// Changes applied between two looks at the receive rings.
pub(super) const APPLY_CHUNK: usize = 256;
/// Frames a port may hold during one long apply.
pub(super) const HELD_MAX: usize = 2048;

impl<F: Frames, P: PortIo<F>> Engine<F, P> {
    /// Applies `changes` in order, taking frames off the receive rings
    /// between chunks when there is more than one chunk.
    pub(super) fn apply_holding(&mut self, changes: &[Change]) {
        let chunked = changes.len() > APPLY_CHUNK;
        for chunk in changes.chunks(APPLY_CHUNK) {
            self.pipeline.apply(chunk);
            if chunked {
                self.hold_rx();
            }
        }
    }

    /// Moves what every port's receive ring holds to its held frames.
    fn hold_rx(&mut self) {
        let mut batch = [Desc::default(); BATCH];
        for port in &mut self.ports {
            loop {
                let room = HELD_MAX.saturating_sub(port.held.len()).min(BATCH);
                if room == 0 {
                    break;
                }
                let n = port.io.recv(&mut self.frames, &mut batch[..room]);
                port.held.extend_from_slice(&batch[..n]);
                if n < room {
                    break;
                }
            }
            // Lends the kernel fresh frames for the ones held.
            port.io.maintain(&mut self.frames);
        }
    }

    /// The next batch of port `i`: its held frames first, then its ring.
    pub(super) fn next_batch(&mut self, i: usize, batch: &mut [Desc; BATCH]) -> usize {
        let port = &mut self.ports[i];
        if port.held.is_empty() {
            return port.io.recv(&mut self.frames, batch);
        }
        let n = port.held.len().min(BATCH);
        for (slot, d) in batch.iter_mut().zip(port.held.drain(..n)) {
            *slot = d;
        }
        n
    }
}
