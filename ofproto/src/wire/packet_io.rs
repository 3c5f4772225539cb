//! OFPT_PACKET_IN (switch to controller) and OFPT_PACKET_OUT (controller
//! to switch).

use super::action::{emit_actions, parse_actions};
use super::oxm::{emit_match, parse_match};
use super::{Ctx, Put, Reader, WireError, NO_BUFFER};
use flowtable::{Action, Field, Match};

/// OFPT_PACKET_IN body. xbr never buffers packets: `buffer_id` is always
/// OFP_NO_BUFFER and `data` holds the packet (cut to the action's
/// `max_len`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PacketIn {
    pub buffer_id: u32,
    /// Length of the whole packet, even when `data` is cut.
    pub total_len: u16,
    /// OFPR_* (see `flowtable::pipeline::packet_in_reason`).
    pub reason: u8,
    pub table_id: u8,
    pub cookie: u64,
    /// The pipeline fields: in_port always, tunnel id when set.
    pub matching: Match,
    pub data: Vec<u8>,
}

impl PacketIn {
    /// A packet-in for a packet received on `in_port` (tunnel `tun_id`,
    /// 0 for none).
    pub fn new(
        in_port: u32,
        tun_id: u64,
        reason: u8,
        table_id: u8,
        cookie: u64,
        total_len: u16,
        data: Vec<u8>,
    ) -> PacketIn {
        let mut matching = Match::catch_all();
        matching.set_exact(Field::InPort, u64::from(in_port));
        if tun_id != 0 {
            matching.set_exact(Field::TunId, tun_id);
        }
        PacketIn {
            buffer_id: NO_BUFFER,
            total_len,
            reason,
            table_id,
            cookie,
            matching,
            data,
        }
    }

    pub fn parse(body: &[u8]) -> Result<PacketIn, WireError> {
        let mut r = Reader::new(body, Ctx::Request, "packet in");
        let buffer_id = r.u32()?;
        let total_len = r.u16()?;
        let reason = r.u8()?;
        let table_id = r.u8()?;
        let cookie = r.u64()?;
        let matching = parse_match(&mut r)?;
        r.skip(2)?;
        Ok(PacketIn {
            buffer_id,
            total_len,
            reason,
            table_id,
            cookie,
            matching,
            data: r.rest().to_vec(),
        })
    }

    pub fn emit(&self, out: &mut Vec<u8>) {
        out.put_u32(self.buffer_id);
        out.put_u16(self.total_len);
        out.put_u8(self.reason);
        out.put_u8(self.table_id);
        out.put_u64(self.cookie);
        emit_match(&self.matching, out);
        out.put_zeros(2);
        out.extend_from_slice(&self.data);
    }
}

/// OFPT_PACKET_OUT body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PacketOut {
    pub buffer_id: u32,
    pub in_port: u32,
    pub actions: Vec<Action>,
    pub data: Vec<u8>,
}

impl PacketOut {
    pub fn parse(body: &[u8]) -> Result<PacketOut, WireError> {
        let mut r = Reader::new(body, Ctx::Request, "packet out");
        let buffer_id = r.u32()?;
        let in_port = r.u32()?;
        let actions_len = usize::from(r.u16()?);
        r.skip(6)?;
        let actions = parse_actions(r.bytes(actions_len)?)?;
        Ok(PacketOut {
            buffer_id,
            in_port,
            actions,
            data: r.rest().to_vec(),
        })
    }

    pub fn emit(&self, out: &mut Vec<u8>) {
        out.put_u32(self.buffer_id);
        out.put_u32(self.in_port);
        let len_at = out.len();
        out.put_u16(0);
        out.put_zeros(6);
        let start = out.len();
        emit_actions(&self.actions, out);
        let len = u16::try_from(out.len() - start).unwrap_or(u16::MAX);
        out.patch_u16(len_at, len);
        out.extend_from_slice(&self.data);
    }
}
