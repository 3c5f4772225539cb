//! `xbr probe`: is a running xbr alive, and ready? For Kubernetes probes
//! and scripts (exit 0 yes, 1 no, with a line saying why).
//!
//! Alive: the process holding `<rundir>/ovs-vswitchd.pid` answers
//! `version` on its unixctl socket (`ovs-vswitchd.<pid>.ctl`, as
//! `ovs-appctl` finds it) and says it is xbr (a real ovs-vswitchd there
//! is not). Ready (with `--ovsdb`): also, ovsdb-server answers, and xbr
//! serves every bridge of its Bridge table (`ofproto/list`).
//!
//! Each exchange is bounded by [`TIMEOUT`]; nothing is changed.

use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;
use thiserror::Error;

/// Bound on each connection's exchange.
pub const TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Debug, Error)]
pub enum ProbeError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {detail}", path.display())]
    Reply { path: PathBuf, detail: String },
    #[error("{}: pid {pid} is not xbr: {version}", path.display())]
    NotXbr {
        path: PathBuf,
        pid: u32,
        version: String,
    },
    #[error("bridges of the database not served yet: {0}")]
    Unserved(String),
}

/// One JSON-RPC request on a fresh connection to `path`; its `result`.
pub(crate) fn call(path: &Path, method: &str, params: Value) -> Result<Value, ProbeError> {
    let io = |source| ProbeError::Io {
        path: path.to_path_buf(),
        source,
    };
    let reply_err = |detail: String| ProbeError::Reply {
        path: path.to_path_buf(),
        detail,
    };
    let mut stream = UnixStream::connect(path).map_err(io)?;
    stream.set_read_timeout(Some(TIMEOUT)).map_err(io)?;
    stream.set_write_timeout(Some(TIMEOUT)).map_err(io)?;
    let request = json!({"id": 0, "method": method, "params": params});
    stream
        .write_all(request.to_string().as_bytes())
        .map_err(io)?;
    let reply: Value = serde_json::Deserializer::from_reader(&stream)
        .into_iter::<Value>()
        .next()
        .ok_or_else(|| reply_err("the connection closed without a reply".into()))?
        .map_err(|e| reply_err(format!("reading the reply: {e}")))?;
    if !reply["error"].is_null() {
        return Err(reply_err(format!("error {}", reply["error"])));
    }
    Ok(reply["result"].clone())
}

/// The rows of `table` (only `columns`) in the Open_vSwitch database at
/// `db`.
pub(crate) fn select(db: &Path, table: &str, columns: &[&str]) -> Result<Vec<Value>, ProbeError> {
    let result = call(
        db,
        "transact",
        json!(["Open_vSwitch", {"op": "select", "table": table, "where": [], "columns": columns}]),
    )?;
    if let Some(e) = result[0].get("error") {
        return Err(ProbeError::Reply {
            path: db.to_path_buf(),
            detail: format!("select {table}: {e}"),
        });
    }
    result[0]["rows"]
        .as_array()
        .cloned()
        .ok_or_else(|| ProbeError::Reply {
            path: db.to_path_buf(),
            detail: format!("unexpected reply {result}"),
        })
}

/// xbr's unixctl socket in `rundir`, and its pid.
fn unixctl(rundir: &Path) -> Result<(PathBuf, u32), ProbeError> {
    let pidfile = rundir.join("ovs-vswitchd.pid");
    let text = std::fs::read_to_string(&pidfile).map_err(|source| ProbeError::Io {
        path: pidfile.clone(),
        source,
    })?;
    let pid = text.trim().parse().map_err(|_| ProbeError::Reply {
        path: pidfile.clone(),
        detail: format!("holds {text:?}, not a pid"),
    })?;
    Ok((rundir.join(format!("ovs-vswitchd.{pid}.ctl")), pid))
}

/// Whether xbr answers in `rundir`: its version line.
pub fn alive(rundir: &Path) -> Result<String, ProbeError> {
    let (sock, pid) = unixctl(rundir)?;
    let version = call(&sock, "version", json!([]))?
        .as_str()
        .unwrap_or_default()
        .trim()
        .to_string();
    if !version.contains("(xbr)") {
        return Err(ProbeError::NotXbr {
            path: sock,
            pid,
            version,
        });
    }
    Ok(version)
}

/// Whether xbr in `rundir` serves every bridge of the database at `db`:
/// the number of bridges.
pub fn ready(rundir: &Path, db: &Path) -> Result<usize, ProbeError> {
    alive(rundir)?;
    let want: BTreeSet<String> = select(db, "Bridge", &["name"])?
        .iter()
        .filter_map(|r| r["name"].as_str().map(String::from))
        .collect();
    let (sock, _) = unixctl(rundir)?;
    let listed = call(&sock, "ofproto/list", json!([]))?;
    let served: BTreeSet<String> = listed
        .as_str()
        .unwrap_or_default()
        .lines()
        .map(|l| l.trim().to_string())
        .collect();
    let missing: Vec<String> = want.difference(&served).cloned().collect();
    if !missing.is_empty() {
        return Err(ProbeError::Unserved(missing.join(", ")));
    }
    Ok(want.len())
}
