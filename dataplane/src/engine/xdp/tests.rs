//! Which translations the XDP cache follows through `ct()` passes.

use super::*;
use flowtable::matching::IP_PROTO_ICMP;

fn tracked_key(state: u32, proto: u8) -> FlowKey {
    let mut k = FlowKey::zero();
    k.set(Field::CtState, u64::from(state));
    k.set(Field::CtZone, 3);
    k.set(Field::CtMark, 9);
    k.set(Field::IpProto, u64::from(proto));
    k.set(Field::IpSrc, 0x0a80_0002);
    k.set(Field::IpDst, 0x0a80_0003);
    k.set(Field::TpSrc, 40000);
    k.set(Field::TpDst, 80);
    k
}

#[test]
fn only_established_tcp_and_udp_without_nat_are_followed() {
    let est = state::TRK | state::EST;
    for (st, proto, ok) in [
        (est, IP_PROTO_TCP, true),
        (est | state::RPL, IP_PROTO_UDP, true),
        (est, IP_PROTO_ICMP, false),
        (state::TRK | state::NEW, IP_PROTO_UDP, true),
        (state::TRK | state::NEW, IP_PROTO_TCP, true),
        (state::TRK | state::NEW, IP_PROTO_ICMP, false),
        (state::TRK | state::NEW | state::RPL, IP_PROTO_UDP, false),
        (state::TRK | state::NEW | state::DNAT, IP_PROTO_UDP, false),
        (est | state::INV, IP_PROTO_UDP, false),
        (state::TRK | state::REL | state::RPL, IP_PROTO_UDP, false),
        (est | state::SNAT, IP_PROTO_UDP, true),
        (est | state::DNAT | state::RPL, IP_PROTO_TCP, true),
        (state::EST, IP_PROTO_TCP, false),
    ] {
        let mut c = XdpChain::new([0; crate::fastpath::cache::entry::KEY_SIZE]);
        let k = tracked_key(st, proto);
        assert_eq!(c.tracked(&k, &k), ok, "{st:#x} {proto}");
        assert_eq!(c.conns().len(), usize::from(ok));
    }
    // `+trk+new` is a tuple without a connection only if the fork did
    // not just commit one.
    let new = tracked_key(state::TRK | state::NEW, IP_PROTO_UDP);
    let fork = |commit| DpAction::Ct {
        zone: 0,
        commit,
        force: false,
        table: Some(1),
        nat: None,
        mark: None,
        label: None,
    };
    let mut c = XdpChain::new([0; crate::fastpath::cache::entry::KEY_SIZE]);
    assert!(c.add_pass(&new, fork(true)));
    assert!(!c.tracked(&new, &new), "committed just now");
    let mut c = XdpChain::new([0; crate::fastpath::cache::entry::KEY_SIZE]);
    assert!(c.add_pass(&new, fork(false)));
    assert!(c.tracked(&new, &new));
    assert!(c.conns()[0].absent);

    let mut c = XdpChain::new([0; crate::fastpath::cache::entry::KEY_SIZE]);
    // The tuple is the packet's before the fork (DNAT to .9:8080).
    let mut natted = tracked_key(est | state::DNAT, IP_PROTO_TCP);
    natted.set(Field::IpDst, 0x0a80_0009);
    natted.set(Field::TpDst, 8080);
    assert!(c.tracked(&tracked_key(0, IP_PROTO_TCP), &natted));
    assert_eq!(
        c.conns()[0],
        CtConn {
            tuple: Tuple::v4(3, IP_PROTO_TCP, 0x0a80_0002, 0x0a80_0003, 40000, 80),
            mark: 9,
            label: 0,
            absent: false,
        }
    );
    for _ in 1..MAX_CT_PASSES {
        let k = tracked_key(est, IP_PROTO_TCP);
        assert!(c.tracked(&k, &k));
    }
    assert!(
        !c.tracked(
            &tracked_key(est, IP_PROTO_TCP),
            &tracked_key(est, IP_PROTO_TCP)
        ),
        "too many passes"
    );
}

#[test]
fn only_a_lone_plain_ct_fork_is_followed() {
    let ct = |table, force, mark, label| DpAction::Ct {
        zone: 0,
        commit: true,
        force,
        table,
        nat: None,
        mark,
        label,
    };
    let fork = ct(Some(1), false, None, None);
    assert_eq!(plain_ct_fork(&[fork]), Some(&fork));
    // A bare `nat` (un-NAT of replies): followed, the state tells
    // whether it translated.
    let nat = DpAction::Ct {
        zone: 0,
        commit: false,
        force: false,
        table: Some(70),
        nat: Some(flowtable::pipeline::NatSpec::default()),
        mark: None,
        label: None,
    };
    assert_eq!(plain_ct_fork(&[nat]), Some(&nat));
    let out = DpAction::Output {
        port: 2,
        tun_id: 0,
        tun_dst: 0,
    };
    assert!(plain_ct_fork(&[fork, out]).is_none());
    assert!(plain_ct_fork(&[out]).is_none());
    assert!(plain_ct_fork(&[]).is_none());
    for bad in [
        ct(Some(1), false, Some((1, 1)), None),
        ct(Some(1), false, None, Some((1, 1))),
        ct(Some(1), true, None, None),
        ct(None, false, None, None),
    ] {
        assert!(plain_ct_fork(&[bad]).is_none(), "{bad:?}");
    }
}
