//! One TLS session over a blocking `TcpStream`, read by one thread and
//! written by another.
//!
//! # Design
//!
//! rustls keeps a session's state in one object, while xbr serves a
//! connection with a reader thread and a writer thread (the outbox), each
//! blocking on the socket. [`handshake`] first completes the handshake on
//! the caller's thread, before a deadline; it then splits the
//! session (behind a mutex, never held across a blocking socket call)
//! between a [`TlsReader`] and a [`TlsWriter`]:
//!
//! - the reader reads ciphertext from its own clone of the socket with
//!   the lock released, then hands it to the session and takes out
//!   plaintext under the lock; it feeds the session only when no
//!   plaintext is waiting, so the session's buffers stay small;
//! - every write of records to the socket (the writer's, and alerts or
//!   post-handshake messages the reader makes the session produce) takes
//!   a second lock first, the socket's write side, and keeps it while the
//!   bytes go out: records reach the wire in the order the session made
//!   them. Lock order: write side, then session.
//!
//! Timeouts are the socket's, as for plain TCP: the reader's read timeout
//! surfaces as `WouldBlock`/`TimedOut` with no plaintext consumed (the
//! connection's clock), the writer's write timeout fails the write.
//!
//! A TLS error met while reading (a peer that refuses our certificate
//! after the handshake, as TLS 1.3 servers do) is logged with the peer
//! and kept for the owner to report ([`TlsReader::error`]).

use super::{describe, TlsContext, TlsError};
use parking_lot::Mutex;
use rustls::Connection;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Ciphertext read from the socket at a time.
const READ_CHUNK: usize = 16 * 1024;

struct Shared {
    session: Mutex<Connection>,
    /// The socket's write side; held while records are written.
    out: Mutex<TcpStream>,
    peer: String,
    ca_cert: PathBuf,
    /// The first TLS error met after the handshake.
    error: Mutex<Option<String>>,
}

impl Shared {
    /// Writes whatever records the session has to send.
    fn flush(&self) -> io::Result<()> {
        let mut out = self.out.lock();
        let mut bytes = Vec::new();
        {
            let mut s = self.session.lock();
            while s.wants_write() {
                s.write_tls(&mut bytes)?;
            }
        }
        out.write_all(&bytes)
    }
}

/// The reading half of a TLS session.
pub struct TlsReader {
    shared: Arc<Shared>,
    sock: TcpStream,
    /// Ciphertext read but not yet handed to the session.
    pending: Vec<u8>,
    pos: usize,
    eof: bool,
}

/// The writing half of a TLS session.
pub struct TlsWriter {
    shared: Arc<Shared>,
}

/// The passive side of a session on `sock`, accepted from `peer`: see
/// [`handshake`].
pub fn accept(
    ctx: &TlsContext,
    sock: TcpStream,
    peer: &str,
    timeout: Duration,
) -> Result<(TlsReader, TlsWriter), TlsError> {
    let config = ctx.server_config()?;
    let session = rustls::ServerConnection::new(config).map_err(|e| TlsError::Handshake {
        peer: peer.to_string(),
        reason: e.to_string(),
    })?;
    handshake(sock, session.into(), peer, &ctx.files().ca_cert, timeout)
}

/// The active side of a session on `sock`, connected to `server`: see
/// [`handshake`]. The server's name is its address (not checked, as in
/// OVS: see `verify.rs`).
pub fn connect(
    ctx: &TlsContext,
    sock: TcpStream,
    server: std::net::SocketAddr,
    timeout: Duration,
) -> Result<(TlsReader, TlsWriter), TlsError> {
    let peer = server.to_string();
    let bootstrapping = ctx.bootstrapping();
    let config = ctx.client_config()?;
    let name = rustls::pki_types::ServerName::IpAddress(server.ip().into());
    let session = rustls::ClientConnection::new(config, name).map_err(|e| TlsError::Handshake {
        peer: peer.clone(),
        reason: e.to_string(),
    })?;
    let halves = handshake(sock, session.into(), &peer, &ctx.files().ca_cert, timeout)?;
    if bootstrapping {
        let chain = halves
            .0
            .shared
            .session
            .lock()
            .peer_certificates()
            .map(<[_]>::to_vec)
            .unwrap_or_default();
        ctx.bootstrap_from(&chain, &peer)?;
        // Not verified: not used, as in OVS. The next connection is.
        return Err(TlsError::Bootstrapped {
            path: ctx.files().ca_cert.clone(),
            peer,
        });
    }
    Ok(halves)
}

/// Completes the handshake of `session` over `sock` by `deadline`, then
/// splits it into its halves. `sock`'s read timeout must be short
/// (a second or less): the deadline is checked each time a read returns
/// or times out, so a peer that trickles bytes is cut off too. Errors name
/// the peer, and for certificate errors the CA file.
fn handshake(
    sock: TcpStream,
    mut session: Connection,
    peer: &str,
    ca_cert: &std::path::Path,
    timeout: Duration,
) -> Result<(TlsReader, TlsWriter), TlsError> {
    let deadline = Instant::now() + timeout;
    let failed = |reason: String| TlsError::Handshake {
        peer: peer.to_string(),
        reason,
    };
    let mut sock_ref = &sock;
    while session.is_handshaking() {
        if Instant::now() >= deadline {
            return Err(TlsError::HandshakeTimeout {
                peer: peer.to_string(),
                timeout,
            });
        }
        while session.wants_write() {
            session
                .write_tls(&mut sock_ref)
                .map_err(|e| failed(e.to_string()))?;
        }
        if !session.is_handshaking() {
            break;
        }
        match session.read_tls(&mut sock_ref) {
            Ok(0) => return Err(failed("the peer closed the connection".into())),
            Ok(_) => {
                if let Err(e) = session.process_new_packets() {
                    // Send our alert, so the peer learns why.
                    while session.wants_write() {
                        if session.write_tls(&mut sock_ref).is_err() {
                            break;
                        }
                    }
                    return Err(failed(describe(&e, ca_cert)));
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(failed(e.to_string())),
        }
    }
    let out = sock.try_clone().map_err(|e| failed(e.to_string()))?;
    let shared = Arc::new(Shared {
        session: Mutex::new(session),
        out: Mutex::new(out),
        peer: peer.to_string(),
        ca_cert: ca_cert.to_path_buf(),
        error: Mutex::new(None),
    });
    // What the handshake left to send (a TLS 1.3 client's last flight
    // may still be queued).
    shared.flush().map_err(|e| failed(e.to_string()))?;
    Ok((
        TlsReader {
            shared: shared.clone(),
            sock,
            pending: Vec::new(),
            pos: 0,
            eof: false,
        },
        TlsWriter { shared },
    ))
}

impl TlsReader {
    /// The TLS error that ended the session after its handshake, if one did.
    pub fn error(&self) -> Option<String> {
        self.shared.error.lock().clone()
    }

    /// A shared handle to [`TlsReader::error`], for whoever outlives the
    /// reader.
    pub fn error_cell(&self) -> TlsErrorCell {
        TlsErrorCell(self.shared.clone())
    }
}

/// See [`TlsReader::error_cell`].
#[derive(Clone)]
pub struct TlsErrorCell(Arc<Shared>);

impl TlsErrorCell {
    pub fn get(&self) -> Option<String> {
        self.0.error.lock().clone()
    }
}

impl Read for TlsReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let (fed, flush) = {
                let mut s = self.shared.session.lock();
                match s.reader().read(buf) {
                    Ok(n) => return Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    // Cut without close_notify: an end all the same.
                    Err(_) if self.eof => return Ok(0),
                    Err(e) => return Err(e),
                }
                match self.pending.get(self.pos..).filter(|r| !r.is_empty()) {
                    Some(mut rest) => {
                        self.pos += s.read_tls(&mut rest)?;
                        if let Err(e) = s.process_new_packets() {
                            let reason = describe(&e, &self.shared.ca_cert);
                            tracing::warn!(peer = %self.shared.peer, "TLS session failed: {reason}");
                            self.shared.error.lock().get_or_insert(reason.clone());
                            drop(s);
                            let _ = self.shared.flush();
                            return Err(io::Error::new(io::ErrorKind::InvalidData, reason));
                        }
                        (true, s.wants_write())
                    }
                    None if self.eof => return Ok(0),
                    None => (false, false),
                }
            };
            if flush {
                self.shared.flush()?;
            }
            if fed {
                // Look for plaintext again before reading more.
                continue;
            }
            // Nothing buffered: wait for the peer, lock released.
            self.pending.resize(READ_CHUNK, 0);
            self.pos = 0;
            let n = match self.sock.read(&mut self.pending) {
                Ok(n) => n,
                Err(e) => {
                    self.pending.clear();
                    return Err(e);
                }
            };
            self.pending.truncate(n);
            if n == 0 {
                // The session tells a clean close (close_notify) from a
                // cut one; both end the stream.
                self.eof = true;
                let mut s = self.shared.session.lock();
                let _ = s.read_tls(&mut io::empty());
                let _ = s.process_new_packets();
            }
        }
    }
}

impl Write for TlsWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut out = self.shared.out.lock();
        let mut bytes = Vec::new();
        let n = {
            let mut s = self.shared.session.lock();
            let n = s.writer().write(buf)?;
            while s.wants_write() {
                s.write_tls(&mut bytes)?;
            }
            n
        };
        out.write_all(&bytes)?;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for TlsWriter {
    /// Says goodbye (close_notify), as OpenSSL's SSL_shutdown does; a
    /// peer gone already makes the write fail harmlessly.
    fn drop(&mut self) {
        self.shared.session.lock().send_close_notify();
        let _ = self.shared.flush();
    }
}
