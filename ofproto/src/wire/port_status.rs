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
    pub fn parse(body: &[u8]) -> Result<PortStatus, WireError> {
        let mut r = Reader::new(body, Ctx::Request, "port status");
        let reason = r.u8()?;
        r.skip(7)?;
        let port_no = r.u32()?;
        r.skip(4)?;
        let mut hw_addr = [0u8; 6];
        hw_addr.copy_from_slice(r.bytes(6)?);
        r.skip(2)?;
        let name = r.bytes(16)?;
        let name_len = name.iter().position(|b| *b == 0).unwrap_or(name.len());
        let name = String::from_utf8_lossy(name.get(..name_len).unwrap_or_default()).into_owned();
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
