//! Port I/O against real kernel objects: veth pairs in private network
//! namespaces, the XDP program, AF_XDP sockets sharing one UMEM, and TAP
//! devices. Needs root (CI runs as root), iproute2 and ping.
//!
//! Every test makes its own namespaces and links, named after the process
//! id and a counter so parallel tests and concurrent runs never collide,
//! and a guard deletes them even when an assertion fails. Traffic stays
//! inside those namespaces, and every wait is bounded.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use dataplane::fastpath::loader::{XdpAttachMode, XdpModeRequest, XdpProgram};
use dataplane::netdev;
use dataplane::tap::TapPort;
use dataplane::xsk::{FramePool, Umem, XdpDesc, XskConfig, XskSocket};

static COUNTER: AtomicU32 = AtomicU32::new(0);

fn unique() -> (u32, u32) {
    (std::process::id(), COUNTER.fetch_add(1, Ordering::SeqCst))
}

/// Runs a command; `Err` carries its stderr.
fn run(args: &[&str]) -> Result<String, String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{args:?}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

fn must(args: &[&str]) -> String {
    run(args).unwrap_or_else(|e| panic!("{e}"))
}

fn ns_exec<'a>(ns: &'a str, args: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["ip", "netns", "exec", ns];
    v.extend_from_slice(args);
    v
}

fn ns_counter(ns: &str, dev: &str, stat: &str) -> u64 {
    let path = format!("/sys/class/net/{dev}/statistics/{stat}");
    must(&ns_exec(ns, &["cat", &path]))
        .trim()
        .parse()
        .expect("counter is a number")
}

/// One "pod": a namespace holding `eth0`, whose veth peer `host` sits in
/// the test's namespace. Dropping it deletes both.
struct Pod {
    ns: String,
    host: String,
    ip: String,
    mac: String,
}

impl Pod {
    fn new(tag: char, octet: u8) -> Pod {
        let (pid, n) = unique();
        let pod = Pod {
            ns: format!("xbrt-{pid}-{n}-{tag}"),
            host: format!("xv{}{n}{tag}", pid % 1_000_000),
            ip: format!("10.213.{}.{octet}", n % 250),
            mac: format!("0a:58:0a:d5:{:02x}:{octet:02x}", n % 250),
        };
        must(&["ip", "netns", "add", &pod.ns]);
        // From here on `Drop` cleans up whatever was created.
        must(&[
            "ip", "link", "add", &pod.host, "type", "veth", "peer", "name", "eth0", "netns",
            &pod.ns,
        ]);
        let sysctl = format!("net.ipv6.conf.{}.disable_ipv6=1", pod.host);
        must(&["sysctl", "-qw", &sysctl]);
        must(&["ip", "link", "set", &pod.host, "up"]);
        must(&ns_exec(
            &pod.ns,
            &["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"],
        ));
        must(&ns_exec(
            &pod.ns,
            &["ip", "link", "set", "eth0", "address", &pod.mac],
        ));
        let cidr = format!("{}/24", pod.ip);
        must(&ns_exec(
            &pod.ns,
            &["ip", "addr", "add", &cidr, "dev", "eth0"],
        ));
        must(&ns_exec(&pod.ns, &["ip", "link", "set", "eth0", "up"]));
        pod
    }

    /// Makes `ip` reachable from this pod without ARP.
    fn static_neigh(&self, ip: &str, mac: &str) {
        must(&ns_exec(
            &self.ns,
            &[
                "ip",
                "neigh",
                "replace",
                ip,
                "lladdr",
                mac,
                "dev",
                "eth0",
                "nud",
                "permanent",
            ],
        ));
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        // Deleting the namespace deletes eth0 and with it the host-side peer.
        let _ = run(&["ip", "netns", "del", &self.ns]);
        let _ = run(&["ip", "link", "del", &self.host]);
    }
}

fn xdp_attached(dev: &str) -> bool {
    must(&["ip", "-o", "link", "show", "dev", dev]).contains(" xdp")
}

/// Whether `dev`'s program is gone within a few seconds: the link goes
/// with its last file reference, and a child another test thread is
/// forking may hold a copy of ours until it execs (slower on a loaded
/// machine).
fn xdp_detached_soon(dev: &str) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while xdp_attached(dev) {
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    true
}

/// Is `frame` an IPv4 ICMP echo request from `src` to `dst`?
fn is_echo_request(frame: &[u8], src: [u8; 4], dst: [u8; 4]) -> bool {
    frame.len() >= 14 + 20 + 8
        && frame[12..14] == [0x08, 0x00]
        && frame[14 + 9] == 1
        && frame[14 + 12..14 + 16] == src
        && frame[14 + 16..14 + 20] == dst
        && frame[14 + ((frame[14] & 0x0f) as usize) * 4] == 8
}

fn ipv4(s: &str) -> [u8; 4] {
    s.parse::<std::net::Ipv4Addr>()
        .expect("test address")
        .octets()
}

#[test]
fn afxdp_receives_and_forwards_between_veths() {
    const PINGS: usize = 100;
    let a = Pod::new('a', 2);
    let b = Pod::new('b', 3);
    // Pod A believes B is on its link (same /24 numbering is not needed: the
    // static neighbour entry and an on-link route are enough).
    let route = format!("{}/32", b.ip);
    must(&ns_exec(
        &a.ns,
        &["ip", "route", "add", &route, "dev", "eth0"],
    ));
    a.static_neigh(&b.ip, &b.mac);

    let ifa = netdev::ifindex(&a.host).expect("ifindex a");
    let ifb = netdev::ifindex(&b.host).expect("ifindex b");
    let prog = XdpProgram::attach(ifa, XdpModeRequest::Auto, None).expect("attach XDP");
    assert_eq!(
        prog.mode(),
        XdpAttachMode::Native,
        "veth supports native XDP"
    );
    assert!(xdp_attached(&a.host));

    let umem = Umem::new(4096, 4096, false).expect("umem");
    let mut pool = FramePool::new(&umem).expect("pool");
    let cfg = XskConfig {
        rx_size: 512,
        tx_size: 512,
        fill_size: 1024,
        comp_size: 1024,
        ..XskConfig::default()
    };
    let mut rx_sock = XskSocket::bind(ifa, 0, &umem, &cfg).expect("bind a");
    // Second socket on another netdev shares the UMEM (XDP_SHARED_UMEM).
    let mut tx_sock = XskSocket::bind(ifb, 0, &umem, &cfg).expect("bind b, shared UMEM");
    assert_eq!(rx_sock.refill(&mut pool), 1024);
    prog.insert_socket(0, rx_sock.fd()).expect("xskmap insert");
    assert!(
        rx_sock.tx_skb_budget().is_some(),
        "kernel >= 6.17 has XDP_MAX_TX_SKB_BUDGET"
    );

    let b_rx_before = ns_counter(&b.ns, "eth0", "rx_packets");
    let ping = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &a.ns,
            "ping",
            "-q",
            "-n",
            "-c",
            &PINGS.to_string(),
            "-i",
            "0.002",
            "-W",
            "1",
        ])
        .arg(&b.ip)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn ping");
    let mut ping = ChildGuard(ping);

    let (src, dst) = (ipv4(&a.ip), ipv4(&b.ip));
    let mut echo = 0usize;
    let mut forwarded = 0usize;
    let mut completed = 0usize;
    let mut descs = [XdpDesc::default(); 64];
    let deadline = Instant::now() + Duration::from_secs(15);
    while (echo < PINGS || completed < forwarded) && Instant::now() < deadline {
        let n = rx_sock.rx_burst(&mut descs);
        let mut out = Vec::with_capacity(n);
        for d in &descs[..n] {
            let frame = pool.packet(d).expect("received descriptor is valid");
            if is_echo_request(frame, src, dst) {
                echo += 1;
                out.push(*d);
            } else {
                pool.free(d.addr);
            }
        }
        // Forward the echo requests out of B's host veth without copying.
        let queued = tx_sock.tx_burst(&out);
        for d in &out[queued..] {
            pool.free(d.addr);
        }
        forwarded += queued;
        tx_sock.kick_tx().expect("tx kick");
        completed += tx_sock.complete(&mut pool);
        rx_sock.refill(&mut pool);
        if n == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let _ = ping.0.wait();
    assert_eq!(echo, PINGS, "every echo request reached the AF_XDP socket");
    assert_eq!(forwarded, PINGS, "TX ring had room for every frame");
    assert_eq!(completed, forwarded, "every transmitted frame completed");
    let stats = rx_sock.statistics().expect("XDP_STATISTICS");
    assert_eq!(stats.rx_dropped, 0);
    assert_eq!(stats.rx_invalid_descs, 0);
    assert!(tx_sock.counters().tx_kicks > 0);

    // The frames arrived in pod B (bounded wait for the counter to settle).
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut b_rx = 0;
    while Instant::now() < deadline {
        b_rx = ns_counter(&b.ns, "eth0", "rx_packets") - b_rx_before;
        if b_rx >= PINGS as u64 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        b_rx >= PINGS as u64,
        "pod B received {b_rx} of {PINGS} forwarded frames"
    );

    // Closing reclaims every frame lent to the kernel: the pool is whole again.
    prog.remove_socket(0).expect("xskmap remove");
    rx_sock.close(&mut pool);
    tx_sock.close(&mut pool);
    assert_eq!(pool.len(), umem.n_frames() as usize, "no frame lost");

    drop(prog);
    assert!(
        xdp_detached_soon(&a.host),
        "program detached when the link is dropped"
    );
}

#[test]
fn dropping_the_loader_detaches_the_program() {
    let a = Pod::new('a', 2);
    let ifindex = netdev::ifindex(&a.host).expect("ifindex");
    for request in [XdpModeRequest::Native, XdpModeRequest::Generic] {
        let prog = XdpProgram::attach(ifindex, request, None).expect("attach");
        let shown = must(&["ip", "-o", "link", "show", "dev", &a.host]);
        let expect = if request == XdpModeRequest::Native {
            "xdp "
        } else {
            "xdpgeneric"
        };
        assert!(shown.contains(expect), "{request:?}: {shown}");
        assert!(
            XdpProgram::attach(ifindex, request, None).is_err(),
            "a second program is refused, not stacked"
        );
        drop(prog);
        assert!(
            xdp_detached_soon(&a.host),
            "{request:?}: still attached after drop"
        );
    }
}

#[test]
fn bind_rejects_a_busy_queue_and_bad_ring_sizes() {
    let a = Pod::new('a', 2);
    let ifindex = netdev::ifindex(&a.host).expect("ifindex");
    let umem = Umem::new(256, 2048, false).expect("umem");
    let cfg = XskConfig {
        rx_size: 64,
        tx_size: 64,
        fill_size: 128,
        comp_size: 64,
        ..XskConfig::default()
    };
    let _sock = XskSocket::bind(ifindex, 0, &umem, &cfg).expect("bind");
    // Only one socket per (netdev, queue).
    assert!(XskSocket::bind(ifindex, 0, &umem, &cfg).is_err());
    // Ring sizes must be powers of two.
    let bad = XskConfig {
        rx_size: 100,
        ..cfg
    };
    assert!(XskSocket::bind(ifindex, 0, &umem, &bad).is_err());
}

#[test]
fn tap_port_reads_and_writes_frames_and_vanishes_on_drop() {
    let (pid, n) = unique();
    let name = format!("xt{}{n}", pid % 1_000_000);
    let ns = Namespace::new(format!("xbrt-{pid}-{n}-t"));
    let mac = [0x0a, 0x58, 0x0a, 0xd6, 0x00, 0x01];
    let tap = TapPort::create(&name, Some(mac), Some(1400)).expect("create tap");
    let info = tap.info().expect("info");
    assert_eq!((info.mac, info.mtu, info.up), (Some(mac), 1400, true));
    tap.set_mtu(1500).expect("mtu");
    assert_eq!(tap.info().expect("info").mtu, 1500);

    // Give the kernel side an address in a private namespace; our fd keeps
    // working after the move.
    must(&["ip", "link", "set", &name, "netns", &ns.0]);
    must(&ns_exec(
        &ns.0,
        &["ip", "addr", "add", "10.214.0.1/24", "dev", &name],
    ));
    must(&ns_exec(&ns.0, &["ip", "link", "set", &name, "up"]));
    must(&ns_exec(
        &ns.0,
        &[
            "ip",
            "neigh",
            "replace",
            "10.214.0.2",
            "lladdr",
            "0a:58:0a:d6:00:02",
            "dev",
            &name,
        ],
    ));

    // kernel -> xbr: the namespace pings a neighbour behind the tap.
    // Nobody answers, so ping exits non-zero; only its requests matter.
    let _ = run(&ns_exec(
        &ns.0,
        &[
            "ping",
            "-q",
            "-c",
            "3",
            "-i",
            "0.05",
            "-W",
            "1",
            "10.214.0.2",
        ],
    ));
    let mut bufs = vec![[0u8; 2048]; 16];
    let mut lens = [0usize; 16];
    let mut echo = 0;
    let deadline = Instant::now() + Duration::from_secs(5);
    while echo < 3 && Instant::now() < deadline {
        let n = tap.recv_burst(&mut bufs, &mut lens).expect("recv");
        echo += (0..n)
            .filter(|&i| {
                is_echo_request(&bufs[i][..lens[i]], ipv4("10.214.0.1"), ipv4("10.214.0.2"))
            })
            .count();
        if n == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    assert_eq!(echo, 3, "the tap delivered the kernel's frames");

    // xbr -> kernel: 10 broadcast frames with an unused ethertype.
    let before = ns_counter(&ns.0, &name, "rx_packets");
    let mut frame = vec![0xffu8; 6];
    frame.extend_from_slice(&[0x0a, 0x58, 0x0a, 0xd6, 0x00, 0x02, 0x88, 0xb5]);
    frame.resize(60, 0xab);
    let frames = vec![frame; 10];
    assert_eq!(tap.send_burst(&frames).expect("send"), 10);
    assert_eq!(ns_counter(&ns.0, &name, "rx_packets") - before, 10);

    drop(tap);
    assert!(
        run(&ns_exec(&ns.0, &["ip", "link", "show", "dev", &name])).is_err(),
        "tap removed on drop"
    );
}

/// A bare namespace deleted on drop.
struct Namespace(String);

impl Namespace {
    fn new(name: String) -> Namespace {
        must(&["ip", "netns", "add", &name]);
        Namespace(name)
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = run(&["ip", "netns", "del", &self.0]);
    }
}

/// Kills (by its own pid) and reaps a child left running by a failed test.
struct ChildGuard(std::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// A veth pair in the test's namespace, deleted on drop.
struct VethPair(String);

impl Drop for VethPair {
    fn drop(&mut self) {
        let _ = run(&["ip", "link", "del", &self.0]);
    }
}

#[test]
fn a_port_whose_device_uses_fewer_queues_than_it_allocated_gets_full_depth_rings() {
    // A veth created without a queue count allocates one queue per CPU
    // (what netlink reports) but uses one: rings sized for the allocation
    // would give that one a fraction of the depth a single-queue port
    // gets, and lose bursts. (On a one-CPU machine the two agree and this
    // checks the plain single-queue case.)
    let (pid, n) = unique();
    let pair = VethPair(format!("xq{}{n}a", pid % 1_000_000));
    let peer = format!("xq{}{n}b", pid % 1_000_000);
    must(&[
        "ip", "link", "add", &pair.0, "type", "veth", "peer", "name", &peer,
    ]);
    must(&["ip", "link", "set", &pair.0, "up"]);
    must(&["ip", "link", "set", &peer, "up"]);
    let link = netdev::link_by_name(&pair.0).expect("link");
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    assert_eq!(link.rx_queues, cpus, "the allocation netlink reports");

    let umem = Umem::new(16384, 4096, false).expect("umem");
    let spec = dataplane::config::PortSpec {
        name: pair.0.clone(),
        ofport: Some(1),
        port_type: dataplane::config::PortType::System,
        mtu_request: None,
        mac: None,
        vxlan: None,
        xdp_redirect: Default::default(),
        internal_backend: Default::default(),
    };
    let (_, port) = dataplane::ports::open_one(&spec, &umem, None).expect("open");
    let dataplane::ports::Port::Xsk(xsk) = &port else {
        panic!("a system port is an AF_XDP port");
    };
    assert_eq!(xsk.queues(), 1, "one queue in use, one socket");
    assert_eq!(xsk.rx_ring_sizes(), vec![2048], "single-queue depth");
}
