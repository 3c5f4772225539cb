//! xbr benchmarks.
//!
//! [`ovs`] runs a private Open vSwitch, the peer the benchmarks and the
//! end-to-end comparison tests measure xbr against. [`packet`], [`bpf`]
//! and [`gen`] make the traffic generator (XDP live frames, AF_XDP as a
//! fallback) and the counting sink; [`topo`] the namespaces they run in;
//! the `xbr-bench` binary runs the switch comparisons; [`systems`] runs
//! the `afxdp-l2fwd` binary (`systems/l2fwd.rs`), the AF_XDP path without a pipeline;
//! [`ovs_node`] and [`pod_gen`] serve `labbench` (OVS on a lab node, the
//! generator between two lab pods).

#![forbid(unsafe_code)]
// The design comments link private items: read them with
// `cargo doc --document-private-items`.
#![allow(rustdoc::private_intra_doc_links)]

pub mod bpf;
pub mod cmd;
pub mod gen;
pub mod hostile;
pub mod measure;
pub mod ovs;
pub mod ovs_node;
pub mod packet;
pub mod plot;
pub mod pod_gen;
pub mod private_ovs;
pub mod scenario;
pub mod systems;
pub mod topo;
