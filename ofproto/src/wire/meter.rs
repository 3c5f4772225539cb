//! OFPT_METER_MOD and the meter multipart bodies (OFPMP_METER,
//! OFPMP_METER_CONFIG, OFPMP_METER_FEATURES).
//!
//! The decoder checks the framing and what only the wire can say (the
//! command, the band types); ids, flags and rates are the meter table's to
//! judge (`flowtable::FlowTables::meter_mod`), so a bundled meter mod is
//! checked the same way.

use super::{err, Ctx, Put, Reader, WireError};
use flowtable::meter::{meter_flags, MAX_BANDS, MAX_METERS};
use flowtable::{Meter, MeterBand, MeterBandType, MeterMod, MeterModCommand};
use std::time::Duration;

/// OFPMC_* meter mod commands.
pub mod meter_command {
    pub const ADD: u16 = 0;
    pub const MODIFY: u16 = 1;
    pub const DELETE: u16 = 2;
}

/// OFPMBT_* band types.
pub mod band_type {
    pub const DROP: u16 = 1;
    pub const DSCP_REMARK: u16 = 2;
    pub const EXPERIMENTER: u16 = 0xffff;
}

/// Length of an `ofp_meter_band_drop` / `_dscp_remark` (and the fixed
/// part of `_experimenter`).
const BAND_LEN: u16 = 16;
/// Length of `ofp_meter_config` before its bands.
const CONFIG_LEN: usize = 8;
/// Length of `ofp_meter_stats` before its band stats.
const STATS_LEN: usize = 40;

fn bad(code: u16, detail: String) -> WireError {
    WireError::MeterMod(code, detail)
}

/// Decodes an OFPT_METER_MOD body. A DELETE's flags and bands are
/// ignored, as OVS ignores them.
pub fn parse_meter_mod(body: &[u8]) -> Result<MeterMod, WireError> {
    let mut r = Reader::new(body, Ctx::Request, "meter mod");
    let command = match r.u16()? {
        meter_command::ADD => MeterModCommand::Add,
        meter_command::MODIFY => MeterModCommand::Modify,
        meter_command::DELETE => MeterModCommand::Delete,
        c => return Err(bad(err::MMFC_BAD_COMMAND, format!("meter command {c}"))),
    };
    let flags = r.u16()?;
    let meter_id = r.u32()?;
    if command == MeterModCommand::Delete {
        return Ok(MeterMod {
            command,
            flags: 0,
            meter_id,
            bands: Vec::new(),
        });
    }
    let mut bands = Vec::new();
    while !r.is_empty() {
        let ty = r.u16()?;
        let len = r.u16()?;
        if len < BAND_LEN || len % 8 != 0 || usize::from(len) - 4 > r.remaining() {
            return Err(Ctx::Request.bad_len(format!("meter band length {len}")));
        }
        let rate = r.u32()?;
        let burst_size = r.u32()?;
        let last = r.u8()?;
        r.skip(usize::from(len) - 13)?;
        let band_type = match ty {
            band_type::DROP => MeterBandType::Drop,
            band_type::DSCP_REMARK => MeterBandType::DscpRemark { prec_level: last },
            t => return Err(bad(err::MMFC_BAD_BAND, format!("meter band type {t:#x}"))),
        };
        bands.push(MeterBand {
            band_type,
            rate,
            burst_size,
        });
    }
    Ok(MeterMod {
        command,
        flags,
        meter_id,
        bands,
    })
}

fn emit_band(b: &MeterBand, out: &mut Vec<u8>) {
    let (ty, prec_level) = match b.band_type {
        MeterBandType::Drop => (band_type::DROP, 0),
        MeterBandType::DscpRemark { prec_level } => (band_type::DSCP_REMARK, prec_level),
    };
    out.put_u16(ty);
    out.put_u16(BAND_LEN);
    out.put_u32(b.rate);
    out.put_u32(b.burst_size);
    out.put_u8(prec_level);
    out.put_zeros(3);
}

pub fn emit_meter_mod(mm: &MeterMod, out: &mut Vec<u8>) {
    out.put_u16(match mm.command {
        MeterModCommand::Add => meter_command::ADD,
        MeterModCommand::Modify => meter_command::MODIFY,
        MeterModCommand::Delete => meter_command::DELETE,
    });
    out.put_u16(mm.flags);
    out.put_u32(mm.meter_id);
    for b in &mm.bands {
        emit_band(b, out);
    }
}

/// The OFPMP_METER_FEATURES reply body: what the meters implement.
pub fn meter_features_entry() -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    out.put_u32(MAX_METERS); // max_meter
    out.put_u32((1 << band_type::DROP) | (1 << band_type::DSCP_REMARK));
    out.put_u32(u32::from(meter_flags::ALL)); // capabilities
    out.put_u8(MAX_BANDS as u8);
    // No color-aware bands.
    out.put_u8(0);
    out.put_zeros(2);
    out
}

/// One `ofp_meter_config` (OFPMP_METER_CONFIG reply entry).
pub fn meter_config_entry(m: &Meter) -> Vec<u8> {
    let mut out = Vec::with_capacity(CONFIG_LEN + m.bands.len() * usize::from(BAND_LEN));
    out.put_u16(0); // length, below
    out.put_u16(m.flags);
    out.put_u32(m.id);
    for b in &m.bands {
        emit_band(b, &mut out);
    }
    let len = u16::try_from(out.len()).unwrap_or(u16::MAX).to_be_bytes();
    out[..2].copy_from_slice(&len);
    out
}

/// One `ofp_meter_stats` (OFPMP_METER reply entry) for meter `m`, used
/// by `flow_count` flows and installed `age` ago.
pub fn meter_stats_entry(m: &Meter, flow_count: u32, age: Duration) -> Vec<u8> {
    let mut out = Vec::with_capacity(STATS_LEN + m.bands.len() * 16);
    let (packets, bytes) = m.stats.input.read();
    out.put_u32(m.id);
    out.put_u16(0); // len, below
    out.put_zeros(6);
    out.put_u32(flow_count);
    out.put_u64(packets);
    out.put_u64(bytes);
    out.put_u32(u32::try_from(age.as_secs()).unwrap_or(u32::MAX));
    out.put_u32(age.subsec_nanos());
    for b in &m.stats.bands {
        let (p, by) = b.read();
        out.put_u64(p);
        out.put_u64(by);
    }
    let len = u16::try_from(out.len()).unwrap_or(u16::MAX).to_be_bytes();
    out[4..6].copy_from_slice(&len);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowtable::MeterStats;
    use std::sync::Arc;
    use std::time::Instant;

    fn mm(command: MeterModCommand, bands: Vec<MeterBand>) -> MeterMod {
        MeterMod {
            command,
            flags: meter_flags::PKTPS | meter_flags::BURST,
            meter_id: 7,
            bands,
        }
    }

    fn bands() -> Vec<MeterBand> {
        vec![
            MeterBand {
                band_type: MeterBandType::Drop,
                rate: 1000,
                burst_size: 10,
            },
            MeterBand {
                band_type: MeterBandType::DscpRemark { prec_level: 2 },
                rate: 500,
                burst_size: 0,
            },
        ]
    }

    #[test]
    fn meter_mods_round_trip_and_bad_ones_are_refused() {
        let m = mm(MeterModCommand::Modify, bands());
        let mut bytes = Vec::new();
        emit_meter_mod(&m, &mut bytes);
        assert_eq!(bytes.len(), 8 + 32);
        assert_eq!(parse_meter_mod(&bytes), Ok(m));
        let code = |b: &[u8]| parse_meter_mod(b).map_err(|e| e.ofp_error());

        let mut bad_cmd = bytes.clone();
        bad_cmd[1] = 3;
        assert_eq!(code(&bad_cmd), Err((12, err::MMFC_BAD_COMMAND)));
        for ty in [3u8, 0xff] {
            let mut other = bytes.clone();
            other[8..10].copy_from_slice(&[ty, ty]);
            assert_eq!(code(&other), Err((12, err::MMFC_BAD_BAND)));
        }
        // A band that lies about its length, or is cut short.
        let mut short = bytes.clone();
        short[11] = 8;
        assert_eq!(code(&short), Err((err::BAD_REQUEST, err::BRC_BAD_LEN)));
        assert_eq!(
            code(&bytes[..bytes.len() - 4]),
            Err((err::BAD_REQUEST, err::BRC_BAD_LEN))
        );
        // A DELETE's bands do not matter.
        let mut del = bad_cmd;
        del[1] = 2;
        del[8] = 0x77;
        assert_eq!(code(&del).map(|m| m.bands.len()), Ok(0));
    }

    #[test]
    fn config_and_stats_entries() {
        let meter = Meter {
            id: 9,
            flags: meter_flags::KBPS | meter_flags::STATS,
            bands: bands(),
            stats: Arc::new(MeterStats::new(2, Instant::now())),
        };
        meter.stats.count_in(100);
        meter.stats.count_band(1, 100);
        let c = meter_config_entry(&meter);
        assert_eq!(&c[..8], &[0, 40, 0, 9, 0, 0, 0, 9]);
        assert_eq!(c[8 + 16 + 12], 2, "prec_level");
        let s = meter_stats_entry(&meter, 3, Duration::from_millis(1500));
        assert_eq!(s.len(), 40 + 32);
        assert_eq!(&s[4..6], &[0, 72]);
        assert_eq!(&s[12..16], &3u32.to_be_bytes());
        assert_eq!(&s[16..24], &1u64.to_be_bytes());
        assert_eq!(&s[32..36], &1u32.to_be_bytes());
        assert_eq!(&s[36..40], &500_000_000u32.to_be_bytes());
        assert_eq!(&s[40..56], &[0; 16]);
        assert_eq!(&s[56..64], &1u64.to_be_bytes());
    }
}
