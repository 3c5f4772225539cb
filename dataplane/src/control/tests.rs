//! The control plane's side of several packet threads: what is sent to
//! each, and what waits for all of them.

use super::*;
use crate::engine::EngineDrops;
use crate::normal::Station;
use flowtable::FlowTables;
use ofproto::Datapath;
use std::sync::mpsc;

fn two_threads() -> (Arc<DpShared>, Vec<ChangeReceiver>) {
    let (shared, ends) = DpShared::with_engines(7, Vec::new(), 2).expect("eventfds");
    assert_eq!(shared.engines(), 2);
    assert_eq!(
        ends.iter().map(ChangeReceiver::engine).collect::<Vec<_>>(),
        [0, 1]
    );
    (shared, ends)
}

fn a_change() -> Vec<Change> {
    let fm = flowtable::text::parse_flow("priority=5,ip,actions=drop").expect("flow");
    let changes = FlowTables::new().flow_mod(&fm).expect("valid");
    assert!(!changes.is_empty());
    changes
}

/// Runs `f` on another thread; the receiver hears when it returned.
fn on_a_thread(f: impl FnOnce() + Send + 'static) -> mpsc::Receiver<()> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    rx
}

/// `waiter` (a control-plane call on another thread) must still wait
/// after `first` (thread 0's answer) and return after `second` (thread
/// 1's).
fn waits_for_both(
    waiter: mpsc::Receiver<()>,
    first: impl FnOnce(),
    second: impl FnOnce(),
    what: &str,
) {
    first();
    assert!(
        waiter.recv_timeout(Duration::from_millis(200)).is_err(),
        "{what} returned while thread 1 had not answered"
    );
    second();
    waiter
        .recv_timeout(Duration::from_secs(5))
        .unwrap_or_else(|_| panic!("{what} did not return once both answered"));
}

#[test]
fn a_change_list_reaches_every_thread_once_and_shared() {
    let (shared, ends) = two_threads();
    let seq = shared.publish(a_change());
    let (s0, c0) = ends[0].try_next().expect("thread 0 has it");
    let (s1, c1) = ends[1].try_next().expect("thread 1 has it");
    assert_eq!((s0, s1), (seq, seq));
    assert!(Arc::ptr_eq(&c0, &c1), "one list, not a copy per thread");
    assert!(ends[0].try_next().is_none() && ends[1].try_next().is_none());
}

#[test]
fn a_barrier_waits_for_the_slowest_thread() {
    let (shared, _ends) = two_threads();
    let seq = shared.publish(a_change());
    let waiter = {
        let shared = shared.clone();
        on_a_thread(move || shared.sync(seq))
    };
    waits_for_both(
        waiter,
        || shared.mark_applied(0, seq),
        || shared.mark_applied(1, seq),
        "the barrier",
    );
}

#[test]
fn an_empty_change_counts_as_applied_by_threads_that_were_up_to_date() {
    let (shared, _ends) = two_threads();
    let first = shared.publish(a_change());
    shared.mark_applied(0, first);
    let empty = shared.publish(Vec::new());
    let s = shared.seq.lock();
    assert_eq!(s.applied, [empty, 0], "thread 1 still owes the first list");
    assert_eq!(s.applied(), 0);
}

#[test]
fn start_up_and_statistics_wait_for_every_thread() {
    let (shared, _ends) = two_threads();
    shared.mark_running(1);
    assert!(!shared.wait_running(Duration::from_millis(50)));
    shared.mark_running(0);
    assert!(shared.wait_running(Duration::from_millis(50)));

    let collector = {
        let shared = shared.clone();
        on_a_thread(move || {
            let _ = shared.engine_snapshot();
        })
    };
    // Each thread answers the request it sees.
    let deadline = Instant::now() + Duration::from_secs(5);
    while shared.stats_requested() == 0 {
        assert!(Instant::now() < deadline, "no request came");
        std::thread::yield_now();
    }
    let want = shared.stats_requested();
    waits_for_both(
        collector,
        || shared.mark_stats_collected(0, want),
        || shared.mark_stats_collected(1, want),
        "the statistics collection",
    );
}

#[test]
fn the_threads_counters_are_summed() {
    let (shared, _ends) = two_threads();
    let mut a = EngineSnapshot::default();
    a.drops.table_miss = 3;
    a.drops.tunnel.no_route = 1;
    a.flow_cache = Some(flowtable::cache::CacheStats {
        hits: 10,
        ..Default::default()
    });
    let mut b = EngineSnapshot::default();
    b.drops.table_miss = 4;
    b.drops.tunnel.no_route = 2;
    b.flow_cache = Some(flowtable::cache::CacheStats {
        hits: 5,
        misses: 1,
        ..Default::default()
    });
    shared.publish_engine(0, a);
    shared.publish_engine(1, b);
    // Nobody collects: the sum of what was last published, after the
    // statistics timeout.
    let sum = shared.engine_snapshot();
    let drops = EngineDrops {
        table_miss: 7,
        tunnel: crate::vxlan::TunnelDrops {
            no_route: 3,
            ..Default::default()
        },
        ..Default::default()
    };
    assert_eq!(format!("{:?}", sum.drops), format!("{drops:?}"));
    let fc = sum.flow_cache.expect("both have the cache on");
    assert_eq!((fc.hits, fc.misses), (15, 1));
}

#[test]
fn fdb_requests_reach_every_thread_and_lists_are_joined() {
    let (shared, _ends) = two_threads();
    shared.publish_fdb(
        0,
        vec![Station {
            mac: 1,
            port: 1,
            age: 30,
        }],
    );
    shared.publish_fdb(
        1,
        vec![
            Station {
                mac: 1,
                port: 2,
                age: 3,
            },
            Station {
                mac: 2,
                port: 2,
                age: 9,
            },
        ],
    );
    // Unanswered (nobody runs the threads), so listed as last published.
    let listed = shared.fdb();
    assert_eq!(
        listed.iter().map(|s| (s.mac, s.port)).collect::<Vec<_>>(),
        [(2, 2), (1, 2)]
    );
    assert_eq!(shared.take_fdb_requests(0), (false, true));
    assert_eq!(shared.take_fdb_requests(1), (false, true));
    assert_eq!(shared.take_fdb_requests(1), (false, false), "asked once");
}

#[test]
fn packet_outs_go_to_thread_zero_only() {
    let (shared, ends) = two_threads();
    shared
        .packet_out(1, Vec::new(), Vec::new(), vec![0; 60])
        .expect("queued");
    assert!(ends[1].try_packet_out().is_none());
    assert!(ends[0].try_packet_out().is_some());
}

fn upcall_from(port: u32) -> Upcall {
    Upcall {
        in_port: port,
        tun_id: 0,
        reason: 0,
        table_id: 0,
        cookie: 0,
        total_len: 60,
        data: Vec::new(),
    }
}

#[test]
fn one_port_cannot_fill_the_upcall_queue_for_the_others() {
    let (shared, ends) = two_threads();
    let queued = |port: u32, n: usize| {
        (0..n)
            .filter(|_| ends[port as usize % 2].upcall(upcall_from(port)))
            .count()
    };
    // Port 1 floods from thread 1: half the queue.
    assert_eq!(queued(1, UPCALL_QUEUE), UPCALL_QUEUE / 2);
    // Port 2 (thread 0) still gets a third of the queue.
    assert_eq!(queued(2, 10), 10);
    assert_eq!(
        shared.upcall_shares().refused(),
        vec![(1, (UPCALL_QUEUE / 2) as u64)]
    );
    // What the upcall thread takes is given back (as bridge/mod.rs does).
    let rx = shared.upcalls();
    let take = |n: usize| {
        for _ in 0..n {
            let u = rx.try_recv().expect("queued");
            shared.upcall_shares().release(u.in_port);
        }
    };
    // With port 2 holding upcalls, port 1's share is a third: 100 taken
    // leave it above, so it still may not queue.
    take(100);
    assert_eq!(queued(1, 100), 0);
    // All taken: port 1 alone again, half the queue.
    take(UPCALL_QUEUE / 2 + 10 - 100);
    assert_eq!(queued(1, UPCALL_QUEUE), UPCALL_QUEUE / 2);
}
