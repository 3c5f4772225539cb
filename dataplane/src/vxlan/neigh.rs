//! Outer headers per remote VTEP, resolved from the kernel's route and
//! neighbour tables by a control thread and read by the packet thread.
//!
//! # Design
//!
//! [`NeighShared`] holds the current [`Snapshot`]: a map from remote tunnel
//! address to [`Entry`] (a ready encapsulation [`Template`], "resolving", or
//! "no route via the uplink"), behind a mutex, plus a generation counter.
//! A snapshot is immutable; the resolver publishes a new `Arc<Snapshot>`
//! and then bumps the generation (release). The packet thread's
//! [`NeighReader`] keeps its own `Arc` of the snapshot and compares the
//! generation (one relaxed-acquire load) per lookup; only when it changed
//! does it take the mutex, once, to clone the new `Arc`. So the per-packet
//! cost is an atomic load and a hash lookup: no lock, no allocation, no
//! reference-count traffic.
//!
//! A destination the snapshot does not know is sent to the resolver over a
//! bounded channel (`try_send`: never blocks, a full channel just drops the
//! request, the next packet asks again) and the packet is dropped and
//! counted. The resolver asks the kernel for the route (RTM_GETROUTE: the
//! route must leave through the uplink; its gateway, if any, is the next
//! hop) and for the next hop's neighbour entry (RTM_GETNEIGH dump of the
//! uplink). Without a usable entry it makes the kernel resolve one by
//! sending an empty UDP datagram to the destination (port 9, discard): the
//! kernel ARPs for the next hop exactly as it would for its own traffic.
//! Until the entry appears, the destination is `Resolving` and packets to
//! it are dropped: a packet is never sent to a MAC the kernel has not
//! confirmed. The resolver re-reads every wanted destination, and the
//! uplink's MTU, as soon as the kernel announces a link, IPv4 route or
//! neighbour change (a watcher thread listens on those rtnetlink groups),
//! and in any case every [`REFRESH`] (every [`RETRY`] while one is
//! unresolved); it probes `STALE` entries every [`REPROBE`] so the kernel
//! re-confirms them. Both threads stop when the reader is dropped (the
//! request channel disconnects).

use super::encap::Template;
use crate::netdev::{self, NetdevError};
use crossbeam::channel::{self, Receiver, Sender, TrySendError};
use netlink_packet_core::{NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST};
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::route::{RouteAddress, RouteAttribute, RouteMessage, RouteType};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::{Ipv4Addr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Re-read period of resolved destinations.
pub const REFRESH: Duration = Duration::from_secs(1);
/// Re-read period while a destination is unresolved.
pub const RETRY: Duration = Duration::from_millis(50);
/// Probe period of a destination still unresolved or `STALE`.
pub const REPROBE: Duration = Duration::from_secs(5);
/// Unresolved destinations the packet thread may queue at once.
const REQUEST_QUEUE: usize = 256;
/// The discard port: a probe datagram is harmless wherever it lands.
const PROBE_PORT: u16 = 9;

/// What the packet thread knows about one remote VTEP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    Ready(Template),
    /// The kernel is resolving the next hop.
    Resolving,
    /// The route to it does not leave through the uplink (or there is none).
    NoRoute,
}

/// An immutable map of remote VTEP address to [`Entry`], with the
/// uplink's MTU when it was taken.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    entries: HashMap<u32, Entry>,
    /// 0: not known (the port keeps the MTU it started with).
    mtu: u32,
}

/// Shared between the resolver (writer) and the packet thread (reader).
#[derive(Debug, Default)]
pub struct NeighShared {
    generation: AtomicU64,
    snapshot: Mutex<Arc<Snapshot>>,
}

impl Snapshot {
    /// A snapshot of fixed entries (tests and benchmarks use static
    /// neighbours instead of a resolver).
    pub fn from_entries(entries: impl IntoIterator<Item = (u32, Entry)>) -> Snapshot {
        Snapshot {
            entries: entries.into_iter().collect(),
            mtu: 0,
        }
    }
}

impl NeighShared {
    /// Replaces the snapshot; readers pick it up at their next lookup.
    pub fn publish(&self, snap: Snapshot) {
        *self.snapshot.lock() = Arc::new(snap);
        self.generation.fetch_add(1, Ordering::Release);
    }
}

/// The packet thread's view; see the module comment for the costs.
pub struct NeighReader {
    shared: Arc<NeighShared>,
    generation: u64,
    snap: Arc<Snapshot>,
    requests: Sender<u32>,
}

/// Why a lookup found no template.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Miss {
    Resolving,
    NoRoute,
}

impl NeighReader {
    /// A reader over `shared` whose misses go to `requests`.
    pub fn new(shared: Arc<NeighShared>, requests: Sender<u32>) -> NeighReader {
        let snap = shared.snapshot.lock().clone();
        NeighReader {
            generation: shared.generation.load(Ordering::Acquire),
            shared,
            snap,
            requests,
        }
    }

    /// Another reader of the same resolver (another packet thread's).
    pub fn another(&self) -> NeighReader {
        NeighReader::new(self.shared.clone(), self.requests.clone())
    }

    /// Picks up the resolver's latest snapshot, if there is a newer one.
    #[inline]
    pub fn refresh(&mut self) {
        let g = self.shared.generation.load(Ordering::Acquire);
        if g != self.generation {
            self.snap = self.shared.snapshot.lock().clone();
            self.generation = g;
        }
    }

    /// Which snapshot this reader holds: changes whenever it picks up a
    /// new one.
    #[inline]
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The uplink MTU of the current snapshot, if the resolver read one.
    #[inline]
    pub fn mtu(&self) -> Option<u32> {
        (self.snap.mtu != 0).then_some(self.snap.mtu)
    }

    /// The template towards `dst`, asking the resolver for unknown ones.
    #[inline]
    pub fn lookup(&mut self, dst: u32) -> Result<&Template, Miss> {
        self.refresh();
        match self.snap.entries.get(&dst) {
            Some(Entry::Ready(t)) => Ok(t),
            Some(Entry::Resolving) => Err(Miss::Resolving),
            Some(Entry::NoRoute) => Err(Miss::NoRoute),
            None => {
                match self.requests.try_send(dst) {
                    Ok(()) | Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {}
                }
                Err(Miss::Resolving)
            }
        }
    }
}

/// What the resolver needs to build templates.
#[derive(Clone, Debug)]
pub struct ResolverConfig {
    pub uplink_ifindex: u32,
    pub uplink_mac: [u8; 6],
    pub local_ip: Ipv4Addr,
    pub dst_port: u16,
}

/// Starts the resolver thread (and its netlink watcher); both run until
/// the returned reader drops.
pub fn spawn(cfg: ResolverConfig) -> std::io::Result<(NeighReader, JoinHandle<()>)> {
    let shared = Arc::new(NeighShared::default());
    let (tx, rx) = channel::bounded(REQUEST_QUEUE);
    let reader = NeighReader::new(shared.clone(), tx);
    let (changed_tx, changed_rx) = channel::bounded(1);
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = watch_kernel_changes(changed_tx, stop.clone())?;
    let handle = std::thread::Builder::new()
        .name("xbr-neigh".into())
        .spawn(move || {
            Resolver::new(cfg, shared).run(rx, changed_rx);
            stop.store(true, Ordering::Relaxed);
            let _ = watcher.join();
        })?;
    Ok((reader, handle))
}

/// Listens for rtnetlink link, neighbour and IPv4 route notifications and
/// signals `changed` (coalesced: one pending signal is enough).
fn watch_kernel_changes(
    changed: Sender<()>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<JoinHandle<()>> {
    crate::netwatch::watch(
        "xbr-neigh-watch",
        &[
            libc::RTNLGRP_LINK,
            libc::RTNLGRP_NEIGH,
            libc::RTNLGRP_IPV4_ROUTE,
        ],
        changed,
        stop,
    )
}

struct Wanted {
    last_probe: Option<Instant>,
}

struct Resolver {
    cfg: ResolverConfig,
    shared: Arc<NeighShared>,
    wanted: HashMap<u32, Wanted>,
    current: Snapshot,
    error_logged: bool,
}

/// Next hop and its neighbour state, as the kernel reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Neighbour {
    mac: Option<[u8; 6]>,
    state: NeighbourState,
}

impl Resolver {
    fn new(cfg: ResolverConfig, shared: Arc<NeighShared>) -> Resolver {
        Resolver {
            cfg,
            shared,
            wanted: HashMap::new(),
            current: Snapshot::default(),
            error_logged: false,
        }
    }

    fn run(mut self, rx: Receiver<u32>, changed: Receiver<()>) {
        let mut next_refresh = Instant::now() + REFRESH;
        loop {
            let unresolved = self
                .current
                .entries
                .values()
                .any(|e| matches!(e, Entry::Resolving));
            let wait = if unresolved { RETRY } else { REFRESH };
            let timeout = wait.min(next_refresh.saturating_duration_since(Instant::now()));
            let mut fresh = false;
            channel::select! {
                recv(rx) -> msg => match msg {
                    Ok(dst) => {
                        fresh |= self.want(dst);
                        while let Ok(dst) = rx.try_recv() {
                            fresh |= self.want(dst);
                        }
                    }
                    Err(_) => return,
                },
                recv(changed) -> _ => fresh = true,
                default(timeout) => {}
            }
            let now = Instant::now();
            if fresh || unresolved || now >= next_refresh {
                self.resolve_all(now);
                next_refresh = now + REFRESH;
            }
        }
    }

    /// Adds a destination; `true` if it is new.
    fn want(&mut self, dst: u32) -> bool {
        if self.wanted.contains_key(&dst) {
            return false;
        }
        self.wanted.insert(dst, Wanted { last_probe: None });
        true
    }

    fn resolve_all(&mut self, now: Instant) {
        let neighbours = match dump_neighbours(self.cfg.uplink_ifindex) {
            Ok(n) => {
                self.error_logged = false;
                n
            }
            Err(e) => {
                if !self.error_logged {
                    tracing::warn!(error = %e, "reading the neighbour table failed");
                    self.error_logged = true;
                }
                HashMap::new()
            }
        };
        let mut next = Snapshot {
            mtu: netdev::link_by_index(self.cfg.uplink_ifindex).map_or(0, |l| l.mtu),
            ..Snapshot::default()
        };
        let dsts: Vec<u32> = self.wanted.keys().copied().collect();
        for dst in dsts {
            let entry = match self.route(dst) {
                None => Entry::NoRoute,
                Some(hop) => {
                    let n = neighbours.get(&hop).copied();
                    let usable = n.and_then(|n| usable_mac(&n));
                    let stale = n.is_some_and(|n| n.state == NeighbourState::Stale);
                    if usable.is_none() || stale {
                        self.probe(dst, now);
                    }
                    match usable {
                        Some(mac) => Entry::Ready(Template::new(
                            self.cfg.uplink_mac,
                            mac,
                            u32::from(self.cfg.local_ip),
                            dst,
                            self.cfg.dst_port,
                        )),
                        None => Entry::Resolving,
                    }
                }
            };
            next.entries.insert(dst, entry);
        }
        if next != self.current {
            for (dst, e) in &next.entries {
                if self.current.entries.get(dst) != Some(e) {
                    let state = match e {
                        Entry::Ready(t) => format!("{:02x?}", t.dst_mac()),
                        Entry::Resolving => "resolving".into(),
                        Entry::NoRoute => "no route via the uplink".into(),
                    };
                    tracing::debug!(remote = %Ipv4Addr::from(*dst), state, "VXLAN next hop");
                }
            }
            if next.mtu != self.current.mtu {
                tracing::debug!(mtu = next.mtu, "uplink MTU");
            }
            self.shared.publish(Snapshot {
                entries: next.entries.clone(),
                mtu: next.mtu,
            });
            self.current = next;
        }
    }

    /// The next hop towards `dst` if the route leaves through the uplink.
    fn route(&self, dst: u32) -> Option<u32> {
        let mut msg = RouteMessage::default();
        msg.header.address_family = AddressFamily::Inet;
        msg.header.destination_prefix_length = 32;
        msg.attributes
            .push(RouteAttribute::Destination(RouteAddress::Inet(
                Ipv4Addr::from(dst),
            )));
        let replies = netdev::request_flags(
            RouteNetlinkMessage::GetRoute(msg),
            NLM_F_REQUEST | NLM_F_ACK,
            "get route",
            &Ipv4Addr::from(dst).to_string(),
        )
        .ok()?;
        let route = replies.into_iter().find_map(|m| match m {
            RouteNetlinkMessage::NewRoute(r) => Some(r),
            _ => None,
        })?;
        if route.header.kind != RouteType::Unicast {
            return None;
        }
        let mut oif = None;
        let mut gateway = None;
        for a in route.attributes {
            match a {
                RouteAttribute::Oif(i) => oif = Some(i),
                RouteAttribute::Gateway(RouteAddress::Inet(g)) => gateway = Some(u32::from(g)),
                _ => {}
            }
        }
        (oif == Some(self.cfg.uplink_ifindex)).then_some(gateway.unwrap_or(dst))
    }

    /// Makes the kernel resolve the next hop towards `dst` (at most once
    /// per REPROBE).
    fn probe(&mut self, dst: u32, now: Instant) {
        let Some(w) = self.wanted.get_mut(&dst) else {
            return;
        };
        if w.last_probe
            .is_some_and(|t| now.duration_since(t) < REPROBE)
        {
            return;
        }
        w.last_probe = Some(now);
        let sent = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))
            .and_then(|s| {
                s.connect((Ipv4Addr::from(dst), PROBE_PORT))?;
                s.send(&[])
            })
            .is_ok();
        tracing::debug!(remote = %Ipv4Addr::from(dst), sent, "probing VXLAN next hop");
    }
}

fn usable_mac(n: &Neighbour) -> Option<[u8; 6]> {
    match n.state {
        NeighbourState::Reachable
        | NeighbourState::Stale
        | NeighbourState::Delay
        | NeighbourState::Probe
        | NeighbourState::Permanent
        | NeighbourState::Noarp => n.mac,
        _ => None,
    }
}

/// The IPv4 neighbours of `ifindex`.
fn dump_neighbours(ifindex: u32) -> Result<HashMap<u32, Neighbour>, NetdevError> {
    let mut msg = NeighbourMessage::default();
    msg.header.family = AddressFamily::Inet;
    let replies = netdev::request_flags(
        RouteNetlinkMessage::GetNeighbour(msg),
        NLM_F_REQUEST | NLM_F_DUMP,
        "dump neighbours",
        &format!("ifindex {ifindex}"),
    )?;
    let mut out = HashMap::new();
    for m in replies {
        let RouteNetlinkMessage::NewNeighbour(n) = m else {
            continue;
        };
        if n.header.ifindex != ifindex {
            continue;
        }
        let mut ip = None;
        let mut mac = None;
        for a in n.attributes {
            match a {
                NeighbourAttribute::Destination(NeighbourAddress::Inet(a)) => {
                    ip = Some(u32::from(a))
                }
                NeighbourAttribute::LinkLayerAddress(l) => {
                    mac = <[u8; 6]>::try_from(l.as_slice()).ok()
                }
                _ => {}
            }
        }
        if let Some(ip) = ip {
            out.insert(
                ip,
                Neighbour {
                    mac,
                    state: n.header.state,
                },
            );
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reader_sees_new_snapshots_and_requests_unknown_destinations() {
        let shared = Arc::new(NeighShared::default());
        let (tx, rx) = channel::bounded(2);
        let mut r = NeighReader::new(shared.clone(), tx);
        assert_eq!(r.lookup(7).err(), Some(Miss::Resolving));
        assert_eq!(rx.try_recv(), Ok(7));
        let t = Template::new([2; 6], [4; 6], 1, 7, 4789);
        let mut snap = Snapshot::default();
        snap.entries.insert(7, Entry::Ready(t.clone()));
        snap.entries.insert(8, Entry::NoRoute);
        snap.entries.insert(9, Entry::Resolving);
        shared.publish(snap);
        assert_eq!(r.lookup(7), Ok(&t));
        assert_eq!(r.lookup(8).err(), Some(Miss::NoRoute));
        assert_eq!(r.lookup(9).err(), Some(Miss::Resolving));
        assert!(
            rx.try_recv().is_err(),
            "known destinations are not requested"
        );
        // a full queue never blocks the packet thread
        for d in 100..110 {
            assert!(r.lookup(d).is_err());
        }
    }

    #[test]
    fn only_confirmed_states_are_usable() {
        let mac = Some([2, 0, 0, 0, 0, 1]);
        for (state, ok) in [
            (NeighbourState::Reachable, true),
            (NeighbourState::Stale, true),
            (NeighbourState::Permanent, true),
            (NeighbourState::Incomplete, false),
            (NeighbourState::Failed, false),
            (NeighbourState::None, false),
        ] {
            assert_eq!(
                usable_mac(&Neighbour { mac, state }).is_some(),
                ok,
                "{state:?}"
            );
        }
        let no_mac = Neighbour {
            mac: None,
            state: NeighbourState::Reachable,
        };
        assert_eq!(usable_mac(&no_mac), None);
    }
}
