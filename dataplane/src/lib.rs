//! xbr's dataplane: ports (AF_XDP sockets, TAP devices) and the XDP
//! program with its loader.

pub mod bpf;
pub mod netdev;
pub mod tap;
pub mod xsk;
