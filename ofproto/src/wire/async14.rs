//! OpenFlow 1.4's asynchronous configuration (the same in 1.5): SET_ASYNC
//! and GET_ASYNC_REPLY carry one property per kind of message and role
//! (type 2k for a secondary/slave connection, 2k+1 for a primary/equal
//! one; length 8; a mask of reasons) for six kinds: PACKET_IN,
//! PORT_STATUS, FLOW_REMOVED, ROLE_STATUS, TABLE_STATUS and
//! REQUESTFORWARD. A SET_ASYNC changes only the properties it carries.
//!
//! As OVS: a reason outside what the version defines is refused with
//! OFPACFC_INVALID, an unknown property (experimenters' included) with
//! OFPACFC_UNSUPPORTED, and the reply lists all twelve properties. xbr
//! never sends ROLE_STATUS, TABLE_STATUS or REQUESTFORWARD; their masks
//! are kept so that a GET_ASYNC tells what was set.

use super::message::AsyncConfig;
use super::{Ctx, Put, Reader, WireError};

/// OFPACFC_* (OFPET_ASYNC_CONFIG_FAILED, 15).
pub mod acfc {
    pub const INVALID: u16 = 0;
    pub const UNSUPPORTED: u16 = 1;
}

/// The reasons each kind may select in 1.4 and 1.5, in property order:
/// packet-in (table miss, apply-action, invalid TTL, action set, group,
/// packet-out), port status (add, delete, modify), flow removed (idle,
/// hard, delete, group delete, meter delete, eviction), role status
/// (master request, config, experimenter), table status (vacancy down,
/// up), requestforward (group mod, meter mod).
const ALLOWED: [u32; KINDS] = [0x3f, 0x7, 0x3f, 0x7, 0x18, 0x3];
const KINDS: usize = 6;

/// A connection's whole 1.4 configuration: 1.3's three kinds (which the
/// notifier reads) and the three 1.4 added.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AsyncConfig14 {
    pub base: AsyncConfig,
    pub role_status_mask: [u32; 2],
    pub table_status_mask: [u32; 2],
    pub requestforward_mask: [u32; 2],
}

impl AsyncConfig14 {
    /// OVS's defaults for a 1.4/1.5 connection: every packet-in reason but
    /// invalid TTL, every port status, every flow removal, to primaries
    /// (port status to secondaries too); none of the kinds 1.4 added.
    pub fn later_default() -> Self {
        AsyncConfig14 {
            base: AsyncConfig {
                packet_in_mask: [0x3b, 0],
                port_status_mask: [0x7, 0x7],
                flow_removed_mask: [0x3f, 0],
            },
            role_status_mask: [0, 0],
            table_status_mask: [0, 0],
            requestforward_mask: [0, 0],
        }
    }

    fn masks(&mut self, kind: usize) -> Option<&mut [u32; 2]> {
        match kind {
            0 => Some(&mut self.base.packet_in_mask),
            1 => Some(&mut self.base.port_status_mask),
            2 => Some(&mut self.base.flow_removed_mask),
            3 => Some(&mut self.role_status_mask),
            4 => Some(&mut self.table_status_mask),
            5 => Some(&mut self.requestforward_mask),
            _ => None,
        }
    }

    /// A SET_ASYNC body applied to `self`.
    pub fn with_set_async(mut self, body: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(body, Ctx::Request, "async config");
        while !r.is_empty() {
            let (ty, len, mut value) = r.property("async config property")?;
            let kind = usize::from(ty / 2);
            // Type 2k is the secondary's (index 1), 2k+1 the primary's.
            let role = usize::from(ty % 2 == 0);
            let (Some(allowed), Some(masks)) = (ALLOWED.get(kind).copied(), self.masks(kind))
            else {
                return Err(WireError::AsyncConfig(
                    acfc::UNSUPPORTED,
                    format!("async config property type {ty}"),
                ));
            };
            if value.remaining() != 4 {
                return Err(WireError::BadProperty(
                    super::err::BPC_BAD_LEN,
                    format!("async config property {ty} of length {len}"),
                ));
            }
            let mask = value.u32()?;
            if mask & !allowed != 0 {
                return Err(WireError::AsyncConfig(
                    acfc::INVALID,
                    format!(
                        "reasons {mask:#x} for async config property {ty} (allowed {allowed:#x})"
                    ),
                ));
            }
            if let Some(m) = masks.get_mut(role) {
                *m = mask;
            }
        }
        Ok(self)
    }

    /// The GET_ASYNC_REPLY (or SET_ASYNC) body: all twelve properties.
    pub fn emit(&self, out: &mut Vec<u8>) {
        let kinds = [
            self.base.packet_in_mask,
            self.base.port_status_mask,
            self.base.flow_removed_mask,
            self.role_status_mask,
            self.table_status_mask,
            self.requestforward_mask,
        ];
        for (kind, masks) in kinds.into_iter().enumerate() {
            for (ty, mask) in [(2 * kind, masks[1]), (2 * kind + 1, masks[0])] {
                out.put_u16(ty as u16);
                out.put_u16(8);
                out.put_u32(mask);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::err;
    use super::*;

    fn prop(ty: u16, mask: u32) -> Vec<u8> {
        let mut b = Vec::new();
        b.put_u16(ty);
        b.put_u16(8);
        b.put_u32(mask);
        b
    }

    #[test]
    fn a_set_async_changes_only_what_it_names() {
        let d = AsyncConfig14::later_default();
        let mut body = prop(1, 0x1);
        body.extend(prop(4, 0x4));
        body.extend(prop(9, 0x18));
        let c = d.with_set_async(&body).unwrap();
        assert_eq!(c.base.packet_in_mask, [0x1, 0]);
        assert_eq!(c.base.flow_removed_mask, [0x3f, 0x4]);
        assert_eq!(c.base.port_status_mask, d.base.port_status_mask);
        assert_eq!(c.table_status_mask, [0x18, 0]);
        let mut round = Vec::new();
        c.emit(&mut round);
        assert_eq!(round.len(), 12 * 8);
        assert_eq!(AsyncConfig14::later_default().with_set_async(&round), Ok(c));
    }

    #[test]
    fn refuses_what_ovs_refuses() {
        let code = |body: &[u8]| {
            AsyncConfig14::later_default()
                .with_set_async(body)
                .map_err(|e| e.ofp_error())
        };
        assert_eq!(
            code(&prop(1, 0x40)),
            Err((err::ASYNC_CONFIG_FAILED, acfc::INVALID))
        );
        assert_eq!(
            code(&prop(10, 0x4)),
            Err((err::ASYNC_CONFIG_FAILED, acfc::INVALID))
        );
        assert_eq!(
            code(&prop(12, 0)),
            Err((err::ASYNC_CONFIG_FAILED, acfc::UNSUPPORTED))
        );
        assert_eq!(
            code(&prop(0xffff, 0)),
            Err((err::ASYNC_CONFIG_FAILED, acfc::UNSUPPORTED))
        );
        assert_eq!(
            code(&[0, 1, 0, 4]),
            Err((err::BAD_PROPERTY, err::BPC_BAD_LEN))
        );
        assert_eq!(code(&[0, 1, 0]), Err((err::BAD_PROPERTY, err::BPC_BAD_LEN)));
    }
}
