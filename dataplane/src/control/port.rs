//! The ports as the control plane and the packet threads share them: the
//! configuration bits PORT_MOD sets, the counters the packet threads
//! publish, and what OpenFlow says about a port.

use ofproto::PortInfo;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::time::Instant;

/// OFPPC_* port config bits xbr honours.
pub mod port_config {
    pub const PORT_DOWN: u32 = 1 << 0;
    pub const NO_RECV: u32 = 1 << 2;
    pub const NO_FWD: u32 = 1 << 5;
    pub const NO_PACKET_IN: u32 = 1 << 6;
    pub const ALL: u32 = PORT_DOWN | NO_RECV | NO_FWD | NO_PACKET_IN;
}

/// OFPPS_LIVE and OFPPS_LINK_DOWN.
const OFPPS_LINK_DOWN: u32 = 1 << 0;
const OFPPS_LIVE: u32 = 1 << 2;

/// Counters of one port, published by the packet thread.
#[derive(Default)]
pub struct PortStats {
    pub rx_packets: AtomicU64,
    pub rx_bytes: AtomicU64,
    pub rx_dropped: AtomicU64,
    pub tx_packets: AtomicU64,
    pub tx_bytes: AtomicU64,
    pub tx_dropped: AtomicU64,
    pub rx_errors: AtomicU64,
    pub tx_errors: AtomicU64,
}

/// What the control plane knows about a port; shared with the packet thread.
pub struct PortMeta {
    pub ofport: u32,
    pub name: String,
    pub hw_addr: [u8; 6],
    /// OFPPC_* bits, set by PORT_MOD, read by the packet thread per batch.
    pub config: AtomicU32,
    pub stats: PortStats,
    pub created: Instant,
    /// Rate limits, set by the control plane (OVSDB), read per round.
    pub qos: crate::qos::QosConfig,
    /// What backs the port, as `ovs-appctl dpif/show` gives a netdev's
    /// type and configuration: `afxdp`, `tap`, `internal` (a veth pair),
    /// `vxlan: dst_port=4789, ...`; empty when not said.
    pub kind: String,
}

impl PortMeta {
    pub fn new(ofport: u32, name: String, hw_addr: [u8; 6]) -> Self {
        PortMeta {
            ofport,
            name,
            hw_addr,
            config: AtomicU32::new(0),
            stats: PortStats::default(),
            created: Instant::now(),
            qos: Default::default(),
            kind: String::new(),
        }
    }

    /// The port, said to be backed by `kind` (see the field).
    pub fn with_kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = kind.into();
        self
    }
}

impl PortMeta {
    /// The port as OpenFlow describes it (features, PORT_STATUS).
    pub fn info(&self) -> PortInfo {
        let config = self.config.load(Relaxed);
        let down = config & port_config::PORT_DOWN != 0;
        PortInfo {
            port_no: self.ofport,
            hw_addr: self.hw_addr,
            name: self.name.clone(),
            config,
            state: if down { OFPPS_LINK_DOWN } else { OFPPS_LIVE },
            curr_speed: 10_000_000,
            max_speed: 0,
        }
    }
}
