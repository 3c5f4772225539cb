//! Looking after the table from outside the packet path: expiry sweeps,
//! dumps and flushes (one shard locked at a time, never a connection and a
//! shard together), counters, and the text form of connections as
//! `ovs-appctl dpctl/dump-conntrack` prints them (one per line; `zone=`,
//! `mark=` and `labels=` only when non-zero).

use super::tuple::Tuple;
use super::{table, Conntrack, CtEntry};
use flowtable::matching::{
    IP_PROTO_ICMP, IP_PROTO_ICMPV6, IP_PROTO_SCTP, IP_PROTO_TCP, IP_PROTO_UDP,
};
use std::fmt::Write;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::atomic::Ordering::Relaxed;

/// OVS's names: `tcp`, `udp6`, `icmpv6`...
fn proto_name(t: &Tuple) -> String {
    let six = if t.v6 { "6" } else { "" };
    match t.proto {
        IP_PROTO_TCP => format!("tcp{six}"),
        IP_PROTO_UDP => format!("udp{six}"),
        IP_PROTO_SCTP => format!("sctp{six}"),
        IP_PROTO_ICMP if !t.v6 => "icmp".into(),
        IP_PROTO_ICMPV6 if t.v6 => "icmpv6".into(),
        other => format!("proto={other}"),
    }
}

fn tuple(s: &mut String, t: &Tuple) {
    let _ = if t.v6 {
        write!(
            s,
            "src={},dst={}",
            Ipv6Addr::from(t.src.as_v6()),
            Ipv6Addr::from(t.dst.as_v6())
        )
    } else {
        write!(
            s,
            "src={},dst={}",
            Ipv4Addr::from(t.src.as_v4()),
            Ipv4Addr::from(t.dst.as_v4())
        )
    };
    match t.proto {
        _ if t.is_icmp() => {
            let _ = write!(s, ",id={},type={},code=0", t.sport, t.dport);
        }
        IP_PROTO_TCP | IP_PROTO_UDP | IP_PROTO_SCTP => {
            let _ = write!(s, ",sport={},dport={}", t.sport, t.dport);
        }
        _ => {}
    }
}

/// One connection, e.g.
/// `tcp,orig=(src=10.128.0.2,dst=10.128.0.3,sport=40000,dport=80),reply=(...),zone=1,mark=0x5,protoinfo=(state=ESTABLISHED)`.
pub fn format_entry(e: &CtEntry) -> String {
    let mut s = proto_name(&e.orig);
    s.push_str(",orig=(");
    tuple(&mut s, &e.orig);
    s.push_str("),reply=(");
    tuple(&mut s, &e.reply);
    s.push(')');
    if e.orig.zone != 0 {
        let _ = write!(s, ",zone={}", e.orig.zone);
    }
    if e.mark != 0 {
        let _ = write!(s, ",mark={}", e.mark);
    }
    if e.label != 0 {
        let _ = write!(s, ",labels={:#x}", e.label);
    }
    if let Some(st) = e.tcp_state {
        let _ = write!(s, ",protoinfo=(state={st})");
    }
    s
}

impl Conntrack {
    /// Removes expired connections from the next `shards` shards; returns
    /// how many it removed. Cheap enough to call once per busy round.
    pub fn sweep(&self, now: u64, shards: usize) -> usize {
        let mut removed = 0;
        for _ in 0..shards.min(table::SHARDS) {
            let at = self.sweep_at.fetch_add(1, Relaxed) % table::SHARDS;
            for conn in self.table.shard_conns_where(at, |c| c.expires <= now) {
                // A packet may have refreshed it since it was picked.
                let (orig, reply, expired) = {
                    let c = conn.lock();
                    (c.orig, c.reply, c.expires <= now)
                };
                if expired && self.remove_conn(&orig, &reply, &conn).0 {
                    removed += 1;
                }
            }
        }
        self.stats.expired.fetch_add(removed as u64, Relaxed);
        self.frags.sweep(now);
        removed
    }

    /// Every live connection (of `zone`, if given), sorted by tuple.
    pub fn dump(&self, zone: Option<u16>, now: u64) -> Vec<CtEntry> {
        // Connections the kernel created are listed as soon as it did.
        self.kernel_drain();
        let mut out = Vec::new();
        for s in 0..table::SHARDS {
            for conn in self.table.shard_conns(s) {
                let c = conn.lock();
                if c.expires <= now || zone.is_some_and(|z| z != c.orig.zone) {
                    continue;
                }
                out.push(CtEntry {
                    orig: c.orig,
                    reply: c.reply,
                    mark: c.mark,
                    label: c.label(),
                    tcp_state: c.tcp_state(),
                    expires_in: c.expires - now,
                });
            }
        }
        out.sort_by_key(|e| (e.orig.zone, e.orig));
        out
    }

    /// The table (of `zone`) by protocol, as `ovs-appctl
    /// dpctl/ct-stats-show` prints it; `verbose` adds TCP connections by
    /// state.
    pub fn summary_text(&self, zone: Option<u16>, verbose: bool) -> String {
        // OVS's order and names. OVS counts ICMPv6 but prints nothing for
        // it (its total then exceeds the lines); xbr prints it.
        const PROTOS: [(u8, &str); 8] = [
            (6, "TCP"),
            (17, "UDP"),
            (136, "UDPLITE"),
            (132, "SCTP"),
            (1, "ICMP"),
            (58, "ICMPV6"),
            (33, "DCCP"),
            (2, "IGMP"),
        ];
        const TCP_STATES: [&str; 8] = [
            "SYN_SENT",
            "SYN_RECV",
            "ESTABLISHED",
            "FIN_WAIT_1",
            "CLOSE_WAIT",
            "LAST_ACK",
            "FIN_WAIT_2",
            "TIME_WAIT",
        ];
        let entries = self.dump(zone, self.now_ms());
        let count = |proto: u8| entries.iter().filter(|e| e.orig.proto == proto).count();
        let mut out = format!("Connections Stats:\n    Total: {}\n", entries.len());
        let mut listed = 0;
        for (proto, name) in PROTOS {
            let n = count(proto);
            listed += n;
            if n > 0 {
                out.push_str(&format!("  {name}: {n}\n"));
            }
            if proto == 6 && n > 0 && verbose {
                out.push_str("    Conn per TCP states:\n");
                for state in TCP_STATES {
                    let k = entries
                        .iter()
                        .filter(|e| e.tcp_state == Some(state))
                        .count();
                    if k > 0 {
                        out.push_str(&format!("\t  [{state}]={k}\n"));
                    }
                }
            }
        }
        let other = entries.len() - listed;
        if other > 0 {
            out.push_str(&format!("  Other: {other}\n"));
        }
        out
    }

    /// The counters, one `name: value` per line (`xbr conntrack stats`).
    pub fn stats_text(&self) -> String {
        self.kernel_drain();
        let s = &self.stats;
        format!(
            "connections: {}\nlimit: {}\ncommitted: {}\ninvalid: {}\ntable_full: {}\n\
             nat_exhausted: {}\nexpired: {}\nlearned_from_host: {}\nfragmented_datagrams: {}\nlater_fragments: {}\n\
             orphan_fragments: {}\nnot_ip: {}\nnat_family: {}\ncreated_in_kernel: {}\n\
             kernel_reports_refused: {}\nzone_limited: {}\nfragment_table_full: {}\n",
            self.len(),
            self.limit(),
            s.committed.load(Relaxed),
            s.invalid.load(Relaxed),
            s.table_full.load(Relaxed),
            s.nat_exhausted.load(Relaxed),
            s.expired.load(Relaxed),
            s.learned.load(Relaxed),
            self.frags.len(),
            s.fragments.load(Relaxed),
            s.orphan_fragments.load(Relaxed),
            s.not_ip.load(Relaxed),
            s.nat_family.load(Relaxed),
            s.kernel_imported.load(Relaxed),
            s.kernel_refused.load(Relaxed),
            s.zone_limited.load(Relaxed),
            self.frags.share_hits().1,
        ) + &self.fragment_shares_text()
    }

    /// The fragment table's use by port, for ports that hit their share
    /// (`frag.rs`): `fragment_share_full: port P held H refused N` lines.
    fn fragment_shares_text(&self) -> String {
        let ports = self.fragment_shares();
        ports
            .iter()
            .filter(|(_, _, refused)| *refused > 0)
            .map(|(p, held, refused)| {
                format!("fragment_share_full: port {p} held {held} refused {refused}\n")
            })
            .collect()
    }

    /// Per port, fragment records held and new datagrams refused for the
    /// port's share (`frag.rs`), by port number.
    pub fn fragment_shares(&self) -> Vec<(u32, usize, u64)> {
        self.frags.share_hits().0
    }

    /// Per port, new fragmented datagrams refused for the port's share,
    /// read without a lock (the metrics); and those of ports beyond the
    /// table's slots.
    pub fn fragment_share_refusals(&self) -> (Vec<(u32, u64)>, u64) {
        self.frags.share_refusals()
    }

    /// Fragmented datagrams whose first fragment's outcome is kept for
    /// their later fragments (`ovs-appctl dpctl/ipf-get-status`).
    pub fn fragmented_datagrams(&self) -> usize {
        self.frags.len()
    }

    /// Removes every connection (of `zone`, if given); returns how many.
    pub fn flush(&self, zone: Option<u16>) -> usize {
        // The kernel's connections created before the flush go with it.
        self.kernel_drain();
        let mut removed = 0;
        let mut linked = false;
        for s in 0..table::SHARDS {
            for conn in self.table.shard_conns(s) {
                let (orig, reply) = {
                    let c = conn.lock();
                    (c.orig, c.reply)
                };
                if zone.is_some_and(|z| z != orig.zone) {
                    continue;
                }
                let (gone, was_linked) = self.remove_conn(&orig, &reply, &conn);
                removed += usize::from(gone);
                linked |= was_linked;
            }
        }
        if linked {
            self.xdp_flushed();
        }
        // Fragment records carry connections' outcomes; a flushed
        // connection's later fragments must not pass on them.
        self.frags.clear();
        removed
    }
}

/// Pause between two shards of the expiry sweep: a full pass over the 64
/// shards takes about 6 s, so an idle connection outlives its timeout by
/// that much at most (lookups ignore it meanwhile).
pub const SWEEP_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

/// The background thread that removes expired connections, a shard at a
/// time, off the packet threads. Stopped (and joined) when dropped.
pub struct Sweeper {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Conntrack {
    /// Starts the expiry sweep for `ct`.
    pub fn spawn_sweeper(ct: &std::sync::Arc<Conntrack>) -> std::io::Result<Sweeper> {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let thread = {
            let (ct, stop) = (ct.clone(), stop.clone());
            std::thread::Builder::new()
                .name("xbr-ct-sweep".into())
                .spawn(move || {
                    while !stop.load(Relaxed) {
                        ct.sweep(ct.now_ms(), 1);
                        std::thread::park_timeout(SWEEP_INTERVAL);
                    }
                })?
        };
        Ok(Sweeper {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Sweeper {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            if t.join().is_err() {
                tracing::error!("conntrack sweep thread panicked");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{ip_frame, run, tcp_frame, udp_frame, A, B, COMMIT};
    use super::super::tuple::tcp_flags as F;
    use super::super::{state, Conntrack, CtConfig, Timeouts};
    use std::sync::atomic::Ordering::Relaxed;

    #[test]
    fn the_summary_counts_connections_by_protocol_and_tcp_state() {
        let ct = Conntrack::default();
        assert_eq!(
            ct.summary_text(None, true),
            "Connections Stats:\n    Total: 0\n"
        );
        for port in [1000, 1001, 1002] {
            run(&ct, udp_frame(A, port, B, 53), &COMMIT, 0);
        }
        let syn = tcp_frame((A, 40000), (B, 80), 1000, 0, F::SYN, 0);
        run(&ct, syn, &COMMIT, 0);
        run(&ct, ip_frame(47, A, B, vec![0; 4]), &COMMIT, 0);
        let zone1 = super::super::CtRequest { zone: 1, ..COMMIT };
        run(&ct, udp_frame(A, 2000, B, 53), &zone1, 0);
        assert_eq!(
            ct.summary_text(None, false),
            "Connections Stats:\n    Total: 6\n  TCP: 1\n  UDP: 4\n  Other: 1\n"
        );
        assert_eq!(
            ct.summary_text(None, true),
            "Connections Stats:\n    Total: 6\n  TCP: 1\n    Conn per TCP states:\n\
             \t  [SYN_SENT]=1\n  UDP: 4\n  Other: 1\n"
        );
        assert_eq!(
            ct.summary_text(Some(1), true),
            "Connections Stats:\n    Total: 1\n  UDP: 1\n"
        );
    }

    #[test]
    fn a_lowered_limit_refuses_new_connections_and_keeps_the_others() {
        let ct = Conntrack::new(CtConfig {
            limit: 10,
            timeouts: Timeouts::default(),
        });
        // Committed: stored (a refused commit is `+new` too, as OVS's).
        let new = |ct: &Conntrack, port: u16| {
            let before = ct.len();
            let st = run(ct, udp_frame(A, port, B, 53), &COMMIT, 0).0.state;
            st & state::NEW != 0 && ct.len() == before + 1
        };
        assert!((1000..1004).all(|p| new(&ct, p)));
        ct.set_limit(2);
        assert_eq!(ct.limit(), 2);
        assert!(ct.stats_text().contains("\nlimit: 2\n"));
        assert!(!new(&ct, 1004), "refused: the table holds more than 2");
        assert_eq!(ct.stats.table_full.load(Relaxed), 1);
        assert_eq!(ct.len(), 4, "none removed");
        let reply = run(&ct, udp_frame(B, 53, A, 1000), &COMMIT, 1).0.state;
        assert_ne!(reply & state::EST, 0, "existing connections go on");
        ct.set_limit(5);
        assert!(new(&ct, 1004));
        assert_eq!(ct.config().limit, 10, "the configuration it started with");
    }
}
