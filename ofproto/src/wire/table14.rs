//! OpenFlow 1.4's table configuration (the same in 1.5): TABLE_MOD with
//! properties, and the TABLE_DESC multipart that reports it.
//!
//! - `ofp_table_mod`: table id, padding and config (8 bytes, as in 1.3),
//!   then properties: EVICTION (type 2: the eviction flags) and VACANCY
//!   (type 3: vacancy_down, vacancy_up, vacancy, padding). Config's
//!   OFPTC_EVICTION and OFPTC_VACANCY_EVENTS bits switch the two on or
//!   off; a 1.4 table mod always says both, so ovs-ofctl reads the table
//!   description first to keep the one it does not change.
//! - `ofp_table_desc`: length, table id, padding, config, then the
//!   EVICTION property with the flags the switch evicts by (always, as
//!   OVS sends it) and the VACANCY property when vacancy events are on,
//!   with the table's current vacancy.
//!
//! xbr's tables have no size limit (like OVS's without a `flow_limit` in
//! its Flow_Table), so eviction, once on, never has a flow to evict, and
//! a table's vacancy is computed as OVS computes it for an unlimited
//! table: 100% when empty, 99% otherwise.

use super::{err, Ctx, Put, Reader, WireError};

/// OFPTC_EVICTION and OFPTC_VACANCY_EVENTS.
pub const OFPTC_EVICTION: u32 = 1 << 2;
pub const OFPTC_VACANCY_EVENTS: u32 = 1 << 3;

/// OFPTMPT_EVICTION and OFPTMPT_VACANCY.
const PROP_EVICTION: u16 = 2;
const PROP_VACANCY: u16 = 3;

/// OFPTMPEF_OTHER | OFPTMPEF_IMPORTANCE | OFPTMPEF_LIFETIME: what the
/// switch would evict by, the one combination OVS reports and accepts.
pub const EVICTION_FLAGS: u32 = 1 | 2 | 4;

/// A table's configuration as OpenFlow 1.4 sets and reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableSettings {
    pub eviction: bool,
    pub vacancy_events: bool,
    /// Vacancy thresholds (percent) of the events: down, then up.
    pub vacancy_down: u8,
    pub vacancy_up: u8,
}

impl TableSettings {
    fn config(&self) -> u32 {
        let mut c = 0;
        if self.eviction {
            c |= OFPTC_EVICTION;
        }
        if self.vacancy_events {
            c |= OFPTC_VACANCY_EVENTS;
        }
        c
    }
}

/// A table's vacancy (percent) holding `n_flows` flows, with no size
/// limit: OVS's arithmetic for a table whose maximum is `u32::MAX`, whose
/// result it truncates to a whole percent.
pub fn vacancy(n_flows: u32) -> u8 {
    let max = f64::from(u32::MAX);
    let free = f64::from(u32::MAX - n_flows);
    (free * 100.0 / max) as u8
}

/// Decodes a 1.4/1.5 `ofp_table_mod` body into the table id and the
/// settings it gives the table (or every table, for OFPTT_ALL).
pub fn parse_table_mod(body: &[u8]) -> Result<(u8, TableSettings), WireError> {
    let mut r = Reader::new(body, Ctx::Request, "table_mod");
    let table_id = r.u8()?;
    r.skip(3)?;
    let config = r.u32()?;
    let mut s = TableSettings {
        eviction: config & OFPTC_EVICTION != 0,
        vacancy_events: config & OFPTC_VACANCY_EVENTS != 0,
        ..Default::default()
    };
    while !r.is_empty() {
        let (ty, len, mut value) = r.property("table_mod property")?;
        let bad_len = || {
            WireError::BadProperty(
                err::BPC_BAD_LEN,
                format!("table_mod property {ty} of length {len}"),
            )
        };
        match ty {
            PROP_EVICTION => {
                if value.remaining() != 4 {
                    return Err(bad_len());
                }
                // "Usually cannot be modified": only what the switch does.
                let flags = value.u32()?;
                if flags != EVICTION_FLAGS {
                    return Err(WireError::TableMod(
                        err::TMFC_BAD_CONFIG,
                        format!("eviction flags {flags:#x} (the switch's are {EVICTION_FLAGS:#x})"),
                    ));
                }
            }
            PROP_VACANCY => {
                if value.remaining() != 4 {
                    return Err(bad_len());
                }
                let (down, up, current) = (value.u8()?, value.u8()?, value.u8()?);
                let bad_value = |detail: String| WireError::BadProperty(err::BPC_BAD_VALUE, detail);
                if down > up {
                    return Err(bad_value(format!(
                        "vacancy_down {down}% above vacancy_up {up}%"
                    )));
                }
                if up > 100 {
                    return Err(bad_value(format!("vacancy_up {up}% above 100%")));
                }
                if current != 0 {
                    return Err(bad_value(format!(
                        "vacancy {current}% in a table_mod (the switch reports it)"
                    )));
                }
                s.vacancy_down = down;
                s.vacancy_up = up;
            }
            t => {
                return Err(WireError::BadProperty(
                    err::BPC_BAD_TYPE,
                    format!("table_mod property type {t}"),
                ))
            }
        }
    }
    Ok((table_id, s))
}

/// Encodes a 1.4/1.5 `ofp_table_mod` body as ovs-ofctl writes it (the
/// vacancy property only when events are on).
pub fn emit_table_mod(table_id: u8, s: &TableSettings, out: &mut Vec<u8>) {
    out.put_u8(table_id);
    out.put_zeros(3);
    out.put_u32(s.config());
    if s.vacancy_events {
        put_vacancy(out, s, 0);
    }
}

fn put_vacancy(out: &mut Vec<u8>, s: &TableSettings, vacancy: u8) {
    out.put_u16(PROP_VACANCY);
    out.put_u16(8);
    out.put_u8(s.vacancy_down);
    out.put_u8(s.vacancy_up);
    out.put_u8(vacancy);
    out.put_zeros(1);
}

/// One `ofp_table_desc` entry for table `table_id` holding `n_flows`
/// flows.
pub fn table_desc_entry(table_id: u8, s: &TableSettings, n_flows: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(24);
    out.put_u16(0);
    out.put_u8(table_id);
    out.put_zeros(1);
    out.put_u32(s.config());
    out.put_u16(PROP_EVICTION);
    out.put_u16(8);
    out.put_u32(EVICTION_FLAGS);
    if s.vacancy_events {
        put_vacancy(&mut out, s, vacancy(n_flows));
    }
    let len = u16::try_from(out.len()).unwrap_or(u16::MAX);
    out[..2].copy_from_slice(&len.to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mod_bytes(table_id: u8, config: u32, props: &[u8]) -> Vec<u8> {
        let mut b = vec![table_id, 0, 0, 0];
        b.extend_from_slice(&config.to_be_bytes());
        b.extend_from_slice(props);
        b
    }

    #[test]
    fn round_trips_what_ovs_ofctl_sends() {
        let s = TableSettings {
            eviction: true,
            vacancy_events: true,
            vacancy_down: 10,
            vacancy_up: 20,
        };
        let mut b = Vec::new();
        emit_table_mod(3, &s, &mut b);
        assert_eq!(b, mod_bytes(3, 12, &[0, 3, 0, 8, 10, 20, 0, 0]));
        assert_eq!(parse_table_mod(&b), Ok((3, s)));
        let off = TableSettings::default();
        emit_table_mod(0, &off, &mut b);
        assert_eq!(parse_table_mod(&b[16..]), Ok((0, off)));
    }

    #[test]
    fn refuses_bad_properties_as_ovs_does() {
        let code =
            |props: &[u8]| parse_table_mod(&mod_bytes(0, 8, props)).map_err(|e| e.ofp_error());
        assert_eq!(
            code(&[0, 3, 0, 8, 30, 20, 0, 0]),
            Err((err::BAD_PROPERTY, err::BPC_BAD_VALUE))
        );
        assert_eq!(
            code(&[0, 3, 0, 8, 10, 101, 0, 0]),
            Err((err::BAD_PROPERTY, err::BPC_BAD_VALUE))
        );
        assert_eq!(
            code(&[0, 3, 0, 8, 10, 20, 50, 0]),
            Err((err::BAD_PROPERTY, err::BPC_BAD_VALUE))
        );
        assert_eq!(
            code(&[0, 3, 0, 6, 10, 20, 0, 0]),
            Err((err::BAD_PROPERTY, err::BPC_BAD_LEN))
        );
        assert_eq!(
            code(&[0, 2, 0, 8, 0, 0, 0, 1]),
            Err((err::TABLE_MOD_FAILED, err::TMFC_BAD_CONFIG))
        );
        assert!(code(&[0, 2, 0, 8, 0, 0, 0, 7]).is_ok());
        assert_eq!(
            code(&[0, 9, 0, 8, 0, 0, 0, 0]),
            Err((err::BAD_PROPERTY, err::BPC_BAD_TYPE))
        );
        assert_eq!(code(&[0, 3]), Err((err::BAD_PROPERTY, err::BPC_BAD_LEN)));
        assert!(parse_table_mod(&[0, 0, 0]).is_err());
    }

    #[test]
    fn describes_a_table() {
        let on = TableSettings {
            eviction: false,
            vacancy_events: true,
            vacancy_down: 10,
            vacancy_up: 20,
        };
        assert_eq!(
            table_desc_entry(1, &on, 5),
            [0, 24, 1, 0, 0, 0, 0, 8, 0, 2, 0, 8, 0, 0, 0, 7, 0, 3, 0, 8, 10, 20, 99, 0]
        );
        assert_eq!(
            table_desc_entry(0, &TableSettings::default(), 0),
            [0, 16, 0, 0, 0, 0, 0, 0, 0, 2, 0, 8, 0, 0, 0, 7]
        );
        assert_eq!((vacancy(0), vacancy(1), vacancy(1_000_000)), (100, 99, 99));
    }
}
