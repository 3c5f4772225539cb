//! The `xbr` program around the dataplane: what only the binary uses.
//! `main.rs` parses the command line (clap) and runs one subcommand; the
//! modules here are the subcommands that are not a running bridge
//! themselves, each a short-lived client or check:
//! - `ctl_cli`: the commands that ask a running bridge over its control
//!   socket (`xbr stats|trace|conntrack|port|log|dpctl|fdb|pmd`);
//! - `capture`: `xbr capture`, a port's frames to the terminal or pcap;
//! - `doctor` and `probe`: preflight checks of a node, and whether a
//!   running xbr is alive and ready;
//! - `conffile`: `xbr run --config`, settings from a file;
//! - `readiness`: systemd's `Type=notify` messages.
//!
//! The running bridge itself (ports, engine, conntrack, control and
//! unixctl sockets, the OVSDB client) is `dataplane`'s; `xbr run` starts
//! it from here and waits for SIGINT/SIGTERM.
//!
//! # Invariants
//! - Bad arguments are a message naming the problem and exit code 2;
//!   a bridge that refuses a request or is not there, 2 as well; a
//!   broken answer, 1.
//! - No `unsafe` (`forbid(unsafe_code)`): the raw memory is `dataplane`'s
//!   `xsk` and `bpf` modules'.
//!
//! # Threads and costs
//! The clients and checks run on the main thread, one bounded exchange
//! (a socket request with a timeout, a netlink or OVSDB query) at a time;
//! `capture` looks at a SIGINT/SIGTERM flag between receives. Nothing here
//! is on a packet's path.

#![forbid(unsafe_code)]

pub mod capture;
pub mod conffile;
pub mod ctl_cli;
pub mod doctor;
pub mod probe;
pub mod readiness;
