//! The field registry: one description of every match/set-field field
//! xbr supports, the counterpart of OVS's meta-flow (`mf_field`).
//!
//! [`registry::FIELDS`] is the one table. The flow key ([`crate::key`])
//! owns the bit layout of its words; everything that gives a field a
//! name, a wire header, a width on the wire, maskability, prerequisites
//! or a text syntax reads it from the registry: the text parser and
//! printer (`text/`), the match's prerequisite check (`matching.rs`),
//! and ofproto's OXM/NXM codec (match, SET_FIELD, Nicira action
//! operands, table features).
//!
//! Dependencies run one way: `key` <- `field` <- `matching` <- `text`,
//! ofproto. The module holds no state beyond the lists it builds once
//! on first use (the codec's header list and encode order), and is read
//! from any thread. See docs/field-registry.md.

mod prereq;
pub mod protocols;
pub mod registry;
mod syntax;

pub use prereq::{Pinned, Prereq};
pub use registry::{
    by_header, by_name, encode_order, key_bits, key_prereqs, name_of, nxm_name, syntax_of,
    wire_headers, FieldDef, Header, FIELDS, OXM_CLASS_NXM0, OXM_CLASS_NXM1,
    OXM_CLASS_OPENFLOW_BASIC,
};
pub use syntax::Syntax;

#[cfg(test)]
mod tests;
