//! Traffic between lab pods: xbr-testtool UDP senders and receivers
//! (numbered packets with a payload pattern the receiver checks) and
//! iperf3 TCP.

use super::sh;
use std::process::Command;
use std::time::Duration;
use xbr_tests::{run_timeout, unique_tag, Background, NAME_PREFIX};

const TOOL: &str = env!("CARGO_BIN_EXE_xbr-testtool");
/// A receiver waits this long for its packets.
const RECV_TIMEOUT_MS: u64 = 4000;

/// A running `xbr-testtool udp-recv` in a lab namespace.
pub struct Receiver {
    proc: Background,
    ready: std::path::PathBuf,
}

impl Receiver {
    pub fn start(netns: &str, bind: &str, count: u64) -> Receiver {
        let ready = std::env::temp_dir().join(format!("{NAME_PREFIX}-ready-{}", unique_tag()));
        let count_s = count.to_string();
        let timeout_s = RECV_TIMEOUT_MS.to_string();
        let ready_s = ready.display().to_string();
        let proc = Background::spawn(Command::new("ip").args([
            "netns",
            "exec",
            netns,
            TOOL,
            "udp-recv",
            "--bind",
            bind,
            "--count",
            &count_s,
            "--timeout-ms",
            &timeout_s,
            "--ready-file",
            &ready_s,
        ]))
        .expect("udp-recv");
        let mut rx = Receiver { proc, ready };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !rx.ready.exists() {
            assert!(
                rx.proc.try_status().is_none() && std::time::Instant::now() < deadline,
                "receiver in {netns} never became ready"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        rx
    }

    /// Distinct test packets that arrived.
    pub fn finish(self) -> u64 {
        let out = self
            .proc
            .wait(Duration::from_millis(RECV_TIMEOUT_MS) + Duration::from_secs(5));
        let _ = std::fs::remove_file(&self.ready);
        assert!(
            matches!(out.code(), Some(0) | Some(1)),
            "udp-recv: {}\n{}",
            out.describe_status(),
            out.stderr
        );
        out.stdout
            .lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .unwrap_or_else(|| panic!("udp-recv printed no count: {}", out.stdout))
    }
}

pub fn udp_send(netns: &str, dst: &str, count: u64) -> u64 {
    let count_s = count.to_string();
    let out = run_timeout(
        Command::new("ip").args([
            "netns", "exec", netns, TOOL, "udp-send", "--dst", dst, "--count", &count_s, "--rate",
            "2000",
        ]),
        Duration::from_secs(15),
    )
    .expect("udp-send");
    assert!(out.success(), "udp-send: {}", out.stderr);
    out.stdout.trim().parse().expect("sent count")
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
