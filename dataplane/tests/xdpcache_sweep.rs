//! The XDP cache's sweep visits a bounded number of entries per busy
//! round, so a large cache never holds the packet thread for a whole
//! pass; idle rounds and forced sweeps finish the pass. Needs root
//! (BPF maps), as CI runs tests.

mod xdp_common;

use dataplane::xdpcache::{FcAction, SWEEP_CHUNK, SWEEP_INTERVAL};
use std::time::Instant;
use xdp_common::XdpRig;

/// A key per `i` (the program never looks these up; the sweep only
/// reads and deletes them).
fn key(i: u32) -> dataplane::xdpcache::entry::FcKey {
    let mut k = [0u8; dataplane::xdpcache::entry::KEY_SIZE];
    k[..4].copy_from_slice(&i.to_be_bytes());
    k
}

#[test]
fn a_pass_is_spread_over_busy_rounds_and_finished_by_an_idle_one() {
    let n = 2 * SWEEP_CHUNK as u32 + 100;
    let mut r = XdpRig::with_capacity(4 * n);
    for i in 0..n {
        r.install_key(key(i), FcAction::Drop, &[]);
    }
    let ct_now = r.ct.now_ms();
    // A forced pass at t0 (nothing to remove yet) makes t0 the last sweep.
    let t0 = Instant::now();
    r.cache.sweep(t0, true, false, &r.ct, ct_now);
    assert_eq!(r.cache.len(), n as usize);
    // A flow change retires them all; sweeps remove what they visit.
    r.cache.invalidate();
    let sweep = |r: &mut XdpRig, at: Instant, busy: bool| {
        r.cache.sweep(at, false, busy, &r.ct, ct_now);
        (r.cache.len(), r.cache.stats().invalidated)
    };

    // Not due yet: nothing visited.
    assert_eq!(sweep(&mut r, t0, true), (n as usize, 0));
    let due = t0 + SWEEP_INTERVAL;
    let chunk = SWEEP_CHUNK;
    assert_eq!(
        sweep(&mut r, due, true),
        (n as usize - chunk, chunk as u64),
        "one busy round visits one chunk"
    );
    // The pass goes on in the next round, due or not.
    assert_eq!(
        sweep(&mut r, due, true),
        (n as usize - 2 * chunk, 2 * chunk as u64)
    );
    assert_eq!(
        sweep(&mut r, due, false),
        (0, u64::from(n)),
        "an idle round finishes the pass"
    );
}

#[test]
fn a_forced_sweep_visits_everything_at_once_even_mid_pass() {
    let n = SWEEP_CHUNK as u32 + 10;
    let mut r = XdpRig::with_capacity(4 * n);
    for i in 0..n {
        r.install_key(key(i), FcAction::Drop, &[]);
    }
    r.cache.invalidate();
    let ct_now = r.ct.now_ms();
    let due = Instant::now() + SWEEP_INTERVAL;
    r.cache.sweep(due, false, true, &r.ct, ct_now);
    assert_eq!(r.cache.len(), 10, "mid-pass");
    // Installed after the pass's snapshot: a forced sweep sees it too.
    r.cache.begin_round();
    r.install_key(key(n), FcAction::Drop, &[]);
    r.cache.invalidate();
    r.cache.sweep(due, true, true, &r.ct, ct_now);
    assert_eq!(r.cache.len(), 0);
    assert_eq!(r.cache.stats().invalidated, u64::from(n) + 1);
}
