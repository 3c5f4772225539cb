//! New connections created by the XDP program from a template
//! (conntrack/kernel_new.rs), run by `BPF_PROG_TEST_RUN` over real maps:
//! a frame without a connection that a template matches is forwarded and
//! its connection created, reported and stored in conntrack; frames of
//! tuples conntrack holds (either direction), frames the template does
//! not match, frames over the budget and templates of an older
//! generation go to the packet thread; conntrack's own connections and
//! removals reach the kernel's map.
//!
//! Needs root (loading BPF), as CI runs it.

mod xdp_common;

use dataplane::conntrack::{state, Conntrack, CtRequest, Tuple};
use dataplane::fastpath::cache::entry::{frame_key, FcKey, KEY_SIZE};
use dataplane::fastpath::cache::templates::NewConnTemplate;
use dataplane::fastpath::cache::{CacheMaps, XdpCache};
use dataplane::fastpath::ct::kernel_shares::{self, PortShares};
use dataplane::fastpath::loader::XdpTestRun;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;
use xdp_common::{attribution, commit, track, udp, LO, TO_XBR, XDP_DROP, XDP_REDIRECT};

const A: u32 = 0x0a80_0002;
const B: u32 = 0x0a80_0003;
const C: u32 = 0x0a80_0004;
const UDP: u8 = 17;
/// The MAC the templates write as the destination.
const POD_MAC: [u8; 6] = [0x0a, 0x58, 0x0a, 0x80, 0x00, 0x03];

struct Rig {
    ct: Arc<Conntrack>,
    cache: XdpCache,
    maps: Arc<CacheMaps>,
    prog: XdpTestRun,
}

/// Room for `connections` in the kernel's map of tuples.
fn rig(connections: usize) -> Rig {
    let maps = Arc::new(
        CacheMaps::new(64, 4, connections)
            .expect("creating BPF maps (needs root, as CI runs tests)"),
    );
    maps.add_dev(LO).expect("lo as a redirect target");
    let prog = XdpTestRun::load(&maps).expect("loading the XDP programs");
    let ct = Arc::new(Conntrack::default());
    ct.set_flush_hook(maps.generation().clone());
    ct.set_kernel_new(
        maps.start_kernel_new()
            .expect("the kernel's new connections"),
    );
    ct.kernel_sync();
    let mut cache = XdpCache::new(maps.clone());
    cache.begin_round();
    Rig {
        ct,
        cache,
        maps,
        prog,
    }
}

/// A template for frames like `f` on lo, examining the bytes of the XDP
/// key that `examined` lists (the device, protocol and tunnel fields
/// always).
fn template(f: &[u8], examined: std::ops::Range<usize>) -> NewConnTemplate {
    let key = frame_key(f, LO).expect("a frame the program looks up");
    let mut mask: FcKey = [0; KEY_SIZE];
    mask[0..4].fill(0xff);
    mask[24] = 0xff;
    mask[32..40].fill(0xff);
    mask[examined].fill(0xff);
    NewConnTemplate {
        in_port: 1,
        ifindex: LO,
        mask,
        key,
        zone: 0,
        out_port: 2,
        out_ifindex: LO,
        set_dst: Some(POD_MAC),
        set_src: None,
        attribution: attribution(),
    }
}

/// The XDP key's destination address.
const IP_DST: std::ops::Range<usize> = 20..24;

impl Rig {
    fn run(&mut self, f: &[u8]) -> (u32, Vec<u8>) {
        self.prog.run(f).expect("BPF_PROG_TEST_RUN")
    }

    fn conns(&self) -> Vec<(Tuple, Tuple)> {
        let mut v: Vec<_> = self
            .ct
            .dump(None, self.ct.now_ms())
            .into_iter()
            .map(|e| (e.orig, e.reply))
            .collect();
        v.sort_by_key(|(o, _)| (o.sport, o.dport, o.src.0, o.dst.0));
        v
    }

    fn slot(&self, t: &Tuple) -> u64 {
        self.maps
            .kernel_new()
            .expect("on")
            .slot_count(t)
            .expect("a UDP tuple")
    }

    fn imported(&self) -> u64 {
        self.ct
            .stats
            .kernel_imported
            .load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[test]
fn a_template_creates_the_connection_and_forwards_the_frame() {
    let mut r = rig(100_000);
    let first = udp(A, 5000, B, 53);
    r.cache.install_template(template(&first, IP_DST));
    assert_eq!(r.cache.templates().len(), 1);

    let (act, out) = r.run(&first);
    assert_eq!(act, XDP_REDIRECT);
    assert_eq!(&out[0..6], &POD_MAC, "the template's eth_dst");
    assert_eq!(&out[6..], &first[6..]);
    assert_eq!(r.ct.len(), 0, "reported, not yet read");
    // A dump reads the reports first.
    let t = Tuple::v4(0, UDP, A, B, 5000, 53);
    assert_eq!(r.conns(), vec![(t, t.reverse())]);
    assert_eq!(r.imported(), 1);
    assert_eq!(r.slot(&t), 1);
    assert_eq!(r.slot(&t.reverse()), 1, "one slot for both directions");

    // The tuple is known now, in both directions: the packet thread's.
    assert_eq!(r.run(&first).0, TO_XBR);
    assert_eq!(r.run(&udp(B, 53, A, 5000)).0, TO_XBR, "not the template's");
    r.cache
        .install_template(template(&udp(B, 53, A, 5000), 0..0));
    assert_eq!(r.run(&udp(B, 53, A, 5000)).0, TO_XBR, "a reply is not new");
    // Another destination: not the first template's.
    assert_eq!(r.cache.templates().len(), 2);
    let other = udp(A, 5001, C, 53);
    assert_eq!(r.run(&other).0, XDP_REDIRECT, "the catch-all template's");
    r.ct.kernel_sync();
    assert_eq!(r.conns().len(), 2);

    // The kernel's connections are conntrack's: a later packet of one
    // finds it even before the round's reports were read.
    assert_eq!(r.run(&udp(A, 5002, B, 53)).0, XDP_REDIRECT);
    let st = track(&r.ct, udp(A, 5002, B, 53), &commit());
    assert_eq!(st, state::TRK | state::NEW, "no reply yet");
    assert_eq!(r.conns().len(), 3, "stored once");
    let st = track(&r.ct, udp(B, 53, A, 5002), &CtRequest::default());
    assert_eq!(st, state::TRK | state::EST | state::RPL);

    // Hits reach the template's counters and the ports.
    r.cache
        .sweep(Instant::now(), true, false, &r.ct, r.ct.now_ms());
    assert_eq!(r.cache.stats().ct_new_packets, 3);
    let credited: u64 = r.cache.take_credits().map(|c| c.packets).sum();
    assert_eq!(credited, 3);
}

#[test]
fn conntrack_s_own_connections_and_removals_reach_the_kernel() {
    let mut r = rig(100_000);
    let f = udp(A, 6000, B, 53);
    r.cache.install_template(template(&f, 0..0));
    // Committed by the packet thread: the kernel learns it with the sync
    // that comes before the round's packets leave.
    track(&r.ct, f.clone(), &commit());
    let t = Tuple::v4(0, UDP, A, B, 6000, 53);
    assert_eq!(r.slot(&t), 1, "counted as it was stored");
    assert_eq!(r.run(&f).0, TO_XBR);
    assert_eq!(r.run(&udp(B, 53, A, 6000)).0, TO_XBR);
    assert_eq!(r.conns().len(), 1);

    // Gone from conntrack, gone from the kernel's slots: new again.
    assert_eq!(r.ct.flush(None), 1);
    assert_eq!(r.slot(&t), 0);
    assert_eq!(r.run(&f).0, XDP_REDIRECT);
    r.ct.kernel_sync();
    assert_eq!(r.conns().len(), 1);
    assert_eq!(r.imported(), 1);
}

#[test]
fn the_budget_and_the_generation_bound_what_the_kernel_creates() {
    let mut r = rig(100_000);
    r.cache.install_template(template(&udp(A, 1, B, 53), 0..0));
    // Room for two more under the limit, beyond the margin.
    r.ct.set_limit(dataplane::fastpath::ct::kernel_new::BUDGET_MARGIN + 2);
    r.ct.kernel_sync();
    assert_eq!(r.run(&udp(A, 1, B, 53)).0, XDP_REDIRECT);
    assert_eq!(r.run(&udp(A, 2, B, 53)).0, XDP_REDIRECT);
    assert_eq!(r.run(&udp(A, 3, B, 53)).0, TO_XBR, "budget spent");
    r.ct.kernel_sync();
    assert_eq!(r.conns().len(), 2);
    assert_eq!(r.run(&udp(A, 3, B, 53)).0, TO_XBR, "still no room");

    r.ct.set_limit(1_000_000);
    r.ct.kernel_sync();
    assert_eq!(r.run(&udp(A, 3, B, 53)).0, XDP_REDIRECT);
    // A new generation (a PORT_MOD, a flush) retires the template.
    r.maps.generation().bump();
    assert_eq!(r.run(&udp(A, 4, B, 53)).0, TO_XBR);
    r.cache
        .sweep(Instant::now(), true, false, &r.ct, r.ct.now_ms());
    assert!(r.cache.templates().is_empty(), "swept");
    // A flow change removes every template at once.
    r.cache.begin_round();
    r.cache.install_template(template(&udp(A, 1, B, 53), 0..0));
    assert_eq!(r.cache.templates().len(), 1);
    r.cache.start_revalidation(None);
    assert!(r.cache.templates().is_empty());
    assert_eq!(r.run(&udp(A, 5, B, 53)).0, TO_XBR);
}

#[test]
fn the_kernel_map_s_size_bounds_what_the_kernel_creates() {
    // Room for BUDGET_MARGIN + 1 connections in the kernel's map.
    let mut r = rig(dataplane::fastpath::ct::kernel_new::BUDGET_MARGIN + 1);
    r.cache.install_template(template(&udp(A, 1, B, 53), 0..0));
    assert_eq!(r.run(&udp(A, 1, B, 53)).0, XDP_REDIRECT);
    assert_eq!(r.run(&udp(A, 2, B, 53)).0, TO_XBR);
    r.ct.kernel_sync();
    assert_eq!(r.conns().len(), 1);
}

#[test]
fn a_natted_connection_counts_both_of_its_pairs() {
    let r = rig(100_000);
    let nat = CtRequest {
        commit: true,
        nat: Some(flowtable::pipeline::NatSpec {
            flags: flowtable::action::nat_flags::SRC,
            addr_min: [0, 0, 0, C],
            ..Default::default()
        }),
        ..CtRequest::default()
    };
    let st = track(&r.ct, udp(A, 7000, B, 53), &nat);
    assert_ne!(st & state::SNAT, 0);
    let orig = Tuple::v4(0, UDP, A, B, 7000, 53);
    let (_, reply) = r.conns()[0];
    assert_eq!(reply.dst.0[0], C);
    assert_eq!((r.slot(&orig), r.slot(&reply)), (1, 1));
    assert_eq!(r.ct.flush(None), 1);
    assert_eq!((r.slot(&orig), r.slot(&reply)), (0, 0));
}

#[test]
fn one_template_creates_a_thousand_connections() {
    // One client's source ports: slots of their own, but for the odd one
    // another took by chance (1000 in 8M slots: 0.06 expected).
    let mut r = rig(3_000_000);
    r.cache.install_template(template(&udp(A, 1, B, 53), 0..0));
    let mut shared = 0;
    for p in 0..1000u16 {
        match r.run(&udp(A, 20000 + p, B, 53)).0 {
            XDP_REDIRECT => {}
            TO_XBR => shared += 1,
            other => panic!("port {p}: action {other}"),
        }
        if p % 100 == 0 {
            r.ct.kernel_sync();
        }
    }
    assert!(shared <= 3, "{shared} left to the packet thread");
    r.ct.kernel_sync();
    assert_eq!(
        (r.imported(), r.ct.len()),
        (1000 - shared, 1000 - shared as usize)
    );
}

/// Reports the ring of new connections holds.
const RING_REPORTS: u64 = (8 << 20) / 32;

/// (held, refused) of lo's bucket in `ct_ports`, and the holders.
fn lo_share(r: &Rig) -> (u64, u64, u64) {
    let k = r.maps.kernel_new().expect("on");
    let s = k.port_shares();
    let c = s.counters();
    let b = PortShares::bucket(LO) as usize;
    (
        c[b].load(Relaxed),
        c[kernel_shares::PORT_BUCKETS + b].load(Relaxed),
        s.holders(),
    )
}

#[test]
fn one_port_fills_half_the_ring_and_a_full_ring_drops_and_counts() {
    // Nobody reads the reports. One port (lo) may hold half the ring:
    // past that its new connections go to the packet thread, counted for
    // the port, and the ring keeps room for the others.
    let mut r = rig(3_000_000);
    r.cache.install_template(template(&udp(A, 1, B, 53), 0..0));
    let share = r.maps.kernel_new().expect("on").port_shares().share(LO);
    assert_eq!(share, RING_REPORTS / 2);
    let frame = |i: u32| udp(0x0b00_0000 + i / 1000, 1000 + (i % 1000) as u16, B, 53);
    let (mut created, mut not_forwarded) = (0u64, 0u64);
    let closed_before = r.maps.closed_drops();
    let n = (share + 10_000) as u32;
    for i in 0..n {
        match r.run(&frame(i)).0 {
            XDP_REDIRECT => created += 1,
            // The packet thread's (TO_XBR, XDP_DROP here: no socket), or a
            // full ring's drop: the fail-closed counter tells them apart.
            XDP_DROP => not_forwarded += 1,
            other => panic!("frame {i}: action {other}"),
        }
    }
    let to_xbr = r.maps.closed_drops() - closed_before;
    assert_eq!(to_xbr, not_forwarded, "none dropped: the ring has room");
    assert_eq!(
        created, share,
        "a report per created connection, up to the share"
    );
    let (held, refused, holders) = lo_share(&r);
    assert_eq!((held, holders), (share, 1));
    // The rest went to the packet thread: over the share, or (about
    // n^2/2N of n in N = 8M slots) in a slot another took by chance.
    assert!(
        refused >= 5_000 && refused <= u64::from(n) - created,
        "{refused}"
    );
    let hits = r
        .maps
        .kernel_new()
        .expect("on")
        .port_shares()
        .hits(["lo"].into_iter());
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].0, "lo");
    assert_eq!((hits[0].1.held, hits[0].1.refused), (held, refused));

    // Read, the reports leave the port's count: room again.
    r.ct.kernel_sync();
    assert_eq!(r.ct.len() as u64, created);
    assert_eq!(lo_share(&r), (0, refused, 0));
    // (A new tuple may find its slot taken by chance: one of ten will do.)
    assert!((n..n + 10).any(|i| r.run(&frame(i)).0 == XDP_REDIRECT));
    r.ct.kernel_sync();

    // Several ports together can still fill the ring: stand them in by
    // taking lo's count back after each frame, as if each report were
    // another port's. A full ring drops and counts in the template.
    let maps = r.maps.clone();
    let c = maps.kernel_new().expect("on").port_shares().counters();
    let b = PortShares::bucket(LO) as usize;
    let (mut created, mut not_forwarded) = (0u64, 0u64);
    let closed_before = r.maps.closed_drops();
    for i in n + 10..n + 10 + RING_REPORTS as u32 + 10_000 {
        match r.run(&frame(i)).0 {
            XDP_REDIRECT => created += 1,
            XDP_DROP => not_forwarded += 1,
            other => panic!("frame {i}: action {other}"),
        }
        c[b].store(0, Relaxed);
        c[2 * kernel_shares::PORT_BUCKETS].store(0, Relaxed);
    }
    let shared = r.maps.closed_drops() - closed_before;
    let dropped = not_forwarded - shared;
    assert!(created > 200_000, "{created} created");
    assert!(shared < 15_000, "{shared} in shared slots");
    assert!(dropped > 0);
    r.cache
        .sweep(Instant::now(), true, false, &r.ct, r.ct.now_ms());
    let overflow: u64 = r.cache.take_ct_new_overflow().map(|(_, n)| n).sum();
    assert_eq!(overflow, dropped);
    // Every created one is stored; the dropped ones left no count.
    r.ct.kernel_sync();
    assert_eq!(r.ct.len() as u64, created + share + 1);
}

#[test]
fn a_port_s_share_shrinks_as_other_ports_hold_reports() {
    let mut r = rig(3_000_000);
    r.cache.install_template(template(&udp(A, 1, B, 53), 0..0));
    // Every other bucket holds a report, as other ports' programs would
    // have counted them: lo's share is the ring over 1,023 + 2 ports.
    let maps = r.maps.clone();
    let c = maps.kernel_new().expect("on").port_shares().counters();
    let lo = PortShares::bucket(LO) as usize;
    for b in (0..kernel_shares::PORT_BUCKETS).filter(|&b| b != lo) {
        c[b].store(1, Relaxed);
    }
    let others = kernel_shares::PORT_BUCKETS as u64 - 1;
    c[2 * kernel_shares::PORT_BUCKETS].store(others, Relaxed);
    let share = RING_REPORTS / (others + 2);
    assert_eq!(
        r.maps.kernel_new().expect("on").port_shares().share(LO),
        share
    );
    let mut created = 0;
    let mut port = 10_000u16;
    while lo_share(&r).1 == 0 {
        if r.run(&udp(A, port, B, 53)).0 == XDP_REDIRECT {
            created += 1;
        }
        port += 1;
    }
    assert_eq!(created, share);
    assert_eq!(lo_share(&r), (share, 1, others + 1));
    // Its reports read, lo holds none; the others' stand.
    r.ct.kernel_sync();
    assert_eq!(lo_share(&r), (0, 1, others));
    assert_eq!(r.ct.len() as u64, share);
    assert_eq!(r.run(&udp(A, port, B, 53)).0, XDP_REDIRECT);
}
