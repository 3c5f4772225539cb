//! Why a database row cannot be carried out as written. `desired.rs`
//! finds these while it reads the replica; the reconciler writes their
//! text where ovs-vswitchd writes its own (an Interface's `error`
//! column) or logs it (settings of the root row, a Bridge or a Mirror)
//! and goes on with the rest of the database. The values are compared
//! between passes, so that an unchanged refusal is logged once.

use dataplane::cpus::CpuError;
use std::net::SocketAddr;
use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RowError {
    // The root row's other_config.
    #[error(transparent)]
    PmdCpuMask(#[from] CpuError),
    #[error("metrics address `{0}`: expected IP:PORT (e.g. 127.0.0.1:9476 or [::1]:9476)")]
    MetricsAddress(String),

    // A Bridge's other_config.
    #[error("other_config:xdp-peer-gro={0} is not true or false")]
    XdpPeerGro(String),

    // Ports and interfaces.
    #[error("bonds (ports with several interfaces) are not supported by xbr")]
    Bond,
    #[error("{iface}: interface type '{kind}' is not supported by xbr (system, internal, vxlan)")]
    InterfaceType { iface: String, kind: String },
    #[error("{iface}: mtu_request {mtu} is out of range")]
    MtuRange { iface: String, mtu: i64 },
    #[error("{iface}: options:internal_backend '{value}' is not tap or veth")]
    InternalBackend { iface: String, value: String },
    #[error("{iface}: options:xdp_redirect={value} is not auto, on or off")]
    XdpRedirect { iface: String, value: String },
    #[error("vxlan: only options:remote_ip=flow is supported by xbr")]
    VxlanRemoteIp,
    #[error("vxlan: options:remote_ip=flow is required")]
    VxlanNoRemoteIp,
    #[error("vxlan: only options:key=flow is supported by xbr")]
    VxlanKey,
    #[error("vxlan: option '{0}' is not supported by xbr")]
    VxlanOption(String),
    #[error("vxlan: dst_port '{0}' is not a UDP port")]
    VxlanDstPort(String),
    #[error("vxlan: local_ip '{0}' is not an IPv4 address")]
    VxlanLocalIp(String),

    // A Port's QoS.
    #[error("QoS type '{0}' is not supported by xbr (linux-htb is)")]
    QosType(String),
    #[error("QoS max-rate '{0}' is not a number of bit/s")]
    QosMaxRate(String),

    // A Mirror.
    #[error("output_vlan is not supported by xbr (mirror to an output_port)")]
    MirrorOutputVlan,
    #[error("select_vlan is not supported by xbr")]
    MirrorSelectVlan,
    #[error("no output_port (xbr mirrors to a port only)")]
    MirrorNoOutput,
    #[error("output_port has no interface")]
    MirrorOutputWithoutInterface,
}

impl RowError {
    /// `other_config:xbr-metrics`'s value as an address.
    pub fn metrics_address(value: &str) -> Result<SocketAddr, RowError> {
        crate::metrics::parse_addr(value).map_err(|_| RowError::MetricsAddress(value.to_string()))
    }
}
