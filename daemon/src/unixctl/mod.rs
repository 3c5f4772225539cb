//! OVS's unixctl socket, so the real `ovs-appctl` (and the scripts built
//! on it: must-gather, sosreport, runbooks) works against xbr:
//! `ovs-appctl ofproto/trace br0 FLOW`, `dpctl/dump-flows`,
//! `dpctl/dump-conntrack`, `vlog/set`, `exit`, ...
//!
//! # Protocol
//!
//! `ovs-appctl` finds ovs-vswitchd's pid in `<rundir>/ovs-vswitchd.pid`,
//! connects to `<rundir>/ovs-vswitchd.<pid>.ctl` and sends one JSON-RPC
//! 1.0 request, `{"method": "ofproto/trace", "params": ["br0", "..."],
//! "id": 0}`; the reply carries the text in `result`, or a message in
//! `error` (ovs-appctl prints it and exits 2). Several requests may come
//! on one connection, as concatenated JSON values.
//!
//! # Design
//!
//! An adapter in front of the bridges' own control sockets
//! (`crate::ctl`): each OVS command becomes the equivalent `xbr` control
//! request to the bridge(s) concerned, found as `xbr.<bridge>.ctl` in
//! the run directory, so a bridge the database creates later is served
//! with no registration, and the adapter holds no bridge state. One
//! thread serves connections one at a time, as `ctl` does. The pidfile
//! is written only if no other live process holds it (a real
//! ovs-vswitchd sharing the run directory keeps its own), and both files
//! are removed on shutdown if they are still xbr's.

mod support;

use crate::accept_loop::AcceptLoop;
use crate::ctl;
use serde_json::{json, Value};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

/// The commands served, as `list-commands` prints them.
const COMMANDS: &[(&str, &str)] = &[
    ("bond/list", ""),
    ("bond/show", "[port]"),
    ("bridge/dump-flows", "[--offload-stats] bridge"),
    ("cfm/show", "[interface]"),
    ("coverage/show", ""),
    ("dpctl/ct-del-limits", "[dp] zone=N1[,N2]..."),
    ("dpctl/ct-get-limits", "[dp] [zone=N1[,N2]...]"),
    ("dpctl/ct-get-maxconns", "[dp]"),
    ("dpctl/ct-get-nconns", "[dp]"),
    (
        "dpctl/ct-set-limits",
        "[dp] [default=L] [zone=N,limit=L]...",
    ),
    ("dpctl/ct-set-maxconns", "[dp] maxconns"),
    ("dpctl/ct-stats-show", "[dp] [zone=N] [verbose]"),
    ("dpctl/del-flows", "[dp]"),
    ("dpctl/dump-conntrack", "[dp] [zone=N]"),
    ("dpctl/dump-dps", ""),
    ("dpctl/dump-flows", "[dp]"),
    ("dpctl/flush-conntrack", "[dp] [zone=N]"),
    ("dpctl/ipf-get-status", "[dp]"),
    ("dpctl/show", "[-s] [dp]"),
    ("dpif-netdev/dpif-impl-get", ""),
    ("dpif-netdev/miniflow-parser-get", ""),
    (
        "dpif-netdev/pmd-perf-show",
        "[-nh] [-it iter-history-len] [-ms ms-history-len] [-pmd core] [dp]",
    ),
    ("dpif-netdev/pmd-rxq-show", "[-pmd core] [-secs secs] [dp]"),
    ("dpif-netdev/pmd-stats-clear", "[-pmd core] [dp]"),
    ("dpif-netdev/pmd-stats-show", "[-pmd core] [dp]"),
    ("dpif-netdev/subtable-lookup-prio-get", ""),
    ("dpif/show", ""),
    ("dpif/show-dp-features", "bridge"),
    ("exit", "[--cleanup]"),
    ("fdb/flush", "[bridge]"),
    ("fdb/show", "[bridge...]"),
    ("fdb/stats-show", "bridge"),
    ("lacp/show", "[port]"),
    ("lacp/show-stats", "[port]"),
    ("list-commands", ""),
    ("mdb/show", "bridge"),
    ("memory/show", ""),
    ("ofproto/list", ""),
    ("ofproto/list-tunnels", ""),
    ("ofproto/trace", "[bridge] flow [--ct-next flags]..."),
    ("ovs/route/show", ""),
    ("qos/show", "interface"),
    ("tnl/arp/show", ""),
    ("tnl/ports/show", "[-v]"),
    ("upcall/show", ""),
    ("version", ""),
    ("vlog/list", ""),
    ("vlog/reopen", ""),
    ("vlog/set", "spec..."),
];

/// OVS's one userspace datapath, as `dpctl/dump-dps` lists it: xbr's
/// bridges each have their own, and this name stands for all of them.
const DATAPATH: &str = "ovs-netdev";

/// The bridges with a live control socket in `rundir`, sorted (a socket
/// file a killed xbr left refuses connections).
fn bridges(rundir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(rundir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let bridge = name.strip_prefix("xbr.")?.strip_suffix(".ctl")?;
            let live = !bridge.is_empty() && UnixStream::connect(e.path()).is_ok();
            live.then(|| bridge.to_string())
        })
        .collect();
    names.sort();
    names
}

/// What one OVS command asks of the bridges' control sockets.
#[derive(Debug, PartialEq, Eq)]
pub enum Plan {
    /// Text to answer with, asking nobody.
    Text(String),
    /// Control requests, each (bridge, line); their answers are joined,
    /// each under a `bridge:` heading when there are several.
    Ask(Vec<(String, String)>),
    /// Control requests as for `Ask`; once all succeed, this text is the
    /// answer.
    AskThen(Vec<(String, String)>, String),
    /// `dpif/show` of these bridges: their `dpif show` replies, the
    /// first lines' hits and misses summed under one datapath heading
    /// (OVS runs every netdev bridge on one datapath).
    DpifShow(Vec<String>),
    /// `dpctl/show [-s]` of these bridges: their `support dpctl-show`
    /// replies under one datapath heading, the first lines' lookups and
    /// flows summed.
    DpctlShow(Vec<String>, bool),
    /// Control requests whose answers follow this text, joined with no
    /// `bridge:` headings.
    Joined(String, Vec<(String, String)>),
    /// Control requests, one per bridge, for a thing only one of them
    /// has: the first answer, else the first refusal that is not the
    /// `not_here` one, else `not_here`.
    AnyOf(Vec<(String, String)>, String),
    /// Stop xbr, then answer; `cleanup` (`exit --cleanup`, as OVS's
    /// removes its datapaths): remove the pinned XDP programs and flow
    /// caches too, instead of leaving them forwarding.
    Exit { cleanup: bool },
}

/// A `dp` argument names a bridge (OVS has one datapath for all of
/// them; xbr a cache per bridge).
/// The core number after ovs-appctl's `-pmd` option.
fn pmd_core(arg: Option<&String>) -> Result<usize, String> {
    let n = arg.ok_or("-pmd: expects a core number")?;
    n.parse().map_err(|_| format!("-pmd: bad core `{n}`"))
}

fn select<'a>(bridges: &'a [String], dp: Option<&str>) -> Result<Vec<&'a String>, String> {
    match dp {
        None => Ok(bridges.iter().collect()),
        Some(d) => {
            let d = d.split_once('@').map_or(d, |(_, name)| name);
            if d == DATAPATH {
                return Ok(bridges.iter().collect());
            }
            match bridges.iter().find(|b| *b == d) {
                Some(b) => Ok(vec![b]),
                None => Err(format!(
                    "{d}: no such bridge (bridges: {})",
                    bridges.join(" ")
                )),
            }
        }
    }
}

/// Turns one request into a plan.
pub fn plan(method: &str, params: &[String], bridges: &[String]) -> Result<Plan, String> {
    let ask_each = |targets: Vec<&String>, line: &str| {
        Plan::Ask(
            targets
                .into_iter()
                .map(|b| (b.clone(), line.to_string()))
                .collect(),
        )
    };
    let any_bridge = || {
        bridges
            .first()
            .cloned()
            .ok_or_else(|| "no bridge is running".to_string())
    };
    match method {
        "list-commands" => {
            let mut text = String::from("The available commands are:\n");
            for (name, args) in COMMANDS {
                text.push_str(&format!("  {name:<28}{args}\n"));
            }
            Ok(Plan::Text(text))
        }
        "version" => Ok(Plan::Text(format!(
            "ovs-vswitchd (xbr) {}\n",
            env!("CARGO_PKG_VERSION")
        ))),
        "exit" => match params {
            [] => Ok(Plan::Exit { cleanup: false }),
            [c] if c == "--cleanup" => Ok(Plan::Exit { cleanup: true }),
            _ => Err("exit: the only option is --cleanup".into()),
        },
        "ofproto/list" => Ok(Plan::Text(
            bridges.iter().map(|b| format!("{b}\n")).collect(),
        )),
        "ofproto/trace" => {
            let mut ct_next = Vec::new();
            let mut rest = Vec::new();
            let mut it = params.iter();
            while let Some(p) = it.next() {
                if p == "--ct-next" {
                    let state = it.next().ok_or("Missing argument for option --ct-next")?;
                    ct_next.push(state.replace(['|', ' '], ","));
                } else if let Some(state) = p.strip_prefix("--ct-next=") {
                    ct_next.push(state.replace(['|', ' '], ","));
                } else if p.starts_with('-') {
                    return Err(format!("{p}: unknown option"));
                } else {
                    rest.push(p.as_str());
                }
            }
            let (bridge, flow) = match rest.as_slice() {
                [flow] => {
                    if bridges.len() > 1 {
                        return Err(format!(
                            "several bridges run ({}): name one before the flow",
                            bridges.join(" ")
                        ));
                    }
                    (any_bridge()?, *flow)
                }
                [bridge, flow] => (select(bridges, Some(bridge))?[0].clone(), *flow),
                _ => return Err("ofproto/trace: expects [bridge] flow".into()),
            };
            let mut line = String::from("trace");
            for s in &ct_next {
                line.push_str(&format!(" --ct-next={s}"));
            }
            line.push(' ');
            line.push_str(flow);
            Ok(Plan::Ask(vec![(bridge, line)]))
        }
        "dpctl/dump-flows" | "dpctl/del-flows" => {
            let dp = params.iter().find(|p| !p.starts_with('-'));
            let line = match method {
                "dpctl/dump-flows" => "dpctl dump-flows",
                _ => "dpctl del-flows",
            };
            Ok(ask_each(select(bridges, dp.map(String::as_str))?, line))
        }
        "dpctl/show" => {
            let mut stats = false;
            let mut dp = None;
            for p in params {
                match p.as_str() {
                    "-s" | "--statistics" => stats = true,
                    p if p.starts_with('-') => return Err(format!("{p}: unknown option")),
                    p => dp = Some(p),
                }
            }
            let targets = select(bridges, dp)?;
            Ok(Plan::DpctlShow(
                targets.into_iter().cloned().collect(),
                stats,
            ))
        }
        "dpctl/ct-get-maxconns" | "dpctl/ct-get-nconns" => {
            let dp = params.iter().find(|p| !p.starts_with('-'));
            let line = if method == "dpctl/ct-get-maxconns" {
                "conntrack limit"
            } else {
                "conntrack count"
            };
            Ok(ask_each(select(bridges, dp.map(String::as_str))?, line))
        }
        "dpctl/ct-set-maxconns" => {
            let args: Vec<&String> = params.iter().filter(|p| !p.starts_with('-')).collect();
            let (dp, value) = match args.as_slice() {
                [value] => (None, value),
                [dp, value] => (Some(dp.as_str()), value),
                _ => return Err("maxconns missing or malformed".into()),
            };
            let n: u32 = value
                .parse()
                .map_err(|_| "maxconns missing or malformed".to_string())?;
            match ask_each(select(bridges, dp)?, &format!("conntrack limit {n}")) {
                Plan::Ask(requests) => Ok(Plan::AskThen(
                    requests,
                    "setting maxconns successful\n".into(),
                )),
                other => Ok(other),
            }
        }
        "dpctl/ct-set-limits" | "dpctl/ct-get-limits" | "dpctl/ct-del-limits" => {
            use dataplane::conntrack::zone_limits::{parse_set, parse_zones};
            // A first argument that names a datapath (or bridge) is one,
            // as OVS's `dp_arg_exists` decides.
            let (dp, args) = match params.split_first() {
                Some((d, rest)) if select(bridges, Some(d)).is_ok() => (Some(d.as_str()), rest),
                _ => (None, params),
            };
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let einval = |m: String| format!("ovs-vswitchd: {m} (Invalid argument)");
            let verb = &method["dpctl/ct-".len()..];
            match (verb, args.as_slice()) {
                ("set-limits", []) => return Err(einval("no limit given".into())),
                ("set-limits", a) => {
                    parse_set(a).map_err(einval)?;
                }
                ("get-limits", []) => {}
                ("get-limits" | "del-limits", [z]) => {
                    parse_zones(z).map_err(einval)?;
                }
                ("del-limits", []) => {
                    return Err(format!(
                        "\"{method}\" command requires at least 1 arguments"
                    ))
                }
                _ => return Err(format!("\"{method}\" command takes at most 2 arguments")),
            }
            let mut line = format!("conntrack {verb}");
            for a in &args {
                line.push(' ');
                line.push_str(a);
            }
            match ask_each(select(bridges, dp)?, &line) {
                // Set and delete answer nothing, however many bridges.
                Plan::Ask(requests) if verb != "get-limits" => {
                    Ok(Plan::AskThen(requests, String::new()))
                }
                other => Ok(other),
            }
        }
        "dpctl/ct-stats-show" => {
            let mut line = String::from("conntrack summary");
            let mut dp = None;
            for p in params {
                if p == "verbose" || p == "-m" || p == "--more" {
                    line.push_str(" --verbose");
                } else if let Some(z) = p.strip_prefix("zone=") {
                    let z: u16 = z.parse().map_err(|_| format!("{p}: invalid zone"))?;
                    line.push_str(&format!(" --zone {z}"));
                } else if !p.starts_with('-') {
                    dp = Some(p.as_str());
                }
            }
            Ok(ask_each(select(bridges, dp)?, &line))
        }
        "dpctl/dump-conntrack" | "dpctl/flush-conntrack" => {
            let mut zone = None;
            let mut dp = None;
            for p in params.iter().filter(|p| !p.starts_with('-')) {
                match p.strip_prefix("zone=") {
                    Some(z) => {
                        z.parse::<u16>().map_err(|_| format!("{p}: invalid zone"))?;
                        zone = Some(z);
                    }
                    None => dp = Some(p.as_str()),
                }
            }
            let verb = if method == "dpctl/dump-conntrack" {
                "dump"
            } else {
                "flush"
            };
            let line = match zone {
                Some(z) => format!("conntrack {verb} --zone {z}"),
                None => format!("conntrack {verb}"),
            };
            Ok(ask_each(select(bridges, dp)?, &line))
        }
        "fdb/show" | "fdb/flush" => {
            let line = if method == "fdb/show" {
                "fdb show"
            } else {
                "fdb flush"
            };
            if method == "fdb/flush" && params.len() > 1 {
                return Err("fdb/flush: expects [bridge]".into());
            }
            let mut targets = Vec::new();
            for p in params {
                targets.extend(select(bridges, Some(p))?);
            }
            if targets.is_empty() {
                targets = select(bridges, None)?;
            }
            let plan = ask_each(targets, line);
            // One reply however many bridges were flushed, as OVS.
            match plan {
                Plan::Ask(r) if method == "fdb/flush" => {
                    Ok(Plan::AskThen(r, "table successfully flushed\n".into()))
                }
                other => Ok(other),
            }
        }
        "dpif-netdev/pmd-rxq-show"
        | "dpif-netdev/pmd-stats-show"
        | "dpif-netdev/pmd-stats-clear" => {
            let what = match method {
                "dpif-netdev/pmd-rxq-show" => "rxq",
                "dpif-netdev/pmd-stats-show" => "stats",
                _ => "stats-clear",
            };
            let mut rest = params.iter();
            let (mut dp, mut core) = (None, None);
            while let Some(p) = rest.next() {
                match p.as_str() {
                    // OVS's measuring window for queue usage; xbr
                    // measures none.
                    "-secs" if what == "rxq" => {
                        rest.next().ok_or("-secs: expects a number of seconds")?;
                    }
                    "-pmd" => core = Some(pmd_core(rest.next())?),
                    p if p.starts_with('-') => return Err(format!("{p}: not supported here")),
                    p => dp = Some(p),
                }
            }
            let line = match core {
                Some(c) => format!("pmd {what} --core {c}"),
                None => format!("pmd {what}"),
            };
            Ok(ask_each(select(bridges, dp)?, &line))
        }
        "dpif/show" => {
            if bridges.is_empty() {
                return Err("no bridge is running".into());
            }
            Ok(Plan::DpifShow(bridges.to_vec()))
        }
        // The log is the process's: answered here, with or without a
        // bridge.
        "vlog/list" => crate::logging::vlog_list()
            .map(Plan::Text)
            .map_err(|e| e.to_string()),
        "vlog/set" => {
            if params.is_empty() {
                return Err("vlog/set: expects a spec (MODULE:DESTINATION:LEVEL)".into());
            }
            for spec in params {
                crate::logging::vlog_set(spec).map_err(|e| e.to_string())?;
            }
            Ok(Plan::Text(String::new()))
        }
        "vlog/reopen" => crate::logging::reopen()
            .map(|()| Plan::Text(String::new()))
            .map_err(|e| e.to_string()),
        _ => support::plan(method, params, bridges),
    }
}

/// Carries a plan out against the control sockets in `rundir`.
fn execute(rundir: &Path, plan: Plan) -> Result<String, String> {
    match plan {
        Plan::Text(t) => Ok(t),
        Plan::Exit { cleanup } => {
            // As SIGTERM: the bridges stop in order; their XDP programs
            // and caches stay pinned unless `--cleanup` (`dataplane::fastpath::pin`).
            if cleanup {
                dataplane::fastpath::pin::request_cleanup();
            }
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGTERM);
            Ok(String::new())
        }
        Plan::AskThen(requests, text) => execute(rundir, Plan::Ask(requests)).map(|_| text),
        Plan::DpctlShow(bridges, stats) => support::dpctl_show(rundir, &bridges, stats),
        Plan::Joined(mut text, requests) => {
            for (bridge, line) in requests {
                match ctl::request(&ctl::socket_path(rundir, &bridge), &line) {
                    Ok(r) if r.ok => text.push_str(&r.text),
                    Ok(r) => return Err(r.text.trim_end().to_string()),
                    Err(ctl::CtlError::Connect { .. }) => continue,
                    Err(e) => return Err(e.to_string()),
                }
            }
            Ok(text)
        }
        Plan::AnyOf(requests, not_here) => {
            let mut refused = None;
            for (bridge, line) in requests {
                match ctl::request(&ctl::socket_path(rundir, &bridge), &line) {
                    Ok(r) if r.ok => return Ok(r.text),
                    Ok(r) if r.text.trim_end() != not_here => {
                        refused.get_or_insert(r.text.trim_end().to_string());
                    }
                    Ok(_) | Err(ctl::CtlError::Connect { .. }) => {}
                    Err(e) => return Err(e.to_string()),
                }
            }
            Err(refused.unwrap_or(not_here))
        }
        Plan::DpifShow(bridges) => {
            let (mut hit, mut missed, mut blocks) = (0u64, 0u64, String::new());
            for bridge in bridges {
                let reply = match ctl::request(&ctl::socket_path(rundir, &bridge), "dpif show") {
                    Ok(r) if r.ok => r.text,
                    Ok(r) => return Err(r.text.trim_end().to_string()),
                    // A socket file a killed xbr left: no bridge behind it.
                    Err(ctl::CtlError::Connect { .. }) => continue,
                    Err(e) => return Err(e.to_string()),
                };
                let (first, rest) = reply.split_once('\n').unwrap_or((&reply, ""));
                for word in first.split_whitespace() {
                    match word.split_once(':') {
                        Some(("hit", n)) => hit += n.parse::<u64>().unwrap_or(0),
                        Some(("missed", n)) => missed += n.parse::<u64>().unwrap_or(0),
                        _ => {}
                    }
                }
                blocks.push_str(rest);
            }
            Ok(format!(
                "netdev@ovs-netdev: hit:{hit} missed:{missed}\n{blocks}"
            ))
        }
        Plan::Ask(requests) => {
            let headed = requests.len() > 1;
            let mut out = String::new();
            for (bridge, line) in requests {
                let reply = match ctl::request(&ctl::socket_path(rundir, &bridge), &line) {
                    Ok(r) => r,
                    // A socket file a killed xbr left: no bridge behind it.
                    Err(ctl::CtlError::Connect { .. }) if headed => continue,
                    Err(e) => return Err(e.to_string()),
                };
                if !reply.ok {
                    return Err(reply.text.trim_end().to_string());
                }
                if headed {
                    out.push_str(&format!("{bridge}:\n"));
                }
                out.push_str(&reply.text);
            }
            Ok(out)
        }
    }
}

/// Answers one JSON-RPC request.
fn answer(rundir: &Path, request: &Value) -> Value {
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    let method = request.get("method").and_then(Value::as_str);
    let params: Option<Vec<String>> = match request.get("params") {
        Some(Value::Array(a)) => a.iter().map(|p| p.as_str().map(str::to_string)).collect(),
        None => Some(Vec::new()),
        _ => None,
    };
    let result = match (method, params) {
        (Some(m), Some(p)) => plan(m, &p, &bridges(rundir)).and_then(|plan| execute(rundir, plan)),
        _ => Err("invalid request: needs a method and string params".to_string()),
    };
    match result {
        Ok(text) => json!({"id": id, "result": text, "error": null}),
        Err(e) => json!({"id": id, "result": null, "error": e}),
    }
}

fn serve_connection(rundir: &Path, stream: UnixStream) -> std::io::Result<()> {
    stream.set_read_timeout(Some(ctl::IO_TIMEOUT))?;
    stream.set_write_timeout(Some(ctl::IO_TIMEOUT))?;
    let mut writer = stream.try_clone()?;
    let requests = serde_json::Deserializer::from_reader(std::io::Read::take(
        &stream,
        ctl::MAX_REQUEST as u64 * 16,
    ))
    .into_iter::<Value>();
    for request in requests {
        let Ok(request) = request else {
            // Not JSON, cut short or timed out: nothing to answer.
            break;
        };
        let reply = answer(rundir, &request);
        writer.write_all(reply.to_string().as_bytes())?;
        writer.flush()?;
    }
    Ok(())
}

/// A running unixctl server.
pub struct UnixctlServer {
    socket: PathBuf,
    /// The pidfile and the open file holding its lock, if xbr took it.
    pidfile: Option<(PathBuf, std::fs::File)>,
    served: AcceptLoop,
}

/// A whole-file write lock, as OVS's daemons hold on their pidfile.
fn write_lock() -> libc::flock {
    libc::flock {
        l_type: libc::F_WRLCK as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: 0,
        l_len: 0,
        l_pid: 0,
    }
}

/// Takes `path` as this process's pidfile the way OVS's daemons do:
/// write-locked (fcntl) for as long as the process runs, holding its pid,
/// which is what `ovs-appctl` checks before it trusts the pid. `None` if
/// another live process holds the lock (a real ovs-vswitchd).
fn take_pidfile(path: &Path) -> std::io::Result<Option<std::fs::File>> {
    use nix::fcntl::{fcntl, FcntlArg};
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    match fcntl(&file, FcntlArg::F_SETLK(&write_lock())) {
        Ok(_) => {}
        Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EACCES) => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    file.set_len(0)?;
    file.write_all(format!("{}\n", std::process::id()).as_bytes())?;
    file.flush()?;
    Ok(Some(file))
}

impl UnixctlServer {
    /// Serves `<rundir>/ovs-vswitchd.<pid>.ctl` and takes the pidfile
    /// `ovs-appctl` reads, unless another live process holds it (then
    /// the socket is still served, for `ovs-appctl -t PATH`).
    pub fn start(rundir: &Path) -> std::io::Result<UnixctlServer> {
        let pid = std::process::id();
        let socket = rundir.join(format!("ovs-vswitchd.{pid}.ctl"));
        let _ = std::fs::remove_file(&socket);
        let listener = UnixListener::bind(&socket)?;
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))?;
        let path = rundir.join("ovs-vswitchd.pid");
        let pidfile = match take_pidfile(&path)? {
            Some(file) => Some((path, file)),
            None => {
                tracing::warn!(
                    pidfile = %path.display(),
                    "another live process holds the pidfile; ovs-appctl reaches xbr only \
                     with -t {}",
                    socket.display()
                );
                None
            }
        };
        let served = {
            let rundir = rundir.to_path_buf();
            AcceptLoop::spawn(listener, "xbr-unixctl", "unixctl", move |stream| {
                serve_connection(&rundir, stream)
            })?
        };
        tracing::info!(socket = %socket.display(), "ovs-appctl served");
        Ok(UnixctlServer {
            socket,
            pidfile,
            served,
        })
    }

    /// Stops serving and removes the socket and the pidfile xbr holds.
    pub fn shutdown(self) {
        self.served.stop();
        let _ = std::fs::remove_file(&self.socket);
        if let Some((path, file)) = self.pidfile {
            // Removed while still locked, so nobody takes a stale one.
            let _ = std::fs::remove_file(path);
            drop(file);
        }
    }
}

#[cfg(test)]
mod tests;
