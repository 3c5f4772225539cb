//! OpenFlow 1.3 wire codec and connection handling for xbr.
//!
//! [`wire`] encodes and decodes messages; [`Bridge`] holds the
//! authoritative flow tables and applies decoded mods; [`Server`] accepts
//! `ovs-ofctl` connections on the bridge's management socket and serves
//! each on its own thread.

#![forbid(unsafe_code)]

mod bridge;
mod bundle;
mod connection;
pub mod controller_status;
pub mod counters;
mod datapath;
mod error;
mod expiry;
mod fail_mode;
mod fail_open;
pub mod limits;
mod monitor;
pub mod notify;
mod outbox;
pub mod packet_in_queue;
pub mod roles;
mod server;
pub mod tls;
mod versions;
pub mod wire;

pub use bridge::Bridge;
pub use datapath::{Datapath, PacketOutError, PortCounters, PortInfo, PortModError};
pub use error::OfprotoError;
pub use server::Server;
