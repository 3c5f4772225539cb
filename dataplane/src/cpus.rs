//! Which CPUs xbr's poll-mode threads run on: the packet threads on the
//! first (one each, `--pmd-threads` of them), transmit threads (see
//! `kicker`) on the others. Given as a
//! `taskset -c` list (`--pmd-cores 2,3`, `2-5`) or, in OVSDB mode, as
//! OVS's `other_config:pmd-cpu-mask` (a hex mask, lowest bit CPU 0), and
//! changeable while running: threads are re-pinned by their thread ids.

use nix::sched::{sched_setaffinity, CpuSet};
use nix::unistd::Pid;
use std::sync::atomic::{AtomicI32, Ordering};
use thiserror::Error;

/// Most CPUs a list or mask may name.
pub const MAX_PMD_CORES: usize = 64;

#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum CpuError {
    #[error("--pmd-cores '{list}': {reason}")]
    BadList { list: String, reason: String },
    #[error("pmd-cpu-mask '{mask}': {reason}")]
    BadMask { mask: String, reason: String },
    #[error("CPU {cpu} does not exist or is not allowed (available: {available})")]
    NoSuchCpu { cpu: usize, available: String },
    #[error("cannot pin a thread to CPU {cpu}: {source}")]
    Pin { cpu: usize, source: nix::Error },
    #[error("--pmd-cores lists {listed} CPU(s), too few for --pmd-threads {threads} (one each)")]
    TooFewForThreads { listed: usize, threads: usize },
}

/// Splits a `--pmd-cores` list between `threads` packet threads (the
/// first CPUs, one each) and transmit threads (the rest).
pub fn split_pmd_cores(
    cpus: &[usize],
    threads: usize,
) -> Result<(Vec<usize>, Vec<usize>), CpuError> {
    if cpus.len() < threads {
        return Err(CpuError::TooFewForThreads {
            listed: cpus.len(),
            threads,
        });
    }
    Ok((cpus[..threads].to_vec(), cpus[threads..].to_vec()))
}

/// Parses a CPU list as `taskset -c` writes one (`1,3-5`): distinct CPU
/// numbers, in the order given.
pub fn parse_list(s: &str) -> Result<Vec<usize>, CpuError> {
    let bad = |reason: String| CpuError::BadList {
        list: s.to_string(),
        reason,
    };
    let number = |n: &str| {
        n.trim()
            .parse::<usize>()
            .map_err(|_| bad(format!("'{n}' is not a CPU number")))
    };
    let mut cpus = Vec::new();
    for item in s.split(',') {
        let (first, last) = match item.split_once('-') {
            Some((a, b)) => (number(a)?, number(b)?),
            None => {
                let n = number(item)?;
                (n, n)
            }
        };
        if last < first {
            return Err(bad(format!("range '{item}' runs backwards")));
        }
        if last - first >= MAX_PMD_CORES {
            return Err(bad(format!("more than {MAX_PMD_CORES} CPUs")));
        }
        for cpu in first..=last {
            if cpus.contains(&cpu) {
                return Err(bad(format!("CPU {cpu} is given twice")));
            }
            cpus.push(cpu);
        }
        if cpus.len() > MAX_PMD_CORES {
            return Err(bad(format!("more than {MAX_PMD_CORES} CPUs")));
        }
    }
    Ok(cpus)
}

/// Parses OVS's `pmd-cpu-mask`: hex digits (an optional `0x`), the
/// lowest bit CPU 0; the CPUs in ascending order.
pub fn parse_mask(s: &str) -> Result<Vec<usize>, CpuError> {
    let bad = |reason: &str| CpuError::BadMask {
        mask: s.to_string(),
        reason: reason.to_string(),
    };
    let hex = s.trim();
    let hex = hex
        .strip_prefix("0x")
        .or_else(|| hex.strip_prefix("0X"))
        .unwrap_or(hex);
    if hex.is_empty() {
        return Err(bad("no hex digits"));
    }
    let mut cpus = Vec::new();
    for (i, c) in hex.chars().rev().enumerate() {
        let nibble = c
            .to_digit(16)
            .ok_or_else(|| bad("not a hexadecimal number"))?;
        for bit in 0..4 {
            if nibble & (1 << bit) != 0 {
                cpus.push(i * 4 + bit);
            }
        }
        if cpus.len() > MAX_PMD_CORES {
            return Err(bad("more than 64 CPUs"));
        }
    }
    if cpus.is_empty() {
        return Err(bad("no CPU set"));
    }
    Ok(cpus)
}

/// The CPU numbered `cpu`, if this process may run on it.
pub fn core_id(cpu: usize) -> Result<core_affinity::CoreId, CpuError> {
    let ids = core_affinity::get_core_ids().unwrap_or_default();
    match ids.iter().find(|c| c.id == cpu) {
        Some(c) => Ok(*c),
        None => {
            let available: Vec<String> = ids.iter().map(|c| c.id.to_string()).collect();
            Err(CpuError::NoSuchCpu {
                cpu,
                available: available.join(","),
            })
        }
    }
}

/// The NUMA node of `cpu` (0 where the kernel says none).
pub fn numa_node(cpu: usize) -> usize {
    std::fs::read_dir(format!("/sys/devices/system/cpu/cpu{cpu}"))
        .into_iter()
        .flatten()
        .flatten()
        .find_map(|e| e.file_name().to_str()?.strip_prefix("node")?.parse().ok())
        .unwrap_or(0)
}

/// A running thread's id, recorded by the thread itself, so that others
/// can move it to another CPU.
#[derive(Debug, Default)]
pub struct ThreadId(AtomicI32);

impl ThreadId {
    /// Called on the thread to record.
    pub fn record_current(&self) {
        self.0
            .store(nix::unistd::gettid().as_raw(), Ordering::Release);
    }

    /// The recorded thread's id, once it recorded it.
    pub fn tid(&self) -> Option<i32> {
        let tid = self.0.load(Ordering::Acquire);
        (tid != 0).then_some(tid)
    }

    /// Pins the recorded thread to `cpu`; nothing if none was recorded
    /// yet (it pins itself as it starts).
    pub fn pin(&self, cpu: usize) -> Result<(), CpuError> {
        let tid = self.0.load(Ordering::Acquire);
        if tid == 0 {
            return Ok(());
        }
        let mut set = CpuSet::new();
        set.set(cpu)
            .map_err(|source| CpuError::Pin { cpu, source })?;
        sched_setaffinity(Pid::from_raw(tid), &set).map_err(|source| CpuError::Pin { cpu, source })
    }
}

/// Where a packet thread runs, for `ovs-appctl dpif-netdev/pmd-rxq-show`:
/// the CPU it is pinned to, or the one it last ran on and `false`.
pub fn thread_cpu(id: &ThreadId) -> Option<(usize, bool)> {
    let tid = id.tid()?;
    if let Ok(set) = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(tid)) {
        let cpus: Vec<usize> = (0..nix::sched::CpuSet::count())
            .filter(|&c| set.is_set(c).unwrap_or(false))
            .collect();
        if let [cpu] = cpus[..] {
            return Some((cpu, true));
        }
    }
    // Field 39 of /proc/PID/task/TID/stat, counted after the command's
    // closing parenthesis (the command may hold spaces).
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    let after = stat.rsplit_once(") ")?.1;
    let cpu = after.split_whitespace().nth(36)?.parse().ok()?;
    Some((cpu, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_cpus_go_to_the_packet_threads() {
        assert_eq!(split_pmd_cores(&[4, 5, 6], 2), Ok((vec![4, 5], vec![6])));
        assert_eq!(split_pmd_cores(&[4], 1), Ok((vec![4], vec![])));
        let e = split_pmd_cores(&[4], 2).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--pmd-cores lists 1 CPU(s), too few for --pmd-threads 2 (one each)"
        );
    }

    #[test]
    fn parses_cpu_lists() {
        assert_eq!(parse_list("1").unwrap(), vec![1]);
        assert_eq!(parse_list("0,2-4").unwrap(), vec![0, 2, 3, 4]);
        assert_eq!(parse_list("3,1").unwrap(), vec![3, 1]);
        for bad in ["", "a", "1,,2", "4-2", "1,1", "0-1,1", "0-1000", "-1", "1-"] {
            let e = parse_list(bad).unwrap_err().to_string();
            assert!(e.starts_with(&format!("--pmd-cores '{bad}': ")), "{e}");
        }
    }

    #[test]
    fn parses_ovs_masks() {
        assert_eq!(parse_mask("0x6").unwrap(), vec![1, 2]);
        assert_eq!(parse_mask("1").unwrap(), vec![0]);
        assert_eq!(parse_mask("F0").unwrap(), vec![4, 5, 6, 7]);
        assert_eq!(parse_mask("0x100000000").unwrap(), vec![32]);
        for bad in ["", "0x", "0", "0x00", "xyz", "0x1g"] {
            let e = parse_mask(bad).unwrap_err().to_string();
            assert!(e.starts_with(&format!("pmd-cpu-mask '{bad}': ")), "{e}");
        }
    }

    #[test]
    fn a_thread_is_pinned_by_its_id() {
        let cpu = core_affinity::get_core_ids().unwrap()[0].id;
        let id = std::sync::Arc::new(ThreadId::default());
        // Not recorded yet: nothing to move.
        id.pin(cpu).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let thread_id = id.clone();
        let t = std::thread::spawn(move || {
            thread_id.record_current();
            tx.send(()).unwrap();
            go_rx.recv().unwrap();
            let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
            status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .map(|c| c.trim().to_string())
        });
        rx.recv().unwrap();
        id.pin(cpu).unwrap();
        go_tx.send(()).unwrap();
        assert_eq!(t.join().unwrap(), Some(cpu.to_string()));
        assert!(matches!(
            core_id(100_000),
            Err(CpuError::NoSuchCpu { cpu: 100_000, .. })
        ));
    }
}
