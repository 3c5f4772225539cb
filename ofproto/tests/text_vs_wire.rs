//! The flow-text parser (`flowtable::text`) against ovs-ofctl itself: for
//! every reference capture of an ovs-ofctl command that sent flow or group
//! mods, the mods our parser builds from the command's input text must
//! equal, one for one and in order, what `ofproto::wire` decodes from the
//! bytes ovs-ofctl put on the wire for that same text.

use flowtable::text::{parse_bundle_line_with, parse_flow_command, parse_group_with, PortNames};
use flowtable::{FlowModCommand, PipelineMod};
use ofproto::wire::header::msg_type;
use ofproto::wire::message::split;
use ofproto::wire::Message;

const ONFT_BUNDLE_ADD_MESSAGE: u32 = 2301;

mod common;
use common::sdn::{client_streams, sdn_dir, u16be};

/// Every FLOW_MOD / GROUP_MOD in a message, unwrapping bundle adds.
fn collect_mods(msg: &[u8], out: &mut Vec<PipelineMod>) {
    let (h, body) = split(msg).expect("captured header");
    match h.msg_type {
        msg_type::FLOW_MOD | msg_type::GROUP_MOD => {
            match Message::parse(&h, body).expect("captured mod decodes") {
                Message::FlowMod(fm) => out.push(PipelineMod::Flow(fm)),
                Message::GroupMod(gm) => out.push(PipelineMod::Group(gm)),
                other => panic!("unexpected {other:?}"),
            }
        }
        msg_type::EXPERIMENTER
            if u32::from_be_bytes([body[4], body[5], body[6], body[7]])
                == ONFT_BUNDLE_ADD_MESSAGE =>
        {
            collect_mods(&body[16..], out)
        }
        _ => {}
    }
}

/// The mods of one capture, in the order ovs-ofctl sent them.
fn wire_mods(capture: &str) -> Vec<PipelineMod> {
    let mut out = Vec::new();
    for stream in client_streams(&sdn_dir().join("pcap").join(capture)).values() {
        let mut pos = 0;
        while pos + 8 <= stream.len() {
            let len = usize::from(u16be(stream, pos + 2));
            collect_mods(&stream[pos..pos + len], &mut out);
            pos += len;
        }
    }
    out
}

fn ports() -> PortNames {
    let mut p = PortNames::new();
    p.insert("vxlan0".into(), 1);
    p.insert("tun0".into(), 2);
    p
}

fn lines(rel: &str) -> Vec<String> {
    let path = sdn_dir().join(rel);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .map(str::to_string)
        .collect()
}

fn flows(rel: &str, command: FlowModCommand) -> Vec<(String, PipelineMod)> {
    let p = ports();
    lines(rel)
        .into_iter()
        .map(|l| {
            let fm =
                parse_flow_command(&l, command, Some(&p)).unwrap_or_else(|e| panic!("{l}: {e}"));
            (l, PipelineMod::Flow(fm))
        })
        .collect()
}

fn groups(rel: &str) -> Vec<(String, PipelineMod)> {
    let p = ports();
    lines(rel)
        .into_iter()
        .map(|l| {
            let gm = parse_group_with(&l, &p).unwrap_or_else(|e| panic!("{l}: {e}"));
            (l, PipelineMod::Group(gm))
        })
        .collect()
}

fn bundle(rel: &str) -> Vec<(String, PipelineMod)> {
    let p = ports();
    lines(rel)
        .into_iter()
        .map(|l| {
            let m = parse_bundle_line_with(&l, Some(&p)).unwrap_or_else(|e| panic!("{l}: {e}"));
            (l, m)
        })
        .collect()
}

fn assert_same(capture: &str, text: Vec<(String, PipelineMod)>) {
    let wire = wire_mods(capture);
    assert!(!wire.is_empty(), "{capture}: no mods captured");
    for (i, ((line, ours), theirs)) in text.iter().zip(wire.iter()).enumerate() {
        assert_eq!(ours, theirs, "{capture}: mod {i} differs; text: {line}");
    }
    assert_eq!(text.len(), wire.len(), "{capture}: number of mods");
}

#[test]
fn add_groups_networkpolicy() {
    assert_same(
        "03-add-groups-networkpolicy.pcap.gz",
        groups("validation/groups-networkpolicy.txt"),
    );
}

#[test]
fn add_flows_networkpolicy() {
    assert_same(
        "04-add-flows-networkpolicy.pcap.gz",
        flows("validation/flows-networkpolicy.txt", FlowModCommand::Add),
    );
}

#[test]
fn add_flows_subnet() {
    assert_same(
        "11-add-flows-subnet.pcap.gz",
        flows("validation/flows-subnet.txt", FlowModCommand::Add),
    );
}

#[test]
fn add_flows_multitenant() {
    assert_same(
        "12-add-flows-multitenant.pcap.gz",
        flows("validation/flows-multitenant.txt", FlowModCommand::Add),
    );
}

#[test]
fn del_flows_filtered() {
    // The five `del-flows` arguments of capture 08 (pcap/commands.txt).
    let p = ports();
    let text = [
        "table=100, reg0=2254267",
        "ip, nw_dst=10.128.0.50",
        "arp, nw_src=10.128.0.50",
        "table=10, cookie=0x11c50def/0xffffffff, tun_src=10.0.0.11",
        "table=27, cookie=1147582955/-1",
    ]
    .iter()
    .map(|l| {
        let fm = parse_flow_command(l, FlowModCommand::Delete, Some(&p)).unwrap();
        (l.to_string(), PipelineMod::Flow(fm))
    })
    .collect();
    assert_same("08-del-flows-filtered.pcap.gz", text);
}

#[test]
fn bundle_legacy_subnet() {
    assert_same(
        "14-bundle-legacy-subnet.pcap.gz",
        bundle("pcap/gen/bundle-legacy-subnet.txt"),
    );
}

#[test]
fn coverage_groups_and_flows() {
    let mut text = groups("pcap/gen/groups-coverage.txt");
    text.extend(flows("pcap/gen/flows-coverage.txt", FlowModCommand::Add));
    assert_same("15-coverage.pcap.gz", text);
}

#[test]
fn agent_bundle_transaction() {
    assert_same(
        "16-agent-bundle-stdin.pcap.gz",
        bundle("pcap/gen/agent-tx.txt"),
    );
}
