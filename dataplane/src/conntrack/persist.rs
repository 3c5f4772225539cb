//! Connections written to and read back from the state file
//! (`crate::state`), so that they outlive the process.
//!
//! # Design
//!
//! A [`SavedConn`] is everything a [`Conn`] needs to carry on: both tuples
//! (the reply one already NATed, so the NAT binding is the pair of them),
//! ct_mark, ct_label, the TCP tracker's windows and states, which
//! directions were seen, the NAT bits, a host-learned connection's host
//! tuple, and the time it has left. What only this process means (the XDP
//! cache links, the record's address) is not saved: a restored connection
//! starts unlinked, as a new one does.
//!
//! [`Conntrack::export`] walks the shards one at a time under their read
//! locks, copying each record under its own lock (no `Arc` is cloned, so
//! the packet threads' records are not written to); its cost is one copy
//! per connection, on the caller's thread (the snapshot thread or the
//! stopping main thread), never a packet thread.
//!
//! [`Conntrack::restore_saved`] is all or nothing: it checks every record first,
//! then inserts them; if any cannot be inserted (a tuple taken twice, the
//! limit reached) the ones inserted are removed again and the table is as
//! it was. It is meant for a table nothing else writes to yet (at start,
//! before any flow can commit), but stays correct if something does.

use super::tcp::TcpConn;
use super::{Conn, Conntrack, Tuple, NAT_DST, NAT_SRC};
use flowtable::matching::IP_PROTO_TCP;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use thiserror::Error;

/// One connection as the state file keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedConn {
    pub orig: Tuple,
    /// The reply direction's tuple as its packets arrive (after NAT).
    pub reply: Tuple,
    pub mark: u32,
    /// ct_label as two words, low first.
    pub label: [u64; 2],
    pub tcp: Option<TcpConn>,
    pub seen_reply: bool,
    pub multiple: bool,
    /// NAT_SRC (1) and/or NAT_DST (2).
    pub nat: u8,
    pub host_orig: Option<Tuple>,
    /// Milliseconds it had left when saved.
    pub expires_in_ms: u64,
}

/// Why saved connections were refused (nothing of them was stored).
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ImportError {
    #[error("{count} connections exceed the limit of {limit} (--ct-limit)")]
    OverLimit { count: usize, limit: usize },
    #[error("connection {index}: {reason}")]
    Invalid { index: usize, reason: &'static str },
    #[error("connection {index}: a tuple of it is another connection's too")]
    Duplicate { index: usize },
}

/// What [`Conntrack::restore_saved`] stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Imported {
    pub stored: usize,
    /// Saved connections whose time ran out while xbr was down.
    pub expired: usize,
}

impl Conntrack {
    /// Every live connection, for the state file (see the module
    /// documentation for the cost).
    pub fn export(&self) -> Vec<SavedConn> {
        self.kernel_drain();
        let now = self.now_ms();
        let mut out = Vec::with_capacity(self.len());
        for shard in 0..super::table::SHARDS {
            self.table.shard_conns_where(shard, |c| {
                if c.expires > now && !c.removed {
                    out.push(SavedConn {
                        orig: c.orig,
                        reply: c.reply,
                        mark: c.mark,
                        label: c.label,
                        tcp: c.tcp,
                        seen_reply: c.seen_reply,
                        multiple: c.multiple,
                        nat: c.nat,
                        host_orig: c.host_orig.as_deref().copied(),
                        expires_in_ms: c.expires - now,
                    });
                }
                false
            });
        }
        out
    }

    /// Stores `saved`, each with its time left less `elapsed_ms` (how long
    /// ago it was saved); those left with none are skipped. All or
    /// nothing (see the module documentation).
    pub fn restore_saved(
        &self,
        saved: &[SavedConn],
        elapsed_ms: u64,
    ) -> Result<Imported, ImportError> {
        for (index, s) in saved.iter().enumerate() {
            check(s).map_err(|reason| ImportError::Invalid { index, reason })?;
        }
        let live: Vec<&SavedConn> = saved
            .iter()
            .filter(|s| s.expires_in_ms > elapsed_ms)
            .collect();
        let limit = self.limit();
        if live.len() + self.len() > limit {
            return Err(ImportError::OverLimit {
                count: live.len(),
                limit,
            });
        }
        let now = self.now_ms();
        let mut stored: Vec<(Tuple, Tuple, super::table::ConnRef)> = Vec::with_capacity(live.len());
        let mut failed = None;
        for (index, s) in live.iter().enumerate() {
            if !self.table.reserve(limit) {
                failed = Some(ImportError::OverLimit {
                    count: live.len(),
                    limit,
                });
                break;
            }
            let conn = Arc::new(Mutex::new(Conn {
                orig: s.orig,
                reply: s.reply,
                mark: s.mark,
                label: s.label,
                tcp: s.tcp,
                seen_reply: s.seen_reply,
                multiple: s.multiple,
                nat: s.nat,
                host_orig: s.host_orig.map(Box::new),
                expires: now.saturating_add(s.expires_in_ms - elapsed_ms),
                xdp_links: 0,
                xdp_epoch: 0,
                removed: false,
                zone_slot: 0,
            }));
            match self.table.insert(s.orig, s.reply, conn.clone()) {
                Ok(()) => stored.push((s.orig, s.reply, conn)),
                Err(_) => {
                    self.table.unreserve();
                    failed = Some(ImportError::Duplicate { index });
                    break;
                }
            }
        }
        if let Some(e) = failed {
            for (orig, reply, conn) in &stored {
                self.table.remove(orig, reply, conn);
            }
            return Err(e);
        }
        Ok(Imported {
            stored: stored.len(),
            expired: saved.len() - live.len(),
        })
    }
}

/// What a record must be to be a connection this tracker could have made.
fn check(s: &SavedConn) -> Result<(), &'static str> {
    let same = |t: &Tuple| t.zone == s.orig.zone && t.proto == s.orig.proto && t.v6 == s.orig.v6;
    if !same(&s.reply) || s.host_orig.as_ref().is_some_and(|h| !same(h)) {
        return Err("its tuples differ in zone, protocol or address family");
    }
    if s.nat & !(NAT_SRC | NAT_DST) != 0 {
        return Err("unknown NAT bits");
    }
    if s.tcp.is_some() && s.orig.proto != IP_PROTO_TCP {
        return Err("TCP state on a connection that is not TCP");
    }
    if !s.orig.v6 && (s.orig.src.0[1..] != [0; 3] || s.orig.dst.0[1..] != [0; 3]) {
        return Err("an IPv4 tuple with IPv6 address words");
    }
    Ok(())
}
