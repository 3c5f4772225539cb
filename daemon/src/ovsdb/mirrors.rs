//! The Bridge's `Mirror` rows carried out: each becomes a
//! [`dataplane::mirror::Mirror`] sending to its `output_port`'s device, and
//! its counters go back to the row's `statistics`, as ovs-vswitchd
//! writes them (`tx_packets`, `tx_bytes`).
//!
//! A row is rebuilt only when it changes or its device went away (its
//! socket lives as long as it does; its counters as long as the row).
//! One that cannot be carried out (VLAN mirroring, no output port, a
//! device that cannot be opened yet) is logged once per change and
//! tried again on the next pass (the next change of the database); it
//! copies nothing.

use super::desired::DesiredMirror;
use super::row_error::RowError;
use dataplane::mirror::{Mirror, MirrorError, Mirrors, Sink, MAX_MIRRORS};
use serde_json::{Map, Value};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use thiserror::Error;

/// Why a Mirror row copies nothing.
#[derive(Debug, Error)]
pub enum MirrorRowError {
    #[error("more than {MAX_MIRRORS} mirrors on the bridge")]
    TooMany,
    #[error(transparent)]
    Row(#[from] RowError),
    #[error(transparent)]
    Device(#[from] MirrorError),
}

/// A row as last applied: the mirror it became, or why none.
pub struct Applied {
    pub want: DesiredMirror,
    pub mirror: Result<Arc<Mirror>, MirrorRowError>,
}

impl Applied {
    /// Carried out, to a device that still exists (one deleted and made
    /// again has a new index: the next pass opens it again).
    fn usable(&self) -> bool {
        self.mirror.as_ref().is_ok_and(|m| !m.sink_dead())
    }
}

/// Makes the bridge's mirrors what `want` says; `applied` is what the
/// last call made.
pub fn apply(bridge: &str, applied: &mut Vec<Applied>, want: &[DesiredMirror], mirrors: &Mirrors) {
    let unchanged = applied.len() == want.len()
        && applied
            .iter()
            .zip(want)
            .all(|(a, w)| a.want == *w && a.usable());
    if unchanged {
        return;
    }
    let mut next = Vec::with_capacity(want.len());
    for (i, w) in want.iter().enumerate() {
        let old = applied.iter().position(|a| a.want == *w && a.usable());
        let mirror = match old {
            Some(j) => applied.swap_remove(j).mirror,
            None => {
                // The row changed: its statistics go on.
                let before = applied
                    .iter()
                    .find(|a| a.want.uuid == w.uuid)
                    .and_then(|a| a.mirror.as_ref().ok())
                    .map(|m| m.counters.clone());
                build(i, w, before.unwrap_or_default())
            }
        };
        if let Err(e) = &mirror {
            let before = applied.iter().find(|a| a.want == *w).map(|a| &a.mirror);
            // Logged once while the row and its refusal stay the same.
            if !matches!(before, Some(Err(b)) if b.to_string() == e.to_string()) {
                tracing::warn!(bridge = %bridge, mirror = %w.name, "mirror not carried out: {e}");
            }
        } else if old.is_none() {
            tracing::info!(bridge = %bridge, mirror = %w.name, "mirroring to {}",
                           w.output.as_deref().unwrap_or_default());
        }
        next.push(Applied {
            want: w.clone(),
            mirror,
        });
    }
    *applied = next;
    mirrors.set_db(
        applied
            .iter()
            .filter_map(|a| a.mirror.as_ref().ok().cloned())
            .collect(),
    );
}

fn build(
    i: usize,
    w: &DesiredMirror,
    counters: Arc<dataplane::mirror::MirrorCounters>,
) -> Result<Arc<Mirror>, MirrorRowError> {
    if i >= MAX_MIRRORS {
        return Err(MirrorRowError::TooMany);
    }
    let dev = w.output.clone()?;
    let sink = Sink::device(&dev)?;
    Ok(Arc::new(
        Mirror::new(w.name.clone(), w.select.clone(), Some(dev), sink).with_counters(counters),
    ))
}

/// The rows' `statistics` (mirrors carried out only).
pub fn stats_rows(applied: &[Applied], rows: &mut Vec<(&'static str, String, Map<String, Value>)>) {
    for a in applied {
        let Ok(m) = &a.mirror else {
            continue;
        };
        let mut r = Map::new();
        r.insert(
            "statistics".into(),
            super::datum::int_map(&[
                ("tx_bytes", m.counters.tx_bytes.load(Relaxed)),
                ("tx_packets", m.counters.tx_packets.load(Relaxed)),
            ]),
        );
        rows.push(("Mirror", a.want.uuid.clone(), r));
    }
}
