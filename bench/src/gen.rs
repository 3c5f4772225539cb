//! Running the generator: bounded in count and time, optionally paced.
//!
//! Two transmit methods, same frames and tag:
//! - **live frames** (the default): the XDP program of [`crate::bpf::Generator`]
//!   run by BPF_PROG_RUN with `BPF_F_TEST_XDP_LIVE_FRAMES`, in chunks of
//!   `repeat` frames, each chunk one syscall that sends from the calling
//!   CPU without copying the frame from userspace. Measured here at over
//!   5 Mpps, above any switch on this path.
//! - **AF_XDP** (fallback where live frames are missing, Linux < 5.18, or
//!   refused): a TX-only copy-mode socket on the pod's interface
//!   (`dataplane::xsk`), frames rewritten in userspace by
//!   [`Template::write_flow`]. Slower (one `sendto()` per batch, an skb per
//!   frame), so it can under-load a fast switch; reports say which ran.
//!
//! Live frames go in the kernel's default batches of 64: the receiving
//! veth's NAPI runs on the generator's CPU between batches, and its ring
//! holds 256 frames, so batches of 256 (the kernel's maximum) overflow it
//! and lose frames even at low rates (measured: 8 of 10,000 at 50 kpps),
//! for 5% more rate. A frame's timestamp is taken when the program runs,
//! up to one batch before the frame leaves, which adds at most a batch's
//! generation time (tens of microseconds here) to the measured latency.
//!
//! Pacing: with a rate, the sender keeps `sent <= rate * elapsed`, sending
//! what is due every millisecond at most (bursts of rate/1000 frames).
//! Without one it sends as fast as it can, in calls of about 250 ms at
//! the rate reached so far (never past the run's end at that rate). A
//! live-frames call registers the program with the
//! kernel's XDP dispatcher and unregisters it at the end, and each change
//! waits for an RCU grace period with the thread asleep
//! (`synchronize_rcu()` under `bpf_dispatcher_change_prog`, 8-16 ms here),
//! unless an XDP attachment already holds the program there: the harness
//! attaches it to an idle interface ([`crate::bpf::Generator::pin`]), so
//! calls cost no sleep. Unpinned (the pin failed, with a warning), long
//! calls keep the sleeps to a few percent of an unpaced run, and a paced
//! run's frames leave in bursts of what came due during each sleep (with
//! 50,000-frame calls and no pin, as before 2026-11-25, the generator's
//! CPU idled about 40% of a run).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dataplane::xsk::{FramePool, Umem, XdpDesc, XskConfig, XskSocket, DEFAULT_FRAME_SIZE};

use crate::bpf::{BpfError, Generator};
use crate::packet::{Template, Vary};

/// Frames of the first unpaced BPF_PROG_RUN call, before the rate is known
/// (~10 ms at 5 Mpps).
const FIRST_CHUNK: u64 = 50_000;
/// How long an unpaced call should last: short enough to stop on time,
/// long enough to amortise an unpinned call's sleeps (see the module
/// documentation).
const CALL_TARGET: Duration = Duration::from_millis(250);
/// Pacing step.
const TICK: Duration = Duration::from_millis(1);
/// AF_XDP batch.
const XSK_BATCH: usize = 64;

/// How frames are transmitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Method {
    #[serde(rename = "xdp-live-frames")]
    LiveFrames,
    #[serde(rename = "af-xdp")]
    AfXdp,
}

impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Method::LiveFrames => "xdp-live-frames",
            Method::AfXdp => "af-xdp",
        })
    }
}

/// Bounds and pace of one generator run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GenBounds {
    /// Stop after this long (always set).
    pub duration: Duration,
    /// Stop after this many frames.
    pub count: Option<u64>,
    /// Frames per second; `None`: as fast as possible.
    pub rate_pps: Option<u64>,
}

/// What a generator run did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GenReport {
    pub method: Method,
    /// Frames handed to the interface.
    pub sent: u64,
    /// From the first frame to the end of the last send.
    pub elapsed: Duration,
}

/// Errors of a generator run.
#[derive(Debug, thiserror::Error)]
pub enum GenError {
    #[error(transparent)]
    Bpf(#[from] BpfError),
    #[error("AF_XDP transmit: {0}")]
    Xsk(#[from] dataplane::xsk::XskError),
}

/// How many frames are due at `elapsed` under `b`, capped by its count.
fn due(b: &GenBounds, elapsed: Duration) -> u64 {
    let by_rate = match b.rate_pps {
        Some(r) => (r as f64 * elapsed.as_secs_f64()) as u64,
        None => u64::MAX,
    };
    by_rate.min(b.count.unwrap_or(u64::MAX))
}

/// Frames for the next live-frames call at `elapsed`, `sent` so far: what
/// is due, and at most [`CALL_TARGET`] (or what is left of the run, if
/// less) at the rate reached so far.
fn next_chunk(b: &GenBounds, elapsed: Duration, sent: u64) -> u64 {
    let by_time = if sent == 0 || elapsed.is_zero() {
        FIRST_CHUNK
    } else {
        let rate = sent as f64 / elapsed.as_secs_f64();
        let left = b.duration.saturating_sub(elapsed).min(CALL_TARGET);
        ((rate * left.as_secs_f64()) as u64).max(1)
    };
    due(b, elapsed).saturating_sub(sent).min(by_time)
}

/// Sends with live frames out of `ifindex` (calling thread's namespace and
/// CPU) until a bound is reached or `stop` is set.
pub fn run_live(
    g: &Generator,
    ifindex: u32,
    b: &GenBounds,
    stop: &AtomicBool,
) -> Result<GenReport, GenError> {
    let base = g.sent()?;
    let start = Instant::now();
    let mut sent = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let now = start.elapsed();
        if now >= b.duration || b.count.is_some_and(|c| sent >= c) {
            break;
        }
        let want = next_chunk(b, now, sent);
        if want == 0 {
            std::thread::sleep(TICK);
            continue;
        }
        g.run_live(ifindex, want as u32)?;
        sent = g.sent()? - base;
    }
    Ok(GenReport {
        method: Method::LiveFrames,
        sent,
        elapsed: start.elapsed(),
    })
}

/// Sends through a TX-only AF_XDP socket on queue 0 of `ifindex` (calling
/// thread's namespace) until a bound is reached or `stop` is set.
pub fn run_afxdp(
    t: &Template,
    vary: Vary,
    n_flows: u32,
    ifindex: u32,
    b: &GenBounds,
    stop: &AtomicBool,
) -> Result<GenReport, GenError> {
    let umem: Arc<Umem> = Umem::new(4096, DEFAULT_FRAME_SIZE, false)?;
    let mut pool = FramePool::new(&umem)?;
    let cfg = XskConfig {
        rx_size: 64,
        fill_size: 64,
        ..XskConfig::default()
    };
    let mut sock = XskSocket::bind(ifindex, 0, &umem, &cfg)?;
    let n_flows = n_flows.max(1);
    let start = Instant::now();
    let mut sent = 0u64;
    let mut flow = 0u32;
    let mut batch: Vec<XdpDesc> = Vec::with_capacity(XSK_BATCH);
    while !stop.load(Ordering::Relaxed) {
        let now = start.elapsed();
        if now >= b.duration || b.count.is_some_and(|c| sent >= c) {
            break;
        }
        sock.complete(&mut pool);
        let want = due(b, now).saturating_sub(sent).min(XSK_BATCH as u64) as usize;
        if want == 0 {
            std::thread::sleep(TICK);
            continue;
        }
        batch.clear();
        let ts = monotonic_ns();
        while batch.len() < want {
            let Some(d) = pool.write_packet(&t.frame) else {
                break;
            };
            if let Some(f) = pool.packet_mut(&d) {
                t.write_flow(f, vary, flow, ts);
            }
            flow = (flow + 1) % n_flows;
            batch.push(d);
        }
        let queued = sock.tx_burst(&batch);
        for d in &batch[queued..] {
            pool.free(d.addr - d.addr % u64::from(DEFAULT_FRAME_SIZE));
        }
        sent += queued as u64;
        sock.kick_tx()?;
    }
    // Let the kernel finish what is queued, boundedly.
    let end = Instant::now() + Duration::from_millis(200);
    while sock.tx_pending() > 0 && Instant::now() < end {
        sock.kick_tx()?;
        sock.complete(&mut pool);
        std::thread::yield_now();
    }
    let elapsed = start.elapsed();
    sock.close(&mut pool);
    Ok(GenReport {
        method: Method::AfXdp,
        sent,
        elapsed,
    })
}

/// CLOCK_MONOTONIC in ns: the clock bpf_ktime_get_ns() reads.
pub fn monotonic_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pacing_follows_rate_and_count() {
        let b = GenBounds {
            duration: Duration::from_secs(1),
            count: Some(500),
            rate_pps: Some(1000),
        };
        assert_eq!(due(&b, Duration::from_millis(100)), 100);
        assert_eq!(due(&b, Duration::from_millis(900)), 500);
        let free = GenBounds {
            rate_pps: None,
            count: None,
            ..b
        };
        assert_eq!(due(&free, Duration::from_millis(1)), u64::MAX);
    }

    #[test]
    fn unpaced_calls_last_a_quarter_second_at_the_rate_reached() {
        let b = GenBounds {
            duration: Duration::from_secs(3),
            count: None,
            rate_pps: None,
        };
        assert_eq!(next_chunk(&b, Duration::ZERO, 0), FIRST_CHUNK);
        // 2 Mpps so far: 250 ms of it.
        assert_eq!(next_chunk(&b, Duration::from_secs(1), 2_000_000), 500_000);
        // 100 ms left: only that much.
        let near_end = Duration::from_millis(2900);
        assert_eq!(next_chunk(&b, near_end, 5_800_000), 200_000);
        // Never past the count, and at least one frame while time is left.
        let counted = GenBounds {
            count: Some(2_100_000),
            ..b
        };
        assert_eq!(
            next_chunk(&counted, Duration::from_secs(1), 2_000_000),
            100_000
        );
        assert_eq!(next_chunk(&b, Duration::from_secs(1), 1), 1);
        // Paced: what is due, however fast the calls were.
        let paced = GenBounds {
            rate_pps: Some(1000),
            ..b
        };
        assert_eq!(next_chunk(&paced, Duration::from_secs(1), 990), 10);
    }
}
