//! xbr's packet formats: what a frame's bytes mean, and how to change
//! them in place. Nothing here does I/O, keeps state between packets or
//! knows about ports, rings, flows or threads; the engine, conntrack and
//! the tunnel code in `dataplane` call into it for every packet.
//!
//! # What it holds
//! - [`parse`]: flow extraction, one pass over an Ethernet frame (802.1Q
//!   and 802.1ad tags, LLC/SNAP, MPLS, PBB, ARP, IPv4, IPv6 and its
//!   extension header chain, TCP/UDP/SCTP ports, ICMP and ND) into a
//!   [`flowtable::FlowKey`], and the [`parse::Layers`] offsets the other
//!   modules start from.
//! - [`rewrite`]: set-field on any header the key can match, VLAN, MPLS
//!   and PBB push and pop, TTL copies, each with an incremental (RFC 1624)
//!   checksum update.
//! - [`csum`]: the Internet checksum, and the completion of checksums a
//!   pod's kernel left to offload.
//! - [`vxlan`]: the outer IPv4/UDP/VXLAN headers of a tunnel packet
//!   (RFC 7348) as views over byte slices with validated accessors, and
//!   the parsed VXLAN header.
//! - [`bytes`]: the big-endian readers and writers all of the above share
//!   (and the crates above may: one copy of them in the project).
//!
//! # Invariants
//! - Every frame is untrusted: it comes from a UMEM frame, a TAP read or
//!   the wire. Every read is bounds-checked (or, in the `vxlan` views,
//!   proven in bounds once by `new_checked`); a runt or truncated header
//!   ends parsing at the last complete layer, as OVS does; nothing here
//!   panics on any input (the `packet_rewrite` and `vxlan_decap` fuzz
//!   targets hold it to that).
//! - A rewrite leaves a frame whose checksums were right with right
//!   checksums, and changes nothing when the header it names is absent.
//! - No `unsafe`, enforced by `forbid(unsafe_code)`: the raw memory the
//!   frames live in belongs to `dataplane::xsk`, which hands out slices.
//!
//! # Threads and costs
//! Pure functions over `&[u8]`/`&mut [u8]`: any thread may call them, and
//! none takes a lock or allocates. Extraction is one pass over the
//! headers (bounded: the IPv6 chain walk stops after a fixed number of
//! extension headers); a field rewrite is a few loads, stores and adds; a
//! push or pop moves the frame's head by the tag's size in place;
//! checksum completion is the one operation that reads the payload (one
//! pass, and only for a packet whose checksum field holds the partial sum).

#![forbid(unsafe_code)]

pub mod bytes;
pub mod csum;
pub mod parse;
pub mod rewrite;
#[cfg(any(test, feature = "testframes"))]
pub mod testframes;
pub mod vxlan;
