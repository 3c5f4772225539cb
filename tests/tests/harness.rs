//! Self-test of the harness with a known-good switch, the kernel's own
//! bridge: if these pass and the xbr tests fail, the fault is in xbr.
//! Also shows the traffic checks can fail: without a switch nothing
//! arrives and the tools say so.
//!
//! Needs root; fails (does not skip) without it.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use xbr_tests::{
    run_timeout, udp_send, unique_tag, Pod, Result, UdpReceiver, CMD_TIMEOUT, NAME_PREFIX,
};

const TOOL: &str = env!("CARGO_BIN_EXE_xbr-testtool");
const IP_A: Ipv4Addr = Ipv4Addr::new(10, 128, 0, 2);
const IP_B: Ipv4Addr = Ipv4Addr::new(10, 128, 0, 3);

/// A Linux bridge in the root namespace joining the given host veths; no
/// address and IPv6 off, so the host itself takes no part. Deleted on drop.
struct KernelBridge {
    name: String,
}

fn ip(args: &[&str]) -> Result<()> {
    run_timeout(Command::new("ip").args(args), CMD_TIMEOUT)?.ok()?;
    Ok(())
}

impl KernelBridge {
    fn new(ports: &[&str]) -> Result<Self> {
        let br = KernelBridge {
            name: format!("{NAME_PREFIX}{}", unique_tag()),
        };
        ip(&["link", "add", &br.name, "type", "bridge"])?;
        let knob = format!("net.ipv6.conf.{}.disable_ipv6=1", br.name);
        run_timeout(Command::new("sysctl").args(["-qw", &knob]), CMD_TIMEOUT)?.ok()?;
        for port in ports {
            ip(&["link", "set", port, "master", &br.name])?;
        }
        ip(&["link", "set", &br.name, "up"])?;
        Ok(br)
    }
}

impl Drop for KernelBridge {
    fn drop(&mut self) {
        if let Err(e) = ip(&["link", "del", &self.name]) {
            eprintln!("warning: {e}");
        }
    }
}

fn pods() -> Result<(Pod, Pod)> {
    let a = Pod::new(IP_A, 24, "0a:58:0a:80:00:02")?;
    let b = Pod::new(IP_B, 24, "0a:58:0a:80:00:03")?;
    Ok((a, b))
}

#[test]
fn harness_pods_talk_through_a_kernel_bridge() -> Result<()> {
    let (a, b) = pods()?;
    let _br = KernelBridge::new(&[a.host_if(), b.host_if()])?;
    let ping = a.ping(IP_B, 2)?;
    assert!(
        ping.success(),
        "{}\n{}",
        ping.describe_status(),
        ping.stdout
    );

    a.add_neighbor(&b)?;
    b.add_neighbor(&a)?;
    let dst = SocketAddrV4::new(IP_B, 5001);
    let rx = UdpReceiver::start(Path::new(TOOL), b.ns(), dst, 2_000, Duration::from_secs(10))?;
    assert_eq!(
        udp_send(Path::new(TOOL), a.ns(), dst, 2_000, 20_000)?,
        2_000
    );
    assert_eq!(rx.finish()?, 2_000);
    Ok(())
}

#[test]
fn harness_detects_missing_connectivity() -> Result<()> {
    // Same pods, no bridge: the host veths lead nowhere.
    let (a, b) = pods()?;
    let ping = a.ping(IP_B, 1)?;
    assert_eq!(ping.code(), Some(1), "{}", ping.stdout);

    a.add_neighbor(&b)?;
    let dst = SocketAddrV4::new(IP_B, 5001);
    let rx = UdpReceiver::start(Path::new(TOOL), b.ns(), dst, 50, Duration::from_millis(500))?;
    udp_send(Path::new(TOOL), a.ns(), dst, 50, 1_000)?;
    assert_eq!(rx.finish()?, 0);
    Ok(())
}
