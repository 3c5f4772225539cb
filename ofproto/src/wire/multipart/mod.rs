//! OFPT_MULTIPART_REQUEST bodies and the reply entries xbr sends.

use super::header::msg_type;
use super::instruction::{emit_instructions_for, parse_instructions};
use super::mods::{emit_buckets, group_type_to_wire};
use super::oxm::{emit_match, parse_match};
use super::{err, Ctx, HeaderRepr, Put, Reader, WireError, HEADER_LEN, OFP_VERSION, ONF_VENDOR_ID};
use crate::datapath::{PortCounters, PortInfo};
use flowtable::{Bucket, FlowFilter, GroupType, Instructions, Match};
use monitor::MonitorRequest;
use std::time::Duration;

pub mod monitor;

pub mod mp_type {
    pub const DESC: u16 = 0;
    pub const FLOW: u16 = 1;
    pub const AGGREGATE: u16 = 2;
    pub const TABLE: u16 = 3;
    pub const PORT_STATS: u16 = 4;
    pub const GROUP: u16 = 6;
    pub const QUEUE: u16 = 5;
    pub const GROUP_DESC: u16 = 7;
    pub const GROUP_FEATURES: u16 = 8;
    pub const METER: u16 = 9;
    pub const METER_CONFIG: u16 = 10;
    pub const METER_FEATURES: u16 = 11;
    pub const TABLE_FEATURES: u16 = 12;
    pub const PORT_DESC: u16 = 13;
    /// OpenFlow 1.4 on.
    pub const TABLE_DESC: u16 = 14;
    pub const QUEUE_DESC: u16 = 15;
}

/// OFPMPF_REQ_MORE / OFPMPF_REPLY_MORE.
pub const MPF_MORE: u16 = 1;

/// Length of the multipart header after `ofp_header` (type, flags, pad).
const MP_HEADER_LEN: usize = 8;

/// Largest OpenFlow message.
pub const MAX_MSG_LEN: usize = 65535;

/// A decoded multipart request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MultipartRequest {
    Desc,
    Flow(FlowFilter),
    Aggregate(FlowFilter),
    Table,
    PortStats(u32),
    GroupStats(u32),
    GroupDesc,
    TableFeatures,
    PortDesc,
    GroupFeatures,
    MeterFeatures,
    /// Meter statistics of one meter or OFPM_ALL.
    Meter(u32),
    /// Meter configuration of one meter or OFPM_ALL.
    MeterConfig(u32),
    /// Queue statistics: (port or OFPP_ANY, queue or OFPQ_ALL).
    Queue(u32, u32),
    /// The ONF extension's flow monitors (an experimenter multipart).
    FlowMonitor(Vec<MonitorRequest>),
}

impl MultipartRequest {
    /// The multipart type a reply to this request carries.
    pub fn mp_type(&self) -> u16 {
        match self {
            MultipartRequest::Desc => mp_type::DESC,
            MultipartRequest::Flow(_) => mp_type::FLOW,
            MultipartRequest::Aggregate(_) => mp_type::AGGREGATE,
            MultipartRequest::Table => mp_type::TABLE,
            MultipartRequest::PortStats(_) => mp_type::PORT_STATS,
            MultipartRequest::GroupStats(_) => mp_type::GROUP,
            MultipartRequest::GroupDesc => mp_type::GROUP_DESC,
            MultipartRequest::TableFeatures => mp_type::TABLE_FEATURES,
            MultipartRequest::PortDesc => mp_type::PORT_DESC,
            MultipartRequest::GroupFeatures => mp_type::GROUP_FEATURES,
            MultipartRequest::MeterFeatures => mp_type::METER_FEATURES,
            MultipartRequest::Meter(_) => mp_type::METER,
            MultipartRequest::MeterConfig(_) => mp_type::METER_CONFIG,
            MultipartRequest::Queue(..) => mp_type::QUEUE,
            MultipartRequest::FlowMonitor(_) => monitor::MP_EXPERIMENTER,
        }
    }

    /// Decodes the body of OFPT_MULTIPART_REQUEST (after `ofp_header`).
    pub fn parse(body: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(body, Ctx::Request, "multipart request");
        let ty = r.u16()?;
        let flags = r.u16()?;
        r.skip(4)?;
        if flags & MPF_MORE != 0 {
            return Err(WireError::BadRequest(
                err::BRC_BAD_MULTIPART,
                "multipart requests spanning several messages are not supported".into(),
            ));
        }
        let empty = |r: &Reader<'_>| {
            if r.is_empty() {
                Ok(())
            } else {
                Err(Ctx::Request.bad_len(format!("multipart type {ty} request has a body")))
            }
        };
        let req = match ty {
            mp_type::DESC => empty(&r).map(|_| MultipartRequest::Desc)?,
            mp_type::FLOW => MultipartRequest::Flow(parse_flow_filter(&mut r)?),
            mp_type::AGGREGATE => MultipartRequest::Aggregate(parse_flow_filter(&mut r)?),
            mp_type::TABLE => empty(&r).map(|_| MultipartRequest::Table)?,
            mp_type::PORT_STATS | mp_type::GROUP => {
                let id = r.u32()?;
                r.skip(4)?;
                empty(&r)?;
                if ty == mp_type::PORT_STATS {
                    MultipartRequest::PortStats(id)
                } else {
                    MultipartRequest::GroupStats(id)
                }
            }
            mp_type::GROUP_DESC => empty(&r).map(|_| MultipartRequest::GroupDesc)?,
            mp_type::PORT_DESC => empty(&r).map(|_| MultipartRequest::PortDesc)?,
            mp_type::GROUP_FEATURES => empty(&r).map(|_| MultipartRequest::GroupFeatures)?,
            mp_type::METER_FEATURES => empty(&r).map(|_| MultipartRequest::MeterFeatures)?,
            mp_type::METER | mp_type::METER_CONFIG => {
                let id = r.u32()?;
                r.skip(4)?;
                empty(&r)?;
                if ty == mp_type::METER {
                    MultipartRequest::Meter(id)
                } else {
                    MultipartRequest::MeterConfig(id)
                }
            }
            mp_type::QUEUE => {
                let port = r.u32()?;
                let queue = r.u32()?;
                empty(&r)?;
                MultipartRequest::Queue(port, queue)
            }
            monitor::MP_EXPERIMENTER => {
                let experimenter = r.u32()?;
                let exp_type = r.u32()?;
                if experimenter != ONF_VENDOR_ID {
                    return Err(WireError::BadRequest(
                        err::BRC_BAD_EXPERIMENTER,
                        format!("experimenter multipart of {experimenter:#x}"),
                    ));
                }
                if exp_type != monitor::ONF_FLOW_MONITOR {
                    return Err(WireError::BadRequest(
                        err::BRC_BAD_EXP_TYPE,
                        format!("ONF multipart type {exp_type}"),
                    ));
                }
                MultipartRequest::FlowMonitor(monitor::parse_onf13(r.rest())?)
            }
            mp_type::TABLE_FEATURES => {
                if !r.is_empty() {
                    return Err(WireError::TableFeatures(
                        err::TFFC_EPERM,
                        "changing table features is not supported".into(),
                    ));
                }
                MultipartRequest::TableFeatures
            }
            _ => {
                return Err(WireError::BadRequest(
                    err::BRC_BAD_MULTIPART,
                    format!("multipart type {ty} is not supported"),
                ))
            }
        };
        Ok(req)
    }

    /// Encodes the body of OFPT_MULTIPART_REQUEST (for clients and tests).
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.put_u16(self.mp_type());
        out.put_u16(0);
        out.put_zeros(4);
        match self {
            MultipartRequest::Flow(f) | MultipartRequest::Aggregate(f) => {
                out.put_u8(f.table_id);
                out.put_zeros(3);
                out.put_u32(f.out_port);
                out.put_u32(f.out_group);
                out.put_zeros(4);
                out.put_u64(f.cookie);
                out.put_u64(f.cookie_mask);
                emit_match(&f.matching, out);
            }
            MultipartRequest::PortStats(id)
            | MultipartRequest::GroupStats(id)
            | MultipartRequest::Meter(id)
            | MultipartRequest::MeterConfig(id) => {
                out.put_u32(*id);
                out.put_zeros(4);
            }
            MultipartRequest::Queue(port, queue) => {
                out.put_u32(*port);
                out.put_u32(*queue);
            }
            MultipartRequest::FlowMonitor(reqs) => {
                out.put_u32(ONF_VENDOR_ID);
                out.put_u32(monitor::ONF_FLOW_MONITOR);
                monitor::emit_requests(OFP_VERSION, reqs, out);
            }
            _ => {}
        }
    }
}

fn parse_flow_filter(r: &mut Reader<'_>) -> Result<FlowFilter, WireError> {
    let table_id = r.u8()?;
    r.skip(3)?;
    let out_port = r.u32()?;
    let out_group = r.u32()?;
    r.skip(4)?;
    let cookie = r.u64()?;
    let cookie_mask = r.u64()?;
    let matching = parse_match(r)?;
    if !r.is_empty() {
        return Err(Ctx::Request.bad_len("flow stats request has trailing bytes".into()));
    }
    Ok(FlowFilter {
        table_id,
        out_port,
        out_group,
        cookie,
        cookie_mask,
        matching,
    })
}

/// Packs reply entries into as many OFPT_MULTIPART_REPLY messages as it
/// takes to keep each below 64 KiB, with OFPMPF_REPLY_MORE on all but the
/// last. No entries still produce one (empty) reply.
pub fn pack_replies(xid: u32, ty: u16, entries: impl IntoIterator<Item = Vec<u8>>) -> Vec<Vec<u8>> {
    pack_replies_with(xid, ty, &[], entries)
}

/// [`pack_replies`] with `prefix` (an experimenter multipart's
/// experimenter and type) after every message's multipart header.
pub fn pack_replies_with(
    xid: u32,
    ty: u16,
    prefix: &[u8],
    entries: impl IntoIterator<Item = Vec<u8>>,
) -> Vec<Vec<u8>> {
    let start_msg = || {
        let mut m = Vec::with_capacity(1024);
        HeaderRepr {
            version: OFP_VERSION,
            msg_type: msg_type::MULTIPART_REPLY,
            length: 0,
            xid,
        }
        .emit(&mut m);
        m.put_u16(ty);
        m.put_u16(0);
        m.put_zeros(4);
        m.extend_from_slice(prefix);
        m
    };
    let mut msgs = Vec::new();
    let mut cur = start_msg();
    for e in entries {
        if cur.len() + e.len() > MAX_MSG_LEN
            && cur.len() > HEADER_LEN + MP_HEADER_LEN + prefix.len()
        {
            msgs.push(std::mem::replace(&mut cur, start_msg()));
        }
        cur.extend_from_slice(&e);
    }
    msgs.push(cur);
    let n = msgs.len();
    for (i, m) in msgs.iter_mut().enumerate() {
        let len = super::len16(m, 0);
        m.patch_u16(2, len);
        if i + 1 < n {
            m.patch_u16(HEADER_LEN + 2, MPF_MORE);
        }
    }
    msgs
}

fn put_str(out: &mut Vec<u8>, s: &str, width: usize) {
    let bytes = s.as_bytes();
    // Keep a terminating NUL, as C readers expect.
    let n = bytes.len().min(width - 1);
    out.extend_from_slice(&bytes[..n]);
    out.put_zeros(width - n);
}

/// `ofp_desc`.
pub fn desc_entry(mfr: &str, hw: &str, sw: &str, serial: &str, dp: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(1056);
    put_str(&mut out, mfr, 256);
    put_str(&mut out, hw, 256);
    put_str(&mut out, sw, 256);
    put_str(&mut out, serial, 32);
    put_str(&mut out, dp, 256);
    out
}

fn put_duration(out: &mut Vec<u8>, d: Duration) {
    out.put_u32(u32::try_from(d.as_secs()).unwrap_or(u32::MAX));
    out.put_u32(d.subsec_nanos());
}

/// One `ofp_flow_stats` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowStatsEntry {
    pub table_id: u8,
    pub duration: Duration,
    pub priority: u16,
    pub idle_timeout: u16,
    pub hard_timeout: u16,
    pub flags: u16,
    pub cookie: u64,
    pub packet_count: u64,
    pub byte_count: u64,
    pub matching: Match,
    pub instructions: Instructions,
}

impl FlowStatsEntry {
    pub fn emit(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.put_u16(0);
        out.put_u8(self.table_id);
        out.put_u8(0);
        put_duration(out, self.duration);
        out.put_u16(self.priority);
        out.put_u16(self.idle_timeout);
        out.put_u16(self.hard_timeout);
        out.put_u16(self.flags);
        out.put_zeros(4);
        out.put_u64(self.cookie);
        out.put_u64(self.packet_count);
        out.put_u64(self.byte_count);
        emit_match(&self.matching, out);
        let ip_proto = self
            .matching
            .exact(flowtable::Field::IpProto)
            .map(|v| v as u8);
        emit_instructions_for(&self.instructions, ip_proto, out);
        let len = super::len16(out, start);
        out.patch_u16(start, len);
    }

    /// Decodes the entries of a flow stats reply body (after the multipart
    /// header).
    pub fn parse_all(body: &[u8]) -> Result<Vec<Self>, WireError> {
        let mut r = Reader::new(body, Ctx::Request, "flow stats");
        let mut out = Vec::new();
        while !r.is_empty() {
            let len = usize::from(r.u16()?);
            if len < 56 {
                return Err(Ctx::Request.bad_len(format!("flow stats entry length {len}")));
            }
            let mut e = Reader::new(r.bytes(len - 2)?, Ctx::Request, "flow stats entry");
            let table_id = e.u8()?;
            e.skip(1)?;
            let secs = e.u32()?;
            let nanos = e.u32()?;
            let priority = e.u16()?;
            let idle_timeout = e.u16()?;
            let hard_timeout = e.u16()?;
            let flags = e.u16()?;
            e.skip(4)?;
            let cookie = e.u64()?;
            let packet_count = e.u64()?;
            let byte_count = e.u64()?;
            let matching = parse_match(&mut e)?;
            let instructions = parse_instructions(e.rest())?;
            out.push(FlowStatsEntry {
                table_id,
                duration: Duration::new(u64::from(secs), nanos.min(999_999_999)),
                priority,
                idle_timeout,
                hard_timeout,
                flags,
                cookie,
                packet_count,
                byte_count,
                matching,
                instructions,
            });
        }
        Ok(out)
    }
}

/// `ofp_aggregate_stats_reply`.
pub fn aggregate_entry(packets: u64, bytes: u64, flows: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(24);
    out.put_u64(packets);
    out.put_u64(bytes);
    out.put_u32(flows);
    out.put_zeros(4);
    out
}

/// `ofp_table_stats`.
pub fn table_stats_entry(t: &flowtable::TableStats) -> Vec<u8> {
    let mut out = Vec::with_capacity(24);
    out.put_u8(t.table_id);
    out.put_zeros(3);
    out.put_u32(t.active_count);
    out.put_u64(t.lookup_count);
    out.put_u64(t.matched_count);
    out
}

/// `ofp_port_stats` (112 bytes).
pub fn port_stats_entry(c: &PortCounters) -> Vec<u8> {
    let mut out = Vec::with_capacity(112);
    out.put_u32(c.port_no);
    out.put_zeros(4);
    put_port_counters(&mut out, c);
    // rx_frame_err, rx_over_err, rx_crc_err, collisions: not tracked.
    out.put_zeros(32);
    put_duration(&mut out, c.duration);
    out
}

/// The eight counters every version's port statistics entry has, in
/// their order.
pub(crate) fn put_port_counters(out: &mut Vec<u8>, c: &PortCounters) {
    for v in [
        c.rx_packets,
        c.tx_packets,
        c.rx_bytes,
        c.tx_bytes,
        c.rx_dropped,
        c.tx_dropped,
        c.rx_errors,
        c.tx_errors,
    ] {
        out.put_u64(v);
    }
}

/// `ofp_port` (64 bytes).
pub fn port_desc_entry(p: &PortInfo) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.put_u32(p.port_no);
    out.put_zeros(4);
    out.extend_from_slice(&p.hw_addr);
    out.put_zeros(2);
    put_str(&mut out, &p.name, 16);
    out.put_u32(p.config);
    out.put_u32(p.state);
    // curr, advertised, supported, peer: no features are advertised.
    out.put_zeros(16);
    out.put_u32(p.curr_speed);
    out.put_u32(p.max_speed);
    out
}

/// `ofp_port` as OpenFlow 1.4 and 1.5 encode it: the 1.3 fields with a
/// length, and the Ethernet features as an OFPPDPT_ETHERNET property.
pub fn port_desc_entry_v14(p: &PortInfo) -> Vec<u8> {
    const PROP_ETHERNET_LEN: u16 = 32;
    let mut out = Vec::with_capacity(72);
    out.put_u32(p.port_no);
    out.put_u16(40 + PROP_ETHERNET_LEN);
    out.put_zeros(2);
    out.extend_from_slice(&p.hw_addr);
    out.put_zeros(2);
    put_str(&mut out, &p.name, 16);
    out.put_u32(p.config);
    out.put_u32(p.state);
    out.put_u16(0); // OFPPDPT_ETHERNET
    out.put_u16(PROP_ETHERNET_LEN);
    out.put_zeros(4);
    // curr, advertised, supported, peer: no features are advertised.
    out.put_zeros(16);
    out.put_u32(p.curr_speed);
    out.put_u32(p.max_speed);
    out
}

/// `ofp_group_stats` with per-bucket counters.
pub fn group_stats_entry(
    group_id: u32,
    ref_count: u32,
    packets: u64,
    bytes: u64,
    duration: Duration,
    buckets: &[(u64, u64)],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(40 + 16 * buckets.len());
    let len = u16::try_from(40 + 16 * buckets.len()).unwrap_or(u16::MAX);
    out.put_u16(len);
    out.put_zeros(2);
    out.put_u32(group_id);
    out.put_u32(ref_count);
    out.put_zeros(4);
    out.put_u64(packets);
    out.put_u64(bytes);
    put_duration(&mut out, duration);
    for (p, b) in buckets {
        out.put_u64(*p);
        out.put_u64(*b);
    }
    out
}

/// `ofp_group_desc`.
pub fn group_desc_entry(group_id: u32, group_type: GroupType, buckets: &[Bucket]) -> Vec<u8> {
    let mut out = Vec::new();
    out.put_u16(0);
    out.put_u8(group_type_to_wire(group_type));
    out.put_u8(0);
    out.put_u32(group_id);
    emit_buckets(buckets, &mut out);
    let len = super::len16(&out, 0);
    out.patch_u16(0, len);
    out
}
