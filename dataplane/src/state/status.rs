//! What the state file did for this run, for `xbr stats` and the log:
//! whether one was restored (from which release and format, what it
//! held) or refused (why), and how the periodic snapshots go.

use super::{Restored, StateError};
use parking_lot::Mutex;
use std::fmt::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How the bridge started.
#[derive(Clone, Debug)]
pub enum Start {
    /// `--state off`.
    Disabled,
    /// No state file.
    NoFile,
    Restored(Box<Restored>),
    /// The file was refused (the message names it and the problem); the
    /// bridge started empty.
    Refused(String),
}

#[derive(Debug)]
struct Inner {
    start: Start,
    written: u64,
    failed: u64,
    /// Periods in which nothing changed (no snapshot written).
    skipped: u64,
    /// When the newest snapshot was written, its size and how long it
    /// took.
    last: Option<(Instant, u64, Duration)>,
    last_error: Option<String>,
}

/// Shared by the bridge, its snapshot thread and the control socket.
#[derive(Debug)]
pub struct StateStatus {
    path: PathBuf,
    period: Option<Duration>,
    inner: Mutex<Inner>,
}

impl StateStatus {
    pub fn new(path: PathBuf, period: Option<Duration>, start: Start) -> Self {
        StateStatus {
            path,
            period,
            inner: Mutex::new(Inner {
                start,
                written: 0,
                failed: 0,
                skipped: 0,
                last: None,
                last_error: None,
            }),
        }
    }

    pub fn set_start(&self, start: Start) {
        self.inner.lock().start = start;
    }

    pub fn start(&self) -> Start {
        self.inner.lock().start.clone()
    }

    /// A period passed without changes: no snapshot written.
    pub fn snapshot_skipped(&self) {
        self.inner.lock().skipped += 1;
    }

    /// A snapshot was written (`Ok(bytes)`) or failed; returns whether it
    /// is the first failure after a success (to be logged).
    pub fn snapshot_done(&self, result: Result<u64, &StateError>, took: Duration) -> bool {
        let mut i = self.inner.lock();
        match result {
            Ok(bytes) => {
                i.written += 1;
                i.last = Some((Instant::now(), bytes, took));
                i.last_error = None;
                false
            }
            Err(e) => {
                i.failed += 1;
                let first = i.last_error.is_none();
                i.last_error = Some(e.to_string());
                first
            }
        }
    }

    /// The `state:` section of `xbr stats`.
    pub fn text(&self) -> String {
        let i = self.inner.lock();
        let mut s = format!("state file: {}\n", self.path.display());
        match &i.start {
            Start::Disabled => s.push_str("  disabled (--state off)\n"),
            Start::NoFile => s.push_str("  started empty: no state file\n"),
            Start::Refused(e) => {
                let _ = writeln!(s, "  started empty: refused: {e}");
            }
            Start::Restored(r) => {
                let _ = writeln!(s, "  {}", restored_line(r));
            }
        }
        match self.period {
            None => s.push_str("  snapshots: off\n"),
            Some(p) => {
                let _ = write!(
                    s,
                    "  snapshots: every {} s, written {}, failed {}, unchanged {}",
                    p.as_secs(),
                    i.written,
                    i.failed,
                    i.skipped
                );
                if let Some((at, bytes, took)) = i.last {
                    let _ = write!(
                        s,
                        ", last {} s ago ({bytes} bytes in {} ms)",
                        at.elapsed().as_secs(),
                        took.as_millis()
                    );
                }
                s.push('\n');
                if let Some(e) = &i.last_error {
                    let _ = writeln!(s, "  last snapshot failed: {e}");
                }
            }
        }
        s
    }
}

/// One line saying what a restore put back, for the log and `xbr stats`.
pub fn restored_line(r: &Restored) -> String {
    let skipped = if r.pipeline {
        ""
    } else {
        " (flows, groups and meters not applied: flow-restore-wait is on)"
    };
    format!(
        "restored: written by xbr {} (format {}) at {}, {}.{:03} s before: {} flows, {} groups, \
         {} meters, {} connections ({} expired meanwhile), {} port numbers{}",
        r.header.xbr_version,
        r.header.version,
        r.header.reason,
        r.age_ms / 1000,
        r.age_ms % 1000,
        r.flows,
        r.groups,
        r.meters,
        r.connections,
        r.expired_connections,
        r.ports,
        skipped
    )
}
