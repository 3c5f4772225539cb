//! OpenFlow meters as the packet thread runs them: a token bucket per
//! band, and the band a packet falls into.
//!
//! # Design
//!
//! The control plane publishes a meter's configuration (an immutable
//! `flowtable::Meter`) through the pipeline's change lists; the packet
//! thread builds a [`MeterState`] from it and owns the buckets, so running
//! a meter takes no lock. The counters are the meter's shared atomics
//! (Relaxed adds, like a flow's), which METER stats replies read.
//!
//! Semantics follow OVS's userspace datapath: every band's bucket is
//! refilled at the band's rate and a packet takes its cost from each band
//! whose bucket holds it; of the bands it exceeds, the one with the
//! highest rate applies (its counters count the packet). A bucket holds
//! the band's burst_size with OFPMF_BURST and a non-zero burst, otherwise
//! one second at its rate (OVS's default), and starts full.
//!
//! Units: with OFPMF_PKTPS a token is a packet, otherwise a bit (rates are
//! kbit/s, bursts kbit, 1 kbit = 1000 bits as in OVS). Tokens are held in
//! nano-units (x 10^9), so a refill of `rate x elapsed_ns` is exact integer
//! arithmetic at any rate. Time is passed in, in nanoseconds, so tests
//! run on a made-up clock.

use flowtable::key::Field;
use flowtable::meter::meter_flags;
use flowtable::{Meter, MeterBandType};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Instant;
use xbr_packet::parse::Layers;
use xbr_packet::rewrite;

const NANO: u128 = 1_000_000_000;

/// One band's bucket.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    /// Tokens per second.
    rate: u128,
    capacity: u128,
    tokens: u128,
}

impl Bucket {
    fn refill(&mut self, elapsed_ns: u64) {
        let add = self.rate * u128::from(elapsed_ns);
        self.tokens = (self.tokens + add).min(self.capacity);
    }

    fn take(&mut self, cost: u128) -> bool {
        if self.tokens >= cost {
            self.tokens -= cost;
            true
        } else {
            false
        }
    }
}

/// What a meter decided for one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Within every band's rate.
    Pass,
    /// A DROP band applies: the packet goes no further.
    Drop,
    /// A DSCP_REMARK band applies: raise the drop precedence by this much.
    Remark(u8),
}

/// The meters' buckets, shared by the packet threads: each meter (each
/// configuration a `SetMeter` change carries, which every thread receives
/// as the same `Arc<Meter>`) has one [`MeterState`], behind a lock taken
/// per metered packet, so a meter limits the bridge's traffic whatever
/// thread carries it, as OVS's datapath meters do. Keyed by the
/// configuration's address: a state keeps its configuration alive, so
/// the address is not reused while the state is.
#[derive(Default)]
pub struct MeterBank {
    epoch: OnceLock<Instant>,
    states: Mutex<HashMap<usize, Weak<Mutex<MeterState>>>>,
}

impl MeterBank {
    /// Nanoseconds since the bank's first use: the meters' time base.
    pub fn now_ns(&self) -> u64 {
        let epoch = self.epoch.get_or_init(Instant::now);
        epoch.elapsed().as_nanos() as u64
    }

    /// The running state of `meter`: the one another thread made, or new
    /// full buckets.
    pub fn state(&self, meter: &Arc<Meter>) -> Arc<Mutex<MeterState>> {
        let now = self.now_ns();
        let mut states = self.states.lock();
        let key = Arc::as_ptr(meter) as usize;
        if let Some(s) = states.get(&key).and_then(Weak::upgrade) {
            return s;
        }
        states.retain(|_, w| w.strong_count() > 0);
        let s = Arc::new(Mutex::new(MeterState::new(meter.clone(), now)));
        states.insert(key, Arc::downgrade(&s));
        s
    }
}

/// A meter as the packet thread runs it.
#[derive(Debug)]
pub struct MeterState {
    meter: Arc<Meter>,
    buckets: Vec<Bucket>,
    last_ns: u64,
}

impl MeterState {
    /// Full buckets for `meter` at time `now_ns`.
    pub fn new(meter: Arc<Meter>, now_ns: u64) -> Self {
        let pktps = meter.pktps();
        let use_burst = meter.flags & meter_flags::BURST != 0;
        let buckets = meter
            .bands
            .iter()
            .map(|b| {
                // A packet or a bit per token; kbit is 1000 bits.
                let unit = if pktps { 1 } else { 1000 };
                let burst = if use_burst && b.burst_size != 0 {
                    b.burst_size
                } else {
                    b.rate
                };
                let capacity = u128::from(burst) * unit * NANO;
                Bucket {
                    rate: u128::from(b.rate) * unit,
                    capacity,
                    tokens: capacity,
                }
            })
            .collect();
        MeterState {
            meter,
            buckets,
            last_ns: now_ns,
        }
    }

    /// The configuration these buckets were built from.
    pub fn meter(&self) -> &Arc<Meter> {
        &self.meter
    }

    /// Runs a packet of `len` bytes through the meter at `now_ns` and
    /// counts it.
    pub fn run(&mut self, len: u32, now_ns: u64) -> Verdict {
        let elapsed = now_ns.saturating_sub(self.last_ns);
        self.last_ns = self.last_ns.max(now_ns);
        let cost = if self.meter.pktps() {
            NANO
        } else {
            u128::from(len) * 8 * NANO
        };
        let stats = &self.meter.stats;
        stats.count_in(len);
        let mut applied: Option<usize> = None;
        for (i, b) in self.buckets.iter_mut().enumerate() {
            b.refill(elapsed);
            if !b.take(cost) {
                let rate = |j: usize| self.meter.bands.get(j).map_or(0, |band| band.rate);
                if applied.is_none_or(|a| rate(i) > rate(a)) {
                    applied = Some(i);
                }
            }
        }
        let Some(i) = applied else {
            return Verdict::Pass;
        };
        stats.count_band(i, len);
        match self.meter.bands.get(i).map(|b| b.band_type) {
            Some(MeterBandType::DscpRemark { prec_level }) => Verdict::Remark(prec_level),
            _ => Verdict::Drop,
        }
    }
}

/// Raises the drop precedence of an IP packet's DSCP by `prec_level`
/// (capped at the highest, 3), fixing the IPv4 header checksum (IPv6 has
/// none, and no L4 checksum covers the traffic class). Only the Assured
/// Forwarding codepoints (RFC 2597: class 1-4, precedence 1-3) have a
/// drop precedence; other packets are left alone, as in the OpenFlow
/// reference switch. Returns whether the packet changed.
pub fn remark_dscp(frame: &mut [u8], layers: Layers, prec_level: u8) -> bool {
    let l3 = usize::from(layers.l3);
    let ethertype = l3
        .checked_sub(2)
        .and_then(|at| frame.get(at..l3))
        .map(|b| u16::from_be_bytes([b[0], b[1]]));
    match ethertype {
        Some(ETH_TYPE_IPV4) => {
            let Some(&tos) = frame.get(l3 + 1) else {
                return false;
            };
            match raised(tos >> 2, prec_level) {
                Some(dscp) => rewrite::set_field(frame, layers, Field::IpDscp, u64::from(dscp)),
                None => false,
            }
        }
        Some(ETH_TYPE_IPV6) => {
            // Version (4 bits), traffic class (8: DSCP and ECN), flow label.
            let Some(b) = frame.get_mut(l3..l3 + 2) else {
                return false;
            };
            if b[0] >> 4 != 6 {
                return false;
            }
            let tc = (b[0] << 4) | (b[1] >> 4);
            let Some(dscp) = raised(tc >> 2, prec_level) else {
                return false;
            };
            let tc = (dscp << 2) | (tc & 3);
            b[0] = (b[0] & 0xf0) | (tc >> 4);
            b[1] = (b[1] & 0x0f) | (tc << 4);
            true
        }
        _ => false,
    }
}

const ETH_TYPE_IPV4: u16 = 0x0800;
const ETH_TYPE_IPV6: u16 = 0x86dd;

/// The AF codepoint `dscp` with its drop precedence raised by
/// `prec_level`, or `None` if it has none or it is at the highest.
fn raised(dscp: u8, prec_level: u8) -> Option<u8> {
    let (class, prec, low) = (dscp >> 3, (dscp >> 1) & 3, dscp & 1);
    if !(1..=4).contains(&class) || prec == 0 || low != 0 {
        return None;
    }
    let up = prec.saturating_add(prec_level).min(3);
    (up != prec).then_some((class << 3) | (up << 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowtable::{MeterBand, MeterStats};
    use std::time::Instant;

    const MS: u64 = 1_000_000;

    fn meter(flags: u16, bands: &[(MeterBandType, u32, u32)]) -> Arc<Meter> {
        let bands: Vec<MeterBand> = bands
            .iter()
            .map(|&(band_type, rate, burst_size)| MeterBand {
                band_type,
                rate,
                burst_size,
            })
            .collect();
        Arc::new(Meter {
            id: 1,
            flags,
            stats: Arc::new(MeterStats::new(bands.len(), Instant::now())),
            bands,
        })
    }

    #[test]
    fn pktps_drop_passes_the_burst_then_the_rate() {
        let m = meter(
            meter_flags::PKTPS | meter_flags::BURST,
            &[(MeterBandType::Drop, 1000, 10)],
        );
        let mut s = MeterState::new(m.clone(), 0);
        // The full bucket: 10 packets at once, then nothing.
        let passed = (0..20).filter(|_| s.run(100, 0) == Verdict::Pass).count();
        assert_eq!(passed, 10);
        // 1000 pps: one packet per millisecond.
        assert_eq!(s.run(100, MS), Verdict::Pass);
        assert_eq!(s.run(100, MS), Verdict::Drop);
        // 5000 pps offered for a second pass the rate (and the burst).
        let mut passed = 0;
        for i in 0..5000u64 {
            if s.run(100, 2 * MS + i * MS / 5) == Verdict::Pass {
                passed += 1;
            }
        }
        assert!((999..=1011).contains(&passed), "{passed}");
        let (pkts_in, bytes_in) = m.stats.input.read();
        assert_eq!((pkts_in, bytes_in), (5022, 502_200));
        assert_eq!(m.stats.bands[0].read().0, pkts_in - passed - 11);
    }

    #[test]
    fn kbps_counts_bits_and_the_default_burst_is_a_second() {
        // 800 kbit/s = 100 kB/s; no BURST flag: a second's worth (100 kB).
        let m = meter(meter_flags::KBPS, &[(MeterBandType::Drop, 800, 1)]);
        let mut s = MeterState::new(m, 0);
        let passed = (0..200).filter(|_| s.run(1000, 0) == Verdict::Pass).count();
        assert_eq!(passed, 100);
        // 10 ms refill 1000 bytes: one 1000-byte packet.
        assert_eq!(s.run(1000, 10 * MS), Verdict::Pass);
        assert_eq!(s.run(1000, 10 * MS), Verdict::Drop);
        // A clock going backwards refills nothing.
        assert_eq!(s.run(1, 5 * MS), Verdict::Drop);
    }

    #[test]
    fn the_exceeded_band_with_the_highest_rate_applies() {
        let remark = MeterBandType::DscpRemark { prec_level: 1 };
        let m = meter(
            meter_flags::PKTPS | meter_flags::BURST,
            &[(MeterBandType::Drop, 200, 2), (remark, 100, 1)],
        );
        let mut s = MeterState::new(m.clone(), 0);
        // Both buckets hold the first; the second exceeds the remark
        // band only; the third both, and the drop band's rate is higher.
        assert_eq!(s.run(64, 0), Verdict::Pass);
        assert_eq!(s.run(64, 0), Verdict::Remark(1));
        assert_eq!(s.run(64, 0), Verdict::Drop);
        assert_eq!(m.stats.bands[0].read(), (1, 64));
        assert_eq!(m.stats.bands[1].read(), (1, 64));
        assert_eq!(m.stats.input.read(), (3, 192));
    }

    fn ipv4(tos: u8) -> Vec<u8> {
        let mut f = vec![0u8; 34];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[15] = tos;
        f[16..18].copy_from_slice(&20u16.to_be_bytes());
        f[22] = 64;
        f[23] = 17;
        let sum = xbr_packet::csum::fold(xbr_packet::csum::ones_sum(&f[14..34]));
        f[24..26].copy_from_slice(&(!sum).to_be_bytes());
        f
    }

    fn header_ok(f: &[u8]) -> bool {
        xbr_packet::csum::fold(xbr_packet::csum::ones_sum(&f[14..34])) == 0xffff
    }

    #[test]
    fn remark_raises_the_drop_precedence_of_af_codepoints() {
        let layers = Layers {
            l3: 14,
            l4: 34,
            proto: 17,
        };
        // AF11 (10) + 1 -> AF12 (12); AF21 (18) + 5 -> AF23 (22).
        for (dscp, level, want) in [(10u8, 1u8, 12u8), (18, 5, 22)] {
            let mut f = ipv4((dscp << 2) | 1);
            assert!(remark_dscp(&mut f, layers, level));
            assert_eq!(f[15], (want << 2) | 1, "ECN bits kept");
            assert!(header_ok(&f));
        }
        // AF13 cannot go higher; EF (46) and best effort have no
        // precedence to raise; ARP is not IP.
        for dscp in [14u8, 46, 0] {
            let mut f = ipv4(dscp << 2);
            assert!(!remark_dscp(&mut f, layers, 1));
            assert_eq!(f[15], dscp << 2);
        }
        let mut arp = ipv4(10 << 2);
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert!(!remark_dscp(&mut arp, layers, 1));
    }

    #[test]
    fn remark_rewrites_the_ipv6_traffic_class() {
        let layers = Layers {
            l3: 14,
            l4: 0,
            proto: 0,
        };
        // Traffic class 0x49: AF21 (18) and ECN 1; flow label 0xabcde.
        let mut f = vec![0u8; 54];
        f[12..14].copy_from_slice(&[0x86, 0xdd]);
        f[14..18].copy_from_slice(&[0x64, 0x9a, 0xbc, 0xde]);
        assert!(remark_dscp(&mut f, layers, 1));
        // AF22 (20): traffic class 0x51, version and flow label kept.
        assert_eq!(&f[14..18], &[0x65, 0x1a, 0xbc, 0xde]);
        f[14] = 0x45;
        assert!(!remark_dscp(&mut f, layers, 1), "not version 6");
    }
}
