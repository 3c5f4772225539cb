//! ovs-ofctl's flow syntax, parsed and printed without ovs-ofctl.
//!
//! # Design
//!
//! Parsing turns the text the agent hands to `ovs-ofctl add-flow`,
//! `add-flows`, `add-groups` and `bundle` into the same [`FlowMod`] /
//! [`GroupMod`] values the wire codec decodes from what ovs-ofctl would have
//! sent: a masked `set_field` becomes a `RegLoad`, `resubmit:N` a resubmit
//! of the current table, `ip_frag=later` the two NXM frag bits. Printing
//! goes the other way for stored rules and groups and reproduces
//! `ovs-ofctl -O OpenFlow13 dump-flows` / `dump-groups` output byte for
//! byte (field order, default priority omitted, `load:` for REG_LOAD...).
//!
//! Nothing here allocates per packet or keeps state: parsing is a
//! single left-to-right pass over the line, and every malformed token
//! becomes a [`TextError`] naming it, never a panic.
//!
//! Port names (`output:tun0`) are resolved through an optional
//! [`PortNames`] map, as ovs-ofctl resolves them through the switch's port
//! descriptions; without one, only numbers and reserved names are accepted.

mod actions;
mod fields;
mod label;
mod matching;
mod print;
mod print_match;
mod set_field;
mod subfield;

use crate::flow_mod::{FlowMod, GroupMod};
use crate::tables::PipelineMod;
use std::collections::HashMap;
use thiserror::Error;

pub(crate) use fields::CT_STATE_BITS;
pub use fields::{field_by_name, parse_field_value};
pub use matching::{parse_match, parse_match_with, parse_packet};
pub use print::{
    format_actions, format_group, format_instructions, format_match, format_rule, format_rule_brief,
};

/// Port name → OpenFlow port number, for names in flows and groups.
pub type PortNames = HashMap<String, u32>;

/// Why a piece of flow text was rejected. Every variant names the
/// offending token.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TextError {
    #[error("unknown field or keyword `{0}`")]
    UnknownField(String),
    #[error("`{token}`: bad value: {reason}")]
    BadValue { token: String, reason: String },
    #[error("`{0}` needs a value (`{0}=...`)")]
    MissingValue(String),
    #[error("`{field}` requires {needs} (add `{needs}` before it)")]
    MissingPrerequisite { field: String, needs: &'static str },
    #[error("unknown action `{0}`")]
    UnknownAction(String),
    #[error("`{token}`: bad action: {reason}")]
    BadAction { token: String, reason: String },
    #[error("flow add needs `actions=`")]
    MissingActions,
    #[error("`actions=` is not allowed in a {0}")]
    UnexpectedActions(&'static str),
    #[error("`{0}`: unbalanced parentheses")]
    Unbalanced(String),
    #[error("unknown bundle line `{0}` (expected `flow add|delete|delete_strict|modify ...` or `group add|delete|modify ...`)")]
    BadBundleLine(String),
    #[error("`{token}`: {reason}")]
    Invalid { token: String, reason: String },
}

impl TextError {
    pub(crate) fn value(token: &str, reason: impl Into<String>) -> Self {
        TextError::BadValue {
            token: token.to_string(),
            reason: reason.into(),
        }
    }

    pub(crate) fn action(token: &str, reason: impl Into<String>) -> Self {
        TextError::BadAction {
            token: token.to_string(),
            reason: reason.into(),
        }
    }
}

/// Parses one `add-flow` line (an ADD).
pub fn parse_flow(line: &str) -> Result<FlowMod, TextError> {
    matching::parse_flow_mod(line, crate::flow_mod::FlowModCommand::Add, None)
}

/// [`parse_flow`] with port names.
pub fn parse_flow_with(line: &str, ports: &PortNames) -> Result<FlowMod, TextError> {
    matching::parse_flow_mod(line, crate::flow_mod::FlowModCommand::Add, Some(ports))
}

/// Parses a flow for `command` (e.g. a `del-flows` match for Delete).
pub fn parse_flow_command(
    line: &str,
    command: crate::flow_mod::FlowModCommand,
    ports: Option<&PortNames>,
) -> Result<FlowMod, TextError> {
    matching::parse_flow_mod(line, command, ports)
}

/// Parses an `add-groups` line (`group_id=N,type=select,bucket=...`).
pub fn parse_group(line: &str) -> Result<GroupMod, TextError> {
    actions::parse_group_mod(line, crate::flow_mod::GroupModCommand::Add, None)
}

/// [`parse_group`] with port names.
pub fn parse_group_with(line: &str, ports: &PortNames) -> Result<GroupMod, TextError> {
    actions::parse_group_mod(line, crate::flow_mod::GroupModCommand::Add, Some(ports))
}

/// Parses one line of `ovs-ofctl bundle` input.
pub fn parse_bundle_line(line: &str) -> Result<PipelineMod, TextError> {
    parse_bundle_line_with(line, None)
}

/// [`parse_bundle_line`] with optional port names.
pub fn parse_bundle_line_with(
    line: &str,
    ports: Option<&PortNames>,
) -> Result<PipelineMod, TextError> {
    use crate::flow_mod::{FlowModCommand as F, GroupModCommand as G};
    let line = line.trim();
    let (kind, rest) = split_word(line);
    let (verb, body) = split_word(rest);
    let bad = || TextError::BadBundleLine(line.to_string());
    match kind {
        "flow" => {
            let command = match verb {
                "add" => F::Add,
                "modify" => F::Modify,
                "modify_strict" => F::ModifyStrict,
                "delete" => F::Delete,
                "delete_strict" => F::DeleteStrict,
                _ => return Err(bad()),
            };
            matching::parse_flow_mod(body, command, ports).map(PipelineMod::Flow)
        }
        "group" => {
            let command = match verb {
                "add" => G::Add,
                "modify" => G::Modify,
                "delete" => G::Delete,
                "add_or_mod" => G::AddOrModify,
                // The position comes from `command_bucket_id=`.
                "insert_bucket" => G::InsertBucket(crate::flow_mod::BucketPos::Last),
                "remove_bucket" => G::RemoveBucket(crate::flow_mod::BucketPos::All),
                _ => return Err(bad()),
            };
            actions::parse_group_mod(body, command, ports).map(PipelineMod::Group)
        }
        _ => Err(bad()),
    }
}

fn split_word(s: &str) -> (&str, &str) {
    let s = s.trim_start();
    match s.find(char::is_whitespace) {
        Some(i) => (&s[..i], s[i..].trim_start()),
        None => (s, ""),
    }
}

/// Splits `s` at top-level separators (commas and whitespace outside
/// parentheses), dropping empty pieces. Errors on unbalanced parentheses.
pub(crate) fn split_top(s: &str) -> Result<Vec<&str>, TextError> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| TextError::Unbalanced(s.to_string()))?;
            }
            ',' | ' ' | '\t' if depth == 0 => {
                let piece = s[start..i].trim();
                if !piece.is_empty() {
                    out.push(piece);
                }
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(TextError::Unbalanced(s.to_string()));
    }
    let piece = s[start..].trim();
    if !piece.is_empty() {
        out.push(piece);
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_fields;
#[cfg(test)]
mod tests_ipv6;
