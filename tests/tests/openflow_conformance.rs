//! OpenFlow conformance details a controller or an operator meets, each
//! checked against Open vSwitch 3.1 in the same test: the same requests
//! go to an xbr and an OVS side by side (`peers`), over a connection to
//! each one's management socket or through `ovs-ofctl`, and the replies
//! and counters must be the same.
//!
//! - An OFPFC_ADD replacing a flow sends no FLOW_REMOVED; a delete does.
//! - Group mods: a weight outside a select group, an indirect group
//!   without exactly one bucket: OFPGMFC_INVALID_GROUP.
//! - Per-bucket group counters (`dump-group-stats`).
//! - IEEE 802.3 frames: dl_type 0x05ff, or the type inside LLC/SNAP.
//! - A slave's write is OFPBRC_IS_SLAVE before any other check.
//! - The NXM names of fields that have OXM ones (NXM_OF_UDP_SRC, ...) in
//!   a match and as an action operand.
//!
//! Needs root and a built `xbr` (`./scripts/test`).

mod peers;
use flowtable::action::{group as group_no, port, Bucket};
use flowtable::flow_mod::flow_mod_flags::SEND_FLOW_REM;
use flowtable::{
    Action, Field, FlowMod, FlowModCommand, GroupMod, GroupModCommand, GroupType, Instructions,
    Match, MeterMod, MeterModCommand,
};
use ofproto::wire::err;
use ofproto::wire::features::TableMod;
use ofproto::wire::flow_removed::FlowRemoved;
use ofproto::wire::message::{role, RoleMsg, SwitchConfig};
use ofproto::wire::mods::PortMod;
use ofproto::wire::packet_io::PacketOut;
use ofproto::wire::{Message, NO_BUFFER};
use peers::Peers;
use std::path::PathBuf;
use std::time::Duration;
use xbr_tests::openflow::{OfConn, OfMessage, OFPT_BARRIER_REPLY, OFPT_ECHO_REPLY, OFPT_ERROR};
use xbr_tests::{HarnessError, Result, BRIDGE};

const OFPT_FLOW_REMOVED: u8 = 11;
const OFPT_ROLE_REPLY: u8 = 25;

fn fail(what: impl Into<String>) -> HarnessError {
    HarnessError::Unexpected(what.into())
}

/// Both switches' management sockets: xbr's, then OVS's.
fn sockets(peers: &Peers) -> [PathBuf; 2] {
    [
        peers.xbr.mgmt_path(),
        peers.ovs.rundir().join(format!("{BRIDGE}.mgmt")),
    ]
}

/// What a test compares of a received message: errors by type and
/// code, FLOW_REMOVED by reason and flow, the rest by type.
fn describe(m: &OfMessage) -> Result<String> {
    Ok(match m.msg_type {
        OFPT_ERROR => {
            let (ty, code, _) = m
                .error()
                .ok_or_else(|| fail(format!("short error {m:?}")))?;
            format!("xid {} error type {ty} code {code}", m.xid)
        }
        OFPT_FLOW_REMOVED => {
            let fr = FlowRemoved::parse(&m.body)
                .map_err(|e| fail(format!("bad FLOW_REMOVED {m:?}: {e}")))?;
            format!(
                "flow removed reason {} table {} priority {} cookie {:#x} packets {}",
                fr.reason, fr.table_id, fr.priority, fr.cookie, fr.packet_count
            )
        }
        t => format!("xid {} type {t}", m.xid),
    })
}

/// How long asynchronous messages may trail a barrier reply: OVS sends a
/// FLOW_REMOVED once the removed flow's RCU grace period has passed,
/// after the reply to the barrier that followed the delete.
const ASYNC_SETTLE: Duration = Duration::from_millis(500);

/// Reads until the message of `msg_type` and `xid`, describing the others.
fn read_until(conn: &mut OfConn, msg_type: u8, xid: u32, got: &mut Vec<String>) -> Result<()> {
    loop {
        let m = conn.recv_message()?;
        if m.msg_type == msg_type && m.xid == xid {
            return Ok(());
        }
        got.push(describe(&m)?);
    }
}

/// Sends `msgs` (xids from `xid`), then a barrier, and returns what came
/// back but the barrier reply, described: the replies and errors before
/// it, and the asynchronous messages that came up to [`ASYNC_SETTLE`]
/// later (up to the reply of an echo request sent then).
fn exchange(conn: &mut OfConn, msgs: &[Message], xid: u32) -> Result<Vec<String>> {
    for (i, m) in msgs.iter().enumerate() {
        conn.send(&m.emit(xid + i as u32))?;
    }
    let barrier = xid + msgs.len() as u32;
    conn.send(&Message::BarrierRequest.emit(barrier))?;
    let mut got = Vec::new();
    read_until(conn, OFPT_BARRIER_REPLY, barrier, &mut got)?;
    std::thread::sleep(ASYNC_SETTLE);
    let echo = barrier + 1;
    conn.send(&Message::EchoRequest(Vec::new()).emit(echo))?;
    read_until(conn, OFPT_ECHO_REPLY, echo, &mut got)?;
    Ok(got)
}

/// [`exchange`] on both switches (each with its connection); fails unless
/// both answered alike. Returns the answer.
fn both_alike(conns: &mut [OfConn; 2], msgs: &[Message], xid: u32) -> Result<Vec<String>> {
    let ours = exchange(&mut conns[0], msgs, xid)?;
    let theirs = exchange(&mut conns[1], msgs, xid)?;
    if ours != theirs {
        return Err(fail(format!(
            "xbr and OVS answer differently to {msgs:?}\n--- xbr:\n{ours:#?}\n--- OVS:\n{theirs:#?}"
        )));
    }
    Ok(ours)
}

/// A connection to each switch that receives asynchronous messages (a
/// service connection does once it sets miss_send_len, in both).
fn connect_both(peers: &Peers) -> Result<[OfConn; 2]> {
    let [x, o] = sockets(peers);
    let mut conns = [OfConn::connect_hello(&x)?, OfConn::connect_hello(&o)?];
    let config = Message::SetConfig(SwitchConfig {
        flags: 0,
        miss_send_len: 128,
    });
    both_alike(&mut conns, &[config], 2)?;
    Ok(conns)
}

fn flow(priority: u16, in_port: u64, flags: u16, cookie: u64) -> FlowMod {
    let mut m = Match::catch_all();
    m.set_exact(Field::InPort, in_port);
    let mut fm = FlowMod::add(0, priority, m, Instructions::default());
    fm.flags = flags;
    fm.cookie = cookie;
    fm
}

#[test]
fn a_replacing_add_sends_no_flow_removed_like_ovs() -> Result<()> {
    let peers = Peers::with_openflow15()?;
    let mut conns = connect_both(&peers)?;
    // The add, then an add with the same match and priority (another
    // cookie): a replacement, reported to nobody. The flow matches a port
    // no device backs, so no stray frame (an IPv6 router solicitation of a
    // veth) moves its counters in one switch and not the other.
    let added = both_alike(
        &mut conns,
        &[
            Message::FlowMod(flow(5, 99, SEND_FLOW_REM, 0x1)),
            Message::FlowMod(flow(5, 99, SEND_FLOW_REM, 0x2)),
        ],
        10,
    )?;
    assert_eq!(added, Vec::<String>::new());
    let mut delete = flow(5, 99, 0, 0);
    delete.command = FlowModCommand::DeleteStrict;
    let deleted = both_alike(&mut conns, &[Message::FlowMod(delete)], 20)?;
    assert_eq!(
        deleted,
        ["flow removed reason 2 table 0 priority 5 cookie 0x2 packets 0"]
    );
    Ok(())
}

fn bucket(weight: u16, out: u32) -> Bucket {
    Bucket {
        bucket_id: 0,
        weight,
        watch_port: port::ANY,
        watch_group: group_no::ANY,
        actions: vec![Action::Output {
            port: out,
            max_len: 0,
        }],
    }
}

fn group(group_type: GroupType, group_id: u32, buckets: Vec<Bucket>) -> Message {
    Message::GroupMod(GroupMod {
        command: GroupModCommand::Add,
        group_type,
        group_id,
        buckets,
        selection: None,
    })
}

#[test]
fn group_validation_like_ovs() -> Result<()> {
    let peers = Peers::with_openflow15()?;
    let mut conns = connect_both(&peers)?;
    let invalid_group = |xid: u32| {
        format!(
            "xid {xid} error type {} code 1",
            err::GROUP_MOD_FAILED // OFPGMFC_INVALID_GROUP
        )
    };
    let cases = [
        // A weight on an ALL or INDIRECT group's bucket.
        group(GroupType::All, 1, vec![bucket(0, 1), bucket(1, 2)]),
        group(GroupType::Indirect, 2, vec![bucket(3, 1)]),
        // An INDIRECT group without exactly one bucket.
        group(GroupType::Indirect, 3, vec![bucket(0, 1), bucket(0, 2)]),
        group(GroupType::Indirect, 4, vec![]),
        // A weight on a FAST_FAILOVER group's bucket (that watches).
        group(
            GroupType::FastFailover,
            5,
            vec![Bucket {
                watch_port: 1,
                ..bucket(2, 1)
            }],
        ),
    ];
    for (i, case) in cases.into_iter().enumerate() {
        let xid = 100 + 10 * i as u32;
        let answer = both_alike(&mut conns, std::slice::from_ref(&case), xid)?;
        assert_eq!(answer, [invalid_group(xid)], "{case:?}");
    }
    // What is right is accepted by both: weights on a select group, one
    // weightless bucket in an indirect group.
    let fine = both_alike(
        &mut conns,
        &[
            group(GroupType::Select, 6, vec![bucket(0, 1), bucket(5, 2)]),
            group(GroupType::Indirect, 7, vec![bucket(0, 1)]),
            group(GroupType::All, 8, vec![bucket(0, 1), bucket(0, 2)]),
        ],
        200,
    )?;
    assert_eq!(fine, Vec::<String>::new());
    peers.assert_same_dump(&["dump-groups", BRIDGE], "valid groups")?;
    Ok(())
}

#[test]
fn a_slaves_writes_are_refused_before_they_are_checked_like_ovs() -> Result<()> {
    let peers = Peers::with_openflow15()?;
    let [x, o] = sockets(&peers);
    let mut masters = [OfConn::connect_hello(&x)?, OfConn::connect_hello(&o)?];
    let mut slaves = [OfConn::connect_hello(&x)?, OfConn::connect_hello(&o)?];
    let role_request = |wanted| {
        Message::RoleRequest(RoleMsg {
            role: wanted,
            generation_id: 1,
        })
    };
    let role_reply = |xid: u32| vec![format!("xid {xid} type {OFPT_ROLE_REPLY}")];
    assert_eq!(
        both_alike(&mut masters, &[role_request(role::MASTER)], 2)?,
        role_reply(2)
    );
    assert_eq!(
        both_alike(&mut slaves, &[role_request(role::SLAVE)], 2)?,
        role_reply(2)
    );
    // Each message is also wrong in itself; the role decides the answer.
    let mut bad_flow = flow(5, 1, 0, 0);
    bad_flow.table_id = 0xff; // OFPFMFC_BAD_TABLE_ID otherwise
    let writes = [
        // in_port 0: OFPBRC_BAD_PORT from a master.
        Message::PacketOut(PacketOut {
            buffer_id: NO_BUFFER,
            in_port: 0,
            metadata: Vec::new(),
            actions: vec![],
            data: vec![0; 60],
        }),
        // An unknown buffer.
        Message::PacketOut(PacketOut {
            buffer_id: 7,
            in_port: 1,
            metadata: Vec::new(),
            actions: vec![],
            data: Vec::new(),
        }),
        Message::FlowMod(bad_flow),
        group(GroupType::Indirect, 1, vec![bucket(0, 1), bucket(0, 2)]),
        Message::PortMod(PortMod {
            port_no: 99,
            hw_addr: [0; 6],
            config: 0,
            mask: 0,
            advertise: 0,
        }),
        Message::TableMod(TableMod {
            table_id: 0xfe,
            config: 0,
            settings: None,
        }),
        Message::MeterMod(MeterMod {
            command: MeterModCommand::Add,
            flags: 0,
            meter_id: 0,
            bands: Vec::new(),
        }),
    ];
    for (i, w) in writes.iter().enumerate() {
        let xid = 10 + 3 * i as u32;
        let answer = both_alike(&mut slaves, std::slice::from_ref(w), xid)?;
        assert_eq!(
            answer,
            [format!(
                "xid {xid} error type {} code {}",
                err::BAD_REQUEST,
                err::BRC_IS_SLAVE
            )],
            "{w:?}"
        );
    }
    // From xbr's master, each is refused for what it is. (OVS accepts a
    // PACKET_OUT from port 0, which OpenFlow 1.3 does not number, and
    // answers the others with errors of its own: not compared here.)
    for (i, w) in writes.iter().enumerate() {
        let xid = 100 + 3 * i as u32;
        let answer = exchange(&mut masters[0], std::slice::from_ref(w), xid)?;
        let not_slave = format!("xid {xid} error type {} code ", err::BAD_REQUEST);
        assert!(
            answer.len() == 1
                && answer[0].starts_with("xid ")
                && answer[0].contains("error")
                && answer[0] != format!("{not_slave}{}", err::BRC_IS_SLAVE),
            "{w:?}: {answer:?}"
        );
    }
    Ok(())
}

/// `ovs-ofctl` statistics output without what differs with time (ages,
/// durations) and the reply headers: one line per flow or group, with its
/// counters, sorted.
fn counted_lines(out: &str) -> Vec<String> {
    let mut lines: Vec<String> = out
        .lines()
        .filter(|l| l.starts_with(' ') && !l.trim().is_empty())
        .map(|l| {
            l.trim()
                .split(',')
                .map(str::trim)
                .filter(|item| {
                    !["duration=", "idle_age=", "hard_age="]
                        .iter()
                        .any(|p| item.starts_with(p))
                })
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect();
    lines.sort();
    lines
}

/// The same `ovs-ofctl` statistics command on both; fails unless the
/// counted lines are equal. Returns xbr's.
fn same_counts(peers: &Peers, args: &[&str]) -> Result<Vec<String>> {
    let [x, o] = peers.both(args)?;
    if !(x.ok && o.ok) {
        return Err(fail(format!(
            "ovs-ofctl {args:?} failed\n--- xbr:\n{}\n--- OVS:\n{}",
            x.stderr, o.stderr
        )));
    }
    let (ours, theirs) = (counted_lines(&x.stdout), counted_lines(&o.stdout));
    if ours != theirs {
        return Err(fail(format!(
            "ovs-ofctl {args:?} counts differ\n--- xbr:\n{ours:#?}\n--- OVS:\n{theirs:#?}\n--- xbr log:\n{}",
            peers.xbr.log()
        )));
    }
    Ok(ours)
}

/// An IPv4 packet (header and UDP) 10.0.0.1 -> 10.0.0.2, UDP to `dport`,
/// `payload` zero bytes after the UDP header.
fn ipv4_udp(dport: u16, payload: usize) -> Vec<u8> {
    let total = 20 + 8 + payload;
    let mut p = vec![0x45, 0];
    p.extend_from_slice(&(total as u16).to_be_bytes());
    p.extend_from_slice(&[0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
    let mut sum: u32 = p
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    p[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    p.extend_from_slice(&1000u16.to_be_bytes());
    p.extend_from_slice(&dport.to_be_bytes());
    p.extend_from_slice(&((8 + payload) as u16).to_be_bytes());
    p.extend_from_slice(&[0, 0]);
    p.resize(total, 0);
    p
}

const MACS: [u8; 12] = [2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];

/// An Ethernet II frame of `ipv4_udp(dport, 18)` (60 bytes).
fn udp_frame(dport: u16) -> Vec<u8> {
    let mut f = MACS.to_vec();
    f.extend_from_slice(&[0x08, 0x00]);
    f.extend_from_slice(&ipv4_udp(dport, 18));
    f
}

/// An IEEE 802.3 frame: `tag` (a VLAN tag with its TPID, or nothing),
/// the length, `llc` (LLC and any SNAP header), `payload`.
fn ieee8023_frame(tag: &[u8], llc: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut f = MACS.to_vec();
    f.extend_from_slice(tag);
    f.extend_from_slice(&((llc.len() + payload.len()) as u16).to_be_bytes());
    f.extend_from_slice(llc);
    f.extend_from_slice(payload);
    f
}

/// LLC/SNAP with organisation code `oui` and Ethernet type 0x0800.
fn snap_ipv4(oui: [u8; 3]) -> Vec<u8> {
    let mut h = vec![0xaa, 0xaa, 0x03];
    h.extend_from_slice(&oui);
    h.extend_from_slice(&[0x08, 0x00]);
    h
}

fn hex(frame: &[u8]) -> String {
    frame.iter().map(|b| format!("{b:02x}")).collect()
}

/// Sends `frame` through both switches' tables (a packet-out from the
/// controller to OFPP_TABLE), `times` times.
fn through_tables(peers: &Peers, frame: &[u8], times: usize) -> Result<()> {
    let spec = format!("in_port=controller,packet={},actions=table", hex(frame));
    for _ in 0..times {
        peers.both_ok(&["packet-out", BRIDGE, &spec])?;
    }
    Ok(())
}

/// Per-bucket counters in OFPMP_GROUP replies, as OVS credits them: every
/// bucket of an ALL or INDIRECT group, the chosen bucket of a SELECT
/// group, nothing (not even the group) when a FAST_FAILOVER group has no
/// live bucket.
#[test]
fn bucket_counters_like_ovs() -> Result<()> {
    let peers = Peers::with_openflow15()?;
    for g in [
        "group_id=1,type=all,bucket=actions=output:2,bucket=actions=output:3",
        "group_id=2,type=select,bucket=weight:0,actions=output:2,bucket=weight:1,actions=output:3",
        "group_id=3,type=ff,bucket=watch_port:99,actions=output:2",
        "group_id=4,type=indirect,bucket=actions=output:3",
    ] {
        peers.both_ok(&["add-group", BRIDGE, g])?;
    }
    for n in 1..=4 {
        peers.both_ok(&[
            "add-flow",
            BRIDGE,
            &format!("priority=10,udp,tp_dst={n},actions=group:{n}"),
        ])?;
    }
    for (n, times) in [(1, 2), (2, 3), (3, 1), (4, 1)] {
        through_tables(&peers, &udp_frame(n), times)?;
    }
    let groups = same_counts(&peers, &["dump-group-stats", BRIDGE])?;
    assert_eq!(
        groups,
        [
            "group_id=1,ref_count=1,packet_count=2,byte_count=120,\
             bucket0:packet_count=2,byte_count=120,bucket1:packet_count=2,byte_count=120",
            "group_id=2,ref_count=1,packet_count=3,byte_count=180,\
             bucket0:packet_count=0,byte_count=0,bucket1:packet_count=3,byte_count=180",
            "group_id=3,ref_count=1,packet_count=0,byte_count=0,\
             bucket0:packet_count=0,byte_count=0",
            "group_id=4,ref_count=1,packet_count=1,byte_count=60,\
             bucket0:packet_count=1,byte_count=60",
        ]
    );
    Ok(())
}

/// IEEE 802.3 frames as OVS's flow extraction keys them: LLC/SNAP with
/// organisation code 0 has the Ethernet type inside (an IPv4 packet in
/// SNAP matches `ip`, also behind a VLAN tag); any other frame whose type
/// field is a length has dl_type 0x05ff.
#[test]
fn ieee8023_frames_match_like_ovs() -> Result<()> {
    let peers = Peers::with_openflow15()?;
    for f in [
        "priority=30,dl_type=0x05ff,actions=drop",
        "priority=25,dl_vlan=10,udp,nw_dst=10.0.0.2,tp_dst=7,actions=drop",
        "priority=20,udp,nw_dst=10.0.0.2,tp_dst=7,actions=drop",
        // No catch-all: the TAP ports' own traffic (IPv6 neighbour
        // discovery, as each kernel sends it) would count in it.
        "priority=10,dl_type=0x0600,actions=drop",
    ] {
        peers.both_ok(&["add-flow", BRIDGE, f])?;
    }
    let ip = ipv4_udp(7, 18);
    let vlan10 = [0x81, 0x00, 0x00, 0x0a];
    // IPv4 in SNAP: the udp flow, twice (untagged, then tagged).
    through_tables(&peers, &ieee8023_frame(&[], &snap_ipv4([0; 3]), &ip), 2)?;
    through_tables(&peers, &ieee8023_frame(&vlan10, &snap_ipv4([0; 3]), &ip), 1)?;
    // SNAP of another organisation, plain LLC (STP's), an Ethernet type
    // of 0x0600 (the smallest: not a length).
    through_tables(
        &peers,
        &ieee8023_frame(&[], &snap_ipv4([0, 0, 0x0c]), &ip),
        1,
    )?;
    through_tables(&peers, &ieee8023_frame(&[], &[0x42, 0x42, 0x03], &ip), 1)?;
    let mut xns = udp_frame(7);
    xns[12..14].copy_from_slice(&[0x06, 0x00]);
    through_tables(&peers, &xns, 1)?;
    let flows = same_counts(&peers, &["dump-flows", BRIDGE])?;
    let count = |needle: &str| -> String {
        flows
            .iter()
            .find(|l| l.contains(needle))
            .map(|l| {
                l.split(',')
                    .filter(|i| i.starts_with("n_packets="))
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(count("dl_type=0x05ff"), "n_packets=2", "{flows:#?}");
    assert_eq!(count("priority=25"), "n_packets=1", "{flows:#?}");
    assert_eq!(count("priority=20"), "n_packets=2", "{flows:#?}");
    assert_eq!(count("dl_type=0x0600"), "n_packets=1", "{flows:#?}");
    Ok(())
}

/// `fm` as an OpenFlow 1.3 FLOW_MOD whose match has each OXM header word
/// of `swap` replaced by the NXM one (same length): what a controller
/// that writes NXM names sends; ovs-ofctl writes OXM for OpenFlow 1.3.
fn with_nxm_headers(fm: FlowMod, xid: u32, swap: &[(u32, u32)]) -> Result<Vec<u8>> {
    let mut bytes = Message::FlowMod(fm).emit(xid);
    for &(oxm, nxm) in swap {
        let at = bytes
            .windows(4)
            .position(|w| w == oxm.to_be_bytes())
            .ok_or_else(|| fail(format!("no header {oxm:#010x} in {bytes:02x?}")))?;
        bytes[at..at + 4].copy_from_slice(&nxm.to_be_bytes());
    }
    Ok(bytes)
}

#[test]
fn nxm_names_of_oxm_fields_work_like_ovs() -> Result<()> {
    let peers = Peers::with_openflow15()?;
    let flow = |priority: u16, fields: &[(Field, u64)]| {
        let mut m = Match::catch_all();
        for &(f, v) in fields {
            m.set_exact(f, v);
        }
        FlowMod::add(0, priority, m, Instructions::default())
    };
    // (OXM header word, NXM header word), from OVS's meta-flow.
    let udp = flow(
        30,
        &[
            (Field::EthType, 0x0800),
            (Field::IpProto, 17),
            (Field::IpEcn, 1),
            (Field::TpSrc, 53),
            (Field::TpDst, 5353),
        ],
    );
    let udp_swap = [
        (0x8000_1201, 0x0001_3801), // IP_ECN
        (0x8000_1e02, 0x0000_1602), // UDP_SRC
        (0x8000_2002, 0x0000_1802), // UDP_DST
    ];
    let icmp = flow(
        20,
        &[
            (Field::EthType, 0x0800),
            (Field::IpProto, 1),
            (Field::IcmpType, 8),
            (Field::IcmpCode, 0),
        ],
    );
    let icmp_swap = [(0x8000_2601, 0x0000_1a01), (0x8000_2801, 0x0000_1c01)];
    let arp = flow(10, &[(Field::EthType, 0x0806), (Field::ArpOp, 2)]);
    let arp_swap = [(0x8000_2a02, 0x0000_1e02)];
    let msgs = [
        with_nxm_headers(udp, 100, &udp_swap)?,
        with_nxm_headers(icmp, 101, &icmp_swap)?,
        with_nxm_headers(arp, 102, &arp_swap)?,
    ];
    for path in sockets(&peers) {
        let mut conn = OfConn::connect_hello(&path)?;
        for m in &msgs {
            conn.send(m)?;
        }
        conn.send(&Message::BarrierRequest.emit(110))?;
        let mut got = Vec::new();
        read_until(&mut conn, OFPT_BARRIER_REPLY, 110, &mut got)?;
        assert_eq!(got, Vec::<String>::new(), "{}", path.display());
    }
    // As action operands: ovs-ofctl writes NXAST_REG_MOVE's fields with
    // their NXM headers.
    for f in [
        "priority=5,icmp,actions=move:NXM_OF_ICMP_TYPE[]->NXM_NX_REG0[0..7],\
         move:NXM_OF_ICMP_CODE[]->NXM_NX_REG0[8..15]",
        "priority=5,arp,actions=move:NXM_OF_ARP_OP[0..7]->NXM_NX_REG1[0..7]",
        "priority=5,ip,actions=move:NXM_NX_IP_ECN[]->NXM_NX_REG2[0..1]",
        // The key keeps one pair of transport ports; the operand keeps
        // the protocol's name and header, as OVS's separate fields do.
        "priority=5,udp,actions=move:NXM_OF_UDP_SRC[]->NXM_NX_REG3[0..15],\
         move:NXM_NX_REG3[0..15]->NXM_OF_UDP_DST[],load:0x35->NXM_OF_UDP_DST[]",
        "priority=5,sctp,actions=move:OXM_OF_SCTP_SRC[]->NXM_NX_REG4[0..15]",
        "priority=5,tcp,actions=move:NXM_OF_TCP_SRC[]->NXM_NX_REG5[0..15]",
    ] {
        peers.both_ok(&["add-flow", BRIDGE, f])?;
    }
    assert_eq!(
        peers.assert_same_dump(&["dump-flows", BRIDGE], "NXM names")?,
        9
    );
    let dump = peers.xbr.ofctl_ok(&["dump-flows", BRIDGE])?;
    for want in [
        "udp,nw_ecn=1,tp_src=53,tp_dst=5353",
        "icmp,icmp_type=8,icmp_code=0",
        "arp,arp_op=2",
        "move:NXM_OF_ICMP_TYPE[]->NXM_NX_REG0[0..7]",
        "move:NXM_OF_ARP_OP[0..7]->NXM_NX_REG1[0..7]",
        "move:NXM_NX_IP_ECN[]->NXM_NX_REG2[0..1]",
        "move:NXM_OF_UDP_SRC[]->NXM_NX_REG3[0..15]",
        "move:NXM_NX_REG3[0..15]->NXM_OF_UDP_DST[]",
        "move:OXM_OF_SCTP_SRC[]->NXM_NX_REG4[0..15]",
    ] {
        assert!(dump.contains(want), "{want} not in\n{dump}");
    }
    Ok(())
}
