//! Controller roles (OpenFlow 1.3 §6.3.5): which connections may change
//! the switch.
//!
//! # Design
//!
//! Stores: the role of every live connection of one bridge (EQUAL until
//! it asks otherwise) and the bridge's master election generation id,
//! once a MASTER or SLAVE request has defined it.
//!
//! Invariants: at most one connection is MASTER; a connection becoming
//! MASTER turns the previous master into a SLAVE. A MASTER or SLAVE
//! request whose generation id is older than the stored one (compared as a
//! signed 64-bit difference, so the id may wrap) is refused as stale and
//! changes nothing.
//!
//! Cost and concurrency: role requests are rare and take one mutex over
//! a small map; the per-message "is this connection a slave?" check reads
//! the connection's own atomic without taking the mutex.

use crate::wire::err;
use crate::wire::message::role;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// One connection's role, shared with the registry so that another
/// connection's MASTER request can demote it.
#[derive(Debug)]
pub struct ConnRole {
    id: u64,
    role: Arc<AtomicU32>,
    roles: Arc<Roles>,
}

impl ConnRole {
    /// The current OFPCR_ROLE_* of this connection.
    pub fn get(&self) -> u32 {
        self.role.load(Ordering::Acquire)
    }

    /// The atomic other parties read this connection's role from.
    pub(crate) fn shared(&self) -> Arc<AtomicU32> {
        self.role.clone()
    }

    pub fn is_slave(&self) -> bool {
        self.get() == role::SLAVE
    }

    /// Whether a message of `msg_type` with a body of `body_len` bytes,
    /// in OpenFlow `version`, must be refused with OFPBRC_IS_SLAVE before
    /// anything in it is decoded or validated (as OVS does: its handlers
    /// check the role first). A body shorter than the message's fixed
    /// part is left to the decoder, whose OFPBRC_BAD_LEN OVS also answers
    /// first (its message framing checks that length before any handler).
    pub fn refuses(&self, version: u8, msg_type: u8, body_len: usize) -> bool {
        self.is_slave()
            && slave_forbidden_fixed_len(version, msg_type).is_some_and(|fixed| body_len >= fixed)
    }

    /// Handles a role request: returns the role and generation id to put
    /// in the reply, or the OFPT_ERROR (type, code) to send instead.
    pub fn request(&self, wanted: u32, generation_id: u64) -> Result<(u32, u64), (u16, u16)> {
        self.roles.request(self.id, wanted, generation_id)
    }
}

impl Drop for ConnRole {
    fn drop(&mut self) {
        self.roles.state.lock().conns.remove(&self.id);
    }
}

/// The fixed body length (after the header) of a message a slave may not
/// send (OpenFlow 1.3 section 6.3.5: it changes the switch or sends
/// packets), `None` for any other message. Message types and fixed parts
/// as OpenFlow 1.3-1.5 define them for each version.
fn slave_forbidden_fixed_len(version: u8, msg_type: u8) -> Option<usize> {
    use crate::wire::header::msg_type as t;
    const OF14: u8 = 5;
    const OF15: u8 = 6;
    Some(match msg_type {
        t::PACKET_OUT if version >= OF15 => 8,
        t::PACKET_OUT => 16,
        t::FLOW_MOD => 40,
        t::GROUP_MOD if version >= OF15 => 16,
        t::GROUP_MOD => 8,
        t::PORT_MOD if version >= OF14 => 24,
        t::PORT_MOD => 32,
        t::TABLE_MOD | t::METER_MOD => 8,
        _ => return None,
    })
}

#[derive(Debug, Default)]
struct State {
    next_id: u64,
    conns: HashMap<u64, Arc<AtomicU32>>,
    /// The master election generation id, once defined.
    generation: Option<u64>,
}

/// The role registry of one bridge.
#[derive(Debug, Default)]
pub struct Roles {
    state: Mutex<State>,
}

impl Roles {
    /// Registers a new connection, as EQUAL.
    pub fn register(self: &Arc<Self>) -> ConnRole {
        let mut s = self.state.lock();
        let id = s.next_id;
        s.next_id += 1;
        let r = Arc::new(AtomicU32::new(role::EQUAL));
        s.conns.insert(id, r.clone());
        ConnRole {
            id,
            role: r,
            roles: self.clone(),
        }
    }

    fn request(&self, id: u64, wanted: u32, generation_id: u64) -> Result<(u32, u64), (u16, u16)> {
        let mut s = self.state.lock();
        let mine = s
            .conns
            .get(&id)
            .cloned()
            .ok_or((err::ROLE_REQUEST_FAILED, err::RRFC_UNSUP))?;
        match wanted {
            role::NOCHANGE | role::EQUAL => {}
            role::MASTER | role::SLAVE => {
                if let Some(g) = s.generation {
                    if (generation_id.wrapping_sub(g) as i64) < 0 {
                        return Err((err::ROLE_REQUEST_FAILED, err::RRFC_STALE));
                    }
                }
                s.generation = Some(generation_id);
            }
            _ => return Err((err::ROLE_REQUEST_FAILED, err::RRFC_BAD_ROLE)),
        }
        if wanted == role::MASTER {
            for (other, r) in &s.conns {
                if *other != id && r.load(Ordering::Acquire) == role::MASTER {
                    r.store(role::SLAVE, Ordering::Release);
                }
            }
        }
        if wanted != role::NOCHANGE {
            mine.store(wanted, Ordering::Release);
        }
        // OVS answers an undefined generation id with all ones.
        Ok((
            mine.load(Ordering::Acquire),
            s.generation.unwrap_or(u64::MAX),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_master_demotes_the_old_one_and_stale_ids_are_refused() {
        let roles = Arc::new(Roles::default());
        let a = roles.register();
        let b = roles.register();
        assert_eq!(a.request(role::NOCHANGE, 0), Ok((role::EQUAL, u64::MAX)));
        assert_eq!(a.request(role::MASTER, 5), Ok((role::MASTER, 5)));
        assert_eq!(b.request(role::MASTER, 6), Ok((role::MASTER, 6)));
        assert!(a.is_slave());
        assert_eq!(
            a.request(role::MASTER, 4),
            Err((err::ROLE_REQUEST_FAILED, err::RRFC_STALE))
        );
        assert!(a.is_slave(), "a refused request changes nothing");
        assert_eq!(a.request(role::EQUAL, 0), Ok((role::EQUAL, 6)));
        assert_eq!(b.get(), role::MASTER, "EQUAL does not demote the master");
        assert_eq!(
            b.request(7, 9),
            Err((err::ROLE_REQUEST_FAILED, err::RRFC_BAD_ROLE))
        );
    }

    #[test]
    fn generation_ids_compare_across_wraparound() {
        let roles = Arc::new(Roles::default());
        let a = roles.register();
        assert_eq!(
            a.request(role::SLAVE, u64::MAX - 1),
            Ok((role::SLAVE, u64::MAX - 1))
        );
        // 1 is three steps after MAX-1 once the counter wraps.
        assert_eq!(a.request(role::MASTER, 1), Ok((role::MASTER, 1)));
    }

    #[test]
    fn a_closed_connection_leaves_the_registry() {
        let roles = Arc::new(Roles::default());
        let a = roles.register();
        drop(roles.register());
        assert_eq!(roles.state.lock().conns.len(), 1);
        drop(a);
        assert!(roles.state.lock().conns.is_empty());
    }
}
