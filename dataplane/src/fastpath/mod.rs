//! The XDP fast path: what forwards a frame in the kernel, before it
//! reaches an AF_XDP socket, and what this process keeps to drive it.
//!
//! # What it holds
//!
//! - `bpf/`: the C programs (`xbr_xdp.c`, with the kernel's new-connection
//!   half in `xbr_ct_new.h`), compiled by `build.rs` and embedded in the
//!   binary. `xbr_xdp_rx` runs on every system port: it looks the frame
//!   up in the flow cache and rewrites and redirects a hit; a miss goes to
//!   the port's AF_XDP socket. `xbr_xdp_vxlan` runs on a VXLAN port's
//!   uplink and decapsulates first.
//! - [`loader`]: loads a copy of the object per netdev, attaches it with a
//!   bpf_link (or swaps it into a pinned one), fills its XSKMAP, and
//!   probes what the kernel's XDP supports.
//! - [`handles`]: the raw handles on kernel BPF objects every other part
//!   uses (pins of fds, a link's device, batched map reads, counters
//!   mapped into this process): the bottom of the fast path.
//! - [`cache`]: the XDP flow cache. Its maps (`cache/maps.rs`: entries,
//!   redirect targets, generation, conntrack's kernel maps, one set per
//!   bridge, shared by every port's program), the entry layout the C side
//!   mirrors byte for byte (`entry.rs`), the packet thread's mirror of
//!   what it installed ([`cache::XdpCache`]: install, credit, sweep),
//!   the templates through which the kernel creates UDP connections
//!   (`templates.rs`), revalidation after a table change (`revalidate.rs`),
//!   adoption of a previous process's entries (`adopt.rs`,
//!   `takeover.rs`), and `xbr dpctl dump-flows` (`dump.rs`).
//! - [`pin`]: what outlives the process in the BPF filesystem (the
//!   shared maps and each port's bpf_link) and the layout record that
//!   says whether a new build may adopt them.
//! - [`ct`]: the fast path's side of conntrack: which connections the
//!   cache may carry and its entries' handles on them (`link.rs`:
//!   steady connections, `CtLink`), and the connections the program
//!   creates in the kernel (`kernel_new.rs`: the shared maps, the ring
//!   of reports, the budget; `slots.rs`, `kernel_shares.rs`). It stands
//!   on conntrack's narrow API; conntrack keeps only what must run under
//!   its locks (link counting and voiding, the queues to the packet
//!   threads, watches on absent tuples, storing a reported connection)
//!   and calls back only through two traits it defines, `FlushHook`
//!   (implemented by the cache's `XdpGen`) and `KernelConns`
//!   (implemented by `ct::kernel_new::KernelNew`). Conntrack imports
//!   nothing of the fast path.
//!
//! # Layering (leaf first; every import points up this list)
//!
//! 1. `handles.rs`: file descriptors and syscalls, nothing else.
//! 2. `ct/` (over `handles.rs` and conntrack's narrow API) and `pin/`
//!    (the pinned directory, over `handles.rs`).
//! 3. `cache/`: first `entry.rs`, `generation.rs` (which implements
//!    conntrack's `FlushHook`) and `stats.rs` (leaves), then `maps.rs`
//!    (the shared maps, over those, the pins and `ct/`'s `KernelMaps`),
//!    then `mod.rs` and its other children (the packet thread's side,
//!    over the maps, `ct/`'s `CtLink` and conntrack's `Conntrack`).
//!
//! Conntrack stands below the whole fast path: every arrow between them
//! points from here to `conntrack/`.
//! 4. `loader/`: the programs, reusing the cache's shared maps
//!    (`CacheMaps`) and keeping their links in the pins (`Pins`).
//!
//! The engine stands above all of it; ports, VXLAN ports and the daemon
//! use the loader, the maps and the pins to set a bridge up.
//!
//! # The interface the engine uses
//!
//! The packet thread (`engine/`) calls the cache (and, for adoption,
//! `ct::link::peek`), never the loader or the pins:
//! - [`cache::XdpCache`]: one per packet thread (install, credit, sweep,
//!   revalidate, adopt), with the types it takes and gives:
//!   [`cache::FcKey`], [`cache::FcAction`], [`cache::CtConn`],
//!   [`cache::Origin`], [`cache::Credit`], [`cache::XdpCacheStats`],
//!   [`cache::Candidate`] and [`cache::REVALIDATE_CHUNK`] (revalidation),
//!   [`cache::Claim`] and [`cache::Fresh`] (adoption);
//! - `cache::entry`: keying a frame as the program does, from the
//!   packet context's one parse (`key_of`, `set_tunnel`, `KEY_SIZE`;
//!   `frame_key` from the bytes, in tests), reading a key back (`key_proto`,
//!   `key_nw`, `key_tunnel`, `is_decapsulated`, `flow_hash`) and the
//!   rewrite and address encodings (`NwRewrite`, `mac_bytes`);
//! - `cache::templates`: `NewConnTemplate` and `fc_mask`, what the engine
//!   hands the kernel to create UDP connections itself;
//! - `ct::link::peek`: what `ct()` would give a packet of a steady
//!   connection, for adopting a previous process's entries.
//!
//! It also calls conntrack for the cache: `Conntrack::xdp_take_dead`
//! (conntrack's queues of the entries to delete) and
//! `Conntrack::kernel_sync` (once a round; it reaches
//! `ct::kernel_new::KernelNew` through conntrack's `KernelConns`).
//!
//! Concurrency: the maps are shared by every port's program and every
//! packet thread (each installs and deletes its own entries; the
//! generation is bumped by any thread and read by all); an `XdpCache` is
//! its packet thread's alone. No call on the packet thread's path takes
//! a lock or allocates per packet; installs are one map update each,
//! bounded per port and second (`engine/xdp/install_gate.rs`).
//!
//! `unsafe` is denied here as in the rest of the crate, but for the
//! raw libbpf calls: `handles.rs` (allowed below) and
//! `loader/{link,probe}.rs` (allowed where `loader/mod.rs` declares
//! them).

pub mod cache;
pub mod ct;
#[allow(unsafe_code)]
pub mod handles;
pub mod loader;
pub mod pin;
