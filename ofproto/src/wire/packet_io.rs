//! OFPT_PACKET_IN (switch to controller) and OFPT_PACKET_OUT (controller
//! to switch).

use super::action::{emit_actions, emit_actions_in, parse_actions, parse_actions_in, Dialect};
use super::oxm::{emit_match, parse_match};
use super::{Ctx, Put, Reader, WireError, NO_BUFFER};
use flowtable::{Action, Field, Match};

/// Where a PACKET_IN body holds its reason (after buffer_id and
/// total_len), the same in every version xbr speaks.
pub const PACKET_IN_REASON_AT: usize = 6;

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
    /// OpenFlow 1.5's packet metadata besides in_port: pipeline fields
    /// (tunnel, metadata, registers) the packet starts with, each value
    /// with its mask applied; empty from 1.3.
    pub metadata: Vec<(Field, u64)>,
    pub actions: Vec<Action>,
    pub data: Vec<u8>,
}

/// Whether a packet-out may set `field` (OVS's "pipeline fields": what
/// the switch, not the packet, gives a packet).
fn is_pipeline_field(field: Field) -> bool {
    matches!(
        field,
        Field::InPort
            | Field::TunId
            | Field::TunSrc
            | Field::TunDst
            | Field::Metadata
            | Field::Reg(_)
    )
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
            metadata: Vec::new(),
            actions,
            data: r.rest().to_vec(),
        })
    }

    /// Decodes OpenFlow 1.5's body: buffer id, actions length, then the
    /// packet's metadata as a match (in_port, which must be there, and
    /// other pipeline fields; anything else is refused with
    /// OFPBMC_BAD_FIELD), the actions in 1.5's dialect and the frame.
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
        let mut fields = Vec::new();
        for field in metadata.fields() {
            if !is_pipeline_field(field) {
                return Err(WireError::BadMatch(
                    super::err::BMC_BAD_FIELD,
                    format!("{field:?} in packet-out metadata (only pipeline fields)"),
                ));
            }
            if field != Field::InPort {
                let (value, mask) = metadata.get(field);
                fields.push((field, value & mask));
            }
        }
        let actions = parse_actions_in(r.bytes(actions_len)?, Dialect::Of15)?;
        Ok(PacketOut {
            buffer_id,
            in_port: in_port as u32,
            metadata: fields,
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
        for &(field, value) in &self.metadata {
            metadata.set_exact(field, value);
        }
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
            metadata: Vec::new(),
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
    fn packet_metadata_is_pipeline_fields_only() {
        let body = |m: &Match| {
            let mut out = vec![0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0];
            emit_match(m, &mut out);
            out
        };
        let mut tunnel = Match::catch_all();
        tunnel.set_exact(Field::InPort, 3);
        tunnel.set_exact(Field::TunId, 9);
        tunnel.set_masked(Field::Reg(2), 0x1234, 0xff);
        let po = PacketOut::parse_v15(&body(&tunnel)).unwrap();
        let mut got = po.metadata.clone();
        got.sort_by_key(|(f, _)| format!("{f:?}"));
        assert_eq!(got, vec![(Field::Reg(2), 0x34), (Field::TunId, 9)]);
        // What it emits reads back the same.
        let mut again = Vec::new();
        po.emit_v15(&mut again);
        assert_eq!(PacketOut::parse_v15(&again).unwrap().metadata.len(), 2);
        let mut eth = Match::catch_all();
        eth.set_exact(Field::InPort, 3);
        eth.set_exact(Field::EthType, 0x800);
        // No in_port; a field the packet itself carries.
        for m in [Match::catch_all(), eth] {
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
