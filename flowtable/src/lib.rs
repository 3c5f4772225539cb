//! xbr's OpenFlow pipeline, free of I/O: flow keys, matches, actions, the
//! classifier, flow-mod, group-mod and meter-mod semantics, and pipeline
//! execution.

#![forbid(unsafe_code)]

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
