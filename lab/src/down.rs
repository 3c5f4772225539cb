//! `xbr lab down`: removes a lab, complete or not.
//!
//! It works from what it can find, so it also cleans up after a crashed or
//! interrupted `up`: the prefix from `lab.json` or `lab.prefix` (or given),
//! xbr pids from `lab.json`, the run directories' `xbr.pid` files and a scan
//! of /proc for xbr processes whose `--rundir` lies in the lab directory;
//! namespaces by the exact name shapes of that prefix. A pid is signalled
//! only if its command line still names the lab directory, so a recycled
//! pid is never hit. Everything is idempotent: a second `down` finds
//! nothing and succeeds.

use super::plan::is_lab_netns;
use super::state::{LabState, PREFIX_FILE};
use super::sys::{self, CMD_TIMEOUT};
use super::xbr_proc::process_alive;
use super::LabError;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

/// SIGTERM lets xbr detach its XDP programs and delete its TAPs itself.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
pub struct DownReport {
    pub prefix: Option<String>,
    pub stopped: Vec<u32>,
    pub killed: Vec<u32>,
    pub namespaces: Vec<String>,
    pub removed_dir: bool,
}

fn cmdline(pid: u32) -> Option<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(
        raw.split(|b| *b == 0)
            .filter(|s| !s.is_empty())
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect(),
    )
}

/// Whether `pid` is an `xbr run` whose run directory is inside `dir`.
fn is_lab_xbr(pid: u32, dir: &Path) -> bool {
    let Some(args) = cmdline(pid) else {
        return false;
    };
    let has_run = args.iter().any(|a| a == "run");
    let rundir_in_dir = args.windows(2).any(|w| {
        w.first().is_some_and(|a| a == "--rundir")
            && w.get(1).is_some_and(|r| Path::new(r).starts_with(dir))
    });
    has_run && rundir_in_dir
}

fn candidate_pids(dir: &Path, state: Option<&LabState>) -> BTreeSet<u32> {
    let mut pids = BTreeSet::new();
    if let Some(s) = state {
        pids.extend(s.nodes.iter().map(|n| n.xbr_pid).filter(|p| *p != 0));
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if let Ok(text) = std::fs::read_to_string(e.path().join("xbr.pid")) {
                if let Ok(pid) = text.trim().parse() {
                    pids.insert(pid);
                }
            }
        }
    }
    if let Ok(procs) = std::fs::read_dir("/proc") {
        for e in procs.flatten() {
            if let Some(pid) = e.file_name().to_str().and_then(|s| s.parse().ok()) {
                pids.insert(pid);
            }
        }
    }
    pids.into_iter().filter(|p| is_lab_xbr(*p, dir)).collect()
}

fn signal(pid: u32, sig: Signal) {
    if let Ok(raw) = i32::try_from(pid) {
        // ESRCH (already gone) is what we want anyway.
        let _ = kill(Pid::from_raw(raw), sig);
    }
}

/// SIGTERM, a bounded wait, then SIGKILL for the stragglers.
fn stop_all(pids: &BTreeSet<u32>, report: &mut DownReport) {
    for &pid in pids {
        signal(pid, Signal::SIGTERM);
    }
    let deadline = Instant::now() + STOP_TIMEOUT;
    while Instant::now() < deadline && pids.iter().any(|p| process_alive(*p)) {
        std::thread::sleep(Duration::from_millis(20));
    }
    for &pid in pids {
        if process_alive(pid) {
            signal(pid, Signal::SIGKILL);
            report.killed.push(pid);
        } else {
            report.stopped.push(pid);
        }
    }
}

/// Processes still inside a namespace (a ping of an interrupted check, a
/// shell someone opened there): the namespace would outlive its name.
fn netns_pids(ns: &str) -> Vec<u32> {
    sys::run("ip", &["netns", "pids", ns], CMD_TIMEOUT)
        .ok()
        .filter(|o| o.success())
        .map(|o| {
            o.stdout
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

fn read_prefix(dir: &Path, state: Option<&LabState>) -> Option<String> {
    if let Some(s) = state {
        return Some(s.prefix.clone());
    }
    std::fs::read_to_string(dir.join(PREFIX_FILE))
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| super::plan::check_prefix(s).is_ok())
}

/// Removes the lab in `dir` (and namespaces of `prefix`, if given).
pub fn down(dir: &Path, prefix: Option<&str>) -> Result<DownReport, LabError> {
    let mut report = DownReport::default();
    // A damaged lab.json must not stop the cleanup: fall back to scanning.
    let state = match LabState::read(dir) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("xbr lab: {e}; cleaning up by scanning");
            None
        }
    };
    let prefix = prefix
        .map(str::to_string)
        .or_else(|| read_prefix(dir, state.as_ref()));
    if let Some(p) = &prefix {
        super::plan::check_prefix(p)?;
    }

    // Only a directory that is a lab's (its marker files) is scanned for
    // switches and removed whole: `--dir /` must not reach other xbrs.
    let is_lab_dir = dir.join(PREFIX_FILE).exists() || dir.join(super::state::LAB_JSON).exists();
    if is_lab_dir {
        let pids = candidate_pids(dir, state.as_ref());
        stop_all(&pids, &mut report);
    }

    if let Some(p) = &prefix {
        let mut names: Vec<String> = sys::list_netns()?
            .into_iter()
            .filter(|n| is_lab_netns(p, n))
            .collect();
        names.sort();
        let stray: BTreeSet<u32> = names.iter().flat_map(|n| netns_pids(n)).collect();
        if !stray.is_empty() {
            stop_all(&stray, &mut report);
        }
        for n in &names {
            // Deleting a namespace deletes its veths (their peers too),
            // bridges and iptables rules with it.
            sys::ip(&["netns", "del", n])?;
            report.namespaces.push(n.clone());
        }
    }

    if is_lab_dir {
        std::fs::remove_dir_all(dir).map_err(|source| LabError::Io {
            context: format!("removing {}", dir.display()),
            source,
        })?;
        report.removed_dir = true;
    }
    report.prefix = prefix;
    Ok(report)
}
