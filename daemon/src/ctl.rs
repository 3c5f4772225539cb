//! The control socket: `<rundir>/xbr.<bridge>.ctl`, for commands that are
//! not OpenFlow (`xbr trace`, `xbr conntrack dump|flush|stats`), like
//! `ovs-appctl`'s unixctl socket.
//!
//! # Protocol
//!
//! One request per connection. The client sends one line (at most
//! [`MAX_REQUEST`] bytes, UTF-8, ended by `\n` or by closing its write
//! side): a command word and its arguments, separated by whitespace. The
//! server answers with a status line, `ok` or `error`, then free text, and
//! closes the connection, so the reply ends at EOF. A new command is one
//! more arm in [`dispatch`]; `help` lists them.
//!
//! # Design
//!
//! One thread accepts and serves connections one at a time: commands are
//! short (a trace is one pipeline walk) and rare, and a client that stalls
//! is cut off by [`IO_TIMEOUT`]. The socket file is created mode 0600 (only
//! root may trace), replaced if stale, and removed on shutdown. Commands
//! read the authoritative flow tables through [`ofproto::Bridge`] and never
//! touch the packet thread: a trace builds its own replica of the pipeline
//! under the tables' lock and walks it after releasing the lock.

use crate::accept_loop::AcceptLoop;
use dataplane::conntrack::Conntrack;
use dataplane::live::LivePorts;
use flowtable::text::{self, PortNames};
use ofproto::Bridge;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;

/// Longest request line accepted.
pub const MAX_REQUEST: usize = 64 * 1024;
/// Bound on reading a request and writing a reply.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// Packet length assumed by `trace` (only counters use it, and a trace
/// counts nothing).
const TRACE_PACKET_LEN: u32 = 64;

#[derive(Debug, Error)]
pub enum CtlError {
    #[error("control socket {path}: {source}")]
    Socket {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("control socket {0} is served by another live process")]
    InUse(PathBuf),
    #[error("cannot start the control thread: {0}")]
    Thread(std::io::Error),
    #[error("cannot connect to {path} (is xbr running for this bridge?): {source}")]
    Connect {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("talking to {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} sent a reply without a status line")]
    BadReply { path: PathBuf },
}

/// The control socket's path for a bridge.
pub fn socket_path(rundir: &Path, bridge: &str) -> PathBuf {
    rundir.join(format!("xbr.{bridge}.ctl"))
}

/// A running control-socket server.
pub struct CtlServer {
    path: PathBuf,
    served: AcceptLoop,
    /// The bridge's place among those the metrics endpoint reads, for as
    /// long as its control socket is served.
    _metrics: crate::metrics::bridges::Registration,
}

impl CtlServer {
    /// Binds `path` and serves `bridge` (named `name` in replies).
    pub fn start(
        path: &Path,
        name: &str,
        bridge: Arc<Bridge>,
        conntrack: Arc<Conntrack>,
        live: Arc<LivePorts>,
    ) -> Result<CtlServer, CtlError> {
        let sock_err = |source| CtlError::Socket {
            path: path.to_path_buf(),
            source,
        };
        if path.exists() {
            if UnixStream::connect(path).is_ok() {
                return Err(CtlError::InUse(path.to_path_buf()));
            }
            std::fs::remove_file(path).map_err(sock_err)?;
        }
        let listener = UnixListener::bind(path).map_err(sock_err)?;
        if let Err(e) = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)) {
            let _ = std::fs::remove_file(path);
            return Err(sock_err(e));
        }
        let name = name.to_string();
        let metrics = crate::metrics::bridges::register(crate::metrics::bridges::BridgeView {
            name: name.clone(),
            bridge: bridge.clone(),
            conntrack: conntrack.clone(),
            live: live.clone(),
        });
        let served = AcceptLoop::spawn(listener, "xbr-ctl", "control", move |stream| {
            handle(stream, &name, &bridge, &conntrack, &live)
        })
        .map_err(|e| {
            let _ = std::fs::remove_file(path);
            CtlError::Thread(e)
        })?;
        Ok(CtlServer {
            path: path.to_path_buf(),
            served,
            _metrics: metrics,
        })
    }

    /// Stops the thread and removes the socket file.
    pub fn shutdown(self) {
        self.served.stop();
        let _ = std::fs::remove_file(&self.path);
    }
}

fn handle(
    stream: UnixStream,
    name: &str,
    bridge: &Bridge,
    conntrack: &Conntrack,
    live: &LivePorts,
) -> std::io::Result<()> {
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut line = String::new();
    let mut reader = BufReader::new((&stream).take(MAX_REQUEST as u64 + 1));
    reader.read_line(&mut line)?;
    let reply = if line.len() > MAX_REQUEST {
        Err(format!("request longer than {MAX_REQUEST} bytes"))
    } else {
        dispatch(line.trim(), name, bridge, conntrack, live)
    };
    let mut w = &stream;
    match reply {
        Ok(text) => write!(w, "ok\n{text}")?,
        Err(text) => write!(w, "error\n{text}\n")?,
    }
    w.flush()
}

/// Runs one command line; `Ok` text or `Err` message.
pub fn dispatch(
    line: &str,
    name: &str,
    bridge: &Bridge,
    conntrack: &Conntrack,
    live: &LivePorts,
) -> Result<String, String> {
    let (command, args) = match line.split_once(char::is_whitespace) {
        Some((c, a)) => (c, a.trim()),
        None => (line, ""),
    };
    match command {
        "trace" => trace(args, name, bridge),
        "conntrack" => conntrack_cmd(args, conntrack),
        "port" => port_cmd(args, live),
        "capture" => dataplane::capture::command(args, live),
        "stats" if args.is_empty() => {
            let dp = live.datapath();
            let mut text = dataplane::stats::report(
                &dp.ports(),
                &live.ports_by_thread(),
                &dp.engine_snapshot(),
                &live.kicker_stats(),
                conntrack,
                bridge.limit_stats(),
            );
            let refused = dp.upcall_shares().refused();
            if !refused.is_empty() {
                text.push_str("upcall queue shares hit (frames to the controller refused):\n");
                for (port, n) in refused {
                    text.push_str(&format!("  port {port}: {n}\n"));
                }
            }
            if let Some(k) = live.xdp_cache().and_then(|m| m.kernel_new()) {
                let ports = dp.ports();
                let hits = k.port_shares().hits(ports.iter().map(|p| p.name.as_str()));
                if !hits.is_empty() {
                    text.push_str(
                        "kernel new-connection report shares hit \
                         (frames sent to the packet thread):\n",
                    );
                    for (port, s) in hits {
                        text.push_str(&format!(
                            "  {port}: held {} refused {}\n",
                            s.held, s.refused
                        ));
                    }
                }
            }
            if let Some(st) = live.state_status() {
                text.push_str(&st.text());
            }
            text.push_str(&dataplane::mirror::report(&dp.mirrors().snapshot()));
            if let Some(maps) = live.xdp_cache() {
                // Fail closed: frames of queues without a socket (while
                // this xbr starts, or any xbr is down: the counter is
                // pinned).
                text.push_str(&format!(
                    "fail-closed drops (no socket bound): {}\n",
                    maps.closed_drops()
                ));
                if let Some(p) = maps.pins() {
                    text.push_str(&p.report());
                }
            }
            Ok(text)
        }
        "stats" => Err(format!("stats: unexpected argument `{args}`")),
        "dpctl" => dpctl_cmd(args, live),
        "support" => crate::support::command(args, name, bridge, conntrack, live),
        "dpif" if args == "show" => {
            let dp = live.datapath();
            Ok(dpif_text(name, &dp.ports(), &dp.engine_snapshot()))
        }
        "dpif" => Err("dpif: show?".into()),
        "pmd" => pmd_cmd(args, live),
        "fdb" => match args {
            "show" => Ok(fdb_text(&live.datapath().fdb())),
            "flush" => {
                live.datapath().fdb_flush();
                Ok("table successfully flushed\n".into())
            }
            _ => Err("fdb: show or flush?".into()),
        },
        "log" if args.is_empty() => crate::logging::filter()
            .map(|f| format!("{f}\n"))
            .map_err(|e| e.to_string()),
        "log" => crate::logging::set_filter(args)
            .map(|f| format!("{f}\n"))
            .map_err(|e| e.to_string()),
        "help" => Ok(
            "commands:\n  trace [--ct-next STATE]... FLOW   trace a packet through the pipeline\n  \
                      conntrack dump|flush [--zone N]   list or remove tracked connections\n  \
                      conntrack stats   connection count, limit and event counters\n  \
                      conntrack summary [--zone N] [--verbose]   connections by protocol\n  \
                      conntrack count   connections in the table\n  \
                      conntrack limit [N]   the table's limit, changed to N\n  \
                      port add SPEC   add a port (NAME[=OFPORT][,type=...]) while running\n  \
                      port del NAME   remove a port while running\n  \
                      capture start PORT @NAME|stop MIRROR   a port's frames to an abstract datagram socket (xbr capture)\n  \
                      stats   port counters, drops by reason, caches, conntrack\n  \
                      dpctl dump-flows   the XDP flow cache's entries (the kernel's fast path)\n  \
                      dpctl del-flows   retire every XDP flow cache entry\n  \
                      fdb show|flush   NORMAL's learned stations, listed or forgotten\n  \
                      dpif show   cache hits and misses, and the ports with their types\n  \
                      pmd rxq [--core N]   the packet threads and the ports' queues each polls\n  \
                      pmd stats|stats-clear [--core N]   each packet thread's packets, cache hits, busy time\n  \
                      log [DIRECTIVES]   show or set the log filter (XBR_LOG syntax)\n  \
                      support dpctl-show [-s]|coverage|memory|upcall|pmd-perf [--core N]|tunnels|\
                      tunnel-ports|dump-flows|fdb-stats|ipf|qos PORT   what ovs-appctl's support commands show\n  help\n"
                .into(),
        ),
        "" => Err("empty request".into()),
        other => Err(format!("unknown command `{other}` (try `help`)")),
    }
}

/// `pmd rxq`, `pmd stats [--core N]`, `pmd stats-clear [--core N]`.
fn pmd_cmd(args: &str, live: &LivePorts) -> Result<String, String> {
    let words: Vec<&str> = args.split_whitespace().collect();
    let core = match words[..] {
        [_] => None,
        [_, "--core", n] => Some(n.parse().map_err(|_| format!("pmd: bad core `{n}`"))?),
        _ => return Err("pmd: rxq, stats or stats-clear, each with [--core N]?".into()),
    };
    match (words[0], core) {
        ("rxq", core) => Ok(live.pmd_rxq_text(core)),
        ("stats", core) => Ok(live.pmd_stats_text(core)),
        ("stats-clear", core) => {
            live.pmd_stats_clear(core);
            Ok(String::new())
        }
        _ => Err("pmd: rxq, stats or stats-clear, each with [--core N]?".into()),
    }
}

/// `dpctl dump-flows`, `dpctl del-flows`: the XDP flow cache's entries,
/// read from (or retired in) the kernel's map, as `ovs-appctl
/// dpctl/dump-flows|del-flows` do for OVS's datapath.
fn dpctl_cmd(args: &str, live: &LivePorts) -> Result<String, String> {
    let Some(maps) = live.xdp_cache() else {
        return match args {
            "dump-flows" | "del-flows" => Ok("XDP flow cache: off\n".into()),
            _ => Err(format!(
                "dpctl: unknown command `{args}` (dump-flows or del-flows)"
            )),
        };
    };
    match args {
        "dump-flows" => {
            let names = parking_lot::Mutex::new(std::collections::HashMap::new());
            let dev = |ifindex: u32| {
                names
                    .lock()
                    .entry(ifindex)
                    .or_insert_with(|| match dataplane::netdev::link_by_index(ifindex) {
                        Ok(l) => l.name,
                        Err(_) => format!("ifindex {ifindex}"),
                    })
                    .clone()
            };
            Ok(dataplane::fastpath::cache::dump::report(maps, &dev))
        }
        "del-flows" => {
            // The XDP programs ignore entries of an older generation from
            // now on; the packet thread's sweep deletes them and the next
            // miss of each flow installs it again.
            maps.generation().bump();
            Ok("every entry retired\n".into())
        }
        other => Err(format!(
            "dpctl: unknown command `{other}` (dump-flows or del-flows)"
        )),
    }
}

/// `trace FLOW`: the walk of the packet FLOW describes.
fn trace(args: &str, name: &str, bridge: &Bridge) -> Result<String, String> {
    // `--ct-next STATE` or `--ct-next=STATE` options first, then the flow.
    let mut ct_next = Vec::new();
    let mut flow = args.trim_start();
    while let Some(rest) = flow.strip_prefix("--ct-next") {
        let rest = rest.strip_prefix('=').unwrap_or(rest).trim_start();
        let (state, after) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        let state = flowtable::trace_recirc::parse_ct_next(state)
            .map_err(|e| format!("bad --ct-next: {e}"))?;
        ct_next.push(state);
        flow = after.trim_start();
    }
    if flow.is_empty() {
        return Err(
            "bad FLOW: trace needs a packet description, e.g. in_port=1,ip,nw_dst=10.0.0.1".into(),
        );
    }
    let ports: PortNames = bridge
        .datapath()
        .ports()
        .into_iter()
        .map(|p| (p.name, p.port_no))
        .collect();
    let m = text::parse_match_with(flow, Some(&ports)).map_err(|e| format!("bad FLOW: {e}"))?;
    let pipe = bridge.with_tables(|t| t.pipeline());
    let walk = flowtable::trace_recirc::trace_text_ct(&pipe, m.value(), TRACE_PACKET_LEN, &ct_next);
    let header = format!("bridge(\"{name}\")");
    Ok(format!(
        "Flow: {}\n\n{header}\n{}\n{walk}",
        text::format_match(&m, 0x8000),
        "-".repeat(header.len())
    ))
}

/// The bridge as `ovs-appctl dpif/show` lists it, after a first line
/// `hit:H missed:M` that the unixctl adapter sums over bridges: hits are
/// packets the caches answered (the XDP cache's, and the translation
/// cache's exact and megaflow hits, per pipeline pass), misses those
/// translated through the pipeline. Ports by name, each `NAME OFPORT/
/// OFPORT: (KIND)`: xbr's datapath numbers its ports as OpenFlow does.
pub fn dpif_text(
    bridge: &str,
    ports: &[std::sync::Arc<dataplane::control::PortMeta>],
    snap: &dataplane::control::EngineSnapshot,
) -> String {
    let (mut hit, mut missed) = (0, 0);
    if let Some(c) = &snap.flow_cache {
        hit += c.hits + c.megaflow_hits;
        missed += c.misses + c.uncacheable;
    }
    if let Some(x) = &snap.xdp_cache {
        hit += x.hit_packets;
    }
    let mut out = format!("hit:{hit} missed:{missed}\n  {bridge}:\n");
    let mut ports: Vec<_> = ports.iter().collect();
    ports.sort_by(|a, b| a.name.cmp(&b.name));
    for p in ports {
        let kind = if p.kind.is_empty() {
            "unknown"
        } else {
            &p.kind
        };
        // The XDP flow cache's view of the device, as a configuration
        // item after the type's (`ports::redirect`).
        let redirect = match p.redirect.as_ref().and_then(|r| r.report()) {
            Some(r) if kind.contains(':') => format!(", {r}"),
            Some(r) => format!(": {r}"),
            None => String::new(),
        };
        out.push_str(&format!(
            "    {} {}/{}: ({kind}{redirect})\n",
            p.name, p.ofport, p.ofport
        ));
    }
    out
}

/// NORMAL's stations as `ovs-appctl fdb/show` prints a bridge's (no
/// VLANs: NORMAL ignores them, as 0).
pub fn fdb_text(stations: &[dataplane::normal::Station]) -> String {
    let mut out = String::from(" port  VLAN  MAC                Age\n");
    for s in stations {
        let port = match s.port {
            flowtable::action::port::LOCAL => "LOCAL".to_string(),
            p => p.to_string(),
        };
        let m = s.mac.to_be_bytes();
        out.push_str(&format!(
            "{port:>5}  {:>4}  {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}  {:>3}\n",
            0, m[2], m[3], m[4], m[5], m[6], m[7], s.age
        ));
    }
    out
}

/// `conntrack dump|flush [--zone N]`: the connection table, one
/// connection per line as `ovs-appctl dpctl/dump-conntrack` prints it, or
/// emptied (all zones, or one); `conntrack stats`: its counters;
/// `conntrack summary [--zone N] [--verbose]`: connections by protocol
/// (and TCP state) as `dpctl/ct-stats-show` prints them; `conntrack
/// count`; `conntrack limit [N]`: the most connections it holds, changed
/// to N; `conntrack set-limits|get-limits|del-limits ARGS`: the zone
/// limits, with `ovs-appctl dpctl/ct-*-limits`'s arguments and output.
fn conntrack_cmd(args: &str, ct: &Conntrack) -> Result<String, String> {
    use dataplane::conntrack::zone_limits::{self, LimitsRequest};
    let mut words = args.split_whitespace();
    let verb = words.next();
    let limits = match (verb, words.clone().collect::<Vec<_>>().as_slice()) {
        (Some("set-limits"), rest) => Some(zone_limits::parse_set(rest)),
        (Some("get-limits"), []) => Some(Ok(LimitsRequest::Get(Vec::new()))),
        (Some("get-limits"), [z]) => Some(zone_limits::parse_zones(z).map(LimitsRequest::Get)),
        (Some("del-limits"), [z]) => Some(zone_limits::parse_zones(z).map(LimitsRequest::Del)),
        (Some(v @ ("get-limits" | "del-limits")), _) => {
            return Err(format!("conntrack {v}: expects one zone=N1[,N2]..."))
        }
        _ => None,
    };
    if let Some(req) = limits {
        // Counts include the connections the kernel created meanwhile.
        ct.kernel_drain();
        return Ok(ct.zone_limits.apply(&req?));
    }
    let (mut zone, mut verbose, mut value) = (None, false, None);
    while let Some(w) = words.next() {
        if w == "--verbose" {
            verbose = true;
            continue;
        }
        let Some(rest) = w.strip_prefix("--zone") else {
            if value.is_none() && !w.starts_with('-') {
                value = Some(w);
                continue;
            }
            return Err(format!("conntrack: unexpected argument `{w}`"));
        };
        let v = match rest {
            "" => words.next(),
            v => v.strip_prefix('='),
        };
        let v = v.ok_or("conntrack: --zone needs a number (0-65535)")?;
        zone = Some(
            v.parse::<u16>()
                .map_err(|_| format!("conntrack: bad zone `{v}` (0-65535)"))?,
        );
    }
    if let (Some(v), false) = (value, verb == Some("limit")) {
        return Err(format!("conntrack: unexpected argument `{v}`"));
    }
    if verbose && verb != Some("summary") {
        return Err("conntrack: --verbose is for summary".into());
    }
    if zone.is_some() && verb == Some("limit") {
        return Err("conntrack: the limit covers every zone (no --zone)".into());
    }
    match verb {
        Some("dump") => {
            let mut out = String::new();
            for e in ct.dump(zone, ct.now_ms()) {
                out.push_str(&dataplane::conntrack::format_entry(&e));
                out.push('\n');
            }
            Ok(out)
        }
        Some("flush") => {
            ct.flush(zone);
            Ok(String::new())
        }
        Some("stats") if zone.is_none() => Ok(ct.stats_text()),
        Some("stats") => Err("conntrack: stats covers every zone (no --zone)".into()),
        Some("summary") => Ok(ct.summary_text(zone, verbose)),
        Some("count") if zone.is_none() => {
            ct.kernel_drain();
            Ok(format!("{}\n", ct.len()))
        }
        Some("count") => Ok(format!("{}\n", ct.dump(zone, ct.now_ms()).len())),
        Some("limit") => {
            if let Some(v) = value {
                let n = v
                    .parse::<u32>()
                    .map_err(|_| format!("conntrack: bad limit `{v}` (0-4294967295)"))?;
                ct.set_limit(n as usize);
                tracing::info!(limit = n, "conntrack limit changed");
            }
            Ok(format!("{}\n", ct.limit()))
        }
        Some(other) => Err(format!(
            "conntrack: unknown command `{other}` (dump, flush, stats, summary, count, limit, \
             set-limits, get-limits or del-limits)"
        )),
        None => Err(
            "conntrack: dump, flush, stats, summary, count, limit, set-limits, get-limits \
             or del-limits?"
                .into(),
        ),
    }
}

/// `port add SPEC`, `port del NAME`: live port changes; `add` answers
/// the port number given.
fn port_cmd(args: &str, live: &LivePorts) -> Result<String, String> {
    let (verb, arg) = match args.split_once(char::is_whitespace) {
        Some((v, a)) => (v, a.trim()),
        None => (args, ""),
    };
    match (verb, arg) {
        ("add", "") => Err("port add: needs a port spec, NAME[=OFPORT][,type=...]".into()),
        ("add", spec) => {
            let spec: dataplane::config::PortSpec =
                spec.parse().map_err(|e| format!("port add: {e}"))?;
            let meta = live.add(&spec).map_err(|e| format!("port add: {e}"))?;
            Ok(format!("{}\n", meta.ofport))
        }
        ("del", "") => Err("port del: needs a port name".into()),
        ("del", name) => {
            live.remove(name).map_err(|e| format!("port del: {e}"))?;
            Ok(String::new())
        }
        _ => Err(format!(
            "port: unknown command `{args}` (add SPEC or del NAME)"
        )),
    }
}

/// A reply from the control socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub ok: bool,
    pub text: String,
}

/// Sends one request line to the control socket at `path`.
pub fn request(path: &Path, line: &str) -> Result<Reply, CtlError> {
    let io = |source| CtlError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut stream = UnixStream::connect(path).map_err(|source| CtlError::Connect {
        path: path.to_path_buf(),
        source,
    })?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(io)?;
    stream.set_write_timeout(Some(IO_TIMEOUT)).map_err(io)?;
    writeln!(stream, "{line}").map_err(io)?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).map_err(io)?;
    let (status, text) = reply.split_once('\n').unwrap_or((reply.as_str(), ""));
    match status {
        "ok" => Ok(Reply {
            ok: true,
            text: text.to_string(),
        }),
        "error" => Ok(Reply {
            ok: false,
            text: text.trim_end().to_string(),
        }),
        _ => Err(CtlError::BadReply {
            path: path.to_path_buf(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::fdb_text;
    use dataplane::normal::Station;

    #[test]
    fn dpif_show_lists_ports_by_name_with_their_kind_and_counts_cache_answers() {
        use dataplane::control::{EngineSnapshot, PortMeta};
        use std::sync::Arc;
        let ports =
            [
                Arc::new(PortMeta::new(2, "tun0".into(), [0; 6]).with_kind("tap")),
                Arc::new(PortMeta::new(1, "vxlan0".into(), [0; 6]).with_kind(
                    "vxlan: dst_port=4789, key=flow, local_ip=10.0.0.11, remote_ip=flow",
                )),
                Arc::new(PortMeta::new(3, "eth1".into(), [0; 6])),
            ];
        let snap = EngineSnapshot {
            flow_cache: Some(flowtable::cache::CacheStats {
                hits: 10,
                megaflow_hits: 5,
                megaflow_lookups: 6,
                misses: 3,
                uncacheable: 1,
                invalidations: 9,
            }),
            xdp_cache: Some(dataplane::fastpath::cache::XdpCacheStats {
                hit_packets: 100,
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            super::dpif_text("br0", &ports, &snap),
            "hit:115 missed:4\n  br0:\n    eth1 3/3: (unknown)\n    tun0 2/2: (tap)\n    \
             vxlan0 1/1: (vxlan: dst_port=4789, key=flow, local_ip=10.0.0.11, remote_ip=flow)\n"
        );
    }

    #[test]
    fn fdb_rows_are_laid_out_as_ovs_lays_them_out() {
        let stations = [
            Station {
                mac: 0x0a58_0a80_0002,
                port: 1,
                age: 7,
            },
            Station {
                mac: 0x5254_0000_00ff,
                port: flowtable::action::port::LOCAL,
                age: 123,
            },
        ];
        assert_eq!(
            fdb_text(&stations),
            " port  VLAN  MAC                Age\n    1     0  0a:58:0a:80:00:02    7\n\
             LOCAL     0  52:54:00:00:00:ff  123\n"
        );
    }
}
