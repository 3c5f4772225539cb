//! MPLS label stack entries: push, pop, and rewrites of the top entry's
//! label, TC, BOS and TTL. A push or pop moves the rest of the frame by 4
//! bytes in place, as the VLAN push and pop do (the caller provides the
//! room), so nothing is allocated.

use crate::bytes::{be16, be32, write16};
use crate::parse::Layers;
use flowtable::key::{Field, FlowKey};
use flowtable::matching::is_mpls;

/// Size of a label stack entry.
const LSE_LEN: usize = 4;

/// Where the top label stack entry is: at `layers.l3`, behind an MPLS
/// ethertype.
fn top_at(frame: &[u8], layers: Layers) -> Option<usize> {
    let l3 = usize::from(layers.l3);
    let ethertype = be16(frame, l3.checked_sub(2)?)?;
    (is_mpls(ethertype) && frame.len() >= l3 + LSE_LEN).then_some(l3)
}

/// Inserts the entry `lse` in front of what follows the ethertype (the
/// label stack or the L3 header) of the `len`-byte frame at the start of
/// `frame`, which must have 4 bytes of room after it, and sets that
/// ethertype to `ethertype`. Returns the new layers: the entry is the L3
/// header now, and the headers behind it are out of reach for rewrites
/// as the parser would not find them. `None` (frame untouched) for a
/// frame cut before its ethertype or without room.
pub fn push_mpls(
    frame: &mut [u8],
    len: usize,
    ethertype: u16,
    lse: u32,
    layers: Layers,
) -> Option<Layers> {
    let l3 = usize::from(layers.l3);
    if l3 < 14 || len < l3 || frame.len() < len + LSE_LEN {
        return None;
    }
    frame.copy_within(l3..len, l3 + LSE_LEN);
    write16(frame, l3 - 2, ethertype)?;
    frame
        .get_mut(l3..l3 + LSE_LEN)?
        .copy_from_slice(&lse.to_be_bytes());
    Some(Layers {
        l3: layers.l3,
        l4: 0,
        proto: 0,
    })
}

/// Removes the top label stack entry of `frame` and sets the ethertype in
/// front of it to `ethertype`. The frame is 4 bytes shorter after it;
/// returns the layers of the shorter frame, found again by the parser
/// since the key knew nothing behind the label. `None` (frame untouched)
/// if the frame has no label stack entry.
pub fn pop_mpls(frame: &mut [u8], ethertype: u16, layers: Layers) -> Option<Layers> {
    let at = top_at(frame, layers)?;
    let len = frame.len();
    write16(frame, at - 2, ethertype)?;
    frame.copy_within(at + LSE_LEN..len, at);
    let mut scratch = FlowKey::zero();
    Some(crate::parse::extract(
        frame.get(..len - LSE_LEN)?,
        0,
        &mut scratch,
    ))
}

/// Rewrites a part of the top label stack entry; `None` if the frame has
/// none (as other rewrites skip a header the packet lacks).
pub(super) fn set_field(frame: &mut [u8], layers: Layers, field: Field, value: u64) -> Option<()> {
    let at = top_at(frame, layers)?;
    let lse = be32(frame, at)?;
    let v = value as u32;
    let new = match field {
        Field::MplsLabel => (lse & 0xfff) | (v & 0xf_ffff) << 12,
        Field::MplsTc => (lse & !(7 << 9)) | (v & 7) << 9,
        Field::MplsBos => (lse & !(1 << 8)) | (v & 1) << 8,
        Field::MplsTtl => (lse & !0xff) | (v & 0xff),
        _ => return None,
    };
    frame
        .get_mut(at..at + LSE_LEN)?
        .copy_from_slice(&new.to_be_bytes());
    Some(())
}

/// `copy_ttl_out` (`out`): the TTL of what follows the top entry (the
/// next entry, or the IPv4 TTL or IPv6 hop limit behind the bottom one)
/// into the top entry; `copy_ttl_in`: the other way, keeping an IPv4
/// header checksum right. `None` (frame untouched) for a frame without a
/// label stack entry or without such a header behind it.
pub fn copy_ttl(frame: &mut [u8], layers: Layers, out: bool) -> Option<()> {
    let at = top_at(frame, layers)?;
    let top = be32(frame, at)?;
    let inner = at + LSE_LEN;
    // Where the inner TTL byte is, and for IPv4 the header to fix.
    let (ttl_at, ipv4) = if top & 1 << 8 == 0 {
        be32(frame, inner)?;
        (inner + 3, false)
    } else {
        match frame.get(inner)? >> 4 {
            4 if frame.len() >= inner + 20 => (inner + 8, true),
            6 if frame.len() >= inner + 40 => (inner + 7, false),
            _ => return None,
        }
    };
    if out {
        let ttl = *frame.get(ttl_at)?;
        *frame.get_mut(at + 3)? = ttl;
        return Some(());
    }
    let ttl = (top & 0xff) as u16;
    if ipv4 {
        let word = be16(frame, ttl_at)?;
        let inner_layers = Layers {
            l3: u16::try_from(inner).ok()?,
            l4: 0,
            proto: 0,
        };
        return super::set_ipv4_word(frame, inner_layers, 8, (word & 0x00ff) | ttl << 8);
    }
    *frame.get_mut(ttl_at)? = ttl as u8;
    Some(())
}

#[cfg(test)]
mod tests;
