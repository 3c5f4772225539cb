use super::*;
use crate::parse::extract;
use crate::testframes::udp_frame;

fn lse(label: u32, tc: u32, bos: u32, ttl: u32) -> u32 {
    label << 12 | tc << 9 | bos << 8 | ttl
}

fn top(f: &[u8]) -> [u64; 4] {
    let mut k = FlowKey::zero();
    extract(f, 1, &mut k);
    [
        Field::MplsLabel,
        Field::MplsTc,
        Field::MplsBos,
        Field::MplsTtl,
    ]
    .map(|x| k.get(x))
}

/// Pushes `entry` onto the first `len` bytes of `f` (grown by 4 for room).
fn push(f: &mut Vec<u8>, len: usize, entry: u32, layers: Layers) -> Layers {
    f.truncate(len);
    f.extend_from_slice(&[0; 4]);
    push_mpls(f, len, 0x8847, entry, layers).expect("pushed")
}

/// Two pushes and two pops: the stack grows in front of the IPv4 header,
/// the parser reads the newest entry, and the pops give back the frame
/// byte for byte with layers the IPv4 rewrites work through again.
#[test]
fn push_push_pop_pop_restores_the_frame() {
    let original = udp_frame();
    let mut k = FlowKey::zero();
    let l = extract(&original, 1, &mut k);
    let mut f = original.clone();
    let l1 = push(&mut f, original.len(), lse(0, 0, 1, 64), l);
    assert_eq!(be16(&f, 12), Some(0x8847));
    assert_eq!(f[18..], original[14..]);
    assert_eq!((l1.l3, l1.l4), (14, 0));
    assert_eq!(top(&f), [0, 0, 1, 64]);
    let l2 = push(&mut f, original.len() + 4, lse(7, 3, 0, 64), l1);
    assert_eq!(top(&f), [7, 3, 0, 64]);
    assert_eq!(
        be32(&f, 18),
        Some(lse(0, 0, 1, 64)),
        "the first entry moved"
    );
    assert_eq!(f[22..], original[14..]);

    let p1 = pop_mpls(&mut f, 0x8847, l2).unwrap();
    f.truncate(original.len() + 4);
    assert_eq!(top(&f), [0, 0, 1, 64]);
    assert_eq!(p1, l1);
    let p2 = pop_mpls(&mut f, 0x0800, p1).unwrap();
    f.truncate(original.len());
    assert_eq!(f, original);
    assert_eq!(p2, l);
    assert!(crate::rewrite::set_field(&mut f, p2, Field::TpDst, 80));
    assert_eq!(be16(&f, 36), Some(80));
}

/// Behind a VLAN tag the entry goes after the tag, whose TCI stays.
#[test]
fn push_behind_a_vlan_tag() {
    let ip = udp_frame();
    let mut tagged = ip[..12].to_vec();
    tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x0a]);
    tagged.extend_from_slice(&ip[12..]);
    let mut k = FlowKey::zero();
    let l = extract(&tagged, 1, &mut k);
    let mut f = tagged.clone();
    let pushed = push(&mut f, tagged.len(), lse(5, 0, 1, 9), l);
    assert_eq!(pushed.l3, 18);
    assert_eq!(f[12..18], [0x81, 0x00, 0x00, 0x0a, 0x88, 0x47]);
    assert_eq!(top(&f), [5, 0, 1, 9]);
    let popped = pop_mpls(&mut f, 0x0800, pushed).unwrap();
    f.truncate(tagged.len());
    assert_eq!(f, tagged);
    assert_eq!(popped, l);
}

#[test]
fn top_entry_rewrites_touch_their_bits_only() {
    let mut f = udp_frame();
    let mut k = FlowKey::zero();
    let l = extract(&f.clone(), 1, &mut k);
    let len = f.len();
    let l = push(&mut f, len, lse(100, 3, 1, 64), l);
    let before = f.clone();
    assert_eq!(set_field(&mut f, l, Field::MplsLabel, 0xf_ffff), Some(()));
    assert_eq!(top(&f), [0xf_ffff, 3, 1, 64]);
    assert_eq!(set_field(&mut f, l, Field::MplsTc, 5), Some(()));
    assert_eq!(set_field(&mut f, l, Field::MplsBos, 0), Some(()));
    assert_eq!(set_field(&mut f, l, Field::MplsTtl, 1), Some(()));
    assert_eq!(top(&f), [0xf_ffff, 5, 0, 1]);
    assert_eq!(f[..14], before[..14]);
    assert_eq!(f[18..], before[18..]);
    // Through the dispatcher too.
    assert!(crate::rewrite::set_field(&mut f, l, Field::MplsTtl, 63));
    assert_eq!(top(&f)[3], 63);
}

/// copy_ttl_out/in between the bottom entry and IPv4 (whose header
/// checksum stays right), IPv6, and two entries.
#[test]
fn ttl_copies_between_the_top_entry_and_what_follows() {
    let ip = udp_frame();
    let mut k = FlowKey::zero();
    let l = extract(&ip, 1, &mut k);
    let mut f = ip.clone();
    let l = push(&mut f, ip.len(), lse(16, 0, 1, 9), l);
    assert_eq!(copy_ttl(&mut f, l, true), Some(()));
    assert_eq!(top(&f), [16, 0, 1, 64], "the IPv4 TTL, 64, went out");
    set_field(&mut f, l, Field::MplsTtl, 7).unwrap();
    assert_eq!(copy_ttl(&mut f, l, false), Some(()));
    assert_eq!(f[18 + 8], 7);
    let ipv4 = &f[18..38];
    assert_eq!(
        crate::rewrite::ipv4_header_checksum(ipv4),
        be16(ipv4, 10).unwrap(),
        "the header checksum follows the TTL"
    );
    // Two entries: between them.
    let len = f.len();
    let l2 = push(&mut f, len, lse(5, 0, 0, 30), l);
    assert_eq!(copy_ttl(&mut f, l2, false), Some(()));
    assert_eq!(be32(&f, 18), Some(lse(16, 0, 1, 30)));
    set_field(&mut f, l2, Field::MplsTtl, 99).unwrap();
    assert_eq!(copy_ttl(&mut f, l2, true), Some(()));
    assert_eq!(top(&f), [5, 0, 0, 30]);
    // IPv6: the hop limit (byte 7).
    let mut v6 = ip[..12].to_vec();
    v6.extend_from_slice(&[0x88, 0x47]);
    v6.extend_from_slice(&lse(1, 0, 1, 200).to_be_bytes());
    let mut h = [0u8; 40];
    h[0] = 0x60;
    h[7] = 33;
    v6.extend_from_slice(&h);
    let l6 = extract(&v6.clone(), 1, &mut k);
    assert_eq!(copy_ttl(&mut v6, l6, false), Some(()));
    assert_eq!(v6[18 + 7], 200);
    v6[18 + 7] = 12;
    assert_eq!(copy_ttl(&mut v6, l6, true), Some(()));
    assert_eq!(top(&v6)[3], 12);
    // Neither IP nor a label behind the bottom entry: nothing.
    v6[18] = 0x10;
    let before = v6.clone();
    assert_eq!(copy_ttl(&mut v6, l6, true), None);
    assert_eq!(v6, before);
    // No label at all: nothing.
    let mut plain = ip.clone();
    let lp = extract(&ip, 1, &mut k);
    assert_eq!(copy_ttl(&mut plain, lp, true), None);
    assert_eq!(plain, ip);
}

/// Without a label stack nothing is popped or rewritten; a runt or a
/// frame without room gets no push.
#[test]
fn frames_without_an_entry_are_left_alone() {
    let original = udp_frame();
    let mut k = FlowKey::zero();
    let l = extract(&original, 1, &mut k);
    let mut f = original.clone();
    assert_eq!(pop_mpls(&mut f, 0x0800, l), None);
    assert_eq!(set_field(&mut f, l, Field::MplsLabel, 1), None);
    assert!(!crate::rewrite::set_field(&mut f, l, Field::MplsTtl, 1));
    assert_eq!(f, original);
    assert_eq!(push_mpls(&mut f, original.len(), 0x8847, 1, l), None);
    assert_eq!(f, original);
    let mut runt = original[..10].to_vec();
    runt.extend_from_slice(&[0; 4]);
    let lr = extract(&runt[..10], 1, &mut k);
    assert_eq!(push_mpls(&mut runt, 10, 0x8847, 1, lr), None);
    // An MPLS ethertype with the entry cut off: nothing to pop.
    let mut cut = original[..16].to_vec();
    cut[12..14].copy_from_slice(&[0x88, 0x47]);
    let lc = extract(&cut, 1, &mut k);
    assert_eq!(pop_mpls(&mut cut, 0x0800, lc), None);
    assert_eq!(set_field(&mut cut, lc, Field::MplsTtl, 1), None);
}
