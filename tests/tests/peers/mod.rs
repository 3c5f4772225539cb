//! An xbr and an Open vSwitch 3.1 side by side with the same ports, driven
//! by the same `ovs-ofctl` commands (agent_compat.rs, openflow15.rs).
//!
//! Each switch runs in a network namespace of its own (OVS from Debian's
//! `openvswitch-switch` with private run/db/log directories and the netdev
//! datapath), so both can have the agent's port names. Every port is an
//! internal (TAP) port on both sides: these tests compare tables, not
//! traffic.
#![allow(dead_code)]

use bench::ovs::{normalise_dump, Ovs, OvsError, PortKind, PortSpec};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use xbr_tests::{run_timeout, HarnessError, Netns, Result, Xbr, BRIDGE};

/// Bound on one `ovs-ofctl` command (loading or dumping hundreds of flows).
pub const LOAD_TIMEOUT: Duration = Duration::from_secs(60);

pub fn ovs_err(e: OvsError) -> HarnessError {
    HarnessError::Unexpected(e.to_string())
}

/// What `ovs-ofctl` did against one switch.
#[derive(Debug, Clone)]
pub struct Out {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

/// An xbr and an OVS with the same ports. Field order is drop order.
pub struct Peers {
    pub xbr: Xbr,
    pub ovs: Ovs,
}

fn xbr_port_args(ports: &[PortSpec]) -> Vec<String> {
    let mut args = Vec::new();
    for p in ports {
        // Every port is a TAP device (as on the OVS side): these ports
        // only hold numbers and carry no traffic, and 102 TAPs start far
        // faster than 102 veth pairs with XDP and AF_XDP each (six such
        // xbrs starting at once overran the tests' start-up bound).
        args.push("--port".to_string());
        args.push(format!(
            "{}={},type=internal,internal_backend=tap",
            p.name, p.ofport
        ));
    }
    args
}

impl Peers {
    /// Starts both switches (at the same time) with `ports`.
    pub fn start(ports: &[PortSpec]) -> Result<Self> {
        let xbr_args = xbr_port_args(ports);
        let started = std::time::Instant::now();
        let (xbr, ovs) = std::thread::scope(|s| {
            let ovs = s.spawn(|| Ovs::start(ports));
            let xbr = (|| {
                let ns = Netns::new()?;
                let args: Vec<&str> = xbr_args.iter().map(String::as_str).collect();
                Xbr::start_in(ns, &args)
            })();
            let ovs = ovs
                .join()
                .map_err(|_| HarnessError::Unexpected("OVS start-up thread panicked".into()));
            (xbr, ovs)
        });
        let ovs = ovs?.map_err(ovs_err)?;
        let xbr = xbr?;
        eprintln!(
            "xbr and OVS up with {} ports each in {:.1} s",
            ports.len(),
            started.elapsed().as_secs_f64()
        );
        Ok(Peers { xbr, ovs })
    }

    /// Both switches with three ports (p1-p3), OVS's bridge also
    /// speaking OpenFlow 1.4 and 1.5 (the harness's speaks 1.3 only).
    pub fn with_openflow15() -> Result<Self> {
        let peers = Peers::start(&[
            PortSpec::new("p1", 1, PortKind::Internal),
            PortSpec::new("p2", 2, PortKind::Internal),
            PortSpec::new("p3", 3, PortKind::Internal),
        ])?;
        let set = peers
            .ovs
            .vsctl(&[
                "set",
                "bridge",
                BRIDGE,
                "protocols=OpenFlow13,OpenFlow14,OpenFlow15",
            ])
            .map_err(ovs_err)?;
        if !set.success() {
            return Err(HarnessError::Unexpected(format!(
                "ovs-vsctl set protocols: {}",
                set.stderr
            )));
        }
        Ok(peers)
    }

    /// A scratch file path in xbr's private run directory.
    pub fn file(&self, name: &str) -> PathBuf {
        self.xbr.rundir().join(name)
    }

    /// Runs `ovs-ofctl -O OpenFlow13 args...` against both switches at once.
    pub fn both(&self, args: &[&str]) -> Result<[Out; 2]> {
        std::thread::scope(|s| {
            let o = s.spawn(|| self.ovs.ofctl_timeout(args, LOAD_TIMEOUT));
            let x = self.xbr.ofctl_timeout(args, LOAD_TIMEOUT)?;
            let o = o
                .join()
                .map_err(|_| HarnessError::Unexpected("ovs-ofctl thread panicked".into()))?
                .map_err(ovs_err)?;
            if o.status.is_none() || x.timed_out {
                return Err(HarnessError::Unexpected(format!(
                    "ovs-ofctl {args:?} timed out (xbr: {}, OVS: {})",
                    x.timed_out,
                    o.status.is_none()
                )));
            }
            Ok([
                Out {
                    ok: x.success(),
                    stdout: x.stdout,
                    stderr: x.stderr,
                },
                Out {
                    ok: o.success(),
                    stdout: o.stdout,
                    stderr: o.stderr,
                },
            ])
        })
    }

    /// Like [`Peers::both`]; both must succeed.
    pub fn both_ok(&self, args: &[&str]) -> Result<()> {
        let [x, o] = self.both(args)?;
        if x.ok && o.ok {
            return Ok(());
        }
        Err(HarnessError::Unexpected(format!(
            "ovs-ofctl {args:?}: xbr {} / OVS {}\n--- xbr stderr:\n{}\n--- OVS stderr:\n{}\n--- xbr log:\n{}",
            if x.ok { "ok" } else { "FAILED" },
            if o.ok { "ok" } else { "FAILED" },
            x.stderr,
            o.stderr,
            self.xbr.log()
        )))
    }

    /// Empties both switches' flow and group tables.
    pub fn clear(&self) -> Result<()> {
        self.both_ok(&["del-flows", BRIDGE])?;
        self.both_ok(&["del-groups", BRIDGE])
    }

    /// One dump command on both; fails unless the normalised outputs are
    /// equal as sorted line lists. Returns the number of lines.
    pub fn assert_same_dump(&self, args: &[&str], step: &str) -> Result<usize> {
        let [x, o] = self.both(args)?;
        if !(x.ok && o.ok) {
            return Err(HarnessError::Unexpected(format!(
                "{step}: ovs-ofctl {args:?} failed\n--- xbr:\n{}\n--- OVS:\n{}",
                x.stderr, o.stderr
            )));
        }
        let mut ours = normalise_dump(&x.stdout);
        let mut theirs = normalise_dump(&o.stdout);
        // Compared as sorted lists: OVS dumps a table in its classifier's
        // internal (hash) order, which nothing (the agent included) relies
        // on; xbr dumps by priority, then age.
        ours.sort();
        theirs.sort();
        if ours != theirs {
            let only = |a: &[String], b: &[String]| -> String {
                a.iter()
                    .filter(|l| b.binary_search(l).is_err())
                    .take(15)
                    .map(|l| format!("  {l}\n"))
                    .collect()
            };
            return Err(HarnessError::Unexpected(format!(
                "{step}: ovs-ofctl {args:?} differs ({} lines from xbr, {} from OVS)\n\
                 --- only in xbr (first 15):\n{}--- only in OVS (first 15):\n{}",
                ours.len(),
                theirs.len(),
                only(&ours, &theirs),
                only(&theirs, &ours)
            )));
        }
        Ok(ours.len())
    }

    /// Normalised `dump-flows` and `dump-groups` of both; fails with the
    /// differing lines unless they are equal as sorted line lists.
    pub fn assert_same_tables(&self, step: &str) -> Result<usize> {
        self.assert_same_dump(&["dump-groups", BRIDGE], step)?;
        self.assert_same_dump(&["dump-flows", BRIDGE], step)
    }
}

/// `ovs-ofctl`'s error report without what differs between two switches
/// (xids, the socket path).
pub fn error_lines(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .map(|l| {
            l.split_whitespace()
                .filter(|w| !w.starts_with("(xid="))
                .map(|w| if w.starts_with("unix:") { "SOCKET" } else { w })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// The agent-sized node of the issue: 100 pods, 10 namespaces, 20 remote
/// nodes, 50 Services.
pub const PODS: u32 = 100;
pub const SIZE_ARGS: [&str; 8] = [
    "--pods",
    "100",
    "--namespaces",
    "10",
    "--remote-nodes",
    "20",
    "--services",
    "50",
];

pub fn gen_flows_py() -> Result<PathBuf> {
    let path = xbr_tests::sdn_dir().join("gen_flows.py");
    if path.is_file() {
        Ok(path)
    } else {
        Err(HarnessError::Unexpected(format!(
            "{} not found: the comparison tests need the SDN flow generator; \
             point XBR_SDN_DIR at the directory holding gen_flows.py",
            path.display()
        )))
    }
}

/// Runs gen_flows.py with `args`, writing stdout to `out`.
pub fn generate(args: &[&str], out: &Path) -> Result<()> {
    let gen = gen_flows_py()?;
    let mut cmd = Command::new("python3");
    cmd.arg(&gen).args(args);
    let res = run_timeout(&mut cmd, LOAD_TIMEOUT)?.ok()?;
    std::fs::write(out, res.stdout)
        .map_err(|e| HarnessError::Unexpected(format!("writing {}: {e}", out.display())))
}
