//! Flow monitors (`ovs-ofctl monitor br0 watch:...`) against Open vSwitch
//! 3.1: the same monitors on both switches, in OpenFlow 1.3 (the ONF
//! extension) and 1.5, see the same changes, and `ovs-ofctl` prints the
//! same initial flows and updates for both.

mod peers;
use peers::{error_lines, Peers};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use xbr_tests::{HarnessError, Result, BRIDGE};

/// How long a monitor may take to print what it is owed.
const BOUND: Duration = Duration::from_secs(10);

/// One `ovs-ofctl monitor` against one switch, its output collected.
struct Monitor {
    switch: &'static str,
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    reader: Option<JoinHandle<()>>,
}

impl Monitor {
    /// `ovs-ofctl monitor` prints the reply to its request on stdout and
    /// what arrives later on stderr: both are read, in that order.
    fn start(switch: &'static str, mut cmd: Command) -> Result<Monitor> {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .map_err(|e| HarnessError::Unexpected(format!("ovs-ofctl monitor: {e}")))?;
        let (out, err) = (child.stdout.take(), child.stderr.take());
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let reader = std::thread::spawn(move || {
            let (Some(out), Some(err)) = (out, err) else {
                return;
            };
            let keep = |line: &str| line.contains("FLOW_MONITOR") || line.starts_with(" event=");
            let stderr_sink = sink.clone();
            let late = std::thread::spawn(move || {
                for line in BufReader::new(err).lines().map_while(std::io::Result::ok) {
                    if keep(&line) {
                        stderr_sink.lock().unwrap().push(line);
                    }
                }
            });
            for line in BufReader::new(out).lines().map_while(std::io::Result::ok) {
                if keep(&line) {
                    sink.lock().unwrap().push(line);
                }
            }
            let _ = late.join();
        });
        Ok(Monitor {
            switch,
            child,
            lines,
            reader: Some(reader),
        })
    }

    /// The messages printed so far (one header line each).
    fn replies(&self) -> usize {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains("FLOW_MONITOR reply"))
            .count()
    }

    /// Waits until `n` messages were printed.
    fn wait_for(&self, n: usize, what: &str) -> Result<()> {
        let deadline = Instant::now() + BOUND;
        while self.replies() < n {
            if Instant::now() > deadline {
                return Err(HarnessError::Unexpected(format!(
                    "{what}: {}: {} of {n} monitor messages after {BOUND:?}:\n{}",
                    self.switch,
                    self.replies(),
                    self.lines.lock().unwrap().join("\n")
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Stops it; what it printed, without xids.
    fn stop(mut self) -> Vec<String> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        let lines = self.lines.lock().unwrap().join("\n");
        error_lines(&lines)
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `ovs-ofctl -O VERSION monitor br0 WATCH` against xbr and against OVS.
fn monitors(peers: &Peers, version: &str, watch: &str) -> Result<[Monitor; 2]> {
    let args = ["-O", version, "monitor", BRIDGE, watch];
    let mut x = Command::new("ovs-ofctl");
    x.args(args).env("OVS_RUNDIR", peers.xbr.rundir());
    Ok([
        Monitor::start("xbr", x)?,
        Monitor::start("OVS", peers.ovs.ofctl_command(&args))?,
    ])
}

fn same(step: &str, [x, o]: [Monitor; 2]) -> Result<()> {
    let (x, o) = (x.stop(), o.stop());
    if x != o {
        return Err(HarnessError::Unexpected(format!(
            "{step}: the monitors printed different things\n--- xbr:\n{}\n--- OVS:\n{}",
            x.join("\n"),
            o.join("\n")
        )));
    }
    assert!(!x.is_empty(), "{step}: nothing printed");
    Ok(())
}

#[test]
fn flow_monitors_report_like_ovs() -> Result<()> {
    let peers = Peers::with_openflow15()?;
    peers.both_ok(&[
        "add-flow",
        BRIDGE,
        "table=0,priority=5,in_port=1,actions=output:2",
    ])?;
    peers.both_ok(&["add-flow", BRIDGE, "table=1,priority=3,ip,actions=output:1"])?;
    for version in ["OpenFlow13", "OpenFlow15"] {
        peers.both_ok(&["add-group", BRIDGE, "group_id=1,type=all,bucket=output:3"])?;
        // Everything; and only IP flows of table 1, no initial flows and
        // no actions.
        let all = monitors(&peers, version, "watch:")?;
        let some = monitors(&peers, version, "watch:table=1,ip,!initial,!actions")?;
        for m in all.iter().chain(&some) {
            m.wait_for(1, "initial reply")?;
        }
        let changes: [&[&str]; 8] = [
            &[
                "add-flow",
                BRIDGE,
                "table=1,priority=7,cookie=0x5,idle_timeout=30,ip,nw_dst=10.0.0.1,actions=output:3",
            ],
            // Replaces it: reported as added, its predecessor's removal not.
            &[
                "add-flow",
                BRIDGE,
                "table=1,priority=7,cookie=0x6,ip,nw_dst=10.0.0.1,actions=output:2",
            ],
            // The same actions: nothing to report.
            &[
                "mod-flows",
                BRIDGE,
                "table=1,ip,nw_dst=10.0.0.1,actions=output:2",
            ],
            &[
                "mod-flows",
                BRIDGE,
                "table=1,ip,nw_dst=10.0.0.1,actions=group:1",
            ],
            &["add-flow", BRIDGE, "table=2,priority=1,arp,actions=drop"],
            // Takes the flow using it along.
            &["del-groups", BRIDGE, "group_id=1"],
            &["del-flows", BRIDGE, "table=2"],
            // Last: its expiry comes a second later.
            &[
                "add-flow",
                BRIDGE,
                "table=1,priority=9,hard_timeout=1,tcp,actions=drop",
            ],
        ];
        for args in changes {
            peers.both_ok(args)?;
        }
        // Initial, 6 changes and the hard timeout; the filtered monitor
        // sees 4 of the changes and the timeout.
        for m in &all {
            m.wait_for(9, version)?;
        }
        for m in &some {
            m.wait_for(6, version)?;
        }
        same(&format!("{version} watch:"), all)?;
        same(&format!("{version} watch:table=1,ip"), some)?;
        peers.both_ok(&["del-flows", BRIDGE, "table=1,ip,nw_dst=10.0.0.1"])?;
    }
    Ok(())
}
