//! The XDP cache's sweep visits a bounded number of entries per busy
//! round, so a large cache never holds the packet thread for a whole
//! pass, forced passes (statistics requests) included; idle rounds finish
//! a pass. Both ways of
//! reading the map: in batches (which end on a hash bucket, so a step
//! visits a little less than a chunk) and entry by entry (the fallback).
//! Needs root (BPF maps), as CI runs tests.

mod xdp_common;

use dataplane::fastpath::cache::{FcAction, SWEEP_CHUNK, SWEEP_INTERVAL};
use std::time::Instant;
use xdp_common::XdpRig;

/// A key per `i` (the program never looks these up; the sweep only
/// reads and deletes them).
fn key(i: u32) -> dataplane::fastpath::cache::entry::FcKey {
    let mut k = [0u8; dataplane::fastpath::cache::entry::KEY_SIZE];
    k[..4].copy_from_slice(&i.to_be_bytes());
    k
}

/// How many fewer than a chunk a batch may return: it ends where a
/// whole hash bucket no longer fits.
const BUCKET_SLACK: usize = 32;

/// `n` entries installed, swept entry by entry if `by_key`.
fn rig(n: u32, by_key: bool) -> XdpRig {
    let mut r = XdpRig::with_capacity(4 * n);
    if by_key {
        r.cache.sweep_entry_by_entry();
    }
    for i in 0..n {
        r.install_key(key(i), FcAction::Drop, &[]);
    }
    r
}

/// Whether `visited` is what one step visits.
fn one_step(visited: usize, by_key: bool) -> bool {
    if by_key {
        visited == SWEEP_CHUNK
    } else {
        (SWEEP_CHUNK - BUCKET_SLACK..=SWEEP_CHUNK).contains(&visited)
    }
}

fn pass_spread_over_busy_rounds(by_key: bool) {
    let n = 2 * SWEEP_CHUNK as u32 + 100;
    // The clock starts before the installs: on a loaded machine they can
    // take longer than the idle expiry, and no entry may look idle here.
    let t0 = Instant::now();
    let mut r = rig(n, by_key);
    let ct_now = r.ct.now_ms();
    // A forced pass at t0 (nothing to remove yet) makes t0 the last sweep.
    r.cache.sweep(t0, true, false, &r.ct, ct_now);
    assert_eq!(r.cache.len(), n as usize);
    // A change retires them all; sweeps remove what they visit.
    r.cache.invalidate();
    let sweep = |r: &mut XdpRig, at: Instant, busy: bool| {
        r.cache.sweep(at, false, busy, &r.ct, ct_now);
        assert_eq!(
            n as usize - r.cache.len(),
            r.cache.stats().invalidated as usize
        );
        r.cache.stats().invalidated as usize
    };

    // Not due yet: nothing visited.
    assert_eq!(sweep(&mut r, t0, true), 0);
    let due = t0 + SWEEP_INTERVAL;
    let first = sweep(&mut r, due, true);
    assert!(
        one_step(first, by_key),
        "one busy round visits one chunk: {first}"
    );
    // The pass goes on in the next round, due or not.
    let second = sweep(&mut r, due, true);
    assert!(one_step(second - first, by_key), "{first} then {second}");
    assert_eq!(
        sweep(&mut r, due, false),
        n as usize,
        "an idle round finishes the pass"
    );
}

#[test]
fn a_pass_is_spread_over_busy_rounds_and_finished_by_an_idle_one() {
    pass_spread_over_busy_rounds(false);
}

#[test]
fn entry_by_entry_a_pass_is_spread_over_busy_rounds_too() {
    pass_spread_over_busy_rounds(true);
}

fn forced_sweep_mid_pass(by_key: bool) {
    let n = 2 * SWEEP_CHUNK as u32 + 10;
    let mut r = rig(n, by_key);
    r.cache.invalidate();
    let ct_now = r.ct.now_ms();
    let due = Instant::now() + SWEEP_INTERVAL;
    r.cache.sweep(due, false, true, &r.ct, ct_now);
    let left = r.cache.len();
    assert!(one_step(n as usize - left, by_key), "mid-pass: {left} left");
    let completed = r.cache.passes_completed();
    // Installed after the pass began: a forced pass starts afresh and
    // sees it too.
    r.cache.begin_round();
    r.install_key(key(n), FcAction::Drop, &[]);
    r.cache.invalidate();
    // Forced in a busy round (a statistics request under load): one step
    // now, like any pass, and not complete until everything was visited.
    r.cache.sweep(due, true, true, &r.ct, ct_now);
    let after_step = r.cache.len();
    assert!(
        one_step(left + 1 - after_step, by_key),
        "forced while busy: {left} + 1 -> {after_step}"
    );
    assert!(after_step > 0);
    assert_eq!(r.cache.passes_completed(), completed);
    // The next busy round finishes it: every entry visited once.
    r.cache.sweep(due, false, true, &r.ct, ct_now);
    assert_eq!(r.cache.len(), 0);
    assert_eq!(r.cache.passes_completed(), completed + 1);
    assert_eq!(r.cache.stats().invalidated, u64::from(n) + 1);

    // Forced in an idle round: the whole pass at once.
    r.cache.begin_round();
    for i in 0..n {
        r.install_key(key(i), FcAction::Drop, &[]);
    }
    r.cache.invalidate();
    r.cache.sweep(due, false, true, &r.ct, ct_now);
    assert!(!r.cache.is_empty(), "mid-pass again");
    r.cache.sweep(due, true, false, &r.ct, ct_now);
    assert_eq!(r.cache.len(), 0);
    assert_eq!(r.cache.passes_completed(), completed + 2);
}

#[test]
fn a_forced_sweep_while_busy_goes_a_step_a_round_and_completes_once() {
    forced_sweep_mid_pass(false);
}

#[test]
fn entry_by_entry_a_forced_sweep_goes_a_step_a_round_too() {
    forced_sweep_mid_pass(true);
}

/// A forced pass reads every batch: with no hits, entries expire once
/// idle long enough, all of them in one pass over several batches.
/// (Hits read in batches: every test using `XdpRig::hits`.)
#[test]
fn a_forced_pass_expires_idle_entries_across_batches() {
    // Before the installs, which a loaded machine may make slower than the
    // idle expiry.
    let t0 = Instant::now();
    let mut r = rig(3 * SWEEP_CHUNK as u32, false);
    let ct_now = r.ct.now_ms();
    let before = r.cache.stats().hit_packets;
    r.cache.sweep(t0, true, false, &r.ct, ct_now);
    assert_eq!(r.cache.stats().hit_packets, before, "no hits yet");
    assert_eq!(r.cache.len(), 3 * SWEEP_CHUNK);
    // Idle long enough: every entry expires in one forced pass.
    let later = Instant::now() + dataplane::fastpath::cache::IDLE_EXPIRY;
    r.cache.sweep(later, true, false, &r.ct, ct_now);
    assert_eq!(r.cache.len(), 0);
    assert_eq!(r.cache.stats().expired, 3 * SWEEP_CHUNK as u64);
}
