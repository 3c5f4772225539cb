//! OpenFlow 1.4 and 1.5 on service connections: what `ovs-ofctl -O
//! OpenFlow14` (or `-O OpenFlow15`) sends, and nothing the codec would
//! answer wrongly.
//!
//! # Design
//!
//! xbr is an OpenFlow 1.3 switch; its codec speaks 1.3. A peer that offers
//! 1.3 always gets 1.3. A peer that offers only 1.4 or 1.5 gets that
//! version, and then each message is routed by [`route`]: those whose
//! 1.4/1.5 encoding is 1.3's byte for byte (the header's version aside)
//! through the 1.3 codec; those whose encoding changed through decoders of
//! their own (`wire::group15`, `wire::action::of15`, `wire::stats15`,
//! `wire::port14`), replies encoded for the connection's version; the
//! standard bundle messages (OFPT_BUNDLE_CONTROL and
//! OFPT_BUNDLE_ADD_MESSAGE, the ONF extension's bodies under their own
//! types) to the same bundle engine as the ONF ones. Everything else is
//! refused with OFPBRC_BAD_TYPE (or OFPBRC_BAD_MULTIPART), never decoded
//! as 1.3 and answered wrongly.
//!
//! Version choice: with bitmaps, both sides independently pick the highest
//! version both advertise, so the switch must know the peer's offer before
//! it advertises its own: on connections a peer opened (the management
//! socket, `ptcp:`), the switch waits for the peer's HELLO and then
//! advertises the one version it chose; on connections to a controller it
//! says HELLO at once, offering 1.3 only (controllers of other stacks
//! often offer 1.0-1.5 and would otherwise pick a version xbr serves only
//! in part).
//!
//! Same encodings (OpenFlow 1.4.1 and 1.5.1 against 1.3.5): ECHO, ERROR,
//! FEATURES, GET/SET_CONFIG, BARRIER, ROLE_REQUEST, METER_MOD, 1.4's
//! PACKET_OUT; FLOW_MOD's
//! layout (1.4's `importance` sits in 1.3's padding: a nonzero one is
//! refused with OFPFMFC_UNKNOWN, as xbr has no eviction); the requests of
//! multipart FLOW, AGGREGATE, PORT_STATS, QUEUE, TABLE, GROUP,
//! GROUP_FEATURES, METER, METER_CONFIG, METER_FEATURES, TABLE_FEATURES
//! and DESC, and most of their replies. Changed, and served by their own
//! codecs: PORT_MOD and PORT_STATS entries (1.4 on: properties); PORT_DESC
//! entries (1.4 on) and its 1.5 request; 1.5's GROUP_MOD and GROUP_DESC
//! (bucket ids and properties), FLOW_DESC and AGGREGATE replies (OXS
//! statistics) and its action dialect (masked set_field, copy_field, the
//! meter action), PACKET_OUT (in_port and other pipeline fields in a
//! match); 1.5 matches registers as OFPXMC_PACKET_REGS (`wire::oxm`). New in 1.4, served by `wire::table14`: TABLE_MOD's
//! eviction and vacancy settings and the TABLE_DESC multipart that
//! reports them; QUEUE_DESC (no queue is listed, as for 1.3's queue
//! requests); FLOW_MONITOR (`wire::monitor`, which also serves 1.3's ONF
//! extension); GET/SET_ASYNC with properties (`wire::async14`).
//! Asynchronous messages reach a 1.4/1.5 connection, as any service
//! connection, once its SET_CONFIG sets a nonzero miss_send_len (`ovs-ofctl
//! -O OpenFlow15 monitor br0 65534`), with OVS's 1.4 default selection
//! until a SET_ASYNC; `notify.rs` encodes them for the
//! connection's version (1.4's PORT_STATUS with port properties, 1.5's
//! FLOW_REMOVED with OXS statistics; PACKET_IN is 1.3's).

use crate::wire::header::msg_type;
use crate::wire::multipart::mp_type;
use crate::wire::{err, WireError, OFP_VERSION};

pub use crate::wire::{OFP14_VERSION, OFP15_VERSION};

/// OFPT_BUNDLE_CONTROL and OFPT_BUNDLE_ADD_MESSAGE (OpenFlow 1.4 on).
pub const OFPT_BUNDLE_CONTROL: u8 = 33;
pub const OFPT_BUNDLE_ADD_MESSAGE: u8 = 34;

/// OFPET_BUNDLE_FAILED (OpenFlow 1.4 on); its codes are the ONF
/// extension's minus 2300.
pub const OFPET_BUNDLE_FAILED: u16 = 17;

/// The version to speak with a peer whose HELLO carried `version` and
/// `bitmap`, or `None` if there is none in common.
pub fn negotiate(version: u8, bitmap: Option<u32>) -> Option<u8> {
    let offered = |v: u8| match bitmap {
        Some(b) => b & (1 << v) != 0,
        // Without a bitmap the peer speaks every version up to its own.
        None => version >= v,
    };
    [OFP_VERSION, OFP14_VERSION, OFP15_VERSION]
        .into_iter()
        .find(|&v| offered(v))
}

/// What a connection speaking `version` does with a message.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// Decode and serve it with the OpenFlow 1.3 codec.
    AsOf13,
    /// A standard bundle message: control (`true`) or add.
    Bundle {
        control: bool,
    },
    /// OpenFlow 1.5's PORT_DESC request, for one port or ANY.
    PortDesc15 {
        port_no: u32,
    },
    /// OpenFlow 1.5's GROUP_MOD (see `wire::group15`).
    GroupMod15,
    /// OpenFlow 1.5's FLOW_MOD: 1.3's layout, instructions in 1.5's
    /// dialect (see `wire::action::of15`).
    FlowMod15,
    /// OpenFlow 1.4/1.5's PORT_MOD, with properties (see `wire::port14`).
    PortMod14,
    /// OpenFlow 1.5's PACKET_OUT: the in_port in a match, actions in 1.5's
    /// dialect.
    PacketOut15,
    /// OpenFlow 1.5's GROUP_DESC request, for one group or ALL.
    GroupDesc15 {
        group_id: u32,
    },
    /// OpenFlow 1.4/1.5's TABLE_MOD, with properties (see `wire::table14`).
    TableMod14,
    /// OpenFlow 1.4/1.5's TABLE_DESC request.
    TableDesc14,
    /// OpenFlow 1.4/1.5's FLOW_MONITOR request (see `wire::monitor`).
    FlowMonitor14,
    /// OpenFlow 1.4/1.5's GET_ASYNC_REQUEST and SET_ASYNC (properties,
    /// see `wire::async14`).
    GetAsync14,
    SetAsync14,
    /// OpenFlow 1.4/1.5's QUEUE_DESC request.
    QueueDesc14 {
        port_no: u32,
        queue_id: u32,
    },
    /// Refuse it with this error.
    Refuse(WireError),
}

/// Decides how a message of type `ty` with body `body` is served on a
/// connection that negotiated `version` (1.4 or 1.5).
/// Whether an experimenter message's body is Nicira's SET_PACKET_IN_FORMAT.
fn is_set_packet_in_format(body: &[u8]) -> bool {
    let word = |at: usize| {
        body.get(at..at + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    };
    word(0) == Some(crate::wire::NX_VENDOR_ID)
        && word(4) == Some(crate::wire::NXT_SET_PACKET_IN_FORMAT)
}

pub(crate) fn route(version: u8, ty: u8, body: &[u8]) -> Route {
    let v14 = version == OFP14_VERSION;
    let refuse = |what: &str| {
        Route::Refuse(WireError::BadRequest(
            err::BRC_BAD_TYPE,
            format!("{what} is served in OpenFlow 1.3 only; connect with -O OpenFlow13"),
        ))
    };
    match ty {
        OFPT_BUNDLE_CONTROL => Route::Bundle { control: true },
        OFPT_BUNDLE_ADD_MESSAGE => Route::Bundle { control: false },
        msg_type::HELLO
        | msg_type::ERROR
        | msg_type::ECHO_REQUEST
        | msg_type::ECHO_REPLY
        | msg_type::FEATURES_REQUEST
        | msg_type::GET_CONFIG_REQUEST
        | msg_type::SET_CONFIG
        | msg_type::BARRIER_REQUEST
        | msg_type::METER_MOD
        | msg_type::ROLE_REQUEST => Route::AsOf13,
        // Nicira's SET_PACKET_IN_FORMAT (`ovs-ofctl monitor -P standard`)
        // means the same in every version.
        msg_type::EXPERIMENTER if is_set_packet_in_format(body) => Route::AsOf13,
        msg_type::PORT_MOD => Route::PortMod14,
        msg_type::TABLE_MOD => Route::TableMod14,
        msg_type::GET_ASYNC_REQUEST if body.is_empty() => Route::GetAsync14,
        msg_type::GET_ASYNC_REQUEST => Route::Refuse(WireError::BadRequest(
            err::BRC_BAD_LEN,
            "get async request with a body".into(),
        )),
        msg_type::SET_ASYNC => Route::SetAsync14,
        msg_type::PACKET_OUT if v14 => Route::AsOf13,
        msg_type::PACKET_OUT => Route::PacketOut15,
        msg_type::FLOW_MOD => match importance(body) {
            Some(0) | None if v14 => Route::AsOf13,
            Some(0) | None => Route::FlowMod15,
            // OFPFMFC_UNKNOWN: no code says "unsupported field value".
            Some(_) => Route::Refuse(WireError::FlowMod(
                0,
                "flow importance is not supported (xbr never evicts flows)".into(),
            )),
        },
        msg_type::GROUP_MOD if v14 => Route::AsOf13,
        msg_type::GROUP_MOD => Route::GroupMod15,
        msg_type::MULTIPART_REQUEST => {
            let mp = body.get(..2).map(|b| u16::from_be_bytes([b[0], b[1]]));
            // 1.5's PORT_DESC and GROUP_DESC requests name a port or group
            // (ANY / ALL for every one) where 1.3's have no body.
            let named = |what: &str| match body.get(8..12) {
                Some(p) => Ok(u32::from_be_bytes([p[0], p[1], p[2], p[3]])),
                None => Err(Route::Refuse(WireError::BadRequest(
                    err::BRC_BAD_LEN,
                    format!("OpenFlow 1.5 {what} request without its {what}"),
                ))),
            };
            match mp {
                Some(mp_type::TABLE_DESC) => Route::TableDesc14,
                Some(crate::wire::monitor::MP_FLOW_MONITOR) => Route::FlowMonitor14,
                Some(mp_type::QUEUE_DESC) => match (body.get(8..12), body.get(12..16)) {
                    (Some(p), Some(q)) => Route::QueueDesc14 {
                        port_no: u32::from_be_bytes([p[0], p[1], p[2], p[3]]),
                        queue_id: u32::from_be_bytes([q[0], q[1], q[2], q[3]]),
                    },
                    _ => Route::Refuse(WireError::BadRequest(
                        err::BRC_BAD_LEN,
                        "queue description request without its port and queue".into(),
                    )),
                },
                Some(mp_type::PORT_DESC) if !v14 => named("port")
                    .map_or_else(|e| e, |port_no| Route::PortDesc15 { port_no }),
                Some(mp_type::GROUP_DESC) if !v14 => named("group")
                    .map_or_else(|e| e, |group_id| Route::GroupDesc15 { group_id }),
                // Group, table and meter statistics, meter configuration
                // and the features kept 1.3's encoding; so did queue
                // statistics' request, and xbr's reply lists no queue.
                // Port statistics' request too (the reply is encoded for
                // the connection's version, see `wire::port14`).
                Some(
                    mp_type::GROUP
                    | mp_type::GROUP_FEATURES
                    | mp_type::TABLE
                    | mp_type::METER
                    | mp_type::METER_CONFIG
                    | mp_type::METER_FEATURES
                    | mp_type::QUEUE
                    | mp_type::PORT_STATS,
                ) => Route::AsOf13,
                // PORT_DESC is answered in the later encoding (see
                // `multipart::port_desc_entry_v14`); TABLE_FEATURES' 1.5
                // `command` and `features` sit in 1.3's padding, and zero
                // reads as "replace, no special features".
                Some(mp_type::DESC | mp_type::PORT_DESC | mp_type::TABLE_FEATURES) => {
                    Route::AsOf13
                }
                // Flow statistics requests are 1.3's in 1.4 and 1.5; the
                // replies are encoded for the connection's version (see
                // `wire::stats15`).
                Some(mp_type::FLOW | mp_type::AGGREGATE) => Route::AsOf13,
                Some(mp_type::GROUP_DESC) if v14 =>
                {
                    Route::AsOf13
                }
                // Too short: the 1.3 decoder reports the length.
                None => Route::AsOf13,
                Some(t) => Route::Refuse(WireError::BadRequest(
                    err::BRC_BAD_MULTIPART,
                    format!(
                        "multipart type {t} is served in OpenFlow 1.3 only; connect with -O OpenFlow13"
                    ),
                )),
            }
        }
        t => refuse(&format!("message type {t}")),
    }
}

/// FLOW_MOD's `importance` (OpenFlow 1.4 on), where 1.3 has padding:
/// after cookie, cookie_mask, table_id, command, timeouts, priority,
/// buffer_id, out_port, out_group and flags.
fn importance(body: &[u8]) -> Option<u16> {
    body.get(38..40).map(|b| u16::from_be_bytes([b[0], b[1]]))
}

/// Rewrites the version byte of every message in `bytes` (one or more
/// whole messages back to back, as encoded by the 1.3 codec).
pub(crate) fn relabel(bytes: &mut [u8], version: u8) {
    let mut at = 0;
    while let Some(h) = bytes.get_mut(at..at + 4) {
        h[0] = version;
        let len = usize::from(u16::from_be_bytes([h[2], h[3]]));
        if len < 8 {
            return;
        }
        at += len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_offering_1_3_gets_1_3() {
        assert_eq!(negotiate(6, Some(0b111_0010)), Some(4));
        assert_eq!(negotiate(6, None), Some(4));
        assert_eq!(negotiate(4, None), Some(4));
    }

    #[test]
    fn a_peer_offering_only_later_versions_gets_the_lowest_of_them() {
        assert_eq!(negotiate(5, Some(1 << 5)), Some(5));
        assert_eq!(negotiate(6, Some(1 << 6)), Some(6));
        assert_eq!(negotiate(6, Some(1 << 5 | 1 << 6)), Some(5));
    }

    #[test]
    fn no_common_version() {
        assert_eq!(negotiate(1, None), None);
        assert_eq!(negotiate(6, Some(1 << 1 | 1 << 7)), None);
    }

    #[test]
    fn routes() {
        assert_eq!(route(5, 33, &[]), Route::Bundle { control: true });
        assert_eq!(route(6, 34, &[]), Route::Bundle { control: false });
        assert_eq!(route(5, msg_type::BARRIER_REQUEST, &[]), Route::AsOf13);
        let spif = [0, 0, 0x23, 0x20, 0, 0, 0, 16, 0, 0, 0, 0];
        assert_eq!(route(6, msg_type::EXPERIMENTER, &spif), Route::AsOf13);
        assert_eq!(route(5, msg_type::GROUP_MOD, &[]), Route::AsOf13);
        assert_eq!(route(6, msg_type::GROUP_MOD, &[]), Route::GroupMod15);
        for v in [5, 6] {
            for mp in [mp_type::GROUP, mp_type::GROUP_FEATURES, mp_type::TABLE] {
                let body = [(mp >> 8) as u8, mp as u8, 0, 0];
                assert_eq!(route(v, msg_type::MULTIPART_REQUEST, &body), Route::AsOf13);
            }
        }
        assert_eq!(
            route(
                6,
                msg_type::MULTIPART_REQUEST,
                &[0, 7, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xfc, 0, 0, 0, 0]
            ),
            Route::GroupDesc15 {
                group_id: 0xffff_fffc
            }
        );
        assert_eq!(route(5, msg_type::PORT_MOD, &[]), Route::PortMod14);
        assert_eq!(route(5, msg_type::TABLE_MOD, &[]), Route::TableMod14);
        assert_eq!(
            route(5, msg_type::GET_ASYNC_REQUEST, &[]),
            Route::GetAsync14
        );
        assert_eq!(route(6, msg_type::SET_ASYNC, &[0; 8]), Route::SetAsync14);
        assert!(matches!(
            route(5, msg_type::GET_ASYNC_REQUEST, &[0; 8]),
            Route::Refuse(WireError::BadRequest(err::BRC_BAD_LEN, _))
        ));
        assert!(matches!(
            route(5, msg_type::GROUP_MOD + 100, &[]),
            Route::Refuse(WireError::BadRequest(err::BRC_BAD_TYPE, _))
        ));
        assert_eq!(
            route(6, msg_type::MULTIPART_REQUEST, &[0, 14, 0, 0, 0, 0, 0, 0]),
            Route::TableDesc14
        );
        assert_eq!(
            route(
                5,
                msg_type::MULTIPART_REQUEST,
                &[0, 15, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0xff, 0xff, 0xff, 0xff]
            ),
            Route::QueueDesc14 {
                port_no: 3,
                queue_id: 0xffff_ffff
            }
        );
        assert!(matches!(
            route(5, msg_type::MULTIPART_REQUEST, &[0, 15, 0, 0, 0, 0, 0, 0]),
            Route::Refuse(WireError::BadRequest(err::BRC_BAD_LEN, _))
        ));
        assert_eq!(
            route(5, msg_type::MULTIPART_REQUEST, &[0, 1, 0, 0]),
            Route::AsOf13
        );
        assert_eq!(
            route(6, msg_type::MULTIPART_REQUEST, &[0, 1, 0, 0]),
            Route::AsOf13
        );
        assert_eq!(
            route(6, msg_type::MULTIPART_REQUEST, &[0, 16, 0, 0]),
            Route::FlowMonitor14
        );
        assert!(matches!(
            route(6, msg_type::MULTIPART_REQUEST, &[0, 17, 0, 0]),
            Route::Refuse(WireError::BadRequest(err::BRC_BAD_MULTIPART, _))
        ));
        assert_eq!(
            route(5, msg_type::MULTIPART_REQUEST, &[0, 4, 0, 0]),
            Route::AsOf13
        );

        assert_eq!(
            route(
                6,
                msg_type::MULTIPART_REQUEST,
                &[0, 13, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0]
            ),
            Route::PortDesc15 { port_no: 3 }
        );
        assert!(matches!(
            route(6, msg_type::MULTIPART_REQUEST, &[0, 13, 0, 0, 0, 0, 0, 0]),
            Route::Refuse(WireError::BadRequest(err::BRC_BAD_LEN, _))
        ));
        let mut fm = vec![0u8; 48];
        assert_eq!(route(5, msg_type::FLOW_MOD, &fm), Route::AsOf13);
        assert_eq!(route(6, msg_type::FLOW_MOD, &fm), Route::FlowMod15);
        fm[39] = 1;
        assert!(matches!(
            route(5, msg_type::FLOW_MOD, &fm),
            Route::Refuse(_)
        ));
    }

    #[test]
    fn relabels_every_message() {
        let mut two = vec![
            4, 19, 0, 8, 0, 0, 0, 1, 4, 19, 0, 12, 0, 0, 0, 1, 9, 9, 9, 9,
        ];
        relabel(&mut two, 5);
        assert_eq!((two[0], two[8], two[16]), (5, 5, 9));
        // A hostile length cannot loop forever.
        let mut bad = vec![4, 0, 0, 0, 0, 0, 0, 0];
        relabel(&mut bad, 5);
        assert_eq!(bad[0], 5);
    }
}
