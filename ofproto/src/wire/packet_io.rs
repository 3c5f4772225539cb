//! OFPT_PACKET_IN (switch to controller) and OFPT_PACKET_OUT (controller
//! to switch).

use super::action::{emit_actions, emit_actions_in, parse_actions, parse_actions_in, Dialect};
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

    /// Decodes OpenFlow 1.5's body: buffer id, actions length, then the
    /// packet's metadata as a match (xbr takes `in_port` alone, which
    /// must be there), the actions in 1.5's dialect and the frame.
    pub fn parse_v15(body: &[u8]) -> Result<PacketOut, WireError> {
        let mut r = Reader::new(body, Ctx::Request, "packet out");
        let buffer_id = r.u32()?;
        let actions_len = usize::from(r.u16()?);
        r.skip(2)?;
        let metadata = parse_match(&mut r)?;
        let Some(in_port) = metadata.exact(Field::InPort) else {
            return Err(WireError::BadMatch(
                super::err::BMC_BAD_FIELD,
                "OpenFlow 1.5 packet-out without in_port".into(),
            ));
        };
        let mut only_port = Match::catch_all();
        only_port.set_exact(Field::InPort, in_port);
        if metadata != only_port {
            return Err(WireError::BadMatch(
                super::err::BMC_BAD_FIELD,
                "packet-out metadata other than in_port is not supported".into(),
            ));
        }
        let actions = parse_actions_in(r.bytes(actions_len)?, Dialect::Of15)?;
        Ok(PacketOut {
            buffer_id,
            in_port: in_port as u32,
            actions,
            data: r.rest().to_vec(),
        })
    }

    /// Encodes OpenFlow 1.5's body (the inverse of [`PacketOut::parse_v15`]).
    pub fn emit_v15(&self, out: &mut Vec<u8>) {
        out.put_u32(self.buffer_id);
        let len_at = out.len();
        out.put_u16(0);
        out.put_zeros(2);
        let mut metadata = Match::catch_all();
        metadata.set_exact(Field::InPort, u64::from(self.in_port));
        emit_match(&metadata, out);
        let start = out.len();
        emit_actions_in(&self.actions, None, Dialect::Of15, out);
        let len = u16::try_from(out.len() - start).unwrap_or(u16::MAX);
        out.patch_u16(len_at, len);
        out.extend_from_slice(&self.data);
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

#[cfg(test)]
mod tests_v15 {
    use super::*;

    fn po() -> PacketOut {
        PacketOut {
            buffer_id: NO_BUFFER,
            in_port: 3,
            actions: vec![Action::Output {
                port: 2,
                max_len: 0,
            }],
            data: vec![0xab; 42],
        }
    }

    #[test]
    fn a_1_5_packet_out_round_trips() {
        let mut out = Vec::new();
        po().emit_v15(&mut out);
        // buffer id, actions length 16, the in_port match (16 bytes).
        assert_eq!(&out[..8], &[0xff, 0xff, 0xff, 0xff, 0, 16, 0, 0]);
        assert_eq!(&out[8..12], &[0, 1, 0, 12]);
        assert_eq!(PacketOut::parse_v15(&out).unwrap(), po());
        for n in 0..out.len() {
            let _ = PacketOut::parse_v15(&out[..n]);
        }
    }

    #[test]
    fn metadata_other_than_in_port_is_refused() {
        let body = |m: &Match| {
            let mut out = vec![0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0];
            emit_match(m, &mut out);
            out
        };
        let mut tunnel = Match::catch_all();
        tunnel.set_exact(Field::InPort, 3);
        tunnel.set_exact(Field::TunId, 9);
        for m in [Match::catch_all(), tunnel] {
            let e = PacketOut::parse_v15(&body(&m)).unwrap_err();
            assert_eq!(
                e.ofp_error(),
                (
                    super::super::err::BAD_MATCH,
                    super::super::err::BMC_BAD_FIELD
                )
            );
        }
    }
}
