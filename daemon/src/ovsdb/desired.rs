//! What the database asks for: the bridges, their settings and their
//! interfaces, read from the replica and turned into xbr's terms (a
//! [`PortSpec`] per interface, or the reason it cannot be one, which goes
//! to the Interface's `error` column as ovs-vswitchd would put it there).

use super::datum::{int_uuid_map, integer, string, string_map, uuids, Replica, Row};
use super::row_error::RowError;
use super::unsupported;
use dataplane::config::{PortSpec, PortType, VxlanSpec, MAX_OFPORT, VXLAN_DEFAULT_PORT};
use ofproto::limits::PacketInLimit;
use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::time::Duration;

pub use dataplane::live::OFPP_LOCAL;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredBridge {
    pub uuid: String,
    /// Fail mode standalone (OVS's default when `fail_mode` is empty).
    pub standalone: bool,
    /// `Controller.target`s: `tcp:`/`ssl:` (active) and `ptcp:`/`pssl:`
    /// (passive).
    pub controllers: Vec<String>,
    /// The `Controller` rows: (UUID, target), for their status columns.
    pub controller_rows: Vec<(String, String)>,
    /// Active targets' `controller_rate_limit` and
    /// `controller_burst_limit`, by target (those with a rate only).
    pub packet_in_limits: BTreeMap<String, PacketInLimit>,
    /// `Controller.inactivity_probe`s (milliseconds; 0 turns the probe
    /// off), by target (those with the column set only; the others get
    /// `--inactivity-probe`), as OVS reads them (see [`probe_interval`]).
    pub probes: BTreeMap<String, Duration>,
    /// `flow_tables`' `Flow_Table:flow_limit`s, by table id (tables with
    /// a limit only), and whether `overflow_policy` asks for `evict`
    /// (which xbr does not do: new flows are refused as with `refuse`).
    pub flow_limits: BTreeMap<u8, (usize, bool)>,
    /// From `other_config:datapath-id`.
    pub datapath_id: Option<u64>,
    /// From `other_config:xdp-peer-gro` (`true`/`false`), or why it is
    /// not usable; `None` when unset.
    pub xdp_peer_gro: Option<Result<bool, RowError>>,
    /// By interface name.
    pub ifaces: BTreeMap<String, DesiredIface>,
    /// The Bridge's `mirrors`, in the order the column lists them.
    pub mirrors: Vec<DesiredMirror>,
    /// The Bridge's columns xbr does not carry out that are set
    /// (`sflow`, `netflow`, `ipfix`), by column name.
    pub unsupported: Vec<&'static str>,
}

/// A `Mirror` row, its ports by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredMirror {
    pub uuid: String,
    pub name: String,
    pub select: dataplane::mirror::Selection,
    /// `output_port`'s interface (the device copies are sent on), or why
    /// the row cannot be carried out (goes to the log and the row's
    /// `statistics` stay empty).
    pub output: Result<String, RowError>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredIface {
    pub uuid: String,
    pub spec: Result<PortSpec, RowError>,
    /// Rate limits; applied to the open port without reopening it.
    pub qos: Qos,
    /// Why the port, open, does not do all the database asks (goes to
    /// `error`, and is logged): a tunnel's underlay not resolved yet,
    /// settings xbr does not implement (`unsupported.rs`).
    pub warning: Option<String>,
}

/// An interface's rate limits, in OVS's units; 0 is none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Qos {
    /// `ingress_policing_rate`, kbit/s.
    pub ingress_kbps: u64,
    /// `ingress_policing_burst`, kbit.
    pub ingress_burst_kb: u64,
    /// The Port's `linux-htb` QoS `other_config:max-rate`, bit/s.
    pub egress_bps: u64,
    /// A QoS the port names but xbr cannot apply (goes to `error`).
    pub error: Option<RowError>,
}

/// The `SSL` table's row: the files of `ssl:`/`pssl:` targets (see
/// docs/tls.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredSsl {
    pub private_key: String,
    pub certificate: String,
    pub ca_cert: String,
    /// `bootstrap_ca_cert`: a missing `ca_cert` is bootstrapped from the
    /// first `ssl:` peer.
    pub bootstrap_ca_cert: bool,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Desired {
    /// The root row's UUID and its `next_cfg`.
    pub root: Option<(String, i64)>,
    /// The root row's `other_config:pmd-cpu-mask` as CPUs (ascending),
    /// or why it cannot be used; `None` when unset.
    pub pmd_cpus: Option<Result<Vec<usize>, RowError>>,
    /// The root row's `other_config:flow-restore-wait` (false unless
    /// `true` in any case, as ovs-vswitchd's `smap_get_bool` reads it).
    pub flow_restore_wait: bool,
    /// The root row's `other_config:xbr-metrics` (the metrics endpoint's
    /// IP:PORT), or why it cannot be used; `None` when unset.
    pub metrics: Option<Result<std::net::SocketAddr, RowError>>,
    pub bridges: BTreeMap<String, DesiredBridge>,
    /// The `SSL` row the root row's `ssl` names, if any.
    pub ssl: Option<DesiredSsl>,
    /// What the Open_vSwitch row sets that xbr ignores (`unsupported.rs`).
    pub unsupported: Vec<String>,
}

/// Reads the whole configuration out of the replica. Only bridges the
/// root row lists count, as in ovs-vswitchd.
pub fn read(db: &Replica) -> Desired {
    let mut out = Desired::default();
    let Some((root_uuid, root)) = db.rows("Open_vSwitch").next() else {
        return out;
    };
    out.root = Some((
        root_uuid.to_string(),
        integer(root, "next_cfg").unwrap_or(0),
    ));
    out.unsupported = unsupported::root(root);
    let other = string_map(root, "other_config");
    out.pmd_cpus = other
        .get("pmd-cpu-mask")
        .map(|m| dataplane::cpus::parse_mask(m).map_err(RowError::from));
    out.flow_restore_wait = other
        .get("flow-restore-wait")
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    out.metrics = other
        .get("xbr-metrics")
        .map(|a| RowError::metrics_address(a));
    out.ssl = uuids(root, "ssl")
        .first()
        .and_then(|u| db.row("SSL", u))
        .map(|r| DesiredSsl {
            private_key: string(r, "private_key").unwrap_or_default(),
            certificate: string(r, "certificate").unwrap_or_default(),
            ca_cert: string(r, "ca_cert").unwrap_or_default(),
            bootstrap_ca_cert: r
                .get("bootstrap_ca_cert")
                .and_then(|v| v.as_bool())
                .unwrap_or(false),
        });
    // Interfaces the switch owns are never a tunnel's uplink.
    let ports: BTreeSet<String> = db
        .rows("Interface")
        .filter_map(|(_, r)| string(r, "name"))
        .collect();
    for b in uuids(root, "bridges") {
        let Some(row) = db.row("Bridge", &b) else {
            continue;
        };
        let Some(name) = string(row, "name") else {
            continue;
        };
        let bridge = read_bridge(db, &b, &name, row, &ports);
        out.bridges.insert(name, bridge);
    }
    out
}

fn read_bridge(
    db: &Replica,
    uuid: &str,
    name: &str,
    row: &Row,
    ports: &BTreeSet<String>,
) -> DesiredBridge {
    let controller_uuids = uuids(row, "controller");
    let ctl_rows: Vec<&Row> = controller_uuids
        .iter()
        .filter_map(|c| db.row("Controller", c))
        .collect();
    let controller_rows: Vec<(String, String)> = controller_uuids
        .iter()
        .filter_map(|c| Some((c.clone(), string(db.row("Controller", c)?, "target")?)))
        .collect();
    let controllers = controller_rows.iter().map(|(_, t)| t.clone()).collect();
    let packet_in_limits = ctl_rows
        .iter()
        .filter_map(|c| {
            let limit = PacketInLimit::from_columns(
                integer(c, "controller_rate_limit"),
                integer(c, "controller_burst_limit"),
            )?;
            Some((string(c, "target")?, limit))
        })
        .collect();
    let probes = ctl_rows
        .iter()
        .filter_map(|c| {
            let ms = u64::try_from(integer(c, "inactivity_probe")?).ok()?;
            Some((string(c, "target")?, probe_interval(ms)))
        })
        .collect();
    let flow_limits = int_uuid_map(row, "flow_tables")
        .into_iter()
        .filter_map(|(table, ft)| {
            let table = u8::try_from(table).ok()?;
            let ft = db.row("Flow_Table", &ft)?;
            let limit = usize::try_from(integer(ft, "flow_limit")?).ok()?;
            let evict = string(ft, "overflow_policy").as_deref() == Some("evict");
            Some((table, (limit, evict)))
        })
        .collect();
    let datapath_id = string_map(row, "other_config")
        .get("datapath-id")
        .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok());
    let xdp_peer_gro = string_map(row, "other_config")
        .get("xdp-peer-gro")
        .map(|v| match v.as_str() {
            "true" => Ok(true),
            "false" => Ok(false),
            other => Err(RowError::XdpPeerGro(other.to_string())),
        });
    let mut ifaces = BTreeMap::new();
    let mut bridge_unsupported = unsupported::bridge(name, row);
    for c in &ctl_rows {
        bridge_unsupported.extend(unsupported::controller(name, c));
    }
    for p in uuids(row, "ports") {
        let Some(port) = db.row("Port", &p) else {
            continue;
        };
        let members = uuids(port, "interfaces");
        let (egress_bps, qos_error) = port_qos(db, port);
        let port_unsupported = unsupported::port(&string(port, "name").unwrap_or_default(), port);
        for i in &members {
            let Some(iface) = db.row("Interface", i) else {
                continue;
            };
            let Some(iname) = string(iface, "name") else {
                continue;
            };
            let mut warnings = Vec::new();
            let spec = if members.len() > 1 {
                Err(RowError::Bond)
            } else {
                iface_spec(&iname, name, iface, ports, &mut warnings)
            };
            if iname == name {
                warnings.extend(bridge_unsupported.iter().cloned());
            }
            warnings.extend(port_unsupported.iter().cloned());
            let warning = (!warnings.is_empty()).then(|| warnings.join("; "));
            let nonneg = |col| integer(iface, col).and_then(|v| u64::try_from(v).ok());
            let qos = Qos {
                ingress_kbps: nonneg("ingress_policing_rate").unwrap_or(0),
                ingress_burst_kb: nonneg("ingress_policing_burst").unwrap_or(0),
                egress_bps,
                error: qos_error.clone(),
            };
            ifaces.insert(
                iname,
                DesiredIface {
                    uuid: i.clone(),
                    spec,
                    qos,
                    warning,
                },
            );
        }
    }
    DesiredBridge {
        uuid: uuid.to_string(),
        standalone: string(row, "fail_mode").as_deref() != Some("secure"),
        controllers,
        controller_rows,
        packet_in_limits,
        probes,
        flow_limits,
        datapath_id,
        xdp_peer_gro,
        ifaces,
        mirrors: uuids(row, "mirrors")
            .iter()
            .filter_map(|m| Some(read_mirror(db, m, db.row("Mirror", m)?)))
            .collect(),
        unsupported: UNSUPPORTED
            .iter()
            .copied()
            .filter(|col| !uuids(row, col).is_empty())
            .collect(),
    }
}

/// A `Mirror` row: its selection by port name and its output port's
/// interface. `select_vlan`, `output_vlan` and `select_dst_port`/
/// `select_src_port` naming no port are refused, as is a missing
/// `output_port` (xbr has no VLAN mirroring).
fn read_mirror(db: &Replica, uuid: &str, row: &Row) -> DesiredMirror {
    let name = string(row, "name").unwrap_or_default();
    let port_names = |col| -> BTreeSet<String> {
        uuids(row, col)
            .iter()
            .filter_map(|p| db.row("Port", p).and_then(|r| string(r, "name")))
            .collect()
    };
    let select = dataplane::mirror::Selection {
        all: row.get("select_all").and_then(|v| v.as_bool()) == Some(true),
        src: port_names("select_src_port"),
        dst: port_names("select_dst_port"),
    };
    let output = if integer(row, "output_vlan").is_some() {
        Err(RowError::MirrorOutputVlan)
    } else if row
        .get("select_vlan")
        .is_some_and(|v| !super::datum::set_items(v).is_empty())
    {
        Err(RowError::MirrorSelectVlan)
    } else {
        match uuids(row, "output_port").first() {
            None => Err(RowError::MirrorNoOutput),
            Some(p) => db
                .row("Port", p)
                .and_then(|r| uuids(r, "interfaces").first().cloned())
                .and_then(|i| db.row("Interface", &i).and_then(|r| string(r, "name")))
                .ok_or(RowError::MirrorOutputWithoutInterface),
        }
    };
    DesiredMirror {
        uuid: uuid.to_string(),
        name,
        select,
        output,
    }
}

/// Bridge columns that name rows xbr does not carry out.
pub const UNSUPPORTED: [&str; 3] = ["sflow", "netflow", "ipfix"];

/// The egress limit of a Port's QoS: `linux-htb` with
/// `other_config:max-rate` (bit/s; without it, no limit, as HTB's
/// ceiling is then the link speed). Other types are refused.
fn port_qos(db: &Replica, port: &Row) -> (u64, Option<RowError>) {
    let Some(qos) = uuids(port, "qos").first().and_then(|q| db.row("QoS", q)) else {
        return (0, None);
    };
    let kind = string(qos, "type").unwrap_or_default();
    if kind != "linux-htb" {
        return (0, Some(RowError::QosType(kind)));
    }
    match string_map(qos, "other_config").get("max-rate") {
        None => (0, None),
        Some(r) => match r.parse::<u64>() {
            Ok(bps) => (bps, None),
            Err(_) => (0, Some(RowError::QosMaxRate(r.clone()))),
        },
    }
}

/// The port one Interface row describes; `warnings` get what the port
/// will not do although it opens (see `DesiredIface::warning`).
fn iface_spec(
    name: &str,
    bridge: &str,
    row: &Row,
    ports: &BTreeSet<String>,
    warnings: &mut Vec<String>,
) -> Result<PortSpec, RowError> {
    let kind = string(row, "type").unwrap_or_default();
    let options = string_map(row, "options");
    let mut spec = PortSpec {
        name: name.to_string(),
        ofport: None,
        port_type: PortType::System,
        mtu_request: None,
        mac: None,
        vxlan: None,
        xdp_redirect: Default::default(),
        internal_backend: Default::default(),
    };
    match kind.as_str() {
        "" | "system" => {
            spec.xdp_redirect = xdp_redirect(name, &options)?;
            warnings.extend(unsupported::interface(
                name,
                row,
                &options,
                unsupported::SYSTEM_OPTIONS,
            ));
            if string(row, "mac").is_some() {
                warnings.push(format!(
                    "{name}: mac is set by xbr on internal interfaces only; ignored"
                ));
            }
        }
        "internal" => {
            warnings.extend(unsupported::interface(
                name,
                row,
                &options,
                unsupported::INTERNAL_OPTIONS,
            ));
            spec.port_type = PortType::Internal;
            spec.mac = string(row, "mac").and_then(|m| dataplane::config::parse_mac(&m));
            if let Some(b) = options.get("internal_backend") {
                spec.internal_backend =
                    dataplane::config::InternalBackend::parse(b).ok_or_else(|| {
                        RowError::InternalBackend {
                            iface: name.to_string(),
                            value: b.clone(),
                        }
                    })?;
            }
        }
        "vxlan" => {
            spec.port_type = PortType::Vxlan;
            spec.xdp_redirect = xdp_redirect(name, &options)?;
            // OVS numbers a flow-based tunnel at once and looks its
            // underlay up per packet: without one yet, the port is open
            // and numbered, and its underlay is looked for again on every
            // pass (each database change, and each address, route or link
            // change the kernel announces while there is a tunnel).
            let (dst_port, local_ip) = vxlan_options(&options)?;
            match dataplane::vxlan::underlay::resolve(local_ip, ports) {
                Ok((local_ip, uplink)) => {
                    spec.vxlan = Some(VxlanSpec {
                        dst_port,
                        local_ip,
                        uplink,
                    })
                }
                Err(why) => warnings.push(format!(
                    "{why}: the port drops what is sent to it until there is one \
                     (looked for again at each address or route change)"
                )),
            }
            // Its options were checked above (unknown ones are refused).
            warnings.extend(unsupported::interface(name, row, &BTreeMap::new(), &[]));
            if integer(row, "mtu_request").is_some() {
                warnings.push(format!(
                    "{name}: mtu_request does not apply to a vxlan port in xbr (its uplink's \
                     MTU is used); ignored"
                ));
            }
        }
        other => {
            return Err(RowError::InterfaceType {
                iface: name.to_string(),
                kind: other.to_string(),
            })
        }
    }
    if let Some(mtu) = integer(row, "mtu_request") {
        spec.mtu_request = u32::try_from(mtu).ok().filter(|m| (68..=65535).contains(m));
        if spec.mtu_request.is_none() {
            return Err(RowError::MtuRange {
                iface: name.to_string(),
                mtu,
            });
        }
    }
    spec.ofport = if name == bridge && spec.port_type == PortType::Internal {
        Some(OFPP_LOCAL)
    } else {
        integer(row, "ofport_request")
            .and_then(|r| u32::try_from(r).ok())
            .filter(|r| (1..=MAX_OFPORT).contains(r))
    };
    Ok(spec)
}

/// xbr's own interface option `xdp_redirect` (`auto` when absent):
/// whether the XDP flow cache may redirect to this port (a vxlan port: to
/// its uplink; see PortSpec::xdp_redirect).
fn xdp_redirect(
    name: &str,
    options: &BTreeMap<String, String>,
) -> Result<dataplane::ports::redirect::RedirectMode, RowError> {
    match options.get("xdp_redirect") {
        None => Ok(Default::default()),
        Some(v) => dataplane::ports::redirect::RedirectMode::parse(v).ok_or_else(|| {
            RowError::XdpRedirect {
                iface: name.to_string(),
                value: v.clone(),
            }
        }),
    }
}

/// A flow-based VXLAN port's options: `remote_ip=flow`, `key=flow` (or
/// absent), optional `dst_port` and `local_ip`; returns the UDP port and
/// the local address if given.
fn vxlan_options(options: &BTreeMap<String, String>) -> Result<(u16, Option<Ipv4Addr>), RowError> {
    for (k, v) in options {
        match (k.as_str(), v.as_str()) {
            ("remote_ip", "flow")
            | ("key", "flow")
            | ("dst_port", _)
            | ("local_ip", _)
            | ("xdp_redirect", _) => {}
            ("remote_ip", _) => return Err(RowError::VxlanRemoteIp),
            ("key", _) => return Err(RowError::VxlanKey),
            (other, _) => return Err(RowError::VxlanOption(other.to_string())),
        }
    }
    if options.get("remote_ip").map(String::as_str) != Some("flow") {
        return Err(RowError::VxlanNoRemoteIp);
    }
    let dst_port = match options.get("dst_port") {
        None => VXLAN_DEFAULT_PORT,
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| RowError::VxlanDstPort(p.clone()))?,
    };
    let local_ip = match options.get("local_ip") {
        None => None,
        Some(ip) => Some(ip.parse().map_err(|_| RowError::VxlanLocalIp(ip.clone()))?),
    };
    Ok((dst_port, local_ip))
}

/// The probe interval OVS makes of `Controller.inactivity_probe` (`ms`
/// milliseconds): whole seconds (bridge.c divides the milliseconds
/// down), zero turning the probe off (so does anything below 1000), and
/// at least 5 s otherwise (rconn.c's floor).
pub fn probe_interval(ms: u64) -> Duration {
    match ms / 1000 {
        0 => Duration::ZERO,
        secs => Duration::from_secs(secs.max(MIN_PROBE_SECS)),
    }
}

/// OVS's shortest inactivity probe interval, in seconds.
const MIN_PROBE_SECS: u64 = 5;

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::cpus::CpuError;
    use serde_json::json;

    fn replica() -> Replica {
        let mut r = Replica::default();
        r.apply(&json!({
            "Open_vSwitch": {"root": {"new": {"bridges": ["uuid", "b0"], "next_cfg": 7}}},
            "Bridge": {"b0": {"new": {
                "name": "br0", "fail_mode": "secure",
                "ports": ["set", [["uuid", "p0"], ["uuid", "p1"], ["uuid", "p2"], ["uuid", "p3"]]],
                "controller": ["set", []], "other_config": ["map", []]}}},
            "Port": {
                "p0": {"new": {"name": "br0", "interfaces": ["uuid", "i0"]}},
                "p1": {"new": {"name": "tun0", "interfaces": ["uuid", "i1"]}},
                "p2": {"new": {"name": "veth1", "interfaces": ["uuid", "i2"]}},
                "p3": {"new": {"name": "gre0", "interfaces": ["uuid", "i3"]}}},
            "Interface": {
                "i0": {"new": {"name": "br0", "type": "internal", "ofport_request": ["set", []]}},
                "i1": {"new": {"name": "tun0", "type": "internal", "ofport_request": 2, "mtu_request": 1450}},
                "i2": {"new": {"name": "veth1", "type": "", "ofport_request": ["set", []]}},
                "i3": {"new": {"name": "gre0", "type": "gre"}}},
            // Not listed by the root row: ignored.
            "Bridge ": {},
        }));
        r
    }

    #[test]
    fn inactivity_probes_are_read_as_ovs_reads_them() {
        for (ms, secs) in [
            (0, 0),
            (999, 0),
            (1000, 5),
            (5999, 5),
            (7000, 7),
            (60_000, 60),
        ] {
            assert_eq!(probe_interval(ms), Duration::from_secs(secs), "{ms} ms");
        }
    }

    #[test]
    fn reads_flow_limits_and_controller_rate_limits() {
        let mut r = replica();
        r.apply(&json!({
            "Bridge": {"b0": {"new": {
                "name": "br0", "fail_mode": "secure", "ports": ["set", []],
                "controller": ["set", [["uuid", "c0"], ["uuid", "c1"]]],
                "flow_tables": ["map", [[0, ["uuid", "t0"]], [7, ["uuid", "t1"]],
                                        [300, ["uuid", "t0"]], [9, ["uuid", "t2"]]]],
                "other_config": ["map", []]}}},
            "Controller": {
                "c0": {"new": {"target": "tcp:10.0.0.1:6653", "controller_rate_limit": 100,
                               "controller_burst_limit": ["set", []],
                               "inactivity_probe": 1500}},
                "c1": {"new": {"target": "ptcp:6653", "controller_rate_limit": ["set", []],
                               "inactivity_probe": ["set", []]}}},
            "Flow_Table": {
                "t0": {"new": {"flow_limit": 10, "overflow_policy": "refuse"}},
                "t1": {"new": {"flow_limit": ["set", [5]], "overflow_policy": "evict"}},
                "t2": {"new": {"flow_limit": ["set", []]}}},
        }));
        let b = &read(&r).bridges["br0"];
        // Table 300 does not exist; a row without flow_limit is no limit.
        assert_eq!(
            b.flow_limits.iter().collect::<Vec<_>>(),
            [(&0, &(10, false)), (&7, &(5, true))]
        );
        // 1500 ms is 1 s to OVS, raised to its 5 s floor; unset is the
        // default.
        assert_eq!(
            b.probes.iter().collect::<Vec<_>>(),
            [(&"tcp:10.0.0.1:6653".to_string(), &Duration::from_secs(5))]
        );
        // OVS's default burst: a quarter of the rate.
        assert_eq!(
            b.packet_in_limits.iter().collect::<Vec<_>>(),
            [(
                &"tcp:10.0.0.1:6653".to_string(),
                &PacketInLimit {
                    rate: 100,
                    burst: 25
                }
            )]
        );
    }

    #[test]
    fn reads_mirrors_by_port_name_and_refuses_vlan_mirroring() {
        let mut r = replica();
        r.apply(&json!({
            "Bridge": {"b0": {"new": {
                "name": "br0", "fail_mode": "secure",
                "ports": ["set", [["uuid", "p1"], ["uuid", "p2"]]],
                "mirrors": ["set", [["uuid", "m0"], ["uuid", "m1"], ["uuid", "m2"]]],
                "controller": ["set", []], "other_config": ["map", []]}}},
            "Mirror": {
                "m0": {"new": {"name": "m_veth1", "select_all": false,
                               "select_src_port": ["uuid", "p2"],
                               "select_dst_port": ["set", [["uuid", "p2"]]],
                               "select_vlan": ["set", []],
                               "output_port": ["uuid", "p1"], "output_vlan": ["set", []]}},
                "m1": {"new": {"name": "vlan", "select_all": true,
                               "output_vlan": 10, "output_port": ["set", []]}},
                "m2": {"new": {"name": "nowhere", "select_all": true,
                               "output_port": ["set", []]}}},
        }));
        let m = &read(&r).bridges["br0"].mirrors;
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].name, "m_veth1");
        let veth1: BTreeSet<String> = ["veth1".to_string()].into();
        assert_eq!(
            m[0].select,
            dataplane::mirror::Selection {
                all: false,
                src: veth1.clone(),
                dst: veth1
            }
        );
        assert_eq!(m[0].output, Ok("tun0".to_string()));
        assert!(m[1].select.all);
        assert_eq!(m[1].output, Err(RowError::MirrorOutputVlan));
        assert_eq!(m[2].output, Err(RowError::MirrorNoOutput));
        assert_eq!(
            m[1].output.as_ref().unwrap_err().to_string(),
            "output_vlan is not supported by xbr (mirror to an output_port)"
        );
    }

    #[test]
    fn reads_the_pmd_cpu_mask() {
        let mut r = replica();
        assert_eq!(read(&r).pmd_cpus, None);
        let root = |mask: &str| {
            json!({"Open_vSwitch": {"root": {"new": {
                "bridges": ["uuid", "b0"], "next_cfg": 8,
                "other_config": ["map", [["pmd-cpu-mask", mask]]]}}}})
        };
        r.apply(&root("0x6"));
        assert_eq!(read(&r).pmd_cpus, Some(Ok(vec![1, 2])));
        r.apply(&root("zz"));
        let bad = read(&r).pmd_cpus.unwrap().unwrap_err();
        assert!(
            matches!(&bad, RowError::PmdCpuMask(CpuError::BadMask { mask, .. }) if mask == "zz"),
            "{bad:?}"
        );
        assert!(
            bad.to_string().contains("not a hexadecimal number"),
            "{bad}"
        );
    }

    #[test]
    fn reads_flow_restore_wait_as_ovs_vswitchd_does() {
        let mut r = replica();
        assert!(!read(&r).flow_restore_wait);
        let root = |v: &str| {
            json!({"Open_vSwitch": {"root": {"new": {
                "bridges": ["uuid", "b0"], "next_cfg": 8,
                "other_config": ["map", [["flow-restore-wait", v]]]}}}})
        };
        r.apply(&root("TRUE"));
        assert!(read(&r).flow_restore_wait);
        // smap_get_bool: anything but "true" is false.
        r.apply(&root("yes"));
        assert!(!read(&r).flow_restore_wait);
    }

    #[test]
    fn reads_xdp_peer_gro_and_xdp_redirect() {
        use dataplane::ports::redirect::RedirectMode;
        let mut r = replica();
        let d = read(&r);
        assert_eq!(d.bridges["br0"].xdp_peer_gro, None);
        let veth1 = |d: &Desired| d.bridges["br0"].ifaces["veth1"].spec.clone();
        assert_eq!(veth1(&d).unwrap().xdp_redirect, RedirectMode::Auto);
        let bridge = |v: &str| {
            json!({"Bridge": {"b0": {"new": {
                "name": "br0", "fail_mode": "secure",
                "ports": ["set", [["uuid", "p2"]]],
                "controller": ["set", []],
                "other_config": ["map", [["xdp-peer-gro", v]]]}}}})
        };
        r.apply(&bridge("false"));
        assert_eq!(read(&r).bridges["br0"].xdp_peer_gro, Some(Ok(false)));
        r.apply(&bridge("maybe"));
        let bad = read(&r).bridges["br0"]
            .xdp_peer_gro
            .clone()
            .unwrap()
            .unwrap_err();
        assert_eq!(bad, RowError::XdpPeerGro("maybe".into()));
        assert!(bad.to_string().contains("not true or false"), "{bad}");
        let iface = |v: &str| {
            json!({"Interface": {"i2": {"new": {"name": "veth1", "type": "",
                "options": ["map", [["xdp_redirect", v]]]}}}})
        };
        r.apply(&iface("off"));
        assert_eq!(veth1(&read(&r)).unwrap().xdp_redirect, RedirectMode::Off);
        r.apply(&iface("sometimes"));
        let bad = veth1(&read(&r)).unwrap_err();
        assert_eq!(
            bad,
            RowError::XdpRedirect {
                iface: "veth1".into(),
                value: "sometimes".into()
            }
        );
        assert!(bad.to_string().contains("not auto, on or off"), "{bad}");
    }

    #[test]
    fn reads_bridges_and_interfaces() {
        let d = read(&replica());
        assert_eq!(d.root, Some(("root".into(), 7)));
        let b = &d.bridges["br0"];
        assert!(!b.standalone);
        let local = b.ifaces["br0"].spec.as_ref().unwrap();
        assert_eq!(
            (local.ofport, local.port_type),
            (Some(OFPP_LOCAL), PortType::Internal)
        );
        let tun0 = b.ifaces["tun0"].spec.as_ref().unwrap();
        assert_eq!((tun0.ofport, tun0.mtu_request), (Some(2), Some(1450)));
        let veth = b.ifaces["veth1"].spec.as_ref().unwrap();
        assert_eq!((veth.ofport, veth.port_type), (None, PortType::System));
        let gre = b.ifaces["gre0"].spec.as_ref().unwrap_err();
        assert!(
            matches!(gre, RowError::InterfaceType { kind, .. } if kind == "gre"),
            "{gre:?}"
        );
        assert!(gre.to_string().contains("'gre' is not supported"), "{gre}");
    }

    #[test]
    fn qos_columns() {
        let mut r = replica();
        r.apply(&json!({
            "QoS": {"q1": {"new": {"type": "linux-htb",
                                   "other_config": ["map", [["max-rate", "10000000"]]]}},
                    "q2": {"new": {"type": "linux-hfsc", "other_config": ["map", []]}}},
            "Port": {"p2": {"new": {"name": "veth1", "interfaces": ["uuid", "i2"],
                                    "qos": ["uuid", "q1"]}},
                     "p1": {"new": {"name": "tun0", "interfaces": ["uuid", "i1"],
                                    "qos": ["uuid", "q2"]}}},
            "Interface": {"i2": {"new": {"name": "veth1", "type": "",
                                         "ingress_policing_rate": 5000,
                                         "ingress_policing_burst": 500}}},
        }));
        let d = read(&r);
        let veth = &d.bridges["br0"].ifaces["veth1"].qos;
        assert_eq!(
            (veth.ingress_kbps, veth.ingress_burst_kb, veth.egress_bps),
            (5000, 500, 10_000_000)
        );
        assert_eq!(veth.error, None);
        let tun0 = &d.bridges["br0"].ifaces["tun0"].qos;
        assert_eq!(tun0.error, Some(RowError::QosType("linux-hfsc".into())));
    }

    #[test]
    fn vxlan_options_and_underlay() {
        let opts = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        };
        let fixed = vxlan_options(&opts(&[("remote_ip", "10.0.0.1")])).unwrap_err();
        assert_eq!(fixed, RowError::VxlanRemoteIp);
        assert!(fixed.to_string().contains("remote_ip=flow"), "{fixed}");
        let bad = vxlan_options(&opts(&[("remote_ip", "flow"), ("dst_port", "x")])).unwrap_err();
        assert_eq!(bad, RowError::VxlanDstPort("x".into()));
        let none = vxlan_options(&opts(&[("key", "flow")])).unwrap_err();
        assert_eq!(none, RowError::VxlanNoRemoteIp);
        let ok = vxlan_options(&opts(&[("remote_ip", "flow"), ("local_ip", "192.0.2.77")]));
        assert_eq!(ok, Ok((4789, Some("192.0.2.77".parse().unwrap()))));
        let nohost = dataplane::vxlan::underlay::resolve(
            Some("192.0.2.77".parse().unwrap()),
            &BTreeSet::new(),
        )
        .unwrap_err();
        assert!(
            nohost.to_string().contains("no interface holds"),
            "{nohost}"
        );
    }
}
