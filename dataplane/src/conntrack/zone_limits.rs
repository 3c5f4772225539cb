//! Per-zone connection limits, as OVS 3.1's userspace datapath has them
//! (`ovs-appctl dpctl/ct-set-limits`, `ct-get-limits`, `ct-del-limits`).
//!
//! # Design
//!
//! Stores: the limits set, each a [`ZoneSlot`] (its limit and the
//! connections admitted under it), keyed by zone, plus an optional
//! default slot. OVS 3.1's semantics, kept exactly:
//! - a commit in zone Z is checked against Z's own slot, or when Z has
//!   none, against the default slot; with neither, only the table's
//!   overall limit (`ct-set-maxconns`) applies;
//! - the default slot is *one* count shared by every zone without a limit
//!   of its own (OVS 3.1 admits under the default entry itself: later
//!   versions count per zone);
//! - a connection counts in the slot it was admitted under until it is
//!   removed; changing a limit keeps the count, deleting it drops the slot
//!   (its connections no longer count anywhere, and a slot set again
//!   starts at 0); connections committed before a limit existed are not
//!   counted (counts start at 0 when a limit is created);
//! - a commit over the limit is not stored: the packet leaves `+trk+new`
//!   with no mark, label or NAT (OVS's `conn_not_found` returns before
//!   creating it), and the refusal is counted
//!   ([`super::CtStats::zone_limited`]).
//!
//! Invariants: each slot has a number never used again (OVS's
//! `zone_limit_seq`); a connection keeps the number of the slot it was
//! admitted under (4 bytes: the record must stay small) and gives its
//! count back to that slot when removed, if it still exists, so a slot
//! deleted and set again is never decremented for connections it did not
//! admit, nor below zero.
//!
//! Concurrency and cost: nothing on packets of existing connections. A
//! commit of a new connection reads one flag (no limit set: done), else
//! takes the slots' read lock for one map probe and an atomic
//! compare-and-exchange on the count (removing a counted connection: the
//! same lock and an atomic decrement): commits allocate their record
//! anyway, and the lock is written only by the control socket. Memory: one
//! small allocation per zone with a limit (at most 65,536 + 1).

use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::sync::Arc;

/// One limit and the connections admitted under it.
#[derive(Debug)]
struct ZoneSlot {
    limit: AtomicU32,
    count: AtomicU32,
    /// Its number (never 0, never reused).
    seq: u32,
}

impl ZoneSlot {
    /// Takes one place if the count is under the limit.
    fn admit(&self) -> bool {
        let limit = self.limit.load(Relaxed);
        self.count
            .fetch_update(Relaxed, Relaxed, |n| (n < limit).then_some(n + 1))
            .is_ok()
    }

    /// Gives back the place of a connection admitted under it.
    fn release(&self) {
        let _ = self
            .count
            .fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1));
    }
}

/// A zone's line of `ct-get-limits`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZoneLimit {
    pub zone: u16,
    pub limit: u32,
    pub count: u32,
}

#[derive(Default)]
struct Slots {
    default: Option<Arc<ZoneSlot>>,
    zones: HashMap<u16, Arc<ZoneSlot>>,
    /// Every slot above, by number.
    by_seq: HashMap<u32, Arc<ZoneSlot>>,
    /// The last number given.
    last_seq: u32,
}

/// The limits of one connection tracker; see the module documentation.
#[derive(Default)]
pub struct ZoneLimits {
    /// Some limit is set (the commit path's only read when none is).
    any: AtomicBool,
    slots: RwLock<Slots>,
}

/// What a commit in a zone may do.
pub enum Admission {
    /// No limit applies.
    Unlimited,
    /// Admitted under the slot of this number (to be released when the
    /// connection goes).
    Admitted(u32),
    /// Over the zone's limit.
    Refused,
}

impl ZoneLimits {
    /// Asks for a place for a new connection in `zone`.
    pub fn admit(&self, zone: u16) -> Admission {
        if !self.any.load(Relaxed) {
            return Admission::Unlimited;
        }
        let s = self.slots.read();
        let Some(slot) = s.zones.get(&zone).or(s.default.as_ref()) else {
            return Admission::Unlimited;
        };
        if slot.admit() {
            Admission::Admitted(slot.seq)
        } else {
            Admission::Refused
        }
    }

    /// Gives back the place of a connection admitted under slot `seq`
    /// (nothing if that slot was deleted since).
    pub fn release(&self, seq: u32) {
        if let Some(slot) = self.slots.read().by_seq.get(&seq) {
            slot.release();
        }
    }

    fn update(
        slot: &mut Option<Arc<ZoneSlot>>,
        limit: u32,
        by_seq: &mut HashMap<u32, Arc<ZoneSlot>>,
        last_seq: &mut u32,
    ) {
        match slot {
            Some(s) => s.limit.store(limit, Relaxed),
            None => {
                *last_seq = last_seq.wrapping_add(1).max(1);
                let s = Arc::new(ZoneSlot {
                    limit: AtomicU32::new(limit),
                    count: AtomicU32::new(0),
                    seq: *last_seq,
                });
                by_seq.insert(s.seq, s.clone());
                *slot = Some(s);
            }
        }
    }

    /// `ct-set-limits`: sets the default limit (if given) and each zone's;
    /// a limit that exists keeps its count.
    pub fn set(&self, default: Option<u32>, zones: &[(u16, u32)]) {
        let mut guard = self.slots.write();
        let s = &mut *guard;
        if let Some(l) = default {
            Self::update(&mut s.default, l, &mut s.by_seq, &mut s.last_seq);
        }
        for &(zone, limit) in zones {
            let mut slot = s.zones.remove(&zone);
            Self::update(&mut slot, limit, &mut s.by_seq, &mut s.last_seq);
            if let Some(slot) = slot {
                s.zones.insert(zone, slot);
            }
        }
        self.any
            .store(guard.default.is_some() || !guard.zones.is_empty(), Relaxed);
    }

    /// `ct-del-limits`: removes the zones' own limits (a zone without one
    /// is not an error, as in OVS).
    pub fn delete(&self, zones: &[u16]) {
        let mut s = self.slots.write();
        for z in zones {
            if let Some(slot) = s.zones.remove(z) {
                s.by_seq.remove(&slot.seq);
            }
        }
        self.any
            .store(s.default.is_some() || !s.zones.is_empty(), Relaxed);
    }

    /// The default limit (0 when none is set, as OVS prints it).
    pub fn default_limit(&self) -> u32 {
        self.slots
            .read()
            .default
            .as_ref()
            .map_or(0, |s| s.limit.load(Relaxed))
    }

    /// `ct-get-limits`: with no zones asked, every zone with its own
    /// limit, by zone; else each zone asked that has its own limit or
    /// falls under the default (showing the default's limit and count),
    /// in the order asked; one with neither shows `limit=0,count=0`, as
    /// OVS 3.1 prints it.
    pub fn get(&self, asked: &[u16]) -> Vec<ZoneLimit> {
        let s = self.slots.read();
        let line = |zone: u16, slot: &ZoneSlot| ZoneLimit {
            zone,
            limit: slot.limit.load(Relaxed),
            count: slot.count.load(Relaxed),
        };
        if asked.is_empty() {
            let mut all: Vec<ZoneLimit> = s.zones.iter().map(|(&z, sl)| line(z, sl)).collect();
            all.sort_by_key(|l| l.zone);
            return all;
        }
        asked
            .iter()
            .map(|&z| match s.zones.get(&z).or(s.default.as_ref()) {
                Some(slot) => line(z, slot),
                None => ZoneLimit {
                    zone: z,
                    limit: 0,
                    count: 0,
                },
            })
            .collect()
    }

    /// `ct-get-limits`'s text, as OVS formats it.
    pub fn format(&self, asked: &[u16]) -> String {
        let lines = self.get(asked);
        let mut out = format!("default limit={}", self.default_limit());
        for l in lines {
            out.push_str(&format!(
                "\nzone={},limit={},count={}",
                l.zone, l.limit, l.count
            ));
        }
        out.push('\n');
        out
    }
}

/// A `dpctl/ct-*-limits` request, parsed from OVS's arguments (the
/// datapath name already taken off).
#[derive(Debug, PartialEq, Eq)]
pub enum LimitsRequest {
    Set {
        default: Option<u32>,
        zones: Vec<(u16, u32)>,
    },
    Get(Vec<u16>),
    Del(Vec<u16>),
}

/// `ct-set-limits`'s arguments: `[default=N] [zone=Z,limit=N]...`, the
/// default first (OVS 3.1's `dpctl_ct_set_limits`); messages as OVS's.
pub fn parse_set(args: &[&str]) -> Result<LimitsRequest, String> {
    let mut rest = args;
    let mut default = None;
    if let Some(first) = rest.first() {
        if let Some(v) = first.strip_prefix("default=") {
            default = Some(v.parse().map_err(|_| "invalid default limit".to_string())?);
            rest = &rest[1..];
        }
    }
    let zones = rest
        .iter()
        .map(|a| parse_zone_limit(a))
        .collect::<Result<_, _>>()?;
    Ok(LimitsRequest::Set { default, zones })
}

/// One `zone=Z,limit=N` (either order), as OVS's
/// `ct_dpif_parse_zone_limit_tuple` reads it.
fn parse_zone_limit(arg: &str) -> Result<(u16, u32), String> {
    let (mut zone, mut limit) = (None, None);
    for kv in arg.split(',').filter(|kv| !kv.is_empty()) {
        let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
        if value.is_empty() {
            return Err(format!("field {key} missing value"));
        }
        match key {
            "zone" => {
                zone = Some(
                    value
                        .parse::<u16>()
                        .map_err(|_| format!("failed to parse field {key}"))?,
                )
            }
            "limit" => {
                limit = Some(
                    value
                        .parse::<u32>()
                        .map_err(|_| format!("failed to parse field {key}"))?,
                )
            }
            _ => return Err(format!("invalid zone limit field: {key}")),
        }
    }
    match (zone, limit) {
        (Some(z), Some(l)) => Ok((z, l)),
        _ => Err("failed to parse zone limit".into()),
    }
}

/// `zone=Z1[,Z2]...` of `ct-get-limits` and `ct-del-limits`.
pub fn parse_zones(arg: &str) -> Result<Vec<u16>, String> {
    let Some(list) = arg.strip_prefix("zone=") else {
        return Err(format!("invalid argument {arg}"));
    };
    list.split(',')
        .filter(|z| !z.is_empty())
        .map(|z| z.parse::<u16>().map_err(|_| "invalid zone".to_string()))
        .collect()
}

impl ZoneLimits {
    /// Carries out a request; the reply text (`ct-get-limits`'s lines,
    /// nothing for the others).
    pub fn apply(&self, req: &LimitsRequest) -> String {
        match req {
            LimitsRequest::Set { default, zones } => {
                self.set(*default, zones);
                tracing::info!(?default, ?zones, "conntrack zone limits set");
                String::new()
            }
            LimitsRequest::Del(zones) => {
                self.delete(zones);
                tracing::info!(?zones, "conntrack zone limits deleted");
                String::new()
            }
            LimitsRequest::Get(zones) => self.format(zones),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admitted(a: Admission) -> Option<u32> {
        match a {
            Admission::Admitted(s) => Some(s),
            _ => None,
        }
    }

    #[test]
    fn arguments_parse_as_ovs_reads_them() {
        assert_eq!(
            parse_set(&["default=10", "zone=1,limit=5", "limit=7,zone=2"]),
            Ok(LimitsRequest::Set {
                default: Some(10),
                zones: vec![(1, 5), (2, 7)]
            })
        );
        assert_eq!(
            parse_set(&["default=x"]),
            Err("invalid default limit".into())
        );
        assert_eq!(
            parse_set(&["zone=1"]),
            Err("failed to parse zone limit".into())
        );
        assert_eq!(
            parse_set(&["zone=70000,limit=1"]),
            Err("failed to parse field zone".into())
        );
        assert_eq!(
            parse_set(&["zone=1,limit=1", "default=3"]),
            Err("invalid zone limit field: default".into())
        );
        assert_eq!(
            parse_set(&["zone=,limit=1"]),
            Err("field zone missing value".into())
        );
        assert_eq!(parse_zones("zone=1,2,3"), Ok(vec![1, 2, 3]));
        assert_eq!(parse_zones("zone=1,x"), Err("invalid zone".into()));
        assert_eq!(parse_zones("1,2"), Err("invalid argument 1,2".into()));
    }

    #[test]
    fn a_zone_limit_refuses_beyond_it_and_frees_on_release() {
        let z = ZoneLimits::default();
        assert!(matches!(z.admit(5), Admission::Unlimited));
        z.set(None, &[(5, 2)]);
        let a = admitted(z.admit(5)).unwrap();
        let _b = admitted(z.admit(5)).unwrap();
        assert!(matches!(z.admit(5), Admission::Refused));
        assert!(matches!(z.admit(6), Admission::Unlimited));
        z.release(a);
        assert!(admitted(z.admit(5)).is_some());
        assert_eq!(z.format(&[]), "default limit=0\nzone=5,limit=2,count=2\n");
    }

    #[test]
    fn the_default_is_one_count_shared_by_zones_without_their_own() {
        let z = ZoneLimits::default();
        z.set(Some(2), &[(1, 5)]);
        assert!(admitted(z.admit(7)).is_some());
        assert!(admitted(z.admit(8)).is_some());
        assert!(matches!(z.admit(9), Admission::Refused));
        assert!(admitted(z.admit(1)).is_some());
        // Asked zones under the default show the default's limit and count.
        assert_eq!(
            z.format(&[9, 1]),
            "default limit=2\nzone=9,limit=2,count=2\nzone=1,limit=5,count=1\n"
        );
    }

    #[test]
    fn deleting_a_limit_drops_its_count() {
        let z = ZoneLimits::default();
        z.set(None, &[(3, 1)]);
        let old = admitted(z.admit(3)).unwrap();
        z.delete(&[3, 4]);
        assert!(matches!(z.admit(3), Admission::Unlimited));
        z.set(None, &[(3, 1)]);
        // The new slot starts at 0; the old connection's release does not
        // touch it.
        z.release(old);
        assert!(admitted(z.admit(3)).is_some());
        assert!(matches!(z.admit(3), Admission::Refused));
        assert_eq!(
            z.get(&[4]),
            vec![ZoneLimit {
                zone: 4,
                limit: 0,
                count: 0
            }]
        );
        // Raising a limit keeps the count.
        z.set(None, &[(3, 2)]);
        assert_eq!(
            z.get(&[3]),
            vec![ZoneLimit {
                zone: 3,
                limit: 2,
                count: 1
            }]
        );
    }
}
