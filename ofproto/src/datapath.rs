//! The interface between the OpenFlow control plane and whatever forwards
//! packets (the dataplane crate in xbr, an in-memory double in tests).
//!
//! The control plane owns the authoritative [`flowtable::FlowTables`]; a
//! datapath only ever receives the [`Change`] lists those tables produce,
//! tagged with a sequence number so that a barrier can wait for them.

use crate::wire::err;
use flowtable::tables::Change;
use flowtable::Action;
use std::time::Duration;
use thiserror::Error;

/// One port as OFPMP_PORT_DESC describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortInfo {
    pub port_no: u32,
    pub hw_addr: [u8; 6],
    /// Truncated to 15 bytes on the wire (OFP_MAX_PORT_NAME_LEN - 1).
    pub name: String,
    /// OFPPC_* bits.
    pub config: u32,
    /// OFPPS_* bits.
    pub state: u32,
    /// kbps.
    pub curr_speed: u32,
    pub max_speed: u32,
}

/// One port's counters as OFPMP_PORT_STATS reports them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortCounters {
    pub port_no: u32,
    pub rx_packets: u64,
    pub tx_packets: u64,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    pub rx_dropped: u64,
    pub tx_dropped: u64,
    pub rx_errors: u64,
    pub tx_errors: u64,
    /// How long the port has existed.
    pub duration: Duration,
}

/// Why a PORT_MOD failed; each maps to an OFPET_PORT_MOD_FAILED code.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum PortModError {
    #[error("no such port")]
    BadPort,
    #[error("hardware address does not match the port's")]
    BadHwAddr,
    #[error("port mod failed: {0}")]
    Failed(String),
}

impl PortModError {
    /// OFPET_PORT_MOD_FAILED (7) and its code.
    pub fn ofp_error(&self) -> (u16, u16) {
        match self {
            PortModError::BadPort => (7, 0),   // OFPPMFC_BAD_PORT
            PortModError::BadHwAddr => (7, 1), // OFPPMFC_BAD_HW_ADDR
            PortModError::Failed(_) => (7, 4), // OFPPMFC_EPERM
        }
    }
}

/// What the control plane needs from the forwarding side. Every method is
/// called from connection threads, concurrently.
pub trait Datapath: Send + Sync + 'static {
    fn datapath_id(&self) -> u64;
    fn ports(&self) -> Vec<PortInfo>;
    /// Counters of one port, or of every port for `OFPP_ANY`. An unknown
    /// port yields an empty list.
    fn port_stats(&self, port_no: u32) -> Vec<PortCounters>;
    fn port_mod(
        &self,
        port_no: u32,
        hw_addr: [u8; 6],
        config: u32,
        mask: u32,
    ) -> Result<(), PortModError>;
    /// Hands pipeline changes to the packet threads; returns a sequence
    /// number, increasing with every call.
    fn publish(&self, changes: Vec<Change>) -> u64;
    /// Blocks until every packet thread applied everything up to `seq`
    /// (barrier semantics).
    fn sync(&self, seq: u64);
    /// Injects a controller's packet (PACKET_OUT): `data` as if received
    /// on `in_port` with the pipeline fields `metadata` set (OpenFlow
    /// 1.5), run through `actions`. Returns when it is queued; the packet
    /// threads execute it between batches.
    fn packet_out(
        &self,
        in_port: u32,
        metadata: Vec<(flowtable::Field, u64)>,
        actions: Vec<Action>,
        data: Vec<u8>,
    ) -> Result<(), PacketOutError>;
    /// Fail mode standalone with no controller connected: forward every
    /// packet as a MAC-learning switch (NORMAL) instead of by the flows,
    /// which are kept. `false` returns to the flows.
    fn set_fail_open(&self, on: bool);
    /// Brings counters kept outside the shared atomics (e.g. a kernel
    /// flow cache's) into them, before a statistics reply is built.
    /// Bounded; the default has nothing to collect.
    fn collect_stats(&self) {}
}

/// Why a PACKET_OUT could not be taken.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PacketOutError {
    #[error("packet of {0} bytes does not fit a frame")]
    TooBig(usize),
    #[error("the packet threads' queue is full")]
    Busy,
}

impl PacketOutError {
    pub fn ofp_error(&self) -> (u16, u16) {
        match self {
            // OFPBRC_BAD_LEN: the data cannot be carried.
            PacketOutError::TooBig(_) => (err::BAD_REQUEST, err::BRC_BAD_LEN),
            // OFPBRC_EPERM is what OVS answers when it cannot take more.
            PacketOutError::Busy => (err::BAD_REQUEST, err::BRC_EPERM),
        }
    }
}
