//! Errors of the connection layer (setting up listeners).

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
