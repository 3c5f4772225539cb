//! GROUP_MOD semantics of [`FlowTables`] (OpenFlow 1.3 as OVS implements
//! it): groups are validated like flow actions, and deleting a group first
//! deletes the flows that use it.

use super::{Change, FlowTables};
use crate::action::group as group_no;
use crate::error::GroupModError;
use crate::flow_mod::{GroupMod, GroupModCommand, GroupType};
use crate::group::{Group, GroupStats};
use crate::rule::Rule;
use crate::validate::{check_action, Context};
use std::sync::Arc;

impl FlowTables {
    pub fn group_mod(&mut self, gm: &GroupMod) -> Result<Vec<Change>, GroupModError> {
        let mut changes = Vec::new();
        self.group_mod_into(gm, &mut changes)?;
        Ok(changes)
    }

    fn check_group(gm: &GroupMod) -> Result<(), GroupModError> {
        match gm.group_type {
            GroupType::All | GroupType::Select | GroupType::FastFailover => {}
            GroupType::Indirect => {
                if gm.buckets.len() != 1 {
                    return Err(GroupModError::BadBucket(
                        "an indirect group has exactly one bucket",
                    ));
                }
            }
        }
        for b in &gm.buckets {
            for a in &b.actions {
                check_action(a, Context::Bucket, &|_| false).map_err(GroupModError::BadAction)?;
            }
        }
        Ok(())
    }

    pub(super) fn group_mod_into(
        &mut self,
        gm: &GroupMod,
        changes: &mut Vec<Change>,
    ) -> Result<(), GroupModError> {
        let id = gm.group_id;
        match gm.command {
            GroupModCommand::Add | GroupModCommand::Modify => {
                if id > group_no::MAX {
                    return Err(GroupModError::InvalidId(id));
                }
                let old = self.groups.get(&id).cloned();
                match (gm.command, &old) {
                    (GroupModCommand::Add, Some(_)) => return Err(GroupModError::Exists(id)),
                    (GroupModCommand::Modify, None) => return Err(GroupModError::Unknown(id)),
                    _ => {}
                }
                Self::check_group(gm)?;
                let stats =
                    old.map_or_else(|| Arc::new(GroupStats::default()), |g| g.stats.clone());
                let group = Arc::new(Group {
                    id,
                    group_type: gm.group_type,
                    buckets: gm.buckets.clone(),
                    stats,
                });
                self.set_group(group, changes);
            }
            GroupModCommand::Delete => {
                let ids: Vec<u32> = if id == group_no::ALL {
                    self.groups.keys().copied().collect()
                } else if id > group_no::MAX {
                    return Err(GroupModError::InvalidId(id));
                } else {
                    // OpenFlow 1.3: deleting a group that does not exist
                    // is not an error.
                    vec![id]
                };
                for g in ids {
                    let users: Vec<Arc<Rule>> = self
                        .group_users
                        .get(&g)
                        .map(|u| u.values().cloned().collect())
                        .unwrap_or_default();
                    for r in users {
                        self.remove_rule(&r, changes);
                    }
                    self.remove_group(g, changes);
                }
            }
        }
        Ok(())
    }
}
