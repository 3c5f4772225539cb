//! One scrape: every registered bridge's counters into a fresh
//! `prometheus::Registry`, encoded in the text format. See
//! docs/metrics.md for each family.

use super::bridges::{self, BridgeView};
use dataplane::control::EngineSnapshot;
use prometheus::{
    CounterVec, Encoder, GaugeVec, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder,
};
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

/// A registry being filled; families are declared once per scrape.
struct Out {
    reg: Registry,
}

impl Out {
    fn counters(
        &self,
        name: &str,
        help: &str,
        labels: &[&str],
    ) -> prometheus::Result<IntCounterVec> {
        let c = IntCounterVec::new(Opts::new(name, help), labels)?;
        self.reg.register(Box::new(c.clone()))?;
        Ok(c)
    }

    fn seconds(&self, name: &str, help: &str, labels: &[&str]) -> prometheus::Result<CounterVec> {
        let c = CounterVec::new(Opts::new(name, help), labels)?;
        self.reg.register(Box::new(c.clone()))?;
        Ok(c)
    }

    fn gauges_f64(&self, name: &str, help: &str, labels: &[&str]) -> prometheus::Result<GaugeVec> {
        let g = GaugeVec::new(Opts::new(name, help), labels)?;
        self.reg.register(Box::new(g.clone()))?;
        Ok(g)
    }

    fn gauges(&self, name: &str, help: &str, labels: &[&str]) -> prometheus::Result<IntGaugeVec> {
        let g = IntGaugeVec::new(Opts::new(name, help), labels)?;
        self.reg.register(Box::new(g.clone()))?;
        Ok(g)
    }
}

/// A counter's value as prometheus' gauges take it.
fn level(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Adds each row's value to its family's counter of those labels.
fn add(rows: &[(&IntCounterVec, &[&str], u64)]) {
    for (family, labels, n) in rows {
        family.with_label_values(labels).inc_by(*n);
    }
}

/// The families, declared before any bridge is read.
struct Families {
    port_rx_packets: IntCounterVec,
    port_rx_bytes: IntCounterVec,
    port_rx_drop: IntCounterVec,
    port_rx_errors: IntCounterVec,
    port_tx_packets: IntCounterVec,
    port_tx_bytes: IntCounterVec,
    port_tx_drop: IntCounterVec,
    port_tx_errors: IntCounterVec,
    table_lookups: IntCounterVec,
    table_matches: IntCounterVec,
    table_flows: IntGaugeVec,
    flows: IntGaugeVec,
    groups: IntGaugeVec,
    drops: IntCounterVec,
    tunnel_drops: IntCounterVec,
    xc_entries: IntGaugeVec,
    xc_capacity: IntGaugeVec,
    xc_hits: IntCounterVec,
    xc_installs: IntCounterVec,
    xc_install_failures: IntCounterVec,
    xc_removals: IntCounterVec,
    xc_revalidations: IntCounterVec,
    tc_hits: IntCounterVec,
    tc_misses: IntCounterVec,
    tc_uncacheable: IntCounterVec,
    tc_invalidations: IntCounterVec,
    ct_entries: IntGaugeVec,
    ct_zone_entries: IntGaugeVec,
    mirror_tx_packets: IntCounterVec,
    mirror_tx_bytes: IntCounterVec,
    mirror_dropped: IntCounterVec,
    ct_limit: IntGaugeVec,
    ct_created: IntCounterVec,
    ct_refused: IntCounterVec,
    share_refused: IntCounterVec,
    ct_invalid: IntCounterVec,
    ct_expired: IntCounterVec,
    pmd_busy: CounterVec,
    pmd_idle: CounterVec,
    pmd_received: IntCounterVec,
    pmd_recirculations: IntCounterVec,
    pmd_sent: IntCounterVec,
    pmd_age: GaugeVec,
    of_connections: IntGaugeVec,
    of_connections_opened: IntCounterVec,
    of_flow_mods: IntCounterVec,
    of_group_mods: IntCounterVec,
    of_bundles: IntCounterVec,
    of_errors: IntCounterVec,
}

impl Families {
    fn declare(o: &Out) -> prometheus::Result<Families> {
        let b = &["bridge"][..];
        let bp = &["bridge", "port"][..];
        let bt = &["bridge", "table"][..];
        let br = &["bridge", "reason"][..];
        let bth = &["bridge", "thread"][..];
        Ok(Families {
            port_rx_packets: o.counters("xbr_port_receive_packets_total", "Packets received on the port.", bp)?,
            port_rx_bytes: o.counters("xbr_port_receive_bytes_total", "Bytes received on the port.", bp)?,
            port_rx_drop: o.counters("xbr_port_receive_drop_total", "Packets received on the port and dropped before the pipeline.", bp)?,
            port_rx_errors: o.counters("xbr_port_receive_errors_total", "Receive errors on the port.", bp)?,
            port_tx_packets: o.counters("xbr_port_transmit_packets_total", "Packets sent on the port.", bp)?,
            port_tx_bytes: o.counters("xbr_port_transmit_bytes_total", "Bytes sent on the port.", bp)?,
            port_tx_drop: o.counters("xbr_port_transmit_drop_total", "Packets for the port that were dropped.", bp)?,
            port_tx_errors: o.counters("xbr_port_transmit_errors_total", "Transmit errors on the port.", bp)?,
            table_lookups: o.counters("xbr_table_lookups_total", "Packets looked up in the OpenFlow table (ovs-ofctl dump-tables).", bt)?,
            table_matches: o.counters("xbr_table_matches_total", "Lookups in the OpenFlow table that matched a flow.", bt)?,
            table_flows: o.gauges("xbr_table_flows", "Flows in the OpenFlow table.", bt)?,
            flows: o.gauges("xbr_flows", "Flows in all the bridge's OpenFlow tables.", b)?,
            groups: o.gauges("xbr_groups", "OpenFlow groups of the bridge.", b)?,
            drops: o.counters("xbr_drops_total", "Packets the packet threads dropped, by reason (as xbr stats names them).", br)?,
            tunnel_drops: o.counters("xbr_tunnel_drops_total", "VXLAN frames dropped, by reason.", br)?,
            xc_entries: o.gauges("xbr_xdp_cache_entries", "Entries in the XDP flow cache.", b)?,
            xc_capacity: o.gauges("xbr_xdp_cache_capacity_entries", "Entries the XDP flow cache's map holds at most.", b)?,
            xc_hits: o.counters("xbr_xdp_cache_hit_packets_total", "Packets the XDP programs forwarded from cache entries without the packet threads.", b)?,
            xc_installs: o.counters("xbr_xdp_cache_installs_total", "XDP flow cache entries installed, by kind (flow, ct).", &["bridge", "kind"])?,
            xc_install_failures: o.counters("xbr_xdp_cache_install_failures_total", "XDP flow cache installs not done, by reason (full, error).", br)?,
            xc_removals: o.counters("xbr_xdp_cache_removals_total", "XDP flow cache entries removed, by reason.", br)?,
            xc_revalidations: o.counters("xbr_xdp_cache_revalidations_total", "XDP flow cache entries a revalidation checked, by outcome (kept, removed).", &["bridge", "outcome"])?,
            tc_hits: o.counters("xbr_translation_cache_hits_total", "Pipeline passes the packet threads' translation caches answered, by cache (exact, megaflow).", &["bridge", "cache"])?,
            tc_misses: o.counters("xbr_translation_cache_misses_total", "Pipeline passes that walked the OpenFlow tables.", b)?,
            tc_uncacheable: o.counters("xbr_translation_cache_uncacheable_total", "Translations that could not be cached.", b)?,
            tc_invalidations: o.counters("xbr_translation_cache_invalidations_total", "Times the translation caches were emptied by a table change.", b)?,
            ct_entries: o.gauges("xbr_conntrack_connections", "Connections in the connection tracker.", b)?,
            ct_zone_entries: o.gauges("xbr_conntrack_zone_connections", "Connections in the connection tracker, by zone (zones with connections only).", &["bridge", "zone"])?,
            mirror_tx_packets: o.counters("xbr_mirror_transmit_packets_total", "Copies a port mirror (OVSDB Mirror row or xbr capture) sent.", &["bridge", "mirror"])?,
            mirror_tx_bytes: o.counters("xbr_mirror_transmit_bytes_total", "Bytes of the copies a port mirror sent.", &["bridge", "mirror"])?,
            mirror_dropped: o.counters("xbr_mirror_dropped_total", "Copies a port mirror dropped (its socket full or its reader gone).", &["bridge", "mirror"])?,
            ct_limit: o.gauges("xbr_conntrack_connections_limit", "Most connections the tracker holds (dpctl/ct-get-maxconns).", b)?,
            ct_created: o.counters("xbr_conntrack_created_total", "Connections committed (created).", b)?,
            ct_refused: o.counters("xbr_conntrack_refused_total", "New connections refused, by reason (table_full, nat_exhausted, zone_limit).", br)?,
            share_refused: o.counters("xbr_port_share_refused_total", "Entries refused because the port held its share, by resource (fragment_table, upcall_queue, ct_new_ring).", &["bridge", "port", "resource"])?,
            ct_invalid: o.counters("xbr_conntrack_invalid_packets_total", "Packets the tracker marked +inv.", b)?,
            ct_expired: o.counters("xbr_conntrack_expired_total", "Connections removed after their timeout.", b)?,
            pmd_busy: o.seconds("xbr_pmd_busy_seconds_total", "Time the packet thread spent in rounds that found work.", bth)?,
            pmd_idle: o.seconds("xbr_pmd_idle_seconds_total", "Time the packet thread spent in rounds (and sleeps) without work.", bth)?,
            pmd_received: o.counters("xbr_pmd_received_packets_total", "Packets the packet thread took from its ports' receive queues (each missed the XDP flow cache).", bth)?,
            pmd_recirculations: o.counters("xbr_pmd_recirculations_total", "Extra pipeline passes (ct(table=N)).", bth)?,
            pmd_sent: o.counters("xbr_pmd_sent_packets_total", "Packets the packet thread handed to ports' transmit paths.", bth)?,
            pmd_age: o.gauges_f64("xbr_pmd_snapshot_age_seconds", "Age of the packet threads' counters in this scrape (large if a thread did not answer in time).", b)?,
            of_connections: o.gauges("xbr_openflow_connections", "OpenFlow connections open now.", b)?,
            of_connections_opened: o.counters("xbr_openflow_connections_opened_total", "OpenFlow connections served.", b)?,
            of_flow_mods: o.counters("xbr_openflow_flow_mods_total", "Flow mods received, alone or in bundles.", b)?,
            of_group_mods: o.counters("xbr_openflow_group_mods_total", "Group mods received, alone or in bundles.", b)?,
            of_bundles: o.counters("xbr_openflow_bundle_commits_total", "Bundle commits, by outcome (committed, failed).", &["bridge", "outcome"])?,
            of_errors: o.counters("xbr_openflow_errors_sent_total", "OFPT_ERROR messages sent to OpenFlow peers.", b)?,
        })
    }
}

fn bridge(f: &Families, v: &BridgeView) {
    let name = v.name.as_str();
    let dp = v.live.datapath();
    for p in dp.ports() {
        let l = [name, p.name.as_str()];
        let s = &p.stats;
        add(&[
            (&f.port_rx_packets, &l, s.rx_packets.load(Relaxed)),
            (&f.port_rx_bytes, &l, s.rx_bytes.load(Relaxed)),
            (&f.port_rx_drop, &l, s.rx_dropped.load(Relaxed)),
            (&f.port_rx_errors, &l, s.rx_errors.load(Relaxed)),
            (&f.port_tx_packets, &l, s.tx_packets()),
            (&f.port_tx_bytes, &l, s.tx_bytes()),
            (&f.port_tx_drop, &l, s.tx_dropped()),
            (&f.port_tx_errors, &l, s.tx_errors.load(Relaxed)),
        ]);
    }
    let (tables, groups) = v
        .bridge
        .with_tables(|t| (t.table_stats(), t.groups().len()));
    let mut flows = 0u64;
    for t in tables
        .iter()
        .filter(|t| t.active_count > 0 || t.lookup_count > 0)
    {
        let id = t.table_id.to_string();
        let l = [name, id.as_str()];
        f.table_lookups.with_label_values(&l).inc_by(t.lookup_count);
        f.table_matches
            .with_label_values(&l)
            .inc_by(t.matched_count);
        f.table_flows
            .with_label_values(&l)
            .set(i64::from(t.active_count));
        flows += u64::from(t.active_count);
    }
    f.flows.with_label_values(&[name]).set(level(flows));
    f.groups
        .with_label_values(&[name])
        .set(level(groups as u64));

    let threads = dp.engine_snapshots();
    let mut sum = EngineSnapshot::default();
    for (i, s) in threads.iter().enumerate() {
        if i == 0 {
            sum = *s;
        } else {
            sum.merge(s);
        }
        let t = i.to_string();
        let l = [name, t.as_str()];
        f.pmd_busy
            .with_label_values(&l)
            .inc_by(s.pmd.busy_ns as f64 / 1e9);
        f.pmd_idle
            .with_label_values(&l)
            .inc_by(s.pmd.idle_ns as f64 / 1e9);
        add(&[
            (&f.pmd_received, &l, s.pmd.received),
            (&f.pmd_recirculations, &l, s.pmd.recirculations),
            (&f.pmd_sent, &l, s.pmd.sent_packets),
        ]);
    }
    if let Some(at) = sum.at {
        let age = Instant::now().saturating_duration_since(at);
        f.pmd_age.with_label_values(&[name]).set(age.as_secs_f64());
    }
    for (reason, n) in dataplane::stats::drop_counts(&sum.drops) {
        f.drops.with_label_values(&[name, reason]).inc_by(n);
    }
    for (reason, n) in dataplane::stats::tunnel_drop_counts(&sum.drops.tunnel) {
        f.tunnel_drops.with_label_values(&[name, reason]).inc_by(n);
    }
    if let Some(c) = &sum.flow_cache {
        add(&[
            (&f.tc_hits, &[name, "exact"], c.hits),
            (&f.tc_hits, &[name, "megaflow"], c.megaflow_hits),
            (&f.tc_misses, &[name], c.misses),
            (&f.tc_uncacheable, &[name], c.uncacheable),
            (&f.tc_invalidations, &[name], c.invalidations),
        ]);
    }
    if let (Some(x), Some(maps)) = (&sum.xdp_cache, v.live.xdp_cache()) {
        f.xc_entries
            .with_label_values(&[name])
            .set(level(x.entries));
        f.xc_capacity
            .with_label_values(&[name])
            .set(i64::from(maps.capacity()));
        add(&[
            (&f.xc_hits, &[name], x.hit_packets),
            (&f.xc_installs, &[name, "flow"], x.installs),
            (&f.xc_installs, &[name, "ct"], x.ct_installs),
            (&f.xc_install_failures, &[name, "full"], x.full),
            (&f.xc_install_failures, &[name, "error"], x.install_errors),
            (&f.xc_removals, &[name, "expired"], x.expired),
            (&f.xc_removals, &[name, "invalidated"], x.invalidated),
            (&f.xc_removals, &[name, "connection"], x.ct_removed),
            (&f.xc_removals, &[name, "revalidated"], x.revalidated_out),
            (&f.xc_revalidations, &[name, "kept"], x.revalidated),
            (&f.xc_revalidations, &[name, "removed"], x.revalidated_out),
        ]);
    }

    for m in dp.mirrors().snapshot().iter() {
        let l = [name, m.name.as_str()];
        let c = &m.counters;
        add(&[
            (&f.mirror_tx_packets, &l, c.tx_packets.load(Relaxed)),
            (&f.mirror_tx_bytes, &l, c.tx_bytes.load(Relaxed)),
            (&f.mirror_dropped, &l, c.dropped.load(Relaxed)),
        ]);
    }

    let ct = &v.conntrack;
    let cs = &ct.stats;
    f.ct_entries
        .with_label_values(&[name])
        .set(level(ct.len() as u64));
    for (zone, n) in ct.zone_counts() {
        f.ct_zone_entries
            .with_label_values(&[name, &zone.to_string()])
            .set(i64::from(n));
    }
    f.ct_limit
        .with_label_values(&[name])
        .set(level(ct.limit() as u64));
    add(&[
        (&f.ct_created, &[name], cs.committed.load(Relaxed)),
        (
            &f.ct_refused,
            &[name, "table_full"],
            cs.table_full.load(Relaxed),
        ),
        (
            &f.ct_refused,
            &[name, "nat_exhausted"],
            cs.nat_exhausted.load(Relaxed),
        ),
        (
            &f.ct_refused,
            &[name, "zone_limit"],
            cs.zone_limited.load(Relaxed),
        ),
    ]);
    let dp = v.live.datapath();
    let ports = dp.ports();
    let port_name = |no: u32| {
        ports
            .iter()
            .find(|p| p.ofport == no)
            .map_or_else(|| no.to_string(), |p| p.name.clone())
    };
    let (frag_refused, frag_overflow) = ct.fragment_share_refusals();
    for (no, n) in frag_refused {
        f.share_refused
            .with_label_values(&[name, &port_name(no), "fragment_table"])
            .inc_by(n);
    }
    if frag_overflow > 0 {
        f.share_refused
            .with_label_values(&[name, "other", "fragment_table"])
            .inc_by(frag_overflow);
    }
    if let Some(k) = v.live.xdp_cache().and_then(|m| m.kernel_new()) {
        for (port, s) in k.port_shares().hits(ports.iter().map(|p| p.name.as_str())) {
            f.share_refused
                .with_label_values(&[name, &port, "ct_new_ring"])
                .inc_by(s.refused);
        }
    }
    for (no, n) in dp.upcall_shares().refused() {
        f.share_refused
            .with_label_values(&[name, &port_name(no), "upcall_queue"])
            .inc_by(n);
    }
    add(&[
        (&f.ct_invalid, &[name], cs.invalid.load(Relaxed)),
        (&f.ct_expired, &[name], cs.expired.load(Relaxed)),
    ]);

    let c = v.bridge.counters();
    f.of_connections
        .with_label_values(&[name])
        .set(level(c.connections()));
    add(&[
        (
            &f.of_connections_opened,
            &[name],
            c.connections_opened.load(Relaxed),
        ),
        (&f.of_flow_mods, &[name], c.flow_mods.load(Relaxed)),
        (&f.of_group_mods, &[name], c.group_mods.load(Relaxed)),
        (
            &f.of_bundles,
            &[name, "committed"],
            c.bundles_committed.load(Relaxed),
        ),
        (
            &f.of_bundles,
            &[name, "failed"],
            c.bundles_failed.load(Relaxed),
        ),
        (&f.of_errors, &[name], c.errors_sent.load(Relaxed)),
    ]);
}

/// The process's own families: the endpoint's and the log's.
fn process(o: &Out, requests_by_outcome: &[(&'static str, u64)]) -> prometheus::Result<()> {
    let requests = o.counters(
        "xbr_metrics_requests_total",
        "Requests to this endpoint, by outcome (ok, refused_busy, bad_request, not_found, timeout).",
        &["outcome"],
    )?;
    for (outcome, n) in requests_by_outcome {
        requests.with_label_values(&[outcome]).inc_by(*n);
    }
    let suppressed = o.counters(
        "xbr_log_messages_suppressed_total",
        "Log messages not written because their call site was over its rate limit.",
        &[],
    )?;
    suppressed
        .with_label_values::<&str>(&[])
        .inc_by(crate::logging::suppressed_total());
    Ok(())
}

/// The text a scrape answers with; `requests_by_outcome`: the
/// endpoint's own counts (`ServerCounters::by_outcome`).
pub fn render(requests_by_outcome: &[(&'static str, u64)]) -> prometheus::Result<String> {
    let out = Out {
        reg: Registry::new(),
    };
    let families = Families::declare(&out)?;
    for v in bridges::all() {
        bridge(&families, &v);
    }
    process(&out, requests_by_outcome)?;
    let mut buf = Vec::new();
    TextEncoder::new().encode(&out.reg.gather(), &mut buf)?;
    String::from_utf8(buf).map_err(|e| prometheus::Error::Msg(e.to_string()))
}
