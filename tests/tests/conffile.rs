//! `xbr run --config PATH` (issue 30): the file's settings apply, flags on
//! the command line win over them, and a bad file is refused with exit 2
//! and a message naming the file, the line and the key, before anything
//! is attached.
//!
//! Needs root and a built `xbr` (like skeleton.rs).

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::Duration;
use xbr_tests::{link_has_xdp, unique_tag, Pod, Result, Xbr, NAME_PREFIX};

/// A configuration file in /tmp, removed on drop.
struct ConfFile(PathBuf);

impl ConfFile {
    fn new(text: &str) -> ConfFile {
        let path = std::env::temp_dir().join(format!("{NAME_PREFIX}-conf-{}.conf", unique_tag()));
        std::fs::write(&path, text).expect("writing the configuration file");
        ConfFile(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("a UTF-8 temp path")
    }
}

impl Drop for ConfFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn the_files_ports_are_attached_and_flags_win() -> Result<()> {
    let a = Pod::new(Ipv4Addr::new(10, 128, 0, 2), 24, "0a:58:0a:80:00:02")?;
    let b = Pod::new(Ipv4Addr::new(10, 128, 0, 3), 24, "0a:58:0a:80:00:03")?;
    // The harness passes `--bridge br0`: the file's bridge must lose.
    let conf = ConfFile::new(&format!(
        "# xbr.conf for a test\nbridge = \"not-br0\"\nport = {}=1\nport = {}=2\nfail-mode = secure\nct-limit = 1000\n",
        a.host_if(),
        b.host_if()
    ));
    let xbr = Xbr::start(&["--config", conf.path()])?;
    assert!(
        link_has_xdp(a.host_if())?,
        "the file's first port is not attached"
    );
    assert!(
        link_has_xdp(b.host_if())?,
        "the file's second port is not attached"
    );
    xbr.add_flow("in_port=1,actions=output:2")?;
    xbr.add_flow("in_port=2,actions=output:1")?;
    let out = a.ping(b.ip(), 2)?;
    assert!(
        out.success(),
        "ping over the file's ports: {}\n{}",
        out.stdout,
        xbr.log()
    );
    drop(xbr);
    // `--port` on the command line replaces all of the file's ports.
    let xbr = Xbr::start(&[
        "--config",
        conf.path(),
        "--port",
        &format!("{}=1", a.host_if()),
    ])?;
    assert!(link_has_xdp(a.host_if())?);
    assert!(
        !link_has_xdp(b.host_if())?,
        "--port on the command line should replace the file's ports\n{}",
        xbr.log()
    );
    Ok(())
}

/// `xbr run --config FILE` with `text` must exit 2 with a message
/// containing `FILE:LINE` and every one of `mention`.
fn expect_refused(text: &str, line: usize, mention: &[&str], extra: &[&str]) -> Result<()> {
    let conf = ConfFile::new(text);
    let mut args = vec!["--config", conf.path()];
    args.extend_from_slice(extra);
    let (out, rundir) = Xbr::run_once(&args, Duration::from_secs(20))?;
    assert_eq!(
        out.code(),
        Some(2),
        "{text:?}: {}\n{}",
        out.describe_status(),
        out.stderr
    );
    let at = format!("{}:{line}", conf.path());
    assert!(
        out.stderr.contains(&at),
        "{text:?}: no {at} in:\n{}",
        out.stderr
    );
    for m in mention {
        assert!(
            out.stderr.contains(m),
            "{text:?}: no {m} in:\n{}",
            out.stderr
        );
    }
    assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
    assert!(
        !rundir.mgmt_path().exists(),
        "{text:?}: xbr served the bridge"
    );
    Ok(())
}

#[test]
fn bad_files_exit_2_naming_file_line_and_key() -> Result<()> {
    expect_refused(
        "\n# ok\nfrobnicate = 1\n",
        3,
        &["unknown key 'frobnicate'"],
        &[],
    )?;
    expect_refused(
        "pmd_threads = 2\n",
        1,
        &["'pmd_threads'", "did you mean 'pmd-threads'"],
        &[],
    )?;
    expect_refused("pmd-threads = 0\n", 1, &["key 'pmd-threads'", "0"], &[])?;
    expect_refused("fail-mode = open\n", 1, &["key 'fail-mode'", "open"], &[])?;
    expect_refused(
        "port = name-longer-than-15\n",
        1,
        &["key 'port'", "name-longer-than-15"],
        &[],
    )?;
    expect_refused(
        "ct-limit = 5\nct-limit = 6\n",
        2,
        &["'ct-limit'", "line 1"],
        &[],
    )?;
    expect_refused("bridge br0\n", 1, &["expected 'key = value'"], &[])?;
    expect_refused(
        "config = /etc/other.conf\n",
        1,
        &["unknown key 'config'"],
        &[],
    )?;
    // A bad value is refused even when a flag would win over it.
    expect_refused(
        "ct-limit = lots\n",
        1,
        &["key 'ct-limit'"],
        &["--ct-limit", "10"],
    )?;
    Ok(())
}

#[test]
fn a_missing_file_or_a_conflict_with_the_flags_exits_2() -> Result<()> {
    let missing = format!("/nonexistent/{NAME_PREFIX}-{}.conf", unique_tag());
    let (out, _rundir) = Xbr::run_once(&["--config", &missing], Duration::from_secs(20))?;
    assert_eq!(out.code(), Some(2), "{}", out.stderr);
    assert!(out.stderr.contains(&missing), "{}", out.stderr);
    // The file says ovsdb, the command line gives a port: they conflict.
    let conf = ConfFile::new("ovsdb = unix:/nonexistent/db.sock\n");
    let (out, rundir) = Xbr::run_once(
        &["--config", conf.path(), "--port", "veth1"],
        Duration::from_secs(20),
    )?;
    assert_eq!(out.code(), Some(2), "{}", out.stderr);
    assert!(out.stderr.contains(conf.path()), "{}", out.stderr);
    assert!(out.stderr.contains("--ovsdb"), "{}", out.stderr);
    assert!(!rundir.mgmt_path().exists());
    Ok(())
}
