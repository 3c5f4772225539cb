//! xbr's Prometheus metrics: `xbr run --metrics ADDR` (or the database's
//! `Open_vSwitch` `other_config:xbr-metrics=ADDR`) serves `GET /metrics`
//! in the Prometheus text format (0.0.4), the figures `xbr stats`,
//! `ovs-appctl dpctl/show` and `pmd-stats-show` print, for every bridge
//! this process runs. Names and labels: docs/metrics.md.
//!
//! # Design
//!
//! - [`bridges`]: the bridges this process runs, each registered by its
//!   control socket's server when it starts and removed when it stops,
//!   so a bridge the database adds later is scraped with no wiring.
//! - [`collect`]: one scrape builds a fresh `prometheus::Registry` from
//!   the bridges' snapshots and encodes it with the crate's text encoder
//!   (no text is written by hand). Nothing is kept between scrapes:
//!   every value is a copy of a counter the bridge already keeps.
//! - [`server`]: the HTTP endpoint, bounded in connections, request size
//!   and time.
//!
//! # What a scrape costs the packet threads
//!
//! The packet threads' counters are the snapshots they publish when a
//! statistics collection asks (`DpShared::engine_snapshots`, the same as
//! `xbr stats`): a scrape raises a flag the threads look at between
//! batches and waits (at most 500 ms) on the control side's condition
//! variable. A thread answers once per collection, not per packet or
//! batch: it finishes an XDP cache sweep pass, then takes two mutexes
//! the scrape also takes, each held for a copy of a few hundred bytes
//! (its snapshot slot, to store its copy; the sequence state, to mark
//! the collection done). No lock a packet thread takes per packet or per
//! batch is touched. Port, table, conntrack and control-plane counters
//! are relaxed atomics read as they are (the OpenFlow tables' counters
//! under the control plane's table mutex, which packet threads never
//! take). The per-connection locks of the connection tracker are never
//! taken (so there is no per-zone count; see docs/metrics.md). One lock
//! that packets take is: the fragment table's mutex (taken only by IP
//! fragments, never by whole packets), once per scrape, for a copy of its
//! per-port counts.

pub mod bridges;
mod collect;
mod server;

pub use collect::render;
pub use server::{parse_addr, MetricsError, MetricsServer, ServerCounters};
