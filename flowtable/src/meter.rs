//! OpenFlow 1.3 meters: what a METER_MOD says and the meter table entry
//! it makes.
//!
//! Like a [`crate::group::Group`], a [`Meter`] is immutable once
//! published: a MODIFY publishes a new `Meter` sharing the counters. The
//! token buckets are not here: a meter's state that changes per packet
//! belongs to the packet thread that runs it (the datapath keeps them,
//! keyed by meter id, and rebuilds them from a published `Meter`). Only
//! the counters are shared, as Relaxed atomics the control plane reads.

use crate::rule::RuleStats;
use std::sync::Arc;
use std::time::Instant;

/// OFPM_MAX: the highest meter id a controller may create.
pub const METER_MAX: u32 = 0xffff_0000;
/// OFPM_SLOWPATH, OFPM_CONTROLLER: virtual meters OpenFlow reserves for
/// the switch's slow path and its controller connection. xbr, like OVS's
/// userspace datapath, has no such meters: a mod naming them is refused.
pub const METER_SLOWPATH: u32 = 0xffff_fffd;
pub const METER_CONTROLLER: u32 = 0xffff_fffe;
/// OFPM_ALL: every meter (delete, stats and config requests).
pub const METER_ALL: u32 = 0xffff_ffff;

/// Meters the switch admits (OVS's userspace datapath has the same limit).
pub const MAX_METERS: u32 = 65_536;
/// Bands per meter (OVS's MAX_BANDS).
pub const MAX_BANDS: usize = 8;

/// OFPMF_* meter flags.
pub mod meter_flags {
    /// Rates and bursts in kbit/s and kbit.
    pub const KBPS: u16 = 1 << 0;
    /// Rates and bursts in packets/s and packets.
    pub const PKTPS: u16 = 1 << 1;
    /// Use the bands' burst_size (else a default).
    pub const BURST: u16 = 1 << 2;
    /// Collect statistics.
    pub const STATS: u16 = 1 << 3;
    pub const ALL: u16 = KBPS | PKTPS | BURST | STATS;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MeterModCommand {
    Add,
    Modify,
    Delete,
}

/// What a band does to a packet over its rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MeterBandType {
    /// OFPMBT_DROP.
    Drop,
    /// OFPMBT_DSCP_REMARK: raise the drop precedence of the DSCP by
    /// `prec_level`.
    DscpRemark { prec_level: u8 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MeterBand {
    pub band_type: MeterBandType,
    /// kbit/s, or packets/s with OFPMF_PKTPS.
    pub rate: u32,
    /// kbit, or packets with OFPMF_PKTPS; used with OFPMF_BURST.
    pub burst_size: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MeterMod {
    pub command: MeterModCommand,
    pub flags: u16,
    pub meter_id: u32,
    pub bands: Vec<MeterBand>,
}

/// A meter's counters. Packet threads add with Relaxed ordering.
#[derive(Debug)]
pub struct MeterStats {
    /// Packets and bytes that entered the meter.
    pub input: RuleStats,
    /// Packets and bytes each band applied to, by band index.
    pub bands: Vec<RuleStats>,
    /// When the meter was added (a MODIFY keeps it).
    pub installed: Instant,
}

impl MeterStats {
    /// Zeroed counters for `n_bands` bands of a meter added at
    /// `installed`.
    pub fn new(n_bands: usize, installed: Instant) -> Self {
        MeterStats {
            input: RuleStats::default(),
            bands: (0..n_bands).map(|_| RuleStats::default()).collect(),
            installed,
        }
    }

    /// A packet of `bytes` entered the meter.
    #[inline]
    pub fn count_in(&self, bytes: u32) {
        self.input.count(bytes);
    }

    /// Band `band` applied to a packet of `bytes`.
    #[inline]
    pub fn count_band(&self, band: usize, bytes: u32) {
        if let Some(b) = self.bands.get(band) {
            b.count(bytes);
        }
    }
}

/// A meter table entry.
#[derive(Debug)]
pub struct Meter {
    pub id: u32,
    pub flags: u16,
    pub bands: Vec<MeterBand>,
    pub stats: Arc<MeterStats>,
}

impl Meter {
    /// Whether rates count packets (OFPMF_PKTPS) rather than kbit.
    pub fn pktps(&self) -> bool {
        self.flags & meter_flags::PKTPS != 0
    }
}
