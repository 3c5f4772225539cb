//! Per-port rate limits: ingress policing (OVS's Interface
//! `ingress_policing_rate`/`ingress_policing_burst`) and an egress limit
//! (a `linux-htb` QoS's `other_config:max-rate` on the Port).
//!
//! # Design
//!
//! The control plane writes the limits into a port's [`QosConfig`]
//! (atomics in its `PortMeta`); the packet thread compares them once per
//! round with what its [`PortQos`] was built from and rebuilds the
//! buckets when they changed, so the per-packet cost is one comparison
//! and a subtraction, with no lock and no allocation. A port without
//! limits pays one branch per batch.
//!
//! Both limits are token buckets that drop what exceeds them (policing).
//! Ingress policing drops like OVS's tc policer does. The egress limit
//! also drops instead of queueing as HTB would: TCP still converges on the
//! rate, but bursts above the bucket are lost rather than delayed.
//!
//! Tokens are counted in nano-bytes (bytes x 10^9), so a refill of
//! `rate x elapsed_ns` is exact integer arithmetic at any rate.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// OVS's default ingress burst (netdev-linux), in kilobits, when
/// `ingress_policing_burst` is 0.
pub const DEFAULT_INGRESS_BURST_KB: u64 = 8000;
/// The egress bucket holds this long at the rate, and never less than
/// [`MIN_EGRESS_BURST`] bytes: dropping instead of queueing, a smaller
/// bucket makes TCP back off far below the rate (a 64 KiB bucket gave a
/// quarter of 10 Mbit/s), while this one, the ingress default, lets it
/// settle on the rate.
const EGRESS_BURST_NS: u64 = 100_000_000;
const MIN_EGRESS_BURST: u64 = DEFAULT_INGRESS_BURST_KB * 1024 / 8;
const NANO: u128 = 1_000_000_000;

/// A port's limits as the control plane sets them; 0 means none.
#[derive(Default, Debug)]
pub struct QosConfig {
    /// Ingress policing rate, kbit/s (1000 bits).
    pub ingress_kbps: AtomicU64,
    /// Ingress burst, kbit (1024 bits, as OVS's tc policer counts it); 0
    /// for the default.
    pub ingress_burst_kb: AtomicU64,
    /// Egress limit, bit/s.
    pub egress_bps: AtomicU64,
}

impl QosConfig {
    pub fn set(&self, ingress_kbps: u64, ingress_burst_kb: u64, egress_bps: u64) {
        self.ingress_kbps.store(ingress_kbps, Relaxed);
        self.ingress_burst_kb.store(ingress_burst_kb, Relaxed);
        self.egress_bps.store(egress_bps, Relaxed);
    }

    fn snapshot(&self) -> [u64; 3] {
        [
            self.ingress_kbps.load(Relaxed),
            self.ingress_burst_kb.load(Relaxed),
            self.egress_bps.load(Relaxed),
        ]
    }
}

/// A token bucket; see the module documentation for its units.
#[derive(Clone, Copy, Debug)]
pub struct TokenBucket {
    rate_bytes_per_sec: u64,
    capacity: u128,
    tokens: u128,
    last_ns: u64,
}

impl TokenBucket {
    /// A full bucket of `burst_bytes` refilled at `rate_bytes_per_sec`.
    pub fn new(rate_bytes_per_sec: u64, burst_bytes: u64, now_ns: u64) -> Self {
        let capacity = u128::from(burst_bytes) * NANO;
        TokenBucket {
            rate_bytes_per_sec,
            capacity,
            tokens: capacity,
            last_ns: now_ns,
        }
    }

    pub fn refill(&mut self, now_ns: u64) {
        // u64 x u64 always fits u128, whatever the pause.
        let elapsed = now_ns.saturating_sub(self.last_ns);
        self.last_ns = now_ns;
        let add = u128::from(self.rate_bytes_per_sec) * u128::from(elapsed);
        self.tokens = (self.tokens + add).min(self.capacity);
    }

    /// Takes `len` bytes' worth if the bucket has them.
    #[inline]
    pub fn take(&mut self, len: u32) -> bool {
        let need = u128::from(len) * NANO;
        if self.tokens >= need {
            self.tokens -= need;
            true
        } else {
            false
        }
    }
}

/// The packet thread's buckets for one port.
#[derive(Clone, Copy, Debug, Default)]
pub struct PortQos {
    built_from: [u64; 3],
    pub ingress: Option<TokenBucket>,
    pub egress: Option<TokenBucket>,
}

impl PortQos {
    /// Rebuilds the buckets if the limits changed, and refills them.
    /// Returns whether the port has any limit.
    #[inline]
    pub fn sync(&mut self, cfg: &QosConfig, now: impl FnOnce() -> u64) -> bool {
        let want = cfg.snapshot();
        if want == [0; 3] && self.built_from == [0; 3] {
            return false;
        }
        let now_ns = now();
        if want != self.built_from {
            let [kbps, burst_kb, egress_bps] = want;
            self.ingress = (kbps > 0).then(|| {
                let burst_kb = if burst_kb == 0 {
                    DEFAULT_INGRESS_BURST_KB
                } else {
                    burst_kb
                };
                TokenBucket::new(kbps * 1000 / 8, burst_kb * 1024 / 8, now_ns)
            });
            self.egress = (egress_bps > 0).then(|| {
                let rate = egress_bps / 8;
                let burst = (u128::from(rate) * u128::from(EGRESS_BURST_NS) / NANO) as u64;
                TokenBucket::new(rate, burst.max(MIN_EGRESS_BURST), now_ns)
            });
            self.built_from = want;
        }
        if let Some(b) = &mut self.ingress {
            b.refill(now_ns);
        }
        if let Some(b) = &mut self.egress {
            b.refill(now_ns);
        }
        self.ingress.is_some() || self.egress.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_passes_the_burst_then_the_rate() {
        // 1000 bytes/s, 1500-byte bucket.
        let mut b = TokenBucket::new(1000, 1500, 0);
        assert!(b.take(1500));
        assert!(!b.take(1));
        b.refill(500_000_000);
        assert!(b.take(500));
        assert!(!b.take(1));
        // Never more than the bucket, however long the pause.
        b.refill(100_000_000_000);
        assert!(b.take(1500));
        assert!(!b.take(1));
    }

    #[test]
    fn long_run_rate_is_the_configured_one() {
        // 10 Mbit/s as OVS writes it (kbit/s), fed 1500-byte packets at
        // twice the rate for 10 s in 1 ms rounds.
        let cfg = QosConfig::default();
        cfg.set(10_000, 0, 0);
        let mut q = PortQos::default();
        let mut passed = 0u64;
        for ms in 0..10_000u64 {
            assert!(q.sync(&cfg, || ms * 1_000_000));
            for _ in 0..2 {
                if q.ingress.as_mut().unwrap().take(1500) {
                    passed += 1500;
                }
            }
        }
        let rate = passed * 8 / 10;
        let burst_bits = DEFAULT_INGRESS_BURST_KB * 1024;
        let expect = 10_000_000 + burst_bits / 10;
        assert!(rate.abs_diff(expect) < expect / 100, "{rate} vs {expect}");
    }

    #[test]
    fn no_limits_cost_nothing_and_changes_rebuild() {
        let cfg = QosConfig::default();
        let mut q = PortQos::default();
        assert!(!q.sync(&cfg, || panic!("clock read without limits")));
        cfg.set(0, 0, 8_000_000);
        assert!(q.sync(&cfg, || 0));
        assert!(q.ingress.is_none() && q.egress.is_some());
        cfg.set(0, 0, 0);
        assert!(!q.sync(&cfg, || 1));
        assert!(q.egress.is_none());
    }
}
