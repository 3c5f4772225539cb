//! ct_label end to end: flows programmed with the real `ovs-ofctl` label
//! the connections one pod starts when they are committed, and a later
//! table, reached by recirculation, forwards only labelled connections,
//! in both directions; `xbr conntrack dump` shows the label.
//!
//! Needs root (namespaces, veths, XDP), a built `xbr` and `ping`.
//! Without root the test fails with a message saying so.

use std::net::Ipv4Addr;
use xbr_tests::{Pod, Result, Xbr, BRIDGE};

const IP_A: Ipv4Addr = Ipv4Addr::new(10, 128, 0, 2);
const IP_B: Ipv4Addr = Ipv4Addr::new(10, 128, 0, 3);
const IP_C: Ipv4Addr = Ipv4Addr::new(10, 128, 0, 4);

/// Table 0 tracks, then commits what A starts with label bit 0 set and
/// everything else unlabelled; table 1 only sees tracked packets (after
/// recirculation) and forwards those whose connection has bit 0.
const FLOWS: &[&str] = &[
    "table=0, priority=1000, ip, ct_state=-trk, actions=ct(table=0)",
    "table=0, priority=100, ip, ct_state=+trk+new, nw_src=10.128.0.2, actions=ct(commit,exec(set_field:0x1/0x1->ct_label),table=1)",
    "table=0, priority=90, ip, ct_state=+trk+new, actions=ct(commit,table=1)",
    "table=0, priority=80, ip, ct_state=+trk, actions=goto_table:1",
    "table=1, priority=100, ip, ct_label=0x1/0x1, nw_dst=10.128.0.2, actions=output:1",
    "table=1, priority=100, ip, ct_label=0x1/0x1, nw_dst=10.128.0.3, actions=output:2",
    "table=1, priority=100, ip, ct_label=0x1/0x1, nw_dst=10.128.0.4, actions=output:3",
    "table=1, priority=0, actions=drop",
];

#[test]
fn only_connections_labelled_on_commit_pass_the_recirculated_table() -> Result<()> {
    // Drop order: xbr stops before the pods' veths go.
    let a = Pod::new(IP_A, 24, "0a:58:0a:80:00:02")?;
    let b = Pod::new(IP_B, 24, "0a:58:0a:80:00:03")?;
    let c = Pod::new(IP_C, 24, "0a:58:0a:80:00:04")?;
    for (x, y) in [(&a, &b), (&b, &a), (&b, &c), (&c, &b)] {
        x.add_neighbor(y)?;
    }
    let specs = [
        format!("{}=1", a.host_if()),
        format!("{}=2", b.host_if()),
        format!("{}=3", c.host_if()),
    ];
    let args: Vec<&str> = specs.iter().flat_map(|p| ["--port", p.as_str()]).collect();
    let xbr = Xbr::start(&args)?;
    for f in FLOWS {
        xbr.add_flow(f)?;
    }
    let log = || xbr.flows_and_log();

    // The flows dump as OVS prints them.
    let flows = xbr.dump_flows()?;
    assert!(
        flows.contains("exec(load:0x1->NXM_NX_CT_LABEL[0])")
            && flows.contains("ct_label=0x1/0x1,ip,nw_dst=10.128.0.3 actions=output:2"),
        "{}",
        log()
    );

    // A's echo requests are labelled on commit, and B's replies belong to
    // the same connection: both directions pass table 1.
    let out = a.ping(IP_B, 3)?;
    assert!(
        out.success(),
        "A -> B ping: {}\n{}",
        out.describe_status(),
        log()
    );
    // C's and B's own connections are committed without the label.
    assert!(
        !c.ping(IP_B, 2)?.success(),
        "C -> B must be dropped\n{}",
        log()
    );
    assert!(
        !b.ping(IP_C, 2)?.success(),
        "B -> C must be dropped\n{}",
        log()
    );

    let dump = xbr.client(&["conntrack", "dump", BRIDGE])?;
    assert!(dump.success(), "{dump:?}");
    let icmp = |src: Ipv4Addr, dst: Ipv4Addr| {
        let start = format!("icmp,orig=(src={src},dst={dst},id=");
        dump.stdout
            .lines()
            .find(|l| l.starts_with(&start))
            .map(str::to_string)
    };
    let labelled = icmp(IP_A, IP_B).unwrap_or_default();
    assert!(labelled.ends_with(",labels=0x1"), "{}", dump.stdout);
    let plain = icmp(IP_C, IP_B).unwrap_or_default();
    assert!(
        !plain.is_empty() && !plain.contains("labels="),
        "{}",
        dump.stdout
    );
    Ok(())
}
