//! OFPT_FLOW_REMOVED: a flow left the table and its controller asked to
//! hear about it (OFPFF_SEND_FLOW_REM).

use super::oxm::{emit_match, parse_match};
use super::{Ctx, Put, Reader, WireError};
use flowtable::Match;
use std::time::Duration;

/// OFPRR_* reasons.
pub mod reason {
    pub const IDLE_TIMEOUT: u8 = 0;
    pub const HARD_TIMEOUT: u8 = 1;
    pub const DELETE: u8 = 2;
    pub const GROUP_DELETE: u8 = 3;
}

/// OFPT_FLOW_REMOVED body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowRemoved {
    pub cookie: u64,
    pub priority: u16,
    /// One of [`reason`].
    pub reason: u8,
    pub table_id: u8,
    pub duration: Duration,
    pub idle_timeout: u16,
    pub hard_timeout: u16,
    pub packet_count: u64,
    pub byte_count: u64,
    pub matching: Match,
}

impl FlowRemoved {
    pub fn parse(body: &[u8]) -> Result<FlowRemoved, WireError> {
        let mut r = Reader::new(body, Ctx::Request, "flow removed");
        let cookie = r.u64()?;
        let priority = r.u16()?;
        let reason = r.u8()?;
        let table_id = r.u8()?;
        let secs = r.u32()?;
        let nanos = r.u32()?;
        let idle_timeout = r.u16()?;
        let hard_timeout = r.u16()?;
        let packet_count = r.u64()?;
        let byte_count = r.u64()?;
        let matching = parse_match(&mut r)?;
        if !r.is_empty() {
            return Err(Ctx::Request.bad_len("flow removed: bytes after the match".into()));
        }
        Ok(FlowRemoved {
            cookie,
            priority,
            reason,
            table_id,
            duration: Duration::new(u64::from(secs), nanos.min(999_999_999)),
            idle_timeout,
            hard_timeout,
            packet_count,
            byte_count,
            matching,
        })
    }

    /// OpenFlow 1.5's body: the counters follow the match, as OXS
    /// statistics (duration, packets, bytes, as OVS sends them).
    pub fn emit_v15(&self, out: &mut Vec<u8>) {
        out.put_u8(self.table_id);
        out.put_u8(self.reason);
        out.put_u16(self.priority);
        out.put_u16(self.idle_timeout);
        out.put_u16(self.hard_timeout);
        out.put_u64(self.cookie);
        emit_match(&self.matching, out);
        super::stats15::put_stats(
            out,
            Some(self.duration),
            self.packet_count,
            self.byte_count,
            None,
        );
    }

    pub fn emit(&self, out: &mut Vec<u8>) {
        out.put_u64(self.cookie);
        out.put_u16(self.priority);
        out.put_u8(self.reason);
        out.put_u8(self.table_id);
        out.put_u32(u32::try_from(self.duration.as_secs()).unwrap_or(u32::MAX));
        out.put_u32(self.duration.subsec_nanos());
        out.put_u16(self.idle_timeout);
        out.put_u16(self.hard_timeout);
        out.put_u64(self.packet_count);
        out.put_u64(self.byte_count);
        emit_match(&self.matching, out);
    }
}
