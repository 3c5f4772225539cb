//! The `xbr` process around the dataplane: everything that manages
//! bridges rather than forwards their packets. `main.rs` parses the
//! command line (clap) and runs one subcommand.
//!
//! # What it holds
//! - `bridge`: a running bridge, the lifecycle that ties `dataplane`'s
//!   ports and packet threads to `ofproto`'s OpenFlow server: started in
//!   an order that leaves nothing behind on failure, stopped in reverse.
//! - `ovsdb`: `xbr run --ovsdb`, the OVSDB client that makes xbr
//!   ovs-vswitchd for `ovs-vsctl`: a replica of the tables, reconciled
//!   into running bridges, status written back.
//! - `ctl` and `unixctl` (with `accept_loop`, `support`): the control
//!   socket `xbr stats|trace|...` asks, and the socket `ovs-appctl` asks.
//! - `metrics` (`--metrics`, Prometheus) and `logging` (filters, file,
//!   JSON, per-call-site rate limits, `vlog/*`).
//! - The subcommands that are short-lived clients or checks: `ctl_cli`
//!   (the client side of `ctl`), `capture`, `doctor`, `probe`, and
//!   `conffile` (`xbr run --config`), `readiness` (systemd `Type=notify`).
//!   `xbr lab` is the `xbr-lab` crate's.
//!
//! Nothing here is on a packet's path: it reaches the packet threads only
//! through `dataplane`'s control interfaces (`control::DpShared`,
//! `live::LivePorts`, the engine's handoffs) and `ofproto::Bridge`.
//!
//! # Invariants
//! - Bad arguments are a message naming the problem and exit code 2; a
//!   bridge that refuses a request or is not there, 2 as well; a broken
//!   answer, 1.
//! - A bridge that fails to start leaves no port, socket or thread behind.
//! - No `unsafe` (`forbid(unsafe_code)`): the raw memory is `dataplane`'s
//!   `xsk` and `bpf` modules'.
//!
//! # Threads and costs
//! `xbr run`'s main thread waits for SIGINT/SIGTERM (or runs the OVSDB
//! client, with `--ovsdb`); each bridge adds its packet threads, upcall
//! thread and conntrack sweeper (`bridge`), the OpenFlow server's threads
//! (`ofproto`) and its control socket's thread; the process adds the
//! unixctl socket's thread and the metrics server's. The sockets serve
//! one bounded request at a time. The
//! clients and checks run on the main thread, one bounded exchange (a
//! socket request with a timeout, a netlink or OVSDB query) at a time.

#![forbid(unsafe_code)]
// The design comments link private items: read them with
// `cargo doc --document-private-items`.
#![allow(rustdoc::private_intra_doc_links)]

pub mod accept_loop;
pub mod bridge;
pub mod capture;
pub mod conffile;
pub mod ctl;
pub mod ctl_cli;
pub mod doctor;
pub mod logging;
pub mod metrics;
pub mod ovsdb;
pub mod probe;
pub mod readiness;
pub mod support;
pub mod unixctl;
