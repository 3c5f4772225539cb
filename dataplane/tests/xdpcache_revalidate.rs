//! The XDP cache's revalidation bookkeeping: a pass hands out every
//! entry once, in chunks, and reports its change applied only at the
//! end; an abandoned pass reports it at once; a verdict removes only the
//! entries found changed; removing a port removes the entries from and
//! to it. (The translation side is tested end to end in
//! tests/tests/xdp_cache.rs.) Needs root (BPF maps), as CI runs tests.

mod xdp_common;

use dataplane::fastpath::cache::entry::{FcKey, KEY_SIZE};
use dataplane::fastpath::cache::{FcAction, Origin};
use flowtable::pipeline::DropReason;
use xdp_common::{attribution, XdpRig};

fn key(i: u32) -> FcKey {
    let mut k = [0u8; KEY_SIZE];
    k[..4].copy_from_slice(&i.to_be_bytes());
    k
}

/// Installs a drop at `key(i)` for frames from `in_port`, or (with
/// `out`) a redirect out of port `out`.
fn install(r: &mut XdpRig, i: u32, in_port: u32, out: Option<u32>) {
    let (action, out) = match out {
        Some(p) => (
            FcAction::Redirect {
                out_ifindex: xdp_common::LO,
                set_dst: None,
                set_src: None,
                nw: None,
                encap: None,
                frags: false,
            },
            Ok(p),
        ),
        None => (FcAction::Drop, Err(DropReason::ExplicitDrop)),
    };
    let origin = Origin {
        in_port,
        passes: Box::new([]),
        forks: Box::new([]),
    };
    let now = r.ct.now_ms();
    r.cache
        .install(key(i), action, origin, out, attribution(), &[], &r.ct, now);
}

#[test]
fn a_pass_hands_out_every_entry_once_and_reports_at_its_end() {
    let mut r = XdpRig::with_capacity(64);
    for i in 0..5 {
        install(&mut r, i, 1, None);
    }
    r.cache.start_revalidation(Some(7));
    let mut seen = Vec::new();
    r.cache.revalidation_chunk(2, &mut seen);
    assert_eq!(seen.len(), 2);
    assert_eq!(r.cache.finish_revalidation(), None, "not over yet");
    assert!(r.cache.revalidating());
    r.cache.revalidation_chunk(usize::MAX, &mut seen);
    seen.sort();
    assert_eq!(seen, (0..5).map(key).collect::<Vec<_>>());
    assert_eq!(r.cache.finish_revalidation(), Some(7));
    assert!(!r.cache.revalidating());

    // Verdicts: kept entries stay, changed ones go.
    for (i, k) in seen.iter().enumerate() {
        assert!(r.cache.candidate(k).is_some());
        r.cache.revalidated(k, i % 2 == 0);
    }
    assert_eq!(r.cache.len(), 3);
    let s = r.cache.stats();
    assert_eq!((s.revalidated, s.revalidated_out), (3, 2));

    // An abandoned pass (the entries were retired at once) reports its
    // change, and entries of an old generation are no candidates.
    r.cache.start_revalidation(Some(8));
    r.cache.invalidate();
    assert_eq!(r.cache.abandon_revalidation(), Some(8));
    assert!(!r.cache.revalidating());
    assert!(r.cache.candidate(&key(0)).is_none());
}

#[test]
fn removing_a_port_removes_the_entries_from_and_to_it() {
    let mut r = XdpRig::with_capacity(64);
    install(&mut r, 0, 1, Some(2));
    install(&mut r, 1, 2, Some(1));
    install(&mut r, 2, 3, Some(1));
    install(&mut r, 3, 2, None);
    r.cache.forget_port(2);
    assert_eq!(r.cache.len(), 1);
    assert!(r.cache.candidate(&key(2)).is_some());
    assert_eq!(r.cache.stats().invalidated, 3);
}
