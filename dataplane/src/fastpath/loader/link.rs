//! The two bpf_link calls libbpf-rs does not offer for an fd it did not
//! make: create an XDP link on a device, and swap the program of one that
//! is already attached (a pinned link adopted from an earlier process).
//! Raw libbpf calls, hence `unsafe`; each returns an owned fd or an error.

use super::{BpfError, XdpAttachMode};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// Attaches the program `prog_fd` to device `ifindex` in `mode` through a
/// new bpf_link (`BPF_LINK_CREATE`); dropping the fd detaches it.
pub(super) fn link_create(
    prog_fd: i32,
    ifindex: u32,
    mode: XdpAttachMode,
) -> Result<OwnedFd, BpfError> {
    let flags = match mode {
        XdpAttachMode::Native => libbpf_sys::XDP_FLAGS_DRV_MODE,
        XdpAttachMode::Generic => libbpf_sys::XDP_FLAGS_SKB_MODE,
    };
    let target = i32::try_from(ifindex).map_err(|_| BpfError::Attach {
        ifindex,
        mode,
        source: io::Error::from_raw_os_error(libc::EINVAL),
    })?;
    let opts = libbpf_sys::bpf_link_create_opts {
        sz: size_of::<libbpf_sys::bpf_link_create_opts>() as libbpf_sys::size_t,
        flags,
        ..Default::default()
    };
    // SAFETY: `opts` is a properly sized, initialised options struct that
    // outlives the call; `prog_fd` is the loaded program's fd, kept open by
    // the Object for the duration of the call.
    let rc = unsafe { libbpf_sys::bpf_link_create(prog_fd, target, libbpf_sys::BPF_XDP, &opts) };
    if rc < 0 {
        // libbpf returns -errno (and sets errno).
        return Err(BpfError::Attach {
            ifindex,
            mode,
            source: io::Error::from_raw_os_error(-rc),
        });
    }
    // SAFETY: on success `rc` is a new link fd owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(rc) })
}

/// Replaces the program of the bpf_link `link` with `prog_fd`
/// (`BPF_LINK_UPDATE`: atomic, the device keeps a program throughout).
pub(super) fn link_update(link: BorrowedFd<'_>, prog_fd: i32) -> io::Result<()> {
    let opts = libbpf_sys::bpf_link_update_opts {
        sz: size_of::<libbpf_sys::bpf_link_update_opts>() as libbpf_sys::size_t,
        ..Default::default()
    };
    // SAFETY: both fds are open for the call (the link borrowed, the
    // program kept by its Object); `opts` is sized and initialised and
    // outlives the call.
    let rc = unsafe { libbpf_sys::bpf_link_update(link.as_raw_fd(), prog_fd, &opts) };
    if rc < 0 {
        return Err(io::Error::from_raw_os_error(-rc));
    }
    Ok(())
}
