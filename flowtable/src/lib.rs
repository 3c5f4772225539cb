//! xbr's OpenFlow pipeline, free of I/O: flow keys, matches, actions, the
//! classifier, flow-mod, group-mod and meter-mod semantics, and pipeline
//! execution.
//!
//! # Design
//!
//! What it holds, bottom up (each module imports only those before it):
//! - the flow key ([`key`]): every matchable field at a fixed bit position
//!   in 27 words, so a mask is another key; the field registry ([`field`])
//!   gives each field its names, wire headers, maskability, prerequisites
//!   and text syntax, read by `matching`, `text/` and ofproto's codec;
//! - matches and actions ([`matching`], [`action`]) and their validation;
//! - the classifier ([`classifier`]): one tuple-space search per table;
//! - the authoritative tables ([`tables`]): flows, groups and meters with
//!   OpenFlow 1.3 semantics as OVS implements them; every successful mod
//!   or all-or-nothing batch returns the [`Change`] list that brings a
//!   replica to the same state;
//! - a packet thread's replica ([`pipeline`]) and the translation of one
//!   packet's key into datapath actions (`xlate/`, into [`translation`]'s
//!   fixed-capacity [`Xlate`]); the exact-match and megaflow caches in
//!   front of it ([`cache`]); the tracer ([`trace`]) that explains a walk;
//! - `ovs-ofctl`'s flow syntax ([`text`]), parsed into the tables' mods
//!   and printed back.
//!
//! Invariants: the replica only ever changes by applying, in order, the
//! change lists the tables produced, so a packet thread sees each mod or
//! bundle whole or not at all; a rule in the tables was validated against
//! the groups and meters that existed when it went in, and neither is
//! removed while a rule names it.
//!
//! Threads: none of its own. The tables are owned by ofproto's `Bridge`
//! behind one lock; each packet thread owns its replica and caches and
//! shares only the Relaxed counters on rules, groups and tables.
//!
//! Costs: a flow ADD or strict MODIFY/DELETE is O(1) expected; a
//! non-strict one scans the tables it selects. A translation is one hash
//! probe per subtable visited in each table the packet walks, and never
//! allocates; a cache hit costs one hash, a key compare and a copy of the
//! actions.

#![forbid(unsafe_code)]
// The design comments link private items: read them with
// `cargo doc --document-private-items`.
#![allow(rustdoc::private_intra_doc_links)]

pub mod action;
pub mod attribution;
pub mod cache;
pub mod classifier;
pub mod error;
pub mod field;
pub mod flow_mod;
pub mod group;
pub mod key;
pub mod matching;
mod megaflow;
pub mod meter;
pub mod pipeline;
pub mod rule;
pub mod tables;
pub mod text;
pub mod trace;
pub mod trace_recirc;
pub mod translation;
mod validate;
mod xlate;

pub use action::{Action, Bucket, CtAction, CtZone, Instructions, NatAction, SubField};
pub use classifier::Classifier;
pub use error::{FlowModError, GroupModError, MatchError, MeterModError};
pub use flow_mod::{
    FlowFilter, FlowMod, FlowModCommand, GroupMod, GroupModCommand, GroupType, SelectionKind,
    SelectionMethod,
};
pub use group::{Group, GroupStats};
pub use key::{Field, FlowKey, KEY_WORDS};
pub use matching::Match;
pub use meter::{Meter, MeterBand, MeterBandType, MeterMod, MeterModCommand, MeterStats};
pub use pipeline::{DpAction, DropReason, NatSpec, Pipeline, Xlate, MAX_DP_ACTIONS};
pub use rule::{PipelineCounters, Rule, RuleStats, TableCounters};
pub use tables::{Change, FlowTables, ModError, PipelineMod, TableStats};
