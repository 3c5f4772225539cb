//! A connection's socket, Unix (the management socket) or TCP, with
//! the timeouts and shutdown the server needs of both.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use crate::connection::read_tick;

pub(super) enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    pub(super) fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
        })
    }

    /// Reads time out each [`read_tick`] (the connection's clock), a write
    /// that makes no progress for `probe` fails (the peer stopped
    /// reading); without a probe, writes wait (see `Connection::bounded`).
    pub(super) fn set_timeouts(&self, probe: Option<Duration>) -> io::Result<()> {
        let tick = read_tick(probe.unwrap_or(Duration::MAX));
        match self {
            Stream::Unix(s) => s
                .set_read_timeout(Some(tick))
                .and_then(|()| s.set_write_timeout(probe)),
            Stream::Tcp(s) => s
                .set_read_timeout(Some(tick))
                .and_then(|()| s.set_write_timeout(probe)),
        }
    }

    pub(super) fn shutdown(&self) {
        // Shutting down an already closed socket fails harmlessly.
        let _ = match self {
            Stream::Unix(s) => s.shutdown(Shutdown::Both),
            Stream::Tcp(s) => s.shutdown(Shutdown::Both),
        };
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(buf),
            Stream::Tcp(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write(buf),
            Stream::Tcp(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.flush(),
            Stream::Tcp(s) => s.flush(),
        }
    }
}
