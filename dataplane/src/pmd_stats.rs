//! Per packet thread counters for `ovs-appctl dpif-netdev/pmd-stats-show`
//! and `pmd-stats-clear`.
//!
//! Each packet thread counts into its own [`PmdCounters`] (plain integers
//! on the thread, no atomics) and publishes them with the rest of its
//! snapshot when a statistics collection asks. The text follows OVS 3.1's
//! layout line for line where xbr has the figure: `emc hits` are the
//! exact-match translation cache's, `megaflow hits` its megaflow cache's,
//! `miss with success upcall` the translations that walked the pipeline
//! (all three count passes, recirculated ones included, as OVS's do).
//! Lines for machinery xbr does not have (hardware offload, miniflow
//! extract, simple match, the signature match cache) read 0, as OVS
//! prints them with those off; a failed upcall cannot happen in xbr (a
//! miss walks the pipeline in the thread), so it is 0 too. What xbr
//! cannot give in OVS's unit is said so: it measures its threads' busy
//! and idle time in nanoseconds from the monotonic clock, not in TSC
//! cycles, so those lines name the unit (`idle time`, `processing time`).
//! An XDP flow cache line is added: packets the kernel forwarded from the
//! thread's entries never reach the thread.
//!
//! `clear` is OVS's: the counters go on, a baseline is kept and shown
//! counts are since the baseline.

use crate::control::EngineSnapshot;
use std::fmt::Write as _;

pub use crate::engine::pmd_counters::PmdCounters;

/// The figures of one thread's block, since a baseline.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Shown {
    pmd: PmdCounters,
    emc_hits: u64,
    megaflow_hits: u64,
    megaflow_lookups: u64,
    misses: u64,
    xdp_hits: u64,
}

impl Shown {
    fn of(s: &EngineSnapshot) -> Shown {
        let c = s.flow_cache.unwrap_or_default();
        Shown {
            pmd: s.pmd,
            emc_hits: c.hits,
            megaflow_hits: c.megaflow_hits,
            megaflow_lookups: c.megaflow_lookups,
            misses: c.misses,
            xdp_hits: s.xdp_cache.map_or(0, |x| x.hit_packets),
        }
    }

    fn since(&self, b: &Shown) -> Shown {
        let d = |now: u64, then: u64| now.saturating_sub(then);
        let (p, q) = (&self.pmd, &b.pmd);
        Shown {
            pmd: PmdCounters {
                received: d(p.received, q.received),
                recirculations: d(p.recirculations, q.recirculations),
                parses: d(p.parses, q.parses),
                sent_packets: d(p.sent_packets, q.sent_packets),
                sent_batches: d(p.sent_batches, q.sent_batches),
                busy_ns: d(p.busy_ns, q.busy_ns),
                idle_ns: d(p.idle_ns, q.idle_ns),
            },
            emc_hits: d(self.emc_hits, b.emc_hits),
            megaflow_hits: d(self.megaflow_hits, b.megaflow_hits),
            megaflow_lookups: d(self.megaflow_lookups, b.megaflow_lookups),
            misses: d(self.misses, b.misses),
            xdp_hits: d(self.xdp_hits, b.xdp_hits),
        }
    }
}

/// Per thread baselines set by `pmd-stats-clear`.
#[derive(Debug, Default)]
pub struct Baselines(Vec<Shown>);

impl Baselines {
    /// Makes thread `thread`'s counts start again from `now`.
    pub fn clear_thread(&mut self, thread: usize, now: &EngineSnapshot) {
        if self.0.len() <= thread {
            self.0.resize(thread + 1, Shown::default());
        }
        self.0[thread] = Shown::of(now);
    }

    fn of(&self, thread: usize) -> Shown {
        self.0.get(thread).copied().unwrap_or_default()
    }
}

/// `pmd-stats-show`: one block per thread that is `shown`, headed as
/// `pmd-rxq-show` heads it (`header(thread)`).
pub fn text(
    snapshots: &[EngineSnapshot],
    baselines: &Baselines,
    shown: impl Fn(usize) -> bool,
    header: impl Fn(usize) -> String,
) -> String {
    let mut out = String::new();
    for (t, s) in snapshots.iter().enumerate().filter(|(t, _)| shown(*t)) {
        let v = Shown::of(s).since(&baselines.of(t));
        let p = &v.pmd;
        let ratio = |a: u64, b: u64| if b > 0 { a as f64 / b as f64 } else { 0.0 };
        let _ = writeln!(out, "{}", header(t));
        let _ = write!(
            out,
            "  packets received: {}\n  packet recirculations: {}\n  \
             avg. datapath passes per packet: {:.2}\n  phwol hits: 0\n  \
             mfex opt hits: 0\n  simple match hits: 0\n  emc hits: {}\n  \
             smc hits: 0\n  megaflow hits: {}\n  \
             avg. subtable lookups per megaflow hit: {:.2}\n  \
             miss with success upcall: {}\n  miss with failed upcall: 0\n  \
             avg. packets per output batch: {:.2}\n",
            p.received,
            p.recirculations,
            ratio(p.received + p.recirculations, p.received),
            v.emc_hits,
            v.megaflow_hits,
            ratio(v.megaflow_lookups, v.megaflow_hits),
            v.misses,
            ratio(p.sent_packets, p.sent_batches),
        );
        let total = p.busy_ns + p.idle_ns;
        if total > 0 {
            let pct = |x: u64| x as f64 * 100.0 / total as f64;
            let _ = write!(
                out,
                "  idle time: {} ns ({:.2}%)\n  processing time: {} ns ({:.2}%)\n",
                p.idle_ns,
                pct(p.idle_ns),
                p.busy_ns,
                pct(p.busy_ns)
            );
            if p.received > 0 {
                let _ = writeln!(
                    out,
                    "  avg processing time per packet: {:.2} ns ({}/{})",
                    ratio(p.busy_ns, p.received),
                    p.busy_ns,
                    p.received
                );
            }
        }
        let _ = writeln!(out, "  xdp flow cache hits (in the kernel): {}", v.xdp_hits);
    }
    out
}

/// `pmd-perf-show`: per thread, what xbr measures of OVS's performance
/// metrics, since start (xbr has no `pmd-perf-metrics` histograms and
/// counts time in nanoseconds, not TSC cycles; the lines say so).
pub fn perf_text(
    snapshots: &[EngineSnapshot],
    shown: impl Fn(usize) -> bool,
    header: impl Fn(usize) -> String,
) -> String {
    let mut out = String::new();
    for (t, s) in snapshots.iter().enumerate().filter(|(t, _)| shown(*t)) {
        let p = &s.pmd;
        let total = p.busy_ns + p.idle_ns;
        let pct = |x: u64| {
            if total > 0 {
                x as f64 * 100.0 / total as f64
            } else {
                0.0
            }
        };
        let per = |a: u64, b: u64| if b > 0 { a as f64 / b as f64 } else { 0.0 };
        let _ = writeln!(out, "{}\n", header(t));
        let _ = write!(
            out,
            "  Measurement duration: {:.3} s (since start)\n  \
             Busy time:        {:>14} ns  ({:5.1} %)\n  \
             Idle time:        {:>14} ns  ({:5.1} %)\n  \
             Rx packets:       {:>14}  ({:.0} ns/pkt busy)\n  \
             Datapath passes:  {:>14}  ({:.2} passes/pkt)\n  \
             - Recirculations: {:>14}\n  \
             Tx packets:       {:>14}  ({:.2} pkts/batch)\n  \
             Tx batches:       {:>14}\n",
            total as f64 / 1e9,
            p.busy_ns,
            pct(p.busy_ns),
            p.idle_ns,
            pct(p.idle_ns),
            p.received,
            per(p.busy_ns, p.received),
            p.received + p.recirculations,
            per(p.received + p.recirculations, p.received),
            p.recirculations,
            p.sent_packets,
            per(p.sent_packets, p.sent_batches),
            p.sent_batches,
        );
        let xdp = s.xdp_cache.map_or(0, |x| x.hit_packets);
        let _ = writeln!(out, "  XDP flow cache hits (in the kernel): {xdp}\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowtable::cache::CacheStats;
    use std::time::Duration;

    fn snap(received: u64, emc: u64) -> EngineSnapshot {
        EngineSnapshot {
            pmd: PmdCounters {
                received,
                recirculations: received / 2,
                parses: received,
                sent_packets: received,
                sent_batches: received / 4,
                busy_ns: 3_000,
                idle_ns: 1_000,
            },
            flow_cache: Some(CacheStats {
                hits: emc,
                megaflow_hits: 5,
                megaflow_lookups: 10,
                misses: 7,
                ..CacheStats::default()
            }),
            ..EngineSnapshot::default()
        }
    }

    #[test]
    fn a_block_per_thread_in_ovs_order_and_clear_counts_from_the_baseline() {
        let header = |t: usize| format!("pmd thread numa_id 0 core_id {t}:");
        let mut base = Baselines::default();
        let now = [snap(100, 80), snap(0, 0)];
        let t = text(&now, &base, |_| true, header);
        let first: Vec<&str> = t.lines().take(17).collect();
        assert_eq!(
            first,
            [
                "pmd thread numa_id 0 core_id 0:",
                "  packets received: 100",
                "  packet recirculations: 50",
                "  avg. datapath passes per packet: 1.50",
                "  phwol hits: 0",
                "  mfex opt hits: 0",
                "  simple match hits: 0",
                "  emc hits: 80",
                "  smc hits: 0",
                "  megaflow hits: 5",
                "  avg. subtable lookups per megaflow hit: 2.00",
                "  miss with success upcall: 7",
                "  miss with failed upcall: 0",
                "  avg. packets per output batch: 4.00",
                "  idle time: 1000 ns (25.00%)",
                "  processing time: 3000 ns (75.00%)",
                "  avg processing time per packet: 30.00 ns (3000/100)",
            ]
        );
        assert!(t.contains("pmd thread numa_id 0 core_id 1:\n  packets received: 0\n"));
        // No packets: no per-packet average, and no division by zero.
        assert!(t.contains("avg. datapath passes per packet: 0.00"));

        for (i, s) in now.iter().enumerate() {
            base.clear_thread(i, s);
        }
        let later = [snap(130, 100), snap(10, 0)];
        let t = text(&later, &base, |_| true, header);
        assert!(t.contains("core_id 0:\n  packets received: 30\n  packet recirculations: 15\n"));
        assert!(t.contains("  emc hits: 20\n"), "{t}");
        assert!(t.contains("core_id 1:\n  packets received: 10\n"));
        // Right after a clear nothing has been timed.
        assert!(!t.contains("idle time"), "{t}");
        // One thread only.
        let t = text(&later, &base, |t| t == 1, header);
        assert!(!t.contains("core_id 0") && t.contains("core_id 1"), "{t}");
    }

    #[test]
    fn time_goes_to_busy_or_idle_and_threads_add_up() {
        let mut a = PmdCounters::default();
        a.account(true, Duration::from_micros(3));
        a.account(false, Duration::from_micros(1));
        assert_eq!((a.busy_ns, a.idle_ns), (3_000, 1_000));
        let mut sum = a;
        sum.merge(&a);
        assert_eq!((sum.busy_ns, sum.idle_ns), (6_000, 2_000));
    }

    #[test]
    fn perf_show_gives_each_threads_time_and_packets_since_start() {
        let header = |t: usize| format!("pmd thread numa_id 0 core_id {t}:");
        let t = perf_text(&[snap(100, 80), snap(0, 0)], |t| t == 0, header);
        assert!(t.starts_with("pmd thread numa_id 0 core_id 0:\n\n"), "{t}");
        assert!(!t.contains("core_id 1"), "{t}");
        for line in [
            "  Measurement duration: 0.000 s (since start)",
            "  Busy time:                  3000 ns  ( 75.0 %)",
            "  Idle time:                  1000 ns  ( 25.0 %)",
            "  Rx packets:                  100  (30 ns/pkt busy)",
            "  Datapath passes:             150  (1.50 passes/pkt)",
            "  - Recirculations:             50",
            "  Tx packets:                  100  (4.00 pkts/batch)",
        ] {
            assert!(t.lines().any(|l| l == line), "{line:?} in\n{t}");
        }
    }
}
