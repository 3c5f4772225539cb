//! AF_XDP sockets: UMEM, rings, and the frame pool. All the crate's
//! `unsafe` outside the BPF loader lives in this module.
//!
//! # Design
//!
//! **Memory.** A [`Umem`] is one anonymous mapping cut into fixed-size frames
//! (aligned chunk mode). Frames are 4096 bytes by default: the kernel puts
//! every received packet `XDP_PACKET_HEADROOM` (256) bytes into its frame,
//! the headroom veth's XDP path insists on, so a 2048-byte frame leaves
//! 1792 bytes of packet room while 4096 leaves 3840. 1792 is enough for a
//! 1500-byte MTU with VLAN tags, but not for the larger pod MTUs some
//! clusters run with (and header pushes such as tunnel encapsulation eat
//! into it). Copy mode (the only mode veth supports) copies only the packet
//! length, so the bigger frame costs memory (16 MiB per 4096 frames), not
//! time. 2048 is accepted for callers that want the smaller footprint.
//!
//! **Jumbo frames.** A frame cannot be larger than a page in aligned mode
//! (and kernels refuse bigger chunks), so packets longer than a frame's
//! room (MTUs above about 3800) travel in several descriptors: sockets
//! bind with `XDP_USE_SG` (kernel >= 6.6; older ones refuse it and such
//! packets are dropped) and the XDP programs are `xdp.frags` ones. The
//! UMEM ends with a few jumbo blocks of 16 KiB, contiguous, that never go
//! to a fill ring: a packet received in pieces is copied into one
//! (`multibuf.rs`), so the engine still sees one contiguous packet, and a
//! packet in a block is sent as one descriptor per frame it touches.
//!
//! **Sharing.** One UMEM can back sockets on different netdevs and queues
//! (`XDP_SHARED_UMEM`, kernel >= 5.10): each socket still gets its own fill
//! and completion rings, so a packet received on port A can be transmitted
//! on port B by passing its descriptor, with no copy in userspace. The first
//! socket registers the UMEM; later ones name any live bound socket of the
//! same UMEM and inherit its bind mode.
//!
//! **Frame ownership.** Every frame is, at any moment, owned by exactly one
//! of: the [`FramePool`] (free), the kernel (posted to a fill ring or a TX
//! ring and not yet returned through RX or completion), or the engine (a
//! descriptor returned by `rx_burst` or built from the pool). The engine
//! gives a frame back by transmitting it (`tx_burst`, then `complete`
//! returns it to the pool) or by `FramePool::free`. Frames are never
//! allocated per packet; the pool is a preallocated stack.
//!
//! **Threads.** A socket and the pool of its UMEM are owned by one thread
//! (`Send`, not `Sync`): ring cursors are plain fields, and the only
//! synchronisation is acquire/release on the ring words shared with the
//! kernel, once per batch. The `Umem` is `Sync` (it is shared by `Arc`) but
//! exposes no packet bytes; only binding takes a mutex.
//!
//! **Costs.** rx/tx/fill/complete are O(batch) with at most one atomic load
//! and one atomic store per call. In copy mode every TX batch needs a
//! `sendto()` kick (the kernel's TX path runs inside it, up to the TX skb
//! budget per call); RX needs no syscall unless the fill ring asks for a
//! wakeup.

mod multibuf;
mod pool;
mod ring;
mod socket;
mod sys;
mod umem;

pub use pool::FramePool;
pub use socket::{XskConfig, XskSocket};
pub use sys::{kick_fd, probe_socket};
pub use umem::{Umem, DEFAULT_FRAME_SIZE, JUMBO_BLOCK};

use std::io;

/// Headroom the kernel reserves in front of every received packet.
pub const XDP_PACKET_HEADROOM: u32 = 256;

/// `XDP_MAX_TX_SKB_BUDGET` socket option (Linux 6.17+, include/uapi/linux/if_xdp.h):
/// how many TX descriptors one `sendto()` turns into skbs in copy mode.
pub const XDP_MAX_TX_SKB_BUDGET: libc::c_int = 9;

/// One packet descriptor, laid out as the kernel's `struct xdp_desc`.
/// `addr` is a UMEM offset (frame base + offset of the first byte).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpDesc {
    pub addr: u64,
    pub len: u32,
    pub options: u32,
}

/// Userspace counters of one socket (the kernel's are in [`XdpStatistics`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XskCounters {
    pub rx_packets: u64,
    pub tx_queued: u64,
    pub tx_completed: u64,
    /// `sendto()` calls made to start transmission.
    pub tx_kicks: u64,
    /// Kicks that returned EAGAIN/EBUSY/ENOBUFS: the descriptors stay in the
    /// TX ring and go out with a later kick.
    pub tx_kick_retries: u64,
    /// `recvfrom()` calls made because the fill ring asked for a wakeup.
    pub rx_wakeups: u64,
    pub fill_posted: u64,
    /// Packets received in several descriptors (larger than a frame) and
    /// put together in a jumbo block.
    pub rx_multi_buffer: u64,
    /// Such packets dropped: no jumbo block free, or larger than one.
    pub rx_multi_buffer_dropped: u64,
}

/// How a socket moves packets between the driver and the UMEM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XskMode {
    /// The kernel copies packets (works on every driver, the only mode on veth).
    Copy,
    /// The driver DMAs into the UMEM directly (needs driver support).
    ZeroCopy,
}

/// Kernel drop counters of one socket (`XDP_STATISTICS`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpStatistics {
    pub rx_dropped: u64,
    pub rx_invalid_descs: u64,
    pub tx_invalid_descs: u64,
    pub rx_ring_full: u64,
    pub rx_fill_ring_empty_descs: u64,
    pub tx_ring_empty_descs: u64,
}

/// Errors of the AF_XDP layer.
#[derive(Debug, thiserror::Error)]
pub enum XskError {
    #[error("{op}: {source}")]
    Io {
        op: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("invalid AF_XDP configuration: {0}")]
    Config(String),
    #[error(
        "UMEM is bound in {existing:?} mode, cannot bind another socket in {requested:?} mode"
    )]
    ModeMismatch {
        existing: XskMode,
        requested: XskMode,
    },
}

impl XskError {
    pub(crate) fn io(op: &'static str, source: io::Error) -> Self {
        XskError::Io { op, source }
    }
}
