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
    #[command(flatten)]
    Client(dataplane::ctl_cli::ClientCommand),
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
    /// New UDP connections created by the XDP programs, from templates
    /// the packet threads teach them (with the XDP flow cache only):
    /// `off` leaves every new connection to the packet threads.
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    xdp_ct_new: OnOff,
    /// OpenFlow connections each listener (the management socket, the
    /// `ptcp:` port) serves at once; more are closed at once (counted in
    /// `xbr stats`).
    #[arg(long, default_value_t = ofproto::limits::DEFAULT_MAX_CONNECTIONS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=100_000))]
    max_connections: usize,
    /// Flows all tables may hold together; adds past it are refused with
    /// OFPFMFC_TABLE_FULL (per-table limits: OVSDB's Flow_Table).
    #[arg(long, default_value_t = 1_000_000,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=100_000_000))]
    max_flows: usize,
    /// Bundles one OpenFlow connection may have open (OFPBFC_OUT_OF_BUNDLES
    /// past it).
    #[arg(long, default_value_t = 64,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65_536))]
    max_bundles: usize,
    /// Messages one OpenFlow connection's open bundles may hold together
    /// (OFPBFC_MSG_TOO_MANY past it).
    #[arg(long, default_value_t = ofproto::limits::DEFAULT_MAX_BUNDLE_MSGS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=10_000_000))]
    bundle_max_msgs: usize,
    /// Seconds after which a bundle nobody added to is discarded
    /// (OFPBFC_TIMEOUT), OVS's `other_config:bundle-idle-timeout`.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    bundle_idle_timeout: u64,
    /// PACKET_INs per second to each `--controller` (OVS's
    /// `controller_rate_limit`); unlimited without it.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    controller_rate_limit: Option<u32>,
    /// PACKET_INs in a burst to each `--controller` (OVS's
    /// `controller_burst_limit`; default a quarter of the rate).
    #[arg(long, requires = "controller_rate_limit",
          value_parser = clap::value_parser!(u32).range(1..))]
    controller_burst_limit: Option<u32>,
}

impl RunArgs {
    /// The OpenFlow control plane's bounds the flags set.
    fn control_limits(&self) -> ofproto::limits::ControlLimits {
        ofproto::limits::ControlLimits {
            max_connections: self.max_connections,
            max_bundles: self.max_bundles,
            max_bundle_msgs: self.bundle_max_msgs,
            bundle_idle_timeout: std::time::Duration::from_secs(self.bundle_idle_timeout),
            ..Default::default()
        }
    }
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
        Command::Client(command) => dataplane::ctl_cli::run(command),
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
    let packet_in_limits = ofproto::limits::PacketInLimit::from_columns(
        args.controller_rate_limit.map(i64::from),
        args.controller_burst_limit.map(i64::from),
    );
    let control = args.control_limits();
    let packet_in_limits = packet_in_limits
        .map(|l| args.controllers.iter().map(|c| (*c, l)).collect())
        .unwrap_or_default();
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
        xdp_ct_new: args.xdp_ct_new == OnOff::On,
        control,
        max_flows: args.max_flows,
        packet_in_limits,
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
        xdp_ct_new: args.xdp_ct_new == OnOff::On,
        control: args.control_limits(),
        max_flows: args.max_flows,
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
