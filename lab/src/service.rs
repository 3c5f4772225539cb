//! The lab's Service: a ClusterIP that kube-proxy-like iptables rules in
//! every node DNAT to backend pods on each node, each backend running a
//! TCP responder that answers every connection with its pod name.
//!
//! It exercises what the agent leaves to the host since 4.13: table 60
//! sends Service traffic out through tun0, the host DNATs it and sends it
//! back in through tun0, and the backend's reply must leave br0 with the
//! ClusterIP as its source (table 31's `ct(nat,table=70)`, with the host's
//! translation learned by xbr's conntrack; see `conntrack/host.rs`).
//!
//! kube-proxy picks a backend at random; the lab uses the `nth` statistic
//! instead, so consecutive connections take the backends in turn and a
//! check that makes one connection per backend meets all of them.

use super::state::{LabState, Pod, Service};
use super::sys;
use super::LabError;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::time::Duration;

/// The Service's ClusterIP (in the service network, 172.30.0.0/16).
pub const CLUSTER_IP: Ipv4Addr = Ipv4Addr::new(172, 30, 0, 10);
/// Its port, which the backends also listen on.
pub const PORT: u16 = 80;
/// How long a client waits for one answer.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(3);
/// Longest answer a client reads (a pod name and a newline).
const MAX_ANSWER: u64 = 256;

/// The Service of a planned lab: in the first namespace (`default`,
/// reachable from every namespace in every mode), with the first pod of
/// that namespace on each node as a backend. `None` when no pod is in it.
pub fn plan(namespace: &str, pods: &[Pod]) -> Option<Service> {
    let mut backends: Vec<String> = Vec::new();
    let mut nodes_seen: Vec<&str> = Vec::new();
    for p in pods.iter().filter(|p| p.namespace == namespace) {
        if !nodes_seen.contains(&p.node.as_str()) {
            nodes_seen.push(&p.node);
            backends.push(p.name.clone());
        }
    }
    (!backends.is_empty()).then(|| Service {
        ip: CLUSTER_IP,
        port: PORT,
        namespace: namespace.to_string(),
        backends,
    })
}

/// The iptables `nat` rules (arguments after `iptables -t nat`) that
/// DNAT `svc` in a node, as kube-proxy's KUBE-SERVICES chains would.
pub fn dnat_rules(svc: &Service, backend_ips: &[Ipv4Addr]) -> Vec<Vec<String>> {
    let mut rules = vec![vec!["-N".to_string(), "XBR-LAB-SVC".to_string()]];
    let dst = svc.ip.to_string();
    let port = svc.port.to_string();
    rules.push(
        [
            "-A",
            "PREROUTING",
            "-d",
            &dst,
            "-p",
            "tcp",
            "--dport",
            &port,
            "-j",
            "XBR-LAB-SVC",
        ]
        .map(str::to_string)
        .to_vec(),
    );
    let n = backend_ips.len();
    for (i, ip) in backend_ips.iter().enumerate() {
        let to = format!("{ip}:{port}");
        let mut rule: Vec<String> = ["-A", "XBR-LAB-SVC"].map(str::to_string).to_vec();
        if i + 1 < n {
            // Of the connections left to this rule, every (n - i)th.
            let every = (n - i).to_string();
            rule.extend(
                [
                    "-m",
                    "statistic",
                    "--mode",
                    "nth",
                    "--every",
                    &every,
                    "--packet",
                    "0",
                ]
                .map(str::to_string),
            );
        }
        rule.extend(["-p", "tcp", "-j", "DNAT", "--to-destination", &to].map(str::to_string));
        rules.push(rule);
    }
    rules
}

/// Installs the Service in every node and starts the backends'
/// responders (run by this binary, `xbr lab respond`, inside the pods'
/// namespaces; `lab down` stops them with the namespaces' processes).
pub fn install(state: &LabState) -> Result<(), LabError> {
    let exe = std::env::current_exe().map_err(|source| LabError::Io {
        context: "locating the xbr binary".into(),
        source,
    })?;
    for svc in &state.services {
        let backends: Vec<&Pod> = svc
            .backends
            .iter()
            .map(|b| {
                state
                    .pods
                    .iter()
                    .find(|p| &p.name == b)
                    .ok_or_else(|| LabError::Unexpected(format!("backend {b} is not a pod")))
            })
            .collect::<Result<_, _>>()?;
        let ips: Vec<Ipv4Addr> = backends.iter().map(|p| p.ip).collect();
        for node in &state.nodes {
            for rule in dnat_rules(svc, &ips) {
                let mut args = vec!["-w", "5", "-t", "nat"];
                args.extend(rule.iter().map(String::as_str));
                sys::in_ns(&node.netns, "iptables", &args)?;
            }
        }
        for pod in backends {
            start_responder(state, &exe, pod, svc.port)?;
        }
    }
    Ok(())
}

fn start_responder(
    state: &LabState,
    exe: &std::path::Path,
    pod: &Pod,
    port: u16,
) -> Result<(), LabError> {
    let log_path = state.dir.join(format!("{}-responder.log", pod.name));
    let args = [
        "lab",
        "respond",
        "--port",
        &port.to_string(),
        "--text",
        &pod.name,
    ]
    .map(String::from);
    sys::spawn_detached(&pod.netns, exe, &args, &log_path)?;
    let deadline = std::time::Instant::now() + RESPONDER_START;
    loop {
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        if log.contains(LISTENING) {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            return Err(LabError::Unexpected(format!(
                "the responder in {} did not listen within {RESPONDER_START:?}: {log}",
                pod.name
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What a responder logs once it listens.
const LISTENING: &str = "xbr lab respond: listening";
/// Bound on a responder's start.
const RESPONDER_START: Duration = Duration::from_secs(15);

/// `xbr lab respond`: answers every TCP connection on `port` with `text`
/// and a newline, forever.
pub fn respond(port: u16, text: &str) -> Result<(), LabError> {
    let listener =
        TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)).map_err(|source| LabError::Io {
            context: format!("listening on port {port}"),
            source,
        })?;
    // start_responder waits for this line: `lab up` returns only once
    // every backend accepts connections.
    eprintln!("{LISTENING}");
    let answer = format!("{text}\n");
    for conn in listener.incoming() {
        match conn {
            // One failed client must not stop the responder.
            Ok(mut c) => {
                let _ = c.write_all(answer.as_bytes());
            }
            // Out of descriptors and the like: wait rather than spin.
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    Ok(())
}

/// `xbr lab fetch`: connects to `dst`, and returns the answer's first
/// line. The connection can only be made if the answers come from `dst`
/// itself: for a Service, if the backend's replies were un-DNATed.
pub fn fetch(dst: SocketAddrV4) -> Result<String, String> {
    let mut c = TcpStream::connect_timeout(&dst.into(), FETCH_TIMEOUT)
        .map_err(|e| format!("connecting to {dst}: {e}"))?;
    c.set_read_timeout(Some(FETCH_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let mut answer = String::new();
    Read::by_ref(&mut c)
        .take(MAX_ANSWER)
        .read_to_string(&mut answer)
        .map_err(|e| format!("reading from {dst}: {e}"))?;
    Ok(answer.lines().next().unwrap_or_default().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, node: &str, ns: &str) -> Pod {
        Pod {
            name: name.into(),
            netns: String::new(),
            ip: Ipv4Addr::LOCALHOST,
            mac: String::new(),
            node: node.into(),
            namespace: ns.into(),
            vnid: 0,
            ofport: 3,
            host_if: String::new(),
        }
    }

    #[test]
    fn one_backend_per_node_from_the_namespace() {
        let pods = [
            pod("n1-p1", "n1", "other"),
            pod("n1-p2", "n1", "default"),
            pod("n1-p3", "n1", "default"),
            pod("n2-p1", "n2", "default"),
        ];
        let s = plan("default", &pods).unwrap();
        assert_eq!(s.backends, ["n1-p2", "n2-p1"]);
        assert_eq!((s.ip, s.port), (CLUSTER_IP, PORT));
        assert!(plan("empty", &pods).is_none());
    }

    #[test]
    fn rules_share_connections_out_in_turn() {
        let s = plan("default", &[pod("a", "n1", "default")]).unwrap();
        let ips = [
            Ipv4Addr::new(10, 128, 0, 2),
            Ipv4Addr::new(10, 128, 2, 2),
            Ipv4Addr::new(10, 128, 2, 3),
        ];
        let rules = dnat_rules(&s, &ips);
        assert_eq!(rules.len(), 5);
        let text: Vec<String> = rules.iter().map(|r| r.join(" ")).collect();
        assert!(text[2].contains("--every 3 --packet 0"), "{}", text[2]);
        assert!(text[3].contains("--every 2 --packet 0"), "{}", text[3]);
        assert!(!text[4].contains("statistic"), "{}", text[4]);
        assert!(text[4].ends_with("--to-destination 10.128.2.3:80"));
    }
}
