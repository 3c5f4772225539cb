//! `xbr-bench --svg FILE`: the report as a bar chart, one bar per system
//! (and conntrack case) at its median run's Mpps (`flowmod`: thousands of
//! flows loaded per second), with a whisker over the range of its runs,
//! so a reader sees the spread a shared machine gives, not only the
//! median.

use crate::scenario::{Report, SystemResult};
use plotters::prelude::*;

#[derive(Debug, thiserror::Error)]
#[error("drawing the SVG plot: {0}")]
pub struct PlotError(String);

fn err(e: impl std::fmt::Display) -> PlotError {
    PlotError(e.to_string())
}

/// The bar's label: the system, and the conntrack case if any.
fn label(r: &SystemResult) -> String {
    match r.connections {
        Some(n) => format!("{} ({n} conn)", r.system),
        None => r.system.to_string(),
    }
}

/// A bar: the median run's value and every run's.
fn bar(r: &SystemResult) -> (f64, Vec<f64>) {
    if let Some(t) = &r.traffic {
        return (t.mpps, t.runs_mpps.clone());
    }
    match &r.flowmod {
        Some(f) => {
            let kps = |s: f64| f.flows_loaded as f64 / s.max(1e-9) / 1e3;
            (
                f.flows_per_s / 1e3,
                f.runs_bundle_s.iter().map(|s| kps(*s)).collect(),
            )
        }
        None => (0.0, Vec::new()),
    }
}

const WIDTH: u32 = 960;
const HEIGHT: u32 = 540;

/// Renders `report` as an SVG document.
pub fn svg(report: &Report) -> Result<String, PlotError> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let n = report.results.len();
        let bars: Vec<(f64, Vec<f64>)> = report.results.iter().map(bar).collect();
        let top = bars
            .iter()
            .flat_map(|(m, runs)| runs.iter().copied().chain([*m]))
            .fold(0.0f64, f64::max);
        let y_max = if top > 0.0 { top * 1.15 } else { 1.0 };
        let (title, y_desc) = match (report.pkt_size, report.proto, report.duration_s) {
            (Some(size), Some(proto), Some(secs)) => (
                format!(
                    "{} - {size}-byte {proto} - median of {} x {secs} s - {}",
                    report.scenario, report.runs, report.date
                ),
                "Mpps received",
            ),
            _ => (
                format!(
                    "{} - {} flows - median of {} - {}",
                    report.scenario, report.flows, report.runs, report.date
                ),
                "thousand flows loaded per second",
            ),
        };
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(20)
            .x_label_area_size(60)
            .y_label_area_size(60)
            .build_cartesian_2d(0..n.max(1), 0.0..y_max)
            .map_err(err)?;
        let labels: Vec<String> = report.results.iter().map(label).collect();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n.max(1))
            .x_label_formatter(&|i| labels.get(*i).cloned().unwrap_or_default())
            .y_desc(y_desc)
            .draw()
            .map_err(err)?;
        chart
            .draw_series(bars.iter().enumerate().map(|(i, (median, _))| {
                let colour = Palette99::pick(i).filled();
                let mut bar = Rectangle::new([(i, 0.0), (i + 1, *median)], colour);
                bar.set_margin(0, 0, 12, 12);
                bar
            }))
            .map_err(err)?;
        // Whiskers over each system's runs, at the middle of its bar.
        for (i, (median, runs)) in bars.iter().enumerate() {
            let median = *median;
            let lo = runs.iter().copied().fold(median, f64::min);
            let hi = runs.iter().copied().fold(median, f64::max);
            let to_px = |v: f64| chart.backend_coord(&(i, v));
            let cx = (to_px(lo).0 + chart.backend_coord(&(i + 1, lo)).0) / 2;
            let (_, y_lo) = to_px(lo);
            let (_, y_hi) = to_px(hi);
            root.draw(&PathElement::new(vec![(cx, y_lo), (cx, y_hi)], BLACK))
                .map_err(err)?;
            for y in [y_lo, y_hi] {
                root.draw(&PathElement::new(vec![(cx - 6, y), (cx + 6, y)], BLACK))
                    .map_err(err)?;
            }
            let text = format!("{median:.3}");
            let (_, y_top) = to_px(median.max(hi));
            root.draw(&Text::new(text, (cx - 18, y_top - 18), ("sans-serif", 14)))
                .map_err(err)?;
        }
        root.present().map_err(err)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gen::Method;
    use crate::scenario::{FlowmodResult, TrafficResult};

    fn result(system: &'static str, mpps: f64, runs: Vec<f64>) -> SystemResult {
        SystemResult {
            system,
            connections: None,
            traffic: Some(TrafficResult {
                mpps,
                gbps: mpps * 0.5,
                loss: 0.0,
                p50_us: None,
                p99_us: None,
                offered_mpps: 1.0,
                lost_at_ingress: None,
                sent: 100,
                received: 100,
                generator: Method::LiveFrames,
                runs_mpps: runs,
            }),
            conntrack: None,
            ct_verified: None,
            conns_per_s: None,
            churn: None,
            flowmod: None,
        }
    }

    #[test]
    fn every_system_gets_a_labelled_bar_and_its_median() {
        let report = Report {
            scenario: "p2p",
            pkt_size: Some(64),
            proto: Some("udp"),
            flows: 1,
            connections: vec![],
            duration_s: Some(3.0),
            runs: 3,
            rate_pps: None,
            date: "2026-11-23T13:30:00Z".into(),
            machine: "test".into(),
            results: vec![
                result("xbr", 1.05, vec![0.9, 1.05, 1.1]),
                result("ovs-afxdp", 0.34, vec![0.3, 0.34, 0.35]),
            ],
            ratios: vec![],
        };
        let svg = svg(&report).unwrap();
        assert!(svg.starts_with("<svg"), "{svg}");
        for text in ["xbr", "ovs-afxdp", "1.050", "0.340", "Mpps received", "p2p"] {
            assert!(svg.contains(text), "no {text} in {svg}");
        }
        // Two bars on the white background.
        assert!(svg.matches("<rect").count() >= 3, "{svg}");
    }

    #[test]
    fn flowmod_bars_are_load_rates() {
        let fm = |system, bundle_s: f64| SystemResult {
            system,
            connections: None,
            traffic: None,
            conntrack: None,
            ct_verified: None,
            conns_per_s: None,
            churn: None,
            flowmod: Some(FlowmodResult {
                flows_loaded: 100_000,
                bundle_s,
                flows_per_s: 100_000.0 / bundle_s,
                switch_cpu_s: 0.5,
                rss_before_kib: 1000,
                rss_after_kib: 2000,
                flows_verified: true,
                runs_bundle_s: vec![bundle_s, 2.0 * bundle_s],
            }),
        };
        let report = Report {
            scenario: "flowmod",
            pkt_size: None,
            proto: None,
            flows: 100_000,
            connections: vec![],
            duration_s: None,
            runs: 2,
            rate_pps: None,
            date: String::new(),
            machine: String::new(),
            results: vec![fm("xbr", 1.0), fm("ovs-afxdp", 2.0)],
            ratios: vec![],
        };
        let svg = svg(&report).unwrap();
        for text in [
            "100.000",
            "50.000",
            "flows loaded per second",
            "100000 flows",
        ] {
            assert!(svg.contains(text), "no {text} in {svg}");
        }
    }

    #[test]
    fn an_empty_report_still_draws() {
        let report = Report {
            scenario: "p2p",
            pkt_size: Some(64),
            proto: Some("udp"),
            flows: 1,
            connections: vec![],
            duration_s: Some(1.0),
            runs: 1,
            rate_pps: None,
            date: String::new(),
            machine: String::new(),
            results: vec![],
            ratios: vec![],
        };
        assert!(svg(&report).unwrap().contains("</svg>"));
    }
}
