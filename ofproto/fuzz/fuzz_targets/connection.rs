//! A byte stream from a hostile peer, fed to a real OpenFlow server over
//! its unix socket: the server must never panic or hang, and everything it
//! sends back must be a well-formed OpenFlow 1.3 message.
//!
//! Every input gets a fresh bridge and server, so a crash reproduces from
//! its input alone.

#![no_main]

use flowtable::tables::Change;
use libfuzzer_sys::fuzz_target;
use ofproto::wire::header::msg_type as t;
use ofproto::wire::message::split;
use ofproto::wire::multipart::FlowStatsEntry;
use ofproto::wire::{Message, NX_VENDOR_ID, OFP_VERSION, ONF_VENDOR_ID};
use ofproto::{Bridge, Datapath, PortCounters, PortInfo, PortModError, Server};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A datapath with two ports that accepts every change at once.
struct TwoPorts {
    seq: AtomicU64,
}

impl Datapath for TwoPorts {
    fn datapath_id(&self) -> u64 {
        0x42
    }
    fn ports(&self) -> Vec<PortInfo> {
        (1..=2)
            .map(|n| PortInfo {
                port_no: n,
                hw_addr: [2, 0, 0, 0, 0, n as u8],
                name: format!("p{n}"),
                config: 0,
                state: 0,
                curr_speed: 10_000_000,
                max_speed: 0,
            })
            .collect()
    }
    fn port_stats(&self, port_no: u32) -> Vec<PortCounters> {
        (1..=2)
            .filter(|n| port_no == 0xffff_ffff || port_no == *n)
            .map(|n| PortCounters {
                port_no: n,
                ..PortCounters::default()
            })
            .collect()
    }
    fn port_mod(&self, port_no: u32, hw: [u8; 6], _: u32, _: u32) -> Result<(), PortModError> {
        match port_no {
            1 | 2 if hw == [2, 0, 0, 0, 0, port_no as u8] => Ok(()),
            1 | 2 => Err(PortModError::BadHwAddr),
            _ => Err(PortModError::BadPort),
        }
    }
    fn publish(&self, _: Vec<Change>) -> u64 {
        self.seq.fetch_add(1, Ordering::SeqCst) + 1
    }
    fn sync(&self, _: u64) {}
    fn packet_out(
        &self,
        _: u32,
        _: Vec<(flowtable::Field, u64)>,
        _: Vec<flowtable::Action>,
        _: Vec<u8>,
    ) -> Result<(), ofproto::PacketOutError> {
        Ok(())
    }
    fn set_fail_open(&self, _: bool) {}
}

static NEXT: AtomicU64 = AtomicU64::new(0);

fn socket_path() -> PathBuf {
    std::env::temp_dir().join(format!(
        "xbr-fuzz-{}-{}.mgmt",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}

/// OFPT_BUNDLE_CONTROL of OpenFlow 1.4/1.5.
const BUNDLE_CONTROL_14: u8 = 33;
/// OFPET_BUNDLE_FAILED of OpenFlow 1.4/1.5.
const BUNDLE_FAILED_14: u16 = 17;
/// OFPET_BAD_PROPERTY (1.4 on): 1.4 port and table mods, 1.5 buckets.
const BAD_PROPERTY_14: u16 = 14;
/// OFPET_ASYNC_CONFIG_FAILED and OFPET_FLOW_MONITOR_FAILED (1.4 on).
const ASYNC_CONFIG_FAILED_14: u16 = 15;
const FLOW_MONITOR_FAILED_14: u16 = 16;

/// Checks one message the switch sent on a connection that negotiated
/// `version` (1.3, or 1.4/1.5 for a peer that offered only those, whose
/// messages the switch encodes as 1.3 does apart from the bundle ones,
/// property errors and 1.5's flow descriptions).
fn check_reply(msg: &[u8], version: u8) {
    let (mut h, body) = split(msg).unwrap_or_else(|e| panic!("reply framing: {e}: {msg:02x?}"));
    assert_eq!(h.version, version, "reply version: {msg:02x?}");
    h.version = OFP_VERSION;
    if version != OFP_VERSION && h.msg_type == BUNDLE_CONTROL_14 {
        assert_eq!(body.len(), 8, "bundle control reply {msg:02x?}");
        return;
    }
    match h.msg_type {
        t::HELLO | t::ECHO_REPLY | t::FEATURES_REPLY | t::GET_CONFIG_REPLY | t::BARRIER_REPLY => {
            Message::parse(&h, body).unwrap_or_else(|e| panic!("reply {msg:02x?}: {e}"));
        }
        t::ROLE_REPLY | t::QUEUE_GET_CONFIG_REPLY | t::GET_ASYNC_REPLY
            if version == OFP_VERSION =>
        {
            Message::parse(&h, body).unwrap_or_else(|e| panic!("reply {msg:02x?}: {e}"));
        }
        // 1.4's: role as 1.3's; async config as twelve 8-byte properties.
        t::ROLE_REPLY => assert_eq!(body.len(), 16, "role reply {msg:02x?}"),
        t::GET_ASYNC_REPLY => assert_eq!(body.len(), 96, "async reply {msg:02x?}"),
        t::ERROR => match Message::parse(&h, body) {
            Ok(Message::Error { ty, .. }) => assert!(
                ty <= 13
                    || (version != OFP_VERSION
                        && [
                        BAD_PROPERTY_14,
                        ASYNC_CONFIG_FAILED_14,
                        FLOW_MONITOR_FAILED_14,
                        BUNDLE_FAILED_14,
                    ]
                    .contains(&ty)),
                "error type {ty}: {msg:02x?}"
            ),
            // ONF's (bundles) or Nicira's (1.3's flow monitors).
            Ok(Message::ExperimenterError { experimenter, .. }) => assert!(
                experimenter == ONF_VENDOR_ID || experimenter == NX_VENDOR_ID,
                "{msg:02x?}"
            ),
            other => panic!("bad error reply {other:?}: {msg:02x?}"),
        },
        t::EXPERIMENTER => match Message::parse(&h, body) {
            // Only ONF bundle control replies go this way.
            Ok(Message::Experimenter {
                experimenter,
                exp_type,
                data,
            }) => {
                assert_eq!(experimenter, ONF_VENDOR_ID, "{msg:02x?}");
                assert_eq!(exp_type, 2300, "{msg:02x?}");
                assert_eq!(data.len(), 8, "{msg:02x?}");
            }
            other => panic!("bad experimenter reply {other:?}: {msg:02x?}"),
        },
        t::MULTIPART_REPLY => {
            assert!(body.len() >= 8, "short multipart reply {msg:02x?}");
            let ty = u16::from_be_bytes([body[0], body[1]]);
            // 1.5's flow descriptions have their own layout (stats15).
            if ty == 1 && version == OFP_VERSION {
                FlowStatsEntry::parse_all(&body[8..])
                    .unwrap_or_else(|e| panic!("flow stats reply {msg:02x?}: {e}"));
            }
        }
        // Asynchronous messages, once a SET_CONFIG set a miss_send_len:
        // 1.3's parse; 1.4's port status and 1.5's flow removed have
        // their own layouts.
        t::FLOW_REMOVED | t::PORT_STATUS if version == OFP_VERSION => {
            Message::parse(&h, body).unwrap_or_else(|e| panic!("async {msg:02x?}: {e}"));
        }
        t::FLOW_REMOVED | t::PORT_STATUS => {
            assert!(body.len() >= 16, "short async message {msg:02x?}")
        }
        other => panic!("switch sent message type {other}: {msg:02x?}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let bridge = Bridge::new(Arc::new(TwoPorts {
        seq: AtomicU64::new(0),
    }));
    let path = socket_path();
    let server = Server::start(bridge, &path, None).expect("server starts");
    let mut conn = UnixStream::connect(&path).expect("connect");
    // A hung connection is a bug too: libFuzzer's -timeout reports it.
    conn.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let mut writer = conn.try_clone().expect("clone");
    let input = data.to_vec();
    // Write from another thread: replies may exceed the socket buffer
    // before the whole input is written.
    let w = std::thread::spawn(move || {
        // The server may hang up first (bad HELLO, broken framing).
        let _ = writer.write_all(&input);
        let _ = writer.shutdown(std::net::Shutdown::Write);
    });
    let mut out = Vec::new();
    if let Err(e) = conn.read_to_end(&mut out) {
        // A reset after the server hung up on garbage is fine.
        assert!(
            !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "server hung"
        );
    }
    let _ = w.join();
    server.shutdown();
    let mut rest = &out[..];
    let mut first = true;
    let mut version = OFP_VERSION;
    while !rest.is_empty() {
        assert!(rest.len() >= 8, "trailing {} bytes", rest.len());
        let len = usize::from(u16::from_be_bytes([rest[2], rest[3]]));
        assert!(
            len >= 8 && len <= rest.len(),
            "reply length {len}: {rest:02x?}"
        );
        let (msg, tail) = rest.split_at(len);
        if first {
            assert_eq!(msg[1], t::HELLO, "first message is not HELLO");
            // The version the switch chose: every later reply carries it.
            version = msg[0];
            assert!(
                (OFP_VERSION..=OFP_VERSION + 2).contains(&version),
                "HELLO version {version}"
            );
            first = false;
        }
        check_reply(msg, version);
        rest = tail;
    }
});
