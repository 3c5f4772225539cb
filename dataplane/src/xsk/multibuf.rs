//! Packets larger than a frame (jumbo MTUs) on sockets bound with
//! `XDP_USE_SG`: the kernel hands them over in several RX descriptors, one
//! per frame, with `XDP_PKT_CONTD` on all but the last, and takes them the
//! same way on TX.
//!
//! The engine sees a packet as contiguous bytes, so a received one is
//! copied into a jumbo block of the UMEM (see `FramePool`), once, and
//! its frames go back to the pool; a packet in a block leaves as one TX
//! descriptor per frame it touches, without a copy. Jumbo frames thus
//! cost one copy more than others, on receive only; frames up to a
//! frame's room (3840 bytes) are untouched.

use super::pool::FramePool;
use super::{XdpDesc, XDP_PACKET_HEADROOM};

/// A packet arriving in several RX descriptors, being copied into a
/// jumbo block.
#[derive(Debug, Default)]
pub(super) struct Assembly {
    active: bool,
    /// `None` once the packet is being dropped (no block was free, or it
    /// outgrew one).
    block: Option<u64>,
    len: u32,
}

/// What one RX descriptor made of the packet being received.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Taken {
    /// A packet in one descriptor, as received.
    Packet(XdpDesc),
    /// The last piece came: the whole packet, in a jumbo block.
    Assembled(XdpDesc),
    /// The last piece came but the packet could not be kept.
    Dropped,
    /// More pieces to come.
    Pending,
}

impl Assembly {
    pub(super) fn is_active(&self) -> bool {
        self.active
    }

    /// The block of a packet still being received (to give back when the
    /// socket closes).
    pub(super) fn block(&self) -> Option<u64> {
        self.block
    }

    /// Takes one RX descriptor; its frame goes back to `pool` unless it
    /// is a whole packet.
    pub(super) fn take(&mut self, pool: &mut FramePool, d: XdpDesc) -> Taken {
        let more = d.options & libc::XDP_PKT_CONTD != 0;
        if !self.active {
            if !more {
                return Taken::Packet(d);
            }
            *self = Assembly {
                active: true,
                block: pool.alloc_jumbo(),
                len: 0,
            };
        }
        if let Some(block) = self.block {
            if pool.append(block, self.len, &d) {
                self.len += d.len;
            } else {
                pool.free(block);
                self.block = None;
            }
        }
        pool.free(d.addr);
        if more {
            return Taken::Pending;
        }
        self.active = false;
        match self.block.take() {
            Some(block) => Taken::Assembled(XdpDesc {
                addr: block + u64::from(XDP_PACKET_HEADROOM),
                len: self.len,
                options: 0,
            }),
            None => Taken::Dropped,
        }
    }
}

/// The TX descriptors of packet `d`: one per frame of `frame_size` bytes it
/// touches, `XDP_PKT_CONTD` on all but the last.
pub(super) fn pieces(d: &XdpDesc, frame_size: u32) -> impl Iterator<Item = XdpDesc> {
    let fs = u64::from(frame_size);
    let end = d.addr + u64::from(d.len);
    let mut at = d.addr;
    std::iter::from_fn(move || {
        if at >= end {
            return None;
        }
        let stop = ((at / fs + 1) * fs).min(end);
        let piece = XdpDesc {
            addr: at,
            len: (stop - at) as u32,
            options: if stop < end { libc::XDP_PKT_CONTD } else { 0 },
        };
        at = stop;
        Some(piece)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xsk::Umem;

    fn desc(addr: u64, len: u32, options: u32) -> XdpDesc {
        XdpDesc { addr, len, options }
    }

    #[test]
    fn pieces_end_at_frame_boundaries() {
        let contd = libc::XDP_PKT_CONTD;
        let p: Vec<_> = pieces(&desc(16384 + 206, 9000, 0), 4096).collect();
        assert_eq!(
            p,
            vec![
                desc(16384 + 206, 4096 - 206, contd),
                desc(16384 + 4096, 4096, contd),
                desc(16384 + 8192, 9000 - (4096 - 206) - 4096, 0),
            ]
        );
        let one: Vec<_> = pieces(&desc(256, 100, 0), 4096).collect();
        assert_eq!(one, vec![desc(256, 100, 0)]);
        // Ending exactly at a boundary adds no empty piece.
        assert_eq!(pieces(&desc(0, 8192, 0), 4096).count(), 2);
    }

    #[test]
    fn pieces_are_put_together_or_dropped_whole() {
        let umem = Umem::with_jumbo(8, 4096, 1, false).expect("mmap");
        let mut pool = FramePool::new(&umem).expect("pool");
        let mut asm = Assembly::default();
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
        let mut a = pool.write_packet(&data[..3840]).expect("frame");
        a.options = libc::XDP_PKT_CONTD;
        let b = pool.write_packet(&data[3840..]).expect("frame");
        let single = pool.write_packet(&[1, 2, 3]).expect("frame");
        assert_eq!(asm.take(&mut pool, single), Taken::Packet(single));
        assert_eq!(asm.take(&mut pool, a), Taken::Pending);
        assert!(asm.is_active());
        let Taken::Assembled(whole) = asm.take(&mut pool, b) else {
            panic!("not assembled");
        };
        assert_eq!(pool.packet(&whole), Some(&data[..]));
        assert_eq!(pool.len(), 7, "the pieces' frames are back");

        // No block free (the one is held by `whole`): the packet is
        // dropped, its frames still returned.
        let mut a = pool.write_packet(&data[..3840]).expect("frame");
        a.options = libc::XDP_PKT_CONTD;
        let b = pool.write_packet(&data[3840..]).expect("frame");
        assert_eq!(asm.take(&mut pool, a), Taken::Pending);
        assert_eq!(asm.take(&mut pool, b), Taken::Dropped);
        assert_eq!(pool.len(), 7);
        assert!(!asm.is_active());
    }
}
