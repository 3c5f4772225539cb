//! Idle and hard timeouts of flows.
//!
//! # Design
//!
//! A thread per bridge (started by [`crate::Server`]) wakes every
//! [`EXPIRY_INTERVAL`] and asks the bridge for its timed flows only (the
//! tables index them, so permanent flows cost nothing). A flow is idle
//! while its packet counter does not move: the tracker remembers, per flow
//! id, the count it last saw and when that count last changed. Packet
//! threads fold cached hits into the counters at least every 20
//! milliseconds while busy and at once when idle, so a flow in use never
//! looks idle for a whole interval.
//!
//! Expiry is as precise as the interval (OVS's is about as coarse), and a
//! flow's idle clock starts at its installation.

use crate::bridge::Bridge;
use crate::wire::flow_removed::reason;
use flowtable::Rule;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How often timeouts are checked.
pub(crate) const EXPIRY_INTERVAL: Duration = Duration::from_millis(250);

/// Per timed flow: the packet count last seen and when it last changed.
#[derive(Default)]
pub(crate) struct Expiry {
    seen: HashMap<u64, (u64, Instant)>,
}

impl Expiry {
    /// Removes and reports every flow whose timeout passed by `now`.
    pub(crate) fn run(&mut self, bridge: &Bridge, now: Instant) {
        let mut alive = HashMap::with_capacity(self.seen.len());
        bridge.expire_flows(|r| {
            let why = self.check(r, now);
            if why.is_none() {
                if let Some(v) = self.seen.get(&r.id) {
                    alive.insert(r.id, *v);
                }
            }
            why
        });
        // Forget flows that are gone (expired, deleted or replaced).
        self.seen = alive;
    }

    fn check(&mut self, r: &Rule, now: Instant) -> Option<u8> {
        if r.hard_timeout != 0 && now.saturating_duration_since(r.installed) >= secs(r.hard_timeout)
        {
            return Some(reason::HARD_TIMEOUT);
        }
        if r.idle_timeout == 0 {
            return None;
        }
        let packets = r.stats.read().0;
        let (last, since) = self.seen.entry(r.id).or_insert((packets, r.installed));
        if *last != packets {
            *last = packets;
            *since = now;
        }
        (now.saturating_duration_since(*since) >= secs(r.idle_timeout))
            .then_some(reason::IDLE_TIMEOUT)
    }
}

fn secs(s: u16) -> Duration {
    Duration::from_secs(u64::from(s))
}
