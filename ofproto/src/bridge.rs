//! The control plane's view of one switch.
//!
//! # Design
//!
//! A [`Bridge`] owns the authoritative [`FlowTables`] and the switch
//! configuration behind one mutex. Connection threads apply mods under the
//! lock and publish the resulting changes to the datapath *before*
//! releasing it, so the datapath receives change lists in exactly the
//! order the tables applied them. Barriers wait (outside the lock) for the
//! newest sequence number published by anyone, which is conservative but
//! always correct: everything a connection sent before its barrier was
//! published no later than that.
//!
//! Cost: one lock per mod; dumps clone `Arc<Rule>`s under the lock and
//! encode outside it.

use crate::datapath::Datapath;
use crate::roles::Roles;
use crate::wire::message::SwitchConfig;
use flowtable::tables::Change;
use flowtable::{
    FlowMod, FlowModError, FlowTables, GroupMod, GroupModError, ModError, PipelineMod,
};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

struct State {
    tables: FlowTables,
    config: SwitchConfig,
}

pub struct Bridge {
    state: Mutex<State>,
    dp: Arc<dyn Datapath>,
    /// Highest sequence number returned by `Datapath::publish`.
    last_seq: AtomicU64,
    roles: Arc<Roles>,
}

impl Bridge {
    pub fn new(dp: Arc<dyn Datapath>) -> Arc<Bridge> {
        Arc::new(Bridge {
            state: Mutex::new(State {
                tables: FlowTables::new(),
                config: SwitchConfig {
                    flags: 0,
                    miss_send_len: 128,
                },
            }),
            dp,
            last_seq: AtomicU64::new(0),
            roles: Arc::default(),
        })
    }

    /// The controller roles of this bridge's connections.
    pub fn roles(&self) -> &Arc<Roles> {
        &self.roles
    }

    pub fn datapath(&self) -> &Arc<dyn Datapath> {
        &self.dp
    }

    fn publish(&self, changes: Vec<Change>) {
        if !changes.is_empty() {
            let seq = self.dp.publish(changes);
            self.last_seq.fetch_max(seq, Ordering::SeqCst);
        }
    }

    pub fn flow_mod(&self, fm: &FlowMod) -> Result<(), FlowModError> {
        let mut st = self.state.lock();
        let changes = st.tables.flow_mod(fm)?;
        self.publish(changes);
        Ok(())
    }

    pub fn group_mod(&self, gm: &GroupMod) -> Result<(), GroupModError> {
        let mut st = self.state.lock();
        let changes = st.tables.group_mod(gm)?;
        self.publish(changes);
        Ok(())
    }

    /// All or nothing (ONF bundle commit).
    pub fn apply_batch(&self, mods: &[PipelineMod]) -> Result<(), (usize, ModError)> {
        let mut st = self.state.lock();
        let changes = st.tables.apply_batch(mods)?;
        self.publish(changes);
        Ok(())
    }

    /// Waits until the datapath applied every change published so far.
    pub fn barrier(&self) {
        let seq = self.last_seq.load(Ordering::SeqCst);
        if seq > 0 {
            self.dp.sync(seq);
        }
    }

    pub fn config(&self) -> SwitchConfig {
        self.state.lock().config
    }

    pub fn set_config(&self, config: SwitchConfig) {
        self.state.lock().config = config;
    }

    /// Runs `f` with the tables locked (dumps, statistics).
    pub fn with_tables<R>(&self, f: impl FnOnce(&FlowTables) -> R) -> R {
        f(&self.state.lock().tables)
    }
}
