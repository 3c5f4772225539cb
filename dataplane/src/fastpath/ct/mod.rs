//! The fast path's side of conntrack: which connections the XDP flow
//! cache may carry, its handles on them, and the connections the XDP
//! program creates in the kernel.
//!
//! - `link.rs`: the policy (a *steady* connection: settled for conntrack
//!   and told apart by the XDP key) and [`link::CtLink`], a cache entry's
//!   hold on a connection or on a tuple without one; `link`,
//!   `watch_absent` and `peek`, which the cache and the engine's adoption
//!   call.
//! - `kernel_new.rs`: the kernel's new UDP connections: the maps the
//!   program shares with conntrack ([`kernel_new::KernelMaps`]), the ring
//!   of reports and the budget ([`kernel_new::KernelNew`]).
//! - `slots.rs`: per connection, a count in the slot of each of its
//!   tuples, so the program knows whether a UDP/IPv4 tuple has one;
//!   conntrack's table updates it under its shard locks (through
//!   `KernelNew`).
//! - `kernel_shares.rs`: the ports' shares of the ring of new-connection
//!   reports, so one port cannot fill it for all.
//!
//! The seam with conntrack runs one way: this folder imports conntrack's
//! narrow API, conntrack imports nothing of the fast path. What must
//! happen under conntrack's locks stays there: counting links and voiding
//! them when a connection changes (`conntrack/links.rs`), the queues that
//! tell every packet thread, watches on absent tuples
//! (`conntrack/absent.rs`), and storing a reported connection
//! (`conntrack/kernel_conns.rs`). Conntrack calls back into the fast
//! path only through two traits it defines: `FlushHook` (the cache's
//! generation, bumped by a flush) and `KernelConns` (implemented by
//! `KernelNew`: slot counts, draining the reports).
//!
//! Over the fast path's `handles.rs` (`MappedCounters`: arrays mapped
//! into this process, read and written with atomics, no syscall per
//! connection) and conntrack; nothing here knows the cache or the engine.

pub mod kernel_new;
pub mod kernel_shares;
pub mod link;
#[cfg(test)]
mod link_tests;
pub(crate) mod slots;
