//! A test playing an active OpenFlow controller for a switch it
//! configured (`ovs-vsctl set-controller`): it accepts the switch's TCP
//! connection (or, for a passive `ptcp:` target, connects to the
//! switch's, or to its management socket), says HELLO (OpenFlow 1.3),
//! then hands out whole messages
//! as they come, telling a quiet moment and a closed connection apart.
//! What it answers is the test's choice (an echo reply, or nothing).
//! Every wait is bounded: the accept by its caller's deadline, each read
//! by [`TICK`].

use crate::openflow::{HEADER_LEN, OFP13_VERSION, OFPT_HELLO};
use crate::{HarnessError, Result};
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long [`PlayedController::hear`] waits for bytes.
pub const TICK: Duration = Duration::from_millis(100);

/// What [`PlayedController::hear`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Heard {
    /// One whole message, header included.
    Message(Vec<u8>),
    /// Nothing within [`TICK`].
    Quiet,
    /// The switch closed (or reset) the connection.
    Closed,
}

fn io(context: &str, source: std::io::Error) -> HarnessError {
    HarnessError::Io {
        context: context.into(),
        source,
    }
}

/// The socket a [`PlayedController`] talks over.
enum Conn {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Tcp(s) => s.read(buf),
            Conn::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Conn::Tcp(s) => s.write(buf),
            Conn::Unix(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Conn::Tcp(s) => s.flush(),
            Conn::Unix(s) => s.flush(),
        }
    }
}

/// See the module documentation.
pub struct PlayedController {
    conn: Conn,
    buf: Vec<u8>,
}

impl PlayedController {
    /// Waits until `deadline` (or until `give_up` says so) for the
    /// switch to connect to `listener`, then says HELLO.
    pub fn accept(
        listener: &TcpListener,
        deadline: Instant,
        give_up: impl Fn() -> bool,
    ) -> Result<Self> {
        listener
            .set_nonblocking(true)
            .map_err(|e| io("listener mode", e))?;
        let conn = loop {
            match listener.accept() {
                Ok((c, _)) => break c,
                Err(_) if Instant::now() < deadline && !give_up() => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Err(e) => return Err(io("no connection from the switch", e)),
            }
        };
        Self::hello(conn)
    }

    /// Connects to a switch listening on `addr` (a passive `ptcp:`
    /// target), retrying until `deadline` while it starts listening,
    /// then says HELLO.
    pub fn connect(addr: std::net::SocketAddr, deadline: Instant) -> Result<Self> {
        let conn = loop {
            match TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
                Ok(c) => break c,
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Err(e) => return Err(io("cannot connect to the switch", e)),
            }
        };
        Self::hello(conn)
    }

    /// Connects to a switch's management socket `path` (`BRIDGE.mgmt`),
    /// then says HELLO.
    pub fn connect_unix(path: &Path) -> Result<Self> {
        let conn = UnixStream::connect(path).map_err(|e| io("cannot connect to the switch", e))?;
        conn.set_read_timeout(Some(TICK))
            .map_err(|e| io("socket mode", e))?;
        Self::greet(Conn::Unix(conn))
    }

    fn hello(conn: TcpStream) -> Result<Self> {
        conn.set_nonblocking(false)
            .and_then(|()| conn.set_read_timeout(Some(TICK)))
            .map_err(|e| io("socket mode", e))?;
        Self::greet(Conn::Tcp(conn))
    }

    fn greet(conn: Conn) -> Result<Self> {
        let mut c = PlayedController {
            conn,
            buf: Vec::new(),
        };
        c.send(&[OFP13_VERSION, OFPT_HELLO, 0, HEADER_LEN as u8, 0, 0, 0, 1])?;
        Ok(c)
    }

    pub fn send(&mut self, bytes: &[u8]) -> Result<()> {
        self.conn
            .write_all(bytes)
            .map_err(|e| io("writing to the switch", e))
    }

    /// The next whole message, or what happened instead within [`TICK`].
    pub fn hear(&mut self) -> Result<Heard> {
        loop {
            if self.buf.len() >= HEADER_LEN {
                let len =
                    usize::from(u16::from_be_bytes([self.buf[2], self.buf[3]])).max(HEADER_LEN);
                if self.buf.len() >= len {
                    return Ok(Heard::Message(self.buf.drain(..len).collect()));
                }
            }
            let mut chunk = [0u8; 4096];
            match self.conn.read(&mut chunk) {
                Ok(0) => return Ok(Heard::Closed),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Ok(Heard::Quiet)
                }
                Err(e) if e.kind() == ErrorKind::ConnectionReset => return Ok(Heard::Closed),
                Err(e) => return Err(io("reading from the switch", e)),
            }
        }
    }
}
