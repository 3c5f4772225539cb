//! Putting a state file's contents back into a starting bridge, all or
//! nothing.
//!
//! Order: everything is checked before anything is applied. The meters,
//! groups and flows are parsed into one batch and applied to a scratch
//! table first; every flow, group and meter must then read back exactly
//! as it was saved (so a file this build would misread is refused, not
//! half understood). Then the connections go in (all or none, see
//! `conntrack/persist.rs`), then the batch into the bridge (one atomic
//! change list for the packet threads); if that fails, the connections
//! are flushed again. The caller does this before the OpenFlow sockets
//! open, so nobody sees a partial table.

use super::capture::{flow_line, saved_meter};
use super::{Header, Saved, SavedMeter, StateError};
use crate::conntrack::persist::ImportError;
use crate::conntrack::Conntrack;
use flowtable::text::{format_group, parse_flow, parse_group, TextError};
use flowtable::{
    FlowTables, MeterBand, MeterBandType, MeterMod, MeterModCommand, ModError, PipelineMod,
};
use ofproto::Bridge;
use thiserror::Error;

/// What in a state file's body cannot be restored.
#[derive(Debug, Error)]
pub enum ContentError {
    #[error("flow {index} `{line}`: {source}")]
    Flow {
        index: usize,
        line: String,
        source: TextError,
    },
    #[error("group {index} `{line}`: {source}")]
    Group {
        index: usize,
        line: String,
        source: TextError,
    },
    #[error("meter {id}: unknown band kind `{kind}`")]
    Band { id: u32, kind: String },
    #[error("{what} {index} does not apply: {source}")]
    Apply {
        what: &'static str,
        index: usize,
        source: ModError,
    },
    #[error("{what} {index} reads back as `{restored}`, saved as `{saved}`")]
    Mismatch {
        what: &'static str,
        index: usize,
        saved: String,
        restored: String,
    },
    #[error("connections: {0}")]
    Connections(#[from] ImportError),
}

/// What a restore put back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Restored {
    pub header: Header,
    pub flows: usize,
    pub groups: usize,
    pub meters: usize,
    pub connections: usize,
    /// Saved connections whose time ran out before the restore.
    pub expired_connections: usize,
    pub ports: usize,
    /// Milliseconds between the file's writing and the restore.
    pub age_ms: u64,
    /// False: the flows, groups and meters were checked but left out
    /// (OVSDB's `flow-restore-wait` was on: whoever set it restores
    /// them, as with ovs-vswitchd, which starts with empty tables).
    pub pipeline: bool,
}

/// Restores `saved` into `bridge` (unless `pipeline` is false) and
/// `conntrack` (see the module documentation); on error neither was
/// changed.
pub fn restore(
    saved: &Saved,
    bridge: &Bridge,
    conntrack: &Conntrack,
    pipeline: bool,
) -> Result<Restored, StateError> {
    let err = |source| StateError::Content {
        path: saved.path.clone(),
        source,
    };
    let body = &saved.body;
    let mods = prepare(saved).map_err(err)?;
    let age_ms = super::unix_ms_now().saturating_sub(saved.header.saved_at_unix_ms);
    let imported = conntrack
        .restore_saved(&body.connections, age_ms)
        .map_err(|e| err(e.into()))?;
    let applied = if pipeline {
        bridge.apply_batch(&mods, None)
    } else {
        Ok(())
    };
    if let Err((i, source)) = applied {
        // Only a bridge that already had flows could refuse what a scratch
        // table took: take the connections back out.
        conntrack.flush(None);
        return Err(err(apply_error(body, i, source)));
    }
    Ok(Restored {
        header: saved.header.clone(),
        flows: body.flows.len(),
        groups: body.groups.len(),
        meters: body.meters.len(),
        pipeline,
        connections: imported.stored,
        expired_connections: imported.expired,
        ports: body.ports.len(),
        age_ms,
    })
}

/// The body's meters, groups and flows as one batch, checked on a scratch
/// table (see the module documentation).
pub fn prepare(saved: &Saved) -> Result<Vec<PipelineMod>, ContentError> {
    let mods = prepare_unchecked(saved)?;
    check_on_scratch(saved, &mods)?;
    Ok(mods)
}

/// The body's meters, groups and flows as one batch, in that order (so
/// that nothing refers to what is not there yet).
pub(super) fn prepare_unchecked(saved: &Saved) -> Result<Vec<PipelineMod>, ContentError> {
    let b = &saved.body;
    let mut mods = Vec::with_capacity(b.meters.len() + b.groups.len() + b.flows.len());
    for m in &b.meters {
        mods.push(PipelineMod::Meter(meter_mod(m)?));
    }
    for (index, line) in b.groups.iter().enumerate() {
        let gm = parse_group(line).map_err(|source| ContentError::Group {
            index,
            line: line.clone(),
            source,
        })?;
        mods.push(PipelineMod::Group(gm));
    }
    for (index, line) in b.flows.iter().enumerate() {
        let fm = parse_flow(line).map_err(|source| ContentError::Flow {
            index,
            line: line.clone(),
            source,
        })?;
        mods.push(PipelineMod::Flow(fm));
    }
    Ok(mods)
}

fn meter_mod(m: &SavedMeter) -> Result<MeterMod, ContentError> {
    let bands = m
        .bands
        .iter()
        .map(|b| {
            let band_type = match b.kind.as_str() {
                "drop" => MeterBandType::Drop,
                "dscp_remark" => MeterBandType::DscpRemark {
                    prec_level: b.prec_level,
                },
                other => {
                    return Err(ContentError::Band {
                        id: m.id,
                        kind: other.into(),
                    })
                }
            };
            Ok(MeterBand {
                band_type,
                rate: b.rate,
                burst_size: b.burst_size,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(MeterMod {
        command: MeterModCommand::Add,
        flags: m.flags,
        meter_id: m.id,
        bands,
    })
}

/// Which saved item batch index `i` is.
fn apply_error(b: &super::Body, i: usize, source: ModError) -> ContentError {
    let (what, index) = if i < b.meters.len() {
        ("meter", i)
    } else if i < b.meters.len() + b.groups.len() {
        ("group", i - b.meters.len())
    } else {
        ("flow", i - b.meters.len() - b.groups.len())
    };
    ContentError::Apply {
        what,
        index,
        source,
    }
}

/// Applies `mods` to an empty table and checks that everything reads back
/// as saved.
fn check_on_scratch(saved: &Saved, mods: &[PipelineMod]) -> Result<(), ContentError> {
    let b = &saved.body;
    let mut scratch = FlowTables::new();
    scratch
        .apply_batch(mods)
        .map_err(|(i, source)| apply_error(b, i, source))?;
    let mismatch = |what, index, saved: &str, restored: String| ContentError::Mismatch {
        what,
        index,
        saved: saved.to_string(),
        restored,
    };
    let mut rules = scratch.flows(&flowtable::flow_mod::FlowFilter::default());
    rules.sort_by_key(|r| r.id);
    for index in 0..b.flows.len().max(rules.len()) {
        let line = rules.get(index).map(|r| flow_line(r)).unwrap_or_default();
        let want = b.flows.get(index).map_or("", String::as_str);
        if line != want {
            return Err(mismatch("flow", index, want, line));
        }
    }
    let mut groups = scratch.groups();
    groups.sort_by_key(|g| g.id);
    for index in 0..b.groups.len().max(groups.len()) {
        let line = groups
            .get(index)
            .map(|g| format_group(g).trim_start().to_string())
            .unwrap_or_default();
        let want = b.groups.get(index).map_or("", String::as_str);
        if line != want {
            return Err(mismatch("group", index, want, line));
        }
    }
    let mut meters = scratch.meters();
    meters.sort_by_key(|m| m.id);
    let back: Vec<SavedMeter> = meters.iter().map(|m| saved_meter(m)).collect();
    for index in 0..b.meters.len().max(back.len()) {
        if b.meters.get(index) != back.get(index) {
            return Err(mismatch(
                "meter",
                index,
                &format!("{:?}", b.meters.get(index)),
                format!("{:?}", back.get(index)),
            ));
        }
    }
    Ok(())
}
