//! `xbr`: a userspace OpenFlow switch that stands in for ovs-vswitchd.

/// glibc malloc kept the memory of large flow-table loads (bundles of
/// 100k flows are decoded, validated and freed on the connection thread)
/// in per-thread arenas; mimalloc returns it, so RSS follows the flows the
/// switch actually holds.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand};
use dataplane::bridge::{BridgeConfig, RunningBridge};
use dataplane::config::{assign_ofports, parse_listen, PortSpec};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "xbr",
    version,
    about = "A userspace OpenFlow 1.3 switch on AF_XDP"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a bridge in the foreground until SIGINT/SIGTERM.
    Run(RunArgs),
    /// Build, check and remove an OpenShift SDN cluster in network namespaces.
    Lab(dataplane::lab::cli::LabArgs),
    /// Trace a packet through a running bridge's pipeline (like
    /// `ovs-appctl ofproto/trace`).
    Trace(TraceArgs),
    /// Show or empty a running bridge's connection tracker (like
    /// `ovs-appctl dpctl/dump-conntrack` and `dpctl/flush-conntrack`).
    Conntrack(ConntrackArgs),
    /// Add or remove a port of a running bridge (like `ovs-vsctl add-port`
    /// and `del-port`).
    Port(PortArgs),
    /// Show a running bridge's port counters, drops by reason, caches and
    /// conntrack (like `ovs-appctl dpctl/show` and `dpif-netdev/pmd-stats-show`).
    Stats(BridgeStatsArgs),
    /// Show or change a running xbr's log filter (like `ovs-appctl
    /// vlog/list` and `vlog/set`).
    Log(LogArgs),
    /// The XDP flow cache's entries, the kernel's fast path (like
    /// `ovs-appctl dpctl/dump-flows` and `dpctl/del-flows`).
    Dpctl(DpctlArgs),
    /// The stations the NORMAL action learned (like `ovs-appctl fdb/show`
    /// and `fdb/flush`).
    Fdb(FdbArgs),
}

#[derive(clap::Args)]
struct FdbArgs {
    /// Directory of the running bridge's sockets.
    #[arg(long, global = true, default_value = "/var/run/openvswitch")]
    rundir: PathBuf,
    #[command(subcommand)]
    action: FdbAction,
}

#[derive(Subcommand)]
enum FdbAction {
    /// List them: port, VLAN (0), MAC, seconds since last seen.
    Show(StatsTarget),
    /// Forget them all (the next packets flood until relearned).
    Flush(StatsTarget),
}

#[derive(clap::Args)]
struct LogArgs {
    /// Directory of the running bridge's sockets.
    #[arg(long, default_value = "/var/run/openvswitch")]
    rundir: PathBuf,
    /// Bridge name (the filter is the whole process's).
    bridge: String,
    /// New filter, as XBR_LOG takes it: `debug`, or
    /// `info,dataplane::vxlan=debug`; without it, show the current one.
    directives: Option<String>,
}

#[derive(clap::Args)]
struct DpctlArgs {
    /// Directory of the running bridge's sockets.
    #[arg(long, global = true, default_value = "/var/run/openvswitch")]
    rundir: PathBuf,
    #[command(subcommand)]
    action: DpctlAction,
}

#[derive(Subcommand)]
enum DpctlAction {
    /// List the entries in use: match, kernel hit counters, actions.
    DumpFlows(StatsTarget),
    /// Retire every entry (the packet thread installs them again as
    /// their flows miss).
    DelFlows(StatsTarget),
}

#[derive(clap::Args)]
struct BridgeStatsArgs {
    /// Directory of the running bridge's sockets.
    #[arg(long, default_value = "/var/run/openvswitch")]
    rundir: PathBuf,
    /// Bridge name.
    bridge: String,
}

#[derive(clap::Args)]
struct PortArgs {
    /// Directory of the running bridge's sockets.
    #[arg(long, global = true, default_value = "/var/run/openvswitch")]
    rundir: PathBuf,
    #[command(subcommand)]
    action: PortAction,
}

#[derive(Subcommand)]
enum PortAction {
    /// Add a port: NAME[=OFPORT][,type=system|internal|vxlan][,key=value...]
    /// as for `xbr run --port`; prints the port number it got.
    Add { bridge: String, spec: String },
    /// Remove a port.
    Del { bridge: String, name: String },
}

#[derive(clap::Args)]
struct ConntrackArgs {
    /// Directory of the running bridge's sockets.
    #[arg(long, global = true, default_value = "/var/run/openvswitch")]
    rundir: PathBuf,
    #[command(subcommand)]
    action: ConntrackAction,
}

#[derive(Subcommand)]
enum ConntrackAction {
    /// List the tracked connections, one per line.
    Dump(ConntrackTarget),
    /// Remove the tracked connections.
    Flush(ConntrackTarget),
    /// Connection count, limit and counters (invalid packets, table full,
    /// NAT exhausted, expired).
    Stats(StatsTarget),
    /// Connections by protocol (like `ovs-appctl dpctl/ct-stats-show`).
    Summary(SummaryTarget),
    /// Show the most connections the table holds, or change it (like
    /// `ovs-appctl dpctl/ct-get-maxconns` and `ct-set-maxconns`); a lower
    /// limit removes nothing, it refuses new connections until enough
    /// expire.
    Limit(LimitTarget),
}

#[derive(clap::Args)]
struct SummaryTarget {
    /// Bridge name.
    bridge: String,
    /// Only this conntrack zone.
    #[arg(long)]
    zone: Option<u16>,
    /// Also TCP connections by state.
    #[arg(long)]
    verbose: bool,
}

#[derive(clap::Args)]
struct LimitTarget {
    /// Bridge name.
    bridge: String,
    /// The new limit.
    limit: Option<u32>,
}

#[derive(clap::Args)]
struct StatsTarget {
    /// Bridge name.
    bridge: String,
}

#[derive(clap::Args)]
struct ConntrackTarget {
    /// Bridge name.
    bridge: String,
    /// Only this conntrack zone.
    #[arg(long)]
    zone: Option<u16>,
}

#[derive(clap::Args)]
struct TraceArgs {
    /// Directory of the running bridge's sockets.
    #[arg(long, default_value = "/var/run/openvswitch")]
    rundir: PathBuf,
    /// Bridge name.
    bridge: String,
    /// The ct_state a `ct(table=N)` fork resumes with (`trk,est`,
    /// `trk|new|rpl`, ...), one per recirculation in order; `trk,new` once
    /// they run out (as `ovs-appctl ofproto/trace --ct-next`).
    #[arg(long = "ct-next", value_name = "STATE", value_parser = ct_state_arg)]
    ct_next: Vec<String>,
    /// Packet: field=value pairs in ovs-ofctl syntax, e.g.
    /// in_port=3,tcp,nw_src=10.128.0.2,nw_dst=10.129.0.5,tp_dst=80
    #[arg(required = true, num_args = 1..)]
    flow: Vec<String>,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum FailMode {
    Secure,
    Standalone,
}

#[derive(clap::Args)]
struct RunArgs {
    /// Bridge name; OpenFlow is served on RUNDIR/NAME.mgmt.
    #[arg(long, default_value = "br0")]
    bridge: String,
    /// Directory for the management socket (ovs-ofctl looks in $OVS_RUNDIR).
    #[arg(long, default_value = "/var/run/openvswitch")]
    rundir: PathBuf,
    /// Also serve OpenFlow on TCP: ptcp:PORT[:IP] (IP defaults to 127.0.0.1).
    #[arg(long, value_name = "ptcp:PORT[:IP]", value_parser = listen_arg)]
    listen: Vec<SocketAddr>,
    /// A port: NAME[=OFPORT][,type=system|internal|vxlan][,mtu_request=N][,mac=MAC]
    /// [,xdp_redirect=on] (the XDP flow cache may forward to it; see README).
    #[arg(long = "port", value_name = "SPEC", value_parser = port_arg)]
    ports: Vec<PortSpec>,
    /// CPU to pin the packet thread to.
    #[arg(long)]
    cpu: Option<usize>,
    /// CPUs for xbr's poll-mode threads, as `taskset -c` lists them
    /// (`2,3` or `2-5`): the first `--pmd-threads` run the packet threads
    /// (one each); each other one runs a transmit thread, which does the
    /// kernel's share of AF_XDP transmits for some of the ports (see
    /// README).
    #[arg(long, value_name = "CPUS", value_parser = cpu_list_arg, conflicts_with = "cpu")]
    pmd_cores: Option<CpuList>,
    /// Packet threads: each receives from, runs the pipeline for and
    /// transmits to its share of the ports (dealt in turn), and hands
    /// off packets for the others' ports (see README).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64),
          conflicts_with = "cpu")]
    pmd_threads: u32,
    /// Datapath id (hex); defaults to one derived from the bridge name.
    #[arg(long, value_parser = hex_u64)]
    datapath_id: Option<u64>,
    /// An OpenFlow controller to connect to: tcp:IP[:PORT] (default port
    /// 6653). Repeatable. Flows stay when a controller goes away (fail
    /// mode secure).
    #[arg(long = "controller", value_name = "tcp:IP[:PORT]", value_parser = controller_arg)]
    controllers: Vec<SocketAddr>,
    /// What to do without a controller: `secure` forwards by the flows
    /// only (the OpenShift agent's setting); `standalone` forwards as a
    /// MAC-learning switch while no controller is connected.
    #[arg(long, value_enum, default_value_t = FailMode::Secure)]
    fail_mode: FailMode,
    /// Seconds a controller connection may stay silent before it is sent
    /// an echo request, and again before it is dropped and reconnected.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=3600))]
    inactivity_probe: u64,
    /// Entries of the packet thread's exact-match translation cache
    /// (rounded up to a power of two), in front of its megaflow cache
    /// (16384 entries); 0 turns both off.
    #[arg(long, default_value_t = flowtable::cache::DEFAULT_ENTRIES, value_parser = clap::value_parser!(usize))]
    flow_cache: usize,
    /// Most connections the connection tracker holds; new connections
    /// beyond it are +inv (and counted).
    #[arg(long, default_value_t = dataplane::conntrack::DEFAULT_LIMIT, value_parser = clap::value_parser!(usize))]
    ct_limit: usize,
    /// AF_XDP ports that may be added while running with full rings (8 MiB
    /// of packet memory each); more still work, sharing the frames.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(0..=1024))]
    spare_ports: u32,
    /// Take bridges and ports from ovsdb-server, like ovs-vswitchd, so
    /// that `ovs-vsctl` manages them (`unix:PATH`; without a value the
    /// system's database socket). Bridges, ports, fail modes and
    /// controllers then come from the database only.
    #[arg(long, value_name = "unix:PATH", num_args = 0..=1,
          default_missing_value = "unix:/var/run/openvswitch/db.sock",
          conflicts_with_all = ["ports", "listen", "controllers", "datapath_id"])]
    ovsdb: Option<String>,
    /// The XDP flow cache: system ports' XDP programs forward the
    /// packets of flows the pipeline already translated (into actions
    /// the kernel can carry out) without the packet thread.
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    xdp_cache: OnOff,
    /// Entries of the XDP flow cache.
    #[arg(long, default_value_t = dataplane::xdpcache::DEFAULT_ENTRIES,
          value_parser = clap::value_parser!(u32).range(1..=16_777_216))]
    xdp_cache_size: u32,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum OnOff {
    On,
    Off,
}

fn port_arg(s: &str) -> Result<PortSpec, String> {
    s.parse()
        .map_err(|e: dataplane::config::ConfigError| e.to_string())
}

fn controller_arg(s: &str) -> Result<SocketAddr, String> {
    dataplane::config::parse_controller(s).map_err(|e| e.to_string())
}

fn listen_arg(s: &str) -> Result<SocketAddr, String> {
    parse_listen(s).map_err(|e| e.to_string())
}

/// A parsed `--pmd-cores` (one value to clap, not one per CPU).
#[derive(Clone, Debug)]
struct CpuList(Vec<usize>);

fn cpu_list_arg(s: &str) -> Result<CpuList, String> {
    dataplane::cpus::parse_list(s)
        .map(CpuList)
        .map_err(|e| e.to_string())
}

/// The packet threads' CPUs and the transmit threads' CPUs, or what is
/// wrong with `--pmd-cores` for `--pmd-threads`.
fn thread_cpus(args: &RunArgs) -> Result<(Vec<usize>, Vec<usize>), String> {
    match &args.pmd_cores {
        Some(CpuList(cpus)) => dataplane::cpus::split_pmd_cores(cpus, args.pmd_threads as usize)
            .map_err(|e| e.to_string()),
        None => Ok((args.cpu.into_iter().collect(), Vec::new())),
    }
}

fn hex_u64(s: &str) -> Result<u64, String> {
    u64::from_str_radix(s.trim_start_matches("0x"), 16)
        .map_err(|_| format!("'{s}' is not a hexadecimal datapath id"))
}

/// Exit code for configuration errors (bad ports, addresses, names).
const EXIT_CONFIG: u8 = 2;

fn main() -> ExitCode {
    dataplane::logging::init();
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => run(args),
        Command::Lab(args) => dataplane::lab::cli::run(args),
        Command::Trace(args) => trace(args),
        Command::Conntrack(args) => conntrack(args),
        Command::Port(args) => port(args),
        Command::Stats(args) => {
            let path = dataplane::ctl::socket_path(&args.rundir, &args.bridge);
            ctl_request("xbr stats", &path, "stats")
        }
        Command::Log(args) => {
            let path = dataplane::ctl::socket_path(&args.rundir, &args.bridge);
            let line = match &args.directives {
                Some(d) => format!("log {d}"),
                None => "log".to_string(),
            };
            ctl_request("xbr log", &path, &line)
        }
        Command::Dpctl(args) => {
            let (verb, target) = match &args.action {
                DpctlAction::DumpFlows(t) => ("dump-flows", t),
                DpctlAction::DelFlows(t) => ("del-flows", t),
            };
            let path = dataplane::ctl::socket_path(&args.rundir, &target.bridge);
            ctl_request(
                &format!("xbr dpctl {verb}"),
                &path,
                &format!("dpctl {verb}"),
            )
        }
        Command::Fdb(args) => {
            let (verb, target) = match &args.action {
                FdbAction::Show(t) => ("show", t),
                FdbAction::Flush(t) => ("flush", t),
            };
            let path = dataplane::ctl::socket_path(&args.rundir, &target.bridge);
            ctl_request(&format!("xbr fdb {verb}"), &path, &format!("fdb {verb}"))
        }
    }
}

fn run(args: RunArgs) -> ExitCode {
    if let Some(target) = &args.ovsdb {
        return run_ovsdb(target, &args);
    }
    let (pmd_cpus, tx_cpus) = match thread_cpus(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("xbr: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let mut ports = args.ports;
    if let Err(e) = assign_ofports(&mut ports) {
        eprintln!("xbr: {e}");
        return ExitCode::from(EXIT_CONFIG);
    }
    let config = BridgeConfig {
        name: args.bridge,
        rundir: args.rundir,
        listen: args.listen,
        ports,
        pmd_threads: args.pmd_threads as usize,
        pmd_cpus,
        tx_cpus,
        datapath_id: args.datapath_id,
        flow_cache_entries: args.flow_cache,
        controllers: args.controllers,
        standalone: args.fail_mode == FailMode::Standalone,
        inactivity_probe: std::time::Duration::from_secs(args.inactivity_probe),
        ct_limit: args.ct_limit,
        spare_xsk_ports: args.spare_ports,
        xdp_cache_entries: (args.xdp_cache == OnOff::On).then_some(args.xdp_cache_size),
    };
    // Signals first, so a SIGTERM during start-up is not lost.
    let mut signals = match Signals::new([SIGINT, SIGTERM]) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("xbr: signal handling: {e}");
            return ExitCode::from(1);
        }
    };
    let rundir = config.rundir.clone();
    let bridge = match RunningBridge::start(config) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("xbr: {e}");
            return ExitCode::from(if e.is_config_error() { EXIT_CONFIG } else { 1 });
        }
    };
    let unixctl = start_unixctl(&rundir);
    if let Some(sig) = signals.forever().next() {
        tracing::info!(signal = sig, "shutting down");
    }
    if let Some(u) = unixctl {
        u.shutdown();
    }
    if bridge.shutdown() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Serves `ovs-appctl` in `rundir` (see `dataplane::unixctl`); xbr runs
/// on without it if that fails.
fn start_unixctl(rundir: &std::path::Path) -> Option<dataplane::unixctl::UnixctlServer> {
    match dataplane::unixctl::UnixctlServer::start(rundir) {
        Ok(u) => Some(u),
        Err(e) => {
            tracing::warn!(rundir = %rundir.display(), "cannot serve ovs-appctl: {e}");
            None
        }
    }
}

/// `xbr run --ovsdb`: serve every bridge of the database until a signal.
fn run_ovsdb(target: &str, args: &RunArgs) -> ExitCode {
    let path = match dataplane::ovsdb::parse_target(target) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("xbr: --ovsdb: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut signals = match Signals::new([SIGINT, SIGTERM]) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("xbr: signal handling: {e}");
            return ExitCode::from(1);
        }
    };
    {
        let stop = stop.clone();
        let spawned = std::thread::Builder::new()
            .name("xbr-signals".into())
            .spawn(move || {
                if let Some(sig) = signals.forever().next() {
                    tracing::info!(signal = sig, "shutting down");
                }
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
            });
        if let Err(e) = spawned {
            eprintln!("xbr: cannot start the signal thread: {e}");
            return ExitCode::from(1);
        }
    }
    let (pmd_cpus, tx_cpus) = match thread_cpus(args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("xbr: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let settings = dataplane::ovsdb::Settings {
        rundir: args.rundir.clone(),
        pmd_threads: args.pmd_threads as usize,
        pmd_cpus,
        tx_cpus,
        flow_cache_entries: args.flow_cache,
        ct_limit: args.ct_limit,
        inactivity_probe: std::time::Duration::from_secs(args.inactivity_probe),
        spare_xsk_ports: args.spare_ports,
        xdp_cache_entries: (args.xdp_cache == OnOff::On).then_some(args.xdp_cache_size),
    };
    let unixctl = start_unixctl(&settings.rundir);
    let clean = dataplane::ovsdb::run(&path, settings, &stop);
    if let Some(u) = unixctl {
        u.shutdown();
    }
    if clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// A `--ct-next` state, checked here and sent without spaces.
fn ct_state_arg(s: &str) -> Result<String, String> {
    flowtable::trace_recirc::parse_ct_next(s)?;
    Ok(s.split([',', '|', ' '])
        .filter(|f| !f.is_empty())
        .collect::<Vec<_>>()
        .join(","))
}

fn trace(args: TraceArgs) -> ExitCode {
    let path = dataplane::ctl::socket_path(&args.rundir, &args.bridge);
    let mut line = String::from("trace");
    for state in &args.ct_next {
        line.push_str(&format!(" --ct-next={state}"));
    }
    line.push(' ');
    line.push_str(&args.flow.join(" "));
    ctl_request("xbr trace", &path, &line)
}

fn port(args: PortArgs) -> ExitCode {
    let (bridge, line) = match &args.action {
        PortAction::Add { bridge, spec } => (bridge, format!("port add {spec}")),
        PortAction::Del { bridge, name } => (bridge, format!("port del {name}")),
    };
    let path = dataplane::ctl::socket_path(&args.rundir, bridge);
    ctl_request("xbr port", &path, &line)
}

fn conntrack(args: ConntrackArgs) -> ExitCode {
    let (verb, bridge, zone) = match &args.action {
        ConntrackAction::Dump(t) => ("dump", &t.bridge, t.zone),
        ConntrackAction::Flush(t) => ("flush", &t.bridge, t.zone),
        ConntrackAction::Stats(t) => ("stats", &t.bridge, None),
        ConntrackAction::Summary(t) => ("summary", &t.bridge, t.zone),
        ConntrackAction::Limit(t) => ("limit", &t.bridge, None),
    };
    let path = dataplane::ctl::socket_path(&args.rundir, bridge);
    let mut line = format!("conntrack {verb}");
    if let Some(z) = zone {
        line.push_str(&format!(" --zone {z}"));
    }
    match &args.action {
        ConntrackAction::Summary(t) if t.verbose => line.push_str(" --verbose"),
        ConntrackAction::Limit(LimitTarget { limit: Some(n), .. }) => {
            line.push_str(&format!(" {n}"))
        }
        _ => {}
    }
    ctl_request("xbr conntrack", &path, &line)
}

/// Sends one control-socket request and prints its reply.
fn ctl_request(what: &str, path: &std::path::Path, line: &str) -> ExitCode {
    match dataplane::ctl::request(path, line) {
        Ok(reply) if reply.ok => {
            print!("{}", reply.text);
            ExitCode::SUCCESS
        }
        Ok(reply) => {
            eprintln!("{what}: {}", reply.text);
            ExitCode::from(EXIT_CONFIG)
        }
        Err(e @ dataplane::ctl::CtlError::Connect { .. }) => {
            eprintln!("{what}: {e}");
            ExitCode::from(EXIT_CONFIG)
        }
        Err(e) => {
            eprintln!("{what}: {e}");
            ExitCode::from(1)
        }
    }
}
