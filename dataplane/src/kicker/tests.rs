use super::*;
use std::net::UdpSocket;

/// A connected UDP socket stands in for an AF_XDP one: a zero-length
/// `sendto()` on it sends an empty datagram, which `sink` counts.
fn socket_pair() -> (Arc<OwnedFd>, UdpSocket) {
    let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
    let src = UdpSocket::bind("127.0.0.1:0").unwrap();
    src.connect(sink.local_addr().unwrap()).unwrap();
    sink.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    (Arc::new(OwnedFd::from(src)), sink)
}

fn one_cpu() -> core_affinity::CoreId {
    core_affinity::get_core_ids().unwrap()[0]
}

#[test]
fn a_request_is_kicked_on_the_transmit_thread() {
    let pool = KickPool::start(&[one_cpu()]).unwrap();
    let (fd, sink) = socket_pair();
    let kick = pool.assign("p1", fd).unwrap();
    assert_eq!(kick.cpu(), one_cpu().id);
    let mut buf = [0u8; 16];
    for _ in 0..3 {
        kick.request();
        let (n, _) = sink.recv_from(&mut buf).expect("a kick within 5 s");
        assert_eq!(n, 0);
        // Asleep (past the spin) before the next request: it must wake it.
        std::thread::sleep(Duration::from_millis(5));
    }
    let stats = pool.stats();
    assert_eq!(stats.len(), 1);
    assert_eq!(stats[0].sockets, 1);
    assert!(stats[0].kicks >= 3, "{stats:?}");
}

#[test]
fn requests_coalesce_and_the_last_one_is_never_lost() {
    let pool = KickPool::start(&[one_cpu()]).unwrap();
    let (fd, sink) = socket_pair();
    let kick = pool.assign("p1", fd).unwrap();
    for _ in 0..1000 {
        kick.request();
    }
    let mut buf = [0u8; 16];
    // At least one kick follows the last request.
    sink.recv_from(&mut buf).expect("a kick after the burst");
    sink.set_nonblocking(true).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let mut got = 1;
    while sink.recv_from(&mut buf).is_ok() {
        got += 1;
    }
    let kicks = pool.stats()[0].kicks;
    assert!(got <= 1000, "{got}");
    assert_eq!(got, kicks, "every kick reached the socket once");
}

#[test]
fn dropping_the_handle_releases_the_socket_and_stops_kicks() {
    let pool = KickPool::start(&[one_cpu()]).unwrap();
    let (fd, sink) = socket_pair();
    let kick = pool.assign("p1", fd.clone()).unwrap();
    kick.request();
    let mut buf = [0u8; 16];
    sink.recv_from(&mut buf).unwrap();
    drop(kick);
    // Nothing but the port holds the socket once the handle is gone, so
    // the port can close it (and reuse its frames) at once.
    assert_eq!(Arc::strong_count(&fd), 1);
    // A new port on the same thread: the closed one's counters stay.
    let (fd2, sink2) = socket_pair();
    let kick2 = pool.assign("p2", fd2).unwrap();
    kick2.request();
    sink2.recv_from(&mut buf).unwrap();
    let stats = pool.stats();
    assert_eq!(stats[0].sockets, 1);
    assert!(stats[0].kicks >= 2, "{stats:?}");
}

#[test]
fn sockets_spread_over_threads_and_errors_do_not_stop_them() {
    let cpu = one_cpu();
    let pool = KickPool::start(&[cpu, cpu]).unwrap();
    assert_eq!(pool.len(), 2);
    // Connected to a port nobody listens on: the second send fails with
    // ECONNREFUSED, which is logged once and does not stop the thread.
    let dead = UdpSocket::bind("127.0.0.1:0").unwrap();
    let gone = UdpSocket::bind("127.0.0.1:0").unwrap();
    dead.connect(gone.local_addr().unwrap()).unwrap();
    drop(gone);
    let bad = pool.assign("bad", Arc::new(OwnedFd::from(dead))).unwrap();
    let (fd, sink) = socket_pair();
    let good = pool.assign("good", fd).unwrap();
    let stats = pool.stats();
    assert_eq!(
        stats.iter().map(|s| s.sockets).collect::<Vec<_>>(),
        vec![1, 1]
    );
    for _ in 0..5 {
        bad.request();
        std::thread::sleep(Duration::from_millis(2));
    }
    good.request();
    let mut buf = [0u8; 16];
    sink.recv_from(&mut buf).unwrap();
}

/// A handle on a slot no thread serves: every request stays pending.
fn unserved() -> TxKick {
    let (fd, _sink) = socket_pair();
    TxKick {
        slot: Arc::new(KickSlot::new("p", fd)),
        thread: Arc::new(ThreadShared::new(0)),
    }
}

#[test]
fn a_late_transmit_thread_is_not_waited_for() {
    let kick = unserved();
    // Queued for the transmit thread, and coalesced while it is not late.
    assert!(kick.request());
    assert!(kick.request());
    assert_eq!(kick.slot.taken_over.load(Ordering::Relaxed), 0);
    // Past LATE the caller is told to kick itself, once per LATE.
    std::thread::sleep(LATE * 2);
    assert!(!kick.request());
    assert!(kick.request());
    assert_eq!(kick.slot.taken_over.load(Ordering::Relaxed), 1);
    std::thread::sleep(LATE * 2);
    assert!(!kick.request());
    assert_eq!(kick.slot.taken_over.load(Ordering::Relaxed), 2);
}
