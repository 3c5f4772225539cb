//! `xbr stats BRIDGE`: what a running bridge has done, for an operator
//! asking why packets go missing (as `ovs-appctl dpctl/show`,
//! `dpif-netdev/pmd-stats-show` and `coverage/show` answer for OVS):
//! per-port counters, the packet thread's drops by reason, its
//! translation cache and the XDP flow cache, and conntrack.
//!
//! The packet thread keeps its counters in plain integers and publishes
//! a copy when a statistics collection asks for one (see
//! `control::EngineSnapshot`), so the figures are at most one round old;
//! if it does not answer in time, the last copy is shown with its age.

use crate::conntrack::Conntrack;
use crate::control::{EngineSnapshot, PortMeta};
use crate::engine::EngineDrops;
use crate::fastpath::cache::XdpCacheStats;
use crate::kicker::KickerStats;
use crate::vxlan::TunnelDrops;
use flowtable::cache::CacheStats;
use std::fmt::Write;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

/// Every drop counter of the packet thread, by the name `xbr stats`
/// prints.
pub fn drop_counts(d: &EngineDrops) -> [(&'static str, u64); 17] {
    [
        ("table_miss", d.table_miss),
        ("explicit_drop", d.explicit),
        ("unsupported_action", d.unsupported),
        ("resubmit_depth", d.resubmit_depth),
        ("too_many_actions", d.too_many_actions),
        ("bad_output_port", d.bad_output_port),
        ("invalid_ttl", d.invalid_ttl),
        ("port_down", d.port_down),
        ("no_frames", d.no_frames),
        ("tx_ring_full", d.tx_full),
        ("upcall_queue_full", d.upcall_queue_full),
        ("packet_out_too_big", d.packet_out_too_big),
        ("ct_recirc_depth", d.ct_recirc_depth),
        ("qos_policed", d.qos_policed),
        ("meter", d.meter),
        ("ct_new_overflow", d.ct_new_overflow),
        ("flow_restore_wait", d.restore_wait),
    ]
}

pub fn tunnel_drop_counts(t: &TunnelDrops) -> [(&'static str, u64); 10] {
    [
        ("not_vxlan", t.not_vxlan),
        ("truncated", t.truncated),
        ("bad_outer_ip", t.bad_outer_ip),
        ("bad_udp", t.bad_udp),
        ("bad_flags", t.bad_flags),
        ("no_destination", t.no_destination),
        ("no_route", t.no_route),
        ("no_neighbour", t.no_neighbour),
        ("too_big", t.too_big),
        ("no_headroom", t.no_headroom),
    ]
}

fn xdp_counts(x: &XdpCacheStats) -> [(&'static str, u64); 16] {
    [
        ("hit_packets", x.hit_packets),
        ("decap_hit_packets", x.decap_hit_packets),
        ("encap_hit_packets", x.encap_hit_packets),
        ("installs", x.installs),
        ("ct_installs", x.ct_installs),
        ("install_errors", x.install_errors),
        ("full", x.full),
        ("deferred", x.deferred),
        ("expired", x.expired),
        ("invalidated", x.invalidated),
        ("ct_removed", x.ct_removed),
        ("revalidated", x.revalidated),
        ("revalidated_out", x.revalidated_out),
        ("adopted", x.adopted),
        ("adopt_rewritten", x.adopt_rewritten),
        ("adopt_removed", x.adopt_removed),
    ]
}

/// `name: value` lines for the nonzero counters, then their total; one
/// line saying "none" if all are zero.
fn nonzero(out: &mut String, what: &str, counts: &[(&str, u64)]) {
    let total: u64 = counts.iter().map(|(_, n)| n).sum();
    if total == 0 {
        let _ = writeln!(out, "{what}: none");
        return;
    }
    let _ = writeln!(out, "{what}: {total}");
    for (name, n) in counts.iter().filter(|(_, n)| *n > 0) {
        let _ = writeln!(out, "  {name}: {n}");
    }
}

fn cache_lines(out: &mut String, c: &CacheStats) {
    let looked_up = c.hits + c.megaflow_hits + c.misses;
    let rate = if looked_up == 0 {
        0.0
    } else {
        100.0 * (c.hits + c.megaflow_hits) as f64 / looked_up as f64
    };
    let _ = writeln!(
        out,
        "translation cache: hits: {}, megaflow_hits: {}, misses: {} ({rate:.1}% hit), \
         uncacheable: {}, invalidations: {}",
        c.hits, c.megaflow_hits, c.misses, c.uncacheable, c.invalidations
    );
}

/// The report `xbr stats` prints.
pub fn report(
    ports: &[Arc<PortMeta>],
    ports_by_thread: &[Vec<u32>],
    engine: &EngineSnapshot,
    kickers: &[KickerStats],
    ct: &Conntrack,
    limits: &ofproto::limits::LimitStats,
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "ports:");
    let mut ports: Vec<&Arc<PortMeta>> = ports.iter().collect();
    ports.sort_by_key(|p| p.ofport);
    for p in ports {
        let s = &p.stats;
        let _ = writeln!(
            out,
            "  {} ({}): rx packets: {}, bytes: {}, dropped: {}, errors: {}; \
             tx packets: {}, bytes: {}, dropped: {}, errors: {}",
            p.name,
            p.ofport,
            s.rx_packets.load(Relaxed),
            s.rx_bytes.load(Relaxed),
            s.rx_dropped.load(Relaxed),
            s.rx_errors.load(Relaxed),
            s.tx_packets(),
            s.tx_bytes(),
            s.tx_dropped(),
            s.tx_errors.load(Relaxed),
        );
        // Whether the XDP flow cache may forward to the port, and why.
        if let Some(r) = p.redirect.as_ref().and_then(|r| r.report()) {
            let _ = writeln!(out, "    {r}");
        }
    }
    match engine.at {
        None => {
            let _ = writeln!(out, "packet thread: nothing published yet");
        }
        Some(at) => {
            let ago = Instant::now().saturating_duration_since(at).as_millis();
            if ports_by_thread.len() < 2 {
                let _ = writeln!(out, "packet thread (counted {ago} ms ago):");
            } else {
                let _ = writeln!(out, "packet threads: {}", ports_by_thread.len());
                for (t, ports) in ports_by_thread.iter().enumerate() {
                    let ports: Vec<String> = ports.iter().map(u32::to_string).collect();
                    let _ = writeln!(out, "  thread {t}: ports {}", ports.join(", "));
                }
                let _ = writeln!(out, "packet threads, summed (counted {ago} ms ago):");
            }
            nonzero(&mut out, "drops", &drop_counts(&engine.drops));
            nonzero(
                &mut out,
                "tunnel drops",
                &tunnel_drop_counts(&engine.drops.tunnel),
            );
            let waited = engine.drops.tunnel.waited_for_neighbour;
            if waited > 0 {
                let _ = writeln!(out, "tunnel frames that waited for a next hop: {waited}");
            }
            match &engine.flow_cache {
                Some(c) => cache_lines(&mut out, c),
                None => out.push_str("translation cache: off\n"),
            }
            match &engine.xdp_cache {
                Some(x) => nonzero(&mut out, "XDP flow cache", &xdp_counts(x)),
                None => out.push_str("XDP flow cache: off\n"),
            }
        }
    }
    if kickers.is_empty() {
        out.push_str("transmit threads: none (the packet thread kicks its sockets)\n");
    }
    for k in kickers {
        let _ = writeln!(
            out,
            "transmit thread on CPU {}: sockets: {}, kicks: {}, kernel busy: {}, \
             taken over by the packet thread: {}",
            k.cpu, k.sockets, k.kicks, k.busy, k.taken_over
        );
    }
    // The OpenFlow control plane's bounds (ofproto::limits), each hit
    // also logged where it happened.
    nonzero(&mut out, "openflow limits hit", &limits.named());
    out.push_str("conntrack:\n");
    for line in ct.stats_text().lines() {
        let _ = writeln!(out, "  {line}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_nonzero_counters_are_listed_with_their_total() {
        let mut out = String::new();
        nonzero(&mut out, "drops", &[("a", 0), ("b", 3), ("c", 4)]);
        assert_eq!(out, "drops: 7\n  b: 3\n  c: 4\n");
        out.clear();
        nonzero(&mut out, "drops", &[("a", 0)]);
        assert_eq!(out, "drops: none\n");
    }

    #[test]
    fn every_drop_reason_is_reported() {
        // Each named counter reads its own field: set them all to
        // distinct values and find each once.
        let d = EngineDrops {
            table_miss: 1,
            explicit: 2,
            unsupported: 3,
            resubmit_depth: 4,
            too_many_actions: 5,
            bad_output_port: 6,
            invalid_ttl: 7,
            port_down: 8,
            no_frames: 9,
            tx_full: 10,
            upcall_queue_full: 11,
            packet_out_too_big: 12,
            ct_recirc_depth: 13,
            qos_policed: 14,
            meter: 15,
            ct_new_overflow: 16,
            restore_wait: 17,
            tunnel: TunnelDrops::default(),
        };
        let mut values: Vec<u64> = drop_counts(&d).iter().map(|(_, n)| *n).collect();
        values.sort_unstable();
        assert_eq!(values, (1..=17).collect::<Vec<u64>>());
    }
}
