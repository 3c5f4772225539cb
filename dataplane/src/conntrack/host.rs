//! Connections the host's conntrack made, learned when they enter from
//! the host (the internal port, `tun0`).
//!
//! # Design
//!
//! Under OVS's kernel datapath, `ct()` and the host's iptables share one
//! conntrack (zone 0). The agent relies on it: a pod's connection to a
//! Service leaves br0 through tun0, kube-proxy's iptables rules DNAT it in
//! the host to a backend pod, and it comes back into br0 through tun0; the
//! backend's replies are `+rpl` and table 31's `ct(nat,table=70)` turns
//! their source back into the Service address. Likewise replies to a pod's
//! connection that the host MASQUERADEd to the outside come back through
//! tun0 already un-NATed, and are `+est+rpl`.
//!
//! xbr's table is its own, so it learns: when a packet that entered from
//! an internal port misses in xbr's table, xbr asks the host's conntrack
//! ([`HostConntrack`], over ctnetlink in production) for the connection
//! holding the packet's tuple or its reverse, and if there is one, stores
//! what it means for br0 ([`classify`]) as its own connection (committed,
//! as the host's is): its two tuples as br0 sees them, the direction the
//! packet travels in, and, when the host translated the packet before it
//! reached br0, the host's original tuple, so that a `ct(nat)` on a reply
//! rewrites the reply into what the host's client expects (the Service
//! address, for a Service). A host connection is queried once, on its
//! first packet from the host; the packet thread waits for that answer
//! (bounded by `ctnetlink::QUERY_TIMEOUT_MS`), never for later packets.
//!
//! The replies of a connection the host translated go from pod to pod
//! through br0 and never pass the host, whose conntrack would then take
//! the client's next packets (an ACK to a SYN-ACK it never saw) as invalid
//! and leave them untranslated. With a shared conntrack, OVS's `ct()`
//! updates the host's entry; xbr does the same explicitly: on a learned
//! connection's first reply it marks the host's entry as having seen a
//! reply (TCP: established, with liberal window checks, since the host
//! sees only one direction) before the reply is forwarded.
//!
//! Learned connections have no TCP window tracking (the host's conntrack
//! already checks them) and use the established TCP timeout, since xbr
//! does not see their whole life. A connection the host made and xbr only
//! sees first from the pod side (a reply leaving a pod after xbr's entry
//! expired) is not learned: only packets from the host are looked up.

use super::tuple::Tuple;
use super::{state, Conn, Conntrack, CtOutcome, CtRequest, NAT_DST, NAT_SRC};
use parking_lot::Mutex;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// The host's connection tracker, as xbr asks it.
pub trait HostConntrack: Send + Sync {
    /// The host's connection whose original or reply tuple is `t` or
    /// `t.reverse()`: (original, reply) as the host tracks them.
    fn lookup(&self, t: &Tuple) -> Option<(Tuple, Tuple)>;

    /// The connection the host tracks as `host_orig` had its first reply,
    /// which the host did not see: it must now take the connection as
    /// established (or it would find the client's next packets invalid,
    /// and not translate them).
    fn reply_seen(&self, host_orig: &Tuple);
}

/// A host connection as br0 sees it, for a packet with tuple `t` from the
/// host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Learned {
    /// The connection's original direction on br0.
    pub orig: Tuple,
    /// Its reply direction on br0 (always `orig.reverse()`: the host
    /// translates on its side of tun0, never xbr).
    pub reply: Tuple,
    /// When the host translated the original direction before br0 saw it
    /// (a Service DNAT): the host's original tuple; a reply then becomes
    /// `host_orig.reverse()` under `ct(nat)`.
    pub host_orig: Option<Tuple>,
    /// The packet travels in the reply direction.
    pub reply_dir: bool,
}

/// What the host connection (`o`, `r`) means for a packet with tuple `t`
/// arriving from the host; `None` if it does not hold `t` at all.
pub fn classify(t: &Tuple, (o, r): (Tuple, Tuple)) -> Option<Learned> {
    let rev = t.reverse();
    let plain = |orig: Tuple, reply_dir| Learned {
        orig,
        reply: orig.reverse(),
        host_orig: None,
        reply_dir,
    };
    if o == *t {
        // The host's own connection (or one it forwards untranslated).
        Some(plain(*t, false))
    } else if o == rev {
        // A reply the host un-translated (MASQUERADE's return traffic).
        Some(plain(rev, true))
    } else if r == rev {
        // Translated by the host on the way in (a Service's DNAT): replies
        // must be translated back under ct(nat).
        Some(Learned {
            orig: *t,
            reply: rev,
            host_orig: Some(o),
            reply_dir: false,
        })
    } else if r == *t {
        Some(plain(rev, true))
    } else {
        None
    }
}

impl Conntrack {
    /// Stores the host's connection holding `t`, if any, as a committed
    /// connection of xbr's, and returns this packet's outcome.
    pub(super) fn learn(&self, t: &Tuple, req: &CtRequest, now: u64) -> Option<CtOutcome> {
        let learned = classify(t, self.host.as_ref()?.lookup(t)?)?;
        if !self.table.reserve(self.limit()) {
            self.stats.table_full.fetch_add(1, Relaxed);
            return Some(self.invalid(req.zone));
        }
        let mut nat = 0;
        if let Some(o) = learned.host_orig {
            if (o.dst, o.dport) != (t.dst, t.dport) {
                nat |= NAT_DST;
            }
            if (o.src, o.sport) != (t.src, t.sport) {
                nat |= NAT_SRC;
            }
        }
        let (mark, label) = if req.commit {
            (
                req.mark.map_or(0, |(v, m)| v & m),
                req.label.map_or(0, |(v, m)| v & m),
            )
        } else {
            (0, 0)
        };
        let mut conn = Conn {
            orig: learned.orig,
            reply: learned.reply,
            mark,
            label: super::label_words(label),
            tcp: None,
            seen_reply: learned.reply_dir,
            multiple: false,
            nat,
            host_orig: learned.host_orig.map(Box::new),
            expires: 0,
            xdp_links: 0,
            xdp_epoch: 0,
            removed: false,
            zone_slot: 0,
        };
        conn.expires = now.saturating_add(conn.timeout(&self.config.timeouts));
        let state_nat = if req.nat.is_some() {
            conn.nat_state()
        } else {
            0
        };
        if self
            .table
            .insert(learned.orig, learned.reply, Arc::new(Mutex::new(conn)))
            .is_err()
        {
            self.table.unreserve();
            return None;
        }
        self.stats.learned.fetch_add(1, Relaxed);
        let dir = if learned.reply_dir {
            state::EST | state::RPL
        } else {
            state::NEW
        };
        Some(CtOutcome {
            state: state::TRK | dir | state_nat,
            zone: req.zone,
            mark,
            label,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowtable::matching::IP_PROTO_TCP;

    const POD: u32 = 0x0a80_0002;
    const BACKEND: u32 = 0x0a80_0205;
    const SERVICE: u32 = 0xac1e_000a;
    const EXT: u32 = 0x0101_0101;
    const NODE: u32 = 0x0a00_000b;

    fn t(src: u32, sport: u16, dst: u32, dport: u16) -> Tuple {
        Tuple::v4(0, IP_PROTO_TCP, src, dst, sport, dport)
    }

    #[test]
    fn a_service_connection_keeps_the_service_address_for_replies() {
        // Pod -> Service, DNATed by the host to the backend.
        let host = (t(POD, 40000, SERVICE, 80), t(BACKEND, 8080, POD, 40000));
        let seen = t(POD, 40000, BACKEND, 8080);
        let l = classify(&seen, host).unwrap();
        assert_eq!(l.orig, seen);
        assert_eq!(l.reply, t(BACKEND, 8080, POD, 40000));
        assert_eq!(l.host_orig, Some(host.0));
        assert!(!l.reply_dir);
        assert_eq!(
            l.host_orig.unwrap().reverse(),
            t(SERVICE, 80, POD, 40000),
            "what the backend's replies become"
        );
    }

    #[test]
    fn masquerade_return_traffic_is_a_reply() {
        // Pod -> outside, SNATed by the host to the node address.
        let host = (t(POD, 40000, EXT, 443), t(EXT, 443, NODE, 61000));
        let seen = t(EXT, 443, POD, 40000);
        let l = classify(&seen, host).unwrap();
        assert_eq!((l.orig, l.reply), (t(POD, 40000, EXT, 443), seen));
        assert!(l.reply_dir);
        assert_eq!(l.host_orig, None);
    }

    #[test]
    fn the_hosts_own_connections_are_plain() {
        let probe = t(NODE, 50000, POD, 8080);
        let l = classify(&probe, (probe, probe.reverse())).unwrap();
        assert_eq!((l.orig, l.host_orig, l.reply_dir), (probe, None, false));
        assert_eq!(classify(&probe, (t(1, 1, 2, 2), t(2, 2, 1, 1))), None);
    }
}
