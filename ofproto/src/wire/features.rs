//! What the switch advertises about groups, queues and table
//! configuration, and the messages that would change them (meters have
//! their own module, `meter.rs`).
//!
//! xbr has no queues beyond a port's default, and OpenFlow 1.3 table
//! configuration is a deprecated no-op. A controller learns this from
//! GROUP_FEATURES and from QUEUE_GET_CONFIG (no queues); a request for
//! what is not there is refused with the specification's error, as OVS
//! refuses it when its datapath lacks the feature, never accepted and then
//! ignored.

use super::{err, Ctx, Put, Reader, WireError};
use crate::wire::action::{OFPAT_GROUP, OFPAT_OUTPUT, OFPAT_SET_FIELD};
use crate::wire::table14::TableSettings;

/// OFPTT_ALL: a TABLE_MOD for every table.
pub const TABLE_ALL: u8 = 0xff;
/// Highest table id (tables are 0-253).
pub const TABLE_MAX: u8 = 253;
/// OFPTC_DEPRECATED_MASK: the only config bits OpenFlow 1.3 defines.
const TABLE_CONFIG_DEPRECATED_MASK: u32 = 3;

/// OFPM_ALL: every meter, in stats and config requests.
pub const METER_ALL: u32 = flowtable::meter::METER_ALL;
/// OFPQ_ALL: every queue of a port.
pub const QUEUE_ALL: u32 = 0xffff_ffff;

/// OFPT_TABLE_MOD body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableMod {
    pub table_id: u8,
    pub config: u32,
    /// OpenFlow 1.4 on: the eviction and vacancy settings `config` and
    /// the properties give the table (see `table14`); `None` from 1.3,
    /// whose config bits mean nothing any more.
    pub settings: Option<TableSettings>,
}

impl TableMod {
    pub fn parse(body: &[u8]) -> Result<TableMod, WireError> {
        let mut r = Reader::new(body, Ctx::Request, "table mod");
        let table_id = r.u8()?;
        r.skip(3)?;
        let config = r.u32()?;
        if !r.is_empty() {
            return Err(Ctx::Request.bad_len("table mod longer than 8 bytes".into()));
        }
        Ok(TableMod {
            table_id,
            config,
            settings: None,
        })
    }

    pub fn emit(&self, out: &mut Vec<u8>) {
        out.put_u8(self.table_id);
        out.put_zeros(3);
        out.put_u32(self.config);
    }

    /// Whether the switch accepts it: OpenFlow 1.3 gives table config no
    /// meaning left, so a valid table and only the deprecated bits are a
    /// successful no-op; 1.4's settings were checked as they were read.
    pub fn check(&self) -> Result<(), (u16, u16)> {
        if self.table_id > TABLE_MAX && self.table_id != TABLE_ALL {
            return Err((err::TABLE_MOD_FAILED, err::TMFC_BAD_TABLE));
        }
        if self.settings.is_none() && self.config & !TABLE_CONFIG_DEPRECATED_MASK != 0 {
            return Err((err::TABLE_MOD_FAILED, err::TMFC_BAD_CONFIG));
        }
        Ok(())
    }
}

/// OFPGT_* bits of the group types xbr implements.
const GROUP_TYPES: u32 = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 3);
/// OFPGFC_SELECT_WEIGHT: select buckets are chosen in proportion to
/// their weights. Select groups do not skip dead buckets (fast-failover
/// groups do: their liveness is not a capability bit), and groups do not
/// chain.
const GROUP_CAPABILITIES: u32 = 1;
/// Groups per type: the switch's bound on all groups together (each type
/// may use all of it).
const MAX_GROUPS: u32 = flowtable::group::MAX_GROUPS as u32;

/// The OFPMP_GROUP_FEATURES reply body.
pub fn group_features_entry() -> Vec<u8> {
    let actions = (1u32 << OFPAT_OUTPUT) | (1 << OFPAT_GROUP) | (1 << OFPAT_SET_FIELD);
    let mut out = Vec::with_capacity(40);
    out.put_u32(GROUP_TYPES);
    out.put_u32(GROUP_CAPABILITIES);
    for _ in 0..4 {
        out.put_u32(MAX_GROUPS);
    }
    for _ in 0..4 {
        out.put_u32(actions);
    }
    out
}

/// The OFPT_QUEUE_GET_CONFIG_REPLY body for `port`: no queues listed.
pub fn queue_config_reply_body(port: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(8);
    out.put_u32(port);
    out.put_zeros(4);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_mods() {
        let t = |table_id, config| {
            TableMod {
                table_id,
                config,
                settings: None,
            }
            .check()
        };
        assert_eq!(t(0, 0), Ok(()));
        assert_eq!(t(TABLE_ALL, 3), Ok(()));
        assert_eq!(t(254, 0), Err((err::TABLE_MOD_FAILED, err::TMFC_BAD_TABLE)));
        assert_eq!(t(1, 4), Err((err::TABLE_MOD_FAILED, err::TMFC_BAD_CONFIG)));
        let mut bytes = Vec::new();
        TableMod {
            table_id: 3,
            config: 0,
            settings: None,
        }
        .emit(&mut bytes);
        assert_eq!(
            TableMod::parse(&bytes),
            Ok(TableMod {
                table_id: 3,
                config: 0,
                settings: None,
            })
        );
        assert!(TableMod::parse(&bytes[..6]).is_err());
    }
}
