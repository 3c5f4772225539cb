//! `ofp_header`: version, type, length and transaction id.

use super::{err, WireError, HEADER_LEN};

/// OpenFlow 1.3 message types (`ofp_type`).
pub mod msg_type {
    pub const HELLO: u8 = 0;
    pub const ERROR: u8 = 1;
    pub const ECHO_REQUEST: u8 = 2;
    pub const ECHO_REPLY: u8 = 3;
    pub const EXPERIMENTER: u8 = 4;
    pub const FEATURES_REQUEST: u8 = 5;
    pub const FEATURES_REPLY: u8 = 6;
    pub const GET_CONFIG_REQUEST: u8 = 7;
    pub const GET_CONFIG_REPLY: u8 = 8;
    pub const SET_CONFIG: u8 = 9;
    pub const PACKET_IN: u8 = 10;
    pub const FLOW_REMOVED: u8 = 11;
    pub const PORT_STATUS: u8 = 12;
    pub const PACKET_OUT: u8 = 13;
    pub const FLOW_MOD: u8 = 14;
    pub const GROUP_MOD: u8 = 15;
    pub const PORT_MOD: u8 = 16;
    pub const TABLE_MOD: u8 = 17;
    pub const MULTIPART_REQUEST: u8 = 18;
    pub const MULTIPART_REPLY: u8 = 19;
    pub const BARRIER_REQUEST: u8 = 20;
    pub const BARRIER_REPLY: u8 = 21;
    pub const QUEUE_GET_CONFIG_REQUEST: u8 = 22;
    pub const QUEUE_GET_CONFIG_REPLY: u8 = 23;
    pub const ROLE_REQUEST: u8 = 24;
    pub const ROLE_REPLY: u8 = 25;
    pub const GET_ASYNC_REQUEST: u8 = 26;
    pub const GET_ASYNC_REPLY: u8 = 27;
    pub const SET_ASYNC: u8 = 28;
    pub const METER_MOD: u8 = 29;
}

/// A read-only view of an `ofp_header` at the start of a buffer.
#[derive(Debug, Clone, Copy)]
pub struct Header<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Header<T> {
    /// Wraps a buffer that holds at least a full header. The length field
    /// is not checked against the buffer: framing does that.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(WireError::BadRequest(
                err::BRC_BAD_LEN,
                format!("{} bytes is shorter than ofp_header", buffer.as_ref().len()),
            ));
        }
        Ok(Header { buffer })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    pub fn version(&self) -> u8 {
        self.b()[0]
    }

    pub fn msg_type(&self) -> u8 {
        self.b()[1]
    }

    pub fn length(&self) -> u16 {
        u16::from_be_bytes([self.b()[2], self.b()[3]])
    }

    pub fn xid(&self) -> u32 {
        u32::from_be_bytes([self.b()[4], self.b()[5], self.b()[6], self.b()[7]])
    }
}

/// The owned form of `ofp_header`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderRepr {
    pub version: u8,
    pub msg_type: u8,
    pub length: u16,
    pub xid: u32,
}

impl HeaderRepr {
    /// A whole message of type `ty` around `body`, with OpenFlow 1.3's
    /// header (a connection speaking another version relabels it).
    pub fn framed(ty: u8, xid: u32, body: &[u8]) -> Vec<u8> {
        let mut m = Vec::with_capacity(HEADER_LEN + body.len());
        HeaderRepr {
            version: super::OFP_VERSION,
            msg_type: ty,
            length: u16::try_from(HEADER_LEN + body.len()).unwrap_or(u16::MAX),
            xid,
        }
        .emit(&mut m);
        m.extend_from_slice(body);
        m
    }

    pub fn parse<T: AsRef<[u8]>>(h: &Header<T>) -> Self {
        HeaderRepr {
            version: h.version(),
            msg_type: h.msg_type(),
            length: h.length(),
            xid: h.xid(),
        }
    }

    pub fn emit(&self, out: &mut Vec<u8>) {
        out.push(self.version);
        out.push(self.msg_type);
        out.extend_from_slice(&self.length.to_be_bytes());
        out.extend_from_slice(&self.xid.to_be_bytes());
    }
}
