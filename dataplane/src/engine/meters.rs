//! The packet thread's meters (see `crate::meter`): built from the
//! change lists the pipeline applies, run by `DpAction::Meter`.

use super::{Engine, Frames, PortIo};
use crate::meter::{MeterState, Verdict};
use flowtable::tables::Change;
use std::sync::Arc;

impl<F: Frames, P: PortIo<F>> Engine<F, P> {
    /// Follows the meters in a change list: a new or modified meter gets
    /// fresh, full buckets (as OVS's datapath replaces a modified meter),
    /// unless it is the very configuration already running (a replay).
    pub(super) fn apply_meter_changes(&mut self, changes: &[Change]) {
        for c in changes {
            match c {
                Change::SetMeter(m) => {
                    let same = self
                        .meters
                        .get(&m.id)
                        .is_some_and(|s| Arc::ptr_eq(s.meter(), m));
                    if !same {
                        let now = self.meter_clock();
                        self.meters.insert(m.id, MeterState::new(m.clone(), now));
                    }
                }
                Change::RemoveMeter(id) => {
                    self.meters.remove(id);
                }
                _ => {}
            }
        }
    }

    /// Nanoseconds on the engine's clock, the meters' time base.
    fn meter_clock(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }

    /// Reads the meters' clock once per round, and only with meters: a
    /// batch's packets share the instant they were received in.
    pub(super) fn sync_meter_clock(&mut self) {
        if !self.meters.is_empty() {
            self.meter_now = self.meter_clock();
        }
    }

    /// Runs a packet of `len` bytes through meter `id`. A meter the
    /// tables do not have passes everything (it cannot happen: a meter's
    /// flows are removed before the meter).
    pub(super) fn run_meter(&mut self, id: u32, len: u32) -> Verdict {
        match self.meters.get_mut(&id) {
            Some(m) => m.run(len, self.meter_now),
            None => Verdict::Pass,
        }
    }
}
