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

impl Conntrack {
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
        // The zone's limit first, as OVS checks it: over it, the packet
        // goes on `+trk+new`, uncommitted.
        let zone_slot = match self.zone_limits.admit(req.zone) {
            Admission::Refused => {
                self.stats.zone_limited.fetch_add(1, Relaxed);
                return new;
            }
            Admission::Admitted(slot) => Some(slot),
            Admission::Unlimited => None,
        };
        let give_back = || {
            if let Some(s) = zone_slot {
                self.zone_limits.release(s);
            }
        };
        // A full table, as OVS's userspace datapath (`conn_not_found`):
        // the packet is `+new` already and goes on uncommitted.
        if !self.table.reserve(self.limit()) {
            give_back();
            self.stats.table_full.fetch_add(1, Relaxed);
            return new;
        }
        let spec = req.nat.filter(|n| n.is_snat() || n.is_dnat());
        if spec.is_some_and(|n| n.first_addr() != 0 && n.v6 != t.v6) {
            // A range of the other family: the connection cannot be
            // translated as asked, and passing the packet untranslated
            // could take it past what the NAT stood for.
            self.table.unreserve();
            give_back();
            self.stats.nat_family.fetch_add(1, Relaxed);
            return self.invalid(req.zone);
        }
        let reply = match &spec {
            Some(spec) => match nat::allocate(t, spec, |c| c == t || self.table.contains(c)) {
                Some(r) => r,
                None => {
                    self.table.unreserve();
                    give_back();
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
            zone_slot: zone_slot.unwrap_or(0),
        };
        if self
            .table
            .insert(*t, reply, Arc::new(Mutex::new(conn)))
            .is_err()
        {
            // A tuple of ours is taken (another thread's connection, or a
            // NATed one using our reverse): refuse rather than guess.
            self.table.unreserve();
            give_back();
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
