//! ONF bundles for OpenFlow 1.3 (experimenter 0x4F4E4600, types 2300
//! BUNDLE_CONTROL and 2301 BUNDLE_ADD_MESSAGE): the agent's only write path;
//! and the same bundles as OpenFlow 1.4/1.5 define them (OFPT_BUNDLE_CONTROL
//! and OFPT_BUNDLE_ADD_MESSAGE, the same bodies under their own message
//! types, errors of type OFPET_BUNDLE_FAILED; see `versions.rs`).
//!
//! # Design
//!
//! Bundles belong to the connection that opened them ([`Bundles`] lives in
//! the connection thread, no locking). ADD decodes the embedded FLOW_MOD or
//! GROUP_MOD at once and queues it with its xid; COMMIT hands the whole
//! queue to `FlowTables::apply_batch`, which applies all of it or nothing.
//! A failed commit reports the failing embedded message's error with that
//! message's xid, then OFPBFC_MSG_FAILED for the COMMIT itself, as OVS does.
//!
//! Bounds (see `limits.rs`): a connection may hold `max_bundles` open
//! bundles (OFPBFC_OUT_OF_BUNDLES past it) and `max_bundle_msgs` messages
//! over all of them (OFPBFC_MSG_TOO_MANY, and the bundle's commit fails);
//! a bundle nobody touched for `bundle_idle_timeout` is discarded with
//! OFPBFC_TIMEOUT for the message that opened it, as OVS's connmgr does
//! ([`Bundles::expire`], called by the connection each second, busy or
//! idle).

use crate::bridge::Bridge;
use crate::limits::{ControlLimits, LimitStats};
use crate::versions::{OFPET_BUNDLE_FAILED, OFPT_BUNDLE_CONTROL};
use crate::wire::header::msg_type;
use crate::wire::message::{split, ERROR_DATA_LEN};
use crate::wire::{err, HeaderRepr, Message, Put, WireError, OFP_VERSION, ONF_VENDOR_ID};
use flowtable::PipelineMod;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const ONFT_BUNDLE_CONTROL: u32 = 2300;
pub const ONFT_BUNDLE_ADD_MESSAGE: u32 = 2301;

/// ONF bundle control types.
pub mod ctrl {
    pub const OPEN_REQUEST: u16 = 0;
    pub const OPEN_REPLY: u16 = 1;
    pub const CLOSE_REQUEST: u16 = 2;
    pub const CLOSE_REPLY: u16 = 3;
    pub const COMMIT_REQUEST: u16 = 4;
    pub const COMMIT_REPLY: u16 = 5;
    pub const DISCARD_REQUEST: u16 = 6;
    pub const DISCARD_REPLY: u16 = 7;
}

/// OFPBFC_* codes, as ONF experimenter error types in OpenFlow 1.3.
pub mod bfc {
    pub const UNKNOWN: u16 = 2300;
    pub const BAD_ID: u16 = 2302;
    pub const BUNDLE_EXIST: u16 = 2303;
    pub const BUNDLE_CLOSED: u16 = 2304;
    pub const OUT_OF_BUNDLES: u16 = 2305;
    pub const BAD_TYPE: u16 = 2306;
    pub const BAD_FLAGS: u16 = 2307;
    pub const MSG_BAD_LEN: u16 = 2308;
    pub const MSG_UNSUP: u16 = 2310;
    pub const MSG_TOO_MANY: u16 = 2312;
    pub const MSG_FAILED: u16 = 2313;
    pub const TIMEOUT: u16 = 2314;
}

struct Bundle {
    /// Last opened or added to (for the idle expiry).
    used: Instant,
    /// How it was opened: the framing, xid and first bytes of the message
    /// that opened it (what OFPBFC_TIMEOUT refers to).
    framing: Framing,
    opened_by: (u32, Vec<u8>),
    flags: u16,
    closed: bool,
    /// A message failed to decode or was refused: the commit must fail.
    failed: bool,
    /// The message limit was logged for this bundle (once is enough).
    warned: bool,
    /// (embedded xid, first bytes of the embedded message, decoded mod)
    msgs: Vec<(u32, Vec<u8>, PipelineMod)>,
}

/// Where a connection's bundles are committed: its bridge, and the
/// connection's flow-monitor id (for its own monitors to abbreviate the
/// commit, see `monitor.rs`; none before HELLO).
#[derive(Clone, Copy)]
pub(crate) struct CommitTo<'a> {
    pub bridge: &'a Bridge,
    pub conn: Option<u64>,
}

/// The open bundles of one connection.
pub(crate) struct Bundles {
    open: HashMap<u32, Bundle>,
    /// Messages held by all of `open`.
    n_msgs: usize,
    max_bundles: usize,
    max_msgs: usize,
    idle_timeout: Duration,
    stats: Arc<LimitStats>,
}

/// How a connection's bundle messages are framed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Framing {
    /// The ONF extension in OpenFlow 1.3.
    Onf,
    /// The standard messages of OpenFlow 1.4 and 1.5 (the version).
    Standard(u8),
}

impl Framing {
    /// The version embedded messages must carry.
    fn version(self) -> u8 {
        match self {
            Framing::Onf => OFP_VERSION,
            Framing::Standard(v) => v,
        }
    }

    /// A bundle error (`code` in the ONF numbering). Encoded as OpenFlow
    /// 1.3; the connection relabels what it sends with its version.
    fn error(self, code: u16, xid: u32, offending: &[u8]) -> Vec<u8> {
        let data = crate::wire::message::error_data(offending);
        match self {
            Framing::Onf => Message::ExperimenterError {
                exp_type: code,
                experimenter: ONF_VENDOR_ID,
                data,
            }
            .emit(xid),
            Framing::Standard(_) => Message::Error {
                ty: OFPET_BUNDLE_FAILED,
                code: code - bfc::UNKNOWN,
                data,
            }
            .emit(xid),
        }
    }

    fn control_reply(self, xid: u32, bundle_id: u32, ty: u16, flags: u16) -> Vec<u8> {
        let mut data = Vec::with_capacity(8);
        data.put_u32(bundle_id);
        data.put_u16(ty);
        data.put_u16(flags);
        match self {
            Framing::Onf => Message::Experimenter {
                experimenter: ONF_VENDOR_ID,
                exp_type: ONFT_BUNDLE_CONTROL,
                data,
            }
            .emit(xid),
            Framing::Standard(v) => {
                let mut out = Vec::with_capacity(16);
                HeaderRepr {
                    version: v,
                    msg_type: OFPT_BUNDLE_CONTROL,
                    length: 16,
                    xid,
                }
                .emit(&mut out);
                out.extend_from_slice(&data);
                out
            }
        }
    }
}

fn be_u32(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at + 4)
        .map(|s| u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

fn be_u16(b: &[u8], at: usize) -> Option<u16> {
    b.get(at..at + 2).map(|s| u16::from_be_bytes([s[0], s[1]]))
}

impl Bundles {
    pub(crate) fn new(limits: &ControlLimits, stats: Arc<LimitStats>) -> Self {
        Bundles {
            open: HashMap::new(),
            n_msgs: 0,
            max_bundles: limits.max_bundles,
            max_msgs: limits.max_bundle_msgs,
            idle_timeout: limits.bundle_idle_timeout,
            stats,
        }
    }

    /// A new bundle, opened by message `xid` (`raw`), or the error
    /// refusing it when the connection has as many as it may.
    fn admit(&mut self, xid: u32, raw: &[u8], framing: Framing) -> Result<Bundle, Vec<u8>> {
        if self.open.len() >= self.max_bundles {
            LimitStats::hit(&self.stats.bundles_refused);
            tracing::warn!(
                max_bundles = self.max_bundles,
                "bundle refused: the connection has too many open (OFPBFC_OUT_OF_BUNDLES)"
            );
            return Err(framing.error(bfc::OUT_OF_BUNDLES, xid, raw));
        }
        let keep = raw[..raw.len().min(ERROR_DATA_LEN)].to_vec();
        Ok(Bundle {
            used: Instant::now(),
            framing,
            opened_by: (xid, keep),
            flags: 0,
            closed: false,
            failed: false,
            warned: false,
            msgs: Vec::new(),
        })
    }

    /// Takes bundle `id` out, with its messages out of the count.
    fn take(&mut self, id: u32) -> Option<Bundle> {
        let b = self.open.remove(&id)?;
        self.n_msgs = self.n_msgs.saturating_sub(b.msgs.len());
        Some(b)
    }

    /// Discards the bundles idle for the idle timeout at `now`; the
    /// OFPBFC_TIMEOUT errors to send.
    pub(crate) fn expire(&mut self, now: Instant) -> Vec<Vec<u8>> {
        let idle = self.idle_timeout;
        let stale: Vec<u32> = self
            .open
            .iter()
            .filter(|(_, b)| now.saturating_duration_since(b.used) >= idle)
            .map(|(id, _)| *id)
            .collect();
        let mut out = Vec::new();
        for id in stale {
            if let Some(b) = self.take(id) {
                LimitStats::hit(&self.stats.bundles_expired);
                tracing::warn!(bundle = id, ?idle, "idle bundle discarded (OFPBFC_TIMEOUT)");
                let (xid, raw) = &b.opened_by;
                out.push(b.framing.error(bfc::TIMEOUT, *xid, raw));
            }
        }
        out
    }

    /// Handles one ONF experimenter message (`data` follows exp_type) of
    /// a connection; returns the messages to send, in order.
    pub(crate) fn handle(
        &mut self,
        to: CommitTo,
        xid: u32,
        exp_type: u32,
        data: &[u8],
        raw: &[u8],
    ) -> Vec<Vec<u8>> {
        match exp_type {
            ONFT_BUNDLE_CONTROL => self.control(to, xid, data, raw, Framing::Onf),
            ONFT_BUNDLE_ADD_MESSAGE => self.add(xid, data, raw, Framing::Onf),
            _ => {
                let e =
                    WireError::BadRequest(err::BRC_BAD_EXP_TYPE, format!("ONF type {exp_type}"));
                vec![Message::error_for(&e, raw).emit(xid)]
            }
        }
    }

    /// Handles one OpenFlow 1.4/1.5 bundle message (`body` follows the
    /// header) on a connection speaking `version`.
    pub(crate) fn handle_standard(
        &mut self,
        to: CommitTo,
        xid: u32,
        control: bool,
        body: &[u8],
        raw: &[u8],
        version: u8,
    ) -> Vec<Vec<u8>> {
        let framing = Framing::Standard(version);
        if control {
            self.control(to, xid, body, raw, framing)
        } else {
            self.add(xid, body, raw, framing)
        }
    }

    fn control(
        &mut self,
        to: CommitTo,
        xid: u32,
        data: &[u8],
        raw: &[u8],
        framing: Framing,
    ) -> Vec<Vec<u8>> {
        let (Some(id), Some(ty), Some(flags)) = (be_u32(data, 0), be_u16(data, 4), be_u16(data, 6))
        else {
            let e = WireError::BadRequest(err::BRC_BAD_LEN, "bundle control too short".into());
            return vec![Message::error_for(&e, raw).emit(xid)];
        };
        match ty {
            ctrl::OPEN_REQUEST => {
                if self.open.contains_key(&id) {
                    return vec![framing.error(bfc::BUNDLE_EXIST, xid, raw)];
                }
                match self.admit(xid, raw, framing) {
                    Ok(b) => self.open.insert(id, Bundle { flags, ..b }),
                    Err(e) => return vec![e],
                };
                vec![framing.control_reply(xid, id, ctrl::OPEN_REPLY, flags)]
            }
            ctrl::CLOSE_REQUEST => match self.open.get_mut(&id) {
                None => vec![framing.error(bfc::BAD_ID, xid, raw)],
                Some(b) if b.closed => vec![framing.error(bfc::BUNDLE_CLOSED, xid, raw)],
                Some(b) => {
                    b.closed = true;
                    b.used = Instant::now();
                    vec![framing.control_reply(xid, id, ctrl::CLOSE_REPLY, flags)]
                }
            },
            ctrl::DISCARD_REQUEST => match self.take(id) {
                None => vec![framing.error(bfc::BAD_ID, xid, raw)],
                Some(_) => vec![framing.control_reply(xid, id, ctrl::DISCARD_REPLY, flags)],
            },
            ctrl::COMMIT_REQUEST => {
                let Some(b) = self.take(id) else {
                    return vec![framing.error(bfc::BAD_ID, xid, raw)];
                };
                if b.flags != flags {
                    return vec![framing.error(bfc::BAD_FLAGS, xid, raw)];
                }
                if b.failed {
                    return vec![framing.error(bfc::MSG_FAILED, xid, raw)];
                }
                let (xids, mods): (Vec<(u32, Vec<u8>)>, Vec<PipelineMod>) = b
                    .msgs
                    .into_iter()
                    .map(|(x, bytes, m)| ((x, bytes), m))
                    .unzip();
                let xid_of = |i: usize| xids.get(i).map_or(0, |(x, _)| *x);
                let origin = to.conn.map(|c| (c, &xid_of as &dyn Fn(usize) -> u32));
                match to.bridge.apply_batch(&mods, origin) {
                    Ok(()) => {
                        // The reply says the bundle is in force: wait for
                        // the packet threads (and the XDP cache's
                        // invalidation) as a barrier would. ovs-ofctl's
                        // own barrier goes before the commit, and the
                        // agent acts on the reply.
                        to.bridge.barrier();
                        vec![framing.control_reply(xid, id, ctrl::COMMIT_REPLY, flags)]
                    }
                    Err((i, e)) => {
                        let mut out = Vec::new();
                        if let Some((mxid, bytes)) = xids.get(i) {
                            let (ty, code) = e.ofp_error();
                            out.push(
                                Message::Error {
                                    ty,
                                    code,
                                    data: bytes.clone(),
                                }
                                .emit(*mxid),
                            );
                        }
                        out.push(framing.error(bfc::MSG_FAILED, xid, raw));
                        out
                    }
                }
            }
            _ => vec![framing.error(bfc::BAD_TYPE, xid, raw)],
        }
    }

    fn add(&mut self, xid: u32, data: &[u8], raw: &[u8], framing: Framing) -> Vec<Vec<u8>> {
        let (Some(id), Some(flags), Some(inner)) =
            (be_u32(data, 0), be_u16(data, 6), data.get(8..))
        else {
            return vec![framing.error(bfc::MSG_BAD_LEN, xid, raw)];
        };
        // The embedded message's own length delimits it; properties may follow.
        let inner_len = be_u16(inner, 2).map(usize::from).unwrap_or(0);
        let Some(inner) = inner.get(..inner_len).filter(|_| inner_len >= 8) else {
            return vec![framing.error(bfc::MSG_BAD_LEN, xid, raw)];
        };
        if !self.open.contains_key(&id) {
            // An ADD opens the bundle it names, as in OVS.
            match self.admit(xid, raw, framing) {
                Ok(b) => self.open.insert(id, Bundle { flags, ..b }),
                Err(e) => return vec![e],
            };
        }
        let at_limit = self.n_msgs >= self.max_msgs;
        let Some(bundle) = self.open.get_mut(&id) else {
            return vec![framing.error(bfc::BAD_ID, xid, raw)];
        };
        bundle.used = Instant::now();
        if bundle.closed {
            return vec![framing.error(bfc::BUNDLE_CLOSED, xid, raw)];
        }
        if bundle.flags != flags {
            return vec![framing.error(bfc::BAD_FLAGS, xid, raw)];
        }
        if at_limit {
            bundle.failed = true;
            LimitStats::hit(&self.stats.bundle_msgs_refused);
            if !std::mem::replace(&mut bundle.warned, true) {
                tracing::warn!(
                    bundle = id,
                    max = self.max_msgs,
                    "bundle message refused: the connection's bundles are full (OFPBFC_MSG_TOO_MANY)"
                );
            }
            return vec![framing.error(bfc::MSG_TOO_MANY, xid, raw)];
        }
        let decoded = split(inner).and_then(|(mut h, body)| {
            if h.version != framing.version() {
                return Err(WireError::BadRequest(
                    err::BRC_BAD_VERSION,
                    "embedded message version".into(),
                ));
            }
            // FLOW_MOD and GROUP_MOD of OpenFlow 1.4 are 1.3's (see
            // versions.rs); 1.5's have their own decoders.
            if framing == Framing::Standard(crate::versions::OFP15_VERSION) {
                match h.msg_type {
                    msg_type::GROUP_MOD => {
                        let gm = crate::wire::group15::parse_group_mod(body)?;
                        return Ok((h.xid, Message::GroupMod(gm)));
                    }
                    msg_type::FLOW_MOD => {
                        if let crate::versions::Route::Refuse(e) =
                            crate::versions::route(h.version, h.msg_type, body)
                        {
                            return Err(e);
                        }
                        let dialect = crate::wire::action::Dialect::Of15;
                        let fm = crate::wire::mods::parse_flow_mod_in(body, dialect)?;
                        return Ok((h.xid, Message::FlowMod(fm)));
                    }
                    _ => {}
                }
            }
            if matches!(framing, Framing::Standard(_)) && h.msg_type == msg_type::FLOW_MOD {
                if let crate::versions::Route::Refuse(e) =
                    crate::versions::route(h.version, h.msg_type, body)
                {
                    return Err(e);
                }
            }
            h.version = OFP_VERSION;
            match h.msg_type {
                msg_type::FLOW_MOD | msg_type::GROUP_MOD | msg_type::METER_MOD => {
                    Ok((h.xid, Message::parse(&h, body)?))
                }
                t => Err(WireError::BadRequest(
                    err::BRC_BAD_TYPE,
                    format!("type {t} cannot be bundled"),
                )),
            }
        });
        let keep = inner[..inner.len().min(ERROR_DATA_LEN)].to_vec();
        let decoded = match decoded {
            Ok((ixid, Message::FlowMod(fm))) => Ok((ixid, PipelineMod::Flow(fm))),
            Ok((ixid, Message::GroupMod(gm))) => Ok((ixid, PipelineMod::Group(gm))),
            Ok((ixid, Message::MeterMod(mm))) => Ok((ixid, PipelineMod::Meter(mm))),
            Ok((ixid, m)) => Err(Ok((ixid, m))),
            Err(e) => Err(Err(e)),
        };
        match decoded {
            Ok((ixid, m)) => {
                bundle.msgs.push((ixid, keep, m));
                self.n_msgs += 1;
            }
            Err(Ok(_)) => {
                bundle.failed = true;
                return vec![framing.error(bfc::MSG_UNSUP, xid, raw)];
            }
            Err(Err(e)) => {
                bundle.failed = true;
                let ixid = be_u32(inner, 4).unwrap_or(xid);
                return vec![Message::error_for(&e, inner).emit(ixid)];
            }
        }
        Vec::new()
    }
}
