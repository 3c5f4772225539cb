//! The generator and the sink, end to end (root: namespaces, XDP).
//!
//! The generator program is checked against the Rust reference rewrite
//! (`Template::write_flow`) frame by frame; then bounded traffic goes from
//! pod A through the kernel-redirect reference to pod B's sink, and the
//! counts must add up: everything sent arrives at a low rate, and a sink
//! side that cannot receive shows up as loss.

use std::net::Ipv4Addr;
use std::time::Duration;

use bench::bpf::{Generator, Redirect, XDP_TX};
use bench::gen::{GenBounds, Method};
use bench::measure::{Harness, MethodChoice, Traffic};
use bench::packet::{checksum, l4_checksum, FrameSpec, Proto, Template, Vary, VxlanOuter};
use bench::pod_gen::{Pod, PodPair, PIN_IF};
use bench::topo::{self, Topology, MAC_A, MAC_B, POD_IF, VETH_A, VETH_B};

fn spec(proto: Proto, pkt_size: usize, vxlan: bool) -> FrameSpec {
    FrameSpec {
        proto,
        pkt_size,
        src_mac: MAC_A,
        dst_mac: MAC_B,
        src_ip: Ipv4Addr::new(10, 128, 0, 2),
        dst_ip: Ipv4Addr::new(10, 128, 4, 0),
        src_port: 40000,
        dst_port: 5201,
        vxlan: vxlan.then(|| VxlanOuter {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_ip: Ipv4Addr::new(10, 0, 0, 12),
            dst_ip: Ipv4Addr::new(10, 0, 0, 11),
            vni: 42,
        }),
    }
}

fn check_program(t: &Template, vary: Vary, n_flows: u32) {
    let g = Generator::load(t, n_flows, vary).expect("load generator");
    for i in 0..(n_flows * 2 + 1) {
        let (verdict, out) = g.run_once().expect("BPF_PROG_RUN");
        assert_eq!(verdict, XDP_TX);
        let ts_off = usize::from(t.tag_off) + 8;
        let mut ts = [0u8; 8];
        ts.copy_from_slice(&out[ts_off..ts_off + 8]);
        let ts = u64::from_ne_bytes(ts);
        assert!(ts > 0, "timestamp written");
        let mut expect = t.frame.clone();
        t.write_flow(&mut expect, vary, i % n_flows, ts);
        assert_eq!(out, expect, "frame {i} (flow {})", i % n_flows);
        let ip = usize::from(t.ip_off);
        assert_eq!(
            checksum(&out[ip..ip + 20], 0),
            0,
            "IPv4 checksum, frame {i}"
        );
        if t.l4_csum_off != 0 {
            assert_eq!(l4_checksum(&out[ip..]), 0, "TCP checksum, frame {i}");
        }
    }
    assert_eq!(g.sent().unwrap(), u64::from(n_flows * 2 + 1));
}

#[test]
fn generator_program_rewrites_like_the_reference() {
    let all = Vary {
        src_port: true,
        dst_ip: true,
        src_ip: true,
        dst_port: true,
    };
    check_program(&spec(Proto::Udp, 64, false).build().unwrap(), all, 5);
    check_program(&spec(Proto::Tcp, 128, false).build().unwrap(), all, 3);
    let ports = Vary {
        src_port: true,
        ..Vary::default()
    };
    check_program(&spec(Proto::Tcp, 74, false).build().unwrap(), ports, 4);
    let replies = Vary {
        dst_port: true,
        ..Vary::default()
    };
    check_program(&spec(Proto::Udp, 64, false).build().unwrap(), replies, 4);
    check_program(&spec(Proto::Tcp, 74, false).build().unwrap(), replies, 4);
    check_program(&spec(Proto::Udp, 128, true).build().unwrap(), all, 3);
}

fn traffic(method: MethodChoice) -> Traffic {
    let template = spec(Proto::Udp, 64, false).build().unwrap();
    Traffic {
        sink_tag_off: template.tag_off,
        template,
        vary: Vary {
            dst_ip: true,
            src_port: true,
            ..Vary::default()
        },
        n_flows: 100,
        method,
        cpu: None,
        classes: None,
        checks: None,
        stop: Default::default(),
    }
}

fn low_rate(count: u64) -> GenBounds {
    GenBounds {
        duration: Duration::from_secs(5),
        count: Some(count),
        rate_pps: Some(50_000),
    }
}

/// The kernel-redirect reference between pod A and pod B, attached until
/// dropped.
fn redirect_a_to_b(topo: &Topology) -> Redirect {
    topo::run_in(
        &topo.host,
        || -> Result<Redirect, Box<dyn std::error::Error + Send + Sync>> {
            let a = topo::ifindex(&topo.host, VETH_A)?;
            let b = topo::ifindex(&topo.host, VETH_B)?;
            Ok(Redirect::attach(a, b)?)
        },
    )
    .expect("redirect veth-a -> veth-b")
}

#[test]
fn counts_add_up_through_the_kernel_redirect() {
    let topo = Topology::new().expect("topology");
    let _redirect = redirect_a_to_b(&topo);

    let mut h = Harness::new(&topo, traffic(MethodChoice::Live)).expect("harness");
    // The generator's program is held by an idle interface, so live-frames
    // calls do not each wait for RCU (see `Generator::pin`).
    let pin = topo
        .exec(&topo.pod_a, &["ip", "-d", "link", "show", topo::GEN_PIN_IF])
        .expect("pin interface");
    assert!(pin.contains("prog/xdp"), "{pin}");
    let s = h.run(&low_rate(10_000)).expect("live run");
    assert_eq!(s.method, Method::LiveFrames);
    assert_eq!(s.sent, 10_000);
    assert_eq!(s.received, 10_000, "{s:?}");
    assert_eq!(s.loss(), 0.0);
    assert_eq!(s.ingress_drops, Some(0), "{s:?}");
    assert!(s.elapsed >= Duration::from_millis(150), "paced: {s:?}");
    let p50 = s.p50_ns.expect("latency measured");
    let p99 = s.p99_ns.expect("latency measured");
    assert!(p50 > 0.0 && p50 <= p99 && p99 < 1e9, "{s:?}");
    assert_eq!(s.bytes, 10_000 * 60);

    // The same through AF_XDP, the fallback.
    h.set_method(MethodChoice::Afxdp);
    let s = h.run(&low_rate(2_000)).expect("af_xdp run");
    assert_eq!(s.method, Method::AfXdp);
    assert_eq!((s.sent, s.received), (2_000, 2_000), "{s:?}");
    h.set_method(MethodChoice::Live);

    // A receiving side that is down drops everything: reported as loss.
    topo.exec(&topo.pod_b, &["ip", "link", "set", POD_IF, "down"])
        .expect("pod B down");
    let s = h.run(&low_rate(5_000)).expect("live run");
    assert_eq!(s.sent, 5_000);
    assert_eq!(s.received, 0, "{s:?}");
    assert_eq!(s.loss(), 1.0);
    // Lost after the switch (here the redirect into veth-b), not at its
    // ingress.
    assert_eq!(s.ingress_drops, Some(0), "{s:?}");
}

/// labbench's generator between two pods: pod A's frames, addressed to
/// pod B, all counted by pod B's sink; the pin interface it makes in pod A
/// goes with it.
#[test]
fn pod_pair_counts_frames_between_two_pods() {
    let topo = Topology::new().expect("topology");
    let _redirect = redirect_a_to_b(&topo);
    let pod = |netns: &str, mac, ip| Pod {
        netns: netns.to_string(),
        mac,
        ip,
    };
    let a = pod(&topo.pod_a, MAC_A, Ipv4Addr::new(10, 128, 0, 2));
    let b = pod(&topo.pod_b, MAC_B, Ipv4Addr::new(10, 128, 2, 2));
    let pair = PodPair::new(&a, &b, 1).expect("pod pair");
    let pin = topo
        .exec(&topo.pod_a, &["ip", "-d", "link", "show", PIN_IF])
        .expect("pin interface");
    assert!(pin.contains("prog/xdp"), "{pin}");

    let s = pair
        .run(Duration::from_millis(200), Some(50_000), None)
        .expect("paced run");
    assert_eq!(s.method, Method::LiveFrames);
    assert!(s.sent >= 5_000, "{s:?}");
    assert_eq!(s.received, s.sent, "{s:?}");
    assert_eq!(s.bytes, s.sent * 60, "64-byte frames without FCS");

    // Frames pod B does not get are loss, not received.
    topo.exec(&topo.pod_b, &["ip", "link", "set", POD_IF, "down"])
        .expect("pod B down");
    let s = pair
        .run(Duration::from_millis(100), Some(50_000), None)
        .expect("paced run");
    assert!(s.sent > 0 && s.received == 0, "{s:?}");

    drop(pair);
    let links = topo.exec(&topo.pod_a, &["ip", "link"]).expect("links");
    assert!(!links.contains(PIN_IF), "{links}");
}
