//! sosreport's openvswitch plugin (sos/report/plugins/openvswitch.py)
//! against xbr: every command it runs against ovs-vswitchd, with the
//! real `ovs-appctl` and `ovs-ofctl`, in the plugin's order, answers
//! (exit status 0, with xbr's content) or is refused as ovs-vswitchd 3.1
//! refuses it on the same switch (the OpenShift node's: no bonds, LACP,
//! CFM or QoS on the ports, a bridge speaking only OpenFlow 1.3).
//!
//! Left out: the plugin's `ovs-vsctl` commands (they ask ovsdb-server,
//! not the switch: tests/ovsdb.rs runs xbr under it), `ovs-dpctl` (the
//! kernel datapath, which xbr does not use), `-t ovs-monitor-ipsec`
//! (another daemon), and the DPDK and 6WIND ones (not configured).
//!
//! Needs root (xbr creates its ports in a namespace of its own) and a
//! built `xbr`, like every end-to-end test.

use std::process::Command;
use xbr_tests::{run_timeout, Netns, Result, Xbr, BRIDGE, CMD_TIMEOUT};

/// What a command must give.
enum Expect {
    /// Exit status 0, stdout containing this.
    Answer(&'static str),
    /// Exit status 2 (ovs-appctl) with ovs-vswitchd's error message.
    Refused(&'static str),
    /// ovs-ofctl's exit status 1 on a failed version negotiation: the
    /// command offers OpenFlow 1.0 only (no `-O`), which the bridge (as
    /// OVS's br0 with `protocols=OpenFlow13`) does not speak.
    OpenFlow10,
}
use Expect::*;

/// The plugin's commands against the switch, `DP` and `BR` and `PORT`
/// standing for what its loops take from `dpctl/dump-dps`, `ovs-vsctl
/// list-br` and `list-ports`; its `-O` loop runs for the bridge's
/// protocols (OpenFlow13 here).
const SOS_COMMANDS: &[(&str, Expect)] = &[
    (
        "ovs-appctl bond/list",
        Answer("bond\ttype\trecircID\tmembers"),
    ),
    ("ovs-appctl bond/show", Answer("")),
    ("ovs-appctl lacp/show", Answer("")),
    ("ovs-appctl lacp/show-stats", Answer("")),
    ("ovs-appctl coverage/show", Answer("ofproto_flow_mod")),
    ("ovs-appctl ovs/route/show", Answer("Route Table:")),
    ("ovs-appctl tnl/arp/show", Answer("IP ")),
    ("ovs-appctl tnl/ports/show -v", Answer("Listening ports:")),
    (
        "ovs-appctl upcall/show",
        Answer("flows         : (current "),
    ),
    ("ovs-appctl dpif-netdev/pmd-rxq-show", Answer("port: p1")),
    (
        "ovs-appctl dpif-netdev/pmd-stats-show",
        Answer("packets received: "),
    ),
    (
        "ovs-appctl dpif-netdev/pmd-perf-show",
        Answer("Rx packets:"),
    ),
    ("ovs-appctl ofproto/list-tunnels", Answer("")),
    (
        "ovs-appctl dpif-netdev/subtable-lookup-prio-get",
        Answer("Available dpcls"),
    ),
    (
        "ovs-appctl dpif-netdev/dpif-impl-get",
        Answer("Available DPIF"),
    ),
    (
        "ovs-appctl dpif-netdev/miniflow-parser-get",
        Answer("Available Optimized"),
    ),
    // The 6WIND section's, and the issue's.
    ("ovs-appctl memory/show", Answer("rules:3")),
    ("ovs-appctl dpctl/dump-dps", Answer("netdev@ovs-netdev\n")),
    (
        "ovs-appctl dpctl/show -s DP",
        Answer("  port 1: p1 (internal)\n    RX packets:"),
    ),
    ("ovs-appctl dpctl/dump-flows -m DP", Answer("entries: ")),
    ("ovs-appctl dpctl/dump-conntrack -m DP", Answer("zone=1")),
    (
        "ovs-appctl dpctl/ct-stats-show -m DP",
        Answer("Connections Stats:"),
    ),
    (
        "ovs-appctl dpctl/ipf-get-status DP",
        Answer("Fragmentation Module Status"),
    ),
    (
        "ovs-appctl bridge/dump-flows --offload-stats BR",
        Answer(",actions=output:2\n"),
    ),
    (
        "ovs-appctl dpif/show-dp-features BR",
        Answer("CT state: Yes"),
    ),
    ("ovs-appctl fdb/show BR", Answer(" port  VLAN  MAC")),
    (
        "ovs-appctl fdb/stats-show BR",
        Answer("Current/maximum MAC entries"),
    ),
    ("ovs-appctl mdb/show BR", Answer(" port  VLAN  GROUP")),
    ("ovs-ofctl dump-flows BR", OpenFlow10),
    ("ovs-ofctl dump-ports-desc BR", OpenFlow10),
    ("ovs-ofctl dump-ports BR", OpenFlow10),
    ("ovs-ofctl queue-get-config BR", OpenFlow10),
    ("ovs-ofctl queue-stats BR", OpenFlow10),
    ("ovs-ofctl show BR", OpenFlow10),
    (
        "ovs-ofctl -O OpenFlow13 show BR",
        Answer("OFPT_FEATURES_REPLY (OF1.3)"),
    ),
    (
        "ovs-ofctl -O OpenFlow13 dump-groups BR",
        Answer("OFPST_GROUP_DESC reply"),
    ),
    (
        "ovs-ofctl -O OpenFlow13 dump-group-stats BR",
        Answer("OFPST_GROUP reply"),
    ),
    (
        "ovs-ofctl -O OpenFlow13 dump-flows BR",
        Answer("actions=output:2"),
    ),
    (
        "ovs-ofctl -O OpenFlow13 dump-tlv-map BR",
        Answer("max option space=0 max fields=0"),
    ),
    (
        "ovs-ofctl -O OpenFlow13 dump-ports-desc BR",
        Answer(" 1(p1): addr:"),
    ),
    ("ovs-appctl cfm/show PORT", Refused("no such interface")),
    (
        "ovs-appctl qos/show PORT",
        Refused("QoS not configured on p1"),
    ),
    ("ovs-appctl bond/show PORT", Refused("no such bond")),
];

#[test]
fn every_command_of_sosreports_openvswitch_plugin_is_answered_as_ovs_answers() -> Result<()> {
    xbr_tests::require_tool("ovs-appctl")?;
    xbr_tests::require_tool("ovs-ofctl")?;
    let ns = Netns::new()?;
    let xbr = Xbr::start_in(
        ns,
        &[
            "--port",
            "p1=1,type=internal",
            "--port",
            "p2=2,type=internal",
        ],
    )?;
    xbr.add_flow("table=0, priority=300, ip, ct_state=-trk, actions=ct(table=0,zone=1)")?;
    xbr.add_flow("table=0, priority=100, ip, ct_state=+trk, actions=ct(commit,zone=1),output:2")?;
    xbr.add_flow("table=0, priority=10, in_port=1, actions=output:2")?;
    // A connection to dump: a datagram from p1's side of the namespace.
    let ns = xbr.netns().expect("in a namespace");
    ns.exec(
        &["ip", "addr", "add", "10.9.0.1/24", "dev", "p1"],
        CMD_TIMEOUT,
    )?
    .ok()?;
    ns.exec(&["ip", "link", "set", "p1", "up"], CMD_TIMEOUT)?
        .ok()?;
    ns.exec(
        &[
            "ip",
            "neigh",
            "replace",
            "10.9.0.2",
            "lladdr",
            "02:00:00:00:00:02",
            "dev",
            "p1",
        ],
        CMD_TIMEOUT,
    )?
    .ok()?;
    let _ = ns.exec(&["ping", "-c", "1", "-W", "1", "10.9.0.2"], CMD_TIMEOUT)?;

    let dps = run(&xbr, "ovs-appctl dpctl/dump-dps")?;
    let dp = dps.stdout.lines().next().unwrap_or("").to_string();
    let mut failures = Vec::new();
    for (command, expect) in SOS_COMMANDS {
        let line = command
            .replace(" DP", &format!(" {dp}"))
            .replace(" BR", &format!(" {BRIDGE}"))
            .replace(" PORT", " p1");
        let out = run(&xbr, &line)?;
        let ok = match expect {
            Answer(text) => out.success() && out.stdout.contains(text),
            Refused(text) => out.code() == Some(2) && out.stderr.contains(text),
            OpenFlow10 => {
                out.code() == Some(1) && out.stderr.contains("version negotiation failed")
            }
        };
        if !ok {
            failures.push(format!("{line}: {out:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{}\n{}",
        failures.join("\n"),
        xbr.log()
    );
    Ok(())
}

/// Runs one of the plugin's command lines with `OVS_RUNDIR` at xbr's.
fn run(xbr: &Xbr, line: &str) -> Result<xbr_tests::CmdOutput> {
    let mut words = line.split_whitespace();
    let program = words.next().expect("a program");
    let mut cmd = Command::new(program);
    cmd.args(words).env("OVS_RUNDIR", xbr.rundir());
    run_timeout(&mut cmd, CMD_TIMEOUT)
}
