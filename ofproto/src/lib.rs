//! OpenFlow 1.3 wire codec and connection handling for xbr.
//!
//! [`wire`] encodes and decodes messages; [`Bridge`] holds the
//! authoritative flow tables and applies decoded mods; [`Server`] accepts
//! `ovs-ofctl` connections on the bridge's management socket and serves
//! each on its own thread.
//!
//! # Design
//!
//! One flow-mod's path: a connection thread (`connection/`) reads one
//! framed message, [`wire`] decodes it (any version from 1.0 to 1.5 into
//! one set of types; a malformed one is answered with the spec's or OVS's
//! error type and code), and the [`Bridge`] applies it to its
//! `flowtable::FlowTables` under its lock and, before releasing it, hands
//! the resulting change list to the [`Datapath`] with a sequence number.
//! A bundle (`bundle.rs`, the agent's only write path) queues decoded mods
//! per connection and commits them as one all-or-nothing batch. A barrier
//! waits, outside the lock, until the datapath has applied the newest
//! sequence number; so a reply never precedes the change it stands for.
//!
//! Asynchronous messages (PACKET_IN, FLOW_REMOVED, PORT_STATUS, flow
//! monitor updates) go through each connection's outbox (`outbox.rs`):
//! only its writer thread blocks on the socket, and what a slow peer is
//! owed is bounded, with PACKET_INs over a controller's rate queued per
//! input port ([`packet_in_queue`]) as OVS's pinsched does. A Controller
//! row's new probe interval or packet-in limit reaches its live
//! connections through cells they read at each message or tick
//! (`conn_settings.rs`), with no reconnect, as in OVS.
//!
//! Invariants: the datapath receives change lists in exactly the order the
//! tables applied them; a connection's replies are written in the order of
//! its requests; every resource a peer can make the switch spend
//! (connections, silent or non-reading peers, bundles and their messages,
//! queued bytes, flows per table, packet-ins) has a bound, counted when
//! hit ([`limits`]).
//!
//! Threads: an accept loop per listener; per connection, a reader that
//! handles requests and a writer for its outbox; per bridge, the flow
//! expiry thread and the packet-in scheduler. Costs: one table lock per
//! mod or bundle commit; dumps clone `Arc`s under the lock and encode
//! outside it.

#![forbid(unsafe_code)]
// The design comments link private items: read them with
// `cargo doc --document-private-items`.
#![allow(rustdoc::private_intra_doc_links)]

mod bridge;
mod bundle;
mod conn_settings;
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
pub use server::{Server, WantedController};
