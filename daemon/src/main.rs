//! `xbr`: a userspace OpenFlow switch that stands in for ovs-vswitchd.

#![forbid(unsafe_code)]

/// glibc malloc kept the memory of large flow-table loads (bundles of
/// 100k flows are decoded, validated and freed on the connection thread)
/// in per-thread arenas; mimalloc returns it, so RSS follows the flows the
/// switch actually holds.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::Subcommand;
use dataplane::config::{assign_ofports, parse_listen, PortSpec, Target};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use xbr_daemon::bridge::{BridgeConfig, RunningBridge};

#[derive(clap::Parser)]
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
    Run(Box<RunArgs>),
    /// Check the node before `xbr run` (kernel, bpffs, memory, privileges,
    /// ovsdb-server, other switches, the ports): one line per check; exit
    /// 1 if any failed. Takes `xbr run`'s flags and `--config`.
    Doctor(Box<RunArgs>),
    /// Whether a running xbr is alive (answers on its ovs-appctl socket)
    /// and, with --ovsdb, ready (serves every bridge of the database):
    /// exit 0 or 1, for Kubernetes probes and scripts.
    Probe(ProbeArgs),
    /// Build, check and remove an OpenShift SDN cluster in network namespaces.
    Lab(xbr_lab::cli::LabArgs),
    /// Remove a bridge's pinned XDP programs and flow cache (what a
    /// stopped xbr leaves forwarding): its ports' programs detach.
    Teardown(TeardownArgs),
    /// Capture a port's frames, both directions, including what the XDP
    /// flow cache would forward (like `ovs-tcpdump`): one line per frame,
    /// or a pcap file with -w. Stops after -c COUNT frames or on SIGINT.
    Capture(xbr_daemon::capture::CaptureArgs),
    #[command(flatten)]
    Client(xbr_daemon::ctl_cli::ClientCommand),
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum FailMode {
    Secure,
    Standalone,
}

// The field comments are `--help` text (clap), where `[...]` marks an
// optional part, not a rustdoc link.
#[allow(rustdoc::broken_intra_doc_links)]
#[derive(clap::Args)]
struct RunArgs {
    /// Read settings from this file: `key = value` lines whose keys are
    /// the long flags (`pmd-threads = 2`); flags given here win.
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Bridge name; OpenFlow is served on RUNDIR/NAME.mgmt.
    #[arg(long, default_value = "br0")]
    bridge: String,
    /// Directory for the management socket (ovs-ofctl looks in $OVS_RUNDIR).
    #[arg(long, default_value = "/var/run/openvswitch")]
    rundir: PathBuf,
    /// Also serve OpenFlow on TCP: ptcp:PORT[:IP], or over TLS:
    /// pssl:PORT[:IP] (with --private-key, --certificate, --ca-cert; see
    /// docs/tls.md). IP defaults to 127.0.0.1.
    #[arg(long, value_name = "ptcp:PORT[:IP]", value_parser = listen_arg)]
    listen: Vec<Target>,
    /// A port: NAME[=OFPORT][,type=system|internal|vxlan][,mtu_request=N][,mac=MAC]
    /// [,xdp_redirect=auto|on|off] (whether the XDP flow cache may forward
    /// to it; auto: while the kernel says the device takes redirected
    /// frames; see docs/xdp-redirect-readiness.md).
    #[arg(long = "port", value_name = "SPEC", value_parser = port_arg)]
    ports: Vec<PortSpec>,
    /// CPU to pin the packet thread to.
    #[arg(long)]
    cpu: Option<usize>,
    /// CPUs for xbr's poll-mode threads, as `taskset -c` lists them
    /// (`2,3` or `2-5`): the first `--pmd-threads` run the packet threads
    /// (one each); each other one runs a transmit thread, which does the
    /// kernel's share of AF_XDP transmits for some of the ports (see
    /// docs/packet-threads.md).
    #[arg(long, value_name = "CPUS", value_parser = cpu_list_arg, conflicts_with = "cpu")]
    pmd_cores: Option<CpuList>,
    /// Packet threads: each receives from, runs the pipeline for and
    /// transmits to its share of the ports (dealt in turn), and hands
    /// off packets for the others' ports (see docs/packet-threads.md).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64),
          conflicts_with = "cpu")]
    pmd_threads: u32,
    /// Datapath id (hex); defaults to one derived from the bridge name.
    #[arg(long, value_parser = hex_u64)]
    datapath_id: Option<u64>,
    /// An OpenFlow controller to connect to: tcp:IP[:PORT], or over TLS
    /// ssl:IP[:PORT] (default port 6653). Repeatable. Flows stay when a
    /// controller goes away (fail mode secure).
    #[arg(long = "controller", value_name = "tcp:IP[:PORT]", value_parser = controller_arg)]
    controllers: Vec<Target>,
    /// PEM private key for TLS (ssl:/pssl: OpenFlow targets, an ssl:
    /// --ovsdb), as OVS's --private-key. With --ovsdb, the database's SSL
    /// table (`ovs-vsctl set-ssl`) replaces the three files once read.
    #[arg(long, value_name = "FILE")]
    private_key: Option<PathBuf>,
    /// PEM certificate of --private-key (and its chain), as OVS's
    /// --certificate.
    #[arg(long, value_name = "FILE")]
    certificate: Option<PathBuf>,
    /// PEM CA certificate(s) that peers' certificates must be signed by
    /// (both sides present one, as with OVS), as OVS's --ca-cert.
    #[arg(long, value_name = "FILE")]
    ca_cert: Option<PathBuf>,
    /// Instead of --ca-cert, as OVS's --bootstrap-ca-cert: while FILE
    /// does not exist, the first ssl: peer's CA certificate (which it
    /// must send, OVS's --peer-ca-cert) is trusted and written there, and
    /// that connection is dropped; then FILE is the CA certificate.
    #[arg(long, value_name = "FILE", conflicts_with = "ca_cert")]
    bootstrap_ca_cert: Option<PathBuf>,
    /// What to do without a controller: `secure` forwards by the flows
    /// only (the OpenShift agent's setting); `standalone` forwards as a
    /// MAC-learning switch while no configured controller is connected,
    /// and without --controller starts with OVS's `priority=0
    /// actions=NORMAL` flow, which installed flows override.
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
    /// that `ovs-vsctl` manages them (`unix:PATH`, or `ssl:IP[:PORT]`
    /// with --private-key, --certificate, --ca-cert; without a value the
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
    #[arg(long, default_value_t = dataplane::fastpath::cache::DEFAULT_ENTRIES,
          value_parser = clap::value_parser!(u32).range(1..=16_777_216))]
    xdp_cache_size: u32,
    /// New UDP connections created by the XDP programs, from templates
    /// the packet threads teach them (with the XDP flow cache only):
    /// `off` leaves every new connection to the packet threads.
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    xdp_ct_new: OnOff,
    /// The state file RUNDIR/BRIDGE.state: each bridge's flows, groups,
    /// meters, port numbers and connections, restored at start, saved at
    /// a graceful stop and every --state-snapshot seconds (docs/state.md).
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    state: OnOff,
    /// Seconds between the state file's snapshots while running (what a
    /// restart after SIGKILL or a crash restores); 0: only at a graceful
    /// stop.
    #[arg(long, value_name = "SECS",
          default_value_t = dataplane::state::DEFAULT_SNAPSHOT_PERIOD.as_secs(),
          value_parser = clap::value_parser!(u64).range(0..=86_400))]
    state_snapshot: u64,
    /// Pin the ports' XDP programs and the flow cache in the BPF
    /// filesystem, so that cached flows keep forwarding (and the rest is
    /// dropped, never handed to the host) while xbr is stopped or
    /// restarting; the next xbr adopts them (with the XDP flow cache only;
    /// see docs/pinning.md). `xbr teardown` or `ovs-appctl exit --cleanup`
    /// removes them.
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    xdp_pin: OnOff,
    /// Where the bridges' pin directories are (`ROOT/BRIDGE`); must be on
    /// a BPF filesystem, which xbr mounts on /sys/fs/bpf if needed.
    #[arg(long, default_value = dataplane::fastpath::pin::DEFAULT_ROOT)]
    bpf_pin_root: PathBuf,
    /// Serve Prometheus metrics on http://ADDR/metrics (IP:PORT, e.g.
    /// 127.0.0.1:9476); off by default. With --ovsdb, the database's
    /// `Open_vSwitch` `other_config:xbr-metrics` sets it too (this
    /// option wins). See docs/metrics.md.
    #[arg(long, value_name = "IP:PORT", value_parser = metrics_arg)]
    metrics: Option<SocketAddr>,
    /// Log to this file (appended to) instead of stderr; `ovs-appctl
    /// vlog/reopen` opens it again after logrotate renamed it.
    #[arg(long, value_name = "PATH")]
    log_file: Option<PathBuf>,
    /// Log lines as text, or as JSON objects, one per line.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Warnings and errors each call site may log: MESSAGES_PER_MINUTE
    /// after a burst of BURST; more are dropped and counted, as OVS's
    /// rate-limited messages are (0 turns the limit off).
    #[arg(long, value_name = "RATE[/BURST]", default_value = "60/20",
          value_parser = clap::value_parser!(xbr_daemon::logging::ratelimit::RateLimit))]
    log_rate_limit: xbr_daemon::logging::ratelimit::RateLimit,
    /// A port with xdp_redirect=auto whose veth peer (a pod's eth0) does
    /// not take XDP-redirected frames gets GRO turned on in the peer, from
    /// the host, so the XDP flow cache can forward to it (OVSDB: Bridge
    /// other_config:xdp-peer-gro=true|false overrides it per bridge; see
    /// docs/xdp-redirect-readiness.md for what it changes in the pod).
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    xdp_peer_gro: OnOff,
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
    /// The TLS files the flags give (`None` without any), or why they
    /// cannot be used. Checked here rather than with clap's `requires`,
    /// which would refuse each line of a `--config` file on its own.
    fn tls_files(&self) -> Result<Option<ofproto::tls::TlsFiles>, String> {
        let (key, cert) = match (&self.private_key, &self.certificate) {
            (Some(key), Some(cert)) => (key, cert),
            (None, None) if self.ca_cert.is_none() && self.bootstrap_ca_cert.is_none() => {
                return Ok(None)
            }
            _ => {
                return Err("TLS needs --private-key, --certificate and --ca-cert together".into())
            }
        };
        let (ca, bootstrap) = match (&self.ca_cert, &self.bootstrap_ca_cert) {
            (Some(ca), _) => (ca.clone(), false),
            (None, Some(b)) => (b.clone(), true),
            (None, None) => {
                return Err(
                    "--private-key and --certificate need --ca-cert: both sides \
                            of a TLS connection check the other's certificate"
                        .into(),
                )
            }
        };
        Ok(Some(ofproto::tls::TlsFiles {
            private_key: key.clone(),
            certificate: cert.clone(),
            ca_cert: ca,
            bootstrap_ca_cert: bootstrap,
        }))
    }

    fn state_config(&self) -> xbr_daemon::bridge::StateConfig {
        xbr_daemon::bridge::StateConfig {
            enabled: self.state == OnOff::On,
            snapshot: (self.state_snapshot > 0)
                .then(|| std::time::Duration::from_secs(self.state_snapshot)),
            restore: true,
        }
    }

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

#[derive(clap::Args)]
struct TeardownArgs {
    /// The bridge whose pinned state to remove.
    #[arg(long, default_value = "br0")]
    bridge: String,
    /// The pin root `xbr run` used (`--bpf-pin-root`).
    #[arg(long, default_value = dataplane::fastpath::pin::DEFAULT_ROOT)]
    bpf_pin_root: PathBuf,
}

#[derive(clap::Args)]
struct ProbeArgs {
    /// Directory of xbr's sockets.
    #[arg(long, default_value = "/var/run/openvswitch")]
    rundir: PathBuf,
    /// Ready only once every bridge of this database is served.
    #[arg(long, value_name = "unix:PATH")]
    ovsdb: Option<String>,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn metrics_arg(s: &str) -> Result<SocketAddr, String> {
    xbr_daemon::metrics::parse_addr(s).map_err(|e| e.to_string())
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

fn controller_arg(s: &str) -> Result<Target, String> {
    dataplane::config::parse_controller(s).map_err(|e| e.to_string())
}

fn listen_arg(s: &str) -> Result<Target, String> {
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
    let cli: Cli =
        match xbr_daemon::conffile::parse_cli(std::env::args_os().collect(), &["run", "doctor"]) {
            Ok(cli) => cli,
            Err(e) => {
                xbr_daemon::logging::init();
                eprintln!("xbr: {e}");
                return ExitCode::from(EXIT_CONFIG);
            }
        };
    let logging = match &cli.command {
        Command::Run(args) => xbr_daemon::logging::init_with(&xbr_daemon::logging::LogOptions {
            file: args.log_file.clone(),
            json: args.log_format == LogFormat::Json,
            rate: args.log_rate_limit,
        }),
        _ => {
            xbr_daemon::logging::init();
            Ok(())
        }
    };
    if let Err(e) = logging {
        eprintln!("xbr: {e}");
        return ExitCode::from(EXIT_CONFIG);
    }
    match cli.command {
        Command::Run(args) => run(*args),
        Command::Doctor(args) => doctor(&args),
        Command::Probe(args) => probe(&args),
        Command::Lab(args) => xbr_lab::cli::run(args),
        Command::Teardown(args) => teardown(args),
        Command::Capture(args) => xbr_daemon::capture::run(args),
        Command::Client(command) => xbr_daemon::ctl_cli::run(command),
    }
}

fn teardown(args: TeardownArgs) -> ExitCode {
    match dataplane::fastpath::pin::teardown(&args.bpf_pin_root, &args.bridge) {
        Ok(n) => {
            println!(
                "removed {n} pinned objects of bridge {} from {}",
                args.bridge,
                args.bpf_pin_root.display()
            );
            ExitCode::SUCCESS
        }
        Err(e @ dataplane::fastpath::pin::PinError::BadBridge(_)) => {
            eprintln!("xbr: teardown: {e}");
            ExitCode::from(EXIT_CONFIG)
        }
        Err(e) => {
            eprintln!("xbr: teardown: {e}");
            ExitCode::from(1)
        }
    }
}

/// Serves `--metrics`, if given; an error stops the start (the operator
/// asked for it).
fn start_metrics(
    addr: Option<SocketAddr>,
) -> Result<Option<xbr_daemon::metrics::MetricsServer>, ExitCode> {
    match addr
        .map(xbr_daemon::metrics::MetricsServer::start)
        .transpose()
    {
        Ok(m) => Ok(m),
        Err(e) => {
            eprintln!("xbr: {e}");
            Err(ExitCode::from(1))
        }
    }
}

fn run(args: RunArgs) -> ExitCode {
    // First, while xbr is one thread (capabilities are per thread).
    // CAP_SYS_ADMIN stays (if held) for xdp-peer-gro alone.
    if let Err(e) = dataplane::privs::drop_to_needed(args.xdp_peer_gro == OnOff::On) {
        eprintln!("xbr: {e}");
        return ExitCode::from(1);
    }
    let tls_files = match args.tls_files() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("xbr: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    if let Some(target) = &args.ovsdb {
        return run_ovsdb(target, &args, tls_files);
    }
    let uses_tls = args.listen.iter().chain(&args.controllers).any(|t| t.tls);
    if uses_tls && tls_files.is_none() {
        eprintln!("xbr: ssl: and pssl: targets need --private-key, --certificate and --ca-cert");
        return ExitCode::from(EXIT_CONFIG);
    }
    let tls = tls_files.map(ofproto::tls::TlsContext::new);
    if let Some(ctx) = tls.as_ref().filter(|_| uses_tls) {
        // A file that cannot be used is the operator's to fix now.
        if let Err(e) = ctx.check() {
            eprintln!("xbr: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    }
    let (pmd_cpus, tx_cpus) = match thread_cpus(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("xbr: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let state = args.state_config();
    let packet_in_limits = ofproto::limits::PacketInLimit::from_columns(
        args.controller_rate_limit.map(i64::from),
        args.controller_burst_limit.map(i64::from),
    );
    let control = args.control_limits();
    let packet_in_limits = packet_in_limits
        .map(|l| args.controllers.iter().map(|c| (c.addr, l)).collect())
        .unwrap_or_default();
    let mut ports = args.ports;
    if let Err(e) = assign_ofports(&mut ports) {
        eprintln!("xbr: {e}");
        return ExitCode::from(EXIT_CONFIG);
    }
    let config = BridgeConfig {
        state,
        flow_restore_wait: false,
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
        tls,
        standalone: args.fail_mode == FailMode::Standalone,
        inactivity_probe: std::time::Duration::from_secs(args.inactivity_probe),
        ct_limit: args.ct_limit,
        spare_xsk_ports: args.spare_ports,
        xdp_cache_entries: (args.xdp_cache == OnOff::On).then_some(args.xdp_cache_size),
        xdp_ct_new: args.xdp_ct_new == OnOff::On,
        pin_root: args.bpf_pin_root.clone(),
        pin: args.xdp_pin == OnOff::On,
        xdp_peer_gro: args.xdp_peer_gro == OnOff::On,
        control,
        max_flows: args.max_flows,
        packet_in_limits,
        controller_probes: Default::default(),
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
    let metrics = match start_metrics(args.metrics) {
        Ok(m) => m,
        Err(code) => return code,
    };
    let bridge = match RunningBridge::start(config) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("xbr: {e}");
            return ExitCode::from(if e.is_config_error() { EXIT_CONFIG } else { 1 });
        }
    };
    // No state to restore in this mode: the tables are final now.
    bridge.take_over_pinned();
    let unixctl = start_unixctl(&rundir);
    xbr_daemon::readiness::ready("serving the bridge");
    if let Some(sig) = signals.forever().next() {
        tracing::info!(signal = sig, "shutting down");
    }
    xbr_daemon::readiness::stopping();
    if let Some(u) = unixctl {
        u.shutdown();
    }
    if let Some(m) = metrics {
        m.stop();
    }
    if bridge.shutdown() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// `xbr doctor`: the checks for what `args` would run.
fn doctor(args: &RunArgs) -> ExitCode {
    let ovsdb = match args.ovsdb.as_deref().map(xbr_daemon::ovsdb::parse_target) {
        None => None,
        Some(Ok(path)) => Some(path),
        Some(Err(e)) => {
            eprintln!("xbr: --ovsdb: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let target = xbr_daemon::doctor::Target {
        rundir: args.rundir.clone(),
        bridge: ovsdb.is_none().then(|| args.bridge.clone()),
        ports: args
            .ports
            .iter()
            .filter(|p| p.port_type == dataplane::config::PortType::System)
            .map(|p| p.name.clone())
            .collect(),
        ovsdb,
        pin_root: args.bpf_pin_root.clone(),
    };
    ExitCode::from(xbr_daemon::doctor::report(&xbr_daemon::doctor::run(
        &target,
    )))
}

/// `xbr probe`: alive, or ready with --ovsdb.
fn probe(args: &ProbeArgs) -> ExitCode {
    let result = match args.ovsdb.as_deref().map(xbr_daemon::ovsdb::parse_target) {
        None => xbr_daemon::probe::alive(&args.rundir).map(|v| format!("alive: {v}")),
        Some(Ok(db)) => xbr_daemon::probe::ready(&args.rundir, &db)
            .map(|n| format!("ready: serving the database's {n} bridge(s)")),
        Some(Err(e)) => {
            eprintln!("xbr: --ovsdb: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    match result {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("xbr: {e}");
            ExitCode::from(1)
        }
    }
}

/// Serves `ovs-appctl` in `rundir` (see `xbr_daemon::unixctl`); xbr runs
/// on without it if that fails.
fn start_unixctl(rundir: &std::path::Path) -> Option<xbr_daemon::unixctl::UnixctlServer> {
    match xbr_daemon::unixctl::UnixctlServer::start(rundir) {
        Ok(u) => Some(u),
        Err(e) => {
            tracing::warn!(rundir = %rundir.display(), "cannot serve ovs-appctl: {e}");
            None
        }
    }
}

/// `xbr run --ovsdb`: serve every bridge of the database until a signal.
fn run_ovsdb(target: &str, args: &RunArgs, tls: Option<ofproto::tls::TlsFiles>) -> ExitCode {
    let path = match xbr_daemon::ovsdb::parse_remote(target) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("xbr: --ovsdb: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    if matches!(path, xbr_daemon::ovsdb::rpc::Remote::Ssl(_)) && tls.is_none() {
        eprintln!("xbr: --ovsdb {target}: needs --private-key, --certificate and --ca-cert");
        return ExitCode::from(EXIT_CONFIG);
    }
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
                xbr_daemon::readiness::stopping();
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
    let settings = xbr_daemon::ovsdb::Settings {
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
        state: args.state_config(),
        pin_root: args.bpf_pin_root.clone(),
        pin: args.xdp_pin == OnOff::On,
        metrics_from_cli: args.metrics.is_some(),
        xdp_peer_gro: args.xdp_peer_gro == OnOff::On,
        control: args.control_limits(),
        max_flows: args.max_flows,
        tls,
    };
    let metrics = match start_metrics(args.metrics) {
        Ok(m) => m,
        Err(code) => return code,
    };
    let unixctl = start_unixctl(&settings.rundir);
    let clean = xbr_daemon::ovsdb::run_notifying(&path, settings, &stop, &mut || {
        xbr_daemon::readiness::ready("serving the database's bridges")
    });
    if let Some(u) = unixctl {
        u.shutdown();
    }
    if let Some(m) = metrics {
        m.stop();
    }
    if clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// `docs/cli.md`, the reference of every command and option, is generated
/// from the clap definitions above, so it cannot drift from the program:
/// this test fails when they differ. `XBR_BLESS=1 cargo test -p xbr-daemon
/// --bin xbr cli_reference` rewrites the file.
#[cfg(test)]
mod cli_reference {
    use std::path::Path;

    fn generated() -> String {
        let options = clap_markdown::MarkdownOptions::new()
            .title("xbr command-line reference".to_string())
            .show_footer(false);
        let body = clap_markdown::help_markdown_custom::<super::Cli>(&options);
        format!(
            "<!-- Generated from daemon/src/main.rs by its cli_reference test; do not edit. -->\n\n{body}"
        )
    }

    #[test]
    fn docs_cli_md_is_current() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/cli.md");
        let text = generated();
        if std::env::var_os("XBR_BLESS").is_some() {
            std::fs::write(&path, &text).expect("write docs/cli.md");
            return;
        }
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            on_disk == text,
            "docs/cli.md does not match the clap definitions; regenerate it with \
             XBR_BLESS=1 cargo test -p xbr-daemon --bin xbr cli_reference"
        );
    }
}
