//! The packet thread's meters (see `crate::meter`): built from the
//! change lists the pipeline applies, run by `DpAction::Meter`. Their
//! buckets are shared with the other packet threads (`MeterBank`).

use super::{Engine, Frames, PortIo};
use crate::meter::{MeterBank, Verdict};
use flowtable::tables::Change;
use std::sync::Arc;

impl<F: Frames, P: PortIo<F>> Engine<F, P> {
    /// Shares meters with the other packet threads that use `bank`
    /// (before any change is applied).
    pub fn set_meter_bank(&mut self, bank: Arc<MeterBank>) {
        self.meter_bank = bank;
    }

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
                        .is_some_and(|s| Arc::ptr_eq(s.lock().meter(), m));
                    if !same {
                        self.meters.insert(m.id, self.meter_bank.state(m));
                    }
                }
                Change::RemoveMeter(id) => {
                    self.meters.remove(id);
                }
                _ => {}
            }
        }
    }

    /// Reads the meters' clock once per round, and only with meters: a
    /// batch's packets share the instant they were received in.
    pub(super) fn sync_meter_clock(&mut self) {
        if !self.meters.is_empty() {
            self.meter_now = self.meter_bank.now_ns();
        }
    }

    /// Runs a packet of `len` bytes through meter `id`. A meter the
    /// tables do not have passes everything (it cannot happen: a meter's
    /// flows are removed before the meter).
    pub(super) fn run_meter(&mut self, id: u32, len: u32) -> Verdict {
        match self.meters.get(&id) {
            Some(m) => m.lock().run(len, self.meter_now),
            None => Verdict::Pass,
        }
    }
}
