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
//! ports are added and removed live (`dataplane::live`), so a change never
//! disturbs the ports it does not name. A port whose spec changed keeps
//! its OpenFlow number, as in OVS: options, MTU and MAC are applied in
//! place, settings baked into what xbr opened (a tunnel's underlay) reopen
//! it under the same number, and only a new `ofport_request` or `type`
//! renumbers it (`port_change`). An interface that cannot
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
use super::port_change::{self, Change, InPlace};
use super::row_error::RowError;
use crate::bridge::{BridgeConfig, BridgeError, RunningBridge};
use dataplane::config::{parse_controller, parse_listen, PortSpec, PortType, Target};
use dataplane::control::PortMeta;
use dataplane::live::LiveError;
use dataplane::ports::PortError;
use ofproto::limits::{ControlLimits, PacketInLimit};
use ofproto::tls::{TlsContext, TlsFiles};
use ofproto::WantedController;
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
    /// Each bridge's state file (`--state`, `--state-snapshot`).
    pub state: crate::bridge::StateConfig,
    /// The pin root (`--bpf-pin-root`).
    pub pin_root: PathBuf,
    /// Pinning is on (`--xdp-pin`).
    pub pin: bool,
    /// `--metrics` was given: the database's `other_config:xbr-metrics`
    /// is then not followed.
    pub metrics_from_cli: bool,
    /// Bridges' default `xdp-peer-gro` (`--xdp-peer-gro`).
    pub xdp_peer_gro: bool,
    /// The OpenFlow control plane's bounds (`ofproto::limits`).
    pub control: ControlLimits,
    /// `--max-flows`.
    pub max_flows: usize,
    /// `--private-key`, `--certificate`, `--ca-cert`: the TLS files
    /// until the database's `SSL` row gives others.
    pub tls: Option<TlsFiles>,
}

struct Managed {
    bridge: RunningBridge,
    standalone: bool,
    controllers: Vec<String>,
    packet_in_limits: BTreeMap<String, PacketInLimit>,
    probes: BTreeMap<String, Duration>,
    flow_limits: BTreeMap<u8, (usize, bool)>,
    /// Open ports by name: the spec as the database gave it (before a
    /// number was assigned), to notice changes.
    ports: BTreeMap<String, PortSpec>,
    /// The number each interface of the database last had, while it stays
    /// in the database: a port being reopened gets it back.
    numbers: BTreeMap<String, u32>,
    /// The Bridge's `mirrors` as last applied (`mirrors.rs`).
    mirrors: Vec<super::mirrors::Applied>,
}

pub struct Reconciler {
    settings: Settings,
    /// The packet and transmit threads' CPUs the bridges run with: the
    /// database's `pmd-cpu-mask` when it holds a usable one, else the
    /// command line's.
    cpus: (Vec<usize>, Vec<usize>),
    /// The mask last acted on, so a change is applied (or refused) once.
    pmd_seen: Option<Result<Vec<usize>, RowError>>,
    bridges: BTreeMap<String, Managed>,
    /// Why an interface (by UUID) is not open, or which of its settings
    /// could not be applied, as written to `error`.
    errors: HashMap<String, String>,
    /// The `DesiredIface::warning` last logged, per interface UUID.
    warned: HashMap<String, String>,
    /// `Desired::unsupported` as last logged.
    root_warned: Vec<String>,
    /// What this connection last wrote, per (table, row UUID).
    written: HashMap<(&'static str, String), Map<String, Value>>,
    /// `other_config:flow-restore-wait`, as ovs-vswitchd follows it: on
    /// until the database first says otherwise, then off for good (a
    /// later `true` means nothing). While on, bridges forward nothing and
    /// have no controllers (only the management socket).
    restore_wait: bool,
    /// flow-restore-wait cleared in the current `apply`.
    restore_cleared: bool,
    /// The bridges the database held when xbr first read it that have
    /// not started yet: only they restore their state files; a bridge
    /// created later (`add-br`) is new (see `StateConfig::restore`).
    /// `None` until the first read.
    initial: Option<std::collections::BTreeSet<String>>,
    /// The metrics endpoint `other_config:xbr-metrics` asked for, and
    /// the value last acted on.
    metrics: Option<crate::metrics::MetricsServer>,
    metrics_seen: Option<Result<std::net::SocketAddr, RowError>>,
    /// The unsupported Bridge columns last logged, by bridge.
    unsupported_seen: HashMap<String, Vec<&'static str>>,
    /// The TLS settings in force (the `SSL` row's, else the command
    /// line's) and the row they were last taken from.
    tls: Option<Arc<TlsContext>>,
    ssl_seen: Option<Option<super::desired::DesiredSsl>>,
}

/// The bridge's `other_config:xdp-peer-gro`, or `default` (`xbr run
/// --xdp-peer-gro`) when unset or not true/false (logged).
fn peer_gro(bridge: &str, want: &DesiredBridge, default: bool) -> bool {
    match &want.xdp_peer_gro {
        None => default,
        Some(Ok(v)) => *v,
        Some(Err(e)) => {
            tracing::warn!(bridge, "{e}; using {default}");
            default
        }
    }
}

/// The version ovs-vsctl and ovs-vswitchd compare (`ovs_version`).
const OVS_VERSION: &str = concat!("xbr-", env!("CARGO_PKG_VERSION"));

impl Reconciler {
    pub fn new(settings: Settings) -> Self {
        let settings_tls = settings.tls.clone().map(TlsContext::new);
        Reconciler {
            ssl_seen: None,
            cpus: (settings.pmd_cpus.clone(), settings.tx_cpus.clone()),
            pmd_seen: None,
            settings,
            bridges: BTreeMap::new(),
            errors: HashMap::new(),
            warned: HashMap::new(),
            root_warned: Vec::new(),
            written: HashMap::new(),
            restore_wait: true,
            restore_cleared: false,
            initial: None,
            metrics: None,
            metrics_seen: None,
            unsupported_seen: HashMap::new(),
            tls: settings_tls,
        }
    }

    /// The TLS settings in force, for the database connection too (as in
    /// OVS, the `SSL` row, once read, applies to every TLS connection).
    pub fn tls(&self) -> Option<Arc<TlsContext>> {
        self.tls.clone()
    }

    /// Follows the `SSL` row (or, without one, the command line's
    /// files): a change makes a new TLS context, which the bridges with
    /// `ssl:`/`pssl:` targets give their next TLS connections.
    /// `bootstrap_ca_cert` bootstraps a missing `ca_cert` from the first
    /// `ssl:` peer, as in OVS (`ofproto::tls`).
    fn apply_ssl(&mut self, d: &Desired) {
        if self.ssl_seen.as_ref() == Some(&d.ssl) {
            return;
        }
        self.ssl_seen = Some(d.ssl.clone());
        let files = match &d.ssl {
            Some(row) => Some(TlsFiles {
                private_key: row.private_key.clone().into(),
                certificate: row.certificate.clone().into(),
                ca_cert: row.ca_cert.clone().into(),
                bootstrap_ca_cert: row.bootstrap_ca_cert,
            }),
            None => self.settings.tls.clone(),
        };
        if self.tls.as_ref().map(|t| t.files()) == files.as_ref() {
            return;
        }
        tracing::info!(files = ?files, "TLS settings changed");
        self.tls = files.map(TlsContext::new);
        if let Some(ctx) = &self.tls {
            if let Err(e) = ctx.check() {
                tracing::error!("{e}");
            }
        }
        let probe = self.settings.inactivity_probe;
        for (name, m) in &mut self.bridges {
            m.bridge.set_tls(self.tls.clone());
            let uses_tls = m
                .controllers
                .iter()
                .any(|t| t.starts_with("ssl:") || t.starts_with("pssl:"));
            if uses_tls {
                if let Err(e) = apply_controllers(name, m, self.tls.clone(), probe) {
                    tracing::error!(bridge = %name, "controllers: {e}");
                }
            }
        }
    }

    /// A new connection: its database may differ, so everything is
    /// written again.
    pub fn forget_written(&mut self) {
        self.written.clear();
    }

    /// Makes the running bridges match `d`; returns the write-back
    /// operations (empty if nothing changed).
    pub fn apply(&mut self, full: &Desired) -> Vec<Value> {
        self.apply_pmd_cpus(full);
        self.apply_metrics(full);
        self.apply_ssl(full);
        if full.unsupported != self.root_warned {
            for w in full
                .unsupported
                .iter()
                .filter(|w| !self.root_warned.contains(w))
            {
                tracing::warn!("{w}");
            }
            self.root_warned = full.unsupported.clone();
        }
        // The controllers the bridges get when flow-restore-wait clears
        // are not a controller change that flushes the flows (the ones
        // just restored must survive it); later changes are.
        self.restore_cleared = false;
        if self.restore_wait && !full.flow_restore_wait {
            self.restore_wait = false;
            self.restore_cleared = true;
            for (name, m) in &self.bridges {
                tracing::info!(bridge = %name, "flow-restore-wait cleared: forwarding by the flows");
                m.bridge.set_restore_wait(false);
            }
        }
        // While waiting, no bridge has a controller (ovs-vswitchd's
        // bridge_configure_remotes); they are connected once it clears.
        let waiting;
        let d = if self.restore_wait {
            let mut w = full.clone();
            for b in w.bridges.values_mut() {
                b.controllers.clear();
            }
            waiting = w;
            &waiting
        } else {
            full
        };
        let gone: Vec<String> = self
            .bridges
            .keys()
            .filter(|n| !d.bridges.contains_key(*n))
            .cloned()
            .collect();
        for name in gone {
            if let Some(m) = self.bridges.remove(&name) {
                tracing::info!(bridge = %name, "bridge removed from the database; stopping it");
                m.bridge.shutdown_and_forget();
            }
        }
        if self.initial.is_none() {
            self.initial = Some(d.bridges.keys().cloned().collect());
        }
        for (name, want) in &d.bridges {
            let created = !self.bridges.contains_key(name);
            if created {
                match self.start_bridge(name, want) {
                    Ok(m) => {
                        if let Some(i) = &mut self.initial {
                            i.remove(name);
                        }
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
            if let Some(m) = self.bridges.get_mut(name) {
                let shared = m.bridge.live().datapath().clone();
                super::mirrors::apply(name, &mut m.mirrors, &want.mirrors, shared.mirrors());
            }
            // Its ports are there now, and its tables final (no saved
            // state to wait for). With flow-restore-wait they are not:
            // the previous process's cache entries keep forwarding (as
            // OVS keeps its datapath flows) and are taken over when the
            // key clears (`RunningBridge::set_restore_wait`).
            if created && !self.restore_wait {
                if let Some(m) = self.bridges.get(name) {
                    m.bridge.take_over_pinned();
                }
            }
        }
        // Forget what concerns rows that are gone (pods come and go).
        let live: std::collections::HashSet<&str> = d
            .bridges
            .values()
            .flat_map(|b| {
                std::iter::once(b.uuid.as_str())
                    .chain(b.ifaces.values().map(|i| i.uuid.as_str()))
                    .chain(b.controller_rows.iter().map(|(u, _)| u.as_str()))
                    .chain(b.mirrors.iter().map(|m| m.uuid.as_str()))
            })
            .chain(d.root.iter().map(|(u, _)| u.as_str()))
            .collect();
        self.errors.retain(|u, _| live.contains(u.as_str()));
        self.warned.retain(|u, _| live.contains(u.as_str()));
        self.written.retain(|(_, u), _| live.contains(u.as_str()));
        self.write_back(d)
    }

    /// Whether a bridge has a VXLAN port, whose underlay is looked up
    /// again on every pass.
    pub fn has_tunnels(&self) -> bool {
        self.bridges
            .values()
            .any(|m| m.ports.values().any(|s| s.port_type == PortType::Vxlan))
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
        if let Some(e) = first
            .iter()
            .find_map(|&c| dataplane::cpus::core_id(c).err())
        {
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

    /// Follows `other_config:xbr-metrics`: serves the metrics endpoint
    /// on its address (moved when it changes, stopped when it goes),
    /// unless `--metrics` was given. A bad or unbindable address is
    /// logged and leaves no endpoint.
    fn apply_metrics(&mut self, d: &Desired) {
        if d.metrics == self.metrics_seen {
            return;
        }
        self.metrics_seen = d.metrics.clone();
        if self.settings.metrics_from_cli {
            if d.metrics.is_some() {
                tracing::warn!("other_config:xbr-metrics ignored: --metrics was given");
            }
            return;
        }
        if let Some(old) = self.metrics.take() {
            old.stop();
        }
        match &d.metrics {
            None => {}
            Some(Err(e)) => tracing::warn!("other_config:xbr-metrics: {e}"),
            Some(Ok(addr)) => match crate::metrics::MetricsServer::start(*addr) {
                Ok(m) => self.metrics = Some(m),
                Err(e) => tracing::warn!("other_config:xbr-metrics: {e}"),
            },
        }
    }

    fn start_bridge(&self, name: &str, want: &DesiredBridge) -> Result<Managed, BridgeError> {
        let (listen, controllers) = controller_targets(name, &want.controllers, self.tls.is_some());
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
            tls: self.tls.clone(),
            inactivity_probe: s.inactivity_probe,
            ct_limit: s.ct_limit,
            spare_xsk_ports: s.spare_xsk_ports,
            xdp_cache_entries: s.xdp_cache_entries,
            xdp_ct_new: s.xdp_ct_new,
            state: crate::bridge::StateConfig {
                restore: self.initial.as_ref().is_some_and(|i| i.contains(name)),
                ..s.state
            },
            flow_restore_wait: self.restore_wait,
            pin_root: s.pin_root.clone(),
            pin: s.pin,
            xdp_peer_gro: peer_gro(name, want, s.xdp_peer_gro),
            control: ControlLimits {
                tcp_packet_in: passive_packet_in_limit(want),
                ..s.control.clone()
            },
            max_flows: s.max_flows,
            packet_in_limits: packet_in_limits(&want.packet_in_limits),
            controller_probes: by_address(&want.probes),
        };
        let bridge = RunningBridge::start(config)?;
        tracing::info!(bridge = %name, "bridge created from the database");
        let mut m = Managed {
            bridge,
            standalone: want.standalone,
            controllers: want.controllers.clone(),
            packet_in_limits: want.packet_in_limits.clone(),
            probes: want.probes.clone(),
            flow_limits: BTreeMap::new(),
            ports: BTreeMap::new(),
            numbers: BTreeMap::new(),
            mirrors: Vec::new(),
        };
        apply_flow_limits(name, &mut m, &want.flow_limits);
        Ok(m)
    }

    fn update_bridge(&mut self, name: &str, want: &DesiredBridge) {
        let Some(m) = self.bridges.get_mut(name) else {
            return;
        };
        // OVS flushes the flow tables when a bridge gains its first
        // primary controller or loses its last, and when the fail mode
        // changes while it has none (ofproto::fail_mode).
        let had_primary = has_primary(&m.controllers);
        let has_primary = has_primary(&want.controllers);
        let flush = !self.restore_cleared
            && (had_primary != has_primary || (m.standalone != want.standalone && !has_primary));
        if m.standalone != want.standalone {
            if let Some(server) = m.bridge.server() {
                server.set_fail_mode(want.standalone);
            }
            m.standalone = want.standalone;
        }
        apply_flow_limits(name, m, &want.flow_limits);
        let limits_changed = m.packet_in_limits != want.packet_in_limits || m.probes != want.probes;
        if m.controllers != want.controllers || limits_changed {
            let probe = self.settings.inactivity_probe;
            // The passive target's, for its live connections too (as in
            // OVS) and the ones it accepts next.
            let (tcp_probe, tcp_packet_in) = (
                passive_probe(want).unwrap_or(probe),
                passive_packet_in_limit(want),
            );
            match m.bridge.server() {
                Some(server) => server.set_passive_limits(tcp_probe, tcp_packet_in),
                None => {
                    let of = m.bridge.openflow();
                    of.set_control_limits(ControlLimits {
                        tcp_packet_in,
                        tcp_probe,
                        ..of.control_limits()
                    });
                }
            }
            m.packet_in_limits = want.packet_in_limits.clone();
            m.probes = want.probes.clone();
            m.controllers = want.controllers.clone();
            let result = apply_controllers(name, m, self.tls.clone(), probe);
            match result {
                Ok(()) => tracing::info!(bridge = %name, targets = ?want.controllers,
                    "controllers reconfigured"),
                Err(e) => tracing::error!(bridge = %name, "controllers: {e}"),
            }
        }
        if flush {
            m.bridge.flush_flows(want.standalone && !has_primary);
        }
        let live = m.bridge.live().clone();
        if let Some(maps) = live.xdp_cache() {
            let on = peer_gro(name, want, self.settings.xdp_peer_gro);
            if maps.peer_gro() != on {
                tracing::info!(bridge = %name, on, "xdp-peer-gro changed");
                maps.set_peer_gro(on);
                if on {
                    dataplane::ports::redirect::watch::make_peers_ready(maps.generation());
                }
            }
        }
        let numbers: HashMap<String, u32> = live
            .ports()
            .iter()
            .map(|p| (p.name.clone(), p.ofport))
            .collect();
        // Ports deleted from the database lose their number for good (a
        // port added again is numbered anew, as in OVS).
        m.numbers.retain(|n, _| want.ifaces.contains_key(n));
        // Changes to open ports first (port_change.rs); removals before
        // additions, so a renamed or renumbered port can take over.
        let open: Vec<String> = m.ports.keys().cloned().collect();
        for n in open {
            let iface = want.ifaces.get(&n);
            let wanted = iface.and_then(|i| i.spec.as_ref().ok());
            let change = match (wanted, numbers.get(&n)) {
                (Some(w), Some(&o)) => port_change::classify(&m.ports[&n], w, o, |r| {
                    numbers.values().any(|&taken| taken == r)
                }),
                _ => Change::Renumber,
            };
            let (Change::InPlace(_) | Change::Reopen, Some(w), Some(iface)) =
                (&change, wanted, iface)
            else {
                if change == Change::Renumber {
                    m.numbers.remove(&n);
                    match live.remove(&n) {
                        Ok(()) | Err(LiveError::NoSuchPort(_)) => {
                            m.ports.remove(&n);
                        }
                        Err(e) => tracing::error!(bridge = %name, port = %n, "cannot remove: {e}"),
                    }
                }
                continue;
            };
            if let Change::InPlace(what) = change {
                let Some(spec) = m.ports.get_mut(&n) else {
                    continue;
                };
                match apply_in_place(&live, spec, w, &what) {
                    Ok(()) => {
                        self.errors.remove(&iface.uuid);
                    }
                    Err(failed) => set_error(&mut self.errors, &iface.uuid, in_place_text(&failed)),
                }
                continue;
            }
            // Reopen: the same number, so flows naming it keep matching.
            tracing::info!(bridge = %name, port = %n, "reopening the port for its new settings");
            if let Err(e) = live.remove(&n) {
                if !matches!(e, LiveError::NoSuchPort(_)) {
                    tracing::error!(bridge = %name, port = %n, "cannot remove: {e}");
                    continue;
                }
            }
            m.ports.remove(&n);
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
                Err(e) => {
                    set_error(&mut self.errors, &iface.uuid, e.to_string());
                    continue;
                }
            };
            // A port reopened (or failing to reopen) keeps the number it
            // had unless the database asks for another.
            let request = PortSpec {
                ofport: spec.ofport.or_else(|| m.numbers.get(iname).copied()),
                ..spec.clone()
            };
            match live.add(&request) {
                Ok(meta) => {
                    m.numbers.insert(iname.clone(), meta.ofport);
                    self.errors.remove(&iface.uuid);
                    // An existing netdev's MTU is set as on a change (an
                    // internal port's was set when xbr created it).
                    let mut opened = spec.clone();
                    if spec.port_type == PortType::System && spec.mtu_request.is_some() {
                        opened.mtu_request = None;
                        let mtu = InPlace {
                            mtu: true,
                            ..Default::default()
                        };
                        if let Err(failed) = apply_in_place(&live, &mut opened, spec, &mtu) {
                            set_error(&mut self.errors, &iface.uuid, in_place_text(&failed));
                        }
                    }
                    m.ports.insert(iname.clone(), opened);
                }
                Err(e) => set_error(&mut self.errors, &iface.uuid, ovs_error_text(iname, &e)),
            }
        }
    }

    /// The write-back transaction's operations.
    fn write_back(&mut self, d: &Desired) -> Vec<Value> {
        let mut rows: Vec<(&'static str, String, Map<String, Value>)> = Vec::new();
        self.controller_rows(d, &mut rows);
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
            // What the bridge was asked for and does not do, where
            // `ovs-vsctl get Bridge NAME status` shows it (those tables
            // have no `error` column); logged when it changes.
            let status: Vec<(&str, String)> = if want.unsupported.is_empty() {
                Vec::new()
            } else {
                vec![("xbr_unsupported", want.unsupported.join(","))]
            };
            b.insert("status".into(), json!(["map", status]));
            if self.unsupported_seen.get(bname) != Some(&want.unsupported) {
                if !want.unsupported.is_empty() {
                    tracing::warn!(
                        bridge = %bname,
                        "not supported by xbr, ignored: {} (see Bridge status:xbr_unsupported)",
                        want.unsupported.join(", ")
                    );
                }
                self.unsupported_seen
                    .insert(bname.clone(), want.unsupported.clone());
            }
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
                        // Open, but with settings xbr could not apply.
                        if let Some(w) = &iface.warning {
                            if self.warned.get(&iface.uuid) != Some(w) {
                                tracing::warn!(bridge = %bname, port = %iname, "{w}");
                                self.warned.insert(iface.uuid.clone(), w.clone());
                            }
                        } else if self.warned.remove(&iface.uuid).is_some() {
                            tracing::info!(bridge = %bname, port = %iname, "port fully configured");
                        }
                        let qos = q.error.as_ref().map(RowError::to_string);
                        let errs: Vec<&str> = [
                            self.errors.get(&iface.uuid),
                            qos.as_ref(),
                            iface.warning.as_ref(),
                        ]
                        .into_iter()
                        .flatten()
                        .map(String::as_str)
                        .collect();
                        if !errs.is_empty() {
                            r.insert("error".into(), json!(errs.join("; ")));
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

    /// The `Controller` rows' status columns, as ovs-vswitchd writes them
    /// (its bridge.c, from connmgr's controller info): for an active
    /// (`tcp:`) target of a running bridge, whether it is connected, its
    /// role while connected (`other`, `master`, `slave`) and `status`
    /// (`state`, `sec_since_connect`, `sec_since_disconnect`,
    /// `last_error`, those known); for a passive (`ptcp:`) target, or
    /// one the bridge has not tried yet, not connected, no role, no
    /// status.
    fn controller_rows(
        &self,
        d: &Desired,
        rows: &mut Vec<(&'static str, String, Map<String, Value>)>,
    ) {
        for (bname, want) in &d.bridges {
            let m = self.bridges.get(bname);
            for (uuid, target) in &want.controller_rows {
                let active = parse_controller(target).ok();
                let status = active.and_then(|t| m?.bridge.controller_status(t.addr));
                let mut r = Map::new();
                if status.is_none() && active.is_some_and(|t| t.tls) && self.tls.is_none() {
                    r.insert("is_connected".into(), json!(false));
                    r.insert("role".into(), str_set::<&str>(&[]));
                    r.insert(
                        "status".into(),
                        json!(["map", [["last_error", NO_TLS_SETTINGS]]]),
                    );
                    rows.push(("Controller", uuid.clone(), r));
                    continue;
                }
                let Some(s) = status else {
                    r.insert("is_connected".into(), json!(false));
                    r.insert("role".into(), str_set::<&str>(&[]));
                    r.insert("status".into(), json!(["map", []]));
                    rows.push(("Controller", uuid.clone(), r));
                    continue;
                };
                r.insert("is_connected".into(), json!(s.is_connected));
                let role = match s.role {
                    Some(ofproto::wire::message::role::MASTER) => Some("master"),
                    Some(ofproto::wire::message::role::SLAVE) => Some("slave"),
                    Some(ofproto::wire::message::role::EQUAL) => Some("other"),
                    _ => None,
                };
                r.insert(
                    "role".into(),
                    str_set(&role.into_iter().collect::<Vec<_>>()),
                );
                let mut pairs: Vec<(String, String)> = Vec::new();
                if let Some(e) = &s.last_error {
                    pairs.push(("last_error".into(), e.clone()));
                }
                pairs.push(("state".into(), s.state.into()));
                if let Some(t) = s.since_connect {
                    pairs.push(("sec_since_connect".into(), t.as_secs().to_string()));
                }
                if let Some(t) = s.since_disconnect {
                    pairs.push(("sec_since_disconnect".into(), t.as_secs().to_string()));
                }
                // OVS's keys for a controller with a packet-in rate limit.
                for (kind, c) in ["miss", "action"].iter().zip(s.packet_ins.iter().flatten()) {
                    for (what, n) in [
                        ("backlog", c.backlog),
                        ("bypassed", c.bypassed),
                        ("queued", c.queued),
                        ("dropped", c.dropped),
                    ] {
                        pairs.push((format!("packet-in-{kind}-{what}"), n.to_string()));
                    }
                }
                pairs.sort();
                r.insert("status".into(), json!(["map", pairs]));
                rows.push(("Controller", uuid.clone(), r));
            }
        }
    }

    /// Interface statistics of every open port, and the controllers'
    /// status, as an update transaction.
    pub fn stats(&mut self, d: &Desired) -> Vec<Value> {
        let mut rows = Vec::new();
        self.controller_rows(d, &mut rows);
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
            super::mirrors::stats_rows(&m.mirrors, &mut rows);
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
        if let Some(m) = self.metrics {
            m.stop();
        }
        let mut ok = true;
        for (_, m) in self.bridges {
            ok &= m.bridge.shutdown();
        }
        ok
    }
}

/// Why an `ssl:`/`pssl:` target is not served.
const NO_TLS_SETTINGS: &str = "no TLS settings: the SSL table (ovs-vsctl set-ssl) or \
     --private-key, --certificate and --ca-cert must give them";

/// Makes the bridge's OpenFlow server serve the controllers `m` holds
/// (`m.controllers`, with `m.probes` and `m.packet_in_limits`; `probe`
/// for a target without one), TLS targets with `tls`. As in OVS, in
/// place: active targets added, removed or changed, and the passive
/// target's listener replaced if its address changed; new TLS settings
/// are taken by the next connections. The management socket and the
/// other connections go on. Only a server that failed to come back from
/// a restart is started again.
fn apply_controllers(
    name: &str,
    m: &mut Managed,
    tls: Option<Arc<TlsContext>>,
    probe: Duration,
) -> Result<(), BridgeError> {
    let (listen, controllers) = controller_targets(name, &m.controllers, tls.is_some());
    let pin = packet_in_limits(&m.packet_in_limits);
    m.bridge.set_packet_in_limits(pin.clone());
    let probes = by_address(&m.probes);
    m.bridge.set_controller_probes(probes.clone());
    let Some(server) = m.bridge.server_mut() else {
        return m
            .bridge
            .restart_openflow(listen, &controllers, m.standalone, probe);
    };
    let active: Vec<WantedController> = controllers
        .iter()
        .map(|a| WantedController {
            target: a.addr,
            tls: tls.clone().filter(|_| a.tls),
            probe: probes.get(&a.addr).copied().unwrap_or(probe),
            packet_in_limit: pin.get(&a.addr).copied(),
        })
        .collect();
    let passive_tls = tls.filter(|_| listen.is_some_and(|l| l.tls));
    let listened = server.set_listener(listen.map(|l| l.addr), passive_tls);
    let connected = server.set_controllers(&active);
    Ok(listened.and(connected)?)
}

/// A bridge's `Controller.target`s: the passive listener (`ptcp:` or
/// `pssl:`; xbr serves one) and the active controllers (`tcp:`, `ssl:`).
/// Targets it cannot serve (TLS ones without TLS settings among them)
/// are logged and left out.
fn controller_targets(
    bridge: &str,
    targets: &[String],
    have_tls: bool,
) -> (Option<Target>, Vec<Target>) {
    let mut listen = None;
    let mut active = Vec::new();
    for t in targets {
        if (t.starts_with("ssl:") || t.starts_with("pssl:")) && !have_tls {
            tracing::error!(bridge, target = %t, "{NO_TLS_SETTINGS}");
            continue;
        }
        if t.starts_with("ptcp:") || t.starts_with("pssl:") {
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

/// Whether `targets` hold a primary (active) controller: OVS's passive
/// targets (`ptcp:`, `pssl:`, `punix:`) are services and do not count.
fn has_primary(targets: &[String]) -> bool {
    targets.iter().any(|t| !t.starts_with('p'))
}

/// The PACKET_IN limits of active targets by address (targets that do
/// not parse are left out; `controller_targets` logs them).
fn packet_in_limits(
    by_target: &BTreeMap<String, PacketInLimit>,
) -> BTreeMap<std::net::SocketAddr, PacketInLimit> {
    by_target
        .iter()
        .filter_map(|(t, l)| parse_controller(t).ok().map(|a| (a.addr, *l)))
        .collect()
}

/// Active targets' own inactivity probe intervals by address (targets
/// that do not parse are left out; `controller_targets` logs them).
fn by_address(by_target: &BTreeMap<String, Duration>) -> BTreeMap<std::net::SocketAddr, Duration> {
    by_target
        .iter()
        .filter_map(|(t, p)| parse_controller(t).ok().map(|a| (a.addr, *p)))
        .collect()
}

/// The passive target xbr serves: the first `ptcp:`/`pssl:` one, as
/// `controller_targets` picks it.
fn passive_target(want: &DesiredBridge) -> Option<&String> {
    want.controllers
        .iter()
        .find(|t| t.starts_with("ptcp:") || t.starts_with("pssl:"))
}

/// The PACKET_IN limit of the passive target's row.
fn passive_packet_in_limit(want: &DesiredBridge) -> Option<PacketInLimit> {
    want.packet_in_limits.get(passive_target(want)?).copied()
}

/// The passive target row's `inactivity_probe`, if it sets one: OVS
/// probes the connections that target accepts at its row's interval, as
/// it probes an active controller at its own.
fn passive_probe(want: &DesiredBridge) -> Option<Duration> {
    want.probes.get(passive_target(want)?).copied()
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

/// A setting of an open port that could not be changed in place.
#[derive(Debug, thiserror::Error)]
enum InPlaceError {
    #[error("{port}: cannot set mtu_request {mtu}: {source}")]
    Mtu {
        port: String,
        mtu: u32,
        source: dataplane::netdev::NetdevError,
    },
    #[error("{port}: cannot set mac: {source}")]
    Mac {
        port: String,
        source: dataplane::netdev::NetdevError,
    },
    #[error("{port}: options:xdp_redirect: {source}")]
    XdpRedirect { port: String, source: LiveError },
}

/// The text of the settings that failed, for the Interface's `error`.
fn in_place_text(failed: &[InPlaceError]) -> String {
    let texts: Vec<String> = failed.iter().map(ToString::to_string).collect();
    texts.join("; ")
}

/// Applies the settings `what` names from `want` to the open port whose
/// spec is `open`, updating `open` with each one applied; a setting that
/// fails stays as it was (and is tried again on the next pass).
fn apply_in_place(
    live: &dataplane::live::LivePorts,
    open: &mut PortSpec,
    want: &PortSpec,
    what: &InPlace,
) -> Result<(), Vec<InPlaceError>> {
    let name = want.name.as_str();
    let mut failed = Vec::new();
    if what.mtu {
        match want.mtu_request {
            // OVS leaves the MTU as it is when the request goes.
            None => open.mtu_request = None,
            Some(mtu) => {
                match dataplane::netdev::ifindex(name)
                    .and_then(|i| dataplane::netdev::set_mtu(i, mtu))
                {
                    Ok(()) => {
                        tracing::info!(port = name, mtu, "MTU set in place");
                        open.mtu_request = Some(mtu);
                    }
                    Err(source) => failed.push(InPlaceError::Mtu {
                        port: name.to_string(),
                        mtu,
                        source,
                    }),
                }
            }
        }
    }
    if what.mac {
        match want.mac {
            None => open.mac = None,
            Some(mac) => {
                match dataplane::netdev::ifindex(name)
                    .and_then(|i| dataplane::netdev::set_mac(i, mac))
                {
                    Ok(()) => {
                        tracing::info!(port = name, mac = %dataplane::netdev::format_mac(mac),
                            "MAC set in place");
                        open.mac = Some(mac);
                    }
                    Err(source) => failed.push(InPlaceError::Mac {
                        port: name.to_string(),
                        source,
                    }),
                }
            }
        }
    }
    if what.xdp_redirect {
        match live.set_xdp_redirect(want) {
            Ok(()) => open.xdp_redirect = want.xdp_redirect,
            Err(source) => failed.push(InPlaceError::XdpRedirect {
                port: name.to_string(),
                source,
            }),
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed)
    }
}

/// The columns ovs-vswitchd fills in for an open interface.
fn iface_columns(r: &mut Map<String, Value>, meta: &PortMeta, spec: &PortSpec) {
    // The database numbers ports as OpenFlow 1.0 does (16 bits): LOCAL
    // is 65534 there, 0xfffffffe on the OpenFlow 1.3 wire.
    let ofport = if meta.ofport == dataplane::live::OFPP_LOCAL {
        0xfffe
    } else {
        meta.ofport
    };
    r.insert("ofport".into(), json!(ofport));
    r.insert("error".into(), str_set::<&str>(&[]));
    r.insert(
        "mac_in_use".into(),
        json!(dataplane::netdev::format_mac(meta.hw_addr)),
    );
    if spec.port_type == PortType::Vxlan {
        // A flow-based tunnel has no netdev of its own. As in OVS, its
        // carrier is its egress interface's, which `status` names.
        r.insert("ifindex".into(), json!(0));
        r.insert("admin_state".into(), json!("up"));
        let egress = spec.vxlan.as_ref().map(|v| {
            (
                v.uplink.as_str(),
                dataplane::netdev::link_by_name(&v.uplink),
            )
        });
        let carrier = matches!(&egress, Some((_, Ok(l))) if l.up && l.lower_up);
        let state = if carrier { "up" } else { "down" };
        r.insert("link_state".into(), json!(state));
        let status: Vec<Value> = match egress {
            Some((dev, _)) => vec![
                json!(["tunnel_egress_iface", dev]),
                json!(["tunnel_egress_iface_carrier", state]),
            ],
            None => Vec::new(),
        };
        r.insert("status".into(), json!(["map", status]));
        return;
    }
    match dataplane::netdev::link_by_name(&meta.name) {
        Ok(link) => {
            let state = |up: bool| if up { "up" } else { "down" };
            r.insert("ifindex".into(), json!(link.ifindex));
            r.insert("admin_state".into(), json!(state(link.up)));
            r.insert("link_state".into(), json!(state(link.up && link.lower_up)));
            r.insert("mtu".into(), json!(link.mtu));
            // The netdev's own: a `mac` set in place shows at once.
            if let Some(mac) = link.mac {
                r.insert(
                    "mac_in_use".into(),
                    json!(dataplane::netdev::format_mac(mac)),
                );
            }
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
