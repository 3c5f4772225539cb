//! The benchmark topology: three network namespaces, removed on drop.
//!
//! ```text
//!  pod A (gen)              host (switch under test)              pod B (sink)
//!  eth0 ------------------- veth-a                veth-b -------- eth0
//!                                                 veth-c -------- eth0
//!                                                              pod C (sink)
//! ```
//!
//! Pod C (OpenFlow port 3) exists only where a scenario moves traffic
//! between two sinks ([`Topology::with_pod_c`], the `churn` scenario).
//!
//! The host namespace plays the node's root namespace: the switch attaches
//! to `veth-a` and `veth-b`, so its names never clash with the real host's
//! interfaces or with another run (OVS's userspace datapath also creates
//! tap devices `br0` and `ovs-netdev` there). Names are `xbrt-<tag>-h|a|b`
//! with a tag unique across processes ([`crate::ovs::unique_tag`]); the
//! test scripts' clean-up removes `xbrt*` leftovers of a killed run.
//! IPv6 is off everywhere, so no router solicitation or MLD report lands
//! in the sink's count.

use std::fs::File;
use std::process::Command;

use nix::sched::{setns, CloneFlags};

use crate::ovs::{run_bounded, unique_tag, OvsError, CMD_TIMEOUT, NAME_PREFIX};

/// Pod A's MAC (the generator's frames' source), OpenShift SDN style.
pub const MAC_A: [u8; 6] = [0x0a, 0x58, 10, 128, 0, 2];
/// Pod B's MAC (the frames' destination).
pub const MAC_B: [u8; 6] = [0x0a, 0x58, 10, 128, 0, 3];
/// `veth-a`'s MAC (the node's uplink in the VXLAN scenario).
pub const MAC_VA: [u8; 6] = [0x02, 0, 0, 0, 0x0a, 0x01];
/// Pod C's MAC.
pub const MAC_C: [u8; 6] = [0x0a, 0x58, 10, 128, 0, 4];
/// Host-side interface names (in the host namespace).
pub const VETH_A: &str = "veth-a";
pub const VETH_B: &str = "veth-b";
pub const VETH_C: &str = "veth-c";
/// In pod A: one end of a veth pair left down, to which the generator's
/// program is attached so that live-frames calls stay cheap (see
/// `bpf::Generator::pin`); nothing is ever sent through it.
pub const GEN_PIN_IF: &str = "gen-pin";
/// The pods' interface name.
pub const POD_IF: &str = "eth0";

/// Errors entering a namespace.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    #[error("opening namespace {name}: {source}")]
    Open {
        name: String,
        source: std::io::Error,
    },
    #[error("entering namespace {name}: {source}")]
    Enter { name: String, source: nix::Error },
    #[error("no interface {ifname} in namespace {ns}")]
    NoInterface { ns: String, ifname: String },
}

/// Moves the calling thread (only it) into network namespace `name`.
pub fn enter(name: &str) -> Result<(), NetnsError> {
    let path = format!("/var/run/netns/{name}");
    let f = File::open(&path).map_err(|source| NetnsError::Open {
        name: name.to_string(),
        source,
    })?;
    setns(&f, CloneFlags::CLONE_NEWNET).map_err(|source| NetnsError::Enter {
        name: name.to_string(),
        source,
    })
}

/// The ifindex of `ifname` in the calling thread's namespace (`ns` is for
/// the error message).
pub fn ifindex(ns: &str, ifname: &str) -> Result<u32, NetnsError> {
    nix::net::if_::if_nametoindex(ifname).map_err(|_| NetnsError::NoInterface {
        ns: ns.to_string(),
        ifname: ifname.to_string(),
    })
}

/// Runs `f` on a thread inside namespace `ns` and returns its result.
pub fn run_in<T: Send, E: From<NetnsError> + Send>(
    ns: &str,
    f: impl FnOnce() -> Result<T, E> + Send,
) -> Result<T, E> {
    std::thread::scope(|s| {
        s.spawn(|| {
            enter(ns)?;
            f()
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// The three namespaces and two veth pairs; see the module documentation.
pub struct Topology {
    pub host: String,
    pub pod_a: String,
    pub pod_b: String,
    /// The second sink's namespace, if there is one.
    pub pod_c: Option<String>,
    made: Vec<String>,
}

fn ip(args: &[&str]) -> Result<(), OvsError> {
    run_bounded(Command::new("ip").args(args), CMD_TIMEOUT)?.ok()?;
    Ok(())
}

/// `aa:bb:..` notation.
pub fn mac(m: [u8; 6]) -> String {
    m.map(|b| format!("{b:02x}")).join(":")
}

impl Topology {
    /// Creates the namespaces and veths, everything up.
    pub fn new() -> Result<Topology, OvsError> {
        Self::build(false)
    }

    /// [`Topology::new`] plus pod C behind `veth-c`.
    pub fn with_pod_c() -> Result<Topology, OvsError> {
        Self::build(true)
    }

    fn build(pod_c: bool) -> Result<Topology, OvsError> {
        let tag = unique_tag();
        let name = |r: &str| format!("{NAME_PREFIX}-{tag}-{r}");
        let mut t = Topology {
            host: name("h"),
            pod_a: name("a"),
            pod_b: name("b"),
            pod_c: pod_c.then(|| name("c")),
            made: Vec::new(),
        };
        let spaces = [t.host.clone(), t.pod_a.clone(), t.pod_b.clone()];
        for ns in spaces.into_iter().chain(t.pod_c.clone()) {
            ip(&["netns", "add", &ns])?;
            t.made.push(ns.clone());
            for key in ["all", "default"] {
                ip(&[
                    "netns",
                    "exec",
                    &ns,
                    "sysctl",
                    "-qw",
                    &format!("net.ipv6.conf.{key}.disable_ipv6=1"),
                ])?;
            }
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        let mut pods = vec![
            (VETH_A, t.pod_a.clone(), MAC_A),
            (VETH_B, t.pod_b.clone(), MAC_B),
        ];
        pods.extend(t.pod_c.clone().map(|c| (VETH_C, c, MAC_C)));
        for (veth, pod, m) in pods {
            let pod = &pod;
            ip(&[
                "-n",
                &t.host,
                "link",
                "add",
                veth,
                "type",
                "veth",
                "peer",
                "name",
                POD_IF,
                "netns",
                pod,
                "address",
                &mac(m),
            ])?;
            ip(&["-n", &t.host, "link", "set", veth, "up"])?;
            ip(&["-n", pod, "link", "set", POD_IF, "up"])?;
        }
        let pin_peer = format!("{GEN_PIN_IF}-peer");
        ip(&[
            "-n", &t.pod_a, "link", "add", GEN_PIN_IF, "type", "veth", "peer", "name", &pin_peer,
        ])?;
        Ok(t)
    }

    /// `ip netns exec <ns> args...` (bounded), failing on a non-zero exit.
    pub fn exec(&self, ns: &str, args: &[&str]) -> Result<String, OvsError> {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]).args(args);
        Ok(run_bounded(&mut c, CMD_TIMEOUT)?.ok()?.stdout)
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        // Deleting a namespace deletes its veth ends, and with them the peers.
        for ns in self.made.drain(..).rev() {
            if let Err(e) = ip(&["netns", "del", &ns]) {
                eprintln!("warning: removing namespace {ns}: {e}");
            }
        }
    }
}
