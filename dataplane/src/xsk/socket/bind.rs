//! Creating an AF_XDP socket: the socket, its rings' sizes and mappings,
//! the UMEM's registration or sharing, and the bind with its fallbacks
//! (no multi-buffer, copy mode). The data path is in the parent module.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Weak};

use super::super::multibuf::Assembly;
use super::super::ring::{ConsRing, ProdRing};
use super::super::sys::{bind_xsk, map_ring, mmap_offsets, ring_ptrs, set_tx_budget, set_u32};
use super::super::umem::{FillGrant, Umem};
use super::super::{XdpDesc, XskCounters, XskError, XskMode};
use super::{XskConfig, XskSocket};

impl XskSocket {
    /// Creates a socket and binds it to `queue` of `ifindex`, using `umem`
    /// (registering it, or sharing it with a socket already bound).
    ///
    /// The fill ring starts empty: call [`refill`](Self::refill) before
    /// expecting packets, and insert [`fd`](Self::fd) in the XSKMAP.
    pub fn bind(
        ifindex: u32,
        queue: u32,
        umem: &Arc<Umem>,
        cfg: &XskConfig,
    ) -> Result<XskSocket, XskError> {
        for (what, n) in [
            ("rx", cfg.rx_size),
            ("tx", cfg.tx_size),
            ("fill", cfg.fill_size),
            ("comp", cfg.comp_size),
        ] {
            if !n.is_power_of_two() || n > 1 << 20 {
                return Err(XskError::Config(format!(
                    "{what} ring size {n} is not a power of two <= 2^20"
                )));
            }
        }
        // SAFETY: plain socket(2) call; the result is checked before use.
        let raw = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(XskError::io("socket(AF_XDP)", io::Error::last_os_error()));
        }
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        let fd = Arc::new(unsafe { OwnedFd::from_raw_fd(raw) });

        // The registration lock is held across bind so that two sockets binding
        // at once agree on who registers and on the mode.
        let mut reg = umem.registration.lock();
        reg.bound.retain(|w| w.strong_count() > 0);
        let share_with = reg.bound.iter().find_map(Weak::upgrade);
        let (mut flags, shared_fd, need_wakeup) = match (&share_with, reg.mode) {
            (Some(owner), Some((mode, wake))) => {
                if mode != cfg.mode {
                    return Err(XskError::ModeMismatch {
                        existing: mode,
                        requested: cfg.mode,
                    });
                }
                (libc::XDP_SHARED_UMEM, owner.as_raw_fd() as u32, wake)
            }
            _ => {
                umem.register(&fd)?;
                let mut flags = match cfg.mode {
                    XskMode::Copy => libc::XDP_COPY,
                    XskMode::ZeroCopy => libc::XDP_ZEROCOPY,
                };
                if cfg.need_wakeup {
                    flags |= libc::XDP_USE_NEED_WAKEUP;
                }
                // Packets larger than a frame (jumbo MTUs) arrive and leave
                // in several descriptors; kernels before 6.6 refuse the flag
                // (EINVAL), as do zero-copy drivers without multi-buffer
                // support (EOPNOTSUPP): then it is left out (below) and such
                // packets are dropped.
                flags |= libc::XDP_USE_SG;
                (flags, 0, cfg.need_wakeup)
            }
        };

        set_u32(
            &fd,
            libc::XDP_UMEM_FILL_RING,
            cfg.fill_size,
            "setsockopt(XDP_UMEM_FILL_RING)",
        )?;
        set_u32(
            &fd,
            libc::XDP_UMEM_COMPLETION_RING,
            cfg.comp_size,
            "setsockopt(XDP_UMEM_COMPLETION_RING)",
        )?;
        set_u32(
            &fd,
            libc::XDP_RX_RING,
            cfg.rx_size,
            "setsockopt(XDP_RX_RING)",
        )?;
        set_u32(
            &fd,
            libc::XDP_TX_RING,
            cfg.tx_size,
            "setsockopt(XDP_TX_RING)",
        )?;
        let tx_skb_budget = set_tx_budget(&fd, cfg.tx_skb_budget.clamp(32, cfg.tx_size.max(32)))?;

        let off = mmap_offsets(&fd)?;
        let desc_sz = size_of::<XdpDesc>();
        let rx_map = map_ring(
            &fd,
            libc::XDP_PGOFF_RX_RING as u64,
            &off.rx,
            cfg.rx_size,
            desc_sz,
        )?;
        let tx_map = map_ring(
            &fd,
            libc::XDP_PGOFF_TX_RING as u64,
            &off.tx,
            cfg.tx_size,
            desc_sz,
        )?;
        let fill_map = map_ring(
            &fd,
            libc::XDP_UMEM_PGOFF_FILL_RING,
            &off.fr,
            cfg.fill_size,
            8,
        )?;
        let comp_map = map_ring(
            &fd,
            libc::XDP_UMEM_PGOFF_COMPLETION_RING,
            &off.cr,
            cfg.comp_size,
            8,
        )?;
        // SAFETY: each mapping covers the offsets the kernel reported plus
        // `size` entries (checked in `map_ring`), lives in `_maps` as long as
        // the cursors, and this socket is the only userspace side.
        let (rx, tx, fill, comp) = unsafe {
            (
                ConsRing::new(ring_ptrs(&rx_map, &off.rx), cfg.rx_size),
                ProdRing::new(ring_ptrs(&tx_map, &off.tx), cfg.tx_size),
                ProdRing::new(ring_ptrs(&fill_map, &off.fr), cfg.fill_size),
                ConsRing::new(ring_ptrs(&comp_map, &off.cr), cfg.comp_size),
            )
        };

        let mut bound = bind_xsk(&fd, flags, ifindex, queue, shared_fd);
        if flags & libc::XDP_USE_SG != 0
            && bound
                .as_ref()
                .is_err_and(|e| matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EOPNOTSUPP)))
        {
            flags &= !libc::XDP_USE_SG;
            bound = bind_xsk(&fd, flags, ifindex, queue, shared_fd);
        }
        bound.map_err(|e| XskError::io("bind(AF_XDP)", e))?;
        drop(share_with);
        reg.bound.push(Arc::downgrade(&fd));
        if reg.mode.is_none() {
            reg.mode = Some((cfg.mode, need_wakeup));
            reg.multi_buffer = flags & libc::XDP_USE_SG != 0;
        }
        let multi_buffer = reg.multi_buffer;
        drop(reg);

        Ok(XskSocket {
            rx,
            tx,
            fill,
            comp,
            _maps: [rx_map, tx_map, fill_map, comp_map],
            fd,
            umem: Arc::clone(umem),
            ifindex,
            queue,
            need_wakeup,
            always_kick: cfg.mode == XskMode::Copy || !need_wakeup,
            tx_skb_budget,
            counters: XskCounters::default(),
            rx_size: cfg.rx_size,
            fill_size: cfg.fill_size,
            grant: FillGrant::new(umem, cfg.fill_grant, cfg.fill_size),
            multi_buffer,
            assembly: Assembly::default(),
        })
    }
}
