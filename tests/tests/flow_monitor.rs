//! `ovs-ofctl monitor` against Open vSwitch 3.1: flow monitors (`watch:`)
//! in OpenFlow 1.3 (the ONF extension) and 1.5 print the same initial
//! flows and updates for both switches, and a monitor that sets a
//! miss_send_len (`monitor br0 65534`) gets the same asynchronous
//! messages (PORT_STATUS, FLOW_REMOVED). A monitor's own changes, sent
//! through it (`ovs-appctl ofctl/send`), are abbreviated as OVS
//! abbreviates them, and a monitor that stops reading is paused and
//! resumed as OVS does it, without holding up anyone else.

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
    fn start(switch: &'static str, mut cmd: Command, keep: fn(&str) -> bool) -> Result<Monitor> {
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
            .filter(|l| l.starts_with("OFP") || l.starts_with("ONF"))
            .count()
    }

    /// Waits until `n` messages were printed.
    fn wait_for(&self, n: usize, what: &str) -> Result<()> {
        self.wait_until(|m| m.replies() >= n, &format!("{what}: {n} messages"))
    }

    /// Waits until `done` holds.
    fn wait_until(&self, done: impl Fn(&Monitor) -> bool, what: &str) -> Result<()> {
        let deadline = Instant::now() + BOUND;
        while !done(self) {
            if Instant::now() > deadline {
                return Err(HarnessError::Unexpected(format!(
                    "{what}: {}: not after {BOUND:?}, {} messages:\n{}",
                    self.switch,
                    self.replies(),
                    self.lines.lock().unwrap().join("\n")
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Whether a line starts with `prefix`.
    fn printed(&self, prefix: &str) -> bool {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.starts_with(prefix))
    }

    /// Whether a message named `name` (`OFPT_ERROR`, ...) with `xid` was
    /// printed. The lines after it (its body, an error's echo) are in the
    /// pipe by then and read by `stop`.
    fn answered(&self, name: &str, xid: u32) -> bool {
        let xid = format!("(xid={xid:#x})");
        self.lines
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.starts_with(name) && l.contains(&xid))
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

/// `ovs-ofctl -O VERSION monitor br0 ARGS...` against xbr and against
/// OVS, keeping the lines `keep` selects.
fn monitors(
    peers: &Peers,
    version: &str,
    extra: &[&str],
    keep: fn(&str) -> bool,
) -> Result<[Monitor; 2]> {
    let args = [&["-O", version, "monitor", BRIDGE][..], extra].concat();
    let mut x = Command::new("ovs-ofctl");
    x.args(&args).env("OVS_RUNDIR", peers.xbr.rundir());
    Ok([
        Monitor::start("xbr", x, keep)?,
        Monitor::start("OVS", peers.ovs.ofctl_command(&args), keep)?,
    ])
}

fn flow_updates(line: &str) -> bool {
    line.contains("FLOW_MONITOR") || line.starts_with(" event=")
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
        let all = monitors(&peers, version, &["watch:"], flow_updates)?;
        let some = monitors(
            &peers,
            version,
            &["watch:table=1,ip,!initial,!actions"],
            flow_updates,
        )?;
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

/// A flow-mod as `ovs-ofctl -O VERSION` would send it, in hex.
fn flow_mod_hex(version: u8, xid: u32, line: &str, command: flowtable::FlowModCommand) -> String {
    hex(&flow_mod(version, xid, line, command))
}

fn flow_mod(version: u8, xid: u32, line: &str, command: flowtable::FlowModCommand) -> Vec<u8> {
    let fm = flowtable::text::parse_flow_command(line, command, None).expect("valid flow");
    let mut m = ofproto::wire::Message::FlowMod(fm).emit(xid);
    // 1.5's FLOW_MOD is 1.3's with `importance` (0 here) in its padding.
    m[0] = version;
    m
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A bundle control (OPEN 0, COMMIT 4) or add message of bundle 1, as
/// 1.3 frames it (ONF experimenter 2300/2301) or 1.4 on (types 33/34).
fn bundle_hex(version: u8, xid: u32, control: Option<u16>, inner: &[u8]) -> String {
    let mut body = 1u32.to_be_bytes().to_vec();
    match control {
        Some(ty) => body.extend_from_slice(&ty.to_be_bytes()),
        None => body.extend_from_slice(&[0, 0]),
    }
    // Flags: atomic.
    body.extend_from_slice(&1u16.to_be_bytes());
    body.extend_from_slice(inner);
    if version == 4 {
        let exp_type: u32 = if control.is_some() { 2300 } else { 2301 };
        let mut onf = 0x4f4e_4600u32.to_be_bytes().to_vec();
        onf.extend_from_slice(&exp_type.to_be_bytes());
        onf.extend(body);
        message_hex(version, 4, xid, &onf)
    } else {
        message_hex(version, if control.is_some() { 33 } else { 34 }, xid, &body)
    }
}

#[test]
fn a_monitors_own_changes_are_abbreviated_like_ovs() -> Result<()> {
    use flowtable::FlowModCommand as C;
    let peers = Peers::with_openflow15()?;
    for (version, v) in [("OpenFlow13", 4u8), ("OpenFlow15", 6)] {
        // `!own`: the monitor's own changes abbreviated (with ovs-ofctl's
        // default, ONLY_OWN, flow_monitors_report_like_ovs's monitors see
        // their own in full).
        let own = monitors(&peers, version, &["watch:table=1,!own"], flow_updates)?;
        for m in &own {
            m.wait_for(1, "initial reply")?;
        }
        let mine = [
            flow_mod_hex(v, 0x51, "table=1,priority=4,ip,actions=drop", C::Add),
            flow_mod_hex(v, 0x52, "table=1,priority=5,arp,actions=drop", C::Add),
            // Both flows at once: still one abbreviation.
            flow_mod_hex(v, 0x53, "table=1", C::Delete),
            // Not watched.
            flow_mod_hex(v, 0x54, "table=2,priority=1,actions=drop", C::Add),
            // A bundle: one abbreviation, with the xid of the first
            // change the monitor selects.
            bundle_hex(v, 0x60, Some(0), &[]),
            bundle_hex(
                v,
                0x61,
                None,
                &flow_mod(v, 0x61, "table=2,priority=2,actions=drop", C::Add),
            ),
            bundle_hex(
                v,
                0x62,
                None,
                &flow_mod(v, 0x62, "table=1,priority=7,ip,actions=drop", C::Add),
            ),
            bundle_hex(
                v,
                0x63,
                None,
                &flow_mod(v, 0x63, "table=1,priority=8,arp,actions=drop", C::Add),
            ),
            bundle_hex(v, 0x64, Some(4), &[]),
        ];
        for (m, rundir) in own
            .iter()
            .zip([peers.xbr.rundir().to_path_buf(), peers.ovs.rundir()])
        {
            for hex in &mine {
                send_through(m, &rundir, hex)?;
            }
            m.wait_for(5, version)?;
        }
        // Someone else's change, in full.
        peers.both_ok(&["add-flow", BRIDGE, "table=1,priority=6,tcp,actions=drop"])?;
        // (One flow: the order of several in one reply is OVS's
        // classifier's.)
        peers.both_ok(&["del-flows", BRIDGE, "table=1,tcp"])?;
        for m in &own {
            m.wait_for(7, version)?;
        }
        let [x, o] = own;
        let (x, o) = (x.stop(), o.stop());
        if x != o {
            return Err(HarnessError::Unexpected(format!(
                "{version}: the monitors printed different things\n--- xbr:\n{}\n--- OVS:\n{}",
                x.join("\n"),
                o.join("\n")
            )));
        }
        let abbreviated = x.iter().filter(|l| l.contains("event=ABBREV")).count();
        assert_eq!(abbreviated, 4, "{version}: {x:#?}");
        assert!(x.iter().any(|l| l.contains("event=ABBREV xid=0x62")));
        peers.both_ok(&["del-flows", BRIDGE, "table=1"])?;
        peers.both_ok(&["del-flows", BRIDGE, "table=2"])?;
    }
    Ok(())
}

#[test]
fn a_suspended_monitor_is_paused_and_holds_nobody_up_like_ovs() -> Result<()> {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    const FLOWS: usize = 20_000;
    let peers = Peers::start(&[])?;
    let keep = |l: &str| flow_updates(l) || l.contains("PAUSED") || l.contains("RESUMED");
    let pair = monitors(&peers, "OpenFlow13", &["watch:"], keep)?;
    for m in &pair {
        m.wait_for(1, "initial reply")?;
    }
    // The monitors stop reading (^Z); the agent loads its flows.
    let pid = |m: &Monitor| Pid::from_raw(i32::try_from(m.child.id()).unwrap());
    for m in &pair {
        kill(pid(m), Signal::SIGSTOP)
            .map_err(|e| HarnessError::Unexpected(format!("SIGSTOP: {e}")))?;
    }
    let bundle = peers.file("suspended.bundle");
    let lines: String = (0..FLOWS)
        .map(|i| {
            format!(
                "flow add table=1,priority=5,ip,nw_dst=10.1.{}.{},actions=output:2\n",
                i / 256,
                i % 256
            )
        })
        .collect();
    std::fs::write(&bundle, lines).map_err(|e| HarnessError::Unexpected(e.to_string()))?;
    let bundle_arg = bundle.to_string_lossy().into_owned();
    // Bounded (LOAD_TIMEOUT): before, xbr's commit never answered.
    peers.both_ok(&["bundle", BRIDGE, &bundle_arg])?;
    peers.both_ok(&["add-flow", BRIDGE, "table=2,priority=1,actions=drop"])?;
    for m in &pair {
        kill(pid(m), Signal::SIGCONT)
            .map_err(|e| HarnessError::Unexpected(format!("SIGCONT: {e}")))?;
    }
    // Each was paused, then told of every flow once, then resumed.
    for m in &pair {
        m.wait_until(
            |m| m.printed("ONFT_FLOW_MONITOR_RESUMED"),
            "RESUMED after the backlog",
        )?;
    }
    let [x, o] = pair;
    let (x, o) = (x.stop(), o.stop());
    let summary = |lines: &[String]| {
        let mut added: Vec<&String> = lines.iter().filter(|l| l.contains("event=ADDED")).collect();
        added.sort();
        let paused = lines
            .iter()
            .filter(|l| l.starts_with("ONFT_FLOW_MONITOR_PAUSED"))
            .count();
        let resumed = lines
            .iter()
            .filter(|l| l.starts_with("ONFT_FLOW_MONITOR_RESUMED"))
            .count();
        (
            added.into_iter().cloned().collect::<Vec<_>>(),
            paused,
            resumed,
        )
    };
    let (xs, os) = (summary(&x), summary(&o));
    assert_eq!(xs.0.len(), FLOWS + 1, "xbr: every flow once");
    assert_eq!((xs.1, xs.2), (1, 1), "xbr paused and resumed once");
    if xs != os {
        return Err(HarnessError::Unexpected(format!(
            "different updates: xbr {} added, paused {} resumed {}; OVS {} added, paused {} resumed {}",
            xs.0.len(),
            xs.1,
            xs.2,
            os.0.len(),
            os.1,
            os.2
        )));
    }
    std::fs::remove_file(&bundle).map_err(|e| HarnessError::Unexpected(e.to_string()))?;
    Ok(())
}

/// The first line of each asynchronous message (reason and port, or the
/// removed flow), not a port's properties.
fn async_lines(line: &str) -> bool {
    line.starts_with("OFPT_")
        || line.starts_with("OFPST_FLOW_MONITOR")
        || line.starts_with("ONFST_FLOW_MONITOR")
}

/// The line without what differs between two switches for the same
/// event: the port's address, the flow's duration.
fn comparable(line: &str) -> String {
    let line = match line.find(" addr:") {
        Some(i) => &line[..i],
        None => line,
    };
    line.split(' ')
        .filter(|w| !w.starts_with("duration"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn a_monitor_with_a_miss_send_len_gets_async_messages_like_ovs() -> Result<()> {
    let peers = Peers::with_openflow15()?;
    for version in ["OpenFlow13", "OpenFlow15"] {
        // The flow monitor of an unused table is there to say when the
        // monitor is ready: its reply follows the SET_CONFIG of `65534`
        // on the same connection.
        // Packet-ins in OpenFlow's own format (OVS's default for
        // `monitor` is its NXT_PACKET_IN2, which xbr does not speak).
        let pair = monitors(
            &peers,
            version,
            &["65534", "watch:table=200", "--packet-in-format=standard"],
            async_lines,
        )?;
        for m in &pair {
            m.wait_for(1, "the monitor's set-up")?;
        }
        peers.both_ok(&["mod-port", BRIDGE, "p2", "down"])?;
        peers.both_ok(&["mod-port", BRIDGE, "p2", "up"])?;
        peers.both_ok(&[
            "add-flow",
            BRIDGE,
            "table=3,priority=5,send_flow_rem,in_port=2,actions=drop",
        ])?;
        peers.both_ok(&["del-flows", BRIDGE, "table=3"])?;
        // A packet-out's output to the controller: reason packet_out from
        // 1.4 on, action before.
        peers.both_ok(&[
            "packet-out",
            BRIDGE,
            "in_port=1,packet=ffffffffffff02000000000108004500001c00000000401166cf\
             0a0000010a00000204d2005000080000,actions=controller",
        ])?;
        for m in &pair {
            m.wait_until(|m| m.printed("OFPT_FLOW_REMOVED"), version)?;
            m.wait_until(|m| m.printed("OFPT_PACKET_IN"), version)?;
        }
        // Port status is compared as "some, for that port": OVS also
        // reports the TAP device's link going down and up, as its netdev
        // layer notices, once or twice per mod-port. xbr reports each
        // PORT_MOD once, to every connection but the one that sent it
        // before 1.5 (as OVS).
        let [x, o] = pair;
        let (x, o) = (x.stop(), o.stop());
        let port_status = |lines: &[String]| {
            lines
                .iter()
                .filter(|l| l.starts_with("OFPT_PORT_STATUS"))
                .map(|l| comparable(l))
                .collect::<Vec<_>>()
        };
        let (xp, op) = (port_status(&x), port_status(&o));
        assert_eq!(xp.len(), 2, "{version}: {xp:?}");
        assert!(
            !op.is_empty() && op.iter().all(|l| *l == xp[0]),
            "{version}: {xp:?} {op:?}"
        );
        let others = |lines: &[String]| {
            lines
                .iter()
                .filter(|l| !l.starts_with("OFPT_PORT_STATUS"))
                .map(|l| comparable(l))
                .collect::<Vec<_>>()
        };
        let (x, o) = (others(&x), others(&o));
        if x != o {
            return Err(HarnessError::Unexpected(format!(
                "{version}: the monitors printed different things\n--- xbr:\n{}\n--- OVS:\n{}",
                x.join("\n"),
                o.join("\n")
            )));
        }
        let via = if version == "OpenFlow13" {
            "(via action)"
        } else {
            "(via packet_out)"
        };
        assert!(
            x.iter()
                .any(|l| l.starts_with("OFPT_PACKET_IN") && l.contains(via)),
            "{version}: {x:?}"
        );
    }
    Ok(())
}

/// `ovs-appctl ofctl/send HEX` through a running monitor: the switch's
/// answer is printed by the monitor.
fn send_through(m: &Monitor, rundir: &std::path::Path, hex: &str) -> Result<()> {
    let ctl = rundir.join(format!("ovs-ofctl.{}.ctl", m.child.id()));
    let out = Command::new("ovs-appctl")
        .arg("-t")
        .arg(&ctl)
        .args(["ofctl/send", hex])
        .output()
        .map_err(|e| HarnessError::Unexpected(format!("ovs-appctl: {e}")))?;
    if !out.status.success() {
        return Err(HarnessError::Unexpected(format!(
            "ovs-appctl ofctl/send {hex}: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(())
}

fn message_hex(version: u8, ty: u8, xid: u32, body: &[u8]) -> String {
    let len = u16::try_from(8 + body.len()).unwrap();
    let mut m = vec![version, ty];
    m.extend_from_slice(&len.to_be_bytes());
    m.extend_from_slice(&xid.to_be_bytes());
    m.extend_from_slice(body);
    m.iter().map(|b| format!("{b:02x}")).collect()
}

/// One OpenFlow 1.4 async config property.
fn async_prop(ty: u16, mask: u32) -> Vec<u8> {
    let mut p = ty.to_be_bytes().to_vec();
    p.extend_from_slice(&8u16.to_be_bytes());
    p.extend_from_slice(&mask.to_be_bytes());
    p
}

#[test]
fn async_configuration_in_later_versions_like_ovs() -> Result<()> {
    const GET_ASYNC_REQUEST: u8 = 26;
    const SET_ASYNC: u8 = 28;
    let peers = Peers::with_openflow15()?;
    // Everything the monitor prints but OVS's log lines.
    let keep = |l: &str| !l.contains('|');
    for (version, v) in [("OpenFlow14", 5u8), ("OpenFlow15", 6)] {
        let pair = monitors(&peers, version, &["watch:table=200"], keep)?;
        for m in &pair {
            m.wait_for(1, "the monitor's set-up")?;
        }
        let mut set = async_prop(1, 0x1);
        set.extend(async_prop(4, 0x4));
        set.extend(async_prop(9, 0x18));
        // Each step with the answer it gets: a reply or an error with the
        // request's xid, none for the SET_ASYNC that succeeds (the next
        // GET_ASYNC's reply, on the same connection, comes after it).
        // Each answer is awaited before the next step, so the monitor
        // prints them in the same order for both switches (its "send:"
        // lines come from the sending side). The answer is awaited by
        // name and xid, not by counting printed messages: ovs-ofctl
        // prints the request it sends, and a SET_ASYNC it cannot decode
        // is printed without its "send:" prefix, so it looks like one
        // more message received.
        let steps = [
            (
                GET_ASYNC_REQUEST,
                0x71,
                Vec::new(),
                Some("OFPT_GET_ASYNC_REPLY"),
            ),
            (SET_ASYNC, 0x72, set, None),
            (
                GET_ASYNC_REQUEST,
                0x73,
                Vec::new(),
                Some("OFPT_GET_ASYNC_REPLY"),
            ),
            // Reasons the version does not define; an unknown property.
            (SET_ASYNC, 0x74, async_prop(1, 0x40), Some("OFPT_ERROR")),
            (SET_ASYNC, 0x75, async_prop(12, 0), Some("OFPT_ERROR")),
        ];
        for (m, rundir) in pair
            .iter()
            .zip([peers.xbr.rundir().to_path_buf(), peers.ovs.rundir()])
        {
            for (ty, xid, body, answer) in &steps {
                send_through(m, &rundir, &message_hex(v, *ty, *xid, body))?;
                if let Some(answer) = answer {
                    m.wait_until(
                        |m| m.answered(answer, *xid),
                        &format!("{version}: {answer} for xid {xid:#x}"),
                    )?;
                }
            }
        }
        let [x, o] = pair;
        let (x, o) = (x.stop(), o.stop());
        // An error is followed by the request it echoes (both switches
        // echo all of it); compared up to there, the echo being the
        // request just sent.
        let comparable = |lines: &[String]| -> Vec<String> {
            let mut out = Vec::new();
            let mut in_echo = false;
            for l in lines {
                if l.starts_with("OFPT_ERROR") {
                    in_echo = true;
                    out.push(l.clone());
                } else if l.starts_with("OFPT_GET_ASYNC_REPLY") || l.starts_with("OFPST_") {
                    in_echo = false;
                    out.push(l.clone());
                } else if !in_echo {
                    out.push(l.clone());
                }
            }
            out
        };
        if comparable(&x) != comparable(&o) {
            return Err(HarnessError::Unexpected(format!(
                "{version}: different answers\n--- xbr:\n{}\n--- OVS:\n{}",
                x.join("\n"),
                o.join("\n")
            )));
        }
    }
    Ok(())
}
