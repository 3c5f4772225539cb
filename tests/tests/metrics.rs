//! `xbr run --metrics ADDR`: the Prometheus endpoint scraped while pods
//! ping each other through xbr, every scrape valid for `promtool check
//! metrics`, and the counters moving by the traffic sent (ports, table,
//! packet thread, OpenFlow control plane); the endpoint's bounds (path,
//! request size) answered with HTTP errors and counted; a bad address
//! refused at start with exit code 2; connections counted by conntrack
//! zone; an `xbr capture`'s mirror counted while it runs.
//!
//! Needs root (veth pairs, AF_XDP), a built `xbr` and `promtool`
//! (Debian's `prometheus` package), like every end-to-end test.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use xbr_tests::{HarnessError, Pod, Result, Xbr, BRIDGE};

const PINGS: u32 = 20;

fn io(context: impl Into<String>, source: std::io::Error) -> HarnessError {
    HarnessError::Io {
        context: context.into(),
        source,
    }
}

/// A free port on loopback (the kernel's choice, released for xbr).
fn free_addr() -> Result<SocketAddr> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| io("binding a loopback port", e))?;
    l.local_addr().map_err(|e| io("reading the port", e))
}

/// One HTTP request; (status line, body).
fn http(addr: SocketAddr, request: &[u8]) -> Result<(String, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .map_err(|e| io(format!("connecting to {addr}"), e))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| io("timeout", e))?;
    s.write_all(request)
        .map_err(|e| io("sending the request", e))?;
    let mut reply = String::new();
    s.read_to_string(&mut reply)
        .map_err(|e| io("reading the reply", e))?;
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
    let status = head.lines().next().unwrap_or("").to_string();
    Ok((status, body.to_string()))
}

fn scrape(addr: SocketAddr) -> Result<String> {
    let (status, body) = http(addr, b"GET /metrics HTTP/1.1\r\nHost: xbr\r\n\r\n")?;
    assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
    Ok(body)
}

/// `promtool check metrics` on `text`: no error and no lint.
fn promtool_check(text: &str) -> Result<()> {
    xbr_tests::require_tool("promtool")?;
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| HarnessError::Spawn {
            command: "promtool check metrics".into(),
            source,
        })?;
    let mut stdin = child.stdin.take().expect("piped");
    stdin
        .write_all(text.as_bytes())
        .map_err(|e| io("feeding promtool", e))?;
    drop(stdin);
    let out = child
        .wait_with_output()
        .map_err(|e| io("waiting for promtool", e))?;
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// The value of the sample `name{labels}` (labels as the encoder orders
/// them, by name), if present.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    let key = if labels.is_empty() {
        name.to_string()
    } else {
        format!("{name}{{{}}}", labels.join(","))
    };
    text.lines()
        .find_map(|l| l.strip_prefix(&key)?.strip_prefix(' ')?.parse().ok())
}

fn must(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    sample(text, name, labels).unwrap_or_else(|| panic!("no {name}{labels:?} in\n{text}"))
}

#[test]
fn metrics_are_valid_and_move_with_the_traffic() -> Result<()> {
    let a = Pod::numbered(2)?;
    let b = Pod::numbered(3)?;
    a.add_neighbor(&b)?;
    b.add_neighbor(&a)?;
    let addr = free_addr()?;
    let addr_arg = addr.to_string();
    let spec_a = format!("{}=1", a.host_if());
    let spec_b = format!("{}=2", b.host_if());
    let xbr = Xbr::start(&[
        "--metrics",
        &addr_arg,
        "--xdp-cache",
        "off",
        "--port",
        &spec_a,
        "--port",
        &spec_b,
    ])?;
    xbr.add_flow("table=0, priority=10, in_port=1, actions=output:2")?;
    xbr.add_flow("table=0, priority=10, in_port=2, actions=output:1")?;

    let before = scrape(addr)?;
    promtool_check(&before)?;
    let br = ("bridge", BRIDGE);
    let port_a = [br, ("port", a.host_if())];
    let port_b = [br, ("port", b.host_if())];
    let table0 = [br, ("table", "0")];
    let thread0 = [br, ("thread", "0")];
    assert_eq!(must(&before, "xbr_flows", &[br]), 2.0);
    assert_eq!(must(&before, "xbr_table_flows", &table0), 2.0);
    assert!(must(&before, "xbr_openflow_flow_mods_total", &[br]) >= 2.0);
    assert!(must(&before, "xbr_openflow_connections_opened_total", &[br]) >= 2.0);
    assert!(must(&before, "xbr_conntrack_connections_limit", &[br]) > 0.0);

    // Scrapes every 100 ms while the pods ping, each one valid.
    let stop = Arc::new(AtomicBool::new(false));
    let scraper = {
        let stop = stop.clone();
        std::thread::spawn(move || -> Result<Vec<String>> {
            let mut all = Vec::new();
            while !stop.load(Ordering::Relaxed) && all.len() < 200 {
                all.push(scrape(addr)?);
                std::thread::sleep(Duration::from_millis(100));
            }
            Ok(all)
        })
    };
    let ping = a.ping(b.ip(), PINGS);
    stop.store(true, Ordering::Relaxed);
    let during = scraper.join().expect("the scraper panicked")?;
    let ping = ping?;
    assert!(ping.success(), "{ping:?}\n{}", xbr.log());
    assert!(!during.is_empty());
    for text in during.iter().step_by(5) {
        promtool_check(text)?;
    }

    let after = scrape(addr)?;
    promtool_check(&after)?;
    let grew = |name: &str, labels: &[(&str, &str)]| {
        must(&after, name, labels) - must(&before, name, labels)
    };
    let n = f64::from(PINGS);
    // Each echo request enters on A's port and leaves on B's; each reply
    // the other way.
    assert!(grew("xbr_port_receive_packets_total", &port_a) >= n);
    assert!(grew("xbr_port_transmit_packets_total", &port_b) >= n);
    assert!(grew("xbr_port_receive_packets_total", &port_b) >= n);
    assert!(grew("xbr_port_transmit_packets_total", &port_a) >= n);
    assert!(grew("xbr_port_receive_bytes_total", &port_a) >= n * 98.0);
    assert!(grew("xbr_table_lookups_total", &table0) >= 2.0 * n);
    assert!(grew("xbr_table_matches_total", &table0) >= 2.0 * n);
    assert!(grew("xbr_pmd_received_packets_total", &thread0) >= 2.0 * n);
    assert!(grew("xbr_pmd_sent_packets_total", &thread0) >= 2.0 * n);
    assert!(grew("xbr_pmd_busy_seconds_total", &thread0) > 0.0);
    assert!(grew("xbr_pmd_idle_seconds_total", &thread0) > 0.0);
    // The pings hit the translation cache after the first of each way.
    let hits = grew(
        "xbr_translation_cache_hits_total",
        &[br, ("cache", "exact")],
    ) + grew(
        "xbr_translation_cache_hits_total",
        &[br, ("cache", "megaflow")],
    );
    assert!(hits >= 2.0 * (n - 1.0), "{hits}\n{after}");
    assert_eq!(
        grew("xbr_drops_total", &[br, ("reason", "table_miss")]),
        0.0
    );
    let scrapes = must(&after, "xbr_metrics_requests_total", &[("outcome", "ok")]);
    assert!(scrapes >= during.len() as f64 + 2.0, "{scrapes}");

    // A drop by reason: a packet no flow matches.
    xbr.ofctl_ok(&["del-flows", BRIDGE, "in_port=1"])?;
    let _ = a.ping(b.ip(), 1)?;
    let missed = scrape(addr)?;
    assert!(must(&missed, "xbr_drops_total", &[br, ("reason", "table_miss")]) >= 1.0);
    assert_eq!(must(&missed, "xbr_flows", &[br]), 1.0);

    // The endpoint's bounds: HTTP errors, counted.
    let (status, _) = http(addr, b"GET /other HTTP/1.1\r\n\r\n")?;
    assert_eq!(status, "HTTP/1.1 404 Not Found");
    let (status, _) = http(addr, b"POST /metrics HTTP/1.1\r\n\r\n")?;
    assert_eq!(status, "HTTP/1.1 405 Method Not Allowed");
    let mut huge = b"GET /metrics HTTP/1.1\r\n".to_vec();
    huge.extend(std::iter::repeat_n(b'x', 16 * 1024));
    let (status, _) = http(addr, &huge)?;
    assert_eq!(status, "HTTP/1.1 431 Request Header Fields Too Large");
    let last = scrape(addr)?;
    assert_eq!(
        must(
            &last,
            "xbr_metrics_requests_total",
            &[("outcome", "not_found")]
        ),
        1.0
    );
    assert_eq!(
        must(
            &last,
            "xbr_metrics_requests_total",
            &[("outcome", "bad_request")]
        ),
        2.0
    );
    Ok(())
}

#[test]
fn a_bad_metrics_address_is_refused_at_start() -> Result<()> {
    let (out, _dir) = Xbr::run_once(&["--metrics", "localhost"], Duration::from_secs(10))?;
    assert_eq!(out.code(), Some(2), "{out:?}");
    assert!(out.stderr.contains("--metrics"), "{out:?}");
    Ok(())
}

/// `GET /metrics` on `port` of the namespace's loopback, with bash's
/// /dev/tcp; `None` if nothing listens.
fn scrape_in(ns: &xbr_tests::Netns, port: u16) -> Result<Option<String>> {
    let script = format!(
        "exec 3<>/dev/tcp/127.0.0.1/{port} || exit 7; \
         printf 'GET /metrics HTTP/1.0\\r\\n\\r\\n' >&3; cat <&3"
    );
    let out = ns.exec(&["bash", "-c", &script], xbr_tests::CMD_TIMEOUT)?;
    Ok(out.success().then_some(out.stdout))
}

/// Waits (bounded) until `ready` holds for what `port` serves.
fn wait_for(
    ns: &xbr_tests::Netns,
    port: u16,
    ready: impl Fn(&Option<String>) -> bool,
) -> Result<Option<String>> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let got = scrape_in(ns, port)?;
        if ready(&got) || std::time::Instant::now() > deadline {
            return Ok(got);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_database_turns_the_endpoint_on_moves_it_and_off() -> Result<()> {
    let ns = xbr_tests::Netns::new()?;
    ns.exec(&["ip", "link", "set", "lo", "up"], xbr_tests::CMD_TIMEOUT)?
        .ok()?;
    let mut db = xbr_tests::ovsdb::OvsDb::start(Some(ns.name()))?;
    db.start_xbr()?;
    db.vsctl(&["add-br", "br0"])?.ok()?;
    let key = |v: &str| format!("other_config:xbr-metrics={v}");
    db.vsctl(&["set", "Open_vSwitch", ".", &key("127.0.0.1:9476")])?
        .ok()?;
    let has_br0 = |t: &Option<String>| {
        t.as_deref()
            .is_some_and(|t| t.contains("xbr_flows{bridge=\"br0\"}"))
    };
    let got = wait_for(&ns, 9476, has_br0)?;
    assert!(has_br0(&got), "{got:?}\n{}", db.xbr_log());

    // Moved: the new address serves, the old one no longer listens.
    db.vsctl(&["set", "Open_vSwitch", ".", &key("127.0.0.1:9477")])?
        .ok()?;
    let got = wait_for(&ns, 9477, has_br0)?;
    assert!(has_br0(&got), "{got:?}\n{}", db.xbr_log());
    assert_eq!(scrape_in(&ns, 9476)?, None);

    // Removed: off.
    db.vsctl(&["remove", "Open_vSwitch", ".", "other_config", "xbr-metrics"])?
        .ok()?;
    let got = wait_for(&ns, 9477, Option::is_none)?;
    assert_eq!(got, None);

    // A bad value: logged, and no endpoint; then a good one: on again.
    db.vsctl(&["set", "Open_vSwitch", ".", &key("nonsense")])?
        .ok()?;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let said = "other_config:xbr-metrics: metrics address `nonsense`";
    while !db.xbr_log().contains(said) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(db.xbr_log().contains(said), "{}", db.xbr_log());
    db.vsctl(&["set", "Open_vSwitch", ".", &key("127.0.0.1:9476")])?
        .ok()?;
    let got = wait_for(&ns, 9476, has_br0)?;
    assert!(has_br0(&got), "{got:?}\n{}", db.xbr_log());
    Ok(())
}

#[test]
fn conntrack_connections_are_counted_by_zone() -> Result<()> {
    let a = Pod::numbered(2)?;
    let b = Pod::numbered(3)?;
    a.add_neighbor(&b)?;
    b.add_neighbor(&a)?;
    let addr = free_addr()?;
    let addr_arg = addr.to_string();
    let spec_a = format!("{}=1", a.host_if());
    let spec_b = format!("{}=2", b.host_if());
    let xbr = Xbr::start(&["--metrics", &addr_arg, "--port", &spec_a, "--port", &spec_b])?;
    // A's flows are committed in zone 5, B's in zone 9 (each direction's
    // first packet is a new connection in its own zone).
    xbr.add_flow("table=0, priority=10, in_port=1, ip, actions=ct(commit,zone=5),output:2")?;
    xbr.add_flow("table=0, priority=10, in_port=2, ip, actions=ct(commit,zone=9),output:1")?;
    let tool = std::path::Path::new(env!("CARGO_BIN_EXE_xbr-testtool"));
    let to_b = std::net::SocketAddrV4::new(b.ip(), 5001);
    let to_a = std::net::SocketAddrV4::new(a.ip(), 5002);
    assert_eq!(
        xbr_tests::udp_send_flows(tool, a.ns(), to_b, 3, 1000, 3, 41000)?,
        3
    );
    assert_eq!(
        xbr_tests::udp_send_flows(tool, b.ns(), to_a, 2, 1000, 2, 42000)?,
        2
    );
    let br = ("bridge", BRIDGE);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let text = scrape(addr)?;
        promtool_check(&text)?;
        let z5 = sample(
            &text,
            "xbr_conntrack_zone_connections",
            &[br, ("zone", "5")],
        );
        let z9 = sample(
            &text,
            "xbr_conntrack_zone_connections",
            &[br, ("zone", "9")],
        );
        if (z5, z9) == (Some(3.0), Some(2.0)) {
            // Zones without connections are not listed.
            assert!(sample(
                &text,
                "xbr_conntrack_zone_connections",
                &[br, ("zone", "0")]
            )
            .is_none());
            assert_eq!(must(&text, "xbr_conntrack_connections", &[br]), 5.0);
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "zones 5 and 9: {z5:?} {z9:?}\n{text}\n{}",
            xbr.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}

#[test]
fn a_capture_is_a_mirror_with_counters() -> Result<()> {
    let a = Pod::numbered(2)?;
    let b = Pod::numbered(3)?;
    a.add_neighbor(&b)?;
    b.add_neighbor(&a)?;
    let addr = free_addr()?;
    let addr_arg = addr.to_string();
    let spec_a = format!("{}=1", a.host_if());
    let spec_b = format!("{}=2", b.host_if());
    let xbr = Xbr::start(&["--metrics", &addr_arg, "--port", &spec_a, "--port", &spec_b])?;
    xbr.add_flow("table=0, in_port=1, actions=output:2")?;
    xbr.add_flow("table=0, in_port=2, actions=output:1")?;
    let mut cmd = Command::new(Xbr::binary()?);
    cmd.args(["capture", "--rundir"])
        .arg(xbr.rundir())
        .args([a.host_if(), "-c", "1000"]);
    let run = xbr_tests::Background::spawn(&mut cmd)?;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !xbr
        .client_ok(&["stats", BRIDGE])?
        .contains("(to a capture)")
    {
        assert!(std::time::Instant::now() < deadline, "{}", xbr.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    let ping = a.ping(b.ip(), 3)?;
    assert!(ping.success(), "{ping:?}");
    let text = scrape(addr)?;
    promtool_check(&text)?;
    let prefix =
        format!("xbr_mirror_transmit_packets_total{{bridge=\"{BRIDGE}\",mirror=\"capture:");
    let sent: f64 = text
        .lines()
        .find(|l| l.starts_with(&prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {prefix} in\n{text}"));
    // Three echo requests received and three replies sent on A's port.
    assert_eq!(sent, 6.0, "{text}");
    // Stopped by SIGINT: it says what it captured, and the series ends.
    let pid = nix::unistd::Pid::from_raw(run.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT)
        .map_err(|e| HarnessError::Unexpected(format!("SIGINT: {e}")))?;
    let out = run.wait(Duration::from_secs(10));
    assert!(out.success(), "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("6 frames captured, 0 dropped"),
        "{}",
        out.stderr
    );
    assert!(!scrape(addr)?.contains(&prefix));
    Ok(())
}
