//! The control socket's `support ...` commands: what a bridge answers to
//! the `ovs-appctl` commands sosreport's openvswitch plugin (and
//! must-gather, runbooks) run, in OVS's layouts where xbr has the
//! figures, saying so where it has not (see `unixctl` for the commands,
//! docs/support.md for the list).
//!
//! Each reads the same snapshots and atomics as `xbr stats`; none takes
//! a lock the packet threads wait on.

use dataplane::conntrack::Conntrack;
use dataplane::control::PortMeta;
use dataplane::live::LivePorts;
use ofproto::Bridge;
use std::fmt::Write;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// `support WHAT [ARGS]`.
pub fn command(
    args: &str,
    name: &str,
    bridge: &Bridge,
    conntrack: &Conntrack,
    live: &LivePorts,
) -> Result<String, String> {
    let mut words = args.split_whitespace();
    let what = words.next().unwrap_or("");
    let rest: Vec<&str> = words.collect();
    match (what, rest.as_slice()) {
        ("dpctl-show", []) => Ok(dpctl_show(live, false)),
        ("dpctl-show", ["-s"]) => Ok(dpctl_show(live, true)),
        ("coverage", []) => Ok(coverage(bridge, conntrack, live)),
        ("memory", []) => Ok(memory(bridge, conntrack, live)),
        ("upcall", []) => Ok(upcall(live)),
        ("pmd-perf", []) => Ok(live.pmd_perf_text(None)),
        ("pmd-perf", ["--core", n]) => {
            let core = n.parse().map_err(|_| format!("pmd-perf: bad core `{n}`"))?;
            Ok(live.pmd_perf_text(Some(core)))
        }
        ("tunnels", []) => Ok(tunnels(&live.datapath().ports())),
        ("tunnel-ports", []) => Ok(tunnel_ports(&live.datapath().ports())),
        ("dump-flows", []) => Ok(dump_flows(bridge)),
        ("fdb-stats", []) => Ok(fdb_stats(name, live)),
        ("ipf", []) => Ok(ipf(conntrack)),
        ("qos", [port]) => qos(&live.datapath().ports(), port),
        _ => Err(format!("support: unknown request `{args}`")),
    }
}

/// A port's type as OVS's `dpctl/show` prints it after the name: none
/// for a system port, else ` (TYPE...)`.
fn kind(p: &PortMeta) -> String {
    if p.kind.is_empty() || p.kind == "system" {
        String::new()
    } else {
        format!(" ({})", p.kind)
    }
}

/// `dpctl/show [-s]` of one bridge: a first line `hit:H missed:M lost:L
/// flows:F` the unixctl adapter sums over bridges under OVS's datapath
/// heading, then the ports as OVS lists them. Hits: packets the caches
/// answered (XDP cache, translation caches); misses: passes through the
/// tables; lost: packets for the controllers dropped on a full queue;
/// flows: the XDP flow cache's entries (xbr's kernel datapath flows).
/// Counters xbr does not keep are `?`, as OVS prints counters a netdev
/// does not report.
fn dpctl_show(live: &LivePorts, stats: bool) -> String {
    let dp = live.datapath();
    let snap = dp.engine_snapshot();
    let (mut hit, mut missed) = (0, 0);
    if let Some(c) = &snap.flow_cache {
        hit += c.hits + c.megaflow_hits;
        missed += c.misses + c.uncacheable;
    }
    let flows = snap.xdp_cache.map_or(0, |x| {
        hit += x.hit_packets;
        x.entries
    });
    let lost = snap.drops.upcall_queue_full;
    let mut out = format!("hit:{hit} missed:{missed} lost:{lost} flows:{flows}\n");
    let mut ports = dp.ports();
    ports.sort_by_key(|p| p.ofport);
    for p in ports {
        let _ = writeln!(out, "  port {}: {}{}", p.ofport, p.name, kind(&p));
        if stats {
            let s = &p.stats;
            let _ = write!(
                out,
                "    RX packets:{} errors:{} dropped:{} overruns:? frame:?\n    \
                 TX packets:{} errors:{} dropped:{} aborted:? carrier:?\n    \
                 collisions:?\n    RX bytes:{}  TX bytes:{}\n",
                s.rx_packets.load(Relaxed),
                s.rx_errors.load(Relaxed),
                s.rx_dropped.load(Relaxed),
                s.tx_packets(),
                s.tx_errors.load(Relaxed),
                s.tx_dropped(),
                s.rx_bytes.load(Relaxed),
                s.tx_bytes(),
            );
        }
    }
    out
}

/// `coverage/show`: xbr's event counters since start. OVS averages each
/// over 5 s, a minute and an hour; xbr keeps totals only, so only
/// totals are printed, one `name total: N` line each, then how many
/// never happened (as OVS ends its list).
fn coverage(bridge: &Bridge, ct: &Conntrack, live: &LivePorts) -> String {
    let snap = live.datapath().engine_snapshot();
    let mut events: Vec<(String, u64)> = Vec::new();
    for (name, n) in dataplane::stats::drop_counts(&snap.drops) {
        events.push((format!("drop_{name}"), n));
    }
    for (name, n) in dataplane::stats::tunnel_drop_counts(&snap.drops.tunnel) {
        events.push((format!("tunnel_drop_{name}"), n));
    }
    let p = &snap.pmd;
    events.push(("pmd_received".into(), p.received));
    events.push(("pmd_recirculation".into(), p.recirculations));
    events.push(("pmd_sent".into(), p.sent_packets));
    if let Some(c) = &snap.flow_cache {
        events.push(("xlate_cache_exact_hit".into(), c.hits));
        events.push(("xlate_cache_megaflow_hit".into(), c.megaflow_hits));
        events.push(("xlate_cache_miss".into(), c.misses));
        events.push(("xlate_cache_uncacheable".into(), c.uncacheable));
        events.push(("xlate_cache_invalidate".into(), c.invalidations));
    }
    if let Some(x) = &snap.xdp_cache {
        events.push(("xdp_cache_hit".into(), x.hit_packets));
        events.push(("xdp_cache_install".into(), x.installs));
        events.push(("xdp_cache_ct_install".into(), x.ct_installs));
        events.push(("xdp_cache_install_error".into(), x.install_errors));
        events.push(("xdp_cache_full".into(), x.full));
        events.push(("xdp_cache_expired".into(), x.expired));
        events.push(("xdp_cache_invalidated".into(), x.invalidated));
        events.push(("xdp_cache_revalidated".into(), x.revalidated));
        events.push(("xdp_cache_revalidated_out".into(), x.revalidated_out));
    }
    let s = &ct.stats;
    for (name, n) in [
        ("conntrack_commit", &s.committed),
        ("conntrack_invalid", &s.invalid),
        ("conntrack_full", &s.table_full),
        ("conntrack_nat_exhausted", &s.nat_exhausted),
        ("conntrack_expired", &s.expired),
        ("conntrack_learned", &s.learned),
    ] {
        events.push((name.into(), n.load(Relaxed)));
    }
    let c = bridge.counters();
    for (name, n) in [
        ("ofconn_opened", &c.connections_opened),
        ("ofproto_flow_mod", &c.flow_mods),
        ("ofproto_group_mod", &c.group_mods),
        ("ofproto_bundle_commit", &c.bundles_committed),
        ("ofproto_bundle_failed", &c.bundles_failed),
        ("ofconn_error_sent", &c.errors_sent),
    ] {
        events.push((name.into(), n.load(Relaxed)));
    }
    events.push(("vlog_suppressed".into(), crate::logging::suppressed_total()));
    let mut out = String::from("Event coverage (xbr: totals since start, no rates kept):\n");
    let never = events.iter().filter(|(_, n)| *n == 0).count();
    for (name, n) in events.iter().filter(|(_, n)| *n > 0) {
        let _ = writeln!(out, "{name:<32} total: {n}");
    }
    let _ = writeln!(out, "{never} events never hit");
    out
}

/// `memory/show`: what the bridge holds, OVS's `key:value` words.
fn memory(bridge: &Bridge, ct: &Conntrack, live: &LivePorts) -> String {
    let dp = live.datapath();
    let (rules, groups) = bridge.with_tables(|t| {
        let rules: u64 = t
            .table_stats()
            .iter()
            .map(|s| u64::from(s.active_count))
            .sum();
        (rules, t.groups().len())
    });
    let snap = dp.engine_snapshot();
    let xdp = snap.xdp_cache.map_or(0, |x| x.entries);
    format!(
        "conntrack:{} groups:{groups} ofconns:{} ports:{} rules:{rules} xdp-cache-entries:{xdp}\n",
        ct.len(),
        bridge.counters().connections(),
        dp.ports().len(),
    )
}

/// `upcall/show`: xbr's datapath flows are the XDP flow cache's entries
/// (installed by the packet threads, not by upcall handler threads), the
/// translation caches stand where OVS's megaflow cache does.
fn upcall(live: &LivePorts) -> String {
    let snap = live.datapath().engine_snapshot();
    let mut out = String::new();
    match (&snap.xdp_cache, live.xdp_cache()) {
        (Some(x), Some(maps)) => {
            let _ = writeln!(
                out,
                "  flows         : (current {}) (limit {})",
                x.entries,
                maps.capacity()
            );
        }
        _ => out.push_str("  flows         : (XDP flow cache off)\n"),
    }
    let _ = writeln!(out, "  packet threads: {}", live.datapath().engines());
    if let Some(c) = &snap.flow_cache {
        let _ = writeln!(
            out,
            "  translation cache: exact hits {}, megaflow hits {}, misses {}",
            c.hits, c.megaflow_hits, c.misses
        );
    }
    let _ = writeln!(
        out,
        "  controller upcalls dropped (queue full): {}",
        snap.drops.upcall_queue_full
    );
    out
}

fn vxlan_ports(ports: &[Arc<PortMeta>]) -> Vec<&Arc<PortMeta>> {
    let mut v: Vec<&Arc<PortMeta>> = ports
        .iter()
        .filter(|p| p.kind.starts_with("vxlan"))
        .collect();
    v.sort_by_key(|p| p.ofport);
    v
}

/// `ofproto/list-tunnels`: `port N: NAME (vxlan: OPTIONS)`.
fn tunnels(ports: &[Arc<PortMeta>]) -> String {
    vxlan_ports(ports)
        .into_iter()
        .map(|p| format!("port {}: {} ({})\n", p.ofport, p.name, p.kind))
        .collect()
}

/// `tnl/ports/show` lines: the UDP port each VXLAN port listens on.
fn tunnel_ports(ports: &[Arc<PortMeta>]) -> String {
    vxlan_ports(ports)
        .into_iter()
        .map(|p| {
            let udp = p
                .kind
                .split([',', ' ', ':'])
                .find_map(|w| w.strip_prefix("dst_port="))
                .unwrap_or("4789");
            format!("{} ({udp}) ref_cnt=1\n", p.name)
        })
        .collect()
}

/// `bridge/dump-flows`: every flow, as OVS prints them there
/// (`table_id=N, ` when not 0, `duration=Ns, n_packets, n_bytes`, the
/// match and `,actions=`).
fn dump_flows(bridge: &Bridge) -> String {
    let rules = bridge.with_tables(|t| t.flows(&flowtable::FlowFilter::default()));
    let mut out = String::new();
    for r in rules {
        let line = flowtable::text::format_rule(&r);
        // ` cookie=.., duration=.., table=.., n_packets=.., n_bytes=.., BODY`
        let body = line
            .split_once(", n_bytes=")
            .and_then(|(_, rest)| rest.split_once(", "))
            .map_or("", |(_, body)| body);
        let body = body.replacen(" actions=", ",actions=", 1);
        let (packets, bytes) = r.stats.read();
        if r.table_id != 0 {
            let _ = write!(out, "table_id={}, ", r.table_id);
        }
        let _ = writeln!(
            out,
            "duration={}s, n_packets={packets}, n_bytes={bytes}, {body}",
            r.installed.elapsed().as_secs()
        );
    }
    out
}

/// `fdb/stats-show`: NORMAL's table, as far as xbr counts it.
fn fdb_stats(name: &str, live: &LivePorts) -> String {
    let n = live.datapath().fdb().len();
    format!(
        "Statistics for bridge \"{name}\":\n  Current/maximum MAC entries in the table: {n}/{}\n  \
         Current static MAC entries in the table : 0\n",
        dataplane::engine::MAC_TABLE_SIZE
    )
}

/// `dpctl/ipf-get-status`: the connection tracker's fragment handling.
fn ipf(ct: &Conntrack) -> String {
    let s = &ct.stats;
    format!(
        "        Fragmentation Module Status\n        ---------------------------\n        \
         v4 enabled: 1\n        v6 enabled: 1\n        \
         max num datagrams: {}\n        num datagrams: {}\n        \
         later fragments with their first's outcome: {}\n        \
         orphan fragments (+inv): {}\n",
        dataplane::conntrack::frag::MAX_DATAGRAMS,
        ct.fragmented_datagrams(),
        s.fragments.load(Relaxed),
        s.orphan_fragments.load(Relaxed),
    )
}

/// `qos/show PORT`: the port's QoS as the database set it, or OVS's
/// refusal when it has none.
fn qos(ports: &[Arc<PortMeta>], port: &str) -> Result<String, String> {
    let p = ports
        .iter()
        .find(|p| p.name == port)
        .ok_or_else(|| "no such interface".to_string())?;
    let egress = p.qos.egress_bps.load(Relaxed);
    if egress == 0 {
        return Err(format!("QoS not configured on {port}"));
    }
    Ok(format!("QoS: {port} linux-htb\nmax-rate: {egress}\n"))
}
