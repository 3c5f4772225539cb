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
}

#[derive(clap::Args)]
struct TraceArgs {
    /// Directory of the running bridge's sockets.
    #[arg(long, default_value = "/var/run/openvswitch")]
    rundir: PathBuf,
    /// Bridge name.
    bridge: String,
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
    /// A port: NAME[=OFPORT][,type=system|internal][,mtu_request=N][,mac=MAC].
    #[arg(long = "port", value_name = "SPEC", value_parser = port_arg)]
    ports: Vec<PortSpec>,
    /// CPU to pin the packet thread to.
    #[arg(long)]
    cpu: Option<usize>,
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
    /// (rounded up to a power of two); 0 turns it off.
    #[arg(long, default_value_t = flowtable::cache::DEFAULT_ENTRIES, value_parser = clap::value_parser!(usize))]
    flow_cache: usize,
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

fn hex_u64(s: &str) -> Result<u64, String> {
    u64::from_str_radix(s.trim_start_matches("0x"), 16)
        .map_err(|_| format!("'{s}' is not a hexadecimal datapath id"))
}

/// Exit code for configuration errors (bad ports, addresses, names).
const EXIT_CONFIG: u8 = 2;

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("XBR_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => run(args),
        Command::Lab(args) => dataplane::lab::cli::run(args),
        Command::Trace(args) => trace(args),
    }
}

fn run(args: RunArgs) -> ExitCode {
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
        cpu: args.cpu,
        datapath_id: args.datapath_id,
        flow_cache_entries: args.flow_cache,
        controllers: args.controllers,
        standalone: args.fail_mode == FailMode::Standalone,
        inactivity_probe: std::time::Duration::from_secs(args.inactivity_probe),
    };
    let mut bridge = match RunningBridge::start(config) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("xbr: {e}");
            return ExitCode::from(if e.is_config_error() { EXIT_CONFIG } else { 1 });
        }
    };
    bridge.wait_for_signal();
    if bridge.shutdown() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn trace(args: TraceArgs) -> ExitCode {
    let path = dataplane::ctl::socket_path(&args.rundir, &args.bridge);
    match dataplane::ctl::request(&path, &format!("trace {}", args.flow.join(" "))) {
        Ok(reply) if reply.ok => {
            print!("{}", reply.text);
            ExitCode::SUCCESS
        }
        Ok(reply) => {
            eprintln!("xbr trace: {}", reply.text);
            ExitCode::from(EXIT_CONFIG)
        }
        Err(e @ dataplane::ctl::CtlError::Connect { .. }) => {
            eprintln!("xbr trace: {e}");
            ExitCode::from(EXIT_CONFIG)
        }
        Err(e) => {
            eprintln!("xbr trace: {e}");
            ExitCode::from(1)
        }
    }
}
