//! `churn`: traffic through the switch while bundles of flow-mods replace
//! flows, and a check that no frame arrives where the flow table in force
//! could not have sent it.
//!
//! Topology: pod B on port 2 and pod C on port 3, each with a sink. The
//! generator walks `n_flows` destinations (10.128.4.0 + i, one
//! `ip,in_port=1,nw_dst=X` flow each, no catch-all). Even destinations
//! are fixed: their flows always send to port 2. Odd ones move: a
//! concurrent loop commits one bundle after another with
//! `ovs-ofctl -O OpenFlow13 bundle`, taking their flows round the cycle
//! port 2 -> port 3 -> deleted -> port 2 (re-added) -> ..., so the loop
//! modifies, deletes and adds flows.
//!
//! The sinks count frames per class (fixed, moving, other destination)
//! and, per class, the frames they can judge against one table version:
//! the loop opens a window after each bundle's commit reply (the switch
//! has the new table in force from then on) and closes it before sending
//! the next bundle; a frame sent (generator timestamp) after the window
//! opened and received before it closed went through the switch while
//! only that version was in force (see bpf/xbrb_sink.c). Misdelivered:
//!
//! - a fixed destination's frame at port 3, at any time;
//! - a frame for an address no flow matches, at any port;
//! - a moving destination's judged frame at a port its version does not
//!   send to (port 3 while at port 2, port 2 while at port 3, either
//!   while deleted).
//!
//! A frame that straddles a change (sent before a commit reply, or
//! received after the next bundle went out) may take either version and
//! is not judged. A switch that keeps forwarding by a stale cache entry
//! after answering the commit fails; so does one that ignores the table
//! (`xdp-redirect`, which sends everything to port 2, is allowed in this
//! scenario for that reason). Every window stays open [`HOLD`], so the
//! flow-mod rate is what the loop achieves with that pause between
//! bundles, not the switch's ceiling (`flowmod` measures that).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::flows::{churn_bundle, traffic, Case};
use super::report::ChurnResult;
use super::setup::{bundle, measure_err, switch_config, ScratchDir};
use super::{Config, ScenarioError};
use crate::bpf::{ClassCounts, Sink, CLASS_FIXED, CLASS_MOVING, CLASS_OTHER};
use crate::gen::{monotonic_ns, GenBounds};
use crate::measure::Harness;
use crate::measure::Sample;
use crate::ovs::CMD_TIMEOUT;
use crate::systems::{self, Running, System};
use crate::topo::Topology;

/// How long each table version stays in force (and judged) before the
/// next bundle.
pub(super) const HOLD: Duration = Duration::from_millis(20);
/// After a window closes, how long before its counters are read: frames
/// the sink program was counting at that instant land in the window.
const SETTLE: Duration = Duration::from_millis(1);

/// Where the moving destinations' flows send them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Place {
    Port2,
    Port3,
    Deleted,
}

impl Place {
    /// The next step of the cycle.
    pub(super) fn next(self) -> Place {
        match self {
            Place::Port2 => Place::Port3,
            Place::Port3 => Place::Deleted,
            Place::Deleted => Place::Port2,
        }
    }

    pub(super) fn port(self) -> Option<u32> {
        match self {
            Place::Port2 => Some(2),
            Place::Port3 => Some(3),
            Place::Deleted => None,
        }
    }

    /// Whether the sink at `sink` (0: port 2, 1: port 3) may receive a
    /// moving destination's frame while this version is in force.
    fn allows(self, sink: usize) -> bool {
        self.port() == Some(2 + sink as u32)
    }
}

/// One judged window: the version in force, and both sinks' counters when
/// it opened and after it closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Window {
    pub(super) place: Place,
    pub(super) open: [ClassCounts; 2],
    pub(super) closed: [ClassCounts; 2],
}

/// The check's outcome over a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Verdict {
    pub(super) misdelivered: u64,
    /// Frames whose port was checked: every fixed and other frame, and
    /// the moving ones inside windows.
    pub(super) judged: u64,
    pub(super) by: Misdelivered,
}

/// Where the misdelivered frames were found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Misdelivered {
    /// A fixed destination's frames at port 3.
    pub fixed_at_port3: u64,
    /// Frames for an address no flow matches.
    pub unmatched: u64,
    /// Moving destinations' frames at port 3 while their flows sent to 2.
    pub while_at_port2: u64,
    /// ... at port 2 while their flows sent to 3.
    pub while_at_port3: u64,
    /// ... at either port while their flows were deleted.
    pub while_deleted: u64,
}

impl Misdelivered {
    fn add(&mut self, o: &Misdelivered) {
        self.fixed_at_port3 += o.fixed_at_port3;
        self.unmatched += o.unmatched;
        self.while_at_port2 += o.while_at_port2;
        self.while_at_port3 += o.while_at_port3;
        self.while_deleted += o.while_deleted;
    }
}

impl std::fmt::Display for Misdelivered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "fixed at port 3 {}, unmatched {}, moving while at port 2 {} / at port 3 {} / deleted {}",
            self.fixed_at_port3,
            self.unmatched,
            self.while_at_port2,
            self.while_at_port3,
            self.while_deleted
        )
    }
}

/// The misdelivery accounting (see the module comment): `before` and
/// `after` are both sinks' counters around the measured run.
pub(super) fn verdict(
    before: &[ClassCounts; 2],
    after: &[ClassCounts; 2],
    windows: &[Window],
) -> Verdict {
    let run = [after[0].since(&before[0]), after[1].since(&before[1])];
    let mut v = Verdict::default();
    for c in &run {
        v.judged += c.total[CLASS_FIXED] + c.total[CLASS_OTHER];
        v.by.unmatched += c.total[CLASS_OTHER];
    }
    v.by.fixed_at_port3 = run[1].total[CLASS_FIXED];
    for w in windows {
        for sink in 0..2 {
            let n = w.closed[sink].since(&w.open[sink]).judged[CLASS_MOVING];
            v.judged += n;
            if !w.place.allows(sink) {
                *match w.place {
                    Place::Port2 => &mut v.by.while_at_port2,
                    Place::Port3 => &mut v.by.while_at_port3,
                    Place::Deleted => &mut v.by.while_deleted,
                } += n;
            }
        }
    }
    let b = &v.by;
    v.misdelivered =
        b.fixed_at_port3 + b.unmatched + b.while_at_port2 + b.while_at_port3 + b.while_deleted;
    v
}

/// One run's churn figures.
#[derive(Debug, Clone, PartialEq)]
pub(in crate::scenario) struct ChurnRun {
    pub(in crate::scenario) bundles: u64,
    pub(in crate::scenario) flow_mods: u64,
    pub(in crate::scenario) elapsed: Duration,
    pub(in crate::scenario) verdict: Verdict,
}

impl ChurnRun {
    /// The reported figures: this (median) run's rate, and the check over
    /// all runs.
    pub(in crate::scenario) fn result(&self, all: &[ChurnRun]) -> ChurnResult {
        ChurnResult {
            flow_mods: self.flow_mods,
            flow_mods_per_s: self.flow_mods as f64 / self.elapsed.as_secs_f64().max(1e-9),
            bundles: self.bundles,
            misdelivered: all.iter().map(|r| r.verdict.misdelivered).sum(),
            judged: all.iter().map(|r| r.verdict.judged).sum(),
            misdelivered_by: all.iter().fold(Misdelivered::default(), |mut m, r| {
                m.add(&r.verdict.by);
                m
            }),
        }
    }
}

fn counts(sinks: &[Sink]) -> Result<[ClassCounts; 2], ScenarioError> {
    let get = |i: usize| -> Result<ClassCounts, ScenarioError> {
        let s = sinks.get(i).ok_or_else(|| {
            ScenarioError::System(systems::SystemError::Start {
                system: "churn",
                reason: "the topology has no second sink".into(),
            })
        })?;
        s.class_counts().map_err(|e| {
            ScenarioError::System(systems::SystemError::Start {
                system: "churn",
                reason: format!("reading the sink: {e}"),
            })
        })
    };
    Ok([get(0)?, get(1)?])
}

fn set_windows(sinks: &[Sink], start: u64, end: u64) -> Result<(), ScenarioError> {
    for s in sinks {
        s.set_window(start, end).map_err(|e| {
            ScenarioError::System(systems::SystemError::Start {
                system: "churn",
                reason: format!("setting the judging window: {e}"),
            })
        })?;
    }
    Ok(())
}

/// What the loop did.
struct Churned {
    windows: Vec<Window>,
    bundles: u64,
    elapsed: Duration,
}

/// Judges the version in force for [`HOLD`] (or until `until`), then
/// commits the next, until `until` or `stop`. The bundle files are
/// `files[place]` for Port2, Port3, Deleted.
fn churn_loop(
    switch: &Running,
    sinks: &[Sink],
    files: &[String; 3],
    until: Instant,
    stop: &AtomicBool,
) -> Result<Churned, ScenarioError> {
    let start = Instant::now();
    let mut place = Place::Port2;
    let mut windows = Vec::new();
    let mut bundles = 0;
    loop {
        // The counters before the window opens: nothing is judged while
        // it is shut, so none of the last window's frames land in this one.
        let open = counts(sinks)?;
        let from = monotonic_ns();
        set_windows(sinks, from, u64::MAX)?;
        std::thread::sleep(HOLD.min(until.saturating_duration_since(Instant::now())));
        // Before the next bundle goes out: frames received from now on
        // may have met the next version.
        set_windows(sinks, from, monotonic_ns())?;
        std::thread::sleep(SETTLE);
        windows.push(Window {
            place,
            open,
            closed: counts(sinks)?,
        });
        if Instant::now() >= until || stop.load(Ordering::Relaxed) {
            break;
        }
        place = place.next();
        // A reference has no table to change: the windows go on judging
        // against the cycle it ignores (the check's negative control).
        if switch.has_flow_table() {
            bundle(switch, &files[place as usize], CMD_TIMEOUT)?;
            bundles += 1;
        }
    }
    Ok(Churned {
        windows,
        bundles,
        elapsed: start.elapsed(),
    })
}

/// One round's run of one switch: a fresh topology with pod C and a fresh
/// switch, the warm-up (no churn), then the measured run with the loop.
pub(super) fn measure_once(
    system: System,
    cfg: &Config,
    round: usize,
) -> Result<(Sample, ChurnRun), ScenarioError> {
    let dir = ScratchDir::new("churn")?;
    let files = [Place::Port2, Place::Port3, Place::Deleted].map(|p| {
        dir.write(
            &format!("{p:?}.bundle"),
            &churn_bundle(cfg.n_flows, p.port()),
        )
    });
    let [a, b, c] = files;
    let files = [a?, b?, c?];
    let topo = Topology::with_pod_c()?;
    let switch = systems::start(system, &topo, &switch_config(cfg)?)?;
    let m = measure_err(system);
    let h = Harness::new(&topo, traffic(cfg, Case { connections: None })?).map_err(m)?;
    let bounds = GenBounds {
        duration: cfg.duration,
        count: None,
        rate_pps: cfg.rate_pps,
    };
    if !cfg.warmup.is_zero() {
        h.run(&GenBounds {
            duration: cfg.warmup,
            ..bounds
        })
        .map_err(m)?;
    }
    let before = counts(h.sinks())?;
    let until = Instant::now() + cfg.duration;
    let (sample, churned) = std::thread::scope(|s| {
        let churner = s.spawn(|| churn_loop(&switch, h.sinks(), &files, until, &cfg.stop));
        let sample = h.run(&bounds);
        let churned = churner
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        (sample, churned)
    });
    let sample = sample.map_err(m)?;
    let churned = churned?;
    let after = counts(h.sinks())?;
    let verdict = verdict(&before, &after, &churned.windows);
    let moving = u64::from(cfg.n_flows / 2);
    let run = ChurnRun {
        bundles: churned.bundles,
        flow_mods: churned.bundles * moving,
        elapsed: churned.elapsed,
        verdict,
    };
    eprintln!(
        "  round {}/{} {}: {:.3} Mpps received during {} bundles ({:.0} flow-mods/s), {} misdelivered of {} judged{}",
        round + 1,
        cfg.runs,
        system.name(),
        sample.mpps(),
        run.bundles,
        run.flow_mods as f64 / run.elapsed.as_secs_f64().max(1e-9),
        verdict.misdelivered,
        verdict.judged,
        if verdict.misdelivered > 0 {
            format!(" ({})", verdict.by)
        } else {
            String::new()
        }
    );
    Ok((sample, run))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(fixed: u64, moving: u64, other: u64, judged_moving: u64) -> ClassCounts {
        ClassCounts {
            total: [fixed, moving, other],
            judged: [0, judged_moving, 0],
        }
    }

    const ZERO: [ClassCounts; 2] = [
        ClassCounts {
            total: [0; 3],
            judged: [0; 3],
        },
        ClassCounts {
            total: [0; 3],
            judged: [0; 3],
        },
    ];

    #[test]
    fn the_cycle_moves_deletes_and_readds() {
        let mut p = Place::Port2;
        let mut seen = Vec::new();
        for _ in 0..4 {
            p = p.next();
            seen.push(p.port());
        }
        assert_eq!(seen, [Some(3), None, Some(2), Some(3)]);
        assert!(Place::Port2.allows(0) && !Place::Port2.allows(1));
        assert!(Place::Port3.allows(1) && !Place::Port3.allows(0));
        assert!(!Place::Deleted.allows(0) && !Place::Deleted.allows(1));
    }

    #[test]
    fn frames_where_the_table_sends_them_are_not_misdelivered() {
        // Fixed frames at port 2 only; moving frames judged at port 3
        // while there, none while deleted; straddling frames (totals
        // beyond the judged ones) at both ports.
        let after = [c(1000, 300, 0, 0), c(0, 400, 0, 250)];
        let windows = [
            Window {
                place: Place::Port3,
                open: ZERO,
                closed: [c(0, 0, 0, 0), c(0, 0, 0, 250)],
            },
            Window {
                place: Place::Deleted,
                open: [c(0, 0, 0, 0), c(0, 0, 0, 250)],
                closed: [c(0, 0, 0, 0), c(0, 0, 0, 250)],
            },
        ];
        let v = verdict(&ZERO, &after, &windows);
        assert_eq!(v.misdelivered, 0);
        assert_eq!(v.judged, 1000 + 250);
    }

    #[test]
    fn a_wrong_port_or_a_stale_flow_is_misdelivery() {
        // A moving frame judged at port 2 while its flows sent to port 3.
        let windows = [Window {
            place: Place::Port3,
            open: ZERO,
            closed: [c(0, 1, 0, 1), c(0, 10, 0, 10)],
        }];
        let after = [c(0, 1, 0, 1), c(0, 10, 0, 10)];
        let v = verdict(&ZERO, &after, &windows);
        assert_eq!(v.misdelivered, 1);
        assert_eq!(v.by.while_at_port3, 1);
        // Two delivered after their flows were deleted.
        let windows = [Window {
            place: Place::Deleted,
            open: [c(0, 5, 0, 5), ZERO[1]],
            closed: [c(0, 6, 0, 6), c(0, 1, 0, 1)],
        }];
        assert_eq!(
            verdict(&ZERO, &[c(0, 6, 0, 6), c(0, 1, 0, 1)], &windows).misdelivered,
            2
        );
        // A fixed destination at port 3, and an address no flow matches.
        let before = [c(7, 0, 0, 0), c(0, 0, 0, 0)];
        let after = [c(9, 0, 1, 0), c(3, 0, 0, 0)];
        let v = verdict(&before, &after, &[]);
        assert_eq!(v.misdelivered, 3 + 1);
        assert_eq!((v.by.fixed_at_port3, v.by.unmatched), (3, 1));
        assert_eq!(v.judged, 2 + 1 + 3);
    }
}
