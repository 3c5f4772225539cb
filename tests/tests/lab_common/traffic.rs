//! Traffic between lab pods: xbr-testtool UDP senders and receivers
//! (numbered packets with a payload pattern the receiver checks) and
//! iperf3 TCP.

use super::sh;
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use xbr_tests::{run_timeout, Background, UdpReceiver};

const TOOL: &str = env!("CARGO_BIN_EXE_xbr-testtool");
/// A receiver waits this long for its packets.
const RECV_TIMEOUT: Duration = Duration::from_secs(4);
/// Datagrams per second a sender sends.
const SEND_RATE: u64 = 2000;

/// A running `xbr-testtool udp-recv` in a lab namespace.
pub struct Receiver(UdpReceiver);

impl Receiver {
    pub fn start(netns: &str, bind: &str, count: u64) -> Receiver {
        let bind = bind.parse().expect("bind is IPv4:port");
        Receiver(
            UdpReceiver::start(Path::new(TOOL), netns, bind, count, RECV_TIMEOUT)
                .unwrap_or_else(|e| panic!("udp-recv in {netns}: {e}")),
        )
    }

    /// Distinct test packets that arrived.
    pub fn finish(self) -> u64 {
        self.0.finish().expect("udp-recv")
    }
}

/// Sends `count` test datagrams from `netns` to `dst` (IPv4:port);
/// returns how many were sent.
pub fn udp_send(netns: &str, dst: &str, count: u64) -> u64 {
    let dst = dst.parse().expect("dst is IPv4:port");
    xbr_tests::udp_send(Path::new(TOOL), netns, dst, count, SEND_RATE).expect("udp-send")
}

/// iperf3 TCP from `client_ns` to the server in `server_ns` for 3 s;
/// bits per second received.
pub fn iperf3_tcp(client_ns: &str, server_ns: &str, server_ip: &str) -> f64 {
    let server = Background::spawn(Command::new("ip").args([
        "netns", "exec", server_ns, "iperf3", "-s", "-1", "-p", "5201",
    ]))
    .expect("iperf3 server");
    // The server listens within moments; the client retries briefly.
    let mut last = String::new();
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(200));
        let out = run_timeout(
            Command::new("ip").args([
                "netns", "exec", client_ns, "iperf3", "-c", server_ip, "-p", "5201", "-t", "3",
                "-J",
            ]),
            Duration::from_secs(20),
        )
        .expect("iperf3 client");
        if out.success() {
            let _ = server.wait(Duration::from_secs(5));
            let j: serde_json::Value = serde_json::from_str(&out.stdout).expect("iperf3 -J");
            return j["end"]["sum_received"]["bits_per_second"]
                .as_f64()
                .expect("bits_per_second");
        }
        last = format!("{}\n{}", out.stdout, out.stderr);
        if !last.contains("Connection refused") {
            break;
        }
    }
    let _ = server.wait(Duration::ZERO);
    panic!("iperf3 failed:\n{last}");
}

/// Three pings of `size` bytes from `netns` to `ip`: whether at least two
/// came back (the first may wait for ARP).
pub fn ping_sized(netns: &str, ip: &str, size: &str) -> bool {
    let out = sh(
        "ip",
        &[
            "netns", "exec", netns, "ping", "-n", "-q", "-c", "3", "-i", "0.2", "-w", "3", "-s",
            size, ip,
        ],
    );
    out.stdout.contains(" 0% packet loss") || out.stdout.contains(" 33% packet loss")
}

/// Sets the MTU of the uplink (`eth0`) of the node in `netns`, and leaves
/// xbr's resolver a moment to hear of it (it does at once).
pub fn set_uplink_mtu(netns: &str, mtu: &str) {
    assert!(sh("ip", &["-n", netns, "link", "set", "eth0", "mtu", mtu]).success());
    std::thread::sleep(Duration::from_millis(500));
}
