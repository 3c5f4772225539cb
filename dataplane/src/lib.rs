//! xbr's dataplane: ports (AF_XDP sockets, TAP devices), the XDP program
//! and its loader, the poll-mode engine, conntrack, VXLAN, and the control
//! interfaces through which a running bridge (`xbr-daemon`'s `bridge`)
//! drives them: `control` (the `Datapath` the OpenFlow side publishes to),
//! `live` (ports added and removed while running), `state` (snapshots
//! across restarts). What a frame's bytes mean (flow extraction, header
//! rewrites, checksums, the VXLAN wire format) is the `xbr-packet`
//! crate's.
//!
//! # Design
//!
//! One packet's path: the device's XDP program (`fastpath/bpf/*.c`, loaded
//! by [`fastpath::loader`]) looks the frame up in the XDP flow cache
//! ([`fastpath::cache`]); a hit is rewritten and redirected in the kernel
//! and never reaches this process. A miss goes to the port's AF_XDP socket ([`xsk`], [`ports`]),
//! where a packet thread ([`engine`]) receives it in a batch,
//! decapsulates it if it came from a tunnel ([`vxlan`]), parses it once
//! into a flow key, looks the key up in its translation cache or walks
//! its pipeline replica, executes the actions (rewrites, [`conntrack`],
//! meters, mirrors, outputs, encapsulation) and transmits; the
//! translation is installed as an XDP cache entry when the kernel can
//! carry it, so the next frame of the flow stays in the kernel.
//!
//! Control: the OpenFlow side publishes table changes through [`control`]
//! (a channel per packet thread, applied between rounds); ports come and
//! go through [`live`]; [`state`] and [`fastpath::pin`] carry flows,
//! connections and the XDP cache across a restart.
//!
//! Threads: the packet threads (one per `pmd-cpu-mask` core, each owning
//! its ports, replica, caches and UMEM frames: no lock and no allocation
//! per packet), optional transmit kickers ([`kicker`]), and the bridge's
//! helpers (conntrack sweeper, netlink watchers). Shared state is atomics
//! and per-round snapshots.
//!
//! Costs (bench/RESULTS.md): a frame the XDP cache carries costs the
//! kernel's XDP program only (0.84-0.87x of a bare XDP redirect); one the
//! packet thread handles crosses the AF_XDP socket twice, about 1 us of a
//! core on a veth in copy mode, plus tens of nanoseconds of engine work.
//!
//! `unsafe` is refused everywhere in this crate (`deny(unsafe_code)`
//! below) but in the modules that talk to the kernel through raw memory
//! or raw libbpf calls, each allowed by name where it is declared: `xsk`
//! (the AF_XDP rings and UMEM) here, and the BPF handles and loader,
//! `fastpath/handles.rs` and `fastpath/loader/{link,probe}.rs`, in
//! `fastpath/`.
//! There every block carries a `// SAFETY:` comment, which clippy checks
//! (`undocumented_unsafe_blocks`).

#![deny(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]
// The design comments link private items: read them with
// `cargo doc --document-private-items`.
#![allow(rustdoc::private_intra_doc_links)]

pub mod capture;
pub mod config;
pub mod conntrack;
pub mod control;
pub mod cpus;
pub mod engine;
pub mod fastpath;
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
pub mod pmd_stats;
pub mod ports;
pub mod privs;
pub mod qos;
pub mod state;
pub mod stats;
pub mod tap;
pub mod vxlan;
#[allow(unsafe_code)]
pub mod xsk;
