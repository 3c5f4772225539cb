//! The ports as the control plane and the packet threads share them: the
//! configuration bits PORT_MOD sets, the counters the packet threads
//! publish, and what OpenFlow says about a port.

use ofproto::PortInfo;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
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

/// Counters of one port. The packet thread that owns the port stores its
/// running totals in the fields; other packet threads add what they
/// counted for it (XDP cache hits of entries they installed that leave
/// by the port, packets they could not hand off to it) to the credits.
/// Read the transmit side with the methods, which add both.
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
    credited_tx_packets: AtomicU64,
    credited_tx_bytes: AtomicU64,
    credited_tx_dropped: AtomicU64,
}

impl PortStats {
    pub fn tx_packets(&self) -> u64 {
        self.tx_packets.load(Relaxed) + self.credited_tx_packets.load(Relaxed)
    }

    pub fn tx_bytes(&self) -> u64 {
        self.tx_bytes.load(Relaxed) + self.credited_tx_bytes.load(Relaxed)
    }

    pub fn tx_dropped(&self) -> u64 {
        self.tx_dropped.load(Relaxed) + self.credited_tx_dropped.load(Relaxed)
    }

    /// A packet thread other than the owner adds what it counted.
    pub fn credit_tx(&self, packets: u64, bytes: u64, dropped: u64) {
        if packets != 0 {
            self.credited_tx_packets.fetch_add(packets, Relaxed);
            self.credited_tx_bytes.fetch_add(bytes, Relaxed);
        }
        if dropped != 0 {
            self.credited_tx_dropped.fetch_add(dropped, Relaxed);
        }
    }
}

/// What the control plane knows about a port; shared with the packet thread.
pub struct PortMeta {
    pub ofport: u32,
    pub name: String,
    pub hw_addr: [u8; 6],
    /// OFPPC_* bits, set by PORT_MOD, read by the packet thread per batch.
    pub config: AtomicU32,
    /// The device's carrier (up and IFF_LOWER_UP), kept by the bridge's
    /// carrier watcher (`ports/carrier.rs`) and read by the packet thread
    /// per round: a port without it is not live for fast-failover groups.
    /// True for ports without a device of their own (tunnels).
    pub link_up: AtomicBool,
    pub stats: PortStats,
    pub created: Instant,
    /// Rate limits, set by the control plane (OVSDB), read per round.
    pub qos: crate::qos::QosConfig,
    /// What backs the port, as `ovs-appctl dpif/show` gives a netdev's
    /// type and configuration: `afxdp`, `tap`, `internal` (a veth pair),
    /// `vxlan: dst_port=4789, ...`; empty when not said.
    pub kind: String,
    /// Whether the XDP flow cache may redirect to the port's device, and
    /// why (ports served by AF_XDP; `None` for others).
    pub redirect: Option<Arc<crate::ports::redirect::Readiness>>,
}

impl PortMeta {
    pub fn new(ofport: u32, name: String, hw_addr: [u8; 6]) -> Self {
        PortMeta {
            ofport,
            name,
            hw_addr,
            config: AtomicU32::new(0),
            link_up: AtomicBool::new(true),
            stats: PortStats::default(),
            created: Instant::now(),
            qos: Default::default(),
            kind: String::new(),
            redirect: None,
        }
    }

    /// The port, whose redirect readiness is `r` (see the field).
    pub fn with_redirect(mut self, r: Arc<crate::ports::redirect::Readiness>) -> Self {
        self.redirect = Some(r);
        self
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
        // As OVS: LINK_DOWN is the carrier, LIVE a port that is up and
        // has it (xbr's PORT_DOWN does not take the device down, so it
        // counts as no carrier here, as it does for the packet thread).
        let down = config & port_config::PORT_DOWN != 0 || !self.link_up.load(Relaxed);
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
