//! Errors of the connection layer: setting up listeners, and a
//! controller connection that did not come up or whose session failed.

use crate::tls::TlsError;
use std::net::SocketAddr;
use std::path::PathBuf;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum OfprotoError {
    #[error("cannot listen on unix socket {path}: {source}")]
    Unix {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0} is served by another running switch")]
    InUse(PathBuf),
    #[error("cannot listen on tcp {addr}: {source}")]
    Tcp {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot start the {what} thread: {source}")]
    Thread {
        what: &'static str,
        source: std::io::Error,
    },
}

/// Why a connection to a controller failed. Its text is what the
/// Controller row's `status:last_error` shows.
#[derive(Debug, Error)]
pub enum ControllerError {
    #[error("cannot set up the socket to controller {target}: {source}")]
    Socket {
        target: SocketAddr,
        source: std::io::Error,
    },
    /// The TLS handshake (or the CA bootstrap) failed.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The handshake passed, then the session failed (a TLS 1.3 server
    /// refusing our certificate only says so after it).
    #[error("TLS session with {target} failed: {reason}")]
    Session { target: SocketAddr, reason: String },
}
