//! A bridge's state file keeper: restores it at start, writes a snapshot
//! every period on its own thread, and the final state at a graceful stop.
//!
//! The snapshot thread sleeps on a channel between snapshots (so a stop
//! wakes it at once) and never touches a packet thread: each snapshot
//! costs one copy of the rules' `Arc`s under the OpenFlow lock, one walk
//! of conntrack's shards (one read lock at a time), the text, and one
//! file write. The flows' text is kept between snapshots and made again
//! only when the tables changed (their change sequence moved), so a large
//! pipeline that does not change costs its formatting once; the
//! connections (whose states and timers always move) are taken every
//! time. A period in which nothing changed and no connection exists
//! writes nothing.

use super::status::{restored_line, Start, StateStatus};
use super::{Reason, StateError};
use crate::conntrack::Conntrack;
use crate::control::DpShared;
use crossbeam::channel::{bounded, RecvTimeoutError, Sender};
use ofproto::Bridge;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What, if unchanged and without connections, makes a snapshot
/// unnecessary.
#[derive(Clone, PartialEq, Eq)]
struct Signature {
    tables: u64,
    ports: Vec<super::SavedPort>,
}

/// Everything a save needs.
struct Source {
    path: PathBuf,
    name: String,
    bridge: Arc<Bridge>,
    conntrack: Arc<Conntrack>,
    shared: Arc<DpShared>,
    status: Arc<StateStatus>,
    /// The pipeline's text as of a change sequence (see the module
    /// documentation).
    pipeline: parking_lot::Mutex<Option<(u64, Pipeline)>>,
}

type Pipeline = (Vec<String>, Vec<String>, Vec<super::SavedMeter>);

impl Source {
    fn signature(&self) -> Signature {
        Signature {
            tables: self.bridge.change_seq(),
            ports: super::capture::capture_ports(&self.shared.ports()),
        }
    }

    fn save(&self, reason: Reason) -> Result<u64, StateError> {
        // The sequence before the capture: a change during it moves the
        // sequence, and the next save captures again.
        let seq = self.bridge.change_seq();
        let (flows, groups, meters) = {
            let mut cached = self.pipeline.lock();
            match cached.as_ref() {
                Some((at, p)) if *at == seq => p.clone(),
                _ => {
                    let p = super::capture::capture_pipeline(&self.bridge);
                    *cached = Some((seq, p.clone()));
                    p
                }
            }
        };
        let body = super::Body {
            flows,
            groups,
            meters,
            ports: super::capture::capture_ports(&self.shared.ports()),
            connections: self.conntrack.export(),
        };
        super::write(&self.path, &self.name, reason, &body)
    }
}

/// Keeps one bridge's state file (see the module documentation).
pub struct Keeper {
    source: Arc<Source>,
    /// Dropping the sender stops the snapshot thread.
    thread: Option<(Sender<()>, JoinHandle<()>)>,
}

/// Reads the state file at `path` for bridge `name`; a file that cannot
/// be used is logged with its problem, moved aside and `Start::Refused`.
pub fn load(path: &Path, name: &str) -> (Option<super::Saved>, Start) {
    match super::read(path, name) {
        Ok(Some(saved)) => (Some(saved), Start::NoFile),
        Ok(None) => (None, Start::NoFile),
        Err(e) => (None, refuse(path, &e)),
    }
}

/// Removes a state file that must not be restored (its bridge was
/// created anew).
pub fn discard(path: &Path) {
    match std::fs::remove_file(path) {
        Ok(()) => tracing::info!(
            file = %path.display(),
            "removed the state file of an earlier bridge of this name (this one is new)"
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!(file = %path.display(), "cannot remove the state file: {e}"),
    }
}

/// Logs `e`, moves the file aside and says so.
fn refuse(path: &Path, e: &StateError) -> Start {
    let aside = super::rejected_path(path);
    let moved = match std::fs::rename(path, &aside) {
        Ok(()) => format!("moved to {}", aside.display()),
        Err(m) => format!("could not be moved aside: {m}"),
    };
    tracing::error!("{e}; starting with an empty bridge (the file {moved})");
    Start::Refused(format!("{e} ({moved})"))
}

impl Keeper {
    /// Restores `saved` (if any) into `bridge` (its pipeline only if
    /// `pipeline`) and `conntrack`, records
    /// the outcome in `status`, and starts the snapshot thread if
    /// `status` has a period. Returns the keeper and the restored port
    /// numbers by name.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        path: PathBuf,
        name: &str,
        saved: Option<super::Saved>,
        bridge: Arc<Bridge>,
        conntrack: Arc<Conntrack>,
        shared: Arc<DpShared>,
        status: Arc<StateStatus>,
        period: Option<Duration>,
        pipeline: bool,
    ) -> (Keeper, Vec<super::SavedPort>) {
        let mut ports = Vec::new();
        if let Some(saved) = saved {
            match super::restore(&saved, &bridge, &conntrack, pipeline) {
                Ok(r) => {
                    tracing::info!(
                        bridge = %name,
                        file = %path.display(),
                        "state file {}",
                        restored_line(&r)
                    );
                    ports = saved.body.ports;
                    status.set_start(Start::Restored(Box::new(r)));
                }
                Err(e) => status.set_start(refuse(&path, &e)),
            }
        }
        let source = Arc::new(Source {
            path,
            name: name.to_string(),
            bridge,
            conntrack,
            shared,
            status,
            pipeline: parking_lot::Mutex::new(None),
        });
        let thread = period.and_then(|p| spawn(source.clone(), p));
        (Keeper { source, thread }, ports)
    }

    fn stop_thread(&mut self) {
        if let Some((tx, t)) = self.thread.take() {
            drop(tx);
            let _ = t.join();
        }
    }

    /// Stops the snapshots and writes the final state (a graceful stop).
    pub fn stop_and_save(mut self) {
        self.stop_thread();
        let s = &self.source;
        let started = Instant::now();
        match s.save(Reason::Stop) {
            Ok(bytes) => tracing::info!(
                bridge = %s.name,
                file = %s.path.display(),
                bytes,
                ms = started.elapsed().as_millis() as u64,
                "state saved"
            ),
            Err(e) => tracing::error!(bridge = %s.name, "cannot save the state: {e}"),
        }
    }

    /// Stops the snapshots and removes the state file (the bridge was
    /// deleted: nothing of it should come back).
    pub fn forget(mut self) {
        self.stop_thread();
        match std::fs::remove_file(&self.source.path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(
                file = %self.source.path.display(),
                "cannot remove the state file: {e}"
            ),
        }
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

fn spawn(source: Arc<Source>, period: Duration) -> Option<(Sender<()>, JoinHandle<()>)> {
    let (tx, rx) = bounded::<()>(0);
    let spawned = std::thread::Builder::new()
        .name("xbr-snapshot".into())
        .spawn(move || {
            let mut last: Option<Signature> = None;
            loop {
                match rx.recv_timeout(period) {
                    Err(RecvTimeoutError::Timeout) => {}
                    _ => return,
                }
                let sig = source.signature();
                if last.as_ref() == Some(&sig) && source.conntrack.is_empty() {
                    source.status.snapshot_skipped();
                    continue;
                }
                last = Some(sig);
                snapshot_once(&source);
            }
        });
    match spawned {
        Ok(t) => Some((tx, t)),
        Err(e) => {
            tracing::warn!(
                "cannot start the state snapshot thread ({e}); the state is saved only at a \
                 graceful stop"
            );
            None
        }
    }
}

/// Writes one snapshot and records how it went (a failure is logged
/// once per run of failures).
fn snapshot_once(source: &Source) {
    let started = Instant::now();
    let result = source.save(Reason::Snapshot);
    if source
        .status
        .snapshot_done(result.as_ref().copied(), started.elapsed())
    {
        if let Err(e) = result {
            tracing::warn!(bridge = %source.name, "state snapshot failed: {e}");
        }
    }
}
