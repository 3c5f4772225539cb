//! Flow monitors (`ovs-ofctl monitor br0 watch:`): the requests that set
//! them up or take them down, and the flow updates sent while they last.
//!
//! - OpenFlow 1.3 has them as an ONF extension. A request is an
//!   experimenter multipart (ONF, exp_type 1870) of
//!   `onf_flow_monitor_request`s: id, flags (Nicira numbering), match
//!   length, out_port, table id, three zero bytes, then an OXM match. Its
//!   replies, and the updates that follow with xid 0, carry Nicira-layout
//!   updates (`nx_flow_update_full`: length, event, reason, priority,
//!   idle and hard timeouts, match length, table id, a pad byte, cookie;
//!   then the OXM match and, when asked for, the instructions). A monitor
//!   is cancelled by an experimenter message (ONF, 1870) with its id.
//!   Errors are Nicira experimenter errors.
//! - OpenFlow 1.4 and 1.5: OFPMP_FLOW_MONITOR (16), with
//!   `ofp14_flow_monitor_request`s (id, out_port, out_group, flags, table
//!   id, command ADD/MODIFY/DELETE, then the match) and updates
//!   `ofp_flow_update_full` (length, event, table id, reason, timeouts,
//!   priority, four zero bytes, cookie, match, instructions; 1.5's in its
//!   own action dialect). Errors are OFPET_FLOW_MONITOR_FAILED.
//!
//! Requests are kept in 1.4's terms ([`MonitorRequest`], OFPFMF_* flags),
//! as OVS keeps them.

use crate::wire::action::Dialect;
use crate::wire::instruction::emit_instructions_in;
use crate::wire::oxm::{emit_match, parse_match};
use crate::wire::{Ctx, Put, Reader, WireError, ONF_VENDOR_ID};
use flowtable::{FlowFilter, Rule};

/// The ONF extension's experimenter type for flow monitor requests,
/// replies and cancels.
pub const ONF_FLOW_MONITOR: u32 = 1870;
/// OFPMP_FLOW_MONITOR (OpenFlow 1.4 on).
pub const MP_FLOW_MONITOR: u16 = 16;
/// OFPMP_EXPERIMENTER.
pub const MP_EXPERIMENTER: u16 = 0xffff;

/// OFPFMF_* (OpenFlow 1.4's numbering).
pub mod flags {
    pub const INITIAL: u16 = 1 << 0;
    pub const ADD: u16 = 1 << 1;
    pub const REMOVED: u16 = 1 << 2;
    pub const MODIFY: u16 = 1 << 3;
    pub const INSTRUCTIONS: u16 = 1 << 4;
    pub const ONLY_OWN: u16 = 1 << 6;
    /// What a monitor may ask for (OVS refuses 1.4's NO_ABBREV too).
    pub const VALID: u16 = INITIAL | ADD | REMOVED | MODIFY | INSTRUCTIONS | ONLY_OWN;
    /// At least one of these, or the monitor would report nothing.
    pub const EVENTS: u16 = ADD | REMOVED | MODIFY;
}

/// The Nicira/ONF flag bits, in the order of [`flags`]' first six.
const NX_OWN: u16 = 1 << 5;

/// OFPFMC_*.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    Add,
    Modify,
    Delete,
}

/// OFPFME_* (OpenFlow 1.4's numbering; the Nicira one differs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    Initial,
    Added,
    /// With the OFPRR_* reason.
    Removed(u8),
    Modified,
}

/// Nicira experimenter error codes (OpenFlow 1.3's for flow monitors).
pub mod nx_err {
    pub const MUST_BE_ZERO: u16 = 4;
    pub const MONITOR_EXISTS: u16 = 6;
    pub const BAD_FLAGS: u16 = 7;
    pub const UNKNOWN_MONITOR: u16 = 8;
}

/// OFPMOFC_* (OFPET_FLOW_MONITOR_FAILED, OpenFlow 1.4 on).
pub mod mo_err {
    pub const MONITOR_EXISTS: u16 = 1;
    pub const UNKNOWN_MONITOR: u16 = 3;
    pub const BAD_COMMAND: u16 = 4;
    pub const BAD_FLAGS: u16 = 5;
}

/// One monitor as a request sets it up (or, with `Delete`, names it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MonitorRequest {
    pub id: u32,
    pub command: Command,
    /// OFPFMF_* bits.
    pub flags: u16,
    /// Table, out_port, out_group and match; the cookie is not filtered.
    pub filter: FlowFilter,
}

impl MonitorRequest {
    /// Whether a change of `rule` of this kind (`update`: ADD, REMOVED or
    /// MODIFY) is reported: the flow lies inside the monitor's match and
    /// table and outputs to its port and group (or, for a change of
    /// actions, did before, given as `old`).
    pub fn selects(&self, update: u16, rule: &Rule, old: Option<&Rule>) -> bool {
        self.flags & update != 0 && self.filter.selects_as(rule, old)
    }
}

/// Errors of a request in the encoding of its version: Nicira
/// experimenter errors in 1.3, OFPET_FLOW_MONITOR_FAILED after.
pub fn monitor_error(version: u8, nx: u16, of14: u16, detail: String) -> WireError {
    if version == crate::wire::OFP_VERSION {
        WireError::Nicira(nx, detail)
    } else {
        WireError::FlowMonitor(of14, detail)
    }
}

fn nx_to_flags(nx: u16) -> u16 {
    let low = nx & 0x1f;
    if nx & NX_OWN != 0 {
        low | flags::ONLY_OWN
    } else {
        low
    }
}

fn flags_to_nx(f: u16) -> u16 {
    let low = f & 0x1f;
    if f & flags::ONLY_OWN != 0 {
        low | NX_OWN
    } else {
        low
    }
}

/// Decodes the data of an ONF flow monitor request (after the
/// experimenter multipart header).
pub fn parse_onf13(data: &[u8]) -> Result<Vec<MonitorRequest>, WireError> {
    let mut r = Reader::new(data, Ctx::Request, "ONF flow monitor request");
    let mut out = Vec::new();
    while !r.is_empty() {
        let id = r.u32()?;
        let nx_flags = r.u16()?;
        let _match_len = r.u16()?;
        let out_port = r.u32()?;
        let table_id = r.u8()?;
        let zeros = r.bytes(3)?;
        let flags = nx_to_flags(nx_flags);
        if nx_flags & !(0x1f | NX_OWN) != 0 || flags & flags::EVENTS == 0 {
            return Err(WireError::Nicira(
                nx_err::BAD_FLAGS,
                format!("flow monitor flags {nx_flags:#x}"),
            ));
        }
        if zeros != [0, 0, 0] {
            return Err(WireError::Nicira(
                nx_err::MUST_BE_ZERO,
                "flow monitor request padding".into(),
            ));
        }
        let matching = parse_match(&mut r)?;
        out.push(MonitorRequest {
            id,
            command: Command::Add,
            flags,
            filter: filter(table_id, out_port, flowtable::action::group::ANY, matching),
        });
    }
    Ok(out)
}

/// Decodes the body of an OpenFlow 1.4/1.5 FLOW_MONITOR request (after
/// the multipart header).
pub fn parse_of14(body: &[u8]) -> Result<Vec<MonitorRequest>, WireError> {
    let mut r = Reader::new(body, Ctx::Request, "flow monitor request");
    let mut out = Vec::new();
    while !r.is_empty() {
        let id = r.u32()?;
        let out_port = r.u32()?;
        let out_group = r.u32()?;
        let flags = r.u16()?;
        let table_id = r.u8()?;
        let command = match r.u8()? {
            0 => Command::Add,
            1 => Command::Modify,
            2 => Command::Delete,
            c => {
                return Err(WireError::FlowMonitor(
                    mo_err::BAD_COMMAND,
                    format!("flow monitor command {c}"),
                ))
            }
        };
        let matching = parse_match(&mut r)?;
        if command != Command::Delete && (flags & !flags::VALID != 0 || flags & flags::EVENTS == 0)
        {
            return Err(WireError::FlowMonitor(
                mo_err::BAD_FLAGS,
                format!("flow monitor flags {flags:#x}"),
            ));
        }
        out.push(MonitorRequest {
            id,
            command,
            flags,
            filter: filter(table_id, out_port, out_group, matching),
        });
    }
    Ok(out)
}

fn filter(table_id: u8, out_port: u32, out_group: u32, matching: flowtable::Match) -> FlowFilter {
    FlowFilter {
        table_id,
        out_port,
        out_group,
        cookie: 0,
        cookie_mask: 0,
        matching,
    }
}

/// The monitor id an ONF cancel message names.
pub fn parse_onf13_cancel(data: &[u8]) -> Result<u32, WireError> {
    let mut r = Reader::new(data, Ctx::Request, "ONF flow monitor cancel");
    let id = r.u32()?;
    if !r.is_empty() {
        return Err(Ctx::Request.bad_len("flow monitor cancel longer than 4 bytes".into()));
    }
    Ok(id)
}

/// Encodes requests as ovs-ofctl does (tests and fuzzing): the ONF
/// experimenter data for 1.3, else a 1.4 FLOW_MONITOR body.
pub fn emit_requests(version: u8, reqs: &[MonitorRequest], out: &mut Vec<u8>) {
    for q in reqs {
        let f = &q.filter;
        if version == crate::wire::OFP_VERSION {
            let start = out.len();
            out.put_u32(q.id);
            out.put_u16(flags_to_nx(q.flags));
            out.put_u16(0);
            out.put_u32(f.out_port);
            out.put_u8(f.table_id);
            out.put_zeros(3);
            let match_len = emit_match_len(&f.matching, out);
            out.patch_u16(start + 6, match_len);
        } else {
            out.put_u32(q.id);
            out.put_u32(f.out_port);
            out.put_u32(f.out_group);
            out.put_u16(q.flags);
            out.put_u8(f.table_id);
            out.put_u8(match q.command {
                Command::Add => 0,
                Command::Modify => 1,
                Command::Delete => 2,
            });
            emit_match(&f.matching, out);
        }
    }
}

/// Appends one full flow update of `rule` for a connection speaking
/// `version`; its instructions only if `instructions` (never for a
/// removal in 1.4 on, as OVS sends them).
pub fn append_update(
    version: u8,
    event: Event,
    rule: &Rule,
    instructions: bool,
    out: &mut Vec<u8>,
) {
    let start = out.len();
    let reason = match event {
        Event::Removed(r) => r,
        _ => 0,
    };
    let ip_proto = rule
        .matching
        .exact(flowtable::Field::IpProto)
        .map(|v| v as u8);
    if version == crate::wire::OFP_VERSION {
        // Nicira's numbering: an initial flow is reported as added.
        let nx_event: u16 = match event {
            Event::Initial | Event::Added => 0,
            Event::Removed(_) => 1,
            Event::Modified => 2,
        };
        out.put_u16(0);
        out.put_u16(nx_event);
        out.put_u16(u16::from(reason));
        out.put_u16(rule.priority);
        out.put_u16(rule.idle_timeout);
        out.put_u16(rule.hard_timeout);
        out.put_u16(0);
        out.put_u8(rule.table_id);
        out.put_u8(0);
        out.put_u64(rule.cookie);
        let match_len = emit_match_len(&rule.matching, out);
        out.patch_u16(start + 12, match_len);
        if instructions {
            emit_instructions_in(&rule.instructions, ip_proto, Dialect::Of13, out);
        }
    } else {
        let event: u16 = match event {
            Event::Initial => 0,
            Event::Added => 1,
            Event::Removed(_) => 2,
            Event::Modified => 3,
        };
        out.put_u16(0);
        out.put_u16(event);
        out.put_u8(rule.table_id);
        out.put_u8(reason);
        out.put_u16(rule.idle_timeout);
        out.put_u16(rule.hard_timeout);
        out.put_u16(rule.priority);
        out.put_zeros(4);
        out.put_u64(rule.cookie);
        emit_match(&rule.matching, out);
        if instructions {
            emit_instructions_in(&rule.instructions, ip_proto, Dialect::of(version), out);
        }
    }
    let len = crate::wire::len16(out, start);
    out.patch_u16(start, len);
}

/// Appends the abbreviated update a connection gets for its own change
/// (request `xid`): Nicira's NXFME_ABBREV for 1.3, OFPFME_ABBREV after.
pub fn append_abbrev(version: u8, xid: u32, out: &mut Vec<u8>) {
    let event: u16 = if version == crate::wire::OFP_VERSION {
        3
    } else {
        4
    };
    out.put_u16(8);
    out.put_u16(event);
    out.put_u32(xid);
}

/// The message telling a connection speaking `version` that its flow
/// monitors paused (`paused`) or resumed: in 1.3 ONF's experimenter
/// messages 1871 and 1872, after it a flow monitor reply with one
/// OFPFME_PAUSED or OFPFME_RESUMED update. Labelled 1.3; the caller
/// relabels it.
pub fn pause_message(version: u8, paused: bool) -> Vec<u8> {
    if version == crate::wire::OFP_VERSION {
        let mut body = Vec::with_capacity(8);
        body.put_u32(ONF_VENDOR_ID);
        body.put_u32(if paused { 1871 } else { 1872 });
        crate::wire::HeaderRepr::framed(crate::wire::header::msg_type::EXPERIMENTER, 0, &body)
    } else {
        let mut update = Vec::with_capacity(8);
        update.put_u16(8);
        update.put_u16(if paused { 5 } else { 6 });
        update.put_zeros(4);
        let (ty, prefix) = reply_type_and_prefix(version);
        super::pack_replies_with(0, ty, &prefix, std::iter::once(update)).concat()
    }
}

/// Encodes `m` as an `ofp_match` and returns its length without the
/// padding (what the ONF extension's `match_len` fields hold).
fn emit_match_len(m: &flowtable::Match, out: &mut Vec<u8>) -> u16 {
    let start = out.len();
    emit_match(m, out);
    out.get(start + 2..start + 4)
        .map_or(0, |l| u16::from_be_bytes([l[0], l[1]]))
}

/// The prefix of a reply's multipart body before its updates: for 1.3
/// the ONF experimenter header, else nothing (the type is FLOW_MONITOR).
pub fn reply_type_and_prefix(version: u8) -> (u16, Vec<u8>) {
    if version == crate::wire::OFP_VERSION {
        let mut p = Vec::with_capacity(8);
        p.put_u32(ONF_VENDOR_ID);
        p.put_u32(ONF_FLOW_MONITOR);
        (MP_EXPERIMENTER, p)
    } else {
        (MP_FLOW_MONITOR, Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::err;
    use flowtable::{Field, Match};

    fn request(command: Command, flags: u16) -> MonitorRequest {
        let mut m = Match::catch_all();
        m.set_exact(Field::InPort, 3);
        MonitorRequest {
            id: 7,
            command,
            flags,
            filter: filter(1, 2, flowtable::action::group::ANY, m),
        }
    }

    #[test]
    fn requests_round_trip_in_both_encodings() {
        let all = flags::INITIAL | flags::ADD | flags::REMOVED | flags::MODIFY;
        let q = request(Command::Add, all | flags::INSTRUCTIONS | flags::ONLY_OWN);
        let mut onf = Vec::new();
        emit_requests(crate::wire::OFP_VERSION, &[q.clone(), q.clone()], &mut onf);
        // ovs-ofctl's `watch:` flags in Nicira numbering: 0x3f.
        assert_eq!(&onf[4..6], &[0, 0x3f]);
        assert_eq!(parse_onf13(&onf), Ok(vec![q.clone(), q.clone()]));
        let mut of14 = Vec::new();
        emit_requests(5, std::slice::from_ref(&q), &mut of14);
        assert_eq!(parse_of14(&of14), Ok(vec![q]));
        let del = request(Command::Delete, 0);
        let mut b = Vec::new();
        emit_requests(6, std::slice::from_ref(&del), &mut b);
        assert_eq!(parse_of14(&b), Ok(vec![del]));
    }

    #[test]
    fn refuses_what_ovs_refuses() {
        let code = |r: Result<Vec<MonitorRequest>, WireError>| r.map_err(|e| e.ofp_error());
        let mut b = Vec::new();
        emit_requests(4, &[request(Command::Add, flags::INITIAL)], &mut b);
        assert_eq!(
            code(parse_onf13(&b)),
            Err((err::EXPERIMENTER, nx_err::BAD_FLAGS))
        );
        let mut b = Vec::new();
        emit_requests(4, &[request(Command::Add, flags::ADD)], &mut b);
        b[13] = 1;
        assert_eq!(
            code(parse_onf13(&b)),
            Err((err::EXPERIMENTER, nx_err::MUST_BE_ZERO))
        );
        let mut b = Vec::new();
        emit_requests(5, &[request(Command::Add, flags::ADD | 1 << 5)], &mut b);
        assert_eq!(
            code(parse_of14(&b)),
            Err((err::FLOW_MONITOR_FAILED, mo_err::BAD_FLAGS))
        );
        b[15] = 9;
        assert_eq!(
            code(parse_of14(&b)),
            Err((err::FLOW_MONITOR_FAILED, mo_err::BAD_COMMAND))
        );
        assert!(parse_of14(&b[..10]).is_err());
        assert_eq!(parse_onf13_cancel(&[0, 0, 0, 9]), Ok(9));
        assert!(parse_onf13_cancel(&[0, 0, 9]).is_err());
    }
}
