//! Port mirroring in the packet engine (`dataplane::mirror`) over
//! in-memory ports: which frames a mirror copies (received on a source
//! port as received, output to a destination port as output), each
//! packet at most once per mirror, and NORMAL leaving a mirror's output
//! port alone.

mod common;

use common::Rig;
use dataplane::mirror::{Mirror, Selection, Sink};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::Arc;

fn frame() -> Vec<u8> {
    // Broadcast Ethernet with an unknown EtherType.
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x88, 0xb5]);
    f.extend_from_slice(&[0u8; 50]);
    f
}

/// A mirror and the socket its copies arrive on.
fn mirror(name: &str, select: Selection, output: Option<&str>) -> (Mirror, UnixDatagram) {
    let addr = format!("xbr-test-mirror-{}-{name}", std::process::id());
    let rx = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(&addr).unwrap()).unwrap();
    rx.set_nonblocking(true).unwrap();
    let sink = Sink::capture_abstract(&addr).unwrap();
    (
        Mirror::new(name.into(), select, output.map(String::from), sink),
        rx,
    )
}

fn ports(names: &[&str]) -> std::collections::BTreeSet<String> {
    names.iter().map(|n| n.to_string()).collect()
}

fn copies(rx: &UnixDatagram) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = [0u8; 2048];
    while let Ok(n) = rx.recv(&mut buf) {
        out.push(buf[..n].to_vec());
    }
    out
}

#[test]
fn mirrors_copy_what_they_select_once_per_packet() {
    let mut rig = Rig::new(3, 64);
    // Rewritten, then out of ports 2 and 3.
    rig.flow_text("in_port=1, actions=mod_dl_dst:02:00:00:00:00:09, output:2, output:3");
    rig.flow_text("in_port=2, actions=output:1");
    let (src, src_rx) = mirror(
        "src",
        Selection {
            all: false,
            src: ports(&["p1"]),
            dst: ports(&["p2"]),
        },
        None,
    );
    let (dst, dst_rx) = mirror(
        "dst",
        Selection {
            all: false,
            src: ports(&[]),
            dst: ports(&["p2", "p3"]),
        },
        None,
    );
    let (all, all_rx) = mirror(
        "all",
        Selection {
            all: true,
            ..Default::default()
        },
        None,
    );
    rig.shared
        .mirrors()
        .set_db(vec![Arc::new(src), Arc::new(dst), Arc::new(all)]);
    let f = frame();
    rig.send(1, &f);
    let mut rewritten = f.clone();
    rewritten[..6].copy_from_slice(&[2, 0, 0, 0, 0, 9]);
    assert_eq!(rig.sent(2), [&rewritten[..]]);
    assert_eq!(rig.sent(3), [&rewritten[..]]);
    // Received on p1 (and output to p2): one copy, as received.
    assert_eq!(copies(&src_rx), [&f[..]]);
    // Output to p2 and p3: one copy, as output.
    assert_eq!(copies(&dst_rx), [&rewritten[..]]);
    // Everything: one copy, the first the packet gave (on receipt).
    assert_eq!(copies(&all_rx), [&f[..]]);

    // The other way: p2 -> p1. Only `src` selects p2 (as destination:
    // no), `all` copies it; `dst` does not select p1.
    rig.send(2, &f);
    assert_eq!(rig.sent(1), [&f[..]]);
    assert!(copies(&src_rx).is_empty());
    assert!(copies(&dst_rx).is_empty());
    assert_eq!(copies(&all_rx), [&f[..]]);
    let m = rig.shared.mirrors().snapshot();
    let sent: Vec<u64> = m
        .iter()
        .map(|m| {
            m.counters
                .tx_packets
                .load(std::sync::atomic::Ordering::Relaxed)
        })
        .collect();
    assert_eq!(sent, [1, 1, 2]);

    // Mirrors gone: no copies, nothing else changes.
    rig.shared.mirrors().set_db(Vec::new());
    rig.send(2, &f);
    assert_eq!(rig.sent(1), [&f[..]]);
    assert!(copies(&all_rx).is_empty());
    // Every frame went back to the store.
    assert_eq!(rig.free_frames(), 64);
}

#[test]
fn normal_leaves_a_mirror_output_port_alone() {
    let mut rig = Rig::new(3, 64);
    rig.flow_text("actions=NORMAL");
    let (m, rx) = mirror(
        "out",
        Selection {
            all: false,
            src: ports(&["p1"]),
            dst: ports(&[]),
        },
        Some("p3"),
    );
    rig.shared.mirrors().set_db(vec![Arc::new(m)]);
    let f = frame();
    // A broadcast from p1 floods to p2, not to the reserved p3.
    rig.send(1, &f);
    assert_eq!(rig.sent(2), [&f[..]]);
    assert!(rig.sent(3).is_empty());
    assert_eq!(copies(&rx), [&f[..]]);
    // What p3 receives, NORMAL drops.
    rig.send(3, &f);
    assert!(rig.sent(1).is_empty() && rig.sent(2).is_empty());
    assert_eq!(rig.free_frames(), 64);
}
