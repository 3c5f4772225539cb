//! `xbr lab check`: the connectivity matrix, expected against observed.
//!
//! Probes: every pod to every other pod (same node and across nodes), every
//! pod to its node's gateway (tun0) and to the external host (through tun0
//! and the node's MASQUERADE), and every node to the external host and to
//! the other nodes over its uplink (the node's own traffic must keep
//! working while xbr holds the uplink). What is expected follows from the
//! mode's flows: subnet allows everything; multitenant lets a pod reach
//! another only with the same VNID or when either VNID is 0; the gateway
//! and the outside are always reachable (tables 31 and 101 send to tun0,
//! table 80 lets the gateway's traffic in).
//!
//! Each probe is a bounded `ping` (3 echo requests, 3 s deadline) in the
//! source namespace; "reached" means at least one reply. Probes run in
//! parallel, a bounded number at a time.
//!
//! Services: from one client pod per node, two TCP connections per
//! backend to the ClusterIP (`xbr lab fetch`); "reached" means every
//! connection was answered, from the ClusterIP (a connection is only
//! established if the backend's replies carry the ClusterIP as their
//! source), and every backend answered at least once (the nodes' rules
//! take the backends in turn).

use super::flows::Mode;
use super::state::{LabState, Pod};
use super::sys;
use super::LabError;
use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::time::Duration;

const PARALLEL: usize = 16;
const PING_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    SameNode,
    CrossNode,
    Gateway,
    External,
    Uplink,
    Service,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::SameNode => "same-node",
            Kind::CrossNode => "cross-node",
            Kind::Gateway => "gateway",
            Kind::External => "external",
            Kind::Uplink => "uplink",
            Kind::Service => "service",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Probe {
    pub src: String,
    pub src_netns: String,
    pub dst: String,
    pub dst_ip: Ipv4Addr,
    pub kind: Kind,
    pub expected: bool,
}

#[derive(Clone, Debug)]
pub struct Outcome {
    pub probe: Probe,
    /// `None` when the probe itself could not run (its error text).
    pub observed: Result<bool, String>,
}

impl Outcome {
    pub fn ok(&self) -> bool {
        self.observed
            .as_ref()
            .is_ok_and(|o| *o == self.probe.expected)
    }
}

#[derive(Debug)]
pub struct CheckReport {
    pub outcomes: Vec<Outcome>,
    /// Nodes whose xbr is not running.
    pub dead_switches: Vec<String>,
    pub vxlan: bool,
}

impl CheckReport {
    pub fn mismatches(&self) -> usize {
        self.outcomes.iter().filter(|o| !o.ok()).count()
    }

    pub fn passed(&self) -> bool {
        self.mismatches() == 0 && self.dead_switches.is_empty()
    }
}

/// Whether the mode's flows let `a` reach `b` (and `b` answer).
/// `b_isolated`: networkpolicy, `b`'s namespace has the lab's
/// `allow-same-namespace` policies (ingress from its own namespace and
/// VNID 0 only; replies to its own connections always pass).
pub fn pods_may_talk(mode: Mode, a: &Pod, b: &Pod, b_isolated: bool) -> bool {
    match mode {
        Mode::Subnet => true,
        Mode::NetworkPolicy => !b_isolated || a.vnid == b.vnid || a.vnid == 0,
        Mode::Multitenant => a.vnid == b.vnid || a.vnid == 0 || b.vnid == 0,
    }
}

/// The probes for a lab, in table order.
pub fn probes(state: &LabState) -> Result<Vec<Probe>, LabError> {
    let mode: Mode = state.mode.parse().map_err(LabError::Usage)?;
    let isolated = |ns: &str| {
        state.namespaces.iter().any(|n| {
            n.name == ns && n.policy.as_deref() == Some(super::flows::POLICY_SAME_NAMESPACE)
        })
    };
    let mut out = Vec::new();
    for a in &state.pods {
        for b in state.pods.iter().filter(|b| b.name != a.name) {
            out.push(Probe {
                src: a.name.clone(),
                src_netns: a.netns.clone(),
                dst: b.name.clone(),
                dst_ip: b.ip,
                kind: if a.node == b.node {
                    Kind::SameNode
                } else {
                    Kind::CrossNode
                },
                expected: pods_may_talk(mode, a, b, isolated(&b.namespace)),
            });
        }
        let node = state
            .node(&a.node)
            .ok_or_else(|| LabError::Unexpected(format!("pod {} has no node", a.name)))?;
        out.push(Probe {
            src: a.name.clone(),
            src_netns: a.netns.clone(),
            dst: format!("{}-tun0", node.name),
            dst_ip: node.gateway,
            kind: Kind::Gateway,
            expected: true,
        });
        out.push(Probe {
            src: a.name.clone(),
            src_netns: a.netns.clone(),
            dst: "external".into(),
            dst_ip: state.external.ip,
            kind: Kind::External,
            expected: true,
        });
    }
    for svc in &state.services {
        let backends: Vec<&Pod> = state
            .pods
            .iter()
            .filter(|p| svc.backends.contains(&p.name))
            .collect();
        for n in &state.nodes {
            let Some(client) = state
                .pods
                .iter()
                .find(|p| p.node == n.name && !svc.backends.contains(&p.name))
            else {
                continue;
            };
            out.push(Probe {
                src: client.name.clone(),
                src_netns: client.netns.clone(),
                dst: format!("svc-{}", svc.namespace),
                dst_ip: svc.ip,
                kind: Kind::Service,
                expected: backends
                    .iter()
                    .all(|b| pods_may_talk(mode, client, b, isolated(&b.namespace))),
            });
        }
    }
    for n in &state.nodes {
        out.push(Probe {
            src: n.name.clone(),
            src_netns: n.netns.clone(),
            dst: "external".into(),
            dst_ip: state.external.ip,
            kind: Kind::Uplink,
            expected: true,
        });
        for m in state.nodes.iter().filter(|m| m.name != n.name) {
            out.push(Probe {
                src: n.name.clone(),
                src_netns: n.netns.clone(),
                dst: m.name.clone(),
                dst_ip: m.uplink_ip,
                kind: Kind::Uplink,
                expected: true,
            });
        }
    }
    Ok(out)
}

/// "3 packets transmitted, 2 received, ..." -> 2.
fn received(ping_output: &str) -> Option<u32> {
    let line = ping_output.lines().find(|l| l.contains("transmitted"))?;
    let mut words = line.split(", ");
    words.next()?;
    words.next()?.split_whitespace().next()?.parse().ok()
}

/// Connects to a Service twice per backend; see the module documentation.
fn service(state: &LabState, p: &Probe) -> Result<bool, String> {
    let svc = state
        .services
        .iter()
        .find(|s| s.ip == p.dst_ip)
        .ok_or_else(|| format!("no service at {}", p.dst_ip))?;
    let exe = std::env::current_exe().map_err(|e| format!("locating xbr: {e}"))?;
    let exe = exe.to_string_lossy();
    let dst = format!("{}:{}", svc.ip, svc.port);
    let timeout = super::service::FETCH_TIMEOUT * 3;
    let mut answers = Vec::new();
    let mut failures = 0;
    for _ in 0..svc.backends.len() * 2 {
        let out = sys::run(
            "ip",
            &[
                "netns",
                "exec",
                &p.src_netns,
                &exe,
                "lab",
                "fetch",
                "--dst",
                &dst,
            ],
            timeout,
        )
        .map_err(|e| e.to_string())?;
        match (out.timed_out, out.success()) {
            (false, true) => answers.push(out.stdout.trim().to_string()),
            _ => failures += 1,
        }
    }
    if answers.is_empty() {
        return Ok(false);
    }
    let missing: Vec<&String> = svc
        .backends
        .iter()
        .filter(|b| !answers.contains(b))
        .collect();
    if failures > 0 || !missing.is_empty() {
        return Err(format!(
            "{failures} connection(s) failed, answers {answers:?}, backends not heard {missing:?}"
        ));
    }
    Ok(true)
}

fn ping(p: &Probe) -> Result<bool, String> {
    let ip = p.dst_ip.to_string();
    let out = sys::run(
        "ip",
        &[
            "netns",
            "exec",
            &p.src_netns,
            "ping",
            "-n",
            "-q",
            "-c",
            "3",
            "-i",
            "0.2",
            "-w",
            "3",
            &ip,
        ],
        PING_TIMEOUT,
    )
    .map_err(|e| e.to_string())?;
    if out.timed_out {
        return Err(format!("{} timed out", out.command));
    }
    received(&out.stdout).map(|n| n > 0).ok_or_else(|| {
        let why = out.stderr.trim();
        format!("ping gave no summary: {why}")
    })
}

/// Runs the matrix for the lab in `state`.
pub fn check(state: &LabState) -> Result<CheckReport, LabError> {
    let probes = probes(state)?;
    let mut outcomes = Vec::with_capacity(probes.len());
    for chunk in probes.chunks(PARALLEL) {
        let results: Vec<Outcome> = std::thread::scope(|s| {
            let handles: Vec<_> = chunk
                .iter()
                .map(|p| {
                    s.spawn(move || match p.kind {
                        Kind::Service => service(state, p),
                        _ => ping(p),
                    })
                })
                .collect();
            handles
                .into_iter()
                .zip(chunk)
                .map(|(h, p)| Outcome {
                    probe: p.clone(),
                    observed: h
                        .join()
                        .unwrap_or_else(|_| Err("probe thread panicked".into())),
                })
                .collect()
        });
        outcomes.extend(results);
    }
    let dead_switches = state
        .nodes
        .iter()
        .filter(|n| !super::xbr_proc::process_alive(n.xbr_pid))
        .map(|n| n.name.clone())
        .collect();
    Ok(CheckReport {
        outcomes,
        dead_switches,
        vxlan: state.vxlan,
    })
}

fn word(reach: bool) -> &'static str {
    if reach {
        "reach"
    } else {
        "isolated"
    }
}

/// The report as a table, one probe per line, then a summary.
pub fn render(state: &LabState, r: &CheckReport) -> String {
    let mut out = String::new();
    let w_src = r
        .outcomes
        .iter()
        .map(|o| o.probe.src.len())
        .max()
        .unwrap_or(3)
        .max(3);
    let w_dst = r
        .outcomes
        .iter()
        .map(|o| o.probe.dst.len())
        .max()
        .unwrap_or(3)
        .max(3);
    let _ = writeln!(
        out,
        "{:<w_src$}  {:<w_dst$}  {:<15}  {:<10}  {:<8}  {:<8}  result",
        "src", "dst", "dst ip", "kind", "expected", "observed"
    );
    for o in &r.outcomes {
        let p = &o.probe;
        let observed = match &o.observed {
            Ok(b) => word(*b).to_string(),
            Err(_) => "error".to_string(),
        };
        let result = match (&o.observed, o.ok()) {
            (_, true) => "ok".to_string(),
            (Err(e), false) => format!("MISMATCH ({e})"),
            (Ok(_), false) => "MISMATCH".to_string(),
        };
        let _ = writeln!(
            out,
            "{:<w_src$}  {:<w_dst$}  {:<15}  {:<10}  {:<8}  {:<8}  {result}",
            p.src,
            p.dst,
            p.dst_ip.to_string(),
            p.kind.name(),
            word(p.expected),
            observed
        );
    }
    let bad = r.mismatches();
    let _ = writeln!(
        out,
        "\n{} probes, {} as expected, {} mismatched (mode {}, {} nodes, {} pods)",
        r.outcomes.len(),
        r.outcomes.len() - bad,
        bad,
        state.mode,
        state.nodes.len(),
        state.pods.len()
    );
    for n in &r.dead_switches {
        let _ = writeln!(out, "xbr of {n} is not running");
    }
    let cross_bad = r
        .outcomes
        .iter()
        .any(|o| o.probe.kind == Kind::CrossNode && !o.ok());
    if cross_bad && !r.vxlan {
        let _ = writeln!(
            out,
            "cross-node probes fail because this xbr has no VXLAN port type yet: \
             vxlan0 is a placeholder internal port"
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{plan, Options};

    #[test]
    fn ping_summary() {
        let out = "--- 10.0.0.2 ping statistics ---\n3 packets transmitted, 2 received, 33% packet loss, time 401ms\n";
        assert_eq!(received(out), Some(2));
        let out = "3 packets transmitted, 0 received, +3 errors, 100% packet loss\n";
        assert_eq!(received(out), Some(0));
        assert_eq!(received("garbage"), None);
    }

    #[test]
    fn multitenant_expectations() {
        let o = Options {
            prefix: "t".into(),
            dir: "/tmp/t".into(),
            ..crate::plan::test_options(Mode::Multitenant, 2, 3, 3)
        };
        let s = plan(&o, 5).unwrap();
        let ps = probes(&s).unwrap();
        // 6 pods: 30 pod pairs, 6 gateway, 6 external; the Service from a
        // client on each of the 2 nodes; 2 nodes: 2 + 2 uplink.
        assert_eq!(ps.len(), 30 + 6 + 6 + 2 + 4);
        let find = |a: &str, b: &str| ps.iter().find(|p| p.src == a && p.dst == b).unwrap();
        // pod1 is in default (VNID 0), pod2 in ns1, pod3 in ns2.
        assert!(find("node1-pod1", "node1-pod2").expected);
        assert!(find("node1-pod2", "node1-pod1").expected);
        assert!(!find("node1-pod2", "node1-pod3").expected);
        assert!(find("node1-pod2", "node2-pod2").expected);
        assert_eq!(find("node1-pod2", "node2-pod2").kind, Kind::CrossNode);
        assert!(!find("node1-pod3", "node2-pod2").expected);
        assert!(find("node1-pod3", "node1-tun0").expected);
        assert!(find("node1-pod3", "external").expected);
        // The Service is in default (VNID 0): everyone may use it.
        let svc = find("node1-pod2", "svc-default");
        assert_eq!((svc.kind, svc.expected), (Kind::Service, true));
        assert_eq!(s.services[0].backends, ["node1-pod1", "node2-pod1"]);
    }

    #[test]
    fn networkpolicy_expectations() {
        let o = Options {
            prefix: "t".into(),
            dir: "/tmp/t".into(),
            vxlan: true,
            variant: crate::flows::Variant::Conntrack,
            ..crate::plan::test_options(Mode::NetworkPolicy, 2, 3, 3)
        };
        let s = plan(&o, 5).unwrap();
        // Only the last namespace has policies.
        let policies: Vec<Option<&str>> =
            s.namespaces.iter().map(|n| n.policy.as_deref()).collect();
        assert_eq!(policies, [None, None, Some("allow-same-namespace")]);
        let ps = probes(&s).unwrap();
        let find = |a: &str, b: &str| ps.iter().find(|p| p.src == a && p.dst == b).unwrap();
        // pod1: default (VNID 0), pod2: ns1, pod3: ns2 (isolated).
        assert!(
            !find("node1-pod2", "node1-pod3").expected,
            "ns1 -> ns2 denied"
        );
        assert!(!find("node1-pod2", "node2-pod3").expected);
        assert!(find("node1-pod3", "node1-pod2").expected, "ns2 -> ns1 open");
        assert!(
            find("node1-pod1", "node2-pod3").expected,
            "VNID 0 allowed in"
        );
        assert!(find("node2-pod3", "node1-pod3").expected, "same namespace");
        assert!(find("node1-pod3", "external").expected);
        assert!(find("node1-pod3", "node1-tun0").expected);
    }
}
