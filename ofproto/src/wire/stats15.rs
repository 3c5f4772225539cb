//! OpenFlow 1.5's flow statistics: FLOW_DESC reply entries (`dump-flows`)
//! and AGGREGATE replies. The requests are 1.3's byte for byte; the replies
//! carry their counters as OXS fields in an `ofp_stats` (a 4-byte header,
//! then each field's 32-bit header and value, padded to 8 bytes), and a
//! flow's description gains 1.4's `importance` (always 0: xbr refuses
//! others).
//!
//! xbr reports a flow's duration and counters, not its idle time (OXS
//! fields are each optional): it tracks idleness only for flows with an
//! idle timeout (see `expiry.rs`).

use super::action::Dialect;
use super::instruction::emit_instructions_in;
use super::multipart::FlowStatsEntry;
use super::oxm::emit_match;
use super::Put;
use std::time::Duration;

/// OXS headers (class OFPXSC_OPENFLOW_BASIC 0x8002, field << 9, length).
mod oxs {
    pub const DURATION: u32 = 0x8002_0008;
    pub const FLOW_COUNT: u32 = 0x8002_0604;
    pub const PACKET_COUNT: u32 = 0x8002_0808;
    pub const BYTE_COUNT: u32 = 0x8002_0a08;
}

/// Appends an `ofp_stats` with the fields given, padded to 8 bytes.
pub(crate) fn put_stats(
    out: &mut Vec<u8>,
    duration: Option<Duration>,
    packets: u64,
    bytes: u64,
    flows: Option<u32>,
) {
    let start = out.len();
    out.put_u16(0);
    out.put_u16(0);
    if let Some(d) = duration {
        out.put_u32(oxs::DURATION);
        out.put_u32(u32::try_from(d.as_secs()).unwrap_or(u32::MAX));
        out.put_u32(d.subsec_nanos());
    }
    out.put_u32(oxs::PACKET_COUNT);
    out.put_u64(packets);
    out.put_u32(oxs::BYTE_COUNT);
    out.put_u64(bytes);
    if let Some(n) = flows {
        out.put_u32(oxs::FLOW_COUNT);
        out.put_u32(n);
    }
    let len = super::len16(out, start);
    out.patch_u16(start + 2, len);
    out.pad8_from(start);
}

impl FlowStatsEntry {
    /// The entry in the encoding of OpenFlow `version`: 1.5's flow
    /// description, or 1.3's `ofp_flow_stats` (1.4's too).
    pub fn emit_for(&self, version: u8, out: &mut Vec<u8>) {
        if version == crate::wire::OFP15_VERSION {
            flow_desc_entry(self, out);
        } else {
            self.emit(out);
        }
    }
}

/// One `ofp_flow_desc` (OpenFlow 1.5's FLOW_DESC reply entry).
pub fn flow_desc_entry(e: &FlowStatsEntry, out: &mut Vec<u8>) {
    let start = out.len();
    out.put_u16(0);
    out.put_zeros(2);
    out.put_u8(e.table_id);
    out.put_u8(0);
    out.put_u16(e.priority);
    out.put_u16(e.idle_timeout);
    out.put_u16(e.hard_timeout);
    out.put_u16(e.flags);
    out.put_u16(0);
    out.put_u64(e.cookie);
    emit_match(&e.matching, out);
    put_stats(out, Some(e.duration), e.packet_count, e.byte_count, None);
    let ip_proto = e.matching.exact(flowtable::Field::IpProto).map(|v| v as u8);
    emit_instructions_in(&e.instructions, ip_proto, Dialect::Of15, out);
    let len = super::len16(out, start);
    out.patch_u16(start, len);
}

/// OpenFlow 1.5's AGGREGATE reply body.
pub fn aggregate_entry(packets: u64, bytes: u64, flows: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(40);
    put_stats(&mut out, None, packets, bytes, Some(flows));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowtable::{Instructions, Match};

    #[test]
    fn aggregate_is_three_oxs_fields_padded() {
        let b = aggregate_entry(5, 300, 2);
        assert_eq!(b.len(), 40);
        assert_eq!(&b[..4], &[0, 0, 0, 36]);
        assert_eq!(&b[4..8], &0x8002_0808u32.to_be_bytes());
        assert_eq!(&b[8..16], &5u64.to_be_bytes());
        assert_eq!(&b[16..20], &0x8002_0a08u32.to_be_bytes());
        assert_eq!(&b[20..28], &300u64.to_be_bytes());
        assert_eq!(&b[28..32], &0x8002_0604u32.to_be_bytes());
        assert_eq!(&b[32..36], &2u32.to_be_bytes());
        assert_eq!(&b[36..], &[0; 4]);
    }

    #[test]
    fn a_flow_desc_entry_has_its_length_and_stats_after_the_match() {
        let e = FlowStatsEntry {
            table_id: 3,
            duration: Duration::new(7, 5),
            priority: 100,
            idle_timeout: 10,
            hard_timeout: 0,
            flags: 0,
            cookie: 0xabc,
            packet_count: 1,
            byte_count: 64,
            matching: Match::catch_all(),
            instructions: Instructions::default(),
        };
        let mut out = Vec::new();
        flow_desc_entry(&e, &mut out);
        assert_eq!(usize::from(u16::from_be_bytes([out[0], out[1]])), out.len());
        assert_eq!((out[4], &out[6..8]), (3, &100u16.to_be_bytes()[..]));
        assert_eq!(&out[16..24], &0xabcu64.to_be_bytes());
        // An empty ofp_match is 8 bytes (type, length 4, padding).
        let stats = &out[32..];
        assert_eq!(&stats[..4], &[0, 0, 0, 40]);
        assert_eq!(&stats[4..8], &0x8002_0008u32.to_be_bytes());
        assert_eq!(&stats[8..16], &[0, 0, 0, 7, 0, 0, 0, 5]);
        assert_eq!(out.len(), 32 + 40);
    }
}
