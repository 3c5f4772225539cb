use super::*;
use crate::parse::extract;
use crate::testframes::udp_frame;
use flowtable::key::Field;

/// Two pushes and two pops give back the frame; the parser reads the
/// outer I-SID, the layers of the popped frame reach its IPv4 header.
#[test]
fn push_push_pop_pop_restores_the_frame() {
    let original = udp_frame();
    let mut f = original.clone();
    f.resize(original.len() + 2 * PBB_HEADER_LEN, 0);
    let l1 = push_pbb(&mut f, original.len(), 100).unwrap();
    assert_eq!((l1.l3, l1.l4), (14, 0));
    assert_eq!(
        f[..12],
        original[..12],
        "the outer header has its addresses"
    );
    assert_eq!(f[12..18], [0x88, 0xe7, 0, 0, 0, 100]);
    assert_eq!(f[18..18 + original.len()], original[..]);
    let l2 = push_pbb(&mut f, original.len() + PBB_HEADER_LEN, 0x12_3456).unwrap();
    let mut k = FlowKey::zero();
    extract(&f, 1, &mut k);
    assert_eq!(
        (k.get(Field::EthType), k.get(Field::PbbIsid)),
        (0x88e7, 0x12_3456)
    );
    assert_eq!(set_isid(&mut f, l2, 7), Some(()));
    extract(&f, 1, &mut k);
    assert_eq!(k.get(Field::PbbIsid), 7);

    let (removed, p1) = pop_pbb(&mut f, l2).unwrap();
    assert_eq!(removed, PBB_HEADER_LEN);
    f.truncate(f.len() - removed);
    assert_eq!(p1, l1);
    let (removed, p2) = pop_pbb(&mut f, p1).unwrap();
    f.truncate(f.len() - removed);
    assert_eq!(f, original);
    let mut k0 = FlowKey::zero();
    assert_eq!(p2, extract(&original, 1, &mut k0));
}

#[test]
fn frames_without_a_tag_are_left_alone() {
    let original = udp_frame();
    let mut k = FlowKey::zero();
    let l = extract(&original, 1, &mut k);
    let mut f = original.clone();
    assert_eq!(pop_pbb(&mut f, l), None);
    assert_eq!(set_isid(&mut f, l, 1), None);
    assert_eq!(push_pbb(&mut f, original.len(), 1), None, "no room");
    assert_eq!(f, original);
    // A tag with no customer Ethernet header behind it.
    let mut cut = original[..22].to_vec();
    cut[12..14].copy_from_slice(&[0x88, 0xe7]);
    let lc = extract(&cut, 1, &mut k);
    assert_eq!(pop_pbb(&mut cut, lc), None);
}
