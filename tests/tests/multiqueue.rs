//! A multi-queue port: the device spreads flows over its receive queues
//! (RSS on a NIC, the sender's transmit queue on a veth), and xbr must
//! serve every queue. A queue without an AF_XDP socket would hand its
//! frames to the kernel, and that part of the traffic would bypass the
//! switch (lost, here).
//!
//! Needs root and a built `xbr`, like the skeleton tests. Objects are made
//! per test with unique names and removed by their guards; traffic is
//! bounded and stays between the test's namespaces.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::time::Duration;
use xbr_tests::{
    run_timeout, udp_send_flows, HarnessError, Pod, Result, UdpReceiver, Xbr, CMD_TIMEOUT,
};

const TOOL: &str = env!("CARGO_BIN_EXE_xbr-testtool");
const IP_A: Ipv4Addr = Ipv4Addr::new(10, 128, 0, 2);
const IP_B: Ipv4Addr = Ipv4Addr::new(10, 128, 0, 3);
const MAC_A: &str = "0a:58:0a:80:00:02";
const MAC_B: &str = "0a:58:0a:80:00:03";
const QUEUES: u32 = 4;
/// Flows (source ports): enough that the queues' share is never all one.
const FLOWS: usize = 32;
const COUNT: u64 = 2_000;
const RATE: u64 = 4_000;

/// Packets each receive queue of `dev` ran its XDP program on (from
/// veth's per-queue statistics).
fn xdp_packets_per_queue(dev: &str) -> Result<Vec<u64>> {
    let out = run_timeout(
        std::process::Command::new("ethtool").args(["-S", dev]),
        CMD_TIMEOUT,
    )?
    .ok()?;
    let mut per_queue = vec![0; QUEUES as usize];
    for line in out.stdout.lines() {
        let Some((name, value)) = line.trim().split_once(':') else {
            continue;
        };
        let Some(rest) = name.strip_prefix("rx_queue_") else {
            continue;
        };
        if let Some(q) = rest.strip_suffix("_xdp_packets") {
            let q: usize = q
                .parse()
                .map_err(|_| HarnessError::Unexpected(format!("ethtool line {line:?}")))?;
            if let Some(slot) = per_queue.get_mut(q) {
                *slot = value.trim().parse().unwrap_or(0);
            }
        }
    }
    Ok(per_queue)
}

#[test]
fn every_receive_queue_of_a_port_is_served() -> Result<()> {
    let a = Pod::with_queues(IP_A, 24, MAC_A, QUEUES)?;
    let b = Pod::new(IP_B, 24, MAC_B)?;
    let xbr = Xbr::with_ports(&[(a.host_if(), 1), (b.host_if(), 2)])?;
    xbr.add_flow("in_port=1,actions=output:2")?;
    xbr.add_flow("in_port=2,actions=output:1")?;
    a.add_neighbor(&b)?;
    b.add_neighbor(&a)?;

    let dst = SocketAddrV4::new(IP_B, 5001);
    let rx = UdpReceiver::start(Path::new(TOOL), b.ns(), dst, COUNT, Duration::from_secs(20))?;
    let sent = udp_send_flows(Path::new(TOOL), a.ns(), dst, COUNT, RATE, FLOWS, 0)?;
    let got = rx.finish()?;
    let per_queue = xdp_packets_per_queue(a.host_if())?;
    let busy = per_queue.iter().filter(|&&n| n > 0).count();
    assert!(
        busy >= 2,
        "the flows did not spread over the queues ({per_queue:?}): the test proves nothing"
    );
    assert_eq!(
        got,
        sent,
        "{sent} sent over {busy} queues ({per_queue:?} per queue), {got} arrived\n{}",
        xbr.log()
    );
    Ok(())
}
