//! METER_MOD semantics of [`FlowTables`] (OpenFlow 1.3 as OVS implements
//! it): ids, flags and rates are checked before anything changes, and
//! deleting a meter first deletes the flows that use it.

use super::{Change, FlowTables, Undo};
use crate::error::MeterModError;
use crate::meter::{
    meter_flags, Meter, MeterMod, MeterModCommand, MeterStats, MAX_BANDS, MAX_METERS, METER_ALL,
    METER_MAX,
};
use crate::rule::Rule;
use std::sync::Arc;
use std::time::Instant;

impl FlowTables {
    pub fn meters(&self) -> Vec<Arc<Meter>> {
        self.meters.values().cloned().collect()
    }

    pub fn meter(&self, id: u32) -> Option<Arc<Meter>> {
        self.meters.get(&id).cloned()
    }

    /// How many flows name meter `id` in their meter instruction.
    pub fn meter_flow_count(&self, id: u32) -> usize {
        self.meter_users.get(&id).map_or(0, |u| u.len())
    }

    pub fn meter_mod(&mut self, mm: &MeterMod) -> Result<Vec<Change>, MeterModError> {
        let mut changes = Vec::new();
        self.meter_mod_into(mm, &mut changes)?;
        Ok(changes)
    }

    /// The checks OVS makes before it looks at the table, in its order.
    fn check_meter(mm: &MeterMod) -> Result<(), MeterModError> {
        let id = mm.meter_id;
        if id == 0 || id > METER_MAX {
            return Err(MeterModError::InvalidId(id));
        }
        if id > MAX_METERS {
            return Err(MeterModError::OutOfMeters(id));
        }
        if mm.bands.len() > MAX_BANDS {
            return Err(MeterModError::OutOfBands(mm.bands.len()));
        }
        let units = meter_flags::KBPS | meter_flags::PKTPS;
        if mm.flags & !meter_flags::ALL != 0 || mm.flags & units == units {
            return Err(MeterModError::BadFlags(mm.flags));
        }
        if mm.bands.iter().any(|b| b.rate == 0) {
            return Err(MeterModError::BadRate);
        }
        Ok(())
    }

    pub(super) fn meter_mod_into(
        &mut self,
        mm: &MeterMod,
        changes: &mut Vec<Change>,
    ) -> Result<(), MeterModError> {
        let id = mm.meter_id;
        match mm.command {
            MeterModCommand::Add | MeterModCommand::Modify => {
                Self::check_meter(mm)?;
                let old = self.meters.get(&id).cloned();
                let installed = match (mm.command, &old) {
                    (MeterModCommand::Add, Some(_)) => return Err(MeterModError::Exists(id)),
                    (MeterModCommand::Modify, None) => return Err(MeterModError::Unknown(id)),
                    (_, Some(old)) => old.stats.installed,
                    (_, None) => Instant::now(),
                };
                // A modified meter starts counting afresh, as in OVS's
                // userspace datapath (its bands may be different ones);
                // its age is the meter's.
                let meter = Arc::new(Meter {
                    id,
                    flags: mm.flags,
                    bands: mm.bands.clone(),
                    stats: Arc::new(MeterStats::new(mm.bands.len(), installed)),
                });
                let old = self.meters.insert(id, meter.clone());
                if let Some(j) = &mut self.journal {
                    j.push(Undo::Meter(id, old));
                }
                changes.push(Change::SetMeter(meter));
            }
            MeterModCommand::Delete => {
                // Deleting a meter that does not exist, or an id that
                // cannot exist, succeeds (OVS).
                let ids: Vec<u32> = if id == METER_ALL {
                    self.meters.keys().copied().collect()
                } else {
                    vec![id]
                };
                for m in ids {
                    let users: Vec<Arc<Rule>> = self
                        .meter_users
                        .get(&m)
                        .map(|u| u.values().cloned().collect())
                        .unwrap_or_default();
                    for r in users {
                        self.remove_rule(&r, changes);
                    }
                    if let Some(old) = self.meters.remove(&m) {
                        if let Some(j) = &mut self.journal {
                            j.push(Undo::Meter(m, Some(old)));
                        }
                        changes.push(Change::RemoveMeter(m));
                    }
                }
            }
        }
        Ok(())
    }
}
