//! The packets that do not continue a connection: new ones (`+new`,
//! stored if committed, NATed as asked) and ICMP or ICMPv6 errors quoting
//! one (`+rel`).

use super::tcp::{self, TcpConn};
use super::tuple::{Quoted, TcpSeg};
use super::zone_limits::Admission;
use super::{nat, state, Conn, Conntrack, CtOutcome, CtRequest, Tuple, NAT_DST, NAT_SRC};
use flowtable::matching::IP_PROTO_TCP;
use parking_lot::Mutex;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use xbr_packet::parse::Layers;

/// Room for one connection about to be stored: a slot under its zone's
/// limit (if the zone has one) and a place reserved in the table. A
/// stored connection keeps both; one that is not stored after all gives
/// them back ([`Room::give_back`]).
pub(super) struct Room {
    zone_slot: Option<u32>,
}

impl Room {
    /// The zone-limit slot the stored connection holds (0: no limit).
    pub(super) fn zone_slot(&self) -> u32 {
        self.zone_slot.unwrap_or(0)
    }

    /// The connection was not stored: its table place and zone slot are
    /// free again.
    pub(super) fn give_back(self, ct: &Conntrack) {
        ct.table.unreserve();
        if let Some(s) = self.zone_slot {
            ct.zone_limits.release(s);
        }
    }
}

impl Conntrack {
    /// Takes room for one more connection in `zone`: the zone's limit
    /// first, as OVS checks it, then the table's. `None`, counted in
    /// `zone_limited` or `table_full`, when either is reached; committed
    /// packets and the kernel's reported connections share it.
    pub(super) fn take_room(&self, zone: u16) -> Option<Room> {
        let zone_slot = match self.zone_limits.admit(zone) {
            Admission::Refused => {
                self.stats.zone_limited.fetch_add(1, Relaxed);
                return None;
            }
            Admission::Admitted(slot) => Some(slot),
            Admission::Unlimited => None,
        };
        if !self.table.reserve(self.limit()) {
            if let Some(s) = zone_slot {
                self.zone_limits.release(s);
            }
            self.stats.table_full.fetch_add(1, Relaxed);
            return None;
        }
        Some(Room { zone_slot })
    }

    /// A packet without a connection: `+new`, stored if committed.
    pub(super) fn create(
        &self,
        frame: &mut [u8],
        layers: Layers,
        t: &Tuple,
        seg: Option<&TcpSeg>,
        req: &CtRequest,
        now: u64,
    ) -> CtOutcome {
        if let Some(seg) = seg {
            if !tcp::valid_new(seg) {
                return self.invalid(req.zone);
            }
        }
        if t.is_icmp() && t.dport != t.echo_request() {
            // Only a request starts an echo exchange.
            return self.invalid(req.zone);
        }
        let new = CtOutcome {
            state: state::TRK | state::NEW,
            zone: req.zone,
            mark: 0,
            label: 0,
        };
        if !req.commit {
            return new;
        }
        // The zone's limit first, then a full table (as OVS's userspace
        // datapath, `conn_not_found`): either way the packet is `+new`
        // already and goes on uncommitted.
        let Some(room) = self.take_room(req.zone) else {
            return new;
        };
        let spec = req.nat.filter(|n| n.is_snat() || n.is_dnat());
        if spec.is_some_and(|n| n.first_addr() != 0 && n.v6 != t.v6) {
            // A range of the other family: the connection cannot be
            // translated as asked, and passing the packet untranslated
            // could take it past what the NAT stood for.
            room.give_back(self);
            self.stats.nat_family.fetch_add(1, Relaxed);
            return self.invalid(req.zone);
        }
        let reply = match &spec {
            Some(spec) => match nat::allocate(t, spec, |c| c == t || self.table.contains(c)) {
                Some(r) => r,
                None => {
                    room.give_back(self);
                    self.stats.nat_exhausted.fetch_add(1, Relaxed);
                    return self.invalid(req.zone);
                }
            },
            None => t.reverse(),
        };
        // A translation that changes nothing (the address and port were
        // free as they were) is no NAT.
        let nat_bits = match spec {
            Some(_) if reply == t.reverse() => 0,
            Some(n) if n.is_snat() => NAT_SRC,
            Some(_) => NAT_DST,
            None => 0,
        };
        let mark = req.mark.map_or(0, |(v, m)| v & m);
        let label = req.label.map_or(0, |(v, m)| v & m);
        let tcp = seg.map(TcpConn::new);
        let first = if t.proto == IP_PROTO_TCP {
            self.config.timeouts.tcp_first_packet
        } else if t.is_icmp() {
            self.config.timeouts.icmp_first
        } else {
            self.config.timeouts.other_first
        };
        let conn = Conn {
            orig: *t,
            reply,
            mark,
            label: super::label_words(label),
            tcp,
            seen_reply: false,
            multiple: false,
            nat: nat_bits,
            host_orig: None,
            expires: now.saturating_add(first),
            xdp_links: 0,
            xdp_epoch: 0,
            removed: false,
            zone_slot: room.zone_slot(),
        };
        if self
            .table
            .insert(*t, reply, Arc::new(Mutex::new(conn)))
            .is_err()
        {
            // A tuple of ours is taken (another thread's connection, or a
            // NATed one using our reverse): refuse rather than guess.
            room.give_back(self);
            return self.invalid(req.zone);
        }
        self.stats.committed.fetch_add(1, Relaxed);
        let mut st = new.state;
        if req.nat.is_some() && nat_bits != 0 {
            nat::rewrite_packet(frame, layers, t, &reply.reverse());
            if nat_bits & NAT_SRC != 0 {
                st |= state::SNAT;
            }
            if nat_bits & NAT_DST != 0 {
                st |= state::DNAT;
            }
        }
        CtOutcome {
            state: st,
            zone: req.zone,
            mark,
            label,
        }
    }

    /// An ICMP error: `+rel` for the connection it quotes, translated with
    /// that connection's NAT when the action has `nat`.
    pub(super) fn related(
        &self,
        frame: &mut [u8],
        layers: Layers,
        outer: &Tuple,
        quoted: &Quoted,
        req: &CtRequest,
        now: u64,
    ) -> CtOutcome {
        // The quoted packet went the other way: its reverse is a tuple of
        // the direction this error travels in.
        let travel = quoted.tuple.reverse();
        let found = self.table.with(&travel, |e| {
            let e = e?;
            let c = e.conn.lock();
            if c.expires <= now {
                return None;
            }
            let mut st = state::TRK | state::REL;
            if e.reply {
                st |= state::RPL;
            }
            if req.nat.is_some() && c.nat != 0 {
                // Deliver to the quoted packet's real sender, quoting what
                // it really sent.
                let real = if e.reply { c.orig } else { c.reply };
                let outer_src = if outer.src == quoted.tuple.dst {
                    real.dst
                } else {
                    outer.src
                };
                nat::rewrite_icmp_error(frame, layers, quoted, &real, real.src, outer_src);
                st |= c.nat_state();
            }
            Some(CtOutcome {
                state: st,
                zone: req.zone,
                mark: c.mark,
                label: c.label(),
            })
        });
        found.unwrap_or_else(|| self.invalid(req.zone))
    }
}
