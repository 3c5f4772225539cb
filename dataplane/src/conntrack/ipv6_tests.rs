//! ct() on IPv6: conntrack is IPv4-only, so an IPv6 packet (a fragment as
//! well) comes out `+trk+inv`, is counted, and creates nothing.

use super::state;
use super::tests::{run, COMMIT, LOOKUP};
use super::Conntrack;
use crate::packet::ipv6::tests::{tcp6_frame, udp6_frame};
use std::sync::atomic::Ordering::Relaxed;

#[test]
fn ipv6_packets_are_tracked_as_invalid() {
    let ct = Conntrack::default();
    // A first fragment (fragment header, offset 0, more fragments) and a
    // later one, besides whole TCP and UDP.
    let mut first = udp6_frame();
    first[20] = 44;
    first.splice(54..54, [17, 0, 0, 1, 0, 0, 0, 7]);
    let mut later = first.clone();
    later[56..58].copy_from_slice(&(100u16 << 3).to_be_bytes());
    for (i, f) in [tcp6_frame(), udp6_frame(), first, later]
        .into_iter()
        .enumerate()
    {
        for req in [&COMMIT, &LOOKUP] {
            let (o, out) = run(&ct, f.clone(), req, i as u64);
            assert_eq!(o.state, state::TRK | state::INV, "frame {i}");
            assert_eq!(out, f, "frame {i} was changed");
        }
    }
    assert!(ct.is_empty());
    assert_eq!(ct.stats.not_ipv4.load(Relaxed), 8);
    assert_eq!(ct.stats.invalid.load(Relaxed), 8);
    assert!(ct.stats_text().contains("not_ipv4: 8\n"));
}
