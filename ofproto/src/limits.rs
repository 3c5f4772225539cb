//! The OpenFlow control plane's bounds, and the counters of their hits.
//!
//! # Design
//!
//! Stores: [`ControlLimits`], the settings (one copy per bridge, read
//! when a connection starts, so a change applies to later connections);
//! [`LimitStats`], plain monotonic counters, one per kind of hit, read by
//! `xbr stats` (and later by metrics) without locking.
//!
//! Why: the management socket and a `ptcp:` listener are reachable by
//! whatever can open them, and a controller may stop reading. Every
//! resource such a peer makes xbr spend is bounded here, with OVS's
//! values where OVS has one:
//! - connections per listener ([`ControlLimits::max_connections`]; OVS
//!   has no such bound, each connection costs xbr two threads);
//! - a peer that says nothing, not even HELLO, is dropped after
//!   [`ControlLimits::hello_timeout`] (OVS's rconn gives a connection in
//!   CONNECTING `max(1 s, backoff)`);
//! - a silent peer gets an ECHO_REQUEST after its probe interval and is
//!   dropped when another passes unanswered (OVS's rconn; 60 s on the
//!   management socket as in OVS's `bridge.c`, the inactivity probe on
//!   `ptcp:` and controller connections); one message may take two probe
//!   intervals to arrive, however its bytes trickle in;
//! - a peer that stops reading: a write that makes no progress for a
//!   probe interval fails the connection, and asynchronous messages
//!   queued past [`ControlLimits::max_backlog`] bytes drop it (OVS's rconn
//!   never writes to a peer that does not read either, and disconnects it
//!   when the probe goes unanswered);
//! - ONF/OpenFlow 1.4 bundles: open bundles per connection
//!   (OFPBFC_OUT_OF_BUNDLES past it), messages per connection over all its
//!   bundles (OFPBFC_MSG_TOO_MANY), and OVS's idle expiry (10 s, then
//!   OFPBFC_TIMEOUT);
//! - PACKET_INs per controller: `controller_rate_limit` and
//!   `controller_burst_limit` as OVS's pinsched takes them.
//!
//! The flow limits (`Flow_Table:flow_limit`, the overall `--max-flows`)
//! live with the tables (`flowtable::tables`); their hits are counted
//! here as `table_full`.
//!
//! Concurrency: counters are relaxed atomics; each hit is also logged at
//! warn level by whoever counts it.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// See the module documentation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlLimits {
    /// Connections one listener (the management socket, a `ptcp:` port)
    /// serves at once; the next one is closed at once.
    pub max_connections: usize,
    /// Time a peer that connected has to send its first message.
    pub hello_timeout: Duration,
    /// Probe interval of management-socket connections (OVS: 60 s).
    pub mgmt_probe: Duration,
    /// Probe interval of `ptcp:` connections (the inactivity probe; zero:
    /// never probed, as OVS's `inactivity_probe=0`).
    pub tcp_probe: Duration,
    /// Bytes of asynchronous messages queued for one connection past
    /// which it is dropped.
    pub max_backlog: usize,
    /// Bundles one connection may have open.
    pub max_bundles: usize,
    /// Messages one connection's open bundles may hold together.
    pub max_bundle_msgs: usize,
    /// A bundle untouched this long is discarded (OVS's
    /// `other_config:bundle-idle-timeout`, 10 s).
    pub bundle_idle_timeout: Duration,
    /// PACKET_IN rate limit of each `ptcp:` connection (the passive
    /// Controller row's `controller_rate_limit`).
    pub tcp_packet_in: Option<PacketInLimit>,
}

/// Connections per listener by default.
pub const DEFAULT_MAX_CONNECTIONS: usize = 64;
/// OVS's bundle idle timeout.
pub const DEFAULT_BUNDLE_IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// Messages in the bundles of one connection by default: twenty times
/// the agent's largest transaction (~10k flows), about 200 MiB decoded.
pub const DEFAULT_MAX_BUNDLE_MSGS: usize = 200_000;

impl Default for ControlLimits {
    fn default() -> Self {
        ControlLimits {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            hello_timeout: Duration::from_secs(1),
            mgmt_probe: Duration::from_secs(60),
            tcp_probe: Duration::from_secs(5),
            max_backlog: 16 << 20,
            max_bundles: 64,
            max_bundle_msgs: DEFAULT_MAX_BUNDLE_MSGS,
            bundle_idle_timeout: DEFAULT_BUNDLE_IDLE_TIMEOUT,
            tcp_packet_in: None,
        }
    }
}

/// Packet-in rate limiting of one controller connection, as OVS's
/// `Controller` columns give it (packets per second, and a burst; OVS's
/// default burst is a quarter of the rate, at least 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketInLimit {
    pub rate: u32,
    pub burst: u32,
}

impl PacketInLimit {
    /// `controller_rate_limit` and `controller_burst_limit` (either may
    /// be unset): `None` without a rate, as in OVS. OVS's pinsched takes a
    /// rate below 1 as its default of 1000 (the schema allows 100 and up).
    pub fn from_columns(rate: Option<i64>, burst: Option<i64>) -> Option<PacketInLimit> {
        let rate = rate?;
        let rate = u32::try_from(rate).ok().filter(|r| *r > 0).unwrap_or(1000);
        let burst = burst
            .and_then(|b| u32::try_from(b).ok())
            .filter(|b| *b > 0)
            .unwrap_or(rate / 4)
            .max(1);
        Some(PacketInLimit { rate, burst })
    }
}

/// A token bucket of [`PacketInLimit`]: `burst` packets at once, `rate`
/// per second after. Unlike OVS's pinsched, which queues up to `burst`
/// packets and sends them later, a packet over the limit is dropped at
/// once: the admitted rate is the same, no packet-in is delayed.
#[derive(Debug)]
pub(crate) struct TokenBucket {
    limit: PacketInLimit,
    /// Tokens in thousandths of a packet.
    milli_tokens: u64,
    last: std::time::Instant,
}

impl TokenBucket {
    pub(crate) fn new(limit: PacketInLimit) -> Self {
        TokenBucket {
            limit,
            milli_tokens: u64::from(limit.burst) * 1000,
            last: std::time::Instant::now(),
        }
    }

    /// Takes one packet's token at `now`; false when none is left.
    pub(crate) fn take(&mut self, now: std::time::Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last);
        let cap = u64::from(self.limit.burst) * 1000;
        // rate packets/s = rate milli-tokens per ms.
        let earned = u64::try_from(elapsed.as_millis())
            .unwrap_or(u64::MAX)
            .saturating_mul(u64::from(self.limit.rate));
        if earned > 0 {
            self.milli_tokens = self.milli_tokens.saturating_add(earned).min(cap);
            self.last = now;
        }
        if self.milli_tokens >= 1000 {
            self.milli_tokens -= 1000;
            true
        } else {
            false
        }
    }
}

/// Hits of each bound since the bridge started; see the module
/// documentation.
#[derive(Debug, Default)]
pub struct LimitStats {
    /// Connections closed at once: their listener had `max_connections`.
    pub connections_refused: AtomicU64,
    /// Connections dropped for sending nothing within the HELLO timeout.
    pub hello_timeouts: AtomicU64,
    /// Connections dropped for not answering an inactivity probe.
    pub probe_timeouts: AtomicU64,
    /// Connections dropped for taking over two probe intervals to send one
    /// message (bytes trickling in).
    pub message_timeouts: AtomicU64,
    /// Connections dropped because a write made no progress for a probe
    /// interval (the peer stopped reading).
    pub write_timeouts: AtomicU64,
    /// Connections dropped because their queue of asynchronous messages
    /// passed `max_backlog`.
    pub backlog_overflows: AtomicU64,
    /// Bundle opens refused (OFPBFC_OUT_OF_BUNDLES).
    pub bundles_refused: AtomicU64,
    /// Bundle messages refused (OFPBFC_MSG_TOO_MANY).
    pub bundle_msgs_refused: AtomicU64,
    /// Bundles discarded as idle (OFPBFC_TIMEOUT).
    pub bundles_expired: AtomicU64,
    /// Flow additions refused for a full table (OFPFMFC_TABLE_FULL).
    pub table_full: AtomicU64,
    /// Group additions refused at `flowtable::group::MAX_GROUPS`
    /// (OFPGMFC_OUT_OF_GROUPS).
    pub out_of_groups: AtomicU64,
    /// PACKET_INs over a controller's rate limit, queued
    /// (`packet_in_queue.rs`).
    pub packet_ins_queued: AtomicU64,
    /// PACKET_INs dropped from a rate-limited controller's full queue.
    pub packet_ins_rate_limited: AtomicU64,
    /// PACKET_INs dropped for a connection too far behind.
    pub packet_ins_backlog_dropped: AtomicU64,
    /// TLS sessions that failed: handshakes refused (certificates, files,
    /// a peer not speaking TLS) and sessions ended by a TLS error. A
    /// handshake that stalls is a `hello_timeouts`.
    pub tls_failures: AtomicU64,
}

impl LimitStats {
    pub(crate) fn hit(counter: &AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }

    /// Every counter by its name in `xbr stats`, in a fixed order.
    pub fn named(&self) -> [(&'static str, u64); 15] {
        let v = |c: &AtomicU64| c.load(Relaxed);
        [
            ("connections_refused", v(&self.connections_refused)),
            ("hello_timeouts", v(&self.hello_timeouts)),
            ("probe_timeouts", v(&self.probe_timeouts)),
            ("message_timeouts", v(&self.message_timeouts)),
            ("write_timeouts", v(&self.write_timeouts)),
            ("backlog_overflows", v(&self.backlog_overflows)),
            ("bundles_refused", v(&self.bundles_refused)),
            ("bundle_msgs_refused", v(&self.bundle_msgs_refused)),
            ("bundles_expired", v(&self.bundles_expired)),
            ("table_full", v(&self.table_full)),
            ("out_of_groups", v(&self.out_of_groups)),
            ("packet_ins_queued", v(&self.packet_ins_queued)),
            ("packet_ins_rate_limited", v(&self.packet_ins_rate_limited)),
            (
                "packet_ins_backlog_dropped",
                v(&self.packet_ins_backlog_dropped),
            ),
            ("tls_failures", v(&self.tls_failures)),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ovs_defaults_for_the_packet_in_limit() {
        assert_eq!(PacketInLimit::from_columns(None, Some(5)), None);
        let l = PacketInLimit::from_columns(Some(100), None).unwrap();
        assert_eq!((l.rate, l.burst), (100, 25));
        let l = PacketInLimit::from_columns(Some(0), Some(0)).unwrap();
        assert_eq!((l.rate, l.burst), (1000, 250));
        let l = PacketInLimit::from_columns(Some(2), None).unwrap();
        assert_eq!(l.burst, 1);
    }

    #[test]
    fn the_bucket_admits_a_burst_then_the_rate() {
        let mut b = TokenBucket::new(PacketInLimit {
            rate: 100,
            burst: 10,
        });
        let t0 = b.last;
        assert_eq!((0..50).filter(|_| b.take(t0)).count(), 10);
        // 100 ms at 100/s: 10 more, never more than the burst.
        let t1 = t0 + Duration::from_millis(100);
        assert_eq!((0..50).filter(|_| b.take(t1)).count(), 10);
        let t2 = t1 + Duration::from_secs(3600);
        assert_eq!((0..50).filter(|_| b.take(t2)).count(), 10);
    }
}
