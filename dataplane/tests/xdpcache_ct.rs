//! The XDP flow cache's bookkeeping of conntrack entries over real BPF
//! maps (no XDP program attached): an entry is installed only for a
//! steady connection, the connections conntrack reports changed lose
//! their entries, entries retired by a generation change unlink their
//! connection, and a flush invalidates every entry at once.
//!
//! Needs root (creating BPF maps), as CI runs it.

mod xdp_common;

use dataplane::conntrack::{Addr, Conntrack, CtRequest, Tuple};
use dataplane::fastpath::cache::entry::KEY_SIZE;
use dataplane::fastpath::cache::{CacheMaps, CtConn, FcAction, XdpCache};
use std::sync::Arc;
use std::time::Instant;
use xdp_common::{attribution, commit, origin, track, udp};

const A: u32 = 0x0a80_0002;
const B: u32 = 0x0a80_0003;
const UDP: u8 = 17;

fn conn() -> CtConn {
    CtConn {
        tuple: Tuple::v4(0, UDP, A, B, 5000, 53),
        mark: 0,
        label: 0,
        absent: false,
    }
}

struct Rig {
    ct: Arc<Conntrack>,
    maps: Arc<CacheMaps>,
    cache: XdpCache,
}

fn rig() -> Rig {
    let maps = Arc::new(
        CacheMaps::new(16, 4, 1024).expect("creating BPF maps (needs root, as CI runs tests)"),
    );
    let ct = Arc::new(Conntrack::default());
    ct.set_flush_hook(maps.generation().clone());
    Rig {
        cache: XdpCache::new(maps.clone()),
        ct,
        maps,
    }
}

impl Rig {
    fn install(&mut self, key_byte: u8) {
        self.install_through(key_byte, conn());
    }

    fn install_through(&mut self, key_byte: u8, c: CtConn) {
        let mut key = [0u8; KEY_SIZE];
        key[0] = key_byte;
        let now = self.ct.now_ms();
        self.cache.begin_round();
        self.cache.install(
            key,
            FcAction::Drop,
            origin(),
            Err(flowtable::pipeline::DropReason::ExplicitDrop),
            attribution(),
            &[c],
            &self.ct,
            now,
        );
    }

    /// What the packet thread does after every `ct()`.
    fn forget_dead(&mut self) -> bool {
        let mut ids = Vec::new();
        let any = self.ct.xdp_take_dead(0, &mut ids);
        self.cache.forget_conns(&ids);
        any
    }
}

#[test]
fn only_a_steady_connection_gets_entries_and_a_change_removes_them() {
    let mut r = rig();
    track(&r.ct, udp(A, 5000, B, 53), &commit());
    r.install(1);
    assert_eq!(r.cache.len(), 0, "not replied yet: +new");
    assert_eq!(r.cache.stats().ct_installs, 0);

    track(&r.ct, udp(B, 53, A, 5000), &CtRequest::default());
    r.install(1);
    r.install(2);
    assert_eq!(r.cache.len(), 2);
    r.install(1);
    assert_eq!(r.cache.stats().ct_installs, 2, "an identical entry stays");

    // A packet that changes nothing leaves them; a new mark removes both.
    track(&r.ct, udp(A, 5000, B, 53), &commit());
    assert!(!r.forget_dead());
    assert_eq!(r.cache.len(), 2);
    let mark = CtRequest {
        mark: Some((7, 0xff)),
        ..commit()
    };
    track(&r.ct, udp(A, 5000, B, 53), &mark);
    assert!(r.forget_dead());
    assert_eq!(r.cache.len(), 0);
    assert_eq!(r.cache.stats().ct_removed, 2);
    // The translation saw mark 0: not installed for the marked connection.
    r.install(1);
    assert_eq!(r.cache.len(), 0);
}

#[test]
fn retired_entries_unlink_and_a_flush_bumps_the_generation() {
    let mut r = rig();
    track(&r.ct, udp(A, 5000, B, 53), &commit());
    track(&r.ct, udp(B, 53, A, 5000), &CtRequest::default());
    r.install(1);
    assert_eq!(r.cache.len(), 1);

    // A flow change retires the entry; the sweep deletes it and unlinks
    // the connection, so a later change of it is nobody's business.
    r.maps.generation().bump();
    r.cache
        .sweep(Instant::now(), true, false, &r.ct, r.ct.now_ms());
    assert_eq!((r.cache.len(), r.cache.stats().invalidated), (0, 1));
    let mark = CtRequest {
        mark: Some((7, 0xff)),
        ..commit()
    };
    track(&r.ct, udp(A, 5000, B, 53), &mark);
    assert!(!r.forget_dead(), "unlinked: nothing queued");

    // Flushing a linked connection invalidates the cache before it
    // returns, and queues the connection.
    r.cache.begin_round();
    let mut key = [0u8; KEY_SIZE];
    key[0] = 3;
    let marked = CtConn { mark: 7, ..conn() };
    let now = r.ct.now_ms();
    r.cache.install(
        key,
        FcAction::Drop,
        origin(),
        Err(flowtable::pipeline::DropReason::ExplicitDrop),
        attribution(),
        &[marked],
        &r.ct,
        now,
    );
    assert_eq!(r.cache.len(), 1);
    let before = r.maps.generation().current();
    assert_eq!(r.ct.flush(None), 1);
    assert!(r.maps.generation().current() > before);
    assert!(r.forget_dead());
    assert_eq!(r.cache.len(), 0);
}

/// Uncommitted `+trk+new` (the agent's subnet-mode flows): cached while
/// the tuple has no connection, in either direction; the first commit of
/// it removes the entries, before the packet that committed goes on.
#[test]
fn an_absent_tuple_is_cached_until_a_connection_is_committed() {
    let absent = CtConn {
        absent: true,
        ..conn()
    };
    let reverse = CtConn {
        tuple: Tuple {
            src: Addr::v4(B),
            sport: 53,
            dst: Addr::v4(A),
            dport: 5000,
            ..absent.tuple
        },
        ..absent
    };
    for committer in [udp(A, 5000, B, 53), udp(B, 53, A, 5000)] {
        let mut r = rig();
        // Uncommitted traffic both ways stores nothing: both cacheable.
        track(&r.ct, udp(A, 5000, B, 53), &CtRequest::default());
        track(&r.ct, udp(B, 53, A, 5000), &CtRequest::default());
        r.install_through(1, absent);
        r.install_through(2, reverse);
        assert_eq!(r.cache.len(), 2);
        assert_eq!(r.cache.stats().ct_installs, 2);
        // Another zone's commit is another tuple.
        let other_zone = CtRequest {
            zone: 9,
            ..commit()
        };
        track(&r.ct, udp(A, 5000, B, 53), &other_zone);
        assert!(!r.forget_dead());
        assert_eq!(r.cache.len(), 2);
        // A commit in either direction fires both watches.
        track(&r.ct, committer, &commit());
        assert!(r.forget_dead());
        assert_eq!(r.cache.len(), 0);
        assert_eq!(r.cache.stats().ct_removed, 2);
        // Now there is a connection (+new, not replied): not absent.
        r.install_through(1, absent);
        assert_eq!(r.cache.len(), 0);
    }
}

#[test]
fn removed_entries_drop_their_watches() {
    let mut r = rig();
    let absent = CtConn {
        absent: true,
        ..conn()
    };
    r.install_through(1, absent);
    assert_eq!(r.cache.len(), 1);
    r.maps.generation().bump();
    r.cache
        .sweep(Instant::now(), true, false, &r.ct, r.ct.now_ms());
    assert_eq!(r.cache.len(), 0);
    // The commit finds no watch: nothing queued.
    track(&r.ct, udp(A, 5000, B, 53), &commit());
    assert!(!r.forget_dead());
}
