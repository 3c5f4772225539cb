//! The Debian package (issue 30): `scripts/deb` builds it (from the debug
//! binary, so CI does no release build; cargo-deb strips it) and it
//! unpacks into a scratch root with the binary, the systemd unit, the
//! default configuration (a conffile) and the docs; the unpacked unit
//! verifies against the scratch root, and the unpacked binary reads the
//! unpacked configuration.
//!
//! Needs cargo-deb (scripts/deb installs it if missing; CI installs it
//! first), dpkg-deb, systemd-analyze and Debian's openvswitch-switch.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use xbr_tests::{require_tool, run_timeout, unique_tag, Result, NAME_PREFIX};

/// A private temporary directory, removed on drop.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn the_package_builds_and_installs_the_expected_files() -> Result<()> {
    for tool in ["dpkg-deb", "systemd-analyze"] {
        require_tool(tool)?;
    }
    let dir = TempDir(std::env::temp_dir().join(format!("{NAME_PREFIX}-deb-{}", unique_tag())));
    let out_dir = dir.0.join("out");
    let root = dir.0.join("root");
    // Bounded: a cargo-deb install (if missing) plus the packing.
    let out = run_timeout(
        Command::new(repo().join("scripts/deb"))
            .arg(&out_dir)
            .env("XBR_DEB_PROFILE", "dev"),
        Duration::from_secs(1200),
    )?
    .ok()?;
    let deb = PathBuf::from(out.stdout.trim());
    assert!(
        deb.is_file(),
        "scripts/deb printed {:?}\n{}",
        out.stdout,
        out.stderr
    );

    let field = |name: &str| -> Result<String> {
        Ok(run_timeout(
            Command::new("dpkg-deb").arg("-f").arg(&deb).arg(name),
            Duration::from_secs(30),
        )?
        .ok()?
        .stdout
        .trim()
        .to_string())
    };
    assert_eq!(field("Package")?, "xbr");
    let depends = field("Depends")?;
    assert!(depends.contains("openvswitch-switch"), "Depends: {depends}");

    run_timeout(
        Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&root),
        Duration::from_secs(60),
    )?
    .ok()?;
    for (path, mode) in [
        ("usr/bin/xbr", 0o755),
        ("lib/systemd/system/xbr.service", 0o644),
        ("etc/xbr/xbr.conf", 0o644),
        ("usr/share/doc/xbr/operations.md", 0o644),
        ("usr/share/doc/xbr/copyright", 0o644),
    ] {
        let meta = std::fs::metadata(root.join(path))
            .unwrap_or_else(|e| panic!("{path} is not in the package: {e}"));
        assert_eq!(meta.permissions().mode() & 0o777, mode, "{path}'s mode");
    }
    for (path, source) in [
        ("lib/systemd/system/xbr.service", "dist/xbr.service"),
        ("etc/xbr/xbr.conf", "dist/xbr.conf"),
        ("usr/share/doc/xbr/operations.md", "docs/operations.md"),
    ] {
        assert_eq!(
            std::fs::read(root.join(path)).expect("installed"),
            std::fs::read(repo().join(source)).expect("source"),
            "{path} differs from {source}"
        );
    }
    // The configuration is a conffile (dpkg keeps an operator's edits).
    let control = dir.0.join("control");
    run_timeout(
        Command::new("dpkg-deb").arg("-e").arg(&deb).arg(&control),
        Duration::from_secs(30),
    )?
    .ok()?;
    let conffiles = std::fs::read_to_string(control.join("conffiles")).expect("conffiles");
    assert_eq!(conffiles.trim(), "/etc/xbr/xbr.conf");

    // The unit verifies in the scratch root, next to the units of the
    // openvswitch-switch it depends on (ExecStart must exist there).
    for unit in ["ovsdb-server.service", "ovs-vswitchd.service"] {
        std::fs::copy(
            Path::new("/lib/systemd/system").join(unit),
            root.join("lib/systemd/system").join(unit),
        )
        .expect("Debian's openvswitch-switch units");
    }
    let out = run_timeout(
        Command::new("systemd-analyze")
            .arg("verify")
            .arg(format!("--root={}", root.display()))
            .arg("/lib/systemd/system/xbr.service"),
        Duration::from_secs(60),
    )?;
    assert!(
        out.success() && out.stderr.trim().is_empty(),
        "systemd-analyze verify in the scratch root:\n{}",
        out.stderr
    );

    // The packaged binary runs and reads the packaged configuration:
    // doctor checks its database (ovsdb = ... in the file).
    let bin = root.join("usr/bin/xbr");
    let conf = root.join("etc/xbr/xbr.conf");
    let out = run_timeout(
        Command::new(&bin).arg("doctor").arg("--config").arg(&conf),
        Duration::from_secs(60),
    )?;
    assert_ne!(
        out.code(),
        Some(2),
        "the default configuration is refused:\n{}",
        out.stderr
    );
    assert!(
        out.stdout.contains("ovsdb: /var/run/openvswitch/db.sock"),
        "doctor did not take the file's ovsdb:\n{}",
        out.stdout
    );
    Ok(())
}
