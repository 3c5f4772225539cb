//! The switches a scenario compares, each set up in a [`Topology`]'s host
//! namespace between `veth-a` (OpenFlow port 1) and `veth-b` (port 2), and
//! torn down when its guard drops (before the topology goes).
//!
//! - `xbr`: `xbr run` with both veths as AF_XDP ports, pinned to the
//!   switch core, programmed with `ovs-ofctl -O OpenFlow13 add-flows`.
//! - `ovs-afxdp`: Open vSwitch 3.1 as `/work/shared/anchor` runs it:
//!   private ovsdb-server and ovs-vswitchd (pinned to the switch core,
//!   `pmd-cpu-mask` on it), `datapath_type=netdev`, `type=afxdp` ports in
//!   native XDP mode with one rx queue, the same flows.
//! - `xbr-scraped`: `xbr` with its metrics endpoint on (`--metrics`) and
//!   scraped every second for the whole run, as Prometheus would: what
//!   observing xbr costs its packet rate.
//! - `afxdp-l2fwd`: our minimal AF_XDP forwarder (`l2fwd.rs`): xbr's
//!   port I/O with no pipeline, the ceiling of the AF_XDP path.
//! - `xdp-redirect`: the kernel's XDP redirect veth-a -> veth-b, no lookup:
//!   the ceiling of this path.
//! - `linux-bridge`: a kernel bridge; GRO on `veth-a` so the veth accepts
//!   the frames the generator redirects into it without an XDP program.
//!
//! Every process runs with the private state of its guard, is stopped by
//! its pid, and every command is bounded in time.

use std::fs::File;
use std::net::Ipv4Addr;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::bpf::Redirect;
use crate::ovs::{run_bounded, unique_tag, OvsError, CMD_TIMEOUT, NAME_PREFIX};
use crate::topo::{self, Topology, VETH_A, VETH_B, VETH_C};

mod l2fwd;
mod ovs_switch;
mod restart;
pub use ovs_switch::OvsGuard;
pub use restart::Restarted;

/// Bound on a switch's start (loading XDP, binding sockets, OVS's ports).
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A switch under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum System {
    Xbr,
    /// xbr with its XDP flow cache off: every packet through AF_XDP.
    XbrNocache,
    /// xbr with its metrics endpoint scraped every second.
    XbrScraped,
    OvsAfxdp,
    /// xbr's AF_XDP ports with no pipeline: every frame to the other port.
    AfxdpL2fwd,
    XdpRedirect,
    LinuxBridge,
}

impl System {
    pub fn name(self) -> &'static str {
        match self {
            System::Xbr => "xbr",
            System::XbrNocache => "xbr-nocache",
            System::XbrScraped => "xbr-scraped",
            System::OvsAfxdp => "ovs-afxdp",
            System::AfxdpL2fwd => "afxdp-l2fwd",
            System::XdpRedirect => "xdp-redirect",
            System::LinuxBridge => "linux-bridge",
        }
    }
}

/// Errors starting a switch.
#[derive(Debug, thiserror::Error)]
pub enum SystemError {
    #[error(transparent)]
    Ovs(#[from] OvsError),
    #[error(transparent)]
    Netns(#[from] topo::NetnsError),
    #[error("xdp-redirect: {0}")]
    Bpf(#[from] crate::bpf::BpfError),
    #[error("{system}: {reason}")]
    Start {
        system: &'static str,
        reason: String,
    },
}

fn start_err(system: System, reason: impl Into<String>) -> SystemError {
    SystemError::Start {
        system: system.name(),
        reason: reason.into(),
    }
}

/// How switches are run.
#[derive(Debug, Clone)]
pub struct SwitchConfig {
    /// The xbr binary.
    pub xbr_bin: PathBuf,
    /// Extra arguments for `xbr run`.
    pub xbr_args: Vec<String>,
    /// The core the switch runs on.
    pub cpu: usize,
    /// OpenFlow 1.3 flows in `ovs-ofctl add-flows` syntax, one per line.
    pub flows: String,
    /// Load `flows` as the agent does, with one `ovs-ofctl -O OpenFlow13
    /// bundle` (each line a `flow add`), instead of `add-flows`.
    pub bundle: bool,
    /// Which veth is which OpenFlow port.
    pub ports: Ports,
    /// `Some`: the most connections the switch's conntrack may hold (xbr
    /// `--ct-limit`, OVS `dpctl/ct-set-maxconns`), so that a run creating
    /// many connections never meets a full table; `None`: the defaults.
    pub ct_limit: Option<u64>,
    /// xbr's port for `veth-c` (pod C) is `xdp_redirect=off`: the XDP
    /// flow cache never forwards to it, so every frame to pod C goes
    /// through xbr's packet threads (OVS has no such cache; no effect).
    pub c_uncached: bool,
}

/// How the topology's veths become the switch's OpenFlow ports. A VXLAN
/// port is the agent's flow-based `vxlan0`, OpenFlow port 1, over one veth
/// as the node's uplink (not an OpenFlow port itself); for OVS through
/// `br-phy`, as `bench::ovs_node` does for the lab.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ports {
    /// `veth-a` and `veth-b` with these OpenFlow numbers (and `veth-c` 3
    /// where the topology has pod C).
    Pods { a: u32, b: u32 },
    /// Decapsulation: `vxlan0` over `veth-a` with the node address `cidr`,
    /// `veth-b` port 2.
    VxlanIn { cidr: String },
    /// Encapsulation: `veth-a` is the pod's port `a`; `vxlan0` over
    /// `veth-b` with the node address `cidr`. The remote VTEP `remote`
    /// is pod B, whose sink answers no ARP: its MAC `remote_mac` is a
    /// permanent neighbour entry (xbr reads the kernel's table) and an
    /// OVS `tnl/neigh/set` entry.
    VxlanOut {
        cidr: String,
        a: u32,
        remote: Ipv4Addr,
        remote_mac: [u8; 6],
        vni: u32,
    },
}

impl Ports {
    /// The plain layout: `veth-a` port 1, `veth-b` port 2.
    pub const P2P: Ports = Ports::Pods { a: 1, b: 2 };

    /// The node's address (CIDR) on the uplink and its address alone.
    fn node_address(&self) -> Option<(&str, &str)> {
        match self {
            Ports::Pods { .. } => None,
            Ports::VxlanIn { cidr } | Ports::VxlanOut { cidr, .. } => {
                Some((cidr, cidr.split('/').next().unwrap_or(cidr)))
            }
        }
    }

    /// The uplink veth, if a VXLAN port has one.
    fn uplink(&self) -> Option<&'static str> {
        match self {
            Ports::Pods { .. } => None,
            Ports::VxlanIn { .. } => Some(VETH_A),
            Ports::VxlanOut { .. } => Some(VETH_B),
        }
    }
}

/// A running switch; dropping it stops it.
pub enum Running {
    Xbr(XbrGuard),
    Ovs(OvsGuard),
    L2fwd(l2fwd::L2fwdGuard),
    Redirect(Redirect),
    /// The bridge lives in the host namespace and goes with it.
    Bridge,
}

impl Running {
    /// The switch's process (xbr, ovs-vswitchd), for its memory and CPU
    /// time; `None` for the references, which have none.
    pub fn pid(&self) -> Option<u32> {
        match self {
            Running::Xbr(x) => x.child.as_ref().map(Child::id),
            Running::Ovs(o) => o.vswitchd_pid(),
            Running::L2fwd(_) | Running::Redirect(_) | Running::Bridge => None,
        }
    }

    /// Whether the switch is an OpenFlow switch (xbr, OVS) and not one of
    /// the references, which forward by a fixed rule.
    pub fn has_flow_table(&self) -> bool {
        matches!(self, Running::Xbr(_) | Running::Ovs(_))
    }

    /// `ovs-ofctl -O OpenFlow13 ARGS` against the switch's `br0` (xbr and
    /// OVS only), bounded by `timeout`.
    pub fn ofctl(&self, args: &[&str], timeout: Duration) -> Result<String, SystemError> {
        Ok(ofctl_bounded(&self.rundir()?, args, timeout)?)
    }

    /// The `ovs-ofctl -O OpenFlow13 ARGS` command for the switch's `br0`,
    /// for callers that run it themselves (e.g. to see it end at once).
    pub fn ofctl_command(&self, args: &[&str]) -> Result<Command, SystemError> {
        let mut c = Command::new("ovs-ofctl");
        c.args(["-O", "OpenFlow13"])
            .args(args)
            .env("OVS_RUNDIR", self.rundir()?);
        Ok(c)
    }

    fn rundir(&self) -> Result<PathBuf, SystemError> {
        match self {
            Running::Xbr(x) => Ok(x.dir.clone()),
            Running::Ovs(o) => Ok(o.rundir()),
            Running::L2fwd(_) | Running::Redirect(_) | Running::Bridge => Err(SystemError::Start {
                system: "reference",
                reason: "the references have no OpenFlow bridge".into(),
            }),
        }
    }

    /// How many connections the switch's conntrack holds now (xbr
    /// `conntrack stats`, OVS `dpctl/ct-get-nconns`): the check that the
    /// packets of a conntrack scenario really went through conntrack.
    pub fn conntrack_entries(&self) -> Result<u64, SystemError> {
        match self {
            Running::Xbr(x) => x.conntrack_entries(),
            Running::Ovs(o) => o.conntrack_entries(),
            Running::Redirect(_) | Running::Bridge | Running::L2fwd(_) => Err(SystemError::Start {
                system: "reference",
                reason: "the references have no conntrack of their own".into(),
            }),
        }
    }
}

/// Starts `system` in `topo`'s host namespace.
pub fn start(system: System, topo: &Topology, cfg: &SwitchConfig) -> Result<Running, SystemError> {
    match system {
        System::Xbr => Ok(Running::Xbr(XbrGuard::start(topo, cfg, &[])?)),
        System::XbrNocache => Ok(Running::Xbr(XbrGuard::start(
            topo,
            cfg,
            &["--xdp-cache", "off"],
        )?)),
        System::XbrScraped => {
            let metrics = format!("127.0.0.1:{METRICS_PORT}");
            let mut g = XbrGuard::start(topo, cfg, &["--metrics", &metrics])?;
            g.start_scraper(topo)?;
            Ok(Running::Xbr(g))
        }
        System::OvsAfxdp => Ok(Running::Ovs(OvsGuard::start(topo, cfg)?)),
        System::AfxdpL2fwd => Ok(Running::L2fwd(l2fwd::L2fwdGuard::start(topo, cfg)?)),
        System::XdpRedirect => {
            let outer = encap_reference_header(topo, &cfg.ports)?;
            let r = topo::run_in(&topo.host, || -> Result<Redirect, SystemError> {
                let a = topo::ifindex(&topo.host, VETH_A)?;
                let b = topo::ifindex(&topo.host, VETH_B)?;
                match &cfg.ports {
                    Ports::Pods { .. } => Ok(Redirect::attach(a, b)?),
                    Ports::VxlanIn { .. } => Ok(Redirect::attach_decap(a, b)?),
                    Ports::VxlanOut { .. } => Ok(Redirect::attach_encap(a, b, &outer)?),
                }
            })?;
            Ok(Running::Redirect(r))
        }
        System::LinuxBridge if cfg.ports.uplink().is_some() => Err(start_err(
            system,
            "a Linux bridge does not terminate VXLAN; leave it out of this scenario",
        )),
        System::LinuxBridge => {
            let h = &topo.host;
            topo.exec(h, &["ip", "link", "add", "br0", "type", "bridge"])?;
            for v in [VETH_A, VETH_B] {
                topo.exec(h, &["ip", "link", "set", v, "master", "br0"])?;
            }
            topo.exec(h, &["ip", "link", "set", "br0", "up"])?;
            topo.exec(h, &["ethtool", "-K", VETH_A, "gro", "on"])?;
            Ok(Running::Bridge)
        }
    }
}

/// The outer headers the kernel encapsulation reference pushes: what
/// xbr writes for the same flow, from the uplink's MAC to the remote
/// VTEP's, but with a fixed UDP source port. Zeros where nothing is
/// encapsulated.
fn encap_reference_header(
    topo: &Topology,
    ports: &Ports,
) -> Result<[u8; crate::packet::VXLAN_OVERHEAD], SystemError> {
    let Ports::VxlanOut {
        cidr,
        remote,
        remote_mac,
        vni,
        ..
    } = ports
    else {
        return Ok([0; crate::packet::VXLAN_OVERHEAD]);
    };
    let uplink = topo.exec(
        &topo.host,
        &["cat", &format!("/sys/class/net/{VETH_B}/address")],
    )?;
    let src_mac = dataplane::config::parse_mac(uplink.trim()).ok_or_else(|| {
        start_err(
            System::XdpRedirect,
            format!("{VETH_B} has no MAC address: `{}`", uplink.trim()),
        )
    })?;
    let local: Ipv4Addr = cidr
        .split('/')
        .next()
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| start_err(System::XdpRedirect, format!("bad node address {cidr}")))?;
    crate::packet::vxlan_header(&crate::packet::VxlanOuter {
        src_mac,
        dst_mac: *remote_mac,
        src_ip: local,
        dst_ip: *remote,
        vni: *vni,
    })
    .map_err(|e| start_err(System::XdpRedirect, e.to_string()))
}

/// Writes the flows as `ovs-ofctl add-flows` or, with `bundle`, as
/// `ovs-ofctl bundle` reads them; returns the file and the subcommand.
fn write_flows(dir: &Path, flows: &str, bundle: bool) -> Result<(PathBuf, &'static str), OvsError> {
    let path = dir.join("flows.txt");
    let text = if bundle {
        flows
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| format!("flow add {l}\n"))
            .collect()
    } else {
        flows.to_string()
    };
    std::fs::write(&path, text).map_err(|source| OvsError::Io {
        context: format!("writing {}", path.display()),
        source,
    })?;
    Ok((path, if bundle { "bundle" } else { "add-flows" }))
}

/// Loads `cfg`'s flows into the bridge whose `br0.mgmt` is in `rundir`.
fn load_flows(dir: &Path, rundir: &Path, cfg: &SwitchConfig) -> Result<(), OvsError> {
    let (file, how) = write_flows(dir, &cfg.flows, cfg.bundle)?;
    // `add-flows` sends one flow-mod per line and waits for each switch
    // to take them; 100k flows took 25-35 s here for OVS and xbr alike.
    let timeout = CMD_TIMEOUT + Duration::from_millis(cfg.flows.lines().count() as u64);
    ofctl_bounded(rundir, &[how, "br0", &file.display().to_string()], timeout)?;
    Ok(())
}

fn make_dir(what: &str) -> Result<PathBuf, OvsError> {
    let dir = std::env::temp_dir().join(format!("{NAME_PREFIX}-bench-{what}-{}", unique_tag()));
    std::fs::create_dir_all(&dir).map_err(|source| OvsError::Io {
        context: format!("creating {}", dir.display()),
        source,
    })?;
    Ok(dir)
}

fn ofctl_bounded(rundir: &Path, args: &[&str], timeout: Duration) -> Result<String, OvsError> {
    let mut c = Command::new("ovs-ofctl");
    c.args(["-O", "OpenFlow13"])
        .args(args)
        .env("OVS_RUNDIR", rundir);
    Ok(run_bounded(&mut c, timeout)?.ok()?.stdout)
}

/// Where `xbr-scraped` serves its metrics, in the topology's host
/// namespace (each run has its own).
const METRICS_PORT: u16 = 9469;
/// How long the first scrape may take to answer.
const FIRST_SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);

/// `xbr run` in the host namespace; stopped with SIGTERM on drop.
pub struct XbrGuard {
    child: Option<Child>,
    dir: PathBuf,
    /// `xbr-scraped`'s scraper (a shell loop in the host namespace).
    scraper: Option<Child>,
    /// The arguments of `ip` that started xbr (`netns exec ... xbr run
    /// ...`), to start the same again ([`Running::restart`]).
    argv: Vec<std::ffi::OsString>,
}

impl XbrGuard {
    fn start(topo: &Topology, cfg: &SwitchConfig, extra: &[&str]) -> Result<XbrGuard, SystemError> {
        let dir = make_dir("xbr")?;
        let log = File::create(dir.join("xbr.log")).map_err(|source| OvsError::Io {
            context: "creating xbr.log".into(),
            source,
        })?;
        let log2 = log.try_clone().map_err(|source| OvsError::Io {
            context: "xbr.log".into(),
            source,
        })?;
        let cpu = cfg.cpu.to_string();
        let rundir = dir.display().to_string();
        let mut ports = Vec::new();
        if let (Some((cidr, local)), Some(uplink)) = (cfg.ports.node_address(), cfg.ports.uplink())
        {
            topo.exec(&topo.host, &["ip", "addr", "add", cidr, "dev", uplink])?;
            // Encapsulating entries of the XDP cache redirect to the
            // uplink: pod B's sink (an XDP program) takes them, which xbr
            // finds out itself (`xdp_redirect=auto`, the default).
            ports.push(format!(
                "vxlan0=1,type=vxlan,local_ip={local},uplink={uplink}"
            ));
        }
        match &cfg.ports {
            // Pod B's sink is an XDP program, so its veth accepts frames
            // the XDP flow cache redirects to it; xbr reads that from the
            // kernel (`xdp_redirect=auto`, the default): no xbr-specific
            // port option, as on a node the agent configured.
            Ports::Pods { a, b } => {
                ports.push(format!("{VETH_A}={a}"));
                ports.push(format!("{VETH_B}={b}"));
            }
            Ports::VxlanIn { .. } => ports.push(format!("{VETH_B}=2")),
            Ports::VxlanOut {
                a,
                remote,
                remote_mac,
                ..
            } => {
                ports.push(format!("{VETH_A}={a}"));
                let (ip, mac) = (remote.to_string(), topo::mac(*remote_mac));
                topo.exec(
                    &topo.host,
                    &[
                        "ip",
                        "neigh",
                        "replace",
                        &ip,
                        "lladdr",
                        &mac,
                        "dev",
                        VETH_B,
                        "nud",
                        "permanent",
                    ],
                )?;
            }
        }
        // `--xbr-arg --pmd-cores=...` places xbr's threads itself.
        let own_cpus = cfg.xbr_args.iter().any(|a| a.starts_with("--pmd-cores"));
        let cpus = if own_cpus {
            let n = std::thread::available_parallelism().map_or(1, |n| n.get());
            format!("0-{}", n - 1)
        } else {
            cpu.clone()
        };
        let mut cmd = Command::new("ip");
        cmd.args([
            "netns", "exec", &topo.host, "nice", "-n", "-20", "taskset", "-c", &cpus,
        ])
        .arg(&cfg.xbr_bin)
        .args(["run", "--bridge", "br0", "--rundir", &rundir])
        .args(ports.iter().flat_map(|p| ["--port", p.as_str()]))
        .args(topo.pod_c.iter().flat_map(|_| {
            let opt = if cfg.c_uncached {
                ",xdp_redirect=off"
            } else {
                ""
            };
            ["--port".to_string(), format!("{VETH_C}=3{opt}")]
        }))
        .args((!own_cpus).then_some(["--cpu", &cpu]).into_iter().flatten())
        .args(
            cfg.ct_limit
                .iter()
                .flat_map(|n| ["--ct-limit".to_string(), n.to_string()]),
        )
        .args(extra)
        .args(&cfg.xbr_args)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2);
        let argv: Vec<std::ffi::OsString> = cmd.get_args().map(ToOwned::to_owned).collect();
        let child = cmd.spawn().map_err(|e| {
            start_err(
                System::Xbr,
                format!("running {}: {e}", cfg.xbr_bin.display()),
            )
        })?;
        let mut g = XbrGuard {
            child: Some(child),
            dir,
            scraper: None,
            argv,
        };
        let mgmt = g.dir.join("br0.mgmt");
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let is_sock = std::fs::symlink_metadata(&mgmt).is_ok_and(|m| m.file_type().is_socket());
            if is_sock {
                break;
            }
            if let Some(c) = g.child.as_mut() {
                if let Ok(Some(status)) = c.try_wait() {
                    return Err(start_err(
                        System::Xbr,
                        format!("xbr exited ({status}) during start:\n{}", g.log()),
                    ));
                }
            }
            if Instant::now() > deadline {
                return Err(start_err(
                    System::Xbr,
                    format!(
                        "no {} after {START_TIMEOUT:?}:\n{}",
                        mgmt.display(),
                        g.log()
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        load_flows(&g.dir, &g.dir, cfg)?;
        Ok(g)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("xbr.log")).unwrap_or_default()
    }

    /// Starts a loop that fetches `/metrics` once a second (HTTP/1.0 over
    /// bash's /dev/tcp: no client to install) and appends each answer's
    /// size to `scrapes.log`; returns once one full answer arrived, so the
    /// measured runs are all scraped.
    fn start_scraper(&mut self, topo: &Topology) -> Result<(), SystemError> {
        let log = self.dir.join("scrapes.log");
        let script = format!(
            "while :; do exec 3<>/dev/tcp/127.0.0.1/{METRICS_PORT} && \
             printf 'GET /metrics HTTP/1.0\\r\\nHost: bench\\r\\n\\r\\n' >&3 && \
             wc -c <&3 >> '{}'; exec 3<&-; sleep 1; done",
            log.display()
        );
        let child = Command::new("ip")
            .args(["netns", "exec", &topo.host, "bash", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| start_err(System::XbrScraped, format!("starting the scraper: {e}")))?;
        self.scraper = Some(child);
        let deadline = Instant::now() + FIRST_SCRAPE_TIMEOUT;
        loop {
            let sizes = std::fs::read_to_string(&log).unwrap_or_default();
            // A real exposition is kilobytes; an error page is not.
            if sizes
                .lines()
                .any(|l| l.trim().parse::<u64>().is_ok_and(|n| n > 1000))
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(start_err(
                    System::XbrScraped,
                    format!(
                        "no metrics answer within {FIRST_SCRAPE_TIMEOUT:?} (sizes: {sizes:?}):\n{}",
                        self.log()
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn conntrack_entries(&self) -> Result<u64, SystemError> {
        let path = xbr_daemon::ctl::socket_path(&self.dir, "br0");
        let reply = xbr_daemon::ctl::request(&path, "conntrack stats")
            .map_err(|e| start_err(System::Xbr, format!("conntrack stats: {e}")))?;
        if !reply.ok {
            return Err(start_err(
                System::Xbr,
                format!("conntrack stats: {}", reply.text),
            ));
        }
        parse_stat(&reply.text, "connections").ok_or_else(|| {
            start_err(
                System::Xbr,
                format!(
                    "conntrack stats without a connection count:\n{}",
                    reply.text
                ),
            )
        })
    }
}

/// The value of `name: N` in `xbr conntrack stats`' output.
fn parse_stat(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == name).then(|| v.trim().parse().ok())?
    })
}

impl Drop for XbrGuard {
    fn drop(&mut self) {
        if let Some(mut s) = self.scraper.take() {
            let _ = s.kill();
            let _ = s.wait();
        }
        if let Some(c) = self.child.take() {
            stop_child(c);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Stops a switch started as `ip netns exec ... nice ... taskset ...
/// PROGRAM` (each execs the next: one pid): SIGTERM, up to 10 s for a
/// clean exit (XDP detached), then SIGKILL. Waits on the child rather
/// than probing the pid, which a zombie keeps alive.
pub(crate) fn stop_child(mut c: Child) {
    if let Ok(pid) = i32::try_from(c.id()) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while matches!(c.try_wait(), Ok(None)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = c.kill();
    let _ = c.wait();
}
