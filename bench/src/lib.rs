//! xbr benchmarks.
//!
//! [`ovs`] runs a private Open vSwitch, the peer the benchmarks and the
//! end-to-end comparison tests measure xbr against.

pub mod ovs;
pub mod ovs_node;
