//! Errors of the pipeline layer, each mapped to the OpenFlow (type, code)
//! a switch reports for it.

use crate::key::Field;
use thiserror::Error;

/// OpenFlow 1.3 error types and codes used by this crate.
pub mod ofp {
    pub const BAD_REQUEST: u16 = 1;
    pub const BAD_ACTION: u16 = 2;
    pub const BAD_INSTRUCTION: u16 = 3;
    pub const BAD_MATCH: u16 = 4;
    pub const FLOW_MOD_FAILED: u16 = 5;
    pub const GROUP_MOD_FAILED: u16 = 6;
    pub const METER_MOD_FAILED: u16 = 12;
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MatchError {
    #[error("field {} used without its prerequisite", .0.name())]
    MissingPrerequisite(Field),
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FlowModError {
    #[error(transparent)]
    Match(#[from] MatchError),
    #[error("table {0} does not exist (tables are 0-253)")]
    BadTableId(u8),
    #[error("goto_table:{to} from table {from} does not go forward")]
    BadGotoTable { from: u8, to: u8 },
    #[error("flow refers to group {0}, which does not exist")]
    UnknownGroup(u32),
    #[error("output to invalid port {0:#x}")]
    BadOutPort(u32),
    #[error("action on field {} is invalid: {reason}", .field.name())]
    BadField { field: Field, reason: &'static str },
    #[error("flow overlaps an existing flow of the same priority (check_overlap)")]
    Overlap,
    #[error("table {0} is full")]
    TableFull(u8),
    #[error("unsupported: {0}")]
    Unsupported(&'static str),
    #[error("bad action argument: {0}")]
    BadArgument(&'static str),
    #[error("flow refers to meter {0}, which does not exist")]
    NoSuchMeter(u32),
    #[error("action does not fit the flow's match: {0}")]
    MatchInconsistent(&'static str),
}

impl FlowModError {
    /// The OpenFlow 1.3 (type, code) for this error.
    pub fn ofp_error(&self) -> (u16, u16) {
        use ofp::*;
        match self {
            FlowModError::Match(MatchError::MissingPrerequisite(_)) => (BAD_MATCH, 9), // BAD_PREREQ
            FlowModError::BadTableId(_) => (FLOW_MOD_FAILED, 2), // BAD_TABLE_ID
            FlowModError::BadGotoTable { .. } => (BAD_INSTRUCTION, 2), // BAD_TABLE_ID
            FlowModError::UnknownGroup(_) => (BAD_ACTION, 9),    // BAD_OUT_GROUP
            FlowModError::BadOutPort(_) => (BAD_ACTION, 4),      // BAD_OUT_PORT
            FlowModError::BadField { .. } => (BAD_ACTION, 15),   // BAD_SET_ARGUMENT
            FlowModError::Overlap => (FLOW_MOD_FAILED, 3),       // OVERLAP
            FlowModError::TableFull(_) => (FLOW_MOD_FAILED, 1),  // TABLE_FULL
            FlowModError::Unsupported(_) => (BAD_ACTION, 0),     // BAD_TYPE
            FlowModError::BadArgument(_) => (BAD_ACTION, 5),     // BAD_ARGUMENT
            FlowModError::MatchInconsistent(_) => (BAD_ACTION, 10), // MATCH_INCONSISTENT
            // What OVS answers for a flow naming a missing meter.
            FlowModError::NoSuchMeter(_) => (METER_MOD_FAILED, 3), // UNKNOWN_METER
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum GroupModError {
    #[error("group {0} already exists")]
    Exists(u32),
    #[error("group {0} does not exist")]
    Unknown(u32),
    #[error("group id {0:#x} is reserved")]
    InvalidId(u32),
    #[error("bad bucket: {0}")]
    BadBucket(&'static str),
    /// The group's type forbids what its buckets ask (OVS's and the
    /// specification's OFPGMFC_INVALID_GROUP: a weight outside a select
    /// group, an indirect group without exactly one bucket).
    #[error("invalid group: {0}")]
    InvalidGroup(&'static str),
    /// INSERT_BUCKET or REMOVE_BUCKET named a bucket id the group lacks.
    #[error("group has no bucket {0}")]
    UnknownBucket(u32),
    /// INSERT_BUCKET brought a bucket id the group already has.
    #[error("group already has bucket {0}")]
    BucketExists(u32),
    #[error("unsupported group type")]
    BadType,
    /// The switch holds [`crate::group::MAX_GROUPS`] groups already.
    #[error("the switch holds its maximum of {0} groups")]
    OutOfGroups(usize),
    /// A bucket action failed the same checks a flow's action would.
    #[error("bucket action: {0}")]
    BadAction(FlowModError),
}

impl GroupModError {
    pub fn ofp_error(&self) -> (u16, u16) {
        use ofp::*;
        match self {
            GroupModError::Exists(_) => (GROUP_MOD_FAILED, 0), // GROUP_EXISTS
            GroupModError::InvalidId(_) => (GROUP_MOD_FAILED, 1), // INVALID_GROUP
            GroupModError::InvalidGroup(_) => (GROUP_MOD_FAILED, 1), // INVALID_GROUP
            GroupModError::Unknown(_) => (GROUP_MOD_FAILED, 8), // UNKNOWN_GROUP
            GroupModError::BadBucket(_) => (GROUP_MOD_FAILED, 12), // BAD_BUCKET
            GroupModError::BadType => (GROUP_MOD_FAILED, 10),  // BAD_TYPE
            GroupModError::OutOfGroups(_) => (GROUP_MOD_FAILED, 2), // OUT_OF_GROUPS
            // OpenFlow 1.5's codes, the only version that can cause them.
            GroupModError::UnknownBucket(_) => (GROUP_MOD_FAILED, 15), // UNKNOWN_BUCKET
            GroupModError::BucketExists(_) => (GROUP_MOD_FAILED, 16),  // BUCKET_EXISTS
            GroupModError::BadAction(e) => e.ofp_error(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MeterModError {
    #[error("meter {0} already exists")]
    Exists(u32),
    #[error("meter {0} does not exist")]
    Unknown(u32),
    /// 0, or above OFPM_MAX (the virtual slow-path, controller and "all"
    /// meters cannot be created or changed).
    #[error("meter id {0:#x} is invalid")]
    InvalidId(u32),
    #[error("meter id {0} is beyond the switch's meters")]
    OutOfMeters(u32),
    #[error("meter flags {0:#x} are invalid")]
    BadFlags(u16),
    #[error("a meter band has rate 0")]
    BadRate,
    #[error("{0} bands are more than the switch supports")]
    OutOfBands(usize),
}

impl MeterModError {
    pub fn ofp_error(&self) -> (u16, u16) {
        use ofp::*;
        match self {
            MeterModError::Exists(_) => (METER_MOD_FAILED, 1), // METER_EXISTS
            MeterModError::InvalidId(_) => (METER_MOD_FAILED, 2), // INVALID_METER
            MeterModError::Unknown(_) => (METER_MOD_FAILED, 3), // UNKNOWN_METER
            MeterModError::BadFlags(_) => (METER_MOD_FAILED, 5), // BAD_FLAGS
            MeterModError::BadRate => (METER_MOD_FAILED, 6),   // BAD_RATE
            MeterModError::OutOfMeters(_) => (METER_MOD_FAILED, 10), // OUT_OF_METERS
            MeterModError::OutOfBands(_) => (METER_MOD_FAILED, 11), // OUT_OF_BANDS
        }
    }
}
