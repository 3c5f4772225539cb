//! RFC 7047 JSON-RPC over a stream socket: requests with ids, replies,
//! and the server's notifications (`update`, `echo`).
//!
//! # Design
//!
//! The wire is a sequence of JSON objects with no framing, so a reader
//! thread runs serde_json's streaming deserializer over the socket and
//! hands each message to the client loop through a channel; the channel
//! disconnecting is how the loop learns that the connection is gone. The
//! loop owns the write side and is the only writer, so messages never
//! interleave.

use serde_json::{json, Value};
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum RpcError {
    #[error("'{0}' is not an OVSDB address (expected unix:PATH)")]
    BadTarget(String),
    #[error("connecting to {path}: {source}")]
    Connect {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("writing to the database: {0}")]
    Write(std::io::Error),
    #[error("cannot start the OVSDB reader thread: {0}")]
    Thread(std::io::Error),
}

/// Where the database is: `unix:PATH`.
pub fn parse_target(s: &str) -> Result<PathBuf, RpcError> {
    match s.strip_prefix("unix:") {
        Some(p) if !p.is_empty() => Ok(PathBuf::from(p)),
        _ => Err(RpcError::BadTarget(s.to_string())),
    }
}

/// One message from the server.
#[derive(Debug)]
pub enum Incoming {
    /// A reply to our request `id`: its result, or its error.
    Reply {
        id: u64,
        result: Result<Value, Value>,
    },
    /// A request or notification from the server.
    Request {
        method: String,
        params: Value,
        id: Value,
    },
}

/// A connection to ovsdb-server.
pub struct Conn {
    stream: UnixStream,
    next_id: u64,
    pub incoming: crossbeam::channel::Receiver<Incoming>,
}

/// Bound on one write; a server that stops reading is cut off.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

impl Conn {
    pub fn connect(path: &std::path::Path) -> Result<Conn, RpcError> {
        let connect_err = |source| RpcError::Connect {
            path: path.to_path_buf(),
            source,
        };
        let stream = UnixStream::connect(path).map_err(connect_err)?;
        stream
            .set_write_timeout(Some(WRITE_TIMEOUT))
            .map_err(connect_err)?;
        let reader = stream.try_clone().map_err(connect_err)?;
        let (tx, rx) = crossbeam::channel::unbounded();
        std::thread::Builder::new()
            .name("xbr-ovsdb-rx".into())
            .spawn(move || read_loop(reader, tx))
            .map_err(RpcError::Thread)?;
        Ok(Conn {
            stream,
            next_id: 1,
            incoming: rx,
        })
    }

    fn write(&mut self, msg: &Value) -> Result<(), RpcError> {
        let bytes = serde_json::to_vec(msg).map_err(|e| RpcError::Write(e.into()))?;
        self.stream.write_all(&bytes).map_err(RpcError::Write)
    }

    /// Sends a request; returns its id.
    pub fn request(&mut self, method: &str, params: Value) -> Result<u64, RpcError> {
        let id = self.next_id;
        self.next_id += 1;
        self.write(&json!({"method": method, "params": params, "id": id}))?;
        Ok(id)
    }

    /// Answers a server request (`echo`).
    pub fn reply(&mut self, id: Value, result: Value) -> Result<(), RpcError> {
        self.write(&json!({"result": result, "error": null, "id": id}))
    }

    /// Closes both directions; the reader thread then ends.
    pub fn close(&self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.close();
    }
}

fn read_loop(stream: UnixStream, tx: crossbeam::channel::Sender<Incoming>) {
    let reader = std::io::BufReader::new(stream);
    for msg in serde_json::Deserializer::from_reader(reader).into_iter::<Value>() {
        let Ok(msg) = msg else {
            // EOF mid-message, a reset, or bytes that are not JSON: the
            // connection is unusable either way.
            break;
        };
        let Some(incoming) = classify(msg) else {
            tracing::debug!("OVSDB: ignoring a message that is neither request nor reply");
            continue;
        };
        if tx.send(incoming).is_err() {
            break;
        }
    }
}

/// One JSON value from the server as a reply or a request (`None`:
/// neither). Public for the `ovsdb_update` fuzz target.
pub fn classify(mut msg: Value) -> Option<Incoming> {
    let obj = msg.as_object_mut()?;
    if let Some(Value::String(method)) = obj.remove("method") {
        return Some(Incoming::Request {
            method,
            params: obj.remove("params").unwrap_or(Value::Null),
            id: obj.remove("id").unwrap_or(Value::Null),
        });
    }
    let id = obj.get("id")?.as_u64()?;
    let error = obj.remove("error").unwrap_or(Value::Null);
    let result = if error.is_null() {
        Ok(obj.remove("result").unwrap_or(Value::Null))
    } else {
        Err(error)
    };
    Some(Incoming::Reply { id, result })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        assert_eq!(
            parse_target("unix:/run/db.sock").unwrap(),
            PathBuf::from("/run/db.sock")
        );
        assert!(parse_target("tcp:1.2.3.4:6640").is_err());
        assert!(parse_target("unix:").is_err());
    }

    #[test]
    fn classifies_replies_and_requests() {
        match classify(json!({"id": 3, "result": [1], "error": null})) {
            Some(Incoming::Reply {
                id: 3,
                result: Ok(v),
            }) => assert_eq!(v, json!([1])),
            other => panic!("{other:?}"),
        }
        match classify(json!({"id": 4, "result": null, "error": "bad"})) {
            Some(Incoming::Reply {
                id: 4,
                result: Err(e),
            }) => assert_eq!(e, json!("bad")),
            other => panic!("{other:?}"),
        }
        match classify(json!({"method": "echo", "params": [], "id": "echo"})) {
            Some(Incoming::Request { method, id, .. }) => {
                assert_eq!(method, "echo");
                assert_eq!(id, json!("echo"));
            }
            other => panic!("{other:?}"),
        }
        assert!(classify(json!([1, 2])).is_none());
    }
}
