//! Adding and removing ports of a running bridge.
//!
//! # Design
//!
//! [`LivePorts`] is the control side of `engine_ports.rs`: it checks and
//! opens a port on the caller's thread (XDP attach and AF_XDP bind on the
//! bridge's UMEM, or TAP create), lists it in [`DpShared`] for OpenFlow,
//! and hands it to the packet thread, which splices it in between rounds.
//! Removal asks the packet thread for the port back and drops it here, so
//! detaching XDP or deleting a TAP device never stalls forwarding on the
//! other ports. With several packet threads a new port goes to the one
//! serving the fewest, and every other one gets a stand-in for it; a
//! removal waits until every thread let go of it (no XDP cache entry of
//! any thread redirects to its device any more) before closing it. Every change is reported to OpenFlow connections as a
//! PORT_STATUS (ADD or DELETE). One mutex serialises add and remove, so
//! number allocation and the port list cannot race; the packet thread
//! never takes it.
//!
//! Port numbers follow ovs-vswitchd: a requested number is used if no
//! port has it; otherwise numbers are handed out by a cursor moving up
//! from 1 through the lower half of the range, skipping numbers in use and
//! preferring ones never used (or freed over an hour ago) to recently
//! freed ones, so old flows that still name a deleted port do not apply
//! at once to a new one.

use crate::config::{PortSpec, MAX_OFPORT};
use crate::control::{DpShared, PortMeta};
use crate::engine::PortOp;
use crate::ports::{self, Port, PortError};
use crate::xsk::Umem;
use crossbeam::channel::Sender;
use ofproto::wire::port_status::reason;
use ofproto::Bridge;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use thiserror::Error;

/// How long a removal waits for the packet thread to give a port back.
const REMOVE_TIMEOUT: Duration = Duration::from_secs(10);
/// Automatically assigned numbers stay below this, leaving the upper half
/// to explicit requests (as OVS does).
const AUTO_LIMIT: u32 = 32768;
/// The bridge's own internal port (OVS's `LOCAL`), requested only for
/// the interface named like the bridge.
pub const OFPP_LOCAL: u32 = flowtable::action::port::LOCAL;
/// A freed number is reused before others only after this long.
const REUSE_AFTER: Duration = Duration::from_secs(3600);

#[derive(Debug, Error)]
pub enum LiveError {
    #[error("port '{0}' already exists on this bridge")]
    Exists(String),
    #[error("no port '{0}' on this bridge")]
    NoSuchPort(String),
    #[error("ofport {0} is outside 1-{MAX_OFPORT}")]
    BadOfport(u32),
    #[error("no free ofport left")]
    Exhausted,
    #[error(transparent)]
    Port(#[from] PortError),
    #[error("the packet thread has stopped")]
    Stopped,
}

impl LiveError {
    /// Errors caused by the request rather than by the system.
    pub fn is_config_error(&self) -> bool {
        match self {
            LiveError::Exists(_) | LiveError::NoSuchPort(_) | LiveError::BadOfport(_) => true,
            LiveError::Port(e) => e.is_config_error(),
            LiveError::Exhausted | LiveError::Stopped => false,
        }
    }
}

/// OpenFlow port numbers of one bridge: in use, and when each freed one
/// was released.
struct Ofports {
    /// Last automatically assigned number.
    cursor: u32,
    in_use: HashMap<u32, ()>,
    freed: HashMap<u32, Instant>,
    /// The packet thread serving each port, by number.
    owner: HashMap<u32, Served>,
    /// Numbers the ports had before a restart (from the state file), by
    /// name: a port added without a request gets its old number back,
    /// and automatic numbers skip them (see [`LivePorts::prefer_ofports`]).
    preferred: HashMap<String, u32>,
}

impl Ofports {
    fn new(in_use: impl IntoIterator<Item = u32>) -> Self {
        Ofports {
            cursor: 0,
            in_use: in_use.into_iter().map(|p| (p, ())).collect(),
            freed: HashMap::new(),
            owner: HashMap::new(),
            preferred: HashMap::new(),
        }
    }

    fn assign(&mut self, requested: Option<u32>, now: Instant) -> Result<u32, LiveError> {
        if let Some(r) = requested {
            if r == 0 || (r > MAX_OFPORT && r != OFPP_LOCAL) {
                return Err(LiveError::BadOfport(r));
            }
            if !self.in_use.contains_key(&r) {
                return Ok(self.take(r));
            }
        }
        let start = self.cursor;
        let mut lru: Option<(u32, Instant)> = None;
        loop {
            self.cursor += 1;
            if self.cursor >= AUTO_LIMIT {
                self.cursor = 1;
            }
            let n = self.cursor;
            let kept = self.preferred.values().any(|&p| p == n);
            if !self.in_use.contains_key(&n) && !kept {
                match self.freed.get(&n) {
                    None => return Ok(self.take(n)),
                    Some(&at) if now.duration_since(at) >= REUSE_AFTER => return Ok(self.take(n)),
                    Some(&at) => {
                        if lru.is_none_or(|(_, t)| at < t) {
                            lru = Some((n, at));
                        }
                    }
                }
            }
            if n == start || (start == 0 && n == AUTO_LIMIT - 1) {
                return match lru {
                    Some((n, _)) => Ok(self.take(n)),
                    None => Err(LiveError::Exhausted),
                };
            }
        }
    }

    fn take(&mut self, n: u32) -> u32 {
        self.freed.remove(&n);
        self.in_use.insert(n, ());
        n
    }

    fn release(&mut self, n: u32, now: Instant) {
        if self.in_use.remove(&n).is_some() {
            self.freed.insert(n, now);
        }
    }
}

/// Which packet thread serves a port, and how many receive queues it
/// polls there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Served {
    pub ofport: u32,
    pub thread: usize,
    pub queues: usize,
}

/// The control side of a running bridge's port list; see the module
/// documentation.
pub struct LivePorts {
    umem: Arc<Umem>,
    /// The bridge's XDP flow cache maps, which new system ports share.
    cache: Option<Arc<crate::fastpath::cache::CacheMaps>>,
    /// Each packet thread's port changes, by thread.
    ops: Vec<Sender<PortOp<Port>>>,
    shared: Arc<DpShared>,
    bridge: Arc<Bridge>,
    /// The bridge's transmit threads, which new ports' kicks go to.
    kicks: Option<Arc<crate::kicker::KickPool>>,
    /// Serialises changes; see the module documentation.
    state: Mutex<Ofports>,
    /// The packet threads, by number (where they run).
    threads: Vec<Arc<crate::cpus::ThreadId>>,
    /// Where `pmd-stats-clear` left each thread's counters.
    pmd_baselines: Mutex<crate::pmd_stats::Baselines>,
    /// What the bridge's state file did (`xbr stats`), once set.
    state_status: std::sync::OnceLock<Arc<crate::state::StateStatus>>,
}

impl LivePorts {
    /// The datapath state the bridge's ports live in.
    pub fn datapath(&self) -> &Arc<DpShared> {
        &self.shared
    }

    /// `ops`: each packet thread's port changes; `owners`: which thread
    /// serves each of the bridge's ports; `threads`: the packet threads.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        umem: Arc<Umem>,
        cache: Option<Arc<crate::fastpath::cache::CacheMaps>>,
        ops: Vec<Sender<PortOp<Port>>>,
        owners: Vec<Served>,
        threads: Vec<Arc<crate::cpus::ThreadId>>,
        shared: Arc<DpShared>,
        bridge: Arc<Bridge>,
        kicks: Option<Arc<crate::kicker::KickPool>>,
    ) -> Self {
        let in_use = shared.ports().iter().map(|p| p.ofport).collect::<Vec<_>>();
        let mut numbers = Ofports::new(in_use);
        numbers
            .owner
            .extend(owners.into_iter().map(|s| (s.ofport, s)));
        LivePorts {
            umem,
            cache,
            ops,
            shared,
            bridge,
            kicks,
            state: Mutex::new(numbers),
            threads,
            pmd_baselines: Mutex::default(),
            state_status: std::sync::OnceLock::new(),
        }
    }

    /// Records where `xbr stats` finds the state file's status.
    pub fn set_state_status(&self, status: Arc<crate::state::StateStatus>) {
        let _ = self.state_status.set(status);
    }

    pub fn state_status(&self) -> Option<&Arc<crate::state::StateStatus>> {
        self.state_status.get()
    }

    /// Port numbers to give back to ports of these names when they are
    /// added without a number of their own (as ovs-vswitchd reuses an
    /// interface's `ofport` from the database): the restored state's.
    /// Until then automatic numbers avoid them.
    pub fn prefer_ofports(&self, ports: impl IntoIterator<Item = (String, u32)>) {
        let mut numbers = self.state.lock();
        let in_use: Vec<String> = self.shared.ports().iter().map(|p| p.name.clone()).collect();
        numbers.preferred.extend(
            ports
                .into_iter()
                .filter(|(name, n)| !in_use.contains(name) && *n != 0 && *n <= MAX_OFPORT),
        );
    }

    /// The packet thread serving the fewest ports (the first of those).
    fn least_busy(numbers: &Ofports, threads: usize) -> usize {
        let mut count = vec![0usize; threads];
        for served in numbers.owner.values() {
            if let Some(c) = count.get_mut(served.thread) {
                *c += 1;
            }
        }
        (0..threads).min_by_key(|&t| count[t]).unwrap_or(0)
    }

    /// The bridge's XDP flow cache maps, if the cache is on.
    pub fn xdp_cache(&self) -> Option<&crate::fastpath::cache::CacheMaps> {
        self.cache.as_deref()
    }

    /// The transmit threads' counters (none without `--pmd-cores`).
    pub fn kicker_stats(&self) -> Vec<crate::kicker::KickerStats> {
        self.kicks.as_ref().map(|k| k.stats()).unwrap_or_default()
    }

    /// The ports each packet thread serves, by thread, in number order.
    pub fn ports_by_thread(&self) -> Vec<Vec<u32>> {
        let mut threads = vec![Vec::new(); self.ops.len()];
        for (&port, served) in &self.state.lock().owner {
            if let Some(list) = threads.get_mut(served.thread) {
                list.push(port);
            }
        }
        for list in &mut threads {
            list.sort_unstable();
        }
        threads
    }

    /// `ovs-appctl dpif-netdev/pmd-rxq-show` for this bridge: each packet
    /// thread's CPU and the receive queues it polls, as OVS lists a PMD
    /// thread's. xbr does not measure per-queue processing time, so the
    /// usage is `NOT AVAIL`, as OVS says before it has measured any.
    /// Only the thread on CPU `core`, if given.
    pub fn pmd_rxq_text(&self, core: Option<usize>) -> String {
        let names: HashMap<u32, String> = self
            .shared
            .ports()
            .iter()
            .map(|p| (p.ofport, p.name.clone()))
            .collect();
        let served: Vec<Served> = self.state.lock().owner.values().copied().collect();
        rxq_text(&self.thread_cpus(), &served, &names, core)
    }

    /// `ovs-appctl dpif-netdev/pmd-stats-show` for this bridge: each
    /// packet thread's counters (only the one on CPU `core`, if given)
    /// since the last `pmd-stats-clear` (see `pmd_stats`).
    pub fn pmd_stats_text(&self, core: Option<usize>) -> String {
        let snapshots = self.shared.engine_snapshots();
        let cpus = self.thread_cpus();
        let shown = |t: usize| on_core(&cpus, t, core);
        crate::pmd_stats::text(&snapshots, &self.pmd_baselines.lock(), shown, |t| {
            pmd_header(cpus.get(t).copied().flatten())
        })
    }

    /// `ovs-appctl dpif-netdev/pmd-perf-show` for this bridge: each
    /// packet thread's time and packets since start (see
    /// `pmd_stats::perf_text`), only the one on CPU `core` if given.
    pub fn pmd_perf_text(&self, core: Option<usize>) -> String {
        let snapshots = self.shared.engine_snapshots();
        let cpus = self.thread_cpus();
        let shown = |t: usize| on_core(&cpus, t, core);
        crate::pmd_stats::perf_text(&snapshots, shown, |t| {
            pmd_header(cpus.get(t).copied().flatten())
        })
    }

    /// `ovs-appctl dpif-netdev/pmd-stats-clear`: counts start again, for
    /// the thread on CPU `core` only if given.
    pub fn pmd_stats_clear(&self, core: Option<usize>) {
        let snapshots = self.shared.engine_snapshots();
        let cpus = self.thread_cpus();
        let mut baselines = self.pmd_baselines.lock();
        for (t, s) in snapshots.iter().enumerate() {
            if on_core(&cpus, t, core) {
                baselines.clear_thread(t, s);
            }
        }
    }

    fn thread_cpus(&self) -> Vec<Option<(usize, bool)>> {
        self.threads
            .iter()
            .map(|t| crate::cpus::thread_cpu(t))
            .collect()
    }

    /// The bridge's ports now.
    pub fn ports(&self) -> Vec<Arc<PortMeta>> {
        self.shared.ports()
    }

    /// Tells the controllers that `meta` changed on its own (its carrier):
    /// PORT_STATUS MODIFY, to every connection.
    pub fn notify_port_modified(&self, meta: &PortMeta) {
        self.bridge
            .notifier()
            .port_status(reason::MODIFY, meta.info());
    }

    /// Opens `spec` as a new port (its `ofport` is a request, as
    /// `ofport_request` is in OVS) and starts forwarding on it.
    pub fn add(&self, spec: &PortSpec) -> Result<Arc<PortMeta>, LiveError> {
        let mut numbers = self.state.lock();
        let existing = self.shared.ports();
        if existing.iter().any(|p| p.name == spec.name) {
            return Err(LiveError::Exists(spec.name.clone()));
        }
        ports::check_spec(spec)?;
        let now = Instant::now();
        let requested = spec
            .ofport
            .or_else(|| numbers.preferred.get(&spec.name).copied());
        let ofport = numbers.assign(requested, now)?;
        numbers.preferred.remove(&spec.name);
        let spec = PortSpec {
            ofport: Some(ofport),
            ..spec.clone()
        };
        let (meta, mut io) = match ports::open_one(&spec, &self.umem, self.cache.as_deref()) {
            Ok(p) => p,
            Err(e) => {
                numbers.release(ofport, now);
                return Err(e.into());
            }
        };
        if let Some(k) = &self.kicks {
            io.offload_kicks(k);
        }
        self.shared.insert_port(meta.clone());
        let owner = Self::least_busy(&numbers, self.ops.len());
        let queues = io.rx_queues();
        // Stand-ins first: a thread may output to the port as soon as its
        // owner serves it.
        for (t, ops) in self.ops.iter().enumerate() {
            if t != owner {
                let _ = ops.send(PortOp::AddRemote {
                    meta: meta.clone(),
                    stand_in: io.stand_in(),
                    owner,
                });
            }
        }
        if self.ops[owner]
            .send(PortOp::Add {
                meta: meta.clone(),
                io,
            })
            .is_err()
        {
            // The port came back inside the error and drops here.
            self.shared.remove_port(ofport);
            numbers.release(ofport, now);
            return Err(LiveError::Stopped);
        }
        numbers.owner.insert(
            ofport,
            Served {
                ofport,
                thread: owner,
                queues,
            },
        );
        self.shared.wake();
        tracing::info!(port = %spec.name, ofport, kind = ?spec.port_type, "port added");
        self.bridge.notifier().port_status(reason::ADD, meta.info());
        Ok(meta)
    }

    /// Lets the XDP flow cache redirect to port `spec.name` (a vxlan
    /// port: to its uplink) or stops it, following `spec.xdp_redirect`, in
    /// place: the port keeps its number and its traffic (OVS applies a
    /// changed `options` column to the open netdev). Without the cache
    /// there is nothing to change.
    pub fn set_xdp_redirect(&self, spec: &PortSpec) -> Result<(), LiveError> {
        let _serialised = self.state.lock();
        let Some(meta) = self
            .shared
            .ports()
            .into_iter()
            .find(|p| p.name == spec.name)
        else {
            return Err(LiveError::NoSuchPort(spec.name.clone()));
        };
        let Some(cache) = &self.cache else {
            return Ok(());
        };
        let dev = match (spec.port_type, &spec.vxlan) {
            (crate::config::PortType::Vxlan, Some(v)) => v.uplink.as_str(),
            (crate::config::PortType::Vxlan, None) => return Ok(()),
            _ => spec.name.as_str(),
        };
        let link = crate::netdev::link_by_name(dev).map_err(|source| PortError::Netdev {
            name: dev.to_string(),
            source,
        })?;
        let mode = spec.xdp_redirect;
        if let Some(r) = &meta.redirect {
            cache
                .add_dev(link.ifindex)
                .map_err(|source| PortError::XdpCache {
                    name: dev.to_string(),
                    source,
                })?;
            ports::change_redirect(r, dev, link.ifindex, mode, cache.generation());
        }
        self.shared.wake();
        tracing::info!(port = %spec.name, ofport = meta.ofport, xdp_redirect = mode.as_str(),
            "XDP redirect target changed in place");
        Ok(())
    }

    /// Stops forwarding on port `name` and closes it.
    pub fn remove(&self, name: &str) -> Result<(), LiveError> {
        let mut numbers = self.state.lock();
        let Some(meta) = self.shared.ports().into_iter().find(|p| p.name == name) else {
            return Err(LiveError::NoSuchPort(name.to_string()));
        };
        let owner = numbers.owner.get(&meta.ofport).map_or(0, |s| s.thread);
        let mut answers = Vec::with_capacity(self.ops.len());
        for ops in &self.ops {
            let (done, back) = crossbeam::channel::bounded(1);
            ops.send(PortOp::Remove {
                ofport: meta.ofport,
                done,
            })
            .map_err(|_| LiveError::Stopped)?;
            answers.push(back);
        }
        self.shared.wake();
        let mut io = None;
        for (t, back) in answers.into_iter().enumerate() {
            let answer = back
                .recv_timeout(REMOVE_TIMEOUT)
                .map_err(|_| LiveError::Stopped)?;
            // The others' are stand-ins, dropped here.
            if t == owner {
                io = answer;
            }
        }
        // Closes the socket, detaches XDP or deletes the TAP device, here
        // and not on a packet thread; only the frames go back to the
        // owner's pool.
        if let Some(io) = io {
            let frames = io.close_detached();
            if !frames.is_empty() && self.ops[owner].send(PortOp::Reclaim(frames)).is_ok() {
                self.shared.wake_engine(owner);
            }
        }
        self.shared.remove_port(meta.ofport);
        numbers.owner.remove(&meta.ofport);
        numbers.release(meta.ofport, Instant::now());
        tracing::info!(port = %name, ofport = meta.ofport, "port removed");
        self.bridge
            .notifier()
            .port_status(reason::DELETE, meta.info());
        Ok(())
    }
}

/// Whether thread `t` is to be shown for `-pmd core` (all are without).
fn on_core(cpus: &[Option<(usize, bool)>], t: usize, core: Option<usize>) -> bool {
    core.is_none() || cpus.get(t).copied().flatten().map(|c| c.0) == core
}

/// A packet thread's heading in `pmd-rxq-show` and `pmd-stats-show`, as
/// OVS heads a PMD thread's: where it runs, `(not pinned)` if it may move.
fn pmd_header(cpu: Option<(usize, bool)>) -> String {
    let (core, numa, note) = match cpu {
        Some((c, pinned)) => (
            c.to_string(),
            crate::cpus::numa_node(c),
            if pinned { "" } else { " (not pinned)" },
        ),
        None => ("?".into(), 0, ""),
    };
    format!("pmd thread numa_id {numa} core_id {core}{note}:")
}

/// The text of [`LivePorts::pmd_rxq_text`]: `cpus` by thread (the CPU
/// and whether it is pinned there), the ports they serve, their names;
/// only the thread on CPU `core` if given.
fn rxq_text(
    cpus: &[Option<(usize, bool)>],
    served: &[Served],
    names: &HashMap<u32, String>,
    core: Option<usize>,
) -> String {
    let mut out = String::from("Displaying last 60 seconds pmd usage %\n");
    for (t, cpu) in cpus.iter().enumerate() {
        if !on_core(cpus, t, core) {
            continue;
        }
        out.push_str(&pmd_header(*cpu));
        out.push_str("\n  isolated : false\n");
        let mut rows: Vec<(&str, usize)> = served
            .iter()
            .filter(|s| s.thread == t)
            .flat_map(|s| {
                let name = names.get(&s.ofport).map_or("?", String::as_str);
                (0..s.queues).map(move |q| (name, q))
            })
            .collect();
        rows.sort_unstable();
        for (name, q) in &rows {
            out.push_str(&format!(
                "  port: {name:<16}  queue-id: {q:>2} (enabled)   pmd usage: NOT AVAIL\n"
            ));
        }
        if !rows.is_empty() {
            out.push_str("  overhead: NOT AVAIL\n");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rxq_text_lists_each_threads_queues_as_ovs_does() {
        let served = [
            Served {
                ofport: 1,
                thread: 0,
                queues: 2,
            },
            Served {
                ofport: 2,
                thread: 1,
                queues: 1,
            },
            Served {
                ofport: 3,
                thread: 0,
                queues: 1,
            },
        ];
        let names: HashMap<u32, String> = [(1, "eth0"), (2, "tun0"), (3, "veth3")]
            .into_iter()
            .map(|(p, n)| (p, n.to_string()))
            .collect();
        let cpus = [Some((1, true)), Some((0, false)), None];
        let text = rxq_text(&cpus, &served, &names, None);
        assert_eq!(
            text,
            "Displaying last 60 seconds pmd usage %\n\
             pmd thread numa_id 0 core_id 1:\n  isolated : false\n\
             \x20 port: eth0              queue-id:  0 (enabled)   pmd usage: NOT AVAIL\n\
             \x20 port: eth0              queue-id:  1 (enabled)   pmd usage: NOT AVAIL\n\
             \x20 port: veth3             queue-id:  0 (enabled)   pmd usage: NOT AVAIL\n\
             \x20 overhead: NOT AVAIL\n\
             pmd thread numa_id 0 core_id 0 (not pinned):\n  isolated : false\n\
             \x20 port: tun0              queue-id:  0 (enabled)   pmd usage: NOT AVAIL\n\
             \x20 overhead: NOT AVAIL\n\
             pmd thread numa_id 0 core_id ?:\n  isolated : false\n"
        );
        assert_eq!(
            rxq_text(&cpus, &served, &names, Some(0)),
            "Displaying last 60 seconds pmd usage %\n\
             pmd thread numa_id 0 core_id 0 (not pinned):\n  isolated : false\n\
             \x20 port: tun0              queue-id:  0 (enabled)   pmd usage: NOT AVAIL\n\
             \x20 overhead: NOT AVAIL\n"
        );
    }

    #[test]
    fn requested_numbers_win_when_free() {
        let now = Instant::now();
        let mut n = Ofports::new([1, 2]);
        assert_eq!(n.assign(Some(5), now).unwrap(), 5);
        // Taken: the request falls back to automatic assignment.
        assert_eq!(n.assign(Some(5), now).unwrap(), 3);
        assert!(matches!(
            n.assign(Some(0), now),
            Err(LiveError::BadOfport(0))
        ));
        assert!(matches!(
            n.assign(Some(MAX_OFPORT + 1), now),
            Err(LiveError::BadOfport(_))
        ));
    }

    #[test]
    fn automatic_numbers_skip_the_ones_kept_for_restored_ports() {
        let now = Instant::now();
        let mut n = Ofports::new([1, 2]);
        n.preferred.insert("veth4".into(), 3);
        assert_eq!(n.assign(None, now).unwrap(), 4);
        // The port it is kept for asks for it (add() does, by name).
        assert_eq!(n.assign(Some(3), now).unwrap(), 3);
    }

    #[test]
    fn automatic_numbers_move_up_and_avoid_recent_ones() {
        let now = Instant::now();
        let mut n = Ofports::new([1, 2]);
        assert_eq!(n.assign(None, now).unwrap(), 3);
        assert_eq!(n.assign(None, now).unwrap(), 4);
        n.release(3, now);
        // 3 was freed just now: the cursor goes on to 5, as OVS does.
        assert_eq!(n.assign(None, now).unwrap(), 5);
        // But a request for it is honoured.
        assert_eq!(n.assign(Some(3), now).unwrap(), 3);
    }

    #[test]
    fn wraps_to_the_least_recently_freed() {
        let now = Instant::now();
        let mut n = Ofports::new(1..AUTO_LIMIT);
        assert!(matches!(n.assign(None, now), Err(LiveError::Exhausted)));
        n.release(7, now);
        n.release(9, now + Duration::from_secs(1));
        assert_eq!(n.assign(None, now + Duration::from_secs(2)).unwrap(), 7);
        assert_eq!(n.assign(None, now + Duration::from_secs(2)).unwrap(), 9);
        // An hour later a freed number is as good as a new one.
        n.release(20, now);
        n.release(10, now + Duration::from_secs(10));
        let later = now + REUSE_AFTER + Duration::from_secs(5);
        let got = n.assign(None, later).unwrap();
        assert!(got == 10 || got == 20, "{got}");
    }
}
