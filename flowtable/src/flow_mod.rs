//! The messages that change the pipeline, independent of their wire form.

use crate::action::{Bucket, Instructions};
use crate::key::FlowKey;
use crate::matching::Match;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FlowModCommand {
    Add,
    Modify,
    ModifyStrict,
    Delete,
    DeleteStrict,
}

/// OFPFF_* flags.
pub mod flow_mod_flags {
    pub const SEND_FLOW_REM: u16 = 1 << 0;
    pub const CHECK_OVERLAP: u16 = 1 << 1;
    pub const RESET_COUNTS: u16 = 1 << 2;
    pub const NO_PKT_COUNTS: u16 = 1 << 3;
    pub const NO_BYT_COUNTS: u16 = 1 << 4;
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowMod {
    pub cookie: u64,
    pub cookie_mask: u64,
    /// A table id, or `TABLE_ALL` (only for deletes).
    pub table_id: u8,
    pub command: FlowModCommand,
    pub idle_timeout: u16,
    pub hard_timeout: u16,
    pub priority: u16,
    pub buffer_id: u32,
    /// Delete filter; `port::ANY` = no filter.
    pub out_port: u32,
    /// Delete filter; `group::ANY` = no filter.
    pub out_group: u32,
    pub flags: u16,
    pub matching: Match,
    pub instructions: Instructions,
}

impl FlowMod {
    /// An ADD with the defaults ovs-ofctl uses (priority 32768, cookie 0).
    pub fn add(table_id: u8, priority: u16, matching: Match, instructions: Instructions) -> Self {
        FlowMod {
            cookie: 0,
            cookie_mask: 0,
            table_id,
            command: FlowModCommand::Add,
            idle_timeout: 0,
            hard_timeout: 0,
            priority,
            buffer_id: u32::MAX,
            out_port: crate::action::port::ANY,
            out_group: crate::action::group::ANY,
            flags: 0,
            matching,
            instructions,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GroupType {
    All,
    Select,
    Indirect,
    FastFailover,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GroupModCommand {
    Add,
    Modify,
    Delete,
    /// OVS's OFPGC_ADD_OR_MOD (`mod-group --may-create`): Add if the group
    /// does not exist, Modify if it does.
    AddOrModify,
    /// OpenFlow 1.5's OFPGC_INSERT_BUCKET: the message's buckets join the
    /// group's at `at` (First, Last, or after the bucket with that id); the
    /// group's type stays.
    InsertBucket(BucketPos),
    /// OpenFlow 1.5's OFPGC_REMOVE_BUCKET: the bucket at `at` (or All) is
    /// removed; the message carries no buckets.
    RemoveBucket(BucketPos),
}

/// The largest bucket id (OFPG_BUCKET_MAX).
pub const BUCKET_ID_MAX: u32 = 0xffff_ff00;

/// Which bucket an INSERT_BUCKET or REMOVE_BUCKET names
/// (`command_bucket_id`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BucketPos {
    First,
    Last,
    /// Every bucket (REMOVE_BUCKET only).
    All,
    Id(u32),
}

impl BucketPos {
    /// OFPG_BUCKET_FIRST, _LAST and _ALL.
    pub const FIRST: u32 = 0xffff_fffd;
    pub const LAST: u32 = 0xffff_fffe;
    pub const ALL: u32 = 0xffff_ffff;

    /// The position a `command_bucket_id` names; `None` for the ids
    /// between BUCKET_ID_MAX and FIRST, which name nothing.
    pub fn from_wire(id: u32) -> Option<Self> {
        match id {
            Self::FIRST => Some(BucketPos::First),
            Self::LAST => Some(BucketPos::Last),
            Self::ALL => Some(BucketPos::All),
            id if id <= BUCKET_ID_MAX => Some(BucketPos::Id(id)),
            _ => None,
        }
    }

    pub fn to_wire(self) -> u32 {
        match self {
            BucketPos::First => Self::FIRST,
            BucketPos::Last => Self::LAST,
            BucketPos::All => Self::ALL,
            BucketPos::Id(id) => id,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupMod {
    pub command: GroupModCommand,
    pub group_type: GroupType,
    pub group_id: u32,
    pub buckets: Vec<Bucket>,
    /// A select group's selection method (OpenFlow 1.5 group property);
    /// ignored by the bucket commands, which keep the group's.
    pub selection: Option<SelectionMethod>,
}

/// How a select group picks its bucket: OVS's NTR selection method, an
/// OpenFlow 1.5 group property (`selection_method=hash,fields(...)`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelectionMethod {
    pub method: SelectionKind,
    /// Seeds the hash (`selection_method_param`).
    pub param: u64,
    /// The bits of the packet's key `hash` hashes, each field with its
    /// mask; all zero for the default fields (and for `dp_hash`).
    pub fields: FlowKey,
    /// The field array as the controller encoded it (OXM TLVs), returned
    /// as received in group descriptions.
    pub wire_fields: Vec<u8>,
}

/// The selection methods OVS knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SelectionKind {
    /// A hash of `fields` (or, without fields, of the default ones).
    Hash,
    /// The datapath's hash of the packet: xbr hashes the default fields.
    DpHash,
}

impl SelectionKind {
    /// The name on the wire and in ovs-ofctl's syntax.
    pub fn name(self) -> &'static str {
        match self {
            SelectionKind::Hash => "hash",
            SelectionKind::DpHash => "dp_hash",
        }
    }
}

/// A flow-stats request / non-strict filter (dump-flows, aggregate).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowFilter {
    pub table_id: u8,
    pub out_port: u32,
    pub out_group: u32,
    pub cookie: u64,
    pub cookie_mask: u64,
    pub matching: Match,
}

impl FlowFilter {
    /// Whether the filter selects `rule`: in its table (or any), with
    /// its cookie bits, outputting to its port and group (when named),
    /// and matching nothing the filter's match does not.
    pub fn selects(&self, rule: &crate::rule::Rule) -> bool {
        self.selects_as(rule, None)
    }

    /// [`FlowFilter::selects`], where the port condition also holds if
    /// `before` (the flow before a modification) output there, as OVS's
    /// flow monitors count a flow whose actions changed.
    pub fn selects_as(&self, rule: &crate::rule::Rule, before: Option<&crate::rule::Rule>) -> bool {
        use crate::action::{group, port, TABLE_ALL};
        let outputs = |r: &crate::rule::Rule| {
            self.out_port == port::ANY || r.instructions.outputs_to(self.out_port)
        };
        (self.table_id == TABLE_ALL || self.table_id == rule.table_id)
            && rule.cookie & self.cookie_mask == self.cookie & self.cookie_mask
            && (outputs(rule) || before.is_some_and(outputs))
            && (self.out_group == group::ANY || rule.instructions.uses_group(self.out_group))
            && rule.matching.is_subset_of(&self.matching)
    }
}

impl Default for FlowFilter {
    fn default() -> Self {
        FlowFilter {
            table_id: crate::action::TABLE_ALL,
            out_port: crate::action::port::ANY,
            out_group: crate::action::group::ANY,
            cookie: 0,
            cookie_mask: 0,
            matching: Match::catch_all(),
        }
    }
}
