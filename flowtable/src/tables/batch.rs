//! All-or-nothing batches of mods (ONF bundle commits): every primitive
//! change records its inverse in a journal while the batch runs, and a
//! failing mod replays the journal backwards.

use super::{Change, FlowTables, ModError, PipelineMod, Undo};

impl FlowTables {
    /// All or nothing: on the first failing mod (index i) nothing at all is
    /// changed. Mods see the effects of earlier mods of the batch.
    pub fn apply_batch(&mut self, mods: &[PipelineMod]) -> Result<Vec<Change>, (usize, ModError)> {
        self.apply_batch_inner(mods, None)
    }

    /// [`FlowTables::apply_batch`], also telling which mod made which
    /// change: `ends[i]` is the length of the change list after mod `i`
    /// (so mod `i` made the changes `ends[i - 1]..ends[i]`).
    pub fn apply_batch_marked(
        &mut self,
        mods: &[PipelineMod],
        ends: &mut Vec<usize>,
    ) -> Result<Vec<Change>, (usize, ModError)> {
        ends.clear();
        self.apply_batch_inner(mods, Some(ends))
    }

    fn apply_batch_inner(
        &mut self,
        mods: &[PipelineMod],
        mut ends: Option<&mut Vec<usize>>,
    ) -> Result<Vec<Change>, (usize, ModError)> {
        let outer = self.journal.replace(Vec::new());
        let mut changes = Vec::new();
        let mut result = Ok(());
        for (i, m) in mods.iter().enumerate() {
            let r = match m {
                PipelineMod::Flow(fm) => {
                    self.flow_mod_into(fm, &mut changes).map_err(ModError::from)
                }
                PipelineMod::Group(gm) => self
                    .group_mod_into(gm, &mut changes)
                    .map_err(ModError::from),
                PipelineMod::Meter(mm) => self
                    .meter_mod_into(mm, &mut changes)
                    .map_err(ModError::from),
            };
            if let Err(e) = r {
                result = Err((i, e));
                break;
            }
            if let Some(e) = ends.as_deref_mut() {
                e.push(changes.len());
            }
        }
        let journal = std::mem::replace(&mut self.journal, outer).unwrap_or_default();
        match result {
            Ok(()) => {
                if let Some(j) = &mut self.journal {
                    j.extend(journal);
                }
                Ok(changes)
            }
            Err(e) => {
                self.undo(journal);
                Err(e)
            }
        }
    }

    fn undo(&mut self, journal: Vec<Undo>) {
        let mut sink = Vec::new();
        for u in journal.into_iter().rev() {
            match u {
                Undo::Inserted(r) => self.remove_rule(&r, &mut sink),
                Undo::Removed(r) => self.insert_rule(r, &mut sink),
                Undo::Group(id, Some(g)) => {
                    self.groups.insert(id, g);
                }
                Undo::Group(id, None) => {
                    self.groups.remove(&id);
                }
                Undo::Meter(id, Some(m)) => {
                    self.meters.insert(id, m);
                }
                Undo::Meter(id, None) => {
                    self.meters.remove(&id);
                }
            }
        }
    }
}
