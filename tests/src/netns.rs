//! Network namespaces, veth pairs and pods, each removed on drop.
//!
//! Names must be unique across tests running in parallel threads, across
//! test processes running at the same time, and against leftovers of a
//! killed earlier run: a tag combines the pid, a per-process counter and the
//! clock. Interface names are limited to 15 bytes, so a tag is 8 base-36
//! characters and host-side veths are `xbrt` + tag (12 bytes).

use crate::cmd::{run_timeout, CmdOutput};
use crate::{require_root, require_tool, HarnessError, Result, CMD_TIMEOUT};
use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Every namespace and interface the harness creates starts with this.
pub const NAME_PREFIX: &str = "xbrt";

/// Creation is retried with a fresh tag this many times if the name exists.
const CREATE_ATTEMPTS: usize = 3;

fn base36(mut v: u64, width: usize, out: &mut String) {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut buf = vec![b'0'; width];
    for slot in buf.iter_mut().rev() {
        // `v % 36` is always a valid index into DIGITS.
        *slot = DIGITS[(v % 36) as usize];
        v /= 36;
    }
    out.push_str(&String::from_utf8_lossy(&buf));
}

/// An 8-character tag: 3 characters of pid, 2 of a per-process counter
/// (unique within the process for 1296 objects), 3 of the clock.
pub fn unique_tag() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    // Mix the clock so consecutive calls differ in all three characters.
    let clock = nanos.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40;
    let mut tag = String::with_capacity(8);
    base36(u64::from(std::process::id()), 3, &mut tag);
    base36(n, 2, &mut tag);
    base36(clock, 3, &mut tag);
    tag
}

fn ip(args: &[&str]) -> Result<CmdOutput> {
    run_timeout(Command::new("ip").args(args), CMD_TIMEOUT)
}

fn already_exists(out: &CmdOutput) -> bool {
    out.stderr.contains("File exists") || out.stderr.contains("already exists")
}

/// Whether a network interface of that name exists in the root namespace.
pub fn link_exists(name: &str) -> Result<bool> {
    Ok(ip(&["link", "show", "dev", name])?.success())
}

/// Whether an XDP program is attached to `name` (in the root namespace),
/// in any mode. `ip link show` prints a `prog/xdp id N` line for each.
pub fn link_has_xdp(name: &str) -> Result<bool> {
    let out = ip(&["link", "show", "dev", name])?.ok()?;
    Ok(out.stdout.contains("prog/xdp"))
}

/// A network namespace `xbrt-<tag>`, deleted on drop.
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates a namespace with `lo` up.
    pub fn new() -> Result<Self> {
        require_root()?;
        require_tool("ip")?;
        let mut last = None;
        for _ in 0..CREATE_ATTEMPTS {
            let name = format!("{NAME_PREFIX}-{}", unique_tag());
            let out = ip(&["netns", "add", &name])?;
            if out.success() {
                let ns = Netns { name };
                ns.exec(&["ip", "link", "set", "lo", "up"], CMD_TIMEOUT)?
                    .ok()?;
                return Ok(ns);
            }
            if !already_exists(&out) {
                return Err(out.into_error());
            }
            last = Some(out);
        }
        Err(last
            .map(CmdOutput::into_error)
            .unwrap_or_else(|| HarnessError::Unexpected("netns add never ran".into())))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// A `Command` that runs `program args...` inside this namespace.
    pub fn command(&self, program: &str, args: &[&str]) -> Command {
        InNetns::command_in(self, program, args)
    }

    /// Runs `argv` inside this namespace, killing it after `timeout`.
    /// `argv[0]` is the program; an empty `argv` is an error.
    pub fn exec(&self, argv: &[&str], timeout: Duration) -> Result<CmdOutput> {
        InNetns::exec_in(self, argv, timeout)
    }
}

/// A network namespace to run commands in: one this harness made
/// ([`Netns`]), or one another tool made and names (`xbr lab`'s, as a
/// `str`), which the harness then neither owns nor removes.
pub trait InNetns {
    fn netns_name(&self) -> &str;

    /// A `Command` that runs `program args...` inside the namespace.
    fn command_in(&self, program: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", self.netns_name(), program])
            .args(args);
        cmd
    }

    /// Runs `argv` inside the namespace, killing it after `timeout`.
    /// `argv[0]` is the program; an empty `argv` is an error.
    fn exec_in(&self, argv: &[&str], timeout: Duration) -> Result<CmdOutput> {
        let (program, args) = argv
            .split_first()
            .ok_or_else(|| HarnessError::Unexpected("exec with an empty argv".into()))?;
        run_timeout(&mut self.command_in(program, args), timeout)
    }
}

impl InNetns for Netns {
    fn netns_name(&self) -> &str {
        &self.name
    }
}

impl InNetns for str {
    fn netns_name(&self) -> &str {
        self
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Drop cannot fail; a leftover is reported and removed by the next
        // run of scripts/test.
        match ip(&["netns", "del", &self.name]) {
            Ok(out) if out.success() => {}
            Ok(out) => eprintln!("warning: {}", out.into_error()),
            Err(e) => eprintln!("warning: deleting namespace {}: {e}", self.name),
        }
    }
}

/// A veth pair: `host` in the root namespace (up, no address, IPv6 off so
/// the host sends nothing through it), `peer` inside a [`Netns`]. Deleting
/// either end deletes both; drop deletes the host end if it still exists.
pub struct VethPair {
    host: String,
    peer: String,
}

/// How the namespace end of a [`VethPair`] is configured.
#[derive(Clone, Debug)]
pub struct PeerConfig<'a> {
    pub name: &'a str,
    pub mac: Option<&'a str>,
    /// `ADDR/PREFIX`.
    pub cidr: Option<&'a str>,
    /// Transmit and receive queues of both ends (veth's default is one).
    pub queues: Option<u32>,
}

impl VethPair {
    pub fn new(ns: &Netns, peer: &PeerConfig<'_>) -> Result<Self> {
        require_root()?;
        let mut last = None;
        for _ in 0..CREATE_ATTEMPTS {
            let host = format!("{NAME_PREFIX}{}", unique_tag());
            let queues = peer.queues.map(|q| q.to_string());
            let mut args = vec!["link", "add", &host];
            if let Some(q) = &queues {
                args.extend(["numtxqueues", q, "numrxqueues", q]);
            }
            args.extend(["type", "veth", "peer", "name", peer.name]);
            if let Some(q) = &queues {
                args.extend(["numtxqueues", q, "numrxqueues", q]);
            }
            args.extend(["netns", ns.name()]);
            if let Some(mac) = peer.mac {
                args.extend(["address", mac]);
            }
            let out = ip(&args)?;
            if out.success() {
                let pair = VethPair {
                    host,
                    peer: peer.name.to_string(),
                };
                pair.configure(ns, peer)?;
                return Ok(pair);
            }
            if !already_exists(&out) {
                return Err(out.into_error());
            }
            last = Some(out);
        }
        Err(last
            .map(CmdOutput::into_error)
            .unwrap_or_else(|| HarnessError::Unexpected("link add never ran".into())))
    }

    fn configure(&self, ns: &Netns, peer: &PeerConfig<'_>) -> Result<()> {
        let sysctl = format!("net.ipv6.conf.{}.disable_ipv6=1", self.host);
        run_timeout(Command::new("sysctl").args(["-qw", &sysctl]), CMD_TIMEOUT)?.ok()?;
        ip(&["link", "set", &self.host, "up"])?.ok()?;
        if let Some(cidr) = peer.cidr {
            ns.exec(&["ip", "addr", "add", cidr, "dev", peer.name], CMD_TIMEOUT)?
                .ok()?;
        }
        ns.exec(&["ip", "link", "set", peer.name, "up"], CMD_TIMEOUT)?
            .ok()?;
        Ok(())
    }

    /// The root-namespace end (the one a switch attaches to).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The namespace end's name.
    pub fn peer(&self) -> &str {
        &self.peer
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        // Usually already gone with its namespace; only report real failures.
        if let Ok(out) = ip(&["link", "del", &self.host]) {
            if !out.success() && !out.stderr.contains("Cannot find device") {
                eprintln!("warning: {}", out.into_error());
            }
        }
    }
}

/// A pod as OpenShift SDN wires it: its own namespace with `eth0` (an IPv4
/// address, a `0a:58:` MAC), the other veth end in the root namespace for
/// the switch. IPv6 is off so the pod sends only what a test sends (plus
/// ARP), which keeps flow counters exact.
pub struct Pod {
    // Field order is drop order: the veth goes before its namespace.
    veth: VethPair,
    ns: Netns,
    ip: Ipv4Addr,
    mac: String,
}

/// The pod-side interface name.
pub const POD_IF: &str = "eth0";

impl Pod {
    /// `ip`/`prefix_len` and `mac` (`aa:bb:cc:dd:ee:ff`) go on `eth0`.
    pub fn new(ip: Ipv4Addr, prefix_len: u8, mac: &str) -> Result<Self> {
        Self::build(ip, prefix_len, mac, None)
    }

    /// Pod number `last` of a /24: address 10.128.0.`last`, MAC
    /// 0a:58:0a:80:00:`last` (the agent's MAC for that address).
    pub fn numbered(last: u8) -> Result<Self> {
        Self::new(
            Ipv4Addr::new(10, 128, 0, last),
            24,
            &format!("0a:58:0a:80:00:{last:02x}"),
        )
    }

    /// A pod whose veth has `queues` transmit and receive queues at both
    /// ends, so its flows spread over the switch-side receive queues.
    pub fn with_queues(ip: Ipv4Addr, prefix_len: u8, mac: &str, queues: u32) -> Result<Self> {
        Self::build(ip, prefix_len, mac, Some(queues))
    }

    fn build(ip: Ipv4Addr, prefix_len: u8, mac: &str, queues: Option<u32>) -> Result<Self> {
        let ns = Netns::new()?;
        for knob in [
            "net.ipv6.conf.all.disable_ipv6=1",
            "net.ipv6.conf.default.disable_ipv6=1",
        ] {
            ns.exec(&["sysctl", "-qw", knob], CMD_TIMEOUT)?.ok()?;
        }
        let cidr = format!("{ip}/{prefix_len}");
        let veth = VethPair::new(
            &ns,
            &PeerConfig {
                name: POD_IF,
                mac: Some(mac),
                cidr: Some(&cidr),
                queues,
            },
        )?;
        // TX checksum offload stays on, as in a real pod: the pod's stack
        // leaves TCP/UDP checksums partial (pseudo-header sum only) and
        // xbr completes them (packet/src/csum.rs).
        Ok(Pod {
            veth,
            ns,
            ip,
            mac: mac.to_string(),
        })
    }

    pub fn ns(&self) -> &Netns {
        &self.ns
    }

    /// The host-side veth, to hand to the switch as a port.
    pub fn host_if(&self) -> &str {
        self.veth.host()
    }

    pub fn ip(&self) -> Ipv4Addr {
        self.ip
    }

    pub fn mac(&self) -> &str {
        &self.mac
    }

    /// Adds a permanent ARP entry for `other`, so traffic to it does not
    /// wait on (or lose packets to) ARP resolution. The kernel queues only
    /// a few packets per unresolved neighbour and drops the rest.
    pub fn add_neighbor(&self, other: &Pod) -> Result<()> {
        let ip = other.ip.to_string();
        self.ns
            .exec(
                &[
                    "ip",
                    "neigh",
                    "replace",
                    &ip,
                    "lladdr",
                    &other.mac,
                    "dev",
                    POD_IF,
                    "nud",
                    "permanent",
                ],
                CMD_TIMEOUT,
            )?
            .ok()?;
        Ok(())
    }

    /// Sets the MTU of both ends of the pod's veth.
    pub fn set_mtu(&self, mtu: u32) -> Result<()> {
        let mtu = mtu.to_string();
        self.exec_ok(&["ip", "link", "set", POD_IF, "mtu", &mtu])?;
        let out = run_timeout(
            Command::new("ip").args(["link", "set", self.host_if(), "mtu", &mtu]),
            CMD_TIMEOUT,
        )?;
        out.ok().map(drop)
    }

    /// Runs `argv` in the pod's namespace; an error unless it succeeds.
    pub fn exec_ok(&self, argv: &[&str]) -> Result<()> {
        self.ns.exec(argv, CMD_TIMEOUT)?.ok().map(drop)
    }

    /// Sends `n` copies of `frame` from the pod's interface through a raw
    /// socket, back to back (as a host sends 802.3 frames or crafted
    /// ones: the kernel builds none of its own).
    pub fn send_raw(&self, frame: &[u8], n: u64) -> Result<()> {
        let hex: String = frame.iter().map(|b| format!("{b:02x}")).collect();
        let script = format!(
            "import socket\n\
             s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)\n\
             s.bind(('{POD_IF}', 0))\n\
             f = bytes.fromhex('{hex}')\n\
             for _ in range({n}):\n    s.send(f)\n"
        );
        self.exec_ok(&["python3", "-c", &script])
    }

    /// Turns GRO on for the pod's interface: a veth accepts frames
    /// redirected to it in XDP (the XDP flow cache's forwarding) only then.
    pub fn accept_xdp_redirects(&self) -> Result<()> {
        self.exec_ok(&["ethtool", "-K", POD_IF, "gro", "on"])
    }

    /// `xbr run` arguments making `pods` ports 1, 2, ... in that order,
    /// each ready for the XDP flow cache to redirect to (GRO on in the
    /// pod, `xdp_redirect=on`).
    pub fn xdp_port_args(pods: &[&Pod]) -> Result<Vec<String>> {
        let mut args = Vec::new();
        for (i, p) in pods.iter().enumerate() {
            p.accept_xdp_redirects()?;
            args.push("--port".to_string());
            args.push(format!("{}={},xdp_redirect=on", p.host_if(), i + 1));
        }
        Ok(args)
    }

    /// `ping -c count` to `dst` from this pod, 0.2 s apart, each reply
    /// waited for at most 1 s, the whole run bounded by a deadline.
    pub fn ping(&self, dst: Ipv4Addr, count: u32) -> Result<CmdOutput> {
        self.ping_sized(dst, count, 56)
    }

    /// [`ping`](Self::ping) with `size` bytes of ICMP payload (over the
    /// MTU, each echo is a fragmented datagram).
    pub fn ping_sized(&self, dst: Ipv4Addr, count: u32, size: u32) -> Result<CmdOutput> {
        require_tool("ping")?;
        let count_s = count.to_string();
        let size_s = size.to_string();
        let deadline = (count / 5 + 3).to_string();
        let dst = dst.to_string();
        let argv = [
            "ping", "-n", "-q", "-c", &count_s, "-s", &size_s, "-i", "0.2", "-W", "1", "-w",
            &deadline, &dst,
        ];
        let timeout = Duration::from_secs(u64::from(count / 5 + 8));
        self.ns.exec(&argv, timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::unique_tag;
    use std::collections::HashSet;

    #[test]
    fn tags_are_short_distinct_and_interface_safe() {
        let tags: Vec<String> = (0..500).map(|_| unique_tag()).collect();
        for t in &tags {
            assert_eq!(t.len(), 8, "{t}");
            assert!(
                t.bytes()
                    .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase()),
                "{t}"
            );
        }
        assert_eq!(tags.iter().collect::<HashSet<_>>().len(), tags.len());
        // veth names: prefix + tag must fit IFNAMSIZ - 1.
        assert!(super::NAME_PREFIX.len() + 8 <= 15);
    }
}
