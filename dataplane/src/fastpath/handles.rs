//! Handles on kernel BPF objects that outlive one loaded program: pins in
//! the BPF filesystem, the device an XDP link is attached to, batched reads
//! of hash maps and array maps mapped into this process.
//!
//! This is the bottom of the XDP fast path: it knows file descriptors and
//! syscalls, nothing of flow cache entries, connections or pins' layout.
//! The loader (`loader/`), the pins (`pin/`), the flow cache's maps
//! (`cache/maps.rs`) and conntrack's kernel maps (`ct/`) all use it; it
//! uses none of them, so the fast path's modules depend one way.
//!
//! Every call is one syscall (`mmap` for [`MappedCounters`], once); no
//! state is kept between calls except the batch cursor the caller owns.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// Mode the program was attached in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XdpAttachMode {
    Native,
    Generic,
}

/// Pins the BPF object `fd` (a link) at `path` on a BPF filesystem.
pub(crate) fn pin_fd(fd: BorrowedFd<'_>, path: &std::path::Path) -> io::Result<()> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: `c` is a NUL-terminated path that outlives the call; the fd
    // is open (borrowed).
    let rc = unsafe { libbpf_sys::bpf_obj_pin(fd.as_raw_fd(), c.as_ptr()) };
    if rc < 0 {
        return Err(io::Error::from_raw_os_error(-rc));
    }
    Ok(())
}

/// Opens the BPF object pinned at `path`.
pub(crate) fn pinned_fd(path: &std::path::Path) -> io::Result<OwnedFd> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    let rc = unsafe { libbpf_sys::bpf_obj_get(c.as_ptr()) };
    if rc < 0 {
        return Err(io::Error::from_raw_os_error(-rc));
    }
    // SAFETY: on success `rc` is a new fd owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(rc) })
}

/// The device an XDP bpf_link is attached to: `Some(0)` once its device
/// is gone, `None` if `fd` is not an XDP link.
pub(crate) fn link_ifindex(fd: BorrowedFd<'_>) -> Option<u32> {
    match libbpf_rs::query::LinkInfo::from_fd(fd).ok()?.info {
        libbpf_rs::query::LinkTypeInfo::Xdp(x) => Some(x.ifindex),
        _ => None,
    }
}

/// Where a batched read of a BPF hash map is (`BPF_MAP_LOOKUP_BATCH`):
/// the kernel's opaque position token, after the first batch.
#[derive(Debug, Default)]
pub(crate) struct BatchCursor {
    /// The token the last batch returned (a bucket index for hash maps,
    /// 4 bytes; room for 8).
    token: [u64; 1],
    started: bool,
    done: bool,
}

impl BatchCursor {
    /// Whether the last batch reached the end of the map.
    pub(crate) fn is_done(&self) -> bool {
        self.done
    }
}

/// Reads up to `max` entries of the hash map `fd` (keys of `key_size`
/// bytes, values of `value_size`) after `cursor` into `keys` and
/// `values` (resized to fit), one syscall; returns how many. Entries come
/// whole buckets at a time, so fewer than `max` does not mean the end:
/// `cursor.is_done()` says that. Entries deleted or added meanwhile may
/// or may not be seen, each at most once.
pub(crate) fn hash_lookup_batch(
    fd: BorrowedFd<'_>,
    cursor: &mut BatchCursor,
    key_size: usize,
    value_size: usize,
    max: u32,
    keys: &mut Vec<u8>,
    values: &mut Vec<u8>,
) -> io::Result<usize> {
    if cursor.done {
        return Ok(0);
    }
    keys.resize(key_size * max as usize, 0);
    values.resize(value_size * max as usize, 0);
    let opts = libbpf_sys::bpf_map_batch_opts {
        sz: size_of::<libbpf_sys::bpf_map_batch_opts>() as libbpf_sys::size_t,
        ..Default::default()
    };
    let mut out_token = [0u64; 1];
    let mut count = max;
    let in_token = if cursor.started {
        cursor.token.as_mut_ptr().cast::<libc::c_void>()
    } else {
        std::ptr::null_mut()
    };
    // SAFETY: `keys` and `values` hold `max` keys and values of the sizes
    // the map was created with, and `count` (in: their capacity) is `max`;
    // the tokens are 8 bytes, more than the 4 the kernel copies for a
    // hash map; `opts` is a sized, initialised options struct; all outlive
    // the call, which does not keep any pointer.
    let rc = unsafe {
        libbpf_sys::bpf_map_lookup_batch(
            fd.as_raw_fd(),
            in_token,
            out_token.as_mut_ptr().cast(),
            keys.as_mut_ptr().cast(),
            values.as_mut_ptr().cast(),
            &mut count,
            &opts,
        )
    };
    if rc < 0 {
        let err = io::Error::last_os_error();
        // ENOENT: the end of the map, with `count` entries still read.
        if err.raw_os_error() != Some(libc::ENOENT) {
            return Err(err);
        }
        cursor.done = true;
    }
    cursor.token = out_token;
    cursor.started = true;
    let n = (count as usize).min(max as usize);
    keys.truncate(n * key_size);
    values.truncate(n * value_size);
    Ok(n)
}

/// A `BPF_F_MMAPABLE` array map of `u64`, mapped into this process: the
/// kernel's programs and this side update its elements with atomic
/// operations on the same memory, without a syscall.
pub struct MappedCounters {
    ptr: std::ptr::NonNull<std::sync::atomic::AtomicU64>,
    len: usize,
    bytes: usize,
}

// SAFETY: the mapping is shared memory reached only through `AtomicU64`s,
// which any thread may use at once; it lives until `drop`.
unsafe impl Send for MappedCounters {}
// SAFETY: as above: every access is an atomic operation.
unsafe impl Sync for MappedCounters {}

impl MappedCounters {
    /// Maps the `len` elements of the array map `fd` (created with
    /// `BPF_F_MMAPABLE`, 8-byte values: the kernel lays elements out 8
    /// bytes apart whatever their size).
    pub fn map(fd: BorrowedFd<'_>, len: usize) -> io::Result<MappedCounters> {
        let page = 4096;
        let bytes = (len * 8).div_ceil(page) * page;
        // SAFETY: a shared mapping of the map's own memory, at a
        // kernel-chosen address; the kernel checks that the length fits
        // the map and that the map may be mapped writable.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = std::ptr::NonNull::new(p.cast())
            .ok_or_else(|| io::Error::other("mmap returned NULL"))?;
        Ok(MappedCounters { ptr, len, bytes })
    }

    /// The counters.
    pub fn counters(&self) -> &[std::sync::atomic::AtomicU64] {
        // SAFETY: the mapping holds `len` initialised, 8-byte aligned u64s
        // (page aligned, in fact) for as long as `self` lives, and is only
        // ever accessed atomically (here and by the BPF programs).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for MappedCounters {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `map`; no reference
        // from `counters` outlives `self`.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.bytes);
        }
    }
}

impl std::fmt::Debug for MappedCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MappedCounters")
            .field("len", &self.len)
            .finish()
    }
}
