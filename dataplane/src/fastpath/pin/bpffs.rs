//! The BPF filesystem the pins live on: mounted by xbr at its usual
//! place when the system has not (a bpffs is what lets a BPF object
//! outlive the process that made it).

use super::PinError;
use std::path::Path;

/// `BPF_FS_MAGIC` (linux/magic.h).
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;
/// Where systems mount the BPF filesystem.
pub const DEFAULT_MOUNT: &str = "/sys/fs/bpf";

/// Whether `path` is on a BPF filesystem.
// `f_type`'s type differs by platform (i64 here, u32 on others).
#[allow(clippy::unnecessary_cast)]
pub fn is_bpffs(path: &Path) -> bool {
    nix::sys::statfs::statfs(path)
        .map(|s| s.filesystem_type().0 as i64 == BPF_FS_MAGIC)
        .unwrap_or(false)
}

/// Makes sure `root` (the pin root, e.g. /sys/fs/bpf/xbr) can hold pins:
/// if it is under /sys/fs/bpf and that is not a bpffs yet, mounts one
/// there, as `mount -t bpf bpf /sys/fs/bpf` would; a root elsewhere must
/// be on a bpffs already. Creates `root`.
pub fn ensure(root: &Path) -> Result<(), PinError> {
    let mount = Path::new(DEFAULT_MOUNT);
    if root.starts_with(mount) && !is_bpffs(mount) {
        nix::mount::mount(
            Some("bpf"),
            mount,
            Some("bpf"),
            nix::mount::MsFlags::empty(),
            Some("mode=0700"),
        )
        .map_err(|source| PinError::Mount {
            path: mount.to_path_buf(),
            source,
        })?;
        tracing::info!(path = DEFAULT_MOUNT, "mounted the BPF filesystem");
        if !same_mount_namespace_as_init() {
            tracing::warn!(
                path = DEFAULT_MOUNT,
                "the BPF filesystem was mounted in a private mount namespace (e.g. \
                 `ip netns exec`): the ports' pinned XDP programs end with it, when \
                 xbr exits"
            );
        }
    }
    std::fs::create_dir_all(root).map_err(|source| PinError::Io {
        path: root.to_path_buf(),
        source,
    })?;
    if !is_bpffs(root) {
        return Err(PinError::NotBpffs(root.to_path_buf()));
    }
    Ok(())
}

/// Whether this process shares the init process's mount namespace (where
/// a mount outlives it).
fn same_mount_namespace_as_init() -> bool {
    match (
        std::fs::read_link("/proc/self/ns/mnt"),
        std::fs::read_link("/proc/1/ns/mnt"),
    ) {
        (Ok(a), Ok(b)) => a == b,
        // Cannot tell (no /proc, or no right to read pid 1's): assume so.
        _ => true,
    }
}
