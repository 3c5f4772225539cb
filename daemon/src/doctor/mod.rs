//! `xbr doctor`: preflight checks of a node before `xbr run` (the systemd
//! unit runs it as `ExecStartPre=`), one line per check, each failure with
//! its fix.
//!
//! The checks (one file each): the kernel and its AF_XDP/BPF features
//! (`kernel`), the host's bpffs, locked-memory limit and capabilities
//! (`host`), ovsdb-server and any other switch on the same database,
//! bridge or run directory (`ovs`), and the ports' devices: present, their
//! xdp-features, XDP programs already attached (`ports`).
//!
//! A check ends `Ok`, `Warn` (xbr runs, with less: e.g. no jumbo frames)
//! or `Fail` (xbr will not work, or will fight another switch). The exit
//! code is 0 without failures and 1 with any. Checks only read: nothing is
//! attached, created or changed (probes load a trivial BPF program and
//! open one AF_XDP socket, both closed at once).

mod host;
mod kernel;
mod ovs;
mod ports;

use std::fmt;
use std::path::PathBuf;

/// What `xbr doctor` looks at: the settings `xbr run` would get.
#[derive(Clone, Debug)]
pub struct Target {
    /// The run directory (`--rundir`).
    pub rundir: PathBuf,
    /// `--bridge` (without `--ovsdb`).
    pub bridge: Option<String>,
    /// `--ovsdb`'s socket, if bridges come from the database.
    pub ovsdb: Option<PathBuf>,
    /// The system ports of `--port` (with `--ovsdb`, the database's
    /// system interfaces are added).
    pub ports: Vec<String>,
    /// `--bpf-pin-root`: an XDP program hanging off a link pinned there
    /// is a stopped xbr's, which the next one adopts (`dataplane::fastpath::pin`).
    pub pin_root: PathBuf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Ok,
    Warn,
    Fail,
}

/// One check's outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    pub status: Status,
    /// Short name (`kernel`, `bpffs`, `port veth1`, ...).
    pub name: String,
    pub detail: String,
    /// What to do, for `Warn` and `Fail`.
    pub fix: Option<String>,
}

impl Check {
    pub fn ok(name: impl Into<String>, detail: impl Into<String>) -> Check {
        Check {
            status: Status::Ok,
            name: name.into(),
            detail: detail.into(),
            fix: None,
        }
    }

    pub fn warn(
        name: impl Into<String>,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Check {
        Check {
            status: Status::Warn,
            name: name.into(),
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    pub fn fail(
        name: impl Into<String>,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Check {
        Check {
            status: Status::Fail,
            name: name.into(),
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = match self.status {
            Status::Ok => "ok",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
        };
        write!(f, "{status:<4}  {}: {}", self.name, self.detail)?;
        if let Some(fix) = &self.fix {
            write!(f, " -- fix: {fix}")?;
        }
        Ok(())
    }
}

/// Runs every check, in order.
pub fn run(target: &Target) -> Vec<Check> {
    let mut checks = Vec::new();
    let release = kernel::release();
    checks.push(kernel::version(&release, kernel::probe()));
    checks.push(kernel::bpf_xdp());
    checks.push(kernel::af_xdp());
    checks.push(host::bpffs());
    checks.push(host::memlock());
    checks.push(host::capabilities());
    // (name, required): a `--port` must exist (xbr run refuses to start
    // without it); a database interface may not (xbr reports it in the
    // Interface's `error` column and retries, as ovs-vswitchd does).
    let mut ports: Vec<(String, bool)> = target.ports.iter().map(|p| (p.clone(), true)).collect();
    if let Some(db) = &target.ovsdb {
        let (check, interfaces) = ovs::ovsdb(db);
        checks.push(check);
        for name in interfaces {
            if !ports.iter().any(|(p, _)| *p == name) {
                ports.push((name, false));
            }
        }
        checks.push(ovs::vswitchd_on(db));
    }
    checks.extend(ovs::switches_in(&target.rundir, target.bridge.as_deref()));
    for (port, required) in &ports {
        checks.extend(ports::check(port, *required, &target.pin_root));
    }
    checks
}

/// Prints the checks and returns the exit code (0: no failure, 1: some).
pub fn report(checks: &[Check]) -> u8 {
    for c in checks {
        println!("{c}");
    }
    let failed = checks.iter().filter(|c| c.status == Status::Fail).count();
    if failed > 0 {
        println!("{failed} check(s) failed");
        1
    } else {
        0
    }
}
