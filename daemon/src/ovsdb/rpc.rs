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
//!
//! The stream is a unix socket (`unix:PATH`) or a TLS session over TCP
//! (`ssl:IP:PORT`, with the key, certificate and CA of the process's TLS
//! settings, as ovs-vswitchd's `--private-key` ...; see docs/tls.md).

use ofproto::tls::{TlsContext, TlsError};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum RpcError {
    #[error("'{0}' is not an OVSDB address (expected unix:PATH or ssl:IP:PORT)")]
    BadTarget(String),
    #[error("'{0}': only `xbr run` connects to an ssl: database; give its unix: socket here")]
    UnixOnly(String),
    #[error("connecting to {path}: {source}")]
    Connect {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("connecting to ssl:{addr}: {source}")]
    ConnectTcp {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(
        "the database at ssl:{0} needs TLS settings: --private-key, --certificate and --ca-cert"
    )]
    NoTls(SocketAddr),
    #[error("the database at ssl:{addr}: {source}")]
    Tls { addr: SocketAddr, source: TlsError },
    #[error("writing to the database: {0}")]
    Write(std::io::Error),
    #[error("cannot start the OVSDB reader thread: {0}")]
    Thread(std::io::Error),
}

/// Where the database is: `unix:PATH` (`xbr probe`, `xbr doctor`).
pub fn parse_target(s: &str) -> Result<PathBuf, RpcError> {
    match s.strip_prefix("unix:") {
        Some(p) if !p.is_empty() => Ok(PathBuf::from(p)),
        _ if s.starts_with("ssl:") => Err(RpcError::UnixOnly(s.to_string())),
        _ => Err(RpcError::BadTarget(s.to_string())),
    }
}

/// OVSDB's default TCP/TLS port (`ssl:IP` without one).
pub const OVSDB_PORT: u16 = 6640;

/// Where the database is, for `xbr run --ovsdb`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Remote {
    /// `unix:PATH`.
    Unix(PathBuf),
    /// `ssl:IP[:PORT]` (IPv6 in brackets when a port follows).
    Ssl(SocketAddr),
}

impl std::fmt::Display for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Remote::Unix(p) => write!(f, "unix:{}", p.display()),
            Remote::Ssl(a) => write!(f, "ssl:{a}"),
        }
    }
}

/// `unix:PATH` or `ssl:IP[:PORT]`.
pub fn parse_remote(s: &str) -> Result<Remote, RpcError> {
    if let Some(rest) = s.strip_prefix("ssl:") {
        let addr = match rest.parse::<std::net::IpAddr>() {
            Ok(ip) => SocketAddr::new(ip, OVSDB_PORT),
            Err(_) => rest
                .parse::<SocketAddr>()
                .map_err(|_| RpcError::BadTarget(s.to_string()))?,
        };
        return Ok(Remote::Ssl(addr));
    }
    match s.strip_prefix("unix:") {
        Some(p) if !p.is_empty() => Ok(Remote::Unix(PathBuf::from(p))),
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

/// The socket under a connection, to shut it down.
enum Socket {
    Unix(UnixStream),
    Tcp(TcpStream),
}

/// A connection to ovsdb-server.
pub struct Conn {
    socket: Socket,
    writer: Box<dyn Write + Send>,
    next_id: u64,
    pub incoming: crossbeam::channel::Receiver<Incoming>,
}

/// Bound on one write; a server that stops reading is cut off.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound on the TCP connect and on the TLS handshake.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

impl Conn {
    /// Connects to `remote`; `tls` is required for `ssl:`.
    pub fn open(remote: &Remote, tls: Option<&TlsContext>) -> Result<Conn, RpcError> {
        match remote {
            Remote::Unix(path) => Conn::connect(path),
            Remote::Ssl(addr) => Conn::connect_ssl(*addr, tls.ok_or(RpcError::NoTls(*addr))?),
        }
    }

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
        let writer = stream.try_clone().map_err(connect_err)?;
        Conn::start(Socket::Unix(stream), reader, Box::new(writer))
    }

    /// `ssl:addr`: TCP, then a TLS session in which both sides present
    /// certificates signed by the CA the other trusts.
    fn connect_ssl(addr: SocketAddr, tls: &TlsContext) -> Result<Conn, RpcError> {
        let io_err = |source| RpcError::ConnectTcp { addr, source };
        let stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).map_err(io_err)?;
        // Short reads while the handshake runs (it checks its deadline
        // between them); blocking reads after.
        stream
            .set_read_timeout(Some(Duration::from_millis(200)))
            .and_then(|()| stream.set_write_timeout(Some(WRITE_TIMEOUT)))
            .map_err(io_err)?;
        let _ = stream.set_nodelay(true);
        let shut = stream.try_clone().map_err(io_err)?;
        let sock = stream.try_clone().map_err(io_err)?;
        let (reader, writer) = ofproto::tls::stream::connect(tls, sock, addr, CONNECT_TIMEOUT)
            .map_err(|source| RpcError::Tls { addr, source })?;
        stream.set_read_timeout(None).map_err(io_err)?;
        Conn::start(Socket::Tcp(shut), reader, Box::new(writer))
    }

    fn start(
        socket: Socket,
        reader: impl Read + Send + 'static,
        writer: Box<dyn Write + Send>,
    ) -> Result<Conn, RpcError> {
        let (tx, rx) = crossbeam::channel::unbounded();
        std::thread::Builder::new()
            .name("xbr-ovsdb-rx".into())
            .spawn(move || read_loop(reader, tx))
            .map_err(RpcError::Thread)?;
        Ok(Conn {
            socket,
            writer,
            next_id: 1,
            incoming: rx,
        })
    }

    fn write(&mut self, msg: &Value) -> Result<(), RpcError> {
        let bytes = serde_json::to_vec(msg).map_err(|e| RpcError::Write(e.into()))?;
        self.writer.write_all(&bytes).map_err(RpcError::Write)
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
        let _ = match &self.socket {
            Socket::Unix(s) => s.shutdown(std::net::Shutdown::Both),
            Socket::Tcp(s) => s.shutdown(std::net::Shutdown::Both),
        };
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.close();
    }
}

fn read_loop(stream: impl Read, tx: crossbeam::channel::Sender<Incoming>) {
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
        assert_eq!(
            parse_remote("ssl:127.0.0.1:6641").unwrap(),
            Remote::Ssl("127.0.0.1:6641".parse().unwrap())
        );
        assert_eq!(
            parse_remote("ssl:10.0.0.1").unwrap().to_string(),
            "ssl:10.0.0.1:6640"
        );
        assert_eq!(
            parse_remote("unix:/run/db.sock").unwrap(),
            Remote::Unix("/run/db.sock".into())
        );
        assert!(parse_remote("ssl:host:1").is_err());
        assert!(parse_remote("tcp:1.2.3.4:6640").is_err());
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
