//! Removing pinned state: a bridge's whole directory (`xbr teardown`,
//! `ovs-appctl exit --cleanup`, a bridge removed from OVSDB), or single
//! pins replaced at start. Unlinking a pin drops the filesystem's
//! reference: a link's program detaches, and a map is freed, once no
//! process holds a descriptor either.

use super::{bridge_dir, PinError};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

/// Unlinks the pin at `path`; one that is not there is no error.
pub(super) fn remove(path: &Path) -> Result<(), PinError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(PinError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Removes every pin in `dir` (not the directory).
pub(super) fn clear(dir: &Path) -> Result<usize, PinError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(source) => {
            return Err(PinError::Io {
                path: dir.to_path_buf(),
                source,
            })
        }
    };
    let mut n = 0;
    for e in entries.flatten() {
        remove(&e.path())?;
        n += 1;
    }
    Ok(n)
}

/// Removes the pin directory of `bridge` under `root`: its programs
/// detach (unless a running xbr still holds their links; it detaches them
/// when it stops) and its maps are freed. Returns how many pins there
/// were; a missing directory is not an error.
pub fn teardown(root: &Path, bridge: &str) -> Result<usize, PinError> {
    let dir = bridge_dir(root, bridge)?;
    let n = clear(&dir)?;
    match std::fs::remove_dir(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => return Err(PinError::Io { path: dir, source }),
    }
    // The root too, once no bridge is left in it.
    let _ = std::fs::remove_dir(root);
    Ok(n)
}

/// Removes what an earlier xbr pinned for `bridge` under `root`, if
/// anything (a start with pinning off); says so, or why it cannot.
pub fn remove_leftover(root: &Path, bridge: &str) {
    let Ok(dir) = bridge_dir(root, bridge) else {
        return;
    };
    if !dir.exists() {
        return;
    }
    match teardown(root, bridge) {
        Ok(n) => tracing::info!(
            dir = %dir.display(),
            pins = n,
            "pinning is off: removed the pinned XDP state an earlier xbr left"
        ),
        Err(e) => tracing::warn!(
            error = %e,
            "pinning is off, but the pinned XDP state an earlier xbr left cannot be removed"
        ),
    }
}

/// Set by `ovs-appctl exit --cleanup`: the exit tears the pins down.
static CLEANUP_ON_EXIT: AtomicBool = AtomicBool::new(false);

/// Makes the coming exit a teardown (`ovs-appctl exit --cleanup`).
pub fn request_cleanup() {
    CLEANUP_ON_EXIT.store(true, Ordering::SeqCst);
}

/// Whether the exit should tear the pins down.
pub fn cleanup_requested() -> bool {
    CLEANUP_ON_EXIT.load(Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn teardown_removes_the_bridge_directory_only_and_refuses_odd_names() {
        let root = std::env::temp_dir().join(format!("xbrt-pin-unit-{}", std::process::id()));
        let dir = root.join("br0");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::create_dir_all(root.join("br1")).unwrap();
        for f in ["xbr_layout", "fc_flows", "link-7-native"] {
            std::fs::write(dir.join(f), b"").unwrap();
        }
        assert_eq!(teardown(&root, "br0").unwrap(), 3);
        assert!(!dir.exists());
        // Another bridge's directory keeps the root.
        assert!(root.join("br1").exists());
        assert_eq!(teardown(&root, "br0").unwrap(), 0);
        for bad in ["", ".", "..", "a/b", "sixteen-chars-xx"] {
            assert!(
                matches!(teardown(&root, bad), Err(PinError::BadBridge(_))),
                "{bad:?}"
            );
        }
        assert_eq!(teardown(&root, "br1").unwrap(), 0);
        assert!(!root.exists(), "the empty root stays");
    }
}
