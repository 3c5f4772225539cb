//! Conntrack's views of the kernel-side connection maps the XDP program
//! shares with it.

pub mod kernel_shares;
pub(crate) mod slots;
