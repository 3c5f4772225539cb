//! xbr's dataplane: ports (AF_XDP sockets, TAP devices), the XDP program
//! and its loader, the poll-mode engine, conntrack, VXLAN, and the control
//! interfaces through which a running bridge (`xbr-daemon`'s `bridge`)
//! drives them: `control` (the `Datapath` the OpenFlow side publishes to),
//! `live` (ports added and removed while running), `state` (snapshots
//! across restarts). What a frame's bytes mean (flow extraction, header
//! rewrites, checksums, the VXLAN wire format) is the `xbr-packet`
//! crate's.
//!
//! `unsafe` is refused everywhere in this crate but in the two modules
//! that talk to the kernel through raw memory: `xsk` (the AF_XDP rings
//! and UMEM) and `bpf` (the BPF loader's libbpf calls and the mapped
//! counters); there every block carries a `// SAFETY:` comment, which
//! clippy checks.

#![deny(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

#[allow(unsafe_code)]
pub mod bpf;
pub mod capture;
pub mod config;
pub mod conntrack;
pub mod control;
pub mod cpus;
pub mod engine;
pub mod genl;
pub mod hostveth;
pub mod kicker;
pub mod live;
pub mod memport;
pub mod meter;
pub mod mirror;
pub mod netdev;
pub mod netwatch;
mod nlattr;
pub mod normal;
pub mod pin;
pub mod pmd_stats;
pub mod ports;
pub mod privs;
pub mod qos;
pub mod state;
pub mod stats;
pub mod tap;
pub mod vxlan;
pub mod xdpcache;
#[allow(unsafe_code)]
pub mod xsk;
