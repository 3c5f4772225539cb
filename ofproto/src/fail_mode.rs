//! The flow tables' side of a bridge's fail mode, as in ovs-vswitchd.
//!
//! # Design
//!
//! OVS distinguishes two standalone cases (`ofproto/connmgr.c`,
//! `ofproto/fail-open.c`):
//!
//! - standalone with **no primary controller configured** (passive
//!   `ptcp:` services do not count): the bridge gets one ordinary flow,
//!   `table=0, priority=0, actions=NORMAL`, whenever its tables are
//!   flushed. It shows in `dump-flows`, every installed flow of higher
//!   priority overrides it, and `del-flows` removes it like any other;
//! - standalone with a configured primary controller that is not
//!   connected: fail-open takes over, forwarding everything by NORMAL
//!   whatever the flows say (the server's `update_fail_open`, the
//!   datapath's `set_fail_open`).
//!
//! The tables are flushed when the bridge starts, when its fail mode
//! changes while it has no primary controller, and when it goes from
//! having primary controllers to having none or back (OVS's
//! `connmgr_set_fail_mode` and `connmgr_set_controllers`). Who decides
//! that a flush is due (the bridge's owner, which knows its
//! configuration) calls [`Bridge::flush_flows`]; this module only knows
//! what a flush leaves behind.

use crate::bridge::Bridge;
use flowtable::action::{port, TABLE_ALL};
use flowtable::flow_mod::{FlowMod, FlowModCommand};
use flowtable::{Action, FlowModError, Instructions, Match};

impl Bridge {
    /// Deletes every flow of every table (groups and meters stay, as in
    /// OVS) and, with `normal_flow` (fail mode standalone and no primary
    /// controller configured), adds the priority-0 NORMAL flow.
    pub fn flush_flows(&self, normal_flow: bool) -> Result<(), FlowModError> {
        let all = FlowMod {
            command: FlowModCommand::Delete,
            ..FlowMod::add(TABLE_ALL, 0, Match::catch_all(), Instructions::default())
        };
        self.flow_mod(&all, None)?;
        if normal_flow {
            self.add_normal_flow()?;
        }
        Ok(())
    }

    /// Adds the priority-0 NORMAL flow of a standalone bridge without
    /// controllers (to tables that are empty: a new bridge's).
    pub fn add_normal_flow(&self) -> Result<(), FlowModError> {
        let normal = Action::Output {
            port: port::NORMAL,
            max_len: 0,
        };
        let flow = FlowMod::add(0, 0, Match::catch_all(), Instructions::apply(vec![normal]));
        self.flow_mod(&flow, None)
    }
}
