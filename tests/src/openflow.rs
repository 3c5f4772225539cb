//! Just enough OpenFlow 1.3 framing to send hand-made (often malformed)
//! messages to xbr and read its answers. Real requests go through the real
//! `ovs-ofctl`; this is for what ovs-ofctl would never send.

use crate::{HarnessError, Result};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

pub const OFP13_VERSION: u8 = 4;
pub const HEADER_LEN: usize = 8;

// Message types (OpenFlow 1.3 section 7.1).
pub const OFPT_HELLO: u8 = 0;
pub const OFPT_ERROR: u8 = 1;
pub const OFPT_ECHO_REQUEST: u8 = 2;
pub const OFPT_ECHO_REPLY: u8 = 3;
pub const OFPT_FEATURES_REQUEST: u8 = 5;
pub const OFPT_FEATURES_REPLY: u8 = 6;
pub const OFPT_FLOW_MOD: u8 = 14;
pub const OFPT_BARRIER_REQUEST: u8 = 20;
pub const OFPT_BARRIER_REPLY: u8 = 21;

// Error types and codes (section 7.4.4).
pub const OFPET_BAD_REQUEST: u16 = 1;
pub const OFPBRC_BAD_TYPE: u16 = 1;
pub const OFPBRC_BAD_LEN: u16 = 6;

/// Bound on every read and write of a test connection.
const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// An OpenFlow header with an explicit (possibly wrong) length field.
pub fn header(version: u8, msg_type: u8, length: u16, xid: u32) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0] = version;
    h[1] = msg_type;
    h[2..4].copy_from_slice(&length.to_be_bytes());
    h[4..8].copy_from_slice(&xid.to_be_bytes());
    h
}

/// A well-framed OpenFlow 1.3 message: header with the right length, then
/// `body`. Bodies longer than an OpenFlow message can be are a bug in the
/// calling test, reported as an error.
pub fn message(msg_type: u8, xid: u32, body: &[u8]) -> Result<Vec<u8>> {
    let len = u16::try_from(HEADER_LEN + body.len())
        .map_err(|_| HarnessError::OpenFlow(format!("{}-byte body is too long", body.len())))?;
    let mut m = header(OFP13_VERSION, msg_type, len, xid).to_vec();
    m.extend_from_slice(body);
    Ok(m)
}

/// A received message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OfMessage {
    pub version: u8,
    pub msg_type: u8,
    pub xid: u32,
    pub body: Vec<u8>,
}

impl OfMessage {
    /// `(type, code, data)` of an OFPT_ERROR.
    pub fn error(&self) -> Option<(u16, u16, &[u8])> {
        if self.msg_type != OFPT_ERROR {
            return None;
        }
        let ty = self.body.get(0..2)?;
        let code = self.body.get(2..4)?;
        Some((
            u16::from_be_bytes([ty[0], ty[1]]),
            u16::from_be_bytes([code[0], code[1]]),
            self.body.get(4..).unwrap_or_default(),
        ))
    }
}

/// What happened when reading from a connection.
#[derive(Debug)]
pub enum Received {
    Message(OfMessage),
    /// The peer closed the connection (EOF or reset).
    Closed,
}

/// A client connection to xbr's management socket.
pub struct OfConn {
    stream: UnixStream,
}

fn of_err(what: &str, e: std::io::Error) -> HarnessError {
    HarnessError::io(format!("OpenFlow connection: {what}"), e)
}

impl OfConn {
    /// Connects; reads and writes time out after a few seconds.
    pub fn connect(path: &Path) -> Result<Self> {
        let stream = UnixStream::connect(path)
            .map_err(|e| of_err(&format!("connecting to {}", path.display()), e))?;
        stream
            .set_read_timeout(Some(IO_TIMEOUT))
            .and_then(|()| stream.set_write_timeout(Some(IO_TIMEOUT)))
            .map_err(|e| of_err("setting timeouts", e))?;
        Ok(OfConn { stream })
    }

    /// Connects and exchanges OFPT_HELLO (version 1.3). Returns the
    /// switch's HELLO.
    pub fn connect_hello(path: &Path) -> Result<Self> {
        let mut conn = Self::connect(path)?;
        conn.send(&message(OFPT_HELLO, 1, &[])?)?;
        let hello = conn.recv_message()?;
        if hello.msg_type != OFPT_HELLO {
            return Err(HarnessError::OpenFlow(format!(
                "expected HELLO from the switch, got {hello:?}"
            )));
        }
        Ok(conn)
    }

    pub fn send(&mut self, bytes: &[u8]) -> Result<()> {
        self.stream
            .write_all(bytes)
            .map_err(|e| of_err("sending", e))
    }

    /// Half-closes the connection (no more data from us).
    pub fn shutdown_write(&self) -> Result<()> {
        self.stream
            .shutdown(std::net::Shutdown::Write)
            .map_err(|e| of_err("shutdown", e))
    }

    /// Fills `buf`; `Ok(false)` on EOF/reset before the first byte.
    fn read_exact_or_eof(&mut self, buf: &mut [u8]) -> Result<bool> {
        let mut got = 0;
        while got < buf.len() {
            let rest = buf.get_mut(got..).unwrap_or_default();
            match self.stream.read(rest) {
                Ok(0) if got == 0 => return Ok(false),
                Ok(0) => {
                    return Err(HarnessError::OpenFlow(format!(
                        "connection closed inside a message ({got} of {} bytes)",
                        buf.len()
                    )))
                }
                Ok(n) => got += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::ConnectionReset && got == 0 => return Ok(false),
                Err(e) => return Err(of_err("receiving", e)),
            }
        }
        Ok(true)
    }

    /// The next message that is not an ECHO_REQUEST from the switch (those
    /// are answered here), or `Closed`. Times out with an error.
    pub fn recv(&mut self) -> Result<Received> {
        loop {
            let mut h = [0u8; HEADER_LEN];
            if !self.read_exact_or_eof(&mut h)? {
                return Ok(Received::Closed);
            }
            let len = usize::from(u16::from_be_bytes([h[2], h[3]]));
            if len < HEADER_LEN {
                return Err(HarnessError::OpenFlow(format!(
                    "switch sent a message with length {len} < 8: {h:02x?}"
                )));
            }
            let mut body = vec![0u8; len - HEADER_LEN];
            if !body.is_empty() && !self.read_exact_or_eof(&mut body)? {
                return Err(HarnessError::OpenFlow(
                    "connection closed after a message header".into(),
                ));
            }
            let msg = OfMessage {
                version: h[0],
                msg_type: h[1],
                xid: u32::from_be_bytes([h[4], h[5], h[6], h[7]]),
                body,
            };
            if msg.msg_type == OFPT_ECHO_REQUEST {
                self.send(&message(OFPT_ECHO_REPLY, msg.xid, &msg.body)?)?;
                continue;
            }
            return Ok(Received::Message(msg));
        }
    }

    /// The next message; the connection closing is an error.
    pub fn recv_message(&mut self) -> Result<OfMessage> {
        match self.recv()? {
            Received::Message(m) => Ok(m),
            Received::Closed => Err(HarnessError::OpenFlow(
                "the switch closed the connection".into(),
            )),
        }
    }

    /// Sends an ECHO_REQUEST and checks that the next message is the
    /// matching ECHO_REPLY (same xid, same payload).
    pub fn echo(&mut self, xid: u32) -> Result<()> {
        let payload = xid.to_be_bytes().repeat(3);
        self.send(&message(OFPT_ECHO_REQUEST, xid, &payload)?)?;
        let reply = self.recv_message()?;
        if reply.msg_type == OFPT_ECHO_REPLY && reply.xid == xid && reply.body == payload {
            Ok(())
        } else {
            Err(HarnessError::OpenFlow(format!(
                "expected ECHO_REPLY xid {xid} with payload {payload:02x?}, got {reply:?}"
            )))
        }
    }
}

/// A stream whose reads can time out (Unix and TCP sockets).
pub trait ReadTimeout: std::io::Read {
    fn set_timeout(&self, t: Option<Duration>) -> std::io::Result<()>;
}

impl ReadTimeout for std::os::unix::net::UnixStream {
    fn set_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
        self.set_read_timeout(t)
    }
}

impl ReadTimeout for std::net::TcpStream {
    fn set_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
        self.set_read_timeout(t)
    }
}

/// Waits (at most `wait`) until the peer closes `s`, skipping what it
/// sends meanwhile; how long that took.
pub fn wait_closed(s: &mut impl ReadTimeout, wait: Duration) -> Result<Duration> {
    let unexpected = |what: String| HarnessError::Unexpected(what);
    let start = Instant::now();
    s.set_timeout(Some(wait))
        .map_err(|e| unexpected(format!("timeout: {e}")))?;
    let mut buf = [0u8; 256];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Ok(start.elapsed()),
            Ok(_) if start.elapsed() < wait => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(start.elapsed()),
            other => return Err(unexpected(format!("not closed: {other:?}"))),
        }
    }
}

/// A management connection to `mgmt` that asked for every PORT_STATUS
/// (SET_ASYNC: every reason, as master/equal; SET_CONFIG: a nonzero
/// miss_send_len, without which a service connection gets nothing).
pub fn port_status_listener(mgmt: &Path) -> Result<OfConn> {
    const OFPT_SET_CONFIG: u8 = 9;
    const OFPT_SET_ASYNC: u8 = 28;
    let mut conn = OfConn::connect_hello(mgmt)?;
    let mut body = Vec::new();
    for mask in [0u32, 0, 0x7, 0x7, 0, 0] {
        body.extend_from_slice(&mask.to_be_bytes());
    }
    conn.send(&message(OFPT_SET_ASYNC, 2, &body)?)?;
    conn.send(&message(OFPT_SET_CONFIG, 3, &[0, 0, 0xff, 0xff])?)?;
    conn.echo(4)?;
    Ok(conn)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_message_layout() {
        assert_eq!(
            header(4, OFPT_ECHO_REQUEST, 0x1234, 0xdead_beef),
            [4, 2, 0x12, 0x34, 0xde, 0xad, 0xbe, 0xef]
        );
        let m = message(OFPT_FLOW_MOD, 7, &[9, 9]).unwrap();
        assert_eq!(m, [4, 14, 0, 10, 0, 0, 0, 7, 9, 9]);
        assert!(message(OFPT_HELLO, 1, &vec![0; 65536]).is_err());
    }

    #[test]
    fn error_body_parsing() {
        let err = OfMessage {
            version: 4,
            msg_type: OFPT_ERROR,
            xid: 1,
            body: vec![0, 1, 0, 6, 0xaa],
        };
        assert_eq!(err.error(), Some((1, 6, &[0xaa][..])));
        let short = OfMessage {
            body: vec![0, 1, 0],
            ..err.clone()
        };
        assert_eq!(short.error(), None);
        let not_err = OfMessage {
            msg_type: OFPT_ECHO_REPLY,
            ..err
        };
        assert_eq!(not_err.error(), None);
    }
}
