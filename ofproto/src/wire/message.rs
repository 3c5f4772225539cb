//! Whole OpenFlow messages: `ofp_header` plus a decoded body.

use super::features::TableMod;
use super::flow_removed::FlowRemoved;
use super::header::msg_type as t;
use super::mods::{emit_flow_mod, emit_group_mod, parse_flow_mod, parse_group_mod, PortMod};
use super::multipart::MultipartRequest;
use super::packet_io::{PacketIn, PacketOut};
use super::port_status::PortStatus;
use super::{err, Ctx, HeaderRepr, Put, Reader, WireError, HEADER_LEN, OFP_VERSION};
use flowtable::MeterMod;
use flowtable::{FlowMod, GroupMod};

/// OFPHET_VERSIONBITMAP.
const HELLO_ELEM_VERSIONBITMAP: u16 = 1;

/// How many bytes of a bundled message xbr keeps for the error a failed
/// commit reports (the spec's minimum; a refused request is otherwise
/// echoed whole, see [`error_data`]).
pub const ERROR_DATA_LEN: usize = 64;

/// What an OFPT_ERROR echoes of the offending message: all of it, as
/// OVS does, as far as fits one message (the spec asks for at least 64
/// bytes).
pub fn error_data(offending: &[u8]) -> Vec<u8> {
    // Header, type and code, and an experimenter error's id.
    const ROOM: usize = u16::MAX as usize - HEADER_LEN - 8;
    offending[..offending.len().min(ROOM)].to_vec()
}

/// OFPT_GET_CONFIG_REPLY / OFPT_SET_CONFIG body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SwitchConfig {
    /// OFPC_FRAG_* (0 normal, 1 drop, 2 reassemble, 3 = OVS nx-match).
    pub flags: u16,
    pub miss_send_len: u16,
}

/// OFPT_FEATURES_REPLY body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Features {
    pub datapath_id: u64,
    pub n_buffers: u32,
    pub n_tables: u8,
    pub capabilities: u32,
}

/// OFPT_ROLE_REQUEST / OFPT_ROLE_REPLY body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoleMsg {
    /// OFPCR_ROLE_* (see [`role`]).
    pub role: u32,
    pub generation_id: u64,
}

/// OFPCR_ROLE_* controller roles.
pub mod role {
    pub const NOCHANGE: u32 = 0;
    pub const EQUAL: u32 = 1;
    pub const MASTER: u32 = 2;
    pub const SLAVE: u32 = 3;
}

/// OFPT_GET_ASYNC_REPLY / OFPT_SET_ASYNC body: which asynchronous messages
/// a connection wants, per reason bit; index 0 applies while the
/// connection is MASTER or EQUAL, index 1 while it is SLAVE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AsyncConfig {
    pub packet_in_mask: [u32; 2],
    pub port_status_mask: [u32; 2],
    pub flow_removed_mask: [u32; 2],
}

impl AsyncConfig {
    /// Nothing asynchronous at all.
    pub const NONE: AsyncConfig = AsyncConfig {
        packet_in_mask: [0, 0],
        port_status_mask: [0, 0],
        flow_removed_mask: [0, 0],
    };
}

impl Default for AsyncConfig {
    /// The specification's defaults (OF1.3 §7.3.10): packet-ins for table
    /// misses and `controller` actions, every port status and every flow
    /// removal to masters and equals; slaves only get port status.
    fn default() -> Self {
        AsyncConfig {
            packet_in_mask: [0b11, 0],
            port_status_mask: [0b111, 0b111],
            flow_removed_mask: [0b1111, 0],
        }
    }
}

/// OFPC_* capability bits.
pub mod capabilities {
    pub const FLOW_STATS: u32 = 1 << 0;
    pub const TABLE_STATS: u32 = 1 << 1;
    pub const PORT_STATS: u32 = 1 << 2;
    pub const GROUP_STATS: u32 = 1 << 3;
}

/// A decoded message. Multipart replies are built by
/// [`super::multipart::pack_replies`] instead, since one reply may span
/// several messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// `bitmap` is the peer's version bitmap, if it sent one.
    Hello {
        bitmap: Option<u32>,
    },
    Error {
        ty: u16,
        code: u16,
        data: Vec<u8>,
    },
    /// OF1.3 experimenter error (type 0xffff).
    ExperimenterError {
        exp_type: u16,
        experimenter: u32,
        data: Vec<u8>,
    },
    EchoRequest(Vec<u8>),
    EchoReply(Vec<u8>),
    Experimenter {
        experimenter: u32,
        exp_type: u32,
        data: Vec<u8>,
    },
    FeaturesRequest,
    FeaturesReply(Features),
    GetConfigRequest,
    GetConfigReply(SwitchConfig),
    SetConfig(SwitchConfig),
    FlowMod(FlowMod),
    GroupMod(GroupMod),
    PortMod(PortMod),
    MultipartRequest(MultipartRequest),
    BarrierRequest,
    BarrierReply,
    RoleRequest(RoleMsg),
    RoleReply(RoleMsg),
    GetAsyncRequest,
    GetAsyncReply(AsyncConfig),
    SetAsync(AsyncConfig),
    TableMod(TableMod),
    MeterMod(MeterMod),
    /// The port whose queues are asked for.
    QueueGetConfigRequest(u32),
    /// The port whose queues are listed (always none).
    QueueGetConfigReply(u32),
    FlowRemoved(FlowRemoved),
    PacketIn(PacketIn),
    PacketOut(PacketOut),
    PortStatus(PortStatus),
}

fn expect_empty(r: &Reader<'_>, what: &str) -> Result<(), WireError> {
    if r.is_empty() {
        Ok(())
    } else {
        Err(Ctx::Request.bad_len(format!(
            "{what} has {} unexpected body bytes",
            r.remaining()
        )))
    }
}

fn parse_config(r: &mut Reader<'_>) -> Result<SwitchConfig, WireError> {
    let c = SwitchConfig {
        flags: r.u16()?,
        miss_send_len: r.u16()?,
    };
    expect_empty(r, "switch config")?;
    Ok(c)
}

fn parse_role(r: &mut Reader<'_>) -> Result<RoleMsg, WireError> {
    let role = r.u32()?;
    r.skip(4)?;
    let generation_id = r.u64()?;
    expect_empty(r, "role message")?;
    Ok(RoleMsg {
        role,
        generation_id,
    })
}

fn parse_async(r: &mut Reader<'_>) -> Result<AsyncConfig, WireError> {
    let mut words = [0u32; 6];
    for w in &mut words {
        *w = r.u32()?;
    }
    expect_empty(r, "async config")?;
    let [a, b, c, d, e, f] = words;
    Ok(AsyncConfig {
        packet_in_mask: [a, b],
        port_status_mask: [c, d],
        flow_removed_mask: [e, f],
    })
}

/// The version bitmap of a HELLO body, if present. Unknown elements are
/// skipped, as the specification requires.
fn parse_hello(body: &[u8]) -> Result<Option<u32>, WireError> {
    let mut r = Reader::new(body, Ctx::Request, "hello");
    while r.remaining() >= 4 {
        let ty = r.u16()?;
        let len = usize::from(r.u16()?);
        if len < 4 {
            return Err(Ctx::Request.bad_len(format!("hello element length {len}")));
        }
        let data = r.bytes(len - 4)?;
        r.skip(((8 - len % 8) % 8).min(r.remaining()))?;
        if ty == HELLO_ELEM_VERSIONBITMAP {
            // Only the first 32 versions matter to us.
            return Ok(data
                .get(..4)
                .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]])));
        }
    }
    Ok(None)
}

/// Whether a peer's HELLO lets both sides speak OpenFlow 1.3.
pub fn hello_accepts_v4(version: u8, bitmap: Option<u32>) -> bool {
    match bitmap {
        Some(b) => b & (1 << OFP_VERSION) != 0,
        None => version >= OFP_VERSION,
    }
}

impl Message {
    /// Decodes a message body. The caller has checked the framing; the
    /// version is checked by the connection (HELLO may carry any).
    pub fn parse(h: &HeaderRepr, body: &[u8]) -> Result<Message, WireError> {
        let mut r = Reader::new(body, Ctx::Request, "message");
        let m = match h.msg_type {
            t::HELLO => Message::Hello {
                bitmap: parse_hello(body)?,
            },
            t::ERROR => {
                let ty = r.u16()?;
                let code = r.u16()?;
                if ty == err::EXPERIMENTER {
                    let experimenter = r.u32()?;
                    Message::ExperimenterError {
                        exp_type: code,
                        experimenter,
                        data: r.rest().to_vec(),
                    }
                } else {
                    Message::Error {
                        ty,
                        code,
                        data: r.rest().to_vec(),
                    }
                }
            }
            t::ECHO_REQUEST => Message::EchoRequest(body.to_vec()),
            t::ECHO_REPLY => Message::EchoReply(body.to_vec()),
            t::EXPERIMENTER => Message::Experimenter {
                experimenter: r.u32()?,
                exp_type: r.u32()?,
                data: r.rest().to_vec(),
            },
            t::FEATURES_REQUEST => {
                expect_empty(&r, "features request")?;
                Message::FeaturesRequest
            }
            t::FEATURES_REPLY => {
                let datapath_id = r.u64()?;
                let n_buffers = r.u32()?;
                let n_tables = r.u8()?;
                r.skip(3)?;
                let capabilities = r.u32()?;
                r.skip(4)?;
                Message::FeaturesReply(Features {
                    datapath_id,
                    n_buffers,
                    n_tables,
                    capabilities,
                })
            }
            t::GET_CONFIG_REQUEST => {
                expect_empty(&r, "get config request")?;
                Message::GetConfigRequest
            }
            t::GET_CONFIG_REPLY => Message::GetConfigReply(parse_config(&mut r)?),
            t::SET_CONFIG => Message::SetConfig(parse_config(&mut r)?),
            t::FLOW_MOD => Message::FlowMod(parse_flow_mod(body)?),
            t::GROUP_MOD => Message::GroupMod(parse_group_mod(body)?),
            t::PORT_MOD => Message::PortMod(PortMod::parse(body)?),
            t::MULTIPART_REQUEST => Message::MultipartRequest(MultipartRequest::parse(body)?),
            t::BARRIER_REQUEST => {
                expect_empty(&r, "barrier request")?;
                Message::BarrierRequest
            }
            t::BARRIER_REPLY => Message::BarrierReply,
            t::ROLE_REQUEST => Message::RoleRequest(parse_role(&mut r)?),
            t::ROLE_REPLY => Message::RoleReply(parse_role(&mut r)?),
            t::GET_ASYNC_REQUEST => {
                expect_empty(&r, "get async request")?;
                Message::GetAsyncRequest
            }
            t::GET_ASYNC_REPLY => Message::GetAsyncReply(parse_async(&mut r)?),
            t::SET_ASYNC => Message::SetAsync(parse_async(&mut r)?),
            t::TABLE_MOD => Message::TableMod(TableMod::parse(body)?),
            t::FLOW_REMOVED => Message::FlowRemoved(FlowRemoved::parse(body)?),
            t::PACKET_IN => Message::PacketIn(PacketIn::parse(body)?),
            t::PACKET_OUT => Message::PacketOut(PacketOut::parse(body)?),
            t::PORT_STATUS => Message::PortStatus(PortStatus::parse(body)?),
            t::METER_MOD => Message::MeterMod(super::meter::parse_meter_mod(body)?),
            t::QUEUE_GET_CONFIG_REQUEST | t::QUEUE_GET_CONFIG_REPLY => {
                let port = r.u32()?;
                r.skip(4)?;
                if h.msg_type == t::QUEUE_GET_CONFIG_REQUEST {
                    expect_empty(&r, "queue get config request")?;
                    Message::QueueGetConfigRequest(port)
                } else {
                    Message::QueueGetConfigReply(port)
                }
            }
            other => {
                return Err(WireError::BadRequest(
                    err::BRC_BAD_TYPE,
                    format!("message type {other} is not supported"),
                ))
            }
        };
        Ok(m)
    }

    fn msg_type(&self) -> u8 {
        match self {
            Message::Hello { .. } => t::HELLO,
            Message::Error { .. } | Message::ExperimenterError { .. } => t::ERROR,
            Message::EchoRequest(_) => t::ECHO_REQUEST,
            Message::EchoReply(_) => t::ECHO_REPLY,
            Message::Experimenter { .. } => t::EXPERIMENTER,
            Message::FeaturesRequest => t::FEATURES_REQUEST,
            Message::FeaturesReply(_) => t::FEATURES_REPLY,
            Message::GetConfigRequest => t::GET_CONFIG_REQUEST,
            Message::GetConfigReply(_) => t::GET_CONFIG_REPLY,
            Message::SetConfig(_) => t::SET_CONFIG,
            Message::FlowMod(_) => t::FLOW_MOD,
            Message::GroupMod(_) => t::GROUP_MOD,
            Message::PortMod(_) => t::PORT_MOD,
            Message::MultipartRequest(_) => t::MULTIPART_REQUEST,
            Message::BarrierRequest => t::BARRIER_REQUEST,
            Message::BarrierReply => t::BARRIER_REPLY,
            Message::RoleRequest(_) => t::ROLE_REQUEST,
            Message::RoleReply(_) => t::ROLE_REPLY,
            Message::GetAsyncRequest => t::GET_ASYNC_REQUEST,
            Message::GetAsyncReply(_) => t::GET_ASYNC_REPLY,
            Message::SetAsync(_) => t::SET_ASYNC,
            Message::TableMod(_) => t::TABLE_MOD,
            Message::FlowRemoved(_) => t::FLOW_REMOVED,
            Message::PacketIn(_) => t::PACKET_IN,
            Message::PacketOut(_) => t::PACKET_OUT,
            Message::PortStatus(_) => t::PORT_STATUS,
            Message::MeterMod(_) => t::METER_MOD,
            Message::QueueGetConfigRequest(_) => t::QUEUE_GET_CONFIG_REQUEST,
            Message::QueueGetConfigReply(_) => t::QUEUE_GET_CONFIG_REPLY,
        }
    }

    /// Encodes the whole message (header included) with transaction id `xid`.
    pub fn emit(&self, xid: u32) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        HeaderRepr {
            version: OFP_VERSION,
            msg_type: self.msg_type(),
            length: 0,
            xid,
        }
        .emit(&mut out);
        match self {
            Message::Hello { bitmap } => {
                if let Some(b) = bitmap {
                    out.put_u16(HELLO_ELEM_VERSIONBITMAP);
                    out.put_u16(8);
                    out.put_u32(*b);
                }
            }
            Message::Error { ty, code, data } => {
                out.put_u16(*ty);
                out.put_u16(*code);
                out.extend_from_slice(data);
            }
            Message::ExperimenterError {
                exp_type,
                experimenter,
                data,
            } => {
                out.put_u16(err::EXPERIMENTER);
                out.put_u16(*exp_type);
                out.put_u32(*experimenter);
                out.extend_from_slice(data);
            }
            Message::EchoRequest(d) | Message::EchoReply(d) => out.extend_from_slice(d),
            Message::Experimenter {
                experimenter,
                exp_type,
                data,
            } => {
                out.put_u32(*experimenter);
                out.put_u32(*exp_type);
                out.extend_from_slice(data);
            }
            Message::FeaturesReply(f) => {
                out.put_u64(f.datapath_id);
                out.put_u32(f.n_buffers);
                out.put_u8(f.n_tables);
                out.put_zeros(3);
                out.put_u32(f.capabilities);
                out.put_u32(0);
            }
            Message::GetConfigReply(c) | Message::SetConfig(c) => {
                out.put_u16(c.flags);
                out.put_u16(c.miss_send_len);
            }
            Message::FlowMod(fm) => emit_flow_mod(fm, &mut out),
            Message::GroupMod(gm) => emit_group_mod(gm, &mut out),
            Message::PortMod(pm) => pm.emit(&mut out),
            Message::MultipartRequest(m) => m.emit(&mut out),
            Message::RoleRequest(m) | Message::RoleReply(m) => {
                out.put_u32(m.role);
                out.put_zeros(4);
                out.put_u64(m.generation_id);
            }
            Message::GetAsyncReply(c) | Message::SetAsync(c) => {
                for m in c
                    .packet_in_mask
                    .iter()
                    .chain(&c.port_status_mask)
                    .chain(&c.flow_removed_mask)
                {
                    out.put_u32(*m);
                }
            }
            Message::TableMod(m) => m.emit(&mut out),
            Message::FlowRemoved(m) => m.emit(&mut out),
            Message::PacketIn(m) => m.emit(&mut out),
            Message::PacketOut(m) => m.emit(&mut out),
            Message::PortStatus(m) => m.emit(&mut out),
            Message::MeterMod(m) => super::meter::emit_meter_mod(m, &mut out),
            Message::QueueGetConfigRequest(port) => {
                out.put_u32(*port);
                out.put_zeros(4);
            }
            Message::QueueGetConfigReply(port) => {
                out.extend_from_slice(&super::features::queue_config_reply_body(*port))
            }
            Message::FeaturesRequest
            | Message::GetConfigRequest
            | Message::BarrierRequest
            | Message::BarrierReply
            | Message::GetAsyncRequest => {}
        }
        let len = super::len16(&out, 0);
        out.patch_u16(2, len);
        out
    }

    /// The OFPT_ERROR reporting `e` for the message `offending` (whose
    /// first bytes it carries).
    pub fn error_for(e: &WireError, offending: &[u8]) -> Message {
        let data = error_data(offending);
        if let WireError::Nicira(code, _) = e {
            return Message::ExperimenterError {
                exp_type: *code,
                experimenter: super::NX_VENDOR_ID,
                data,
            };
        }
        let (ty, code) = e.ofp_error();
        Message::Error { ty, code, data }
    }
}

/// Splits a complete message into its header and body, checking that the
/// length field matches the buffer.
pub fn split(msg: &[u8]) -> Result<(HeaderRepr, &[u8]), WireError> {
    let h = HeaderRepr::parse(&super::Header::new_checked(msg)?);
    if usize::from(h.length) != msg.len() || msg.len() < HEADER_LEN {
        return Err(Ctx::Request.bad_len(format!(
            "header length {} but {} bytes",
            h.length,
            msg.len()
        )));
    }
    Ok((h, &msg[HEADER_LEN..]))
}
