//! Command-line configuration of a bridge: port specs and listen targets.
//!
//! `--port NAME[=OFPORT][,type=TYPE][,key=value...]` mirrors ovs-vsctl's
//! Interface columns (`ofport_request`, `type`, `mtu_request`, `mac`), so a
//! node's configuration reads the same in both tools. Everything is checked
//! here, before anything is attached, so a bad spec never leaves state
//! behind.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use thiserror::Error;

/// Highest ofport OVS hands out (`ofp_port` 0xfeff; above are reserved).
pub const MAX_OFPORT: u32 = 0xfeff;
/// Linux interface names are at most 15 bytes.
pub const IFNAME_MAX: usize = 15;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("port spec '{spec}': {reason}")]
    BadPortSpec { spec: String, reason: String },
    #[error("port '{0}' is given twice")]
    DuplicatePort(String),
    #[error("ofport {ofport} is requested by both '{first}' and '{second}'")]
    DuplicateOfport {
        ofport: u32,
        first: String,
        second: String,
    },
    #[error("--listen '{0}': expected ptcp:PORT[:IP] or pssl:PORT[:IP]")]
    BadListen(String),
    #[error("--controller '{0}': expected tcp:IP[:PORT] or ssl:IP[:PORT]")]
    BadController(String),
    #[error("uplink '{0}' is also given as a --port; an uplink is not an OpenFlow port")]
    UplinkIsPort(String),
    #[error("uplink '{0}' serves two vxlan ports; give each its own uplink")]
    UplinkShared(String),
    #[error("no free ofport left")]
    OfportsExhausted,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortType {
    /// An existing netdev, attached through XDP and AF_XDP.
    System,
    /// A device xbr creates for the host stack, like an OVS internal port:
    /// a veth pair or a TAP ([`InternalBackend`]).
    Internal,
    /// A flow-based VXLAN tunnel (`options:remote_ip=flow key=flow`) over
    /// an uplink netdev; see [`VxlanSpec`].
    Vxlan,
}

/// What backs an internal port (`internal_backend=tap|veth`); see the
/// "Internal ports" in docs/ports.md.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum InternalBackend {
    /// A TAP device: one read(2)/write(2) per frame; vanishes with xbr.
    Tap,
    /// A veth pair whose far end xbr serves through AF_XDP (`hostveth`).
    /// The default: pod <-> host traffic through it measured 1.5-3.7x the
    /// TAP's (`labbench --tun0`, bench/RESULTS.md).
    #[default]
    Veth,
}

impl InternalBackend {
    /// Parses an `internal_backend` value.
    pub fn parse(value: &str) -> Option<InternalBackend> {
        match value {
            "tap" => Some(InternalBackend::Tap),
            "veth" => Some(InternalBackend::Veth),
            _ => None,
        }
    }
}

/// VXLAN's IANA UDP port (RFC 7348), OVS's default `dst_port`.
pub const VXLAN_DEFAULT_PORT: u16 = 4789;

/// The settings of a `type=vxlan` port. The uplink is attached with XDP
/// and AF_XDP like a system port, but it is not an OpenFlow port: only
/// VXLAN to `local_ip:dst_port` goes to xbr, the rest stays with the kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VxlanSpec {
    pub dst_port: u16,
    pub local_ip: Ipv4Addr,
    pub uplink: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortSpec {
    pub name: String,
    /// Requested OpenFlow port number; resolved by [`assign_ofports`].
    pub ofport: Option<u32>,
    pub port_type: PortType,
    pub mtu_request: Option<u32>,
    pub mac: Option<[u8; 6]>,
    /// Set when `port_type` is [`PortType::Vxlan`] (always from the
    /// command line). From OVSDB, `None` for a vxlan port whose underlay
    /// is not resolved yet (no route, no address): the port is numbered
    /// and drops what is output to it until the underlay is there.
    pub vxlan: Option<VxlanSpec>,
    /// `xdp_redirect=auto|on|off` (system and vxlan ports): whether the
    /// XDP flow cache may forward to the interface (a vxlan port's
    /// uplink; encapsulated). `auto`, the default, follows what the
    /// kernel says the device takes: a veth takes redirected frames only
    /// while its peer has GRO or an XDP program, and otherwise drops them
    /// without a trace (see `ports::redirect`); `on` vouches for the
    /// device, `off` keeps the cache from forwarding to it.
    pub xdp_redirect: crate::ports::redirect::RedirectMode,
    /// What backs a `type=internal` port; ignored for other types.
    pub internal_backend: InternalBackend,
}

fn bad(spec: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::BadPortSpec {
        spec: spec.to_string(),
        reason: reason.into(),
    }
}

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut out = [0u8; 6];
    let mut parts = s.split(':');
    for byte in out.iter_mut() {
        let p = parts.next()?;
        if p.is_empty() || p.len() > 2 {
            return None;
        }
        *byte = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(out)
}

impl std::str::FromStr for PortSpec {
    type Err = ConfigError;

    fn from_str(spec: &str) -> Result<Self, ConfigError> {
        let mut items = spec.split(',');
        let head = items.next().unwrap_or_default();
        let (name, ofport) = match head.split_once('=') {
            Some((n, p)) => {
                let port: u32 = p
                    .parse()
                    .map_err(|_| bad(spec, format!("ofport '{p}' is not a number")))?;
                if port == 0 || port > MAX_OFPORT {
                    return Err(bad(
                        spec,
                        format!("ofport {port} is outside 1-{MAX_OFPORT}"),
                    ));
                }
                (n, Some(port))
            }
            None => (head, None),
        };
        if name.is_empty() {
            return Err(bad(spec, "missing interface name"));
        }
        if name.len() > IFNAME_MAX || name.contains(['/', ' ', ':']) || name == "." || name == ".."
        {
            return Err(bad(spec, format!("'{name}' is not a valid interface name")));
        }
        let mut port = PortSpec {
            name: name.to_string(),
            ofport,
            port_type: PortType::System,
            mtu_request: None,
            mac: None,
            vxlan: None,
            xdp_redirect: Default::default(),
            internal_backend: InternalBackend::default(),
        };
        let mut backend = None;
        let (mut dst_port, mut local_ip, mut uplink) = (None, None, None);
        for item in items {
            let Some((key, value)) = item.split_once('=') else {
                return Err(bad(spec, format!("'{item}' is not key=value")));
            };
            match key {
                "type" => {
                    port.port_type = match value {
                        "" | "system" => PortType::System,
                        "internal" => PortType::Internal,
                        "vxlan" => PortType::Vxlan,
                        other => {
                            return Err(bad(
                                spec,
                                format!(
                                "unknown port type '{other}' (supported: system, internal, vxlan)"
                            ),
                            ))
                        }
                    }
                }
                "xdp_redirect" => {
                    port.xdp_redirect = crate::ports::redirect::RedirectMode::parse(value)
                        .ok_or_else(|| {
                            bad(
                                spec,
                                format!("xdp_redirect '{value}' is not auto, on or off"),
                            )
                        })?
                }
                "mtu_request" => {
                    let mtu: u32 = value
                        .parse()
                        .ok()
                        .filter(|m| (68..=9216).contains(m))
                        .ok_or_else(|| {
                            bad(spec, format!("mtu_request '{value}' not in 68-9216"))
                        })?;
                    port.mtu_request = Some(mtu);
                }
                "mac" => {
                    let mac = parse_mac(value)
                        .ok_or_else(|| bad(spec, format!("mac '{value}' is not a MAC address")))?;
                    port.mac = Some(mac);
                }
                "internal_backend" => {
                    backend = Some(InternalBackend::parse(value).ok_or_else(|| {
                        bad(
                            spec,
                            format!("internal_backend '{value}' is not tap or veth"),
                        )
                    })?);
                }
                "ofport_request" => {
                    return Err(bad(spec, "give the ofport as NAME=OFPORT"));
                }
                "dst_port" => {
                    let p: u16 =
                        value.parse().ok().filter(|p| *p != 0).ok_or_else(|| {
                            bad(spec, format!("dst_port '{value}' not in 1-65535"))
                        })?;
                    dst_port = Some(p);
                }
                "local_ip" => {
                    let ip: Ipv4Addr = value.parse().map_err(|_| {
                        bad(spec, format!("local_ip '{value}' is not an IPv4 address"))
                    })?;
                    if ip.is_unspecified() || ip.is_multicast() || ip.is_broadcast() {
                        return Err(bad(spec, format!("local_ip {ip} is not a unicast address")));
                    }
                    local_ip = Some(ip);
                }
                "uplink" => {
                    if value.is_empty()
                        || value.len() > IFNAME_MAX
                        || value.contains(['/', ' ', ':'])
                        || value == "."
                        || value == ".."
                    {
                        return Err(bad(
                            spec,
                            format!("uplink '{value}' is not a valid interface name"),
                        ));
                    }
                    uplink = Some(value.to_string());
                }
                other => return Err(bad(spec, format!("unknown key '{other}'"))),
            }
        }
        if port.port_type == PortType::Vxlan {
            if port.mac.is_some() || port.mtu_request.is_some() {
                return Err(bad(
                    spec,
                    "mac and mtu_request do not apply to type=vxlan (the uplink's are used)",
                ));
            }
            let local_ip = local_ip.ok_or_else(|| bad(spec, "type=vxlan needs local_ip=IPV4"))?;
            let uplink = uplink.ok_or_else(|| bad(spec, "type=vxlan needs uplink=IFNAME"))?;
            if uplink == port.name {
                return Err(bad(spec, "the uplink must be another interface"));
            }
            port.vxlan = Some(VxlanSpec {
                dst_port: dst_port.unwrap_or(VXLAN_DEFAULT_PORT),
                local_ip,
                uplink,
            });
        } else if dst_port.is_some() || local_ip.is_some() || uplink.is_some() {
            return Err(bad(
                spec,
                "dst_port, local_ip and uplink are only supported on type=vxlan ports",
            ));
        }
        if port.xdp_redirect != Default::default() && port.port_type == PortType::Internal {
            return Err(bad(
                spec,
                "xdp_redirect applies to type=system and type=vxlan ports only",
            ));
        }
        if let Some(b) = backend {
            if port.port_type != PortType::Internal {
                return Err(bad(
                    spec,
                    "internal_backend applies to type=internal ports only",
                ));
            }
            port.internal_backend = b;
        }
        if port.port_type == PortType::System && (port.mac.is_some() || port.mtu_request.is_some())
        {
            return Err(bad(
                spec,
                "mac and mtu_request are only supported on type=internal ports",
            ));
        }
        Ok(port)
    }
}

/// Rejects duplicate names and ofports, then gives every port without a
/// requested number the lowest free one from 1, in command-line order, as
/// OVS does.
pub fn assign_ofports(ports: &mut [PortSpec]) -> Result<(), ConfigError> {
    let mut names = HashSet::new();
    let mut taken: Vec<(u32, &str)> = Vec::new();
    for p in ports.iter() {
        if !names.insert(p.name.as_str()) {
            return Err(ConfigError::DuplicatePort(p.name.clone()));
        }
        if let Some(n) = p.ofport {
            if let Some((_, first)) = taken.iter().find(|(t, _)| *t == n) {
                return Err(ConfigError::DuplicateOfport {
                    ofport: n,
                    first: first.to_string(),
                    second: p.name.clone(),
                });
            }
            taken.push((n, &p.name));
        }
    }
    let mut uplinks = HashSet::new();
    for v in ports.iter().filter_map(|p| p.vxlan.as_ref()) {
        if names.contains(v.uplink.as_str()) {
            return Err(ConfigError::UplinkIsPort(v.uplink.clone()));
        }
        if !uplinks.insert(v.uplink.as_str()) {
            return Err(ConfigError::UplinkShared(v.uplink.clone()));
        }
    }
    let mut used: HashSet<u32> = taken.iter().map(|(n, _)| *n).collect();
    let mut next = 1;
    for p in ports.iter_mut() {
        if p.ofport.is_none() {
            while used.contains(&next) {
                next += 1;
            }
            if next > MAX_OFPORT {
                return Err(ConfigError::OfportsExhausted);
            }
            p.ofport = Some(next);
            used.insert(next);
        }
    }
    Ok(())
}

/// An OpenFlow target as OVS names it: an address, over TCP (`tcp:`,
/// `ptcp:`) or TLS (`ssl:`, `pssl:`; see docs/tls.md). Whether it is
/// active or passive is where it is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Target {
    pub addr: SocketAddr,
    pub tls: bool,
}

impl Target {
    pub fn tcp(addr: SocketAddr) -> Target {
        Target { addr, tls: false }
    }
}

/// Parses `ptcp:PORT[:IP]` or `pssl:PORT[:IP]` (IP defaults to
/// 127.0.0.1, as a node only needs local access).
pub fn parse_listen(s: &str) -> Result<Target, ConfigError> {
    let err = || ConfigError::BadListen(s.to_string());
    let (rest, tls) = match (s.strip_prefix("ptcp:"), s.strip_prefix("pssl:")) {
        (Some(r), _) => (r, false),
        (_, Some(r)) => (r, true),
        _ => return Err(err()),
    };
    let (port, ip) = match rest.split_once(':') {
        Some((p, ip)) => (p, ip.parse::<IpAddr>().map_err(|_| err())?),
        None => (rest, IpAddr::V4(Ipv4Addr::LOCALHOST)),
    };
    let port: u16 = port.parse().map_err(|_| err())?;
    Ok(Target {
        addr: SocketAddr::new(ip, port),
        tls,
    })
}

/// OpenFlow's IANA port, OVS's default for `tcp:IP` controller targets.
pub const OFP_TCP_PORT: u16 = 6653;

/// Parses a controller target as OVS writes it: `tcp:IP[:PORT]` or
/// `ssl:IP[:PORT]` (IPv6 in brackets when a port follows; OVS's default
/// port 6653 for both).
pub fn parse_controller(s: &str) -> Result<Target, ConfigError> {
    let err = || ConfigError::BadController(s.to_string());
    let (rest, tls) = match (s.strip_prefix("tcp:"), s.strip_prefix("ssl:")) {
        (Some(r), _) => (r, false),
        (_, Some(r)) => (r, true),
        _ => return Err(err()),
    };
    let addr = match rest.parse::<IpAddr>() {
        Ok(ip) => SocketAddr::new(ip, OFP_TCP_PORT),
        Err(_) => rest.parse::<SocketAddr>().map_err(|_| err())?,
    };
    Ok(Target { addr, tls })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(s: &str) -> Result<PortSpec, ConfigError> {
        s.parse()
    }

    #[test]
    fn parses_specs() {
        let p = spec("veth1").unwrap();
        assert_eq!(
            (p.name.as_str(), p.ofport, p.port_type),
            ("veth1", None, PortType::System)
        );
        let p = spec("tun0=2,type=internal,mtu_request=1450,mac=0a:58:0a:80:00:01").unwrap();
        assert_eq!(p.ofport, Some(2));
        assert_eq!(p.port_type, PortType::Internal);
        assert_eq!(p.mtu_request, Some(1450));
        assert_eq!(p.mac, Some([0x0a, 0x58, 0x0a, 0x80, 0, 1]));
        assert_eq!(p.internal_backend, InternalBackend::Veth);
        let p = spec("tun0,type=internal,internal_backend=veth").unwrap();
        assert_eq!(p.internal_backend, InternalBackend::Veth);
        let p = spec("tun0,internal_backend=tap,type=internal").unwrap();
        assert_eq!(p.internal_backend, InternalBackend::Tap);
        let p = spec("vxlan0=1,type=vxlan,dst_port=4790,local_ip=10.0.0.11,uplink=eth0").unwrap();
        assert_eq!(p.port_type, PortType::Vxlan);
        assert_eq!(
            p.vxlan,
            Some(VxlanSpec {
                dst_port: 4790,
                local_ip: Ipv4Addr::new(10, 0, 0, 11),
                uplink: "eth0".into()
            })
        );
        let p = spec("vxlan0,type=vxlan,local_ip=10.0.0.11,uplink=eth0").unwrap();
        assert_eq!(p.vxlan.map(|v| v.dst_port), Some(VXLAN_DEFAULT_PORT));
    }

    #[test]
    fn rejects_bad_specs_with_a_reason() {
        for (s, needle) in [
            ("", "missing interface name"),
            ("=3", "missing interface name"),
            ("a=0", "outside"),
            ("a=x", "not a number"),
            ("a,type=geneve", "unknown port type 'geneve'"),
            ("a,foo=1", "unknown key 'foo'"),
            ("a,novalue", "not key=value"),
            ("averyveryverylongname", "not a valid interface name"),
            ("a,mac=zz", "not a MAC"),
            ("a,mtu_request=9", "not in 68-9216"),
            ("a,xdp_redirect=maybe", "not auto, on or off"),
            (
                "a,type=internal,xdp_redirect=on",
                "type=system and type=vxlan ports only",
            ),
            ("a,mac=00:11:22:33:44:55", "only supported on type=internal"),
            ("a,type=internal,internal_backend=xdp", "not tap or veth"),
            ("a,internal_backend=veth", "type=internal ports only"),
            ("v,type=vxlan,uplink=eth0", "needs local_ip"),
            ("v,type=vxlan,local_ip=10.0.0.1", "needs uplink"),
            (
                "v,type=vxlan,local_ip=10.0.0.300,uplink=eth0",
                "not an IPv4",
            ),
            ("v,type=vxlan,local_ip=0.0.0.0,uplink=eth0", "not a unicast"),
            (
                "v,type=vxlan,local_ip=10.0.0.1,uplink=eth0,dst_port=0",
                "not in 1-65535",
            ),
            (
                "v,type=vxlan,local_ip=10.0.0.1,uplink=eth0,dst_port=70000",
                "not in 1-65535",
            ),
            (
                "v,type=vxlan,local_ip=10.0.0.1,uplink=v",
                "another interface",
            ),
            (
                "v,type=vxlan,local_ip=10.0.0.1,uplink=a/b",
                "not a valid interface",
            ),
            (
                "v,type=vxlan,local_ip=10.0.0.1,uplink=e,mtu_request=1400",
                "do not apply",
            ),
            ("a,uplink=eth0", "only supported on type=vxlan"),
        ] {
            let e = spec(s).unwrap_err().to_string();
            assert!(e.contains(needle), "{s}: {e}");
        }
    }

    #[test]
    fn ofports_lowest_free_and_conflicts() {
        let mut ports: Vec<PortSpec> = ["a", "b=1", "c", "d=3", "e"]
            .iter()
            .map(|s| spec(s).unwrap())
            .collect();
        assign_ofports(&mut ports).unwrap();
        let got: Vec<_> = ports.iter().map(|p| p.ofport.unwrap()).collect();
        assert_eq!(got, vec![2, 1, 4, 3, 5]);
        let mut dup = vec![spec("a=1").unwrap(), spec("b=1").unwrap()];
        assert!(matches!(
            assign_ofports(&mut dup),
            Err(ConfigError::DuplicateOfport { ofport: 1, .. })
        ));
        let v = |s: &str| spec(&format!("{s},type=vxlan,local_ip=10.0.0.1,uplink=eth0")).unwrap();
        let mut both = vec![v("vx"), spec("eth0").unwrap()];
        assert_eq!(
            assign_ofports(&mut both),
            Err(ConfigError::UplinkIsPort("eth0".into()))
        );
        let mut shared = vec![v("vx1"), v("vx2")];
        assert_eq!(
            assign_ofports(&mut shared),
            Err(ConfigError::UplinkShared("eth0".into()))
        );
        let mut dup = vec![spec("a").unwrap(), spec("a=2").unwrap()];
        assert_eq!(
            assign_ofports(&mut dup),
            Err(ConfigError::DuplicatePort("a".into()))
        );
    }

    #[test]
    fn listen_targets() {
        assert_eq!(
            parse_listen("ptcp:6653").unwrap().addr.to_string(),
            "127.0.0.1:6653"
        );
        assert_eq!(
            parse_listen("ptcp:6653:0.0.0.0").unwrap().addr.to_string(),
            "0.0.0.0:6653"
        );
        let t = parse_listen("pssl:6653:0.0.0.0").unwrap();
        assert_eq!((t.addr.to_string().as_str(), t.tls), ("0.0.0.0:6653", true));
        assert!(!parse_listen("ptcp:6653").unwrap().tls);
        assert!(parse_listen("ssl:1").is_err());
        assert!(parse_listen("tcp:1").is_err());
        assert!(parse_listen("ptcp:99999").is_err());
    }

    #[test]
    fn controller_targets() {
        assert_eq!(
            parse_controller("tcp:10.0.0.1").unwrap().addr.to_string(),
            "10.0.0.1:6653"
        );
        assert_eq!(
            parse_controller("tcp:10.0.0.1:6633")
                .unwrap()
                .addr
                .to_string(),
            "10.0.0.1:6633"
        );
        assert_eq!(
            parse_controller("tcp:[::1]:6633").unwrap().addr.to_string(),
            "[::1]:6633"
        );
        let t = parse_controller("ssl:10.0.0.1").unwrap();
        assert_eq!(
            (t.addr.to_string().as_str(), t.tls),
            ("10.0.0.1:6653", true)
        );
        assert!(!parse_controller("tcp:10.0.0.1").unwrap().tls);
        for bad in [
            "10.0.0.1:6633",
            "pssl:10.0.0.1",
            "ssl:",
            "tcp:",
            "tcp:host:1",
            "tcp:1.2.3.4:x",
        ] {
            assert_eq!(
                parse_controller(bad),
                Err(ConfigError::BadController(bad.to_string()))
            );
        }
    }
}
