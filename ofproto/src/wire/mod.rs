//! OpenFlow 1.3 wire codec (plus the Nicira and ONF extensions xbr needs).
//!
//! Every message is decoded once, into an owned `Repr` whose `parse`
//! validates everything (lengths, padding, field ranges) and maps each
//! failure to the OpenFlow error the switch must send for it
//! ([`WireError::ofp_error`]). `emit` appends the encoding to a `Vec<u8>`;
//! for everything that the decoder accepts in its canonical form (the form
//! OVS sends), `emit(parse(bytes)) == bytes`.

pub mod action;
pub mod async14;
pub mod features;
pub mod fields;
pub mod flow_removed;
pub mod group15;
pub mod header;
pub mod instruction;
pub mod message;
pub mod meter;
pub mod mods;
pub mod multipart;
// FLOW_MONITOR's wire format, a multipart type, by its old path.
pub use multipart::monitor;
pub mod oxm;
mod oxm_set;
pub mod packet_io;
pub mod port14;
pub mod port_status;
pub mod stats15;
pub mod table14;
pub mod table_features;

use thiserror::Error;

pub use header::{Header, HeaderRepr};
pub use message::Message;

/// OpenFlow 1.3's version number.
pub const OFP_VERSION: u8 = 0x04;
/// OpenFlow 1.4 and 1.5 (`versions.rs` says what each changes).
pub const OFP14_VERSION: u8 = 0x05;
pub const OFP15_VERSION: u8 = 0x06;
/// Length of `ofp_header`.
pub const HEADER_LEN: usize = 8;
/// Nicira's experimenter id (actions, errors).
pub const NX_VENDOR_ID: u32 = 0x0000_2320;
/// Nicira's SET_PACKET_IN_FORMAT message subtype.
pub const NXT_SET_PACKET_IN_FORMAT: u32 = 16;
/// Nicira's TLV table (Geneve option to `tun_metadata` field) request
/// and reply (`ovs-ofctl dump-tlv-map`).
pub const NXT_TLV_TABLE_REQUEST: u32 = 25;
pub const NXT_TLV_TABLE_REPLY: u32 = 26;
/// The ONF experimenter id (bundles in OpenFlow 1.3).
pub const ONF_VENDOR_ID: u32 = 0x4f4e_4600;
/// `buffer_id` meaning "no buffered packet".
pub const NO_BUFFER: u32 = 0xffff_ffff;

/// OpenFlow 1.3 error types and codes (`ofp_error_type` and the per-type
/// code enums of the specification, section A.4.4).
pub mod err {
    pub const HELLO_FAILED: u16 = 0;
    pub const HFC_INCOMPATIBLE: u16 = 0;

    pub const BAD_REQUEST: u16 = 1;
    pub const BRC_BAD_VERSION: u16 = 0;
    pub const BRC_BAD_TYPE: u16 = 1;
    pub const BRC_BAD_MULTIPART: u16 = 2;
    pub const BRC_BAD_EXPERIMENTER: u16 = 3;
    pub const BRC_BAD_EXP_TYPE: u16 = 4;
    pub const BRC_EPERM: u16 = 5;
    pub const BRC_BAD_LEN: u16 = 6;
    pub const BRC_BUFFER_UNKNOWN: u16 = 8;
    pub const BRC_BAD_TABLE_ID: u16 = 9;
    pub const BRC_IS_SLAVE: u16 = 10;
    pub const BRC_BAD_PORT: u16 = 11;

    pub const BAD_ACTION: u16 = 2;
    pub const BAC_BAD_TYPE: u16 = 0;
    pub const BAC_BAD_LEN: u16 = 1;
    pub const BAC_BAD_EXPERIMENTER: u16 = 2;
    pub const BAC_BAD_EXP_TYPE: u16 = 3;
    pub const BAC_BAD_ARGUMENT: u16 = 5;
    pub const BAC_BAD_SET_TYPE: u16 = 13;
    pub const BAC_BAD_SET_LEN: u16 = 14;
    pub const BAC_BAD_SET_ARGUMENT: u16 = 15;

    pub const BAD_INSTRUCTION: u16 = 3;
    pub const BIC_UNKNOWN_INST: u16 = 0;
    pub const BIC_UNSUP_INST: u16 = 1;
    pub const BIC_BAD_EXPERIMENTER: u16 = 5;
    pub const BIC_BAD_LEN: u16 = 7;

    pub const BAD_MATCH: u16 = 4;
    pub const BMC_BAD_TYPE: u16 = 0;
    pub const BMC_BAD_LEN: u16 = 1;
    pub const BMC_BAD_WILDCARDS: u16 = 5;
    pub const BMC_BAD_FIELD: u16 = 6;
    pub const BMC_BAD_VALUE: u16 = 7;
    pub const BMC_BAD_MASK: u16 = 8;
    pub const BMC_BAD_PREREQ: u16 = 9;
    pub const BMC_DUP_FIELD: u16 = 10;

    pub const FLOW_MOD_FAILED: u16 = 5;
    pub const FMFC_BAD_TABLE_ID: u16 = 2;
    pub const FMFC_BAD_COMMAND: u16 = 6;

    pub const GROUP_MOD_FAILED: u16 = 6;
    pub const GMFC_BAD_TYPE: u16 = 10;
    pub const GMFC_BAD_COMMAND: u16 = 11;
    pub const GMFC_BAD_BUCKET: u16 = 12;
    pub const GMFC_BAD_WATCH: u16 = 13;

    pub const PORT_MOD_FAILED: u16 = 7;

    pub const SWITCH_CONFIG_FAILED: u16 = 10;

    pub const QUEUE_OP_FAILED: u16 = 9;
    pub const QOFC_BAD_PORT: u16 = 0;
    pub const QOFC_BAD_QUEUE: u16 = 1;

    pub const TABLE_MOD_FAILED: u16 = 8;
    pub const TMFC_BAD_TABLE: u16 = 0;
    pub const TMFC_BAD_CONFIG: u16 = 1;

    pub const METER_MOD_FAILED: u16 = 12;
    pub const MMFC_METER_EXISTS: u16 = 1;
    pub const MMFC_INVALID_METER: u16 = 2;
    pub const MMFC_UNKNOWN_METER: u16 = 3;
    pub const MMFC_BAD_COMMAND: u16 = 4;
    pub const MMFC_BAD_FLAGS: u16 = 5;
    pub const MMFC_BAD_RATE: u16 = 6;
    pub const MMFC_BAD_BAND: u16 = 8;
    pub const MMFC_OUT_OF_METERS: u16 = 10;
    pub const MMFC_OUT_OF_BANDS: u16 = 11;

    pub const ROLE_REQUEST_FAILED: u16 = 11;
    pub const RRFC_STALE: u16 = 0;
    pub const RRFC_UNSUP: u16 = 1;
    pub const RRFC_BAD_ROLE: u16 = 2;

    pub const TABLE_FEATURES_FAILED: u16 = 13;
    pub const TFFC_EPERM: u16 = 5;

    /// OFPET_BAD_PROPERTY (OpenFlow 1.4 on: properties of 1.5 buckets,
    /// 1.4 port and table mods).
    pub const BAD_PROPERTY: u16 = 14;
    pub const BPC_BAD_TYPE: u16 = 0;
    pub const BPC_BAD_LEN: u16 = 1;
    pub const BPC_BAD_VALUE: u16 = 2;
    pub const BPC_BAD_EXP_TYPE: u16 = 6;

    /// OFPET_ASYNC_CONFIG_FAILED (OpenFlow 1.4 on).
    pub const ASYNC_CONFIG_FAILED: u16 = 15;
    /// OFPET_FLOW_MONITOR_FAILED (OpenFlow 1.4 on).
    pub const FLOW_MONITOR_FAILED: u16 = 16;

    /// OF1.3 experimenter error: `exp_type` and an experimenter id follow.
    pub const EXPERIMENTER: u16 = 0xffff;
}

/// A message the switch cannot accept, with the OpenFlow (type, code) it is
/// reported as and a human-readable reason.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WireError {
    #[error("bad request: {1}")]
    BadRequest(u16, String),
    #[error("bad action: {1}")]
    BadAction(u16, String),
    #[error("bad instruction: {1}")]
    BadInstruction(u16, String),
    #[error("bad match: {1}")]
    BadMatch(u16, String),
    #[error("bad flow mod: {1}")]
    FlowMod(u16, String),
    #[error("bad group mod: {1}")]
    GroupMod(u16, String),
    #[error("bad table features request: {1}")]
    TableFeatures(u16, String),
    #[error("bad meter mod: {1}")]
    MeterMod(u16, String),
    #[error("bad table mod: {1}")]
    TableMod(u16, String),
    /// OFPET_FLOW_MONITOR_FAILED (OpenFlow 1.4 on).
    #[error("bad flow monitor request: {1}")]
    FlowMonitor(u16, String),
    /// OFPET_ASYNC_CONFIG_FAILED (OpenFlow 1.4 on).
    #[error("bad async config: {1}")]
    AsyncConfig(u16, String),
    /// A Nicira experimenter error (OpenFlow 1.3's flow monitor errors).
    #[error("bad request (Nicira extension): {1}")]
    Nicira(u16, String),
    /// Only from OpenFlow 1.4 and 1.5 messages, which have properties.
    #[error("bad property: {1}")]
    BadProperty(u16, String),
}

impl WireError {
    /// The OpenFlow 1.3 (type, code) to report.
    pub fn ofp_error(&self) -> (u16, u16) {
        match self {
            WireError::BadRequest(c, _) => (err::BAD_REQUEST, *c),
            WireError::BadAction(c, _) => (err::BAD_ACTION, *c),
            WireError::BadInstruction(c, _) => (err::BAD_INSTRUCTION, *c),
            WireError::BadMatch(c, _) => (err::BAD_MATCH, *c),
            WireError::FlowMod(c, _) => (err::FLOW_MOD_FAILED, *c),
            WireError::GroupMod(c, _) => (err::GROUP_MOD_FAILED, *c),
            WireError::TableFeatures(c, _) => (err::TABLE_FEATURES_FAILED, *c),
            WireError::MeterMod(c, _) => (err::METER_MOD_FAILED, *c),
            WireError::TableMod(c, _) => (err::TABLE_MOD_FAILED, *c),
            WireError::FlowMonitor(c, _) => (err::FLOW_MONITOR_FAILED, *c),
            WireError::AsyncConfig(c, _) => (err::ASYNC_CONFIG_FAILED, *c),
            // Sent as an experimenter error with Nicira's id (`error_for`).
            WireError::Nicira(c, _) => (err::EXPERIMENTER, *c),
            WireError::BadProperty(c, _) => (err::BAD_PROPERTY, *c),
        }
    }
}

/// Which structure a length error belongs to; selects the BAD_LEN code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ctx {
    Request,
    Match,
    Action,
    Instruction,
    GroupMod,
}

impl Ctx {
    pub(crate) fn bad_len(self, detail: String) -> WireError {
        match self {
            Ctx::Request => WireError::BadRequest(err::BRC_BAD_LEN, detail),
            Ctx::Match => WireError::BadMatch(err::BMC_BAD_LEN, detail),
            Ctx::Action => WireError::BadAction(err::BAC_BAD_LEN, detail),
            Ctx::Instruction => WireError::BadInstruction(err::BIC_BAD_LEN, detail),
            Ctx::GroupMod => WireError::GroupMod(err::GMFC_BAD_BUCKET, detail),
        }
    }
}

/// A bounds-checked big-endian cursor. Every read either succeeds or
/// yields the BAD_LEN error of the structure being decoded, so decoders
/// never index out of range.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    ctx: Ctx,
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8], ctx: Ctx, what: &'static str) -> Self {
        Reader {
            buf,
            pos: 0,
            ctx,
            what,
        }
    }

    fn short(&self, want: usize) -> WireError {
        self.ctx.bad_len(format!(
            "{} truncated: need {} bytes at offset {}, have {}",
            self.what,
            want,
            self.pos,
            self.buf.len()
        ))
    }

    /// The next 16-bit value, not consumed.
    pub(crate) fn peek_u16(&self) -> Option<u16> {
        self.buf
            .get(self.pos..self.pos + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let end = self.pos.checked_add(n).filter(|e| *e <= self.buf.len());
        match end {
            Some(end) => {
                let out = &self.buf[self.pos..end];
                self.pos = end;
                Ok(out)
            }
            None => Err(self.short(n)),
        }
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.bytes(N)?);
        Ok(out)
    }

    pub(crate) fn skip(&mut self, n: usize) -> Result<(), WireError> {
        self.bytes(n).map(|_| ())
    }

    pub(crate) fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.array::<1>()?[0])
    }

    pub(crate) fn u16(&mut self) -> Result<u16, WireError> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    pub(crate) fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_be_bytes(self.array()?))
    }

    /// Reads one OpenFlow 1.4+ property (`ofp_prop_header`: type, a
    /// length without the padding to 8 bytes, which must be there) and
    /// returns its type, its length and a reader over its value.
    /// `what` names the property list in errors (OFPBPC_BAD_LEN).
    pub(crate) fn property(
        &mut self,
        what: &'static str,
    ) -> Result<(u16, usize, Reader<'a>), WireError> {
        let bad_len = |detail: String| WireError::BadProperty(err::BPC_BAD_LEN, detail);
        if self.remaining() < 4 {
            return Err(bad_len(format!(
                "{} bytes after the last {what}",
                self.remaining()
            )));
        }
        let ty = self.u16()?;
        let len = usize::from(self.u16()?);
        let padded = len.div_ceil(8) * 8;
        if len < 4 || padded - 4 > self.remaining() {
            return Err(bad_len(format!("{what} {ty} of length {len}")));
        }
        let value = Reader::new(self.bytes(len - 4)?, Ctx::Request, what);
        self.skip(padded - len)?;
        Ok((ty, len, value))
    }

    /// The rest of the buffer.
    pub(crate) fn rest(&mut self) -> &'a [u8] {
        let out = &self.buf[self.pos..];
        self.pos = self.buf.len();
        out
    }
}

/// Big-endian appends to an output buffer.
pub(crate) trait Put {
    fn put_u8(&mut self, v: u8);
    fn put_u16(&mut self, v: u16);
    fn put_u32(&mut self, v: u32);
    fn put_u64(&mut self, v: u64);
    fn put_zeros(&mut self, n: usize);
    /// Pads with zeros to a multiple of 8 bytes counted from `start`.
    fn pad8_from(&mut self, start: usize);
    /// Overwrites a 16-bit length previously reserved at `at`.
    fn patch_u16(&mut self, at: usize, v: u16);
}

impl Put for Vec<u8> {
    fn put_u8(&mut self, v: u8) {
        self.push(v);
    }
    fn put_u16(&mut self, v: u16) {
        self.extend_from_slice(&v.to_be_bytes());
    }
    fn put_u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_be_bytes());
    }
    fn put_u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_be_bytes());
    }
    fn put_zeros(&mut self, n: usize) {
        self.resize(self.len() + n, 0);
    }
    fn pad8_from(&mut self, start: usize) {
        let len = self.len() - start;
        self.put_zeros((8 - len % 8) % 8);
    }
    fn patch_u16(&mut self, at: usize, v: u16) {
        if let Some(dst) = self.get_mut(at..at + 2) {
            dst.copy_from_slice(&v.to_be_bytes());
        }
    }
}

/// The length of a structure emitted from `start` to the end of `buf`, as
/// the u16 the wire needs. Encoders keep every structure below 64 KiB
/// (callers split multipart replies), so saturation never happens in
/// practice; it only keeps a bug from wrapping silently.
pub(crate) fn len16(buf: &[u8], start: usize) -> u16 {
    u16::try_from(buf.len() - start).unwrap_or(u16::MAX)
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_ct_label;
#[cfg(test)]
mod tests_ipv6;
#[cfg(test)]
mod tests_mpls;

/// Durations as OVS reports them: whole milliseconds, so `dump-flows`
/// prints `duration=1.234s` as it does against ovs-vswitchd.
pub(crate) fn millisecond_duration(d: std::time::Duration) -> std::time::Duration {
    std::time::Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
#[cfg(test)]
mod tests_fields;
