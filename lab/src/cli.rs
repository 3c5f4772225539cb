//! The `xbr lab` command line.

use super::check;
use super::down;
use super::flows::Mode;
use super::plan::{self, Options};
use super::state::LabState;
use super::sys;
use super::up;
use super::LabError;
use clap::{Args, Subcommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Exit code of a bad command line or impossible lab.
const EXIT_USAGE: u8 = 2;

#[derive(Args)]
pub struct LabArgs {
    #[command(subcommand)]
    command: LabCommand,
}

#[derive(Subcommand)]
enum LabCommand {
    /// Build a cluster of nodes and pods in network namespaces, one xbr per
    /// node, programmed with the SDN agent's flows.
    Up(UpArgs),
    /// Ping every pair (pods, gateways, external host) and compare with what
    /// the mode allows; exit 1 on any mismatch.
    Check(DirArgs),
    /// Remove a lab (also a half-built or crashed one).
    Down(DownArgs),
    /// A Service backend: answer every TCP connection on PORT with TEXT
    /// (run by `up` inside backend pods).
    #[command(hide = true)]
    Respond(RespondArgs),
    /// Connect to DST and print the first line of its answer (run by
    /// `check` inside client pods); exit 1 if that fails.
    #[command(hide = true)]
    Fetch(FetchArgs),
}

#[derive(Args)]
struct RespondArgs {
    #[arg(long)]
    port: u16,
    #[arg(long)]
    text: String,
}

#[derive(Args)]
struct FetchArgs {
    #[arg(long)]
    dst: std::net::SocketAddrV4,
}

#[derive(Args)]
struct UpArgs {
    /// The SDN plugin whose flows are installed.
    #[arg(long, default_value = "subnet", value_parser = mode_arg)]
    mode: Mode,
    #[arg(long, default_value_t = 2)]
    nodes: u32,
    #[arg(long, default_value_t = 4)]
    pods_per_node: u32,
    /// Namespaces the pods are spread over (the first is `default`, VNID 0).
    #[arg(long, default_value_t = 3)]
    namespaces: u32,
    /// Lab directory (lab.json, run directories, logs); default: a new
    /// /tmp/xbr-lab-XXXXXX.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Name prefix of the lab's namespaces; default: xbrlab-XXXXXX.
    #[arg(long)]
    prefix: Option<String>,
    /// Install the agent's pre-4.13 flows without conntrack (subnet and
    /// multitenant only) instead of the current conntrack ones.
    #[arg(long)]
    legacy: bool,
    /// Run Debian's ovsdb-server on every node, with xbr as its
    /// ovs-vswitchd (`xbr run --ovsdb`), and configure the bridges and
    /// ports with `ovs-vsctl` as the agent does.
    #[arg(long)]
    ovsdb: bool,
    /// Not needed for the XDP flow cache: xbr's ports are
    /// `xdp_redirect=auto` and xbr turns GRO on in the pods and the
    /// underlay itself (`xdp-peer-gro`). With it the lab does that before
    /// xbr starts and (without --ovsdb) gives the pods' ports and vxlan0
    /// `xdp_redirect=on`, as earlier versions needed.
    #[arg(long)]
    xdp_redirect: bool,
    /// Whether each node's xbr turns GRO on in the pods (and the
    /// underlay's end of the uplinks) whose ports it cannot redirect to
    /// (`xbr run --xdp-peer-gro`): off keeps pods as the CNI plugin made
    /// them, and their traffic on the packet threads.
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    xdp_peer_gro: String,
    /// Start each node's xbr under `capsh` with a bounding set of only
    /// the capabilities `xbr run` documents (docs/operations.md), as the
    /// systemd unit and the DaemonSet grant them.
    #[arg(long)]
    least_privilege: bool,
    /// Packet threads of each node's xbr (`xbr run --pmd-threads`).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pmd_threads: u32,
    /// What backs each node's tun0 (`internal_backend`): tap or veth;
    /// default: xbr's.
    #[arg(long, value_parser = ["tap", "veth"])]
    tun0_backend: Option<String>,
    /// MTU of the underlay (626-9216; above about 3800 xbr receives and
    /// sends frames in several AF_XDP descriptors); tun0 and the pods get
    /// 50 bytes less for VXLAN, as the agent sets them.
    #[arg(long, default_value_t = plan::UNDERLAY_MTU, value_parser = underlay_mtu_arg)]
    underlay_mtu: u32,
}

#[derive(Args)]
struct DirArgs {
    /// The lab directory `up` printed.
    #[arg(long)]
    dir: PathBuf,
}

#[derive(Args)]
struct DownArgs {
    /// The lab directory `up` printed.
    #[arg(long)]
    dir: PathBuf,
    /// Also remove namespaces of this lab prefix (when the directory is gone).
    #[arg(long)]
    prefix: Option<String>,
}

fn mode_arg(s: &str) -> Result<Mode, String> {
    s.parse()
}

fn underlay_mtu_arg(s: &str) -> Result<u32, String> {
    let range = plan::UNDERLAY_MTU_RANGE;
    match s.parse::<u32>() {
        Ok(m) if range.contains(&m) => Ok(m),
        _ => Err(format!("not an MTU in {}..={}", range.start(), range.end())),
    }
}

fn absolute(p: &Path) -> Result<PathBuf, LabError> {
    std::path::absolute(p).map_err(|source| LabError::Io {
        context: format!("resolving {}", p.display()),
        source,
    })
}

fn require_root() -> Result<(), LabError> {
    if nix::unistd::geteuid().is_root() {
        Ok(())
    } else {
        Err(LabError::NotRoot)
    }
}

fn finish(r: Result<ExitCode, LabError>) -> ExitCode {
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("xbr lab: {e}");
            ExitCode::from(if e.is_usage() { EXIT_USAGE } else { 1 })
        }
    }
}

pub fn run(args: LabArgs) -> ExitCode {
    finish(match args.command {
        LabCommand::Up(a) => run_up(a),
        LabCommand::Check(a) => run_check(&a.dir),
        LabCommand::Down(a) => run_down(&a.dir, a.prefix.as_deref()),
        LabCommand::Respond(a) => {
            super::service::respond(a.port, &a.text).map(|()| ExitCode::SUCCESS)
        }
        LabCommand::Fetch(a) => Ok(match super::service::fetch(a.dst) {
            Ok(answer) => {
                println!("{answer}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("xbr lab fetch: {e}");
                ExitCode::from(1)
            }
        }),
    })
}

fn run_up(a: UpArgs) -> Result<ExitCode, LabError> {
    require_root()?;
    let seed = sys::random_u64()?;
    let dir = match a.dir {
        Some(d) => absolute(&d)?,
        None => plan::default_dir(seed),
    };
    let prefix = a
        .prefix
        .unwrap_or_else(|| format!("xbrlab-{:06x}", (seed >> 24) & 0xff_ffff));
    let vxlan = up::vxlan_supported();
    let opts = Options {
        mode: a.mode,
        nodes: a.nodes,
        pods_per_node: a.pods_per_node,
        namespaces: a.namespaces,
        prefix,
        dir,
        vxlan,
        variant: if a.legacy {
            super::flows::Variant::LegacyNonConntrack
        } else {
            super::flows::Variant::Conntrack
        },
        ovsdb: a.ovsdb,
        xdp_redirect: a.xdp_redirect,
        xdp_peer_gro: a.xdp_peer_gro == "on",
        least_privilege: a.least_privilege,
        pmd_threads: a.pmd_threads,
        tun0_backend: a.tun0_backend.unwrap_or_default(),
        underlay_mtu: a.underlay_mtu,
    };
    if !vxlan && opts.nodes > 1 {
        eprintln!(
            "xbr lab: warning: this xbr has no VXLAN port type yet; vxlan0 is a placeholder \
             internal port and traffic between nodes will not arrive"
        );
    }
    let state = up::up(&opts, seed)?;
    println!(
        "lab up: mode {}, {} node(s), {} pod(s), flows {}, prefix {}",
        state.mode,
        state.nodes.len(),
        state.pods.len(),
        state.flows,
        state.prefix
    );
    for n in &state.nodes {
        println!(
            "  {} netns {} uplink {} subnet {} xbr pid {} (OVS_RUNDIR={})",
            n.name,
            n.netns,
            n.uplink_ip,
            n.subnet,
            n.xbr_pid,
            n.rundir.display()
        );
    }
    println!(
        "  external host netns {} ip {}",
        state.external.netns, state.external.ip
    );
    println!("{}", state.dir.display());
    Ok(ExitCode::SUCCESS)
}

fn load(dir: &Path) -> Result<LabState, LabError> {
    LabState::read(dir)?.ok_or_else(|| {
        LabError::Usage(format!(
            "no lab in {} (no {})",
            dir.display(),
            super::state::LAB_JSON
        ))
    })
}

fn run_check(dir: &Path) -> Result<ExitCode, LabError> {
    require_root()?;
    let state = load(&absolute(dir)?)?;
    let report = check::check(&state)?;
    print!("{}", check::render(&state, &report));
    Ok(if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn run_down(dir: &Path, prefix: Option<&str>) -> Result<ExitCode, LabError> {
    require_root()?;
    let r = down::down(&absolute(dir)?, prefix)?;
    if r.prefix.is_none() && !r.removed_dir {
        println!("no lab at {} (nothing to do)", dir.display());
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "lab down: {} xbr stopped, {} killed, {} namespace(s) deleted{}",
        r.stopped.len(),
        r.killed.len(),
        r.namespaces.len(),
        if r.removed_dir {
            format!(", {} removed", dir.display())
        } else {
            String::new()
        }
    );
    Ok(ExitCode::SUCCESS)
}
