//! Forwarding that outlives the process: a bridge's XDP programs (their
//! bpf_links), its flow cache and the maps the kernel path needs, pinned
//! in the BPF filesystem.
//!
//! # Design
//!
//! Why: OVS's kernel datapath keeps forwarding by its installed flows
//! while ovs-vswitchd stops, restarts or is replaced. xbr's kernel path
//! is its ports' XDP programs and the flow cache they share; pinned, they
//! stay attached and keep forwarding cached flows when the process goes,
//! and what they cannot forward is dropped (fail closed, see
//! bpf/xbr_xdp.c), never handed to the host stack.
//!
//! What is stored, in one directory per bridge (`--bpf-pin-root`, default
//! /sys/fs/bpf/xbr, then the bridge name; /sys/fs/bpf is mounted if it is
//! not a bpffs yet):
//! - `xbr_layout`: the layout record (`layout.rs`): the layout version and
//!   the xbr version that made the directory;
//! - `fc_flows`, `fc_devs`, `fc_gen`, `closed_drops`: the flow cache's
//!   entries, its redirect targets, its generation and the fail-closed
//!   drop counter (`cache/maps.rs`). The new-connection maps are not
//!   pinned: a new process starts its own (`conntrack/kernel_new.rs`);
//! - `link-<ifindex>-<mode>`: each port's bpf_link (native or generic).
//!
//! Lifecycle:
//! - a starting xbr opens the directory ([`Pins::open`]). Without a
//!   record it starts clean; with one of another layout, or one it cannot
//!   read, it says so, removes everything (the old programs detach) and
//!   starts clean; with its own layout it adopts: the cache maps are
//!   reused if their shapes are the ones it would create (else it makes
//!   new ones and says so), and each port's program is swapped into the
//!   pinned link atomically (`bpf_link_update`: the device is never
//!   without a program). Cached flows keep hitting (the generation is kept)
//!   until `crate::fastpath::cache::take_over`, which the daemon calls once its tables are final
//!   (after a state restore, when there is one): the packet threads then
//!   check every adopted entry against the tables and connections, keep
//!   those that are the same, rewrite those that changed and remove the
//!   rest (`cache/adopt.rs`), so a flow that did not change never
//!   leaves the kernel. Pinned links of devices that are gone are
//!   removed at adoption;
//! - a plain stop (SIGTERM, SIGINT, `ovs-appctl exit`) leaves everything
//!   pinned: the programs keep forwarding cached flows and drop the rest,
//!   as OVS's kernel datapath does across an ovs-vswitchd restart. The
//!   packet threads leave their entries in the map;
//! - removing a port while running unpins its link (the program
//!   detaches); removing a bridge (OVSDB) tears its directory down;
//! - teardown ([`teardown()`](fn@teardown): `xbr teardown`, `ovs-appctl exit --cleanup`,
//!   `xbr lab down`) removes the directory: the programs detach and the
//!   maps are freed once nothing holds them.
//!
//! Concurrency: one process per bridge directory (the management socket
//! check in `bridge/mod.rs` refuses a second). [`Pins`] is shared by the
//! threads that open and close ports; its state is a few atomics.

mod bpffs;
pub mod layout;
mod teardown;

pub use bpffs::is_bpffs;
pub use teardown::{cleanup_requested, remove_leftover, request_cleanup, teardown};
use teardown::{clear, remove};

use libbpf_rs::{MapCore, MapHandle, MapType};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The default pin root (`--bpf-pin-root`).
pub const DEFAULT_ROOT: &str = "/sys/fs/bpf/xbr";
const LINK_PREFIX: &str = "link-";

#[derive(Debug, thiserror::Error)]
pub enum PinError {
    #[error("mounting the BPF filesystem on {path}: {source}")]
    Mount {
        path: PathBuf,
        #[source]
        source: nix::Error,
    },
    #[error("bridge name '{0}' is not valid (1-15 characters, no '/', not . or ..)")]
    BadBridge(String),
    #[error("{0} is not on a BPF filesystem (mount -t bpf bpf DIR)")]
    NotBpffs(PathBuf),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("pinned map {name} at {path}: {source}")]
    Map {
        name: &'static str,
        path: PathBuf,
        #[source]
        source: libbpf_rs::Error,
    },
}

/// The bridge's pin directory `root/bridge`; refuses a name that is not
/// one directory entry (empty, `.`, `..`, with a `/`, or longer than a
/// bridge name may be).
pub fn bridge_dir(root: &Path, bridge: &str) -> Result<PathBuf, PinError> {
    if bridge.is_empty()
        || bridge.len() > 15
        || bridge.contains('/')
        || bridge == "."
        || bridge == ".."
    {
        return Err(PinError::BadBridge(bridge.to_string()));
    }
    Ok(root.join(bridge))
}

/// What a start found and took over.
#[derive(Clone, Debug, Default)]
pub struct Adoption {
    /// The xbr version that made the adopted directory.
    pub from_version: String,
    /// Ports whose pinned link got this process's program.
    pub links: u64,
    /// Flow cache entries found (checked by `crate::fastpath::cache::take_over`).
    pub entries: u64,
    /// The cache maps were adopted (their shapes matched).
    pub maps: bool,
}

/// A bridge's pin directory, opened by a starting xbr.
#[derive(Debug)]
pub struct Pins {
    dir: PathBuf,
    /// The layout record was ours: pinned maps and links may be adopted.
    adopting: bool,
    from_version: String,
    links_adopted: AtomicU64,
    entries_adopted: AtomicU64,
    maps_adopted: AtomicBool,
    /// The process is exiting without a teardown: ports closing now leave
    /// their links pinned.
    keep: AtomicBool,
}

impl Pins {
    /// Opens (or makes) the directory of `bridge` under `root`, adopting
    /// what a compatible xbr left there and clearing anything else.
    pub fn open(root: &Path, bridge: &str) -> Result<Pins, PinError> {
        let dir = bridge_dir(root, bridge)?;
        bpffs::ensure(root)?;
        std::fs::create_dir_all(&dir).map_err(|source| PinError::Io {
            path: dir.clone(),
            source,
        })?;
        let record = dir.join(layout::NAME);
        let ours = layout::Layout::ours();
        let (adopting, from_version) = match layout::read(&record) {
            Ok(Some(l)) if l.layout == ours.layout => (true, l.version),
            Ok(Some(l)) => {
                tracing::error!(
                    dir = %dir.display(),
                    found_layout = l.layout,
                    found_version = %l.version,
                    layout = ours.layout,
                    version = %ours.version,
                    "pinned XDP state is from an incompatible xbr (layout {} of xbr {}, this \
                     build reads layout {}): not adopted; removing it and starting clean",
                    l.layout,
                    l.version,
                    ours.layout
                );
                (false, String::new())
            }
            Ok(None) => (false, String::new()),
            Err(reason) => {
                tracing::error!(
                    dir = %dir.display(),
                    "pinned XDP state has an unreadable layout record ({reason}): not \
                     adopted; removing it and starting clean"
                );
                (false, String::new())
            }
        };
        if !adopting {
            clear(&dir)?;
            layout::write(&record, &ours)?;
        } else {
            tracing::info!(
                dir = %dir.display(),
                from_version = %from_version,
                "adopting the pinned XDP state of xbr {from_version}"
            );
        }
        OPENED.lock().push(dir.clone());
        Ok(Pins {
            dir,
            adopting,
            from_version,
            links_adopted: AtomicU64::new(0),
            entries_adopted: AtomicU64::new(0),
            maps_adopted: AtomicBool::new(false),
            keep: AtomicBool::new(false),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// What was adopted, if this start adopted a directory.
    pub fn adoption(&self) -> Option<Adoption> {
        self.adopting.then(|| Adoption {
            from_version: self.from_version.clone(),
            links: self.links_adopted.load(Ordering::Relaxed),
            entries: self.entries_adopted.load(Ordering::Relaxed),
            maps: self.maps_adopted.load(Ordering::Relaxed),
        })
    }

    /// The pinned map `name` if this start adopts and it has exactly the
    /// shape given (else `None`: the caller creates a new one and pins it
    /// over the old).
    pub fn adopt_map(
        &self,
        name: &str,
        ty: MapType,
        key: u32,
        value: u32,
        entries: u32,
    ) -> Option<MapHandle> {
        if !self.adopting {
            return None;
        }
        let path = self.dir.join(name);
        let map = MapHandle::from_pinned_path(&path).ok()?;
        if map.map_type() == ty
            && map.key_size() == key
            && map.value_size() == value
            && map.max_entries() == entries
        {
            Some(map)
        } else {
            tracing::warn!(
                map = name,
                "the pinned map has another shape (e.g. a new --xdp-cache-size): not \
                 adopted; its entries are dropped"
            );
            None
        }
    }

    /// Records that the cache maps were adopted with `entries` entries.
    pub fn maps_adopted(&self, entries: u64) {
        self.maps_adopted.store(true, Ordering::Relaxed);
        self.entries_adopted.store(entries, Ordering::Relaxed);
    }

    /// Pins `map` as `name`, replacing what was pinned there.
    pub fn pin_map(&self, name: &'static str, map: &mut MapHandle) -> Result<(), PinError> {
        let path = self.dir.join(name);
        if map_is_pinned_at(map, &path) {
            return Ok(());
        }
        remove(&path)?;
        map.pin(&path)
            .map_err(|source| PinError::Map { name, path, source })
    }

    /// The pinned link of the device `ifindex`, and the mode it attached
    /// in, if this start adopts and the link is still attached to that
    /// device. A pinned link whose device is gone is removed.
    pub fn adopt_link(
        &self,
        ifindex: u32,
    ) -> Option<(OwnedFd, crate::fastpath::handles::XdpAttachMode)> {
        if !self.adopting {
            return None;
        }
        for mode in [
            crate::fastpath::handles::XdpAttachMode::Native,
            crate::fastpath::handles::XdpAttachMode::Generic,
        ] {
            let path = self.link_path(ifindex, mode);
            let Ok(fd) = crate::fastpath::handles::pinned_fd(&path) else {
                continue;
            };
            if crate::fastpath::handles::link_ifindex(fd.as_fd()) == Some(ifindex) {
                self.links_adopted.fetch_add(1, Ordering::Relaxed);
                return Some((fd, mode));
            }
            let _ = std::fs::remove_file(&path);
        }
        None
    }

    /// Pins the link `fd` of the device `ifindex`.
    pub fn pin_link(
        &self,
        ifindex: u32,
        mode: crate::fastpath::handles::XdpAttachMode,
        fd: BorrowedFd<'_>,
    ) -> Result<(), PinError> {
        let path = self.link_path(ifindex, mode);
        remove(&path)?;
        crate::fastpath::handles::pin_fd(fd, &path).map_err(|source| PinError::Io { path, source })
    }

    /// The port on `ifindex` is closing: unpins its link (the program
    /// detaches when the fd closes), unless the process is exiting
    /// without a teardown.
    pub fn release_link(&self, ifindex: u32, mode: crate::fastpath::handles::XdpAttachMode) {
        if self.keep.load(Ordering::Acquire) {
            return;
        }
        let _ = std::fs::remove_file(self.link_path(ifindex, mode));
    }

    /// The process exits and leaves the kernel path running: from now on
    /// closing ports keep their links pinned, and the packet threads
    /// leave their cache entries.
    pub fn keep_on_exit(&self) {
        self.keep.store(true, Ordering::Release);
    }

    pub fn keeping(&self) -> bool {
        self.keep.load(Ordering::Acquire)
    }

    /// Removes links pinned for devices that no longer exist (adoption
    /// runs on the ports it opens; this clears the rest).
    pub fn remove_stale_links(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(name) = name.to_str() else { continue };
            if !name.starts_with(LINK_PREFIX) {
                continue;
            }
            let path = e.path();
            let alive = crate::fastpath::handles::pinned_fd(&path)
                .ok()
                .and_then(|fd| crate::fastpath::handles::link_ifindex(fd.as_fd()))
                .is_some_and(|i| i != 0);
            if !alive {
                tracing::info!(pin = %path.display(), "removing the pinned link of a device that is gone");
                let _ = std::fs::remove_file(&path);
            }
        }
    }

    fn link_path(&self, ifindex: u32, mode: crate::fastpath::handles::XdpAttachMode) -> PathBuf {
        let m = match mode {
            crate::fastpath::handles::XdpAttachMode::Native => "native",
            crate::fastpath::handles::XdpAttachMode::Generic => "generic",
        };
        self.dir.join(format!("{LINK_PREFIX}{ifindex}-{m}"))
    }

    /// A line for `xbr stats`.
    pub fn report(&self) -> String {
        match self.adoption() {
            Some(a) => format!(
                "pinned: {} (adopted from xbr {}: {} port links, cache maps {}, {} cache entries)\n",
                self.dir.display(),
                a.from_version,
                a.links,
                if a.maps { "adopted" } else { "new" },
                a.entries
            ),
            None => format!("pinned: {} (clean start)\n", self.dir.display()),
        }
    }
}

/// Whether `map` is the object pinned at `path` already.
fn map_is_pinned_at(map: &MapHandle, path: &Path) -> bool {
    let Ok(pinned) = MapHandle::from_pinned_path(path) else {
        return false;
    };
    matches!((pinned.info(), map.info()), (Ok(a), Ok(b)) if a.info.id == b.info.id)
}

/// Whether the XDP program on the device `ifindex` hangs off a link some
/// bridge pinned under `root` (what a stopped xbr leaves: `xbr doctor`
/// tells it from a foreign program).
pub fn pinned_under(root: &Path, ifindex: u32) -> bool {
    let Ok(dirs) = std::fs::read_dir(root) else {
        return false;
    };
    dirs.flatten().any(|d| {
        ["native", "generic"].iter().any(|m| {
            d.path()
                .join(format!("{LINK_PREFIX}{ifindex}-{m}"))
                .exists()
        })
    })
}

/// The pin directories this process opened (every bridge's).
static OPENED: parking_lot::Mutex<Vec<PathBuf>> = parking_lot::Mutex::new(Vec::new());

/// Whether the XDP program on the device `ifindex` hangs off a link
/// pinned in one of this process's bridge directories: a program a
/// previous xbr of the same bridge left, not one another running xbr
/// serves (`hostveth::existing` replaces such a pair as a leftover).
pub fn pinned_here(ifindex: u32) -> bool {
    OPENED.lock().iter().any(|dir| {
        ["native", "generic"]
            .iter()
            .any(|m| dir.join(format!("{LINK_PREFIX}{ifindex}-{m}")).exists())
    })
}
