//! The `xbr` commands that talk to a running bridge over its control
//! socket (`xbr trace|conntrack|port|stats|log|dpctl|fdb|pmd`): their
//! arguments, and the request each sends (`ctl` serves them). A refused
//! request, or no bridge to ask, exits 2 with the reason; a broken reply 1.

use crate::ctl::socket_path;
use std::path::PathBuf;
use std::process::ExitCode;

/// Exit code when the bridge refuses the request or is not there.
const EXIT_USAGE: u8 = 2;

#[derive(clap::Subcommand)]
pub enum ClientCommand {
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
    /// conntrack (like `ovs-appctl dpctl/show` and `coverage/show`).
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
    /// The packet threads (like `ovs-appctl dpif-netdev/pmd-rxq-show`,
    /// `pmd-stats-show` and `pmd-stats-clear`).
    Pmd(PmdArgs),
}

#[derive(clap::Args)]
pub struct FdbArgs {
    /// Directory of the running bridge's sockets.
    #[arg(long, global = true, default_value = "/var/run/openvswitch")]
    rundir: PathBuf,
    #[command(subcommand)]
    action: FdbAction,
}

#[derive(clap::Subcommand)]
pub enum FdbAction {
    /// List them: port, VLAN (0), MAC, seconds since last seen.
    Show(StatsTarget),
    /// Forget them all (the next packets flood until relearned).
    Flush(StatsTarget),
}

#[derive(clap::Args)]
pub struct LogArgs {
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
pub struct DpctlArgs {
    /// Directory of the running bridge's sockets.
    #[arg(long, global = true, default_value = "/var/run/openvswitch")]
    rundir: PathBuf,
    #[command(subcommand)]
    action: DpctlAction,
}

#[derive(clap::Subcommand)]
pub enum DpctlAction {
    /// List the entries in use: match, kernel hit counters, actions.
    DumpFlows(StatsTarget),
    /// Retire every entry (the packet thread installs them again as
    /// their flows miss).
    DelFlows(StatsTarget),
}

#[derive(clap::Args)]
pub struct BridgeStatsArgs {
    /// Directory of the running bridge's sockets.
    #[arg(long, default_value = "/var/run/openvswitch")]
    rundir: PathBuf,
    /// Bridge name.
    bridge: String,
}

#[derive(clap::Args)]
pub struct PortArgs {
    /// Directory of the running bridge's sockets.
    #[arg(long, global = true, default_value = "/var/run/openvswitch")]
    rundir: PathBuf,
    #[command(subcommand)]
    action: PortAction,
}

// The variant comments are `--help` text (clap), where `[...]` marks an
// optional part, not a rustdoc link.
#[allow(rustdoc::broken_intra_doc_links)]
#[derive(clap::Subcommand)]
pub enum PortAction {
    /// Add a port: NAME[=OFPORT][,type=system|internal|vxlan][,key=value...]
    /// as for `xbr run --port`; prints the port number it got.
    Add { bridge: String, spec: String },
    /// Remove a port.
    Del { bridge: String, name: String },
}

#[derive(clap::Args)]
pub struct ConntrackArgs {
    /// Directory of the running bridge's sockets.
    #[arg(long, global = true, default_value = "/var/run/openvswitch")]
    rundir: PathBuf,
    #[command(subcommand)]
    action: ConntrackAction,
}

#[derive(clap::Subcommand)]
pub enum ConntrackAction {
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
pub struct SummaryTarget {
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
pub struct LimitTarget {
    /// Bridge name.
    bridge: String,
    /// The new limit.
    limit: Option<u32>,
}

#[derive(clap::Args)]
pub struct StatsTarget {
    /// Bridge name.
    bridge: String,
}

#[derive(clap::Args)]
pub struct ConntrackTarget {
    /// Bridge name.
    bridge: String,
    /// Only this conntrack zone.
    #[arg(long)]
    zone: Option<u16>,
}

#[derive(clap::Args)]
pub struct TraceArgs {
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

#[derive(clap::Args)]
pub struct PmdArgs {
    /// Directory of the running bridge's sockets.
    #[arg(long, global = true, default_value = "/var/run/openvswitch")]
    rundir: PathBuf,
    #[command(subcommand)]
    action: PmdAction,
}

#[derive(clap::Subcommand)]
pub enum PmdAction {
    /// Each packet thread's CPU and the ports' receive queues it polls.
    Rxq(PmdTarget),
    /// Each packet thread's packets, recirculations, cache hits and busy
    /// time since the last `stats-clear`.
    Stats(PmdTarget),
    /// Start the packet threads' counts again.
    StatsClear(PmdTarget),
}

#[derive(clap::Args)]
pub struct PmdTarget {
    /// Bridge name.
    bridge: String,
    /// Only the packet thread on this CPU.
    #[arg(long)]
    core: Option<usize>,
}

/// Runs a client command against the bridge's control socket.
pub fn run(command: ClientCommand) -> ExitCode {
    match command {
        ClientCommand::Trace(args) => trace(args),
        ClientCommand::Conntrack(args) => conntrack(args),
        ClientCommand::Port(args) => port(args),
        ClientCommand::Stats(args) => {
            let path = socket_path(&args.rundir, &args.bridge);
            ctl_request("xbr stats", &path, "stats")
        }
        ClientCommand::Log(args) => {
            let path = socket_path(&args.rundir, &args.bridge);
            let line = match &args.directives {
                Some(d) => format!("log {d}"),
                None => "log".to_string(),
            };
            ctl_request("xbr log", &path, &line)
        }
        ClientCommand::Dpctl(args) => {
            let (verb, target) = match &args.action {
                DpctlAction::DumpFlows(t) => ("dump-flows", t),
                DpctlAction::DelFlows(t) => ("del-flows", t),
            };
            let path = socket_path(&args.rundir, &target.bridge);
            ctl_request(
                &format!("xbr dpctl {verb}"),
                &path,
                &format!("dpctl {verb}"),
            )
        }
        ClientCommand::Fdb(args) => {
            let (verb, target) = match &args.action {
                FdbAction::Show(t) => ("show", t),
                FdbAction::Flush(t) => ("flush", t),
            };
            let path = socket_path(&args.rundir, &target.bridge);
            ctl_request(&format!("xbr fdb {verb}"), &path, &format!("fdb {verb}"))
        }
        ClientCommand::Pmd(args) => {
            let (verb, target) = match &args.action {
                PmdAction::Rxq(t) => ("rxq", t),
                PmdAction::Stats(t) => ("stats", t),
                PmdAction::StatsClear(t) => ("stats-clear", t),
            };
            let path = socket_path(&args.rundir, &target.bridge);
            let line = match target.core {
                Some(c) => format!("pmd {verb} --core {c}"),
                None => format!("pmd {verb}"),
            };
            ctl_request(&format!("xbr pmd {verb}"), &path, &line)
        }
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
    let path = socket_path(&args.rundir, &args.bridge);
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
    let path = socket_path(&args.rundir, bridge);
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
    let path = socket_path(&args.rundir, bridge);
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
    match crate::ctl::request(path, line) {
        Ok(reply) if reply.ok => {
            print!("{}", reply.text);
            ExitCode::SUCCESS
        }
        Ok(reply) => {
            eprintln!("{what}: {}", reply.text);
            ExitCode::from(EXIT_USAGE)
        }
        Err(e @ crate::ctl::CtlError::Connect { .. }) => {
            eprintln!("{what}: {e}");
            ExitCode::from(EXIT_USAGE)
        }
        Err(e) => {
            eprintln!("{what}: {e}");
            ExitCode::from(1)
        }
    }
}
