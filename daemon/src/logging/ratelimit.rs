//! Rate limiting of repeated warnings, per call site, as OVS's
//! VLOG_RATE_LIMIT: each call site of a warning or error has a budget of
//! `burst` messages that refills at `per_minute`; a message over budget
//! is not written (and counted), and the next one written from that
//! call site is preceded by a line saying how many were dropped.
//!
//! A tracing layer whose `event_enabled` decides, so no output layer
//! sees a suppressed event. State: one token bucket per call site (a
//! call site is a `warn!`/`error!` in the code, so their number is fixed
//! by the code), behind a mutex taken only for warnings and errors that
//! passed the level filter. Info and debug messages are governed by the
//! levels alone.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tracing::callsite::Identifier;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// The target of the "dropped N messages" lines (never rate limited).
pub const NOTICE_TARGET: &str = "xbr::vlog";

static SUPPRESSED: AtomicU64 = AtomicU64::new(0);

/// Messages suppressed since start, all call sites.
pub fn suppressed_total() -> u64 {
    SUPPRESSED.load(Relaxed)
}

/// A budget: `burst` messages at once, refilled at `per_minute`; a
/// `per_minute` of 0 turns the limit off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimit {
    pub per_minute: u32,
    pub burst: u32,
}

impl Default for RateLimit {
    /// OVS's most common VLOG_RATE_LIMIT_INIT(5, 20)-like budget, but
    /// refilled faster: 60 a minute after a burst of 20.
    fn default() -> Self {
        RateLimit {
            per_minute: 60,
            burst: 20,
        }
    }
}

impl std::str::FromStr for RateLimit {
    type Err = String;
    /// `PER_MINUTE[/BURST]`; `0` is off. The burst defaults to the rate.
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("`{s}`: expected MESSAGES_PER_MINUTE[/BURST], e.g. 60/20 (0 is off)");
        let (rate, burst) = match s.split_once('/') {
            Some((r, b)) => (r, Some(b)),
            None => (s, None),
        };
        let per_minute: u32 = rate.trim().parse().map_err(|_| bad())?;
        let burst = match burst {
            Some(b) => b.trim().parse().map_err(|_| bad())?,
            None => per_minute,
        };
        if per_minute > 0 && burst == 0 {
            return Err(bad());
        }
        Ok(RateLimit { per_minute, burst })
    }
}

struct Bucket {
    tokens: f64,
    last: Instant,
    /// Messages dropped since the last one written, and when the first
    /// and the latest of them were.
    dropped: u64,
    first_drop: Option<Instant>,
    last_drop: Option<Instant>,
}

pub struct Limiter {
    limit: RateLimit,
    buckets: Mutex<HashMap<Identifier, Bucket>>,
}

impl Limiter {
    pub fn new(limit: RateLimit) -> Limiter {
        Limiter {
            limit,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Whether the event from `site` at `now` is written, and the drops
    /// to report before it.
    fn admit(&self, site: Identifier, now: Instant) -> (bool, Option<(u64, Duration, Duration)>) {
        let RateLimit { per_minute, burst } = self.limit;
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let b = buckets.entry(site).or_insert(Bucket {
            tokens: f64::from(burst),
            last: now,
            dropped: 0,
            first_drop: None,
            last_drop: None,
        });
        let refill =
            now.saturating_duration_since(b.last).as_secs_f64() * f64::from(per_minute) / 60.0;
        b.tokens = (b.tokens + refill).min(f64::from(burst));
        b.last = now;
        if b.tokens < 1.0 {
            b.dropped += 1;
            b.first_drop.get_or_insert(now);
            b.last_drop = Some(now);
            SUPPRESSED.fetch_add(1, Relaxed);
            return (false, None);
        }
        b.tokens -= 1.0;
        let report = match (b.dropped, b.first_drop, b.last_drop) {
            (n, Some(first), Some(last)) if n > 0 => Some((
                n,
                now.saturating_duration_since(first),
                now.saturating_duration_since(last),
            )),
            _ => None,
        };
        b.dropped = 0;
        b.first_drop = None;
        b.last_drop = None;
        (true, report)
    }
}

impl<S: Subscriber> Layer<S> for Limiter {
    fn event_enabled(&self, event: &Event<'_>, _cx: Context<'_, S>) -> bool {
        let meta = event.metadata();
        if self.limit.per_minute == 0
            || *meta.level() > Level::WARN
            || meta.target() == NOTICE_TARGET
        {
            return true;
        }
        let (written, report) = self.admit(meta.callsite(), Instant::now());
        if let Some((n, over, ago)) = report {
            // Logged through the same subscriber (it is the global one,
            // which tracing lets an event's handling log through), from
            // a target this layer lets by; the lock is released.
            tracing::warn!(
                target: NOTICE_TARGET,
                "Dropped {n} log messages in last {} seconds (most recently, {} seconds ago) \
                 due to excessive rate",
                over.as_secs(),
                ago.as_secs()
            );
        }
        written
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site() -> Identifier {
        struct Cs;
        static CS: Cs = Cs;
        impl tracing::callsite::Callsite for Cs {
            fn set_interest(&self, _: tracing::subscriber::Interest) {}
            fn metadata(&self) -> &tracing::Metadata<'_> {
                unreachable!("not asked in these tests")
            }
        }
        Identifier(&CS)
    }

    #[test]
    fn a_burst_passes_then_drops_are_counted_and_reported_once_refilled() {
        let l = Limiter::new(RateLimit {
            per_minute: 60,
            burst: 3,
        });
        let t0 = Instant::now();
        let before = suppressed_total();
        for _ in 0..3 {
            assert_eq!(l.admit(site(), t0), (true, None));
        }
        assert!(!l.admit(site(), t0).0);
        assert!(!l.admit(site(), t0 + Duration::from_millis(500)).0);
        assert!(suppressed_total() >= before + 2);
        // One token a second: after 2 s one message passes, with the
        // report of the two dropped.
        let (ok, report) = l.admit(site(), t0 + Duration::from_secs(2));
        assert!(ok);
        let (n, over, ago) = report.expect("a report");
        assert_eq!(n, 2);
        assert_eq!(over, Duration::from_secs(2));
        assert_eq!(ago, Duration::from_millis(1500));
        // Reported once.
        assert_eq!(l.admit(site(), t0 + Duration::from_secs(4)), (true, None));
    }

    #[test]
    fn the_option_parses_rate_and_burst_and_zero_is_off() {
        assert_eq!(
            "60/20".parse(),
            Ok(RateLimit {
                per_minute: 60,
                burst: 20
            })
        );
        assert_eq!(
            "5".parse(),
            Ok(RateLimit {
                per_minute: 5,
                burst: 5
            })
        );
        assert_eq!(
            "0".parse(),
            Ok(RateLimit {
                per_minute: 0,
                burst: 0
            })
        );
        assert!("x".parse::<RateLimit>().is_err());
        assert!("5/0".parse::<RateLimit>().is_err());
    }
}
