//! `--pmd-cores`: the packet thread on the first CPU, transmit threads
//! (the kernel's half of AF_XDP transmits, see `dataplane::kicker`) on
//! the others. Traffic must cross as with one thread, every kick must be
//! the transmit threads', a port removed while running must let go of
//! its socket at once (or adding it again would fail), and bad lists are
//! refused with exit code 2.
//!
//! Needs root, two CPUs (the CI machine has two) and a built `xbr`, like
//! every end-to-end test.

use std::net::SocketAddrV4;
use std::path::Path;
use std::time::Duration;
use xbr_tests::{thread_cpus, udp_send, Pod, Result, UdpReceiver, Xbr, BRIDGE};

const TOOL: &str = env!("CARGO_BIN_EXE_xbr-testtool");
/// Through the AF_XDP path every packet: the XDP flow cache off.
const ARGS: [&str; 4] = ["--pmd-cores", "0,1", "--xdp-cache", "off"];
const COUNT: u64 = 5_000;
const RATE: u64 = 10_000;
const TIMEOUT: Duration = Duration::from_secs(30);

/// Pods `first` and `first + 1` on an xbr with `ARGS`, as ports 1 and 2
/// patched to each other; their port specs, for adding one again.
fn patched_pair(first: u8) -> Result<(Xbr, Pod, Pod, [String; 2])> {
    let a = Pod::numbered(first)?;
    let b = Pod::numbered(first + 1)?;
    let specs = [format!("{}=1", a.host_if()), format!("{}=2", b.host_if())];
    let mut args = ARGS.to_vec();
    args.extend(["--port", &specs[0], "--port", &specs[1]]);
    let xbr = Xbr::start(&args)?;
    xbr.add_flow("in_port=1,actions=output:2")?;
    xbr.add_flow("in_port=2,actions=output:1")?;
    a.add_neighbor(&b)?;
    b.add_neighbor(&a)?;
    Ok((xbr, a, b, specs))
}

/// `(sockets, kicks)` of the transmit thread on `cpu`, from `xbr stats`.
fn transmit_thread(stats: &str, cpu: usize) -> Option<(u64, u64)> {
    let line = stats
        .lines()
        .find_map(|l| l.strip_prefix(&format!("transmit thread on CPU {cpu}: ")))?;
    let field = |name: &str| {
        line.split(", ")
            .find_map(|f| f.strip_prefix(name))
            .and_then(|n| n.parse::<u64>().ok())
    };
    Some((field("sockets: ")?, field("kicks: ")?))
}

/// Sends `COUNT` UDP packets from `from` to `to` and returns how many
/// arrived.
fn udp_across(from: &Pod, to: &Pod) -> Result<u64> {
    let dst = SocketAddrV4::new(to.ip(), 5001);
    let rx = UdpReceiver::start(Path::new(TOOL), to.ns(), dst, COUNT, TIMEOUT)?;
    let sent = udp_send(Path::new(TOOL), from.ns(), dst, COUNT, RATE)?;
    assert_eq!(sent, COUNT);
    rx.finish()
}

#[test]
fn transmit_threads_kick_every_port_and_traffic_crosses() -> Result<()> {
    let (xbr, a, b, _) = patched_pair(2)?;
    let pid = xbr.pid().expect("xbr runs");
    assert_eq!(thread_cpus(pid, "xbr-pmd").as_deref(), Some("0"));
    assert_eq!(thread_cpus(pid, "xbr-tx1").as_deref(), Some("1"));

    let before = xbr.client_ok(&["stats", BRIDGE])?;
    let (sockets, kicks_before) = transmit_thread(&before, 1).expect(&before);
    assert_eq!(sockets, 2, "{before}");
    for (from, to) in [(&a, &b), (&b, &a)] {
        let got = udp_across(from, to)?;
        assert_eq!(got, COUNT, "{got} of {COUNT} arrived\n{}", xbr.log());
    }
    let out = a.ping(b.ip(), 2)?;
    assert!(out.success(), "ping: {}\n{}", out.stdout, xbr.log());

    let after = xbr.client_ok(&["stats", BRIDGE])?;
    let (_, kicks) = transmit_thread(&after, 1).expect(&after);
    // The packet thread's sendto() calls would not be counted here: the
    // transmit thread made the kicks (at least one per few batches).
    assert!(
        kicks >= kicks_before + 2 * COUNT / 256,
        "{kicks_before} -> {kicks} kicks for {} packets:\n{after}",
        2 * COUNT
    );
    Ok(())
}

#[test]
fn a_port_removed_while_running_releases_its_socket_at_once() -> Result<()> {
    let (xbr, a, b, specs) = patched_pair(4)?;
    for round in 0..3 {
        assert_eq!(udp_across(&a, &b)?, COUNT, "round {round}\n{}", xbr.log());
        xbr.client_ok(&["port", "del", BRIDGE, b.host_if()])?;
        // Bound again at once: a socket the transmit thread still held
        // would make this bind fail (EBUSY).
        xbr.client_ok(&["port", "add", BRIDGE, &specs[1]])?;
    }
    assert_eq!(udp_across(&a, &b)?, COUNT, "{}", xbr.log());
    let stats = xbr.client_ok(&["stats", BRIDGE])?;
    assert_eq!(transmit_thread(&stats, 1).map(|t| t.0), Some(2), "{stats}");
    Ok(())
}

#[test]
fn bad_cpu_lists_are_refused_with_exit_code_2() -> Result<()> {
    for (args, mention) in [
        (vec!["--pmd-cores", "0,0"], "CPU 0 is given twice"),
        (vec!["--pmd-cores", "1-0"], "runs backwards"),
        (vec!["--pmd-cores", "x"], "'x' is not a CPU number"),
        (vec!["--pmd-cores", "0", "--cpu", "0"], "--cpu"),
        (vec!["--pmd-cores", "0,4095"], "CPU 4095 does not exist"),
    ] {
        let (out, _dir) = Xbr::run_once(&args, Duration::from_secs(10))?;
        assert_eq!(out.code(), Some(2), "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains(mention), "{args:?}: {}", out.stderr);
    }
    Ok(())
}
