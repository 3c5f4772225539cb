//! xbr's log as operators run ovs-vswitchd's: `--log-file` opened again
//! by `ovs-appctl vlog/reopen` after a logrotate-style rename;
//! `ovs-appctl vlog/set MODULE:LEVEL` changing what one module logs and
//! `vlog/list` showing it; `--log-format json` writing one JSON object a
//! line; repeated warnings of one call site rate limited
//! (`--log-rate-limit`), the drop reported in the log and counted in the
//! metrics.
//!
//! The warning used throughout is ofproto's "closing OpenFlow
//! connection", which a peer sending a header shorter than 8 bytes
//! causes, once per connection.
//!
//! Needs root and a built `xbr`, like every end-to-end test.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use xbr_tests::{run_timeout, unique_tag, CmdOutput, HarnessError, Result, Xbr, CMD_TIMEOUT};

const WARNING: &str = "closing OpenFlow connection";

fn io(context: impl Into<String>, source: std::io::Error) -> HarnessError {
    HarnessError::Io {
        context: context.into(),
        source,
    }
}

/// A directory for the log files, removed on drop.
struct LogDir(PathBuf);

impl LogDir {
    fn new() -> Result<LogDir> {
        let dir = std::env::temp_dir().join(format!("xbrt-{}-log", unique_tag()));
        std::fs::create_dir_all(&dir).map_err(|e| io("creating the log directory", e))?;
        Ok(LogDir(dir))
    }
}

impl Drop for LogDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn appctl(xbr: &Xbr, args: &[&str]) -> Result<CmdOutput> {
    xbr_tests::require_tool("ovs-appctl")?;
    let mut cmd = Command::new("ovs-appctl");
    cmd.args(args).env("OVS_RUNDIR", xbr.rundir());
    run_timeout(&mut cmd, CMD_TIMEOUT)
}

fn appctl_ok(xbr: &Xbr, args: &[&str]) -> Result<String> {
    let out = appctl(xbr, args)?;
    assert!(out.success(), "ovs-appctl {args:?}: {out:?}");
    Ok(out.stdout)
}

/// One connection that sends a header of length 4; returns once xbr
/// closed it (after logging the warning).
fn bad_connection(xbr: &Xbr) -> Result<()> {
    let mut s = UnixStream::connect(xbr.mgmt_path()).map_err(|e| io("connecting", e))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| io("timeout", e))?;
    s.write_all(&xbr_tests::openflow::header(4, 0, 4, 7))
        .map_err(|e| io("sending", e))?;
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).map_err(|e| io("reading", e))?;
    Ok(())
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn warnings(path: &Path) -> usize {
    read(path).lines().filter(|l| l.contains(WARNING)).count()
}

/// Waits (bounded) until `path` holds `n` warnings, and returns the count.
fn wait_warnings(path: &Path, n: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(5);
    while warnings(path) < n && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    warnings(path)
}

#[test]
fn the_log_file_is_reopened_after_a_rename_and_levels_are_per_module() -> Result<()> {
    let dir = LogDir::new()?;
    let log = dir.0.join("xbr.log");
    let rotated = dir.0.join("xbr.log.1");
    let log_arg = log.to_string_lossy().into_owned();
    let xbr = Xbr::start(&["--log-file", &log_arg])?;
    // Logged once the control socket is up too, a moment after the
    // OpenFlow socket the harness waits for.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !read(&log).contains("xbr running") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(read(&log).contains("xbr running"), "{}", read(&log));

    // logrotate: rename, then tell the daemon.
    std::fs::rename(&log, &rotated).map_err(|e| io("renaming the log", e))?;
    bad_connection(&xbr)?;
    assert_eq!(wait_warnings(&rotated, 1), 1, "{}", read(&rotated));
    assert!(!log.exists(), "nothing reopened the path yet");
    assert_eq!(appctl_ok(&xbr, &["vlog/reopen"])?, "");
    bad_connection(&xbr)?;
    assert_eq!(wait_warnings(&log, 1), 1, "{}", read(&log));
    assert_eq!(warnings(&rotated), 1, "the old file gets no more");

    // Per module: ofproto at `err` hides its warning, others unchanged.
    assert_eq!(appctl_ok(&xbr, &["vlog/set", "ofproto:file:err"])?, "");
    let list = appctl_ok(&xbr, &["vlog/list"])?;
    let row = |name: &str| {
        list.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
    };
    assert_eq!(
        row("ofproto"),
        Some(vec!["ofproto", "OFF", "OFF", "ERR", "ofproto"]),
        "{list}"
    );
    assert_eq!(
        row("conntrack"),
        Some(vec![
            "conntrack",
            "OFF",
            "OFF",
            "INFO",
            "dataplane::conntrack"
        ]),
        "{list}"
    );
    bad_connection(&xbr)?;
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(warnings(&log), 1, "{}", read(&log));
    assert_eq!(appctl_ok(&xbr, &["vlog/set", "ofproto:warn"])?, "");
    bad_connection(&xbr)?;
    assert_eq!(wait_warnings(&log, 2), 2, "{}", read(&log));

    // One level for every module again: per-module levels are dropped.
    assert_eq!(appctl_ok(&xbr, &["vlog/set", "ANY:any:warn"])?, "");
    let list = appctl_ok(&xbr, &["vlog/list"])?;
    let levels: Vec<&str> = list
        .lines()
        .skip(2)
        .filter_map(|l| l.split_whitespace().nth(3))
        .collect();
    assert!(
        !levels.is_empty() && levels.iter().all(|l| *l == "WARN"),
        "{list}"
    );

    // OVS's refusal of an unknown module, exit code 2.
    let bad = appctl(&xbr, &["vlog/set", "nosuch:dbg"])?;
    assert_eq!(bad.code(), Some(2), "{bad:?}");
    assert!(
        bad.stderr
            .contains("no destination, level, or module \"nosuch\""),
        "{bad:?}"
    );
    // Nothing went to stderr.
    assert!(!xbr.log().contains(WARNING), "{}", xbr.log());
    Ok(())
}

#[test]
fn repeated_warnings_are_rate_limited_reported_and_counted_in_json_lines() -> Result<()> {
    let dir = LogDir::new()?;
    let log = dir.0.join("xbr.json");
    let log_arg = log.to_string_lossy().into_owned();
    let metrics = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| io("finding a free port", e))?;
    let metrics_arg = metrics.to_string();
    let xbr = Xbr::start(&[
        "--log-file",
        &log_arg,
        "--log-format",
        "json",
        "--log-rate-limit",
        "60/3",
        "--metrics",
        &metrics_arg,
    ])?;
    let started = Instant::now();
    for _ in 0..10 {
        bad_connection(&xbr)?;
    }
    let burst_took = started.elapsed();
    std::thread::sleep(Duration::from_millis(200));
    // A burst of 3 (one more per second the ten took).
    let written = warnings(&log);
    let allowed = 3 + burst_took.as_secs() as usize;
    assert!(
        (3..=allowed).contains(&written),
        "{written} in {burst_took:?}\n{}",
        read(&log)
    );

    // The drops are counted in the metrics.
    let mut s = std::net::TcpStream::connect(metrics).map_err(|e| io("scraping", e))?;
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n")
        .map_err(|e| io("scraping", e))?;
    let mut text = String::new();
    s.read_to_string(&mut text).map_err(|e| io("scraping", e))?;
    let suppressed: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("xbr_log_messages_suppressed_total "))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no suppressed count in\n{text}"));
    assert_eq!(suppressed as usize, 10 - written, "{text}");

    // Once the budget refilled, the next warning is preceded by the
    // report of the drops.
    std::thread::sleep(Duration::from_millis(1100));
    bad_connection(&xbr)?;
    assert_eq!(wait_warnings(&log, written + 1), written + 1);
    let text = read(&log);
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let message = |v: &serde_json::Value| v["fields"]["message"].as_str().unwrap_or("").to_string();
    let report = lines
        .iter()
        .position(|v| message(v).starts_with("Dropped "))
        .unwrap_or_else(|| panic!("no drop report in\n{text}"));
    let m = message(&lines[report]);
    assert!(
        m.starts_with(&format!("Dropped {} log messages in last ", 10 - written))
            && m.ends_with("due to excessive rate"),
        "{m}"
    );
    assert_eq!(lines[report]["level"], "WARN");
    assert_eq!(lines[report]["target"], "xbr::vlog");
    let next = &lines[report + 1];
    assert_eq!(message(next), WARNING, "{text}");
    assert_eq!(next["target"], "ofproto::connection");
    Ok(())
}
