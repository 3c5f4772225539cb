//! flowload: how fast xbr and Open vSwitch 3.1 take a 100k-flow agent
//! flow set, and how much memory they hold with it (issue 3's benchmark).
//!
//! Both switches run in the same invocation, one after the other (never
//! at the same time: the machine has two cores), each in a network
//! namespace of its own with the agent's `vxlan0`=1 and `tun0`=2:
//!
//! 1. `gen_flows.py` (`$XBR_SDN_DIR`, default `shared/sdn` beside the
//!    repository, else `/work/shared/sdn`) writes an agent flow set of
//!    about 100k flows in the agent's `bundle` format (multitenant mode,
//!    16300 pods, 6200 remote nodes, egress IPs);
//! 2. for each run, each switch is emptied (`del-flows`, `del-groups`) and
//!    loaded with `ovs-ofctl -O OpenFlow13 bundle br0 FILE`, as the agent
//!    loads it; the wall time of that command is the figure;
//! 3. after the last run, the flow count of both is checked and the RSS
//!    (`VmRSS`) of xbr and ovs-vswitchd is read.
//!
//! The xbr binary is `$XBR_BIN`, else `xbr` next to this program (build it
//! with `cargo build --release -p xbr-daemon --bin xbr`). Needs root.
//!
//! Usage: `cargo run --release -p bench --bin flowload [-- --runs N]`

use bench::ovs::{
    cpu_time, rss_kib, run_bounded, unique_tag, Ovs, OvsError, PortKind, PortSpec, BRIDGE,
    CMD_TIMEOUT, NAME_PREFIX,
};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// The generator's arguments: multitenant (linear in pods and nodes, no
/// NetworkPolicy products) sized to ~100k flows. 5 flows per pod, 3 per
/// remote node; a /18 node subnet holds 16300 pods and the /5 cluster
/// network 6200 /18 HostSubnets.
const GEN_ARGS: &[&str] = &[
    "--mode",
    "multitenant",
    "--pods",
    "16300",
    "--namespaces",
    "100",
    "--remote-nodes",
    "6200",
    "--services",
    "50",
    "--local-subnet",
    "10.0.0.0/18",
    "--cluster-network",
    "8.0.0.0/5",
    "--node-ip",
    "192.168.0.10",
    "--egress-ips",
    "3",
    "--format",
    "bundle",
];
/// The multicast flow of table 111 lists every remote node (3 actions
/// each); with 6200 nodes it would not fit one OpenFlow message (64 KiB),
/// for OVS as for xbr. It keeps this many nodes.
const T111_NODES: usize = 50;
const LOAD_TIMEOUT: Duration = Duration::from_secs(600);
const START_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
enum FlowloadError {
    #[error(transparent)]
    Ovs(#[from] OvsError),
    #[error("{0}")]
    Setup(String),
    #[error("usage: flowload [--runs N] (N >= 1): {0}")]
    Usage(String),
}

/// A private directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(what: &str) -> Result<Self, FlowloadError> {
        let path = std::env::temp_dir().join(format!("{NAME_PREFIX}-{what}-{}", unique_tag()));
        std::fs::create_dir_all(&path)
            .map_err(|e| FlowloadError::Setup(format!("creating {}: {e}", path.display())))?;
        Ok(TempDir(path))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.0) {
            eprintln!("warning: removing {}: {e}", self.0.display());
        }
    }
}

/// `xbr run` inside a namespace of its own; stopped (SIGTERM, then
/// SIGKILL after a bound) and its namespace deleted on drop.
struct XbrProc {
    child: Child,
    netns: String,
    dir: TempDir,
}

fn xbr_binary() -> Result<PathBuf, FlowloadError> {
    let path = match std::env::var_os("XBR_BIN") {
        Some(p) => PathBuf::from(p),
        None => std::env::current_exe()
            .map_err(|e| FlowloadError::Setup(format!("locating this program: {e}")))?
            .with_file_name("xbr"),
    };
    if path.is_file() {
        Ok(path)
    } else {
        Err(FlowloadError::Setup(format!(
            "xbr binary not found at {}: build it with \
             `cargo build --release -p xbr-daemon --bin xbr` or set XBR_BIN",
            path.display()
        )))
    }
}

impl XbrProc {
    fn start() -> Result<Self, FlowloadError> {
        let binary = xbr_binary()?;
        let dir = TempDir::new("flowload-xbr")?;
        let netns = format!("{NAME_PREFIX}-fl-{}", unique_tag());
        run_bounded(
            Command::new("ip").args(["netns", "add", &netns]),
            CMD_TIMEOUT,
        )?
        .ok()?;
        let log_path = dir.0.join("xbr.log");
        let log = std::fs::File::create(&log_path)
            .map_err(|e| FlowloadError::Setup(format!("creating {}: {e}", log_path.display())))?;
        let log2 = log
            .try_clone()
            .map_err(|e| FlowloadError::Setup(format!("duplicating the log: {e}")))?;
        let spawned = Command::new("ip")
            .args(["netns", "exec", &netns])
            .arg(&binary)
            .args(["run", "--bridge", BRIDGE, "--rundir"])
            .arg(&dir.0)
            .args([
                "--port",
                "vxlan0=1,type=internal",
                "--port",
                "tun0=2,type=internal",
            ])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn();
        let child = match spawned {
            Ok(c) => c,
            Err(e) => {
                let _ = run_bounded(
                    Command::new("ip").args(["netns", "del", &netns]),
                    CMD_TIMEOUT,
                );
                return Err(FlowloadError::Setup(format!(
                    "starting {}: {e}",
                    binary.display()
                )));
            }
        };
        let mut xbr = XbrProc { child, netns, dir };
        let mgmt = xbr.dir.0.join(format!("{BRIDGE}.mgmt"));
        let deadline = Instant::now() + START_TIMEOUT;
        while UnixStream::connect(&mgmt).is_err() {
            let exited = xbr.child.try_wait().ok().flatten();
            if exited.is_some() || Instant::now() >= deadline {
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                return Err(FlowloadError::Setup(format!(
                    "xbr did not come up ({}):\n{log}",
                    exited.map_or("timed out".to_string(), |s| s.to_string())
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(xbr)
    }

    fn ofctl_command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("ovs-ofctl");
        cmd.args(["-O", "OpenFlow13"])
            .args(args)
            .env("OVS_RUNDIR", &self.dir.0);
        cmd
    }
}

impl Drop for XbrProc {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if matches!(self.child.try_wait(), Ok(None)) {
            eprintln!("warning: xbr did not exit after SIGTERM; killing it");
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        let _ = run_bounded(
            Command::new("ip").args(["netns", "del", &self.netns]),
            CMD_TIMEOUT,
        );
    }
}

/// Cuts the table-111 flow's action list to [`T111_NODES`] remote nodes
/// (see there), keeping its final `goto_table`.
fn fit_t111(line: &str) -> String {
    if !line.starts_with("flow add table=111") {
        return line.to_string();
    }
    let marker = ",set_field:";
    let cut = line.match_indices(marker).nth(T111_NODES).map(|(i, _)| i);
    match (cut, line.rfind(",goto_table:")) {
        (Some(cut), Some(goto)) if cut < goto => format!("{}{}", &line[..cut], &line[goto..]),
        _ => line.to_string(),
    }
}

fn generate(dir: &Path) -> Result<(PathBuf, usize), FlowloadError> {
    // `$XBR_SDN_DIR`, else `shared/sdn` beside the repository, else
    // `/work/shared/sdn`.
    let beside = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/sdn");
    let sdn = std::env::var_os("XBR_SDN_DIR").unwrap_or_else(|| {
        if Path::new(beside).is_dir() {
            beside.into()
        } else {
            "/work/shared/sdn".into()
        }
    });
    let gen = Path::new(&sdn).join("gen_flows.py");
    if !gen.is_file() {
        return Err(FlowloadError::Setup(format!(
            "{} not found; set XBR_SDN_DIR to the directory holding gen_flows.py",
            gen.display()
        )));
    }
    let out = run_bounded(
        Command::new("python3").arg(&gen).args(GEN_ARGS),
        Duration::from_secs(120),
    )?
    .ok()?;
    let lines: Vec<String> = out.stdout.lines().map(fit_t111).collect();
    let flows = lines.iter().filter(|l| l.starts_with("flow add")).count();
    let path = dir.join("flows.bundle");
    std::fs::write(&path, lines.join("\n") + "\n")
        .map_err(|e| FlowloadError::Setup(format!("writing {}: {e}", path.display())))?;
    Ok((path, flows))
}

/// One timed load.
#[derive(Debug, Clone, Copy, Default)]
struct Load {
    /// Wall time of `ovs-ofctl bundle`.
    wall: Duration,
    /// CPU time of the switch process in that interval.
    switch_cpu: Duration,
    /// CPU time of ovs-ofctl itself (parsing the text, encoding).
    client_cpu: Duration,
}

/// CPU time of this process's waited-for children so far.
fn children_cpu() -> Duration {
    use nix::sys::resource::{getrusage, UsageWho};
    getrusage(UsageWho::RUSAGE_CHILDREN)
        .map(|u| {
            let t = |tv: nix::sys::time::TimeVal| {
                Duration::from_secs(u64::try_from(tv.tv_sec()).unwrap_or(0))
                    + Duration::from_micros(u64::try_from(tv.tv_usec()).unwrap_or(0))
            };
            t(u.user_time()) + t(u.system_time())
        })
        .unwrap_or_default()
}

/// Empties the switch, then times `bundle br0 FILE`.
fn timed_load(
    mut cmd_for: impl FnMut(&[&str]) -> Command,
    switch_pid: u32,
    file: &str,
) -> Result<Load, FlowloadError> {
    run_bounded(&mut cmd_for(&["del-flows", BRIDGE]), CMD_TIMEOUT)?.ok()?;
    run_bounded(&mut cmd_for(&["del-groups", BRIDGE]), CMD_TIMEOUT)?.ok()?;
    let (cpu0, client0) = (cpu_time(switch_pid)?, children_cpu());
    let start = Instant::now();
    run_bounded(&mut cmd_for(&["bundle", BRIDGE, file]), LOAD_TIMEOUT)?.ok()?;
    let wall = start.elapsed();
    Ok(Load {
        wall,
        switch_cpu: cpu_time(switch_pid)?.saturating_sub(cpu0),
        client_cpu: children_cpu().saturating_sub(client0),
    })
}

fn flow_count(mut cmd: Command) -> Result<usize, FlowloadError> {
    let out = run_bounded(&mut cmd, CMD_TIMEOUT)?.ok()?;
    out.stdout
        .split([' ', '\n'])
        .find_map(|w| w.strip_prefix("flow_count="))
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| FlowloadError::Setup(format!("no flow_count in {:?}", out.stdout)))
}

/// The load with the median wall time.
fn median(v: &mut [Load]) -> Load {
    v.sort_by_key(|l| l.wall);
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn parse_runs() -> Result<usize, FlowloadError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => Ok(3),
        [flag, n] if flag == "--runs" => n
            .parse()
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| FlowloadError::Usage(format!("bad run count {n:?}"))),
        other => Err(FlowloadError::Usage(format!(
            "unexpected arguments {other:?}"
        ))),
    }
}

fn run() -> Result<(), FlowloadError> {
    let runs = parse_runs()?;
    if !nix::unistd::geteuid().is_root() {
        return Err(FlowloadError::Setup(
            "flowload needs root (network namespaces)".into(),
        ));
    }
    let dir = TempDir::new("flowload")?;
    let (file, n_flows) = generate(&dir.0)?;
    let file_s = file.to_string_lossy().into_owned();
    println!(
        "flow set: {n_flows} flows (gen_flows.py {})",
        GEN_ARGS.join(" ")
    );

    let xbr = XbrProc::start()?;
    let ovs = Ovs::start(&[
        PortSpec::new("vxlan0", 1, PortKind::Vxlan),
        PortSpec::new("tun0", 2, PortKind::Internal),
    ])?;
    let rss = |pid: Option<u32>| pid.map(rss_kib).transpose();
    let xbr_pid = Some(xbr.child.id());
    let (xbr_rss0, ovs_rss0) = (rss(xbr_pid)?, rss(ovs.vswitchd_pid())?);

    let ovs_pid = ovs
        .vswitchd_pid()
        .ok_or_else(|| FlowloadError::Setup("ovs-vswitchd has no pid".into()))?;
    let (mut t_xbr, mut t_ovs) = (Vec::new(), Vec::new());
    for run in 1..=runs {
        let lx = timed_load(|a| xbr.ofctl_command(a), xbr.child.id(), &file_s)?;
        let lo = timed_load(|a| ovs.ofctl_command(a), ovs_pid, &file_s)?;
        println!(
            "run {run}: xbr {:.3} s wall ({:.3} s CPU in xbr, {:.3} s in ovs-ofctl), \
             OVS {:.3} s wall ({:.3} s CPU in ovs-vswitchd, {:.3} s in ovs-ofctl)",
            lx.wall.as_secs_f64(),
            lx.switch_cpu.as_secs_f64(),
            lx.client_cpu.as_secs_f64(),
            lo.wall.as_secs_f64(),
            lo.switch_cpu.as_secs_f64(),
            lo.client_cpu.as_secs_f64(),
        );
        t_xbr.push(lx);
        t_ovs.push(lo);
    }
    let (nx, no) = (
        flow_count(xbr.ofctl_command(&["dump-aggregate", BRIDGE]))?,
        flow_count(ovs.ofctl_command(&["dump-aggregate", BRIDGE]))?,
    );
    if nx != n_flows || no != n_flows {
        return Err(FlowloadError::Setup(format!(
            "flow counts after loading {n_flows}: xbr {nx}, OVS {no}"
        )));
    }
    let (xbr_rss, ovs_rss) = (rss(xbr_pid)?, rss(ovs.vswitchd_pid())?);
    let (mx, mo) = (median(&mut t_xbr), median(&mut t_ovs));
    let secs = |d: Duration| d.as_secs_f64();
    let ratio = |a: Duration, b: Duration| secs(a) / secs(b).max(1e-9);
    let mib =
        |k: Option<u64>| k.map_or("?".to_string(), |k| format!("{:.1} MiB", k as f64 / 1024.0));
    println!(
        "load by `ovs-ofctl -O OpenFlow13 bundle` (median of {runs} by wall time): \
         xbr {:.3} s, OVS 3.1 {:.3} s, OVS/xbr = {:.2}x (target >= 5x)",
        secs(mx.wall),
        secs(mo.wall),
        ratio(mo.wall, mx.wall)
    );
    println!(
        "switch CPU for the load: xbr {:.3} s, ovs-vswitchd {:.3} s, ovs-vswitchd/xbr = {:.2}x; \
         ovs-ofctl's own CPU (the same work for both): {:.3} s / {:.3} s",
        secs(mx.switch_cpu),
        secs(mo.switch_cpu),
        ratio(mo.switch_cpu, mx.switch_cpu),
        secs(mx.client_cpu),
        secs(mo.client_cpu)
    );
    println!(
        "RSS with {n_flows} flows: xbr {} (idle {}), ovs-vswitchd {} (idle {})",
        mib(xbr_rss),
        mib(xbr_rss0),
        mib(ovs_rss),
        mib(ovs_rss0)
    );
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e @ FlowloadError::Usage(_)) => {
            eprintln!("flowload: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("flowload: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fit_t111;

    #[test]
    fn t111_keeps_the_first_nodes_and_the_goto() {
        let mut line = String::from(
            "flow add table=111, priority=100, actions=move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31]",
        );
        for i in 0..200 {
            line.push_str(&format!(
                ",set_field:10.0.{}.{}->tun_dst,output:1",
                i / 200,
                i % 200
            ));
        }
        line.push_str(",goto_table:120");
        let cut = fit_t111(&line);
        assert_eq!(cut.matches(",set_field:").count(), super::T111_NODES);
        assert!(cut.ends_with(",output:1,goto_table:120"), "{cut}");
        assert_eq!(
            fit_t111("flow add table=0, actions=drop"),
            "flow add table=0, actions=drop"
        );
    }
}
