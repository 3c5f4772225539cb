//! A bridge's state outlives the process: its flows, groups, meters, port
//! numbers and connections are written to a state file in the run
//! directory and read back when the bridge starts again.
//!
//! # Design
//!
//! Stores: one file per bridge, `RUNDIR/BRIDGE.state`, written
//! - when the bridge stops gracefully (SIGTERM, SIGINT, `ovs-appctl
//!   exit`), after OpenFlow has closed, so nothing changes after it;
//! - every [`DEFAULT_SNAPSHOT_PERIOD`] (`--state-snapshot SECS`) by the
//!   bridge's snapshot thread (`keeper.rs`), so that after a SIGKILL or
//!   a crash the newest snapshot is at most one period old.
//!
//! Each write goes to a temporary file in the same directory, is
//! `fsync`ed, renamed over the old file and the directory `fsync`ed: a
//! reader sees the old file or the new one, never a mix, whatever
//! happens to the process or the machine in between.
//!
//! The format: one header line, then the body.
//! - The header is a JSON object: the magic `"format": "xbr-state"`, the
//!   format `version` ([`FORMAT_VERSION`]), the xbr release that wrote it,
//!   the bridge, when and why (`stop` or `snapshot`) it was written, and
//!   the body's length and CRC-32C. A file without the magic is foreign;
//!   another version is refused by name (no guessing at a layout); a
//!   short body is truncated; a checksum mismatch is corruption.
//! - The body is JSON ([`Body`]). Flows and groups are kept as the text
//!   `ovs-ofctl` reads (what `ovs-save` keeps too, and what an operator
//!   can read and diff), meters and connections as plain records.
//!
//! Why JSON with serde_json: it is already xbr's (OVSDB, `xbr lab`), an
//! operator can inspect a file with `jq`, and its cost is small next to
//! what a restore does anyway (100k flows are about 20 MB, parsed in well
//! under a second). A binary serde format would save little of the time,
//! which goes to building the classifier, and lose the readability.
//!
//! Restoring (`restore.rs`) is all or nothing and happens before the
//! OpenFlow sockets open: the whole file is checked first (every flow
//! parsed and applied to a scratch table, and each must read back exactly
//! as it was saved), then connections and the pipeline go in; any problem
//! leaves the bridge empty, the file is renamed to `BRIDGE.state.rejected`
//! for inspection, and the reason is logged with the file's name.
//!
//! Concurrency: the snapshot thread and the stopping thread each hold the
//! bridge's OpenFlow lock only to copy the rules' `Arc`s, and conntrack's
//! shard locks one at a time (see `conntrack/persist.rs`); formatting and
//! writing happen outside every lock and never on a packet thread.

pub mod capture;
pub mod keeper;
pub mod restore;
pub mod status;
#[cfg(test)]
mod tests;

pub use capture::capture;
pub use keeper::Keeper;
pub use restore::{restore, Restored};
pub use status::StateStatus;

use crate::conntrack::persist::SavedConn;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use thiserror::Error;

/// The header's magic.
pub const MAGIC: &str = "xbr-state";
/// The layout of [`Body`]; another value is refused.
pub const FORMAT_VERSION: u32 = 1;
/// How often the snapshot thread writes the state file by default.
pub const DEFAULT_SNAPSHOT_PERIOD: Duration = Duration::from_secs(10);
/// Largest state file read (a bound on what a bad file can make xbr
/// allocate): far above 1M flows and 3M connections.
pub const MAX_FILE_BYTES: u64 = 4 << 30;

/// Why the file was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// A graceful stop.
    Stop,
    /// The periodic snapshot.
    Snapshot,
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Reason::Stop => "stop",
            Reason::Snapshot => "snapshot",
        })
    }
}

/// The first line of a state file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    pub format: String,
    pub version: u32,
    /// The xbr release that wrote it.
    pub xbr_version: String,
    pub bridge: String,
    /// Milliseconds since the Unix epoch.
    pub saved_at_unix_ms: u64,
    pub reason: Reason,
    pub body_len: u64,
    pub body_crc32c: u32,
}

/// A meter band (OFPMBT_DROP or OFPMBT_DSCP_REMARK).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedBand {
    /// `drop` or `dscp_remark`.
    pub kind: String,
    #[serde(default)]
    pub prec_level: u8,
    pub rate: u32,
    pub burst_size: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedMeter {
    pub id: u32,
    pub flags: u16,
    pub bands: Vec<SavedBand>,
}

/// A port's OpenFlow number, kept for the next start.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedPort {
    pub name: String,
    pub ofport: u32,
}

/// What a state file holds after its header.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Body {
    /// `ovs-ofctl add-flow` lines, in the order the flows were added.
    pub flows: Vec<String>,
    /// `ovs-ofctl add-group` lines, by group id.
    pub groups: Vec<String>,
    pub meters: Vec<SavedMeter>,
    pub ports: Vec<SavedPort>,
    pub connections: Vec<SavedConn>,
}

/// A state file as read.
#[derive(Clone, Debug)]
pub struct Saved {
    pub path: PathBuf,
    pub header: Header,
    pub body: Body,
}

#[derive(Debug, Error)]
pub enum StateError {
    #[error("state file {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("state file {path}: {size} bytes, more than the {MAX_FILE_BYTES} read")]
    TooBig { path: PathBuf, size: u64 },
    #[error("state file {path}: not an xbr state file ({reason})")]
    Foreign { path: PathBuf, reason: String },
    #[error(
        "state file {path}: format version {found} (written by xbr {writer}); this xbr reads \
         version {FORMAT_VERSION} only"
    )]
    Version {
        path: PathBuf,
        found: u32,
        writer: String,
    },
    #[error("state file {path}: it is bridge {found}'s, not {bridge}'s")]
    OtherBridge {
        path: PathBuf,
        found: String,
        bridge: String,
    },
    #[error("state file {path}: truncated ({have} of {want} body bytes)")]
    Truncated { path: PathBuf, have: u64, want: u64 },
    #[error("state file {path}: corrupt (body checksum {found:#010x}, header says {want:#010x})")]
    Checksum {
        path: PathBuf,
        found: u32,
        want: u32,
    },
    #[error("state file {path}: corrupt body: {source}")]
    Body {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("state file {path}: {source}")]
    Content {
        path: PathBuf,
        source: restore::ContentError,
    },
}

/// `RUNDIR/BRIDGE.state`.
pub fn path(rundir: &Path, bridge: &str) -> PathBuf {
    rundir.join(format!("{bridge}.state"))
}

/// Where a refused file is moved.
pub fn rejected_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".rejected");
    PathBuf::from(s)
}

fn unix_ms_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Writes `body` as `bridge`'s state file at `path`, atomically (see the
/// module documentation). Returns the bytes written.
pub fn write(path: &Path, bridge: &str, reason: Reason, body: &Body) -> Result<u64, StateError> {
    let io = |source| StateError::Io {
        path: path.to_path_buf(),
        source,
    };
    let body_bytes = serde_json::to_vec(body).map_err(|e| io(std::io::Error::other(e)))?;
    let header = Header {
        format: MAGIC.into(),
        version: FORMAT_VERSION,
        xbr_version: env!("CARGO_PKG_VERSION").into(),
        bridge: bridge.into(),
        saved_at_unix_ms: unix_ms_now(),
        reason,
        body_len: body_bytes.len() as u64,
        body_crc32c: crc32c::crc32c(&body_bytes),
    };
    let mut header_line = serde_json::to_vec(&header).map_err(|e| io(std::io::Error::other(e)))?;
    header_line.push(b'\n');
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(
        ".{}.tmp{}",
        name.as_deref().unwrap_or("state"),
        std::process::id()
    ));
    let written = (|| {
        // Read and written by xbr only: it lists the node's connections.
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(&header_line)?;
        f.write_all(&body_bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(io(e));
    }
    Ok((header_line.len() + body_bytes.len()) as u64)
}

/// Reads and checks `bridge`'s state file at `path`: `Ok(None)` if there
/// is none.
pub fn read(path: &Path, bridge: &str) -> Result<Option<Saved>, StateError> {
    let p = || path.to_path_buf();
    let size = match std::fs::metadata(path) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(StateError::Io { path: p(), source }),
    };
    if size > MAX_FILE_BYTES {
        return Err(StateError::TooBig { path: p(), size });
    }
    let bytes = std::fs::read(path).map_err(|source| StateError::Io { path: p(), source })?;
    let foreign = |reason: &str| StateError::Foreign {
        path: p(),
        reason: reason.into(),
    };
    let Some(nl) = bytes.iter().position(|&b| b == b'\n') else {
        return Err(foreign("no header line"));
    };
    let (head, rest) = (&bytes[..nl], &bytes[nl + 1..]);
    // The magic and version first, so that a file of another version is
    // named as such even if the rest of its header differs.
    #[derive(Deserialize)]
    struct Magic {
        format: Option<String>,
        version: Option<u32>,
        xbr_version: Option<String>,
    }
    let magic: Magic =
        serde_json::from_slice(head).map_err(|_| foreign("the first line is not its header"))?;
    if magic.format.as_deref() != Some(MAGIC) {
        return Err(foreign("no \"format\": \"xbr-state\" in its header"));
    }
    match magic.version {
        Some(FORMAT_VERSION) => {}
        Some(found) => {
            return Err(StateError::Version {
                path: p(),
                found,
                writer: magic.xbr_version.unwrap_or_else(|| "?".into()),
            })
        }
        None => return Err(foreign("no format version in its header")),
    }
    let header: Header =
        serde_json::from_slice(head).map_err(|e| foreign(&format!("bad header: {e}")))?;
    if header.bridge != bridge {
        return Err(StateError::OtherBridge {
            path: p(),
            found: header.bridge,
            bridge: bridge.into(),
        });
    }
    let have = rest.len() as u64;
    if have < header.body_len {
        return Err(StateError::Truncated {
            path: p(),
            have,
            want: header.body_len,
        });
    }
    if have > header.body_len {
        return Err(foreign("more bytes after its body"));
    }
    let crc = crc32c::crc32c(rest);
    if crc != header.body_crc32c {
        return Err(StateError::Checksum {
            path: p(),
            found: crc,
            want: header.body_crc32c,
        });
    }
    let body: Body =
        serde_json::from_slice(rest).map_err(|source| StateError::Body { path: p(), source })?;
    Ok(Some(Saved {
        path: p(),
        header,
        body,
    }))
}
