//! Connections learned from the host's conntrack, end to end through
//! `execute`: a Service's replies get the Service address back, the
//! return traffic of the host's MASQUERADE is a reply, and nothing is
//! learned from packets that did not come from the host.

use super::tests::{checksums_ok, run, tcp_frame, BARE_NAT, LOOKUP};
use super::tuple::tcp_flags as F;
use super::*;
use flowtable::matching::IP_PROTO_TCP;
use parking_lot::Mutex;
use std::collections::HashMap;

const POD: u32 = 0x0a80_0002;
const BACKEND: u32 = 0x0a80_0205;
const SERVICE: u32 = 0xac1e_000a;
const EXT: u32 = 0x0101_0101;
const NODE: u32 = 0x0a00_000b;

/// The host's conntrack as a map: each connection under both tuples; and
/// the connections it was told had a reply.
#[derive(Default)]
struct FakeHost(HashMap<Tuple, (Tuple, Tuple)>, Arc<Mutex<Vec<Tuple>>>);

impl FakeHost {
    fn with(conns: &[(Tuple, Tuple)]) -> Box<Self> {
        Self::recording(conns, Arc::default())
    }

    fn recording(conns: &[(Tuple, Tuple)], replied: Arc<Mutex<Vec<Tuple>>>) -> Box<Self> {
        let mut h = FakeHost(HashMap::new(), replied);
        for &(o, r) in conns {
            h.0.insert(o, (o, r));
            h.0.insert(r, (o, r));
        }
        Box::new(h)
    }
}

impl HostConntrack for FakeHost {
    fn reply_seen(&self, host_orig: &Tuple) {
        self.1.lock().push(*host_orig);
    }

    fn lookup(&self, t: &Tuple) -> Option<(Tuple, Tuple)> {
        self.0.get(t).or_else(|| self.0.get(&t.reverse())).copied()
    }
}

fn t(src: u32, sport: u16, dst: u32, dport: u16) -> Tuple {
    Tuple::v4(0, IP_PROTO_TCP, src, dst, sport, dport)
}

const FROM_HOST: CtRequest = CtRequest {
    from_host: true,
    ..LOOKUP
};

fn addr_ports(f: &[u8]) -> (u32, u16, u32, u16) {
    let be32 = |at: usize| u32::from_be_bytes([f[at], f[at + 1], f[at + 2], f[at + 3]]);
    let be16 = |at: usize| u16::from_be_bytes([f[at], f[at + 1]]);
    (be32(26), be16(34), be32(30), be16(36))
}

#[test]
fn a_service_reply_leaves_with_the_service_address() {
    // The host DNATed POD -> SERVICE:80 to BACKEND:8080.
    let host_conn = (t(POD, 40000, SERVICE, 80), t(BACKEND, 8080, POD, 40000));
    let replied = Arc::<Mutex<Vec<Tuple>>>::default();
    let ct = Conntrack::default().with_host(FakeHost::recording(&[host_conn], replied.clone()));
    let syn = tcp_frame((POD, 40000), (BACKEND, 8080), 1, 0, F::SYN, 0);
    let (o, _) = run(&ct, syn, &FROM_HOST, 0);
    assert_eq!(o.state, state::TRK | state::NEW);
    assert_eq!((ct.len(), ct.stats.learned.load(Relaxed)), (1, 1));

    let synack = tcp_frame((BACKEND, 8080), (POD, 40000), 9, 2, F::SYN | F::ACK, 0);
    // ct(table=0): a reply, untranslated.
    let (o, f) = run(&ct, synack.clone(), &LOOKUP, 1);
    assert_eq!(o.state, state::TRK | state::EST | state::RPL);
    assert_eq!(addr_ports(&f), (BACKEND, 8080, POD, 40000));
    assert_eq!(
        *replied.lock(),
        [host_conn.0],
        "the host learns of the reply once"
    );
    // ct(nat,table=70): the Service's address and port, valid checksums.
    let (o, f) = run(&ct, synack, &BARE_NAT, 2);
    assert_eq!(o.state, state::TRK | state::EST | state::RPL | state::DNAT);
    assert_eq!(addr_ports(&f), (SERVICE, 80, POD, 40000));
    assert!(checksums_ok(&f));
    // The pod's next segment, from the host again, is found, not learned.
    let ack = tcp_frame((POD, 40000), (BACKEND, 8080), 2, 10, F::ACK, 0);
    let (o, f) = run(&ct, ack, &FROM_HOST, 3);
    assert_eq!(o.state, state::TRK | state::EST);
    assert_eq!(addr_ports(&f), (POD, 40000, BACKEND, 8080));
    assert_eq!(ct.stats.learned.load(Relaxed), 1);
    assert_eq!(replied.lock().len(), 1);
}

#[test]
fn masquerade_return_traffic_is_a_reply() {
    let host = FakeHost::with(&[(t(POD, 40000, EXT, 443), t(EXT, 443, NODE, 61000))]);
    let ct = Conntrack::default().with_host(host);
    let synack = tcp_frame((EXT, 443), (POD, 40000), 9, 2, F::SYN | F::ACK, 0);
    let (o, f) = run(&ct, synack, &FROM_HOST, 0);
    assert_eq!(o.state, state::TRK | state::EST | state::RPL);
    assert_eq!(addr_ports(&f), (EXT, 443, POD, 40000));
}

#[test]
fn nothing_is_learned_from_elsewhere_or_unknown_to_the_host() {
    let host = FakeHost::with(&[(t(POD, 40000, SERVICE, 80), t(BACKEND, 8080, POD, 40000))]);
    let ct = Conntrack::default().with_host(host);
    let synack = tcp_frame((BACKEND, 8080), (POD, 40000), 9, 2, F::SYN | F::ACK, 0);
    // From a pod's port: not asked; a SYN-ACK starting nothing is invalid.
    assert_eq!(
        run(&ct, synack, &LOOKUP, 0).0.state,
        state::TRK | state::INV
    );
    // From the host but unknown to it: an ordinary new connection.
    let syn = tcp_frame((NODE, 5000), (POD, 80), 1, 0, F::SYN, 0);
    assert_eq!(
        run(&ct, syn, &FROM_HOST, 1).0.state,
        state::TRK | state::NEW
    );
    assert_eq!(ct.stats.learned.load(Relaxed), 0);
}
