//! Fragmented datagrams through conntrack: tracked once by the first
//! fragment, later fragments sharing its outcome, NAT and L4 words.

use super::tests::{checksums_ok, fold, snat, sum16, udp_frame, A, B, COMMIT};
use super::*;
use xbr_packet::parse;

const EXT: u32 = 0x0101_0101;

fn ip_header_ok(f: &[u8]) -> bool {
    fold(sum16(&f[14..34])) == 0xffff
}

/// Sets the IP identification, more-fragments bit and fragment offset (in
/// 8-byte units) of `f`, keeping its header checksum right.
fn fragment(mut f: Vec<u8>, id: u16, more: bool, offset: u16) -> Vec<u8> {
    f[18..20].copy_from_slice(&id.to_be_bytes());
    let word = offset | if more { 0x2000 } else { 0 };
    f[20..22].copy_from_slice(&word.to_be_bytes());
    f[24..26].copy_from_slice(&[0, 0]);
    let c = !fold(sum16(&f[14..34]));
    f[24..26].copy_from_slice(&c.to_be_bytes());
    f
}

/// The first fragment (a UDP header and 4 bytes) and the last one of a
/// UDP datagram from `src`:`sport` to `dst`:`dport` with IP id `id`.
fn udp_datagram(src: u32, sport: u16, dst: u32, dport: u16, id: u16) -> [Vec<u8>; 2] {
    let first = fragment(udp_frame(src, sport, dst, dport), id, true, 0);
    // The last fragment: 8 more payload bytes at offset 16 (2 units).
    let mut last = udp_frame(src, sport, dst, dport);
    last.truncate(34);
    last.extend_from_slice(b"fragment");
    last[16..18].copy_from_slice(&28u16.to_be_bytes());
    [first, fragment(last, id, false, 2)]
}

fn run(
    ct: &Conntrack,
    frame: &mut [u8],
    req: &CtRequest,
    now: u64,
) -> (CtOutcome, Option<(u16, u16)>) {
    let mut key = FlowKey::zero();
    let layers = parse::extract(frame, 1, &mut key);
    ct.execute_datagram(frame, layers, &key, req, now)
}

#[test]
fn later_fragments_share_the_first_fragments_outcome_and_ports() {
    let ct = Conntrack::default();
    let [mut first, mut last] = udp_datagram(A, 1000, B, 53, 7);
    let (o1, l4) = run(&ct, &mut first, &COMMIT, 0);
    assert_eq!(o1.state, state::TRK | state::NEW);
    assert_eq!(l4, Some((1000, 53)));
    assert_eq!(ct.len(), 1, "the datagram's connection is committed");
    let (o2, l4) = run(&ct, &mut last, &COMMIT, 1);
    assert_eq!((o2, l4), (o1, Some((1000, 53))));
    assert_eq!(ct.len(), 1);

    // The reply datagram is +est+rpl in both fragments.
    let [mut r1, mut r2] = udp_datagram(B, 53, A, 1000, 9);
    let est_rpl = state::TRK | state::EST | state::RPL;
    assert_eq!(run(&ct, &mut r1, &COMMIT, 2).0.state, est_rpl);
    assert_eq!(run(&ct, &mut r2, &COMMIT, 3).0.state, est_rpl);
    assert_eq!(ct.stats.fragments.load(Relaxed), 2);
}

#[test]
fn a_later_fragment_without_its_first_is_invalid() {
    let ct = Conntrack::default();
    let [_, mut last] = udp_datagram(A, 1000, B, 53, 7);
    let (o, l4) = run(&ct, &mut last, &COMMIT, 0);
    assert_eq!((o.state, l4), (state::TRK | state::INV, None));
    assert_eq!(ct.stats.orphan_fragments.load(Relaxed), 1);
    // Another datagram of the same flow does not lend its record.
    let [mut first, _] = udp_datagram(A, 1000, B, 53, 8);
    run(&ct, &mut first, &COMMIT, 1);
    assert_eq!(
        run(&ct, &mut last, &COMMIT, 2).0.state,
        state::TRK | state::INV
    );
    // Nor does a datagram whose record has expired.
    let [mut first, mut last] = udp_datagram(A, 1000, B, 53, 9);
    run(&ct, &mut first, &COMMIT, 3);
    let late = 3 + frag::FRAG_TIMEOUT_MS;
    assert_eq!(
        run(&ct, &mut last, &COMMIT, late).0.state,
        state::TRK | state::INV
    );
}

#[test]
fn snat_rewrites_every_fragment_with_valid_headers() {
    let ct = Conntrack::default();
    let [mut first, mut last] = udp_datagram(A, 1000, EXT, 53, 7);
    let req = snat(B);
    let (o, _) = run(&ct, &mut first, &req, 0);
    assert_ne!(o.state & state::SNAT, 0);
    assert_eq!(first[26..30], B.to_be_bytes(), "first fragment's source");
    // The UDP checksum in the first fragment covers the whole datagram; an
    // incremental update keeps it right for the whole, which this one-
    // fragment view cannot check; the IP header it can.
    assert!(ip_header_ok(&first));
    let (o2, _) = run(&ct, &mut last, &req, 1);
    assert_eq!(o2, o);
    assert_eq!(last[26..30], B.to_be_bytes(), "later fragment's source");
    assert!(ip_header_ok(&last));
    // A ct() without nat on a later fragment changes no address.
    let [mut first, mut last] = udp_datagram(A, 1001, EXT, 53, 8);
    run(&ct, &mut first, &COMMIT, 2);
    run(&ct, &mut last, &COMMIT, 3);
    assert_eq!(last[26..30], A.to_be_bytes());
}

#[test]
fn unfragmented_packets_are_unchanged_by_fragment_tracking() {
    let ct = Conntrack::default();
    let mut whole = udp_frame(A, 1000, B, 53);
    let (o, l4) = run(&ct, &mut whole, &COMMIT, 0);
    assert_eq!((o.state, l4), (state::TRK | state::NEW, None));
    assert!(checksums_ok(&whole));
}
