//! OpenFlow's action set as translation accumulates it (write_actions,
//! clear_actions); `execute_action_set` in `xlate/mod.rs` runs it at the end of
//! the pipeline.

use crate::action::Action;
use crate::key::Field;

/// Max distinct set_field actions in the action set.
const MAX_SET_FIELDS: usize = 16;

/// OpenFlow's action set: at most one action per type, applied as
/// set-fields, then group or (if no group) output.
pub(super) struct ActionSet {
    pub(super) sets: [(Field, u64); MAX_SET_FIELDS],
    pub(super) n_sets: usize,
    pub(super) group: Option<u32>,
    pub(super) output: Option<u32>,
}

impl ActionSet {
    pub(super) fn new() -> Self {
        ActionSet {
            sets: [(Field::InPort, 0); MAX_SET_FIELDS],
            n_sets: 0,
            group: None,
            output: None,
        }
    }

    pub(super) fn clear(&mut self) {
        self.n_sets = 0;
        self.group = None;
        self.output = None;
    }

    /// Merges write_actions; `false` when the set overflows.
    pub(super) fn write(&mut self, actions: &[Action]) -> bool {
        for a in actions {
            match a {
                Action::Output { port, .. } => self.output = Some(*port),
                Action::Group(g) => self.group = Some(*g),
                Action::SetField { field, value } if !self.set(*field, *value) => {
                    return false;
                }
                // The set holds key fields: a 128-bit write is its halves.
                Action::SetField128 { field, value } => {
                    let (low, high) = crate::key::split_label(*value);
                    if !self.set(*field, low)
                        || !field.high_half().is_none_or(|h| self.set(h, high))
                    {
                        return false;
                    }
                }
                // Validation admits nothing else into write_actions.
                _ => {}
            }
        }
        true
    }

    /// Adds or replaces the write of `field`; `false` when the set is full.
    fn set(&mut self, field: Field, value: u64) -> bool {
        let n = self.n_sets;
        if let Some(e) = self.sets[..n].iter_mut().find(|e| e.0 == field) {
            e.1 = value;
        } else if let Some(e) = self.sets.get_mut(n) {
            *e = (field, value);
            self.n_sets += 1;
        } else {
            return false;
        }
        true
    }

    pub(super) fn is_empty(&self) -> bool {
        self.n_sets == 0 && self.group.is_none() && self.output.is_none()
    }
}
