//! PBB (802.1ah) service instance tags: push, pop and the I-SID rewrite.
//! A push puts the frame behind a new Ethernet header and I-TAG, 18 bytes
//! it moves the frame by in place (the caller provides the room); a pop
//! moves the customer frame behind the tag to the front. No allocation.

use crate::bytes::{be16, be32, write16};
use crate::parse::Layers;
use flowtable::key::FlowKey;
use flowtable::matching::ETH_TYPE_PBB;

/// What a push adds: the outer addresses, the ethertype and the I-TAG.
pub const PBB_HEADER_LEN: usize = 18;

/// Where the I-TAG is: at `layers.l3`, behind ethertype 0x88e7.
fn itag_at(frame: &[u8], layers: Layers) -> Option<usize> {
    let l3 = usize::from(layers.l3);
    let ethertype = be16(frame, l3.checked_sub(2)?)?;
    (ethertype == ETH_TYPE_PBB && frame.len() >= l3 + 4).then_some(l3)
}

/// Puts the `len`-byte frame at the start of `frame` (which has 18 bytes
/// of room after it) behind a new Ethernet header with the frame's
/// addresses and an I-TAG with `isid` (priority, DEI and UCA 0). Returns
/// the new layers: the I-TAG is the L3 header. `None` (frame untouched)
/// for a runt or no room.
pub fn push_pbb(frame: &mut [u8], len: usize, isid: u32) -> Option<Layers> {
    if len < 14 || frame.len() < len + PBB_HEADER_LEN {
        return None;
    }
    frame.copy_within(0..len, PBB_HEADER_LEN);
    frame.copy_within(PBB_HEADER_LEN..PBB_HEADER_LEN + 12, 0);
    write16(frame, 12, ETH_TYPE_PBB)?;
    frame
        .get_mut(14..18)?
        .copy_from_slice(&(isid & 0x00ff_ffff).to_be_bytes());
    Some(Layers {
        l3: 14,
        l4: 0,
        proto: 0,
    })
}

/// Removes everything up to the end of the I-TAG of `frame`, the customer
/// frame behind it moving to the front. Returns the bytes removed and the
/// layers of the customer frame (parsed now, as the key never held it);
/// `None` (frame untouched) without an I-TAG and a customer Ethernet
/// header behind it.
pub fn pop_pbb(frame: &mut [u8], layers: Layers) -> Option<(usize, Layers)> {
    let at = itag_at(frame, layers)?;
    let inner = at + 4;
    let len = frame.len();
    if len < inner + 14 {
        return None;
    }
    frame.copy_within(inner..len, 0);
    let mut scratch = FlowKey::zero();
    let layers = crate::parse::extract(frame.get(..len - inner)?, 0, &mut scratch);
    Some((inner, layers))
}

/// Rewrites the I-SID, keeping the tag's other bits.
pub(super) fn set_isid(frame: &mut [u8], layers: Layers, isid: u32) -> Option<()> {
    let at = itag_at(frame, layers)?;
    let itag = be32(frame, at)?;
    let new = (itag & 0xff00_0000) | (isid & 0x00ff_ffff);
    frame
        .get_mut(at..at + 4)?
        .copy_from_slice(&new.to_be_bytes());
    Some(())
}

#[cfg(test)]
mod tests;
