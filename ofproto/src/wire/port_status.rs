//! OFPT_PORT_STATUS: a port was added, removed or changed.

use super::multipart::port_desc_entry;
use super::{Ctx, Put, Reader, WireError};
use crate::datapath::PortInfo;

/// OFPPR_* reasons.
pub mod reason {
    pub const ADD: u8 = 0;
    pub const DELETE: u8 = 1;
    pub const MODIFY: u8 = 2;
}

/// OFPT_PORT_STATUS body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortStatus {
    /// One of [`reason`].
    pub reason: u8,
    pub port: PortInfo,
}

impl PortStatus {
    /// OpenFlow 1.4/1.5's body: the port is described with properties.
    pub fn emit_v14(&self, out: &mut Vec<u8>) {
        out.put_u8(self.reason);
        out.put_zeros(7);
        out.extend_from_slice(&super::multipart::port_desc_entry_v14(&self.port));
    }

    pub fn parse(body: &[u8]) -> Result<PortStatus, WireError> {
        let mut r = Reader::new(body, Ctx::Request, "port status");
        let reason = r.u8()?;
        r.skip(7)?;
        let port_no = r.u32()?;
        r.skip(4)?;
        let mut hw_addr = [0u8; 6];
        hw_addr.copy_from_slice(r.bytes(6)?);
        r.skip(2)?;
        // At most 15 bytes before the NUL (OFP_MAX_PORT_NAME_LEN); bytes
        // outside ASCII become '?', so the name re-encodes to what it was.
        let name: String = r
            .bytes(16)?
            .iter()
            .take(15)
            .take_while(|b| **b != 0)
            .map(|b| if b.is_ascii() { char::from(*b) } else { '?' })
            .collect();
        let config = r.u32()?;
        let state = r.u32()?;
        r.skip(16)?;
        let curr_speed = r.u32()?;
        let max_speed = r.u32()?;
        if !r.is_empty() {
            return Err(Ctx::Request.bad_len("port status longer than 72 bytes".into()));
        }
        Ok(PortStatus {
            reason,
            port: PortInfo {
                port_no,
                hw_addr,
                name,
                config,
                state,
                curr_speed,
                max_speed,
            },
        })
    }

    pub fn emit(&self, out: &mut Vec<u8>) {
        out.put_u8(self.reason);
        out.put_zeros(7);
        out.extend_from_slice(&port_desc_entry(&self.port));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the wire_decode fuzz target: a 16-byte name without its
    /// NUL decoded to 16 characters and re-encoded to 15.
    #[test]
    fn names_decode_to_what_encodes_back() {
        let mut body = vec![reason::MODIFY, 0, 0, 0, 0, 0, 0, 0];
        let mut port = Vec::new();
        port.put_u32(7);
        port.put_zeros(4);
        port.extend_from_slice(&[2, 0, 0, 0, 0, 7]);
        port.put_zeros(2);
        port.extend_from_slice(b"abcdefghijklm\xc3\xa9p"); // 16 bytes, no NUL
        port.put_zeros(32);
        body.extend_from_slice(&port);
        let ps = PortStatus::parse(&body).unwrap();
        assert_eq!(ps.port.name, "abcdefghijklm??");
        let mut again = Vec::new();
        ps.emit(&mut again);
        assert_eq!(PortStatus::parse(&again).unwrap(), ps);
    }
}
