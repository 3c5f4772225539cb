//! Forwarding that outlives the process, and pod ports that fail closed
//! (docs/pinning.md): xbr pins its ports' XDP programs and flow cache in
//! the BPF filesystem, so that while no xbr runs cached flows keep
//! forwarding and nothing a pod sends reaches the node's own stack; the
//! next xbr adopts what it finds, refuses a layout from an incompatible
//! build, and a teardown leaves nothing pinned or attached.
//!
//! Needs root and a built `xbr` (see skeleton.rs). xbr runs in the root
//! namespace (the harness gives each test its own pin root under
//! /sys/fs/bpf, removed on drop); pods are namespaces behind veths.

use nix::sys::signal::Signal;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::path::Path;
use std::time::{Duration, Instant};
use xbr_tests::{
    link_has_xdp, run_timeout, start_xdp_pair, udp_send, udp_send_from, unique_tag, xdp_pods,
    HarnessError, Pod, Result, UdpReceiver, Xbr, BRIDGE, CMD_TIMEOUT, NAME_PREFIX, POD_IF,
};

const TOOL: &str = env!("CARGO_BIN_EXE_xbr-testtool");

const PAIR_FLOWS: &[&str] = &["in_port=1,actions=output:2", "in_port=2,actions=output:1"];
const SRC_PORT: u16 = 40001;
const DST_PORT: u16 = 5001;

/// An address the node owns: on a veth whose both ends are in the root
/// namespace (a stand-in for a node's NIC; unique names and address per
/// test), deleted on drop.
struct NodeAddr {
    dev: String,
    ip: Ipv4Addr,
}

impl NodeAddr {
    fn new() -> Result<NodeAddr> {
        let dev = format!("{NAME_PREFIX}{}", unique_tag());
        // 10.252.X.Y from the tag, away from every pod subnet the tests use.
        let h = dev
            .bytes()
            .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(b.into()));
        let ip = Ipv4Addr::new(10, 252, (h >> 8) as u8 % 250 + 1, h as u8 % 250 + 1);
        let peer = format!("{NAME_PREFIX}{}", unique_tag());
        ip_ok(&["link", "add", &dev, "type", "veth", "peer", "name", &peer])?;
        let node = NodeAddr { dev, ip };
        ip_ok(&["addr", "add", &format!("{ip}/32"), "dev", &node.dev])?;
        ip_ok(&["link", "set", &node.dev, "up"])?;
        Ok(node)
    }
}

impl Drop for NodeAddr {
    fn drop(&mut self) {
        let _ = ip_ok(&["link", "del", &self.dev]);
    }
}

fn ip_ok(args: &[&str]) -> Result<String> {
    Ok(
        run_timeout(std::process::Command::new("ip").args(args), CMD_TIMEOUT)?
            .ok()?
            .stdout,
    )
}

/// Datagrams `sock` receives within `window`.
fn received(sock: &UdpSocket, window: Duration) -> u64 {
    let deadline = Instant::now() + window;
    let mut buf = [0u8; 2048];
    let mut n = 0;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        if left.is_zero() || sock.set_read_timeout(Some(left)).is_err() {
            break;
        }
        if sock.recv(&mut buf).is_ok() {
            n += 1;
        }
    }
    n
}

fn mac_of(dev: &str) -> Result<String> {
    std::fs::read_to_string(format!("/sys/class/net/{dev}/address"))
        .map(|s| s.trim().to_string())
        .map_err(|e| HarnessError::Unexpected(format!("MAC of {dev}: {e}")))
}

/// `xbr stats br0` of a running xbr.
fn stats(xbr: &Xbr) -> Result<String> {
    xbr.client_ok(&["stats", BRIDGE])
}

/// The number after `fail-closed drops (no socket bound): ` in `stats`.
fn closed_drops(stats: &str) -> Option<u64> {
    stats
        .lines()
        .find_map(|l| l.strip_prefix("fail-closed drops (no socket bound): "))
        .and_then(|n| n.trim().parse().ok())
}

/// What the pod's neighbour table says about `ip`.
fn pod_neigh(pod: &Pod, ip: Ipv4Addr) -> Result<String> {
    let out = pod
        .ns()
        .exec(&["ip", "neigh", "show", &ip.to_string()], CMD_TIMEOUT)?
        .ok()?;
    Ok(out.stdout)
}

/// While no xbr runs, a pod sends ARP and IP to an address the node owns,
/// by ARP and then straight to the host-side veth's MAC: nothing reaches
/// the node (rp_filter off on that veth, and a positive control before
/// xbr ever ran shows the same traffic does reach it without xbr's
/// program). The program counted the drops, and the next xbr reports them.
#[test]
fn pod_frames_never_reach_the_node_while_no_xbr_runs() -> Result<()> {
    let pod = Pod::new(Ipv4Addr::new(10, 128, 0, 2), 24, "0a:58:0a:80:00:02")?;
    let node = NodeAddr::new()?;
    let host_if = pod.host_if().to_string();
    let host_mac = mac_of(&host_if)?;
    let sysctl = format!("net.ipv4.conf.{host_if}.rp_filter=0");
    run_timeout(
        std::process::Command::new("sysctl").args(["-qw", &sysctl]),
        CMD_TIMEOUT,
    )?
    .ok()?;
    pod.exec_ok(&[
        "ip",
        "route",
        "add",
        &format!("{}/32", node.ip),
        "dev",
        POD_IF,
    ])?;
    let listener = UdpSocket::bind(SocketAddrV4::new(node.ip, DST_PORT))
        .map_err(|e| HarnessError::Unexpected(format!("binding {}:{DST_PORT}: {e}", node.ip)))?;
    let dst = SocketAddrV4::new(node.ip, DST_PORT);
    let tool = Path::new(TOOL);
    const N: u64 = 20;

    // Positive control: no program on the veth, the node gets the pod's
    // datagrams and answers its ARP.
    udp_send(tool, pod.ns(), dst, N, 100)?;
    let got = received(&listener, Duration::from_secs(1));
    assert!(
        got > 0,
        "control: without xbr the node got nothing; the check below could not fail"
    );
    assert!(
        pod_neigh(&pod, node.ip)?.contains(&host_mac),
        "control: the node did not answer the pod's ARP: {}",
        pod_neigh(&pod, node.ip)?
    );

    let spec = format!("{host_if}=1");
    let mut xbr = Xbr::start(&["--port", &spec])?;
    let status = xbr.stop(Signal::SIGTERM)?;
    assert!(status.success(), "xbr exited with {status}\n{}", xbr.log());
    assert!(
        link_has_xdp(&host_if)?,
        "the pinned program left {host_if} with xbr\n{}",
        xbr.log()
    );

    // ARP: the pod must resolve the node's address itself.
    pod.exec_ok(&["ip", "neigh", "flush", "dev", POD_IF])?;
    ip_ok(&["neigh", "flush", "dev", &host_if])?;
    udp_send(tool, pod.ns(), dst, N, 100)?;
    assert_eq!(
        received(&listener, Duration::from_secs(2)),
        0,
        "datagrams reached the node through ARP while no xbr ran"
    );
    let neigh = pod_neigh(&pod, node.ip)?;
    assert!(
        !neigh.contains(&host_mac),
        "the node answered the pod's ARP while no xbr ran: {neigh}"
    );
    let host_neigh = ip_ok(&["neigh", "show", "dev", &host_if])?;
    assert!(
        !host_neigh.contains("10.128.0.2"),
        "the node learnt the pod from its ARP while no xbr ran: {host_neigh}"
    );

    // IP straight to the host-side veth's own MAC.
    pod.exec_ok(&[
        "ip",
        "neigh",
        "replace",
        &node.ip.to_string(),
        "lladdr",
        &host_mac,
        "dev",
        POD_IF,
        "nud",
        "permanent",
    ])?;
    udp_send(tool, pod.ns(), dst, N, 100)?;
    assert_eq!(
        received(&listener, Duration::from_secs(2)),
        0,
        "datagrams to the host-side veth's MAC reached the node while no xbr ran"
    );

    // The next xbr adopts the program and reports what it dropped.
    xbr.restart(&["--port", &spec])?;
    let text = stats(&xbr)?;
    let drops = closed_drops(&text).unwrap_or(0);
    assert!(
        drops >= N,
        "fewer fail-closed drops than the {N} datagrams sent to the MAC:\n{text}"
    );
    assert!(
        text.contains(&format!(
            "(adopted from xbr {}: 1 port links",
            env!("CARGO_PKG_VERSION")
        )),
        "{text}"
    );
    Ok(())
}

/// Two pods on one xbr with the pair's flows, the XDP flow cache
/// redirecting to both (A's TX checksum offload off).
fn cached_pair() -> Result<(Pod, Pod, Xbr)> {
    let (a, b) = xdp_pods()?;
    a.exec_ok(&["ethtool", "-K", POD_IF, "tx", "off"])?;
    a.add_neighbor(&b)?;
    b.add_neighbor(&a)?;
    let xbr = start_xdp_pair(&a, &b, "on", PAIR_FLOWS)?;
    Ok((a, b, xbr))
}

/// 100 datagrams from A's `src_port` to B at 1000/s, every one delivered.
fn hundred_delivered(a: &Pod, b: &Pod, src_port: u16, xbr: &Xbr) -> Result<()> {
    let tool = Path::new(TOOL);
    let dst = SocketAddrV4::new(b.ip(), DST_PORT);
    let rx = UdpReceiver::start(tool, b.ns(), dst, 100, Duration::from_secs(10))?;
    udp_send_from(tool, a.ns(), src_port, dst, 100, 1000)?;
    assert_eq!(rx.finish()?, 100, "{}", xbr.log());
    Ok(())
}

/// A paced stream the kernel path carries loses nothing while xbr is
/// stopped with SIGTERM (the cached flow keeps forwarding), and the same
/// binary started again adopts the pinned state and says so.
#[test]
fn a_cached_flow_keeps_forwarding_across_sigterm_and_a_restart_adopts() -> Result<()> {
    let (a, b, mut xbr) = cached_pair()?;
    let tool = Path::new(TOOL);
    let dst = SocketAddrV4::new(b.ip(), DST_PORT);

    // The flow is cached (the kernel path carries it).
    hundred_delivered(&a, &b, SRC_PORT, &xbr)?;
    let dump = xbr.client_ok(&["dpctl", "dump-flows", BRIDGE])?;
    assert!(
        dump.contains(&format!("dst={}", b.ip())) && dump.contains("proto=17"),
        "no kernel entry for the stream:\n{dump}"
    );

    // 3000 datagrams over 3 s; xbr is stopped 1 s in.
    const N: u64 = 3000;
    let rx = UdpReceiver::start(tool, b.ns(), dst, N, Duration::from_secs(15))?;
    let sent = std::thread::scope(|s| -> Result<u64> {
        let sender = s.spawn(|| udp_send_from(tool, a.ns(), SRC_PORT, dst, N, 1000));
        std::thread::sleep(Duration::from_secs(1));
        let status = xbr.stop(Signal::SIGTERM)?;
        assert!(status.success(), "xbr exited with {status}\n{}", xbr.log());
        sender
            .join()
            .map_err(|_| HarnessError::Unexpected("sender panicked".into()))?
    })?;
    assert_eq!(sent, N);
    let got = rx.finish()?;
    assert_eq!(
        got,
        N,
        "{} of {N} lost while xbr stopped\n{}",
        N - got,
        xbr.log()
    );
    for dev in [a.host_if(), b.host_if()] {
        assert!(link_has_xdp(dev)?, "{dev} lost its program with xbr");
    }

    // The same binary again: it adopts, reports from which version, and
    // takes over (its own tables decide from now on).
    let specs = [
        format!("{}=1,xdp_redirect=on", a.host_if()),
        format!("{}=2,xdp_redirect=on", b.host_if()),
    ];
    let args = [
        "--xdp-cache",
        "on",
        "--port",
        specs[0].as_str(),
        "--port",
        specs[1].as_str(),
    ];
    xbr.restart(&args)?;
    let version = env!("CARGO_PKG_VERSION");
    let log = xbr_tests::strip_ansi(&xbr.log());
    assert!(
        log.contains(&format!("adopting the pinned XDP state of xbr {version}")),
        "{log}"
    );
    let text = stats(&xbr)?;
    assert!(
        text.contains(&format!(
            "(adopted from xbr {version}: 2 port links, cache maps adopted"
        )),
        "{text}"
    );
    // Without a saved state the tables start empty (fail mode secure);
    // flows put back are forwarded at once.
    for f in PAIR_FLOWS {
        xbr.add_flow(f)?;
    }
    hundred_delivered(&a, &b, SRC_PORT + 1, &xbr)?;
    Ok(())
}

/// The same after SIGKILL: nothing runs at the process's end, and the
/// pinned program and cache forward the cached flow all the same.
#[test]
fn a_cached_flow_keeps_forwarding_after_sigkill() -> Result<()> {
    let (a, b, mut xbr) = cached_pair()?;
    let tool = Path::new(TOOL);
    let dst = SocketAddrV4::new(b.ip(), DST_PORT);
    hundred_delivered(&a, &b, SRC_PORT, &xbr)?;

    xbr.stop(Signal::SIGKILL)?;
    const N: u64 = 1000;
    let rx = UdpReceiver::start(tool, b.ns(), dst, N, Duration::from_secs(10))?;
    assert_eq!(udp_send_from(tool, a.ns(), SRC_PORT, dst, N, 1000)?, N);
    let got = rx.finish()?;
    assert_eq!(got, N, "{} of {N} lost with xbr killed", N - got);
    // A new flow is not cached: dropped, not handed to anyone.
    let other = SocketAddrV4::new(b.ip(), DST_PORT + 1);
    let rx = UdpReceiver::start(tool, b.ns(), other, 10, Duration::from_secs(2))?;
    udp_send_from(tool, a.ns(), SRC_PORT, other, 10, 100)?;
    assert_eq!(
        rx.finish()?,
        0,
        "an uncached flow was forwarded with xbr killed"
    );
    Ok(())
}

/// Restarted with `--xdp-pin off`, xbr removes what the pinning run left
/// (its programs would keep the ports from attaching), serves the ports,
/// and leaves nothing when it stops.
#[test]
fn a_start_without_pinning_removes_what_a_pinning_run_left() -> Result<()> {
    let (a, b) = xdp_pods()?;
    a.add_neighbor(&b)?;
    b.add_neighbor(&a)?;
    let mut xbr = start_xdp_pair(&a, &b, "on", PAIR_FLOWS)?;
    xbr.stop(Signal::SIGTERM)?;
    assert!(xbr.pin_root().join(BRIDGE).exists());
    let specs = [
        format!("{}=1,xdp_redirect=on", a.host_if()),
        format!("{}=2,xdp_redirect=on", b.host_if()),
    ];
    xbr.restart(&["--xdp-pin", "off", "--port", &specs[0], "--port", &specs[1]])?;
    let log = xbr_tests::strip_ansi(&xbr.log());
    assert!(
        log.contains("pinning is off: removed the pinned XDP state an earlier xbr left"),
        "{log}"
    );
    assert!(!xbr.pin_root().join(BRIDGE).exists());
    for f in PAIR_FLOWS {
        xbr.add_flow(f)?;
    }
    let out = a.ping(b.ip(), 3)?;
    assert!(out.success(), "{}\n{}", out.stdout, xbr.log());
    let status = xbr.stop(Signal::SIGTERM)?;
    assert!(status.success(), "{status}\n{}", xbr.log());
    for dev in [a.host_if(), b.host_if()] {
        assert!(!link_has_xdp(dev)?, "{dev} kept an unpinned program");
    }
    Ok(())
}

/// A pin directory whose layout record says another layout (an
/// incompatible build) is refused with a message naming it, and xbr
/// starts clean: new record, new programs, working ports.
#[test]
fn a_pinned_layout_from_an_incompatible_build_is_refused_and_xbr_starts_clean() -> Result<()> {
    use libbpf_rs::{MapCore, MapFlags, MapHandle};
    let (a, b) = xdp_pods()?;
    a.add_neighbor(&b)?;
    b.add_neighbor(&a)?;
    let mut xbr = start_xdp_pair(&a, &b, "on", PAIR_FLOWS)?;
    let status = xbr.stop(Signal::SIGTERM)?;
    assert!(status.success(), "xbr exited with {status}\n{}", xbr.log());

    let record = xbr.pin_root().join(BRIDGE).join("xbr_layout");
    let map = MapHandle::from_pinned_path(&record)
        .map_err(|e| HarnessError::Unexpected(format!("{}: {e}", record.display())))?;
    let key = 0u32.to_ne_bytes();
    let mut value = map
        .lookup(&key, MapFlags::ANY)
        .ok()
        .flatten()
        .ok_or_else(|| HarnessError::Unexpected("empty layout record".into()))?;
    // Bytes 8..12: the layout number.
    value[8..12].copy_from_slice(&0xdeadu32.to_ne_bytes());
    map.update(&key, &value, MapFlags::ANY)
        .map_err(|e| HarnessError::Unexpected(format!("faking the layout: {e}")))?;
    drop(map);

    let specs = [
        format!("{}=1,xdp_redirect=on", a.host_if()),
        format!("{}=2,xdp_redirect=on", b.host_if()),
    ];
    xbr.restart(&["--port", &specs[0], "--port", &specs[1]])?;
    let log = xbr_tests::strip_ansi(&xbr.log());
    assert!(
        log.contains("pinned XDP state is from an incompatible xbr (layout 57005 of xbr")
            && log.contains("starting clean"),
        "no clear refusal:\n{log}"
    );
    let text = stats(&xbr)?;
    assert!(text.contains("(clean start)"), "{text}");
    for f in PAIR_FLOWS {
        xbr.add_flow(f)?;
    }
    let out = a.ping(b.ip(), 3)?;
    assert!(out.success(), "{}\n{}", out.stdout, xbr.log());
    Ok(())
}

/// Teardown leaves nothing: after SIGKILL the programs stay (pinned,
/// failing closed) until `xbr teardown`; `ovs-appctl exit --cleanup`
/// removes everything as xbr exits; a bad bridge name is refused.
#[test]
fn teardown_leaves_nothing_pinned_or_attached() -> Result<()> {
    let (a, b) = xdp_pods()?;
    let mut xbr = start_xdp_pair(&a, &b, "on", PAIR_FLOWS)?;
    xbr.stop(Signal::SIGKILL)?;
    for dev in [a.host_if(), b.host_if()] {
        assert!(
            link_has_xdp(dev)?,
            "{dev} lost its pinned program on SIGKILL"
        );
    }
    let out = xbr.teardown()?;
    assert!(out.success(), "{}", out.into_error());
    assert!(
        out.stdout.contains("removed 7 pinned objects"),
        "{}",
        out.stdout
    );
    for dev in [a.host_if(), b.host_if()] {
        assert!(!link_has_xdp(dev)?, "{dev} kept a program after teardown");
    }
    assert!(
        !xbr.pin_root().exists(),
        "teardown left {}",
        xbr.pin_root().display()
    );

    // ovs-appctl exit --cleanup, as OVS removes its datapaths.
    let specs = [
        format!("{}=1,xdp_redirect=on", a.host_if()),
        format!("{}=2,xdp_redirect=on", b.host_if()),
    ];
    xbr.restart(&["--port", &specs[0], "--port", &specs[1]])?;
    // The pid file of the killed xbr is there until the new one serves
    // ovs-appctl.
    let want = xbr.pid().map(|p| p.to_string()).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(10);
    let pid = loop {
        let pid =
            std::fs::read_to_string(xbr.rundir().join("ovs-vswitchd.pid")).unwrap_or_default();
        if pid.trim() == want || Instant::now() >= deadline {
            break pid;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let target = xbr
        .rundir()
        .join(format!("ovs-vswitchd.{}.ctl", pid.trim()));
    run_timeout(
        std::process::Command::new("ovs-appctl")
            .arg("-t")
            .arg(&target)
            .args(["exit", "--cleanup"]),
        CMD_TIMEOUT,
    )?
    .ok()?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while xbr.is_running() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = xbr.stop(Signal::SIGTERM)?;
    assert!(status.success(), "{status}\n{}", xbr.log());
    for dev in [a.host_if(), b.host_if()] {
        assert!(
            !link_has_xdp(dev)?,
            "{dev} kept a program after exit --cleanup"
        );
    }
    assert!(
        !xbr.pin_root().join(BRIDGE).exists(),
        "exit --cleanup left {}",
        xbr.pin_root().display()
    );

    let mut bad = std::process::Command::new(Xbr::binary()?);
    bad.args(["teardown", "--bridge", "..", "--bpf-pin-root"])
        .arg(xbr.pin_root());
    let out = run_timeout(&mut bad, CMD_TIMEOUT)?;
    assert_eq!(out.code(), Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("'..' is not valid"), "{}", out.stderr);
    Ok(())
}
