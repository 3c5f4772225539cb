//! xbr's OpenFlow pipeline, free of I/O: flow keys, matches, actions, the
//! classifier, flow-mod and group-mod semantics, and pipeline execution.

#![forbid(unsafe_code)]

pub mod action;
pub mod error;
pub mod flow_mod;
pub mod key;
pub mod matching;

pub use action::{Action, Bucket, CtAction, CtZone, Instructions, NatAction, SubField};
pub use error::{FlowModError, GroupModError, MatchError};
pub use flow_mod::{FlowFilter, FlowMod, FlowModCommand, GroupMod, GroupModCommand, GroupType};
pub use key::{Field, FlowKey, KEY_WORDS};
pub use matching::Match;
