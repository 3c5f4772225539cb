//! The XDP fast path: the programs, their loader, the flow cache and its
//! pins, and the views of conntrack's kernel-side maps.

pub mod cache;
pub mod ct;
#[allow(unsafe_code)]
pub mod loader;
pub mod pin;
