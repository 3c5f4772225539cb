//! The host around xbr: bpffs, locked memory (and the cgroup that BPF
//! maps are charged to), and the capabilities this process holds.

use super::Check;
use dataplane::privs;

/// Where bpffs lives (systemd mounts it at boot).
pub(super) const BPFFS: &str = "/sys/fs/bpf";

/// Locked memory one port's AF_XDP UMEM takes (4096 frames of 2 KiB).
const UMEM_PER_PORT: u64 = 8 << 20;
/// Below this RLIMIT_MEMLOCK (without CAP_IPC_LOCK) a bridge of a few
/// dozen pods cannot pin its UMEMs.
const MEMLOCK_NEEDED: u64 = 256 << 20;

pub(super) fn bpffs() -> Check {
    let name = "bpffs";
    match nix::sys::statfs::statfs(BPFFS) {
        Ok(fs) if fs.filesystem_type() == nix::sys::statfs::BPF_FS_MAGIC => {
            Check::ok(name, format!("{BPFFS} is a bpf filesystem"))
        }
        Ok(fs) => Check::warn(
            name,
            format!(
                "{BPFFS} is not a bpf filesystem (type {:#x}): BPF state cannot be pinned there",
                fs.filesystem_type().0
            ),
            format!("mount -t bpf bpf {BPFFS} (systemd mounts it at boot; in a pod mount the host's {BPFFS})"),
        ),
        Err(e) => Check::warn(
            name,
            format!("{BPFFS}: {e}"),
            format!("mount -t bpf bpf {BPFFS}"),
        ),
    }
}

/// The soft RLIMIT_MEMLOCK in bytes (`None`: unlimited), from
/// /proc/self/limits.
fn memlock_limit() -> Option<Option<u64>> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find(|l| l.starts_with("Max locked memory"))?;
    let soft = line["Max locked memory".len()..]
        .split_whitespace()
        .next()?;
    if soft == "unlimited" {
        return Some(None);
    }
    soft.parse().ok().map(Some)
}

/// The memory limit of this process's cgroup (v2), if any.
fn cgroup_memory_max() -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    let max = std::fs::read_to_string(format!("/sys/fs/cgroup{path}/memory.max")).ok()?;
    Some(max.trim().to_string())
}

pub(super) fn memlock() -> Check {
    let name = "memlock";
    let cgroup = match cgroup_memory_max() {
        Some(m) if m != "max" => format!("; BPF maps count against the cgroup's memory.max {m}"),
        _ => String::new(),
    };
    let ipc_lock = caps::has_cap(
        None,
        caps::CapSet::Effective,
        caps::Capability::CAP_IPC_LOCK,
    )
    .unwrap_or(false);
    if ipc_lock {
        return Check::ok(
            name,
            format!("CAP_IPC_LOCK held: AF_XDP memory is not limited by RLIMIT_MEMLOCK{cgroup}"),
        );
    }
    match memlock_limit() {
        Some(None) => Check::ok(name, format!("RLIMIT_MEMLOCK unlimited{cgroup}")),
        Some(Some(n)) if n >= MEMLOCK_NEEDED => Check::ok(
            name,
            format!("RLIMIT_MEMLOCK {} MiB, {} ports' AF_XDP memory{cgroup}", n >> 20, n / UMEM_PER_PORT),
        ),
        Some(Some(n)) => Check::fail(
            name,
            format!(
                "RLIMIT_MEMLOCK is {} KiB without CAP_IPC_LOCK; each AF_XDP port locks {} MiB",
                n >> 10,
                UMEM_PER_PORT >> 20
            ),
            "grant CAP_IPC_LOCK (the unit and the DaemonSet do) or raise the limit (LimitMEMLOCK=infinity, ulimit -l unlimited)",
        ),
        None => Check::warn(name, "cannot read /proc/self/limits", "check that /proc is mounted"),
    }
}

pub(super) fn capabilities() -> Check {
    let name = "capabilities";
    match privs::missing() {
        Ok(missing) if missing.is_empty() => {
            let optional = privs::optional_held().unwrap_or_default();
            let held: Vec<String> = privs::NEEDED
                .iter()
                .map(|(c, _)| *c)
                .chain(optional.iter().copied())
                .map(|c| c.to_string())
                .collect();
            if optional.len() < privs::OPTIONAL.len() {
                let lacking: Vec<String> = privs::OPTIONAL
                    .iter()
                    .filter(|(c, _)| !optional.contains(c))
                    .map(|(c, w)| format!("{c} ({w})"))
                    .collect();
                return Check::warn(
                    name,
                    format!("holds {}; lacks {}", held.join(", "), lacking.join("; ")),
                    "grant CAP_SYS_ADMIN for xdp-peer-gro, or run with --xdp-peer-gro off",
                );
            }
            Check::ok(name, format!("holds {}", held.join(", ")))
        }
        Ok(missing) => {
            let list: Vec<String> = missing
                .iter()
                .map(|c| format!("{c} ({})", privs::why(*c).unwrap_or("?")))
                .collect();
            let names: Vec<String> = missing.iter().map(|c| c.to_string()).collect();
            Check::fail(
                name,
                format!("missing {}", list.join("; ")),
                format!("run as root or grant {} (systemd: AmbientCapabilities=, Kubernetes: securityContext.capabilities.add)", names.join(" ")),
            )
        }
        Err(e) => Check::fail(name, e.to_string(), "check /proc/self/status"),
    }
}
