//! Open vSwitch around xbr: ovsdb-server answering on the database socket
//! (and the system interfaces it lists), an ovs-vswitchd still running on
//! the same database, and any process serving a bridge's OpenFlow socket
//! in the run directory (ovs-vswitchd or another xbr).

use super::Check;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

/// ovs-vswitchd's database when its command line names none.
const DEFAULT_DB: &str = "/var/run/openvswitch/db.sock";

/// The pid and command name of the process serving the unix socket
/// `stream` is connected to (SO_PEERCRED: the process that called
/// listen()).
fn peer(stream: &UnixStream) -> Option<(i32, String)> {
    let cred =
        nix::sys::socket::getsockopt(stream, nix::sys::socket::sockopt::PeerCredentials).ok()?;
    let comm = std::fs::read_to_string(format!("/proc/{}/comm", cred.pid()))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into());
    Some((cred.pid(), comm))
}

/// ovsdb-server answers on `db` with an Open_vSwitch database; its system
/// interfaces.
pub(super) fn ovsdb(db: &Path) -> (Check, Vec<String>) {
    let name = "ovsdb";
    let fix = "start ovsdb-server (Debian: systemctl start ovsdb-server) or fix --ovsdb";
    let who = UnixStream::connect(db)
        .ok()
        .and_then(|s| peer(&s))
        .map(|(pid, comm)| format!(" ({comm}, pid {pid})"))
        .unwrap_or_default();
    // The database's system interfaces (type "" or "system"): the ports
    // xbr would attach.
    let rows = crate::probe::select(db, "Interface", &["name", "type"]);
    match rows.map(|rows| -> Vec<String> {
        rows.iter()
            .filter(|r| matches!(r["type"].as_str(), Some("") | Some("system")))
            .filter_map(|r| r["name"].as_str().map(String::from))
            .collect()
    }) {
        Ok(ifaces) => (
            Check::ok(
                name,
                format!(
                    "{}{who} answers; {} system interface(s)",
                    db.display(),
                    ifaces.len()
                ),
            ),
            ifaces,
        ),
        Err(e) => (Check::fail(name, format!("{e}{who}"), fix), Vec::new()),
    }
}

/// The processes named `comm`, with their arguments.
fn processes(comm: &str) -> Vec<(u32, Vec<String>)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == comm)
        })
        .filter_map(|pid| {
            let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let args = raw
                .split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            Some((pid, args))
        })
        .collect()
}

/// The database socket an ovs-vswitchd command line names (its one
/// non-option argument, `unix:PATH`), else the default.
fn vswitchd_db(args: &[String]) -> PathBuf {
    let target = args
        .iter()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .map(String::as_str)
        .unwrap_or(DEFAULT_DB);
    PathBuf::from(target.strip_prefix("unix:").unwrap_or(target))
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// An ovs-vswitchd on the database `db` would fight xbr for the bridges.
pub(super) fn vswitchd_on(db: &Path) -> Check {
    let name = "ovs-vswitchd";
    let all = processes("ovs-vswitchd");
    let same: Vec<u32> = all
        .iter()
        .filter(|(_, args)| same_file(&vswitchd_db(args), db))
        .map(|(pid, _)| *pid)
        .collect();
    if !same.is_empty() {
        let pids: Vec<String> = same.iter().map(u32::to_string).collect();
        return Check::fail(
            name,
            format!(
                "ovs-vswitchd (pid {}) runs on {}: it and xbr would both program the bridges",
                pids.join(", "),
                db.display()
            ),
            "stop it first: systemctl stop openvswitch-switch (or ovs-vswitchd.service; xbr.service conflicts with it)",
        );
    }
    if all.is_empty() {
        Check::ok(name, "none running")
    } else {
        Check::ok(
            name,
            format!("{} running on other databases only", all.len()),
        )
    }
}

/// Every bridge OpenFlow socket (`*.mgmt`) in `rundir` that a process
/// serves: xbr could not serve that bridge (and `bridge`'s must be free).
pub(super) fn switches_in(rundir: &Path, bridge: Option<&str>) -> Vec<Check> {
    let name = "bridges";
    let entries = match std::fs::read_dir(rundir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return vec![Check::ok(
                name,
                format!("{} does not exist yet (xbr creates it)", rundir.display()),
            )]
        }
        Err(e) => {
            return vec![Check::fail(
                name,
                format!("{}: {e}", rundir.display()),
                "fix --rundir or its permissions",
            )]
        }
    };
    let mut checks = Vec::new();
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path();
        let is_mgmt = path.extension().is_some_and(|x| x == "mgmt");
        let is_socket = entry.file_type().is_ok_and(|t| t.is_socket());
        if !is_mgmt || !is_socket {
            continue;
        }
        let Ok(stream) = UnixStream::connect(&path) else {
            continue; // stale: nobody listens; xbr replaces it
        };
        let (pid, comm) = peer(&stream).unwrap_or((0, "?".into()));
        checks.push(Check::fail(
            format!(
                "bridge {}",
                path.file_stem().unwrap_or_default().to_string_lossy()
            ),
            format!("{} is served by {comm} (pid {pid})", path.display()),
            format!("stop {comm} before starting xbr (systemctl stop ovs-vswitchd / xbr)"),
        ));
    }
    if checks.is_empty() {
        let which = bridge
            .map(|b| format!(" ({b} is free)"))
            .unwrap_or_default();
        checks.push(Check::ok(
            name,
            format!("no switch serves a bridge in {}{which}", rundir.display()),
        ));
    }
    checks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vswitchd_database_from_its_command_line() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            vswitchd_db(&args(&[
                "ovs-vswitchd",
                "unix:/tmp/x/db.sock",
                "--pidfile=/p",
                "--detach"
            ])),
            PathBuf::from("/tmp/x/db.sock")
        );
        assert_eq!(
            vswitchd_db(&args(&["ovs-vswitchd", "--pidfile", "--detach"])),
            PathBuf::from(DEFAULT_DB)
        );
    }
}
