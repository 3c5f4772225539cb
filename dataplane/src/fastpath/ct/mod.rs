//! Conntrack's views of the kernel-side connection maps the XDP program
//! shares with it (the design is in `conntrack/kernel_new.rs`): both are
//! arrays mapped into this process, read and written with atomics, no
//! syscall per connection.
//!
//! - `slots.rs`: per connection, a count in the slot of each of its
//!   tuples, so the program knows whether a UDP/IPv4 tuple has one;
//!   conntrack's table updates it under its shard locks.
//! - `kernel_shares.rs`: the ports' shares of the ring of new-connection
//!   reports, so one port cannot fill it for all.
//!
//! Leaves over the loader's `MappedCounters` and conntrack's `Tuple`:
//! they know nothing of connections' state, the cache or the engine.

pub mod kernel_new;
pub mod kernel_shares;
pub mod link;
#[cfg(test)]
mod link_tests;
pub(crate) mod slots;
