//! Turning the database's configuration into running bridges and ports,
//! and writing back what ovs-vswitchd writes.
//!
//! # Design
//!
//! [`Reconciler`] owns every bridge the database made: a
//! [`RunningBridge`] each (its own packet thread, OpenFlow socket
//! `<rundir>/<bridge>.mgmt` and control socket), and the spec each of its
//! ports was opened from. [`Reconciler::apply`] compares a [`Desired`]
//! snapshot with that and makes the difference: bridges start and stop,
//! ports are added and removed live (`crate::live`), so a change never
//! disturbs the ports it does not name. A port whose spec changed (type,
//! options, MTU...) is removed and added again. An interface that cannot
//! be opened keeps being retried on every pass, as ovs-vswitchd retries on
//! every reconfiguration.
//!
//! Write-back: the columns ovs-vswitchd owns (Interface `ofport`, `error`,
//! `mac_in_use`, `ifindex`, `link_state`, `admin_state`, `mtu`,
//! `link_speed`, `duplex`, `statistics`; Bridge `datapath_id`;
//! Open_vSwitch `cur_cfg`, `ovs_version`, `datapath_types`,
//! `iface_types`) become `update`
//! operations of one transaction, with `cur_cfg` last so that
//! `ovs-vsctl`, which waits for `cur_cfg` to reach its `next_cfg`, sees
//! the ports' numbers as soon as it returns. Only values that differ from
//! what this connection last wrote are sent.

use super::datum::{int_map, str_set, where_uuid};
use super::desired::{Desired, DesiredBridge};
use crate::bridge::{BridgeConfig, RunningBridge};
use crate::config::{parse_controller, parse_listen, PortSpec, PortType};
use crate::control::PortMeta;
use crate::live::LiveError;
use crate::ports::PortError;
use ofproto::limits::{ControlLimits, PacketInLimit};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

/// The `xbr run` settings every bridge the database creates gets.
#[derive(Clone, Debug)]
pub struct Settings {
    pub rundir: PathBuf,
    /// Packet threads of each bridge (`--pmd-threads`).
    pub pmd_threads: usize,
    /// Their CPUs (`--pmd-cores`' first, or `--cpu`).
    pub pmd_cpus: Vec<usize>,
    /// Transmit threads' CPUs (`--pmd-cores` after the packet threads').
    pub tx_cpus: Vec<usize>,
    pub flow_cache_entries: usize,
    pub ct_limit: usize,
    pub inactivity_probe: Duration,
    pub spare_xsk_ports: u32,
    /// Entries of each bridge's XDP flow cache; `None`: off.
    pub xdp_cache_entries: Option<u32>,
    /// New connections created by the XDP programs (`--xdp-ct-new`).
    pub xdp_ct_new: bool,
    /// The OpenFlow control plane's bounds (`ofproto::limits`).
    pub control: ControlLimits,
    /// `--max-flows`.
    pub max_flows: usize,
}

struct Managed {
    bridge: RunningBridge,
    standalone: bool,
    controllers: Vec<String>,
    packet_in_limits: BTreeMap<String, PacketInLimit>,
    flow_limits: BTreeMap<u8, (usize, bool)>,
    /// Open ports by name: the spec as the database gave it (before a
    /// number was assigned), to notice changes.
    ports: BTreeMap<String, PortSpec>,
}

pub struct Reconciler {
    settings: Settings,
    /// The packet and transmit threads' CPUs the bridges run with: the
    /// database's `pmd-cpu-mask` when it holds a usable one, else the
    /// command line's.
    cpus: (Vec<usize>, Vec<usize>),
    /// The mask last acted on, so a change is applied (or refused) once.
    pmd_seen: Option<Result<Vec<usize>, String>>,
    bridges: BTreeMap<String, Managed>,
    /// Why an interface (by UUID) is not open, as written to `error`.
    errors: HashMap<String, String>,
    /// What this connection last wrote, per (table, row UUID).
    written: HashMap<(&'static str, String), Map<String, Value>>,
}

/// The version ovs-vsctl and ovs-vswitchd compare (`ovs_version`).
const OVS_VERSION: &str = concat!("xbr-", env!("CARGO_PKG_VERSION"));

impl Reconciler {
    pub fn new(settings: Settings) -> Self {
        Reconciler {
            cpus: (settings.pmd_cpus.clone(), settings.tx_cpus.clone()),
            pmd_seen: None,
            settings,
            bridges: BTreeMap::new(),
            errors: HashMap::new(),
            written: HashMap::new(),
        }
    }

    /// A new connection: its database may differ, so everything is
    /// written again.
    pub fn forget_written(&mut self) {
        self.written.clear();
    }

    /// Makes the running bridges match `d`; returns the write-back
    /// operations (empty if nothing changed).
    pub fn apply(&mut self, d: &Desired) -> Vec<Value> {
        self.apply_pmd_cpus(d);
        let gone: Vec<String> = self
            .bridges
            .keys()
            .filter(|n| !d.bridges.contains_key(*n))
            .cloned()
            .collect();
        for name in gone {
            if let Some(m) = self.bridges.remove(&name) {
                tracing::info!(bridge = %name, "bridge removed from the database; stopping it");
                m.bridge.shutdown();
            }
        }
        for (name, want) in &d.bridges {
            if !self.bridges.contains_key(name) {
                match self.start_bridge(name, want) {
                    Ok(m) => {
                        self.bridges.insert(name.clone(), m);
                    }
                    Err(e) => {
                        let msg = format!("bridge {name}: {e}");
                        set_error(&mut self.errors, &want.uuid, msg.clone());
                        for i in want.ifaces.values() {
                            set_error(&mut self.errors, &i.uuid, msg.clone());
                        }
                        continue;
                    }
                }
            }
            self.update_bridge(name, want);
        }
        // Forget what concerns rows that are gone (pods come and go).
        let live: std::collections::HashSet<&str> = d
            .bridges
            .values()
            .flat_map(|b| {
                std::iter::once(b.uuid.as_str()).chain(b.ifaces.values().map(|i| i.uuid.as_str()))
            })
            .chain(d.root.iter().map(|(u, _)| u.as_str()))
            .collect();
        self.errors.retain(|u, _| live.contains(u.as_str()));
        self.written.retain(|(_, u), _| live.contains(u.as_str()));
        self.write_back(d)
    }

    /// Follows `pmd-cpu-mask`: its first CPUs for the packet threads (one
    /// each, `--pmd-threads` of them), the others for transmit threads
    /// (see `cpus`), as OVS pins its PMD threads to the mask's CPUs. Running bridges are re-pinned at once;
    /// the number of transmit threads changes only when they start. An
    /// unusable mask is logged and ignored; removing it keeps the threads
    /// where they are (bridges started later use the command line's).
    fn apply_pmd_cpus(&mut self, d: &Desired) {
        if d.pmd_cpus == self.pmd_seen {
            return;
        }
        self.pmd_seen = d.pmd_cpus.clone();
        let cpus = match &d.pmd_cpus {
            None => {
                self.cpus = (
                    self.settings.pmd_cpus.clone(),
                    self.settings.tx_cpus.clone(),
                );
                return;
            }
            Some(Err(e)) => {
                tracing::warn!("{e}; ignored");
                return;
            }
            Some(Ok(cpus)) => cpus,
        };
        let n = self.settings.pmd_threads.clamp(1, cpus.len());
        let (first, rest) = (cpus[..n].to_vec(), cpus[n..].to_vec());
        if let Some(e) = first.iter().find_map(|&c| crate::cpus::core_id(c).err()) {
            tracing::warn!("pmd-cpu-mask: {e}; ignored");
            return;
        }
        tracing::info!(packet_threads = ?first, transmit_threads = ?rest, "pmd-cpu-mask applied");
        for (name, m) in &self.bridges {
            if let Err(e) = m.bridge.set_cpus(&first, &rest) {
                tracing::warn!(bridge = %name, "pmd-cpu-mask: {e}");
            }
        }
        self.cpus = (first, rest);
    }

    fn start_bridge(&self, name: &str, want: &DesiredBridge) -> Result<Managed, String> {
        let (listen, controllers) = controller_targets(name, &want.controllers);
        let s = &self.settings;
        let config = BridgeConfig {
            name: name.to_string(),
            rundir: s.rundir.clone(),
            listen: listen.into_iter().collect(),
            ports: Vec::new(),
            pmd_threads: self.settings.pmd_threads,
            pmd_cpus: self.cpus.0.clone(),
            tx_cpus: self.cpus.1.clone(),
            datapath_id: want.datapath_id,
            flow_cache_entries: s.flow_cache_entries,
            standalone: want.standalone,
            controllers,
            inactivity_probe: s.inactivity_probe,
            ct_limit: s.ct_limit,
            spare_xsk_ports: s.spare_xsk_ports,
            xdp_cache_entries: s.xdp_cache_entries,
            xdp_ct_new: s.xdp_ct_new,
            control: ControlLimits {
                tcp_packet_in: passive_packet_in_limit(want),
                ..s.control.clone()
            },
            max_flows: s.max_flows,
            packet_in_limits: packet_in_limits(&want.packet_in_limits),
        };
        let bridge = RunningBridge::start(config).map_err(|e| e.to_string())?;
        tracing::info!(bridge = %name, "bridge created from the database");
        let mut m = Managed {
            bridge,
            standalone: want.standalone,
            controllers: want.controllers.clone(),
            packet_in_limits: want.packet_in_limits.clone(),
            flow_limits: BTreeMap::new(),
            ports: BTreeMap::new(),
        };
        apply_flow_limits(name, &mut m, &want.flow_limits);
        Ok(m)
    }

    fn update_bridge(&mut self, name: &str, want: &DesiredBridge) {
        let Some(m) = self.bridges.get_mut(name) else {
            return;
        };
        if m.standalone != want.standalone {
            if let Some(server) = m.bridge.server() {
                server.set_fail_mode(want.standalone);
            }
            m.standalone = want.standalone;
        }
        apply_flow_limits(name, m, &want.flow_limits);
        let limits_changed = m.packet_in_limits != want.packet_in_limits;
        if m.controllers != want.controllers || limits_changed {
            let probe = self.settings.inactivity_probe;
            let (listen, controllers) = controller_targets(name, &want.controllers);
            let pin = packet_in_limits(&want.packet_in_limits);
            m.bridge.set_packet_in_limits(pin.clone());
            // The passive target's, for the connections the restarted
            // server accepts.
            let of = m.bridge.openflow();
            of.set_control_limits(ControlLimits {
                tcp_packet_in: passive_packet_in_limit(want),
                ..of.control_limits()
            });
            m.packet_in_limits = want.packet_in_limits.clone();
            let only_added_active = !limits_changed
                && m.controllers.iter().all(|t| want.controllers.contains(t))
                && want
                    .controllers
                    .iter()
                    .filter(|t| !m.controllers.contains(t))
                    .all(|t| !t.starts_with("ptcp:"));
            let result = match m.bridge.server_mut() {
                // New active targets join the running server, as in OVS.
                Some(server) if only_added_active => {
                    let have = server.controller_targets();
                    controllers
                        .iter()
                        .filter(|a| !have.contains(a))
                        .try_for_each(|a| server.add_controller(*a, probe, pin.get(a).copied()))
                        .map_err(|e| e.to_string())
                }
                // Anything else restarts the OpenFlow server on the same
                // flow tables; forwarding is not interrupted.
                _ => m
                    .bridge
                    .restart_openflow(listen, &controllers, want.standalone, probe)
                    .map_err(|e| e.to_string()),
            };
            match result {
                Ok(()) => tracing::info!(bridge = %name, targets = ?want.controllers,
                    "controllers reconfigured"),
                Err(e) => tracing::error!(bridge = %name, "controllers: {e}"),
            }
            m.controllers = want.controllers.clone();
        }
        let live = m.bridge.live().clone();
        // An internal port's new MTU is set in place, as OVS does: the
        // agent's addresses and routes on tun0 must survive it.
        for (n, spec) in m.ports.iter_mut() {
            let Some(Ok(want)) = want.ifaces.get(n).map(|i| i.spec.as_ref()) else {
                continue;
            };
            let same_but_mtu = PortSpec {
                mtu_request: spec.mtu_request,
                ..want.clone()
            } == *spec;
            if spec.port_type == PortType::Internal
                && want.mtu_request != spec.mtu_request
                && same_but_mtu
            {
                if let Some(mtu) = want.mtu_request {
                    match crate::netdev::ifindex(n).and_then(|i| crate::netdev::set_mtu(i, mtu)) {
                        Ok(()) => spec.mtu_request = Some(mtu),
                        Err(e) => tracing::warn!(port = %n, mtu, "cannot set the MTU: {e}"),
                    }
                }
            }
        }
        // Removals first, so a renamed or renumbered port can take over.
        let stale: Vec<String> = m
            .ports
            .iter()
            .filter(|(n, spec)| {
                !want
                    .ifaces
                    .get(*n)
                    .is_some_and(|i| i.spec.as_ref().is_ok_and(|s| s == *spec))
            })
            .map(|(n, _)| n.clone())
            .collect();
        for n in stale {
            match live.remove(&n) {
                Ok(()) | Err(LiveError::NoSuchPort(_)) => {
                    m.ports.remove(&n);
                }
                Err(e) => tracing::error!(bridge = %name, port = %n, "cannot remove: {e}"),
            }
        }
        // Requested numbers first, so an interface without a request
        // cannot take one that another is about to ask for.
        let mut order: Vec<_> = want.ifaces.iter().collect();
        order.sort_by_key(|(_, i)| i.spec.as_ref().map_or(true, |s| s.ofport.is_none()));
        for (iname, iface) in order {
            if m.ports.contains_key(iname) {
                continue;
            }
            let spec = match &iface.spec {
                Ok(s) => s,
                Err(msg) => {
                    set_error(&mut self.errors, &iface.uuid, msg.clone());
                    continue;
                }
            };
            match live.add(spec) {
                Ok(_) => {
                    m.ports.insert(iname.clone(), spec.clone());
                    self.errors.remove(&iface.uuid);
                }
                Err(e) => set_error(&mut self.errors, &iface.uuid, ovs_error_text(iname, &e)),
            }
        }
    }

    /// The write-back transaction's operations.
    fn write_back(&mut self, d: &Desired) -> Vec<Value> {
        let mut rows: Vec<(&'static str, String, Map<String, Value>)> = Vec::new();
        for (bname, want) in &d.bridges {
            let Some(m) = self.bridges.get(bname) else {
                // The bridge could not start: its interfaces say why.
                for iface in want.ifaces.values() {
                    let mut r = Map::new();
                    r.insert("ofport".into(), json!(-1));
                    let err = self.errors.get(&iface.uuid).cloned();
                    r.insert("error".into(), json!(err.unwrap_or_default()));
                    rows.push(("Interface", iface.uuid.clone(), r));
                }
                continue;
            };
            let mut b = Map::new();
            b.insert(
                "datapath_id".into(),
                json!(format!("{:016x}", m.bridge.datapath_id())),
            );
            rows.push(("Bridge", want.uuid.clone(), b));
            let metas: HashMap<String, Arc<PortMeta>> = m
                .bridge
                .live()
                .ports()
                .into_iter()
                .map(|p| (p.name.clone(), p))
                .collect();
            for (iname, iface) in &want.ifaces {
                let mut r = Map::new();
                match (metas.get(iname), m.ports.get(iname)) {
                    (Some(meta), Some(spec)) => {
                        let q = &iface.qos;
                        meta.qos
                            .set(q.ingress_kbps, q.ingress_burst_kb, q.egress_bps);
                        iface_columns(&mut r, meta, spec);
                        if let Some(e) = &q.error {
                            r.insert("error".into(), json!(e));
                        }
                    }
                    _ => {
                        r.insert("ofport".into(), json!(-1));
                        let err = self
                            .errors
                            .get(&iface.uuid)
                            .cloned()
                            .unwrap_or_else(|| format!("{iname}: not open"));
                        r.insert("error".into(), json!(err));
                    }
                }
                rows.push(("Interface", iface.uuid.clone(), r));
            }
        }
        if let Some((root, next_cfg)) = &d.root {
            let mut r = Map::new();
            r.insert("ovs_version".into(), json!(OVS_VERSION));
            r.insert("datapath_types".into(), str_set(&["netdev"]));
            r.insert(
                "iface_types".into(),
                str_set(&["internal", "system", "vxlan"]),
            );
            r.insert("cur_cfg".into(), json!(next_cfg));
            rows.push(("Open_vSwitch", root.clone(), r));
        }
        self.diff_ops(rows)
    }

    /// Interface statistics of every open port, as an update transaction.
    pub fn stats(&mut self, d: &Desired) -> Vec<Value> {
        let mut rows = Vec::new();
        for (bname, want) in &d.bridges {
            let Some(m) = self.bridges.get(bname) else {
                continue;
            };
            for meta in m.bridge.live().ports() {
                let Some(iface) = want.ifaces.get(&meta.name) else {
                    continue;
                };
                let s = &meta.stats;
                let mut r = Map::new();
                r.insert(
                    "statistics".into(),
                    int_map(&[
                        ("rx_bytes", s.rx_bytes.load(Relaxed)),
                        ("rx_dropped", s.rx_dropped.load(Relaxed)),
                        ("rx_errors", s.rx_errors.load(Relaxed)),
                        ("rx_packets", s.rx_packets.load(Relaxed)),
                        ("tx_bytes", s.tx_bytes()),
                        ("tx_dropped", s.tx_dropped()),
                        ("tx_errors", s.tx_errors.load(Relaxed)),
                        ("tx_packets", s.tx_packets()),
                    ]),
                );
                rows.push(("Interface", iface.uuid.clone(), r));
            }
        }
        self.diff_ops(rows)
    }

    /// `update` operations for the columns that changed since last
    /// written.
    fn diff_ops(&mut self, rows: Vec<(&'static str, String, Map<String, Value>)>) -> Vec<Value> {
        let mut ops = Vec::new();
        for (table, uuid, row) in rows {
            let last = self.written.entry((table, uuid.clone())).or_default();
            let changed: Map<String, Value> = row
                .into_iter()
                .filter(|(k, v)| last.get(k) != Some(v))
                .collect();
            if changed.is_empty() {
                continue;
            }
            for (k, v) in &changed {
                last.insert(k.clone(), v.clone());
            }
            ops.push(json!({
                "op": "update",
                "table": table,
                "where": where_uuid(&uuid),
                "row": changed,
            }));
        }
        ops
    }

    /// Stops every bridge.
    pub fn shutdown(self) -> bool {
        let mut ok = true;
        for (_, m) in self.bridges {
            ok &= m.bridge.shutdown();
        }
        ok
    }
}

/// A bridge's `Controller.target`s: the passive listener (`ptcp:`; xbr
/// serves one) and the active controllers (`tcp:`). Targets it cannot
/// serve are logged and left out.
fn controller_targets(
    bridge: &str,
    targets: &[String],
) -> (Option<std::net::SocketAddr>, Vec<std::net::SocketAddr>) {
    let mut listen = None;
    let mut active = Vec::new();
    for t in targets {
        if t.starts_with("ptcp:") {
            match parse_listen(t) {
                Ok(a) if listen.is_none() => listen = Some(a),
                Ok(_) => tracing::warn!(bridge, target = %t,
                    "only one passive controller target is served; ignoring this one"),
                Err(e) => tracing::warn!(bridge, "{e}"),
            }
        } else {
            match parse_controller(t) {
                Ok(a) => active.push(a),
                Err(e) => tracing::warn!(bridge, "{e}"),
            }
        }
    }
    (listen, active)
}

/// The PACKET_IN limits of active targets by address (targets that do
/// not parse are left out; `controller_targets` logs them).
fn packet_in_limits(
    by_target: &BTreeMap<String, PacketInLimit>,
) -> BTreeMap<std::net::SocketAddr, PacketInLimit> {
    by_target
        .iter()
        .filter_map(|(t, l)| parse_controller(t).ok().map(|a| (a, *l)))
        .collect()
}

/// The PACKET_IN limit of the passive target xbr serves (the first
/// `ptcp:` one, as `controller_targets` picks it).
fn passive_packet_in_limit(want: &DesiredBridge) -> Option<PacketInLimit> {
    let passive = want.controllers.iter().find(|t| t.starts_with("ptcp:"))?;
    want.packet_in_limits.get(passive).copied()
}

/// Applies the bridge's `Flow_Table:flow_limit`s where they changed.
fn apply_flow_limits(name: &str, m: &mut Managed, want: &BTreeMap<u8, (usize, bool)>) {
    if m.flow_limits == *want {
        return;
    }
    let of = m.bridge.openflow();
    for t in m.flow_limits.keys().filter(|t| !want.contains_key(t)) {
        of.set_flow_limit(*t, None);
        tracing::info!(bridge = %name, table = t, "flow limit removed");
    }
    for (t, (limit, evict)) in want {
        of.set_flow_limit(*t, Some(*limit));
        if *evict {
            tracing::warn!(bridge = %name, table = t, limit,
                "Flow_Table overflow_policy=evict: xbr does not evict; new flows past the limit are refused");
        } else {
            tracing::info!(bridge = %name, table = t, limit, "flow limit set");
        }
    }
    m.flow_limits = want.clone();
}

/// Records why an interface is not open; logs each new reason once.
fn set_error(errors: &mut HashMap<String, String>, uuid: &str, msg: String) {
    if errors.get(uuid) != Some(&msg) {
        tracing::warn!(interface = %uuid, "{msg}");
        errors.insert(uuid.to_string(), msg);
    }
}

/// The columns ovs-vswitchd fills in for an open interface.
fn iface_columns(r: &mut Map<String, Value>, meta: &PortMeta, spec: &PortSpec) {
    // The database numbers ports as OpenFlow 1.0 does (16 bits): LOCAL
    // is 65534 there, 0xfffffffe on the OpenFlow 1.3 wire.
    let ofport = if meta.ofport == crate::live::OFPP_LOCAL {
        0xfffe
    } else {
        meta.ofport
    };
    r.insert("ofport".into(), json!(ofport));
    r.insert("error".into(), str_set::<&str>(&[]));
    r.insert(
        "mac_in_use".into(),
        json!(crate::netdev::format_mac(meta.hw_addr)),
    );
    if spec.port_type == PortType::Vxlan {
        // A flow-based tunnel has no netdev of its own.
        r.insert("ifindex".into(), json!(0));
        r.insert("link_state".into(), json!("up"));
        r.insert("admin_state".into(), json!("up"));
        return;
    }
    match crate::netdev::link_by_name(&meta.name) {
        Ok(link) => {
            let state = |up: bool| if up { "up" } else { "down" };
            r.insert("ifindex".into(), json!(link.ifindex));
            r.insert("admin_state".into(), json!(state(link.up)));
            r.insert("link_state".into(), json!(state(link.up && link.lower_up)));
            r.insert("mtu".into(), json!(link.mtu));
            // What ethtool reports, through sysfs (readable while the link
            // is up): Mbit/s there, bit/s in the database.
            let sys = |f: &str| {
                std::fs::read_to_string(format!("/sys/class/net/{}/{f}", meta.name))
                    .ok()
                    .map(|v| v.trim().to_string())
            };
            if let Some(mbps) = sys("speed").and_then(|v| v.parse::<u64>().ok()) {
                r.insert("link_speed".into(), json!(mbps * 1_000_000));
            }
            if let Some(d) = sys("duplex").filter(|d| d == "full" || d == "half") {
                r.insert("duplex".into(), json!(d));
            }
        }
        Err(e) => tracing::debug!(port = %meta.name, "link state: {e}"),
    }
}

/// ovs-vswitchd's wording where there is one, so scripts that match on
/// the `error` column keep working.
fn ovs_error_text(name: &str, e: &LiveError) -> String {
    match e {
        LiveError::Port(PortError::NoSuchInterface(_)) => {
            format!("could not open network device {name} (No such device)")
        }
        other => other.to_string(),
    }
}
