//! Socket-option and mmap helpers for `XskSocket` (setup path only).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::AtomicU32;

use super::ring::RingPtrs;
use super::{XskError, XDP_MAX_TX_SKB_BUDGET};

/// A ring mmapped from the socket.
pub(super) struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: exactly the region returned by mmap in `map_ring`; the ring
        // cursors that point into it are dropped before (field order).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

pub(super) fn set_u32(
    fd: &OwnedFd,
    opt: libc::c_int,
    value: u32,
    op: &'static str,
) -> Result<(), XskError> {
    // SAFETY: `value` is a valid u32 for the option's length.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            opt,
            (&value as *const u32).cast(),
            size_of::<u32>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(XskError::io(op, io::Error::last_os_error()));
    }
    Ok(())
}

/// Sets `XDP_MAX_TX_SKB_BUDGET`; `Ok(None)` on kernels without it.
pub(super) fn set_tx_budget(fd: &OwnedFd, budget: u32) -> Result<Option<u32>, XskError> {
    match set_u32(
        fd,
        XDP_MAX_TX_SKB_BUDGET,
        budget,
        "setsockopt(XDP_MAX_TX_SKB_BUDGET)",
    ) {
        Ok(()) => Ok(Some(budget)),
        Err(XskError::Io { source, .. }) if source.raw_os_error() == Some(libc::ENOPROTOOPT) => {
            tracing::debug!(
                "kernel has no XDP_MAX_TX_SKB_BUDGET; sendto() handles 32 descriptors per call"
            );
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

pub(super) fn mmap_offsets(fd: &OwnedFd) -> Result<libc::xdp_mmap_offsets, XskError> {
    let zero = libc::xdp_ring_offset {
        producer: 0,
        consumer: 0,
        desc: 0,
        flags: 0,
    };
    let mut off = libc::xdp_mmap_offsets {
        rx: zero,
        tx: zero,
        fr: zero,
        cr: zero,
    };
    let mut len = size_of::<libc::xdp_mmap_offsets>() as libc::socklen_t;
    // SAFETY: `off`/`len` are valid for writes of the option's size.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            libc::XDP_MMAP_OFFSETS,
            (&mut off as *mut libc::xdp_mmap_offsets).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(XskError::io(
            "getsockopt(XDP_MMAP_OFFSETS)",
            io::Error::last_os_error(),
        ));
    }
    if len as usize != size_of::<libc::xdp_mmap_offsets>() {
        // Pre-5.4 layout without the flags word; need_wakeup needs 5.4+ anyway.
        return Err(XskError::Config(
            "kernel too old: XDP_MMAP_OFFSETS lacks ring flags (need >= 5.4)".into(),
        ));
    }
    Ok(off)
}

pub(super) fn map_ring(
    fd: &OwnedFd,
    pgoff: u64,
    off: &libc::xdp_ring_offset,
    entries: u32,
    entry_size: usize,
) -> Result<Mapping, XskError> {
    let len = off.desc as usize + entries as usize * entry_size;
    let words_end = off.producer.max(off.consumer).max(off.flags) as usize + 4;
    if words_end > len
        || [off.producer, off.consumer, off.flags]
            .iter()
            .any(|o| !o.is_multiple_of(4))
    {
        return Err(XskError::Config(format!(
            "unexpected ring offsets from the kernel: {off:?}"
        )));
    }
    let raw_fd: RawFd = fd.as_raw_fd();
    // SAFETY: maps the socket's ring at the kernel-defined page offset; the
    // result is checked and owned by the returned Mapping.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            raw_fd,
            pgoff as libc::off_t,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(XskError::io(
            "mmap(AF_XDP ring)",
            io::Error::last_os_error(),
        ));
    }
    let ptr = NonNull::new(p.cast::<u8>())
        .ok_or_else(|| XskError::Config("mmap returned NULL".into()))?;
    Ok(Mapping { ptr, len })
}

pub(super) fn ring_ptrs<T>(map: &Mapping, off: &libc::xdp_ring_offset) -> RingPtrs<T> {
    let base = map.ptr.as_ptr();
    // `wrapping_add` keeps this function safe; `map_ring` checked that every
    // offset lies inside the mapping, so the results are in bounds.
    RingPtrs {
        producer: base.wrapping_add(off.producer as usize).cast::<AtomicU32>(),
        consumer: base.wrapping_add(off.consumer as usize).cast::<AtomicU32>(),
        flags: base.wrapping_add(off.flags as usize).cast::<AtomicU32>(),
        entries: base.wrapping_add(off.desc as usize).cast::<T>(),
    }
}

/// Asks the kernel to transmit what the TX ring of the AF_XDP socket `fd`
/// holds, from any thread: `Ok(true)` if it did, `Ok(false)` if it was
/// busy (EAGAIN/EBUSY/ENOBUFS: the descriptors stay queued, kick again
/// later); errors are fatal conditions such as ENETDOWN. In copy mode the
/// kernel copies each frame into an skb and hands it to the device within
/// this call, so the calling thread's core does that work.
pub fn kick_fd(fd: BorrowedFd<'_>) -> Result<bool, XskError> {
    // SAFETY: sendto with no buffer and no address only triggers TX; `fd`
    // is a live socket for the duration of the borrow.
    let rc = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            std::ptr::null(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null(),
            0,
        )
    };
    if rc >= 0 {
        return Ok(true);
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS | libc::EINTR) => Ok(false),
        _ => Err(XskError::io("sendto(AF_XDP tx kick)", err)),
    }
}

/// `bind(2)` of an AF_XDP socket.
pub(super) fn bind_xsk(
    fd: &OwnedFd,
    flags: u16,
    ifindex: u32,
    queue: u32,
    shared_fd: u32,
) -> io::Result<()> {
    let sa = libc::sockaddr_xdp {
        sxdp_family: libc::AF_XDP as u16,
        sxdp_flags: flags,
        sxdp_ifindex: ifindex,
        sxdp_queue_id: queue,
        sxdp_shared_umem_fd: shared_fd,
    };
    // SAFETY: `sa` is a valid sockaddr_xdp of the length passed.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_xdp).cast(),
            size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Opens and closes an AF_XDP socket: whether the kernel has them and
/// this process may open one (CAP_NET_RAW); for `xbr doctor`.
pub fn probe_socket() -> io::Result<()> {
    // SAFETY: plain socket(2) call; the result is checked before use.
    let raw = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh descriptor that nothing else owns; dropping
    // the OwnedFd closes it.
    drop(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) });
    Ok(())
}
