//! Loader of xbr's XDP program (bpf/xbr_xdp.c) and its XSKMAP.
//!
//! One [`XdpProgram`] per netdev: it owns a loaded copy of the object (so
//! each netdev has its own XSKMAP, indexed by rx queue) and the bpf_link
//! that attaches it. A link, unlike the legacy netlink attachment, belongs
//! to its file descriptor: when xbr exits or crashes, the kernel closes the
//! fd and detaches the program, unless the link is pinned in the BPF
//! filesystem (with the flow cache, see `crate::fastpath::pin`): then the program
//! stays, forwards cached flows and drops the rest (its sockets went with
//! the process, so nothing reaches the host stack), and the next xbr
//! swaps its own program into the same link. Dropping an unpinned value
//! detaches.
//!
//! Children: `link.rs` (creating and updating a bpf_link) and `probe.rs`
//! (what the kernel's XDP supports). With `fastpath/handles.rs`, they are
//! the only files of the fast path where `unsafe` is allowed; this one
//! has none.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use libbpf_rs::{MapCore, MapFlags, Object, ObjectBuilder};

// `unsafe` is denied crate-wide and allowed in these two children alone,
// the loader's raw libbpf calls; every block carries a `// SAFETY:`
// comment (clippy's `undocumented_unsafe_blocks` is denied too).
#[allow(unsafe_code)]
mod link;
#[allow(unsafe_code)]
mod probe;

pub use super::handles::XdpAttachMode;
use link::{link_create, link_update};
pub use probe::{probe_xdp_support, XdpSupport};

/// The compiled XDP object, embedded so the binary is self-contained.
static XDP_OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/xbr_xdp.bpf.o"));

const PROG_NAME: &str = "xbr_xdp_rx";
/// The uplink program of a VXLAN port: only VXLAN to this node goes to xbr.
const VXLAN_PROG_NAME: &str = "xbr_xdp_vxlan";
const VXLAN_CFG_NAME: &str = "vxlan_cfg";
const XSKMAP_NAME: &str = "xsks";

/// Where to run the XDP program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XdpModeRequest {
    /// Native (driver) mode, falling back to generic (SKB) mode with a warning.
    Auto,
    /// Native mode only.
    Native,
    /// Generic (SKB) mode only.
    Generic,
}

#[derive(Debug, thiserror::Error)]
pub enum BpfError {
    #[error("loading the XDP object: {0}")]
    Load(#[source] libbpf_rs::Error),
    #[error("XDP object has no {0}")]
    Missing(&'static str),
    #[error("attaching XDP to ifindex {ifindex} in {mode:?} mode: {source}")]
    Attach {
        ifindex: u32,
        mode: XdpAttachMode,
        #[source]
        source: io::Error,
    },
    #[error("running the XDP program on a test frame: {0}")]
    TestRun(#[source] libbpf_rs::Error),
    #[error("XSKMAP {op} for queue {queue}: {source}")]
    Map {
        op: &'static str,
        queue: u32,
        #[source]
        source: libbpf_rs::Error,
    },
}

/// xbr's XDP program attached to one netdev.
pub struct XdpProgram {
    // Drop order: the link first (detaches), then the object (prog/map fds).
    link: OwnedFd,
    obj: Object,
    ifindex: u32,
    mode: XdpAttachMode,
    /// The bridge's pin directory, where the link is pinned.
    pins: Option<std::sync::Arc<crate::fastpath::pin::Pins>>,
}

impl Drop for XdpProgram {
    fn drop(&mut self) {
        // Before the fd closes: an unpinned link detaches with it.
        if let Some(p) = &self.pins {
            p.release_link(self.ifindex, self.mode);
        }
    }
}

impl XdpProgram {
    /// Loads a fresh copy of the program and attaches it to `ifindex`.
    /// With `cache`, the program's flow cache maps are the bridge's shared
    /// ones; without, it gets private empty ones (generation 0: the cache
    /// is off and never looked up).
    pub fn attach(
        ifindex: u32,
        request: XdpModeRequest,
        cache: Option<&crate::fastpath::cache::CacheMaps>,
    ) -> Result<XdpProgram, BpfError> {
        let obj = load_rx(cache)?;
        Self::attach_loaded(obj, PROG_NAME, ifindex, request, cache)
    }

    /// Attaches the uplink program of a VXLAN port to `ifindex`: IPv4/UDP
    /// to `local_ip:dst_port` (no options, no fragments) goes to the
    /// socket (or, with `cache`, through the bridge's flow cache first),
    /// the rest to the kernel. The address and port are written before
    /// the program is attached, so it never runs unconfigured.
    pub fn attach_vxlan(
        ifindex: u32,
        request: XdpModeRequest,
        local_ip: std::net::Ipv4Addr,
        dst_port: u16,
        cache: Option<&crate::fastpath::cache::CacheMaps>,
    ) -> Result<XdpProgram, BpfError> {
        let obj = load_rx(cache)?;
        configure_vxlan(&obj, local_ip, dst_port)?;
        Self::attach_loaded(obj, VXLAN_PROG_NAME, ifindex, request, cache)
    }

    fn attach_loaded(
        obj: Object,
        prog_name: &'static str,
        ifindex: u32,
        request: XdpModeRequest,
        cache: Option<&crate::fastpath::cache::CacheMaps>,
    ) -> Result<XdpProgram, BpfError> {
        let prog_fd = {
            let prog = obj
                .progs()
                .find(|p| p.name() == OsStr::new(prog_name))
                .ok_or(BpfError::Missing(prog_name))?;
            prog.as_fd().as_raw_fd()
        };
        if !obj.maps().any(|m| m.name() == OsStr::new(XSKMAP_NAME)) {
            return Err(BpfError::Missing("map xsks"));
        }
        let pins = cache.and_then(|c| c.pins()).cloned();
        // A link a previous xbr pinned for this device: this program
        // replaces its own in it, atomically (the device is never without
        // one, and the cache entries it shares keep forwarding).
        if let Some((link, mode)) = pins.as_ref().and_then(|p| p.adopt_link(ifindex)) {
            match link_update(link.as_fd(), prog_fd) {
                Ok(()) => {
                    tracing::info!(ifindex, ?mode, "adopted the pinned XDP link");
                    return Ok(XdpProgram {
                        link,
                        obj,
                        ifindex,
                        mode,
                        pins,
                    });
                }
                // Detached (unpinned, its fd closed) and attached anew
                // below: a moment without a program, but a working port.
                Err(e) => {
                    tracing::warn!(ifindex, error = %e, "cannot update the pinned XDP link; \
                         replacing it");
                    if let Some(p) = &pins {
                        p.release_link(ifindex, mode);
                    }
                    drop(link);
                }
            }
        }
        let (link, mode) = match request {
            XdpModeRequest::Native => (
                link_create(prog_fd, ifindex, XdpAttachMode::Native)?,
                XdpAttachMode::Native,
            ),
            XdpModeRequest::Generic => (
                link_create(prog_fd, ifindex, XdpAttachMode::Generic)?,
                XdpAttachMode::Generic,
            ),
            XdpModeRequest::Auto => match link_create(prog_fd, ifindex, XdpAttachMode::Native) {
                Ok(link) => (link, XdpAttachMode::Native),
                Err(native_err) => {
                    tracing::warn!(ifindex, error = %native_err, "native XDP failed, using generic (SKB) mode");
                    (
                        link_create(prog_fd, ifindex, XdpAttachMode::Generic)?,
                        XdpAttachMode::Generic,
                    )
                }
            },
        };
        if let Some(p) = &pins {
            if let Err(e) = p.pin_link(ifindex, mode, link.as_fd()) {
                // Still a working port; it just goes with the process.
                tracing::warn!(ifindex, error = %e, "cannot pin the XDP link: the port's \
                     program will detach when xbr exits");
            }
        }
        Ok(XdpProgram {
            link,
            obj,
            ifindex,
            mode,
            pins,
        })
    }

    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    pub fn mode(&self) -> XdpAttachMode {
        self.mode
    }

    /// The bpf_link descriptor (e.g. to pin it, or to query it).
    pub fn link_fd(&self) -> BorrowedFd<'_> {
        self.link.as_fd()
    }

    /// Sends the packets of rx queue `queue` to the AF_XDP socket `xsk`.
    pub fn insert_socket(&self, queue: u32, xsk: BorrowedFd<'_>) -> Result<(), BpfError> {
        let fd = xsk.as_raw_fd() as u32;
        self.with_map(queue, "insert", |m| {
            m.update(&queue.to_ne_bytes(), &fd.to_ne_bytes(), MapFlags::ANY)
        })
    }

    /// Stops redirecting queue `queue` (its packets go to the kernel stack).
    pub fn remove_socket(&self, queue: u32) -> Result<(), BpfError> {
        self.with_map(queue, "remove", |m| m.delete(&queue.to_ne_bytes()))
    }

    fn with_map(
        &self,
        queue: u32,
        op: &'static str,
        f: impl FnOnce(&libbpf_rs::Map<'_>) -> Result<(), libbpf_rs::Error>,
    ) -> Result<(), BpfError> {
        let map = self
            .obj
            .maps()
            .find(|m| m.name() == OsStr::new(XSKMAP_NAME))
            .ok_or(BpfError::Missing("map xsks"))?;
        f(&map).map_err(|source| BpfError::Map { op, queue, source })
    }
}

/// Writes a VXLAN uplink program's address and port (`struct
/// xbr_vxlan_cfg`: __be32 local_ip, __be16 dst_port, pad).
fn configure_vxlan(
    obj: &Object,
    local_ip: std::net::Ipv4Addr,
    dst_port: u16,
) -> Result<(), BpfError> {
    let map = obj
        .maps()
        .find(|m| m.name() == OsStr::new(VXLAN_CFG_NAME))
        .ok_or(BpfError::Missing("map vxlan_cfg"))?;
    let mut value = [0u8; 8];
    value[..4].copy_from_slice(&local_ip.octets());
    value[4..6].copy_from_slice(&dst_port.to_be_bytes());
    map.update(&0u32.to_ne_bytes(), &value, MapFlags::ANY)
        .map_err(|source| BpfError::Map {
            op: "configure",
            queue: 0,
            source,
        })
}

/// A fresh copy of the object, loaded; with `cache`, its flow cache maps
/// are the bridge's.
fn load_rx(cache: Option<&crate::fastpath::cache::CacheMaps>) -> Result<Object, BpfError> {
    let mut open = ObjectBuilder::default()
        .open_memory(XDP_OBJECT)
        .map_err(BpfError::Load)?;
    if let Some(cache) = cache {
        let mut reused = 0;
        for mut map in open.maps_mut() {
            let Some(name) = map.name().to_str() else {
                continue;
            };
            if let Some(fd) = cache.fd_of(name) {
                map.reuse_fd(fd).map_err(BpfError::Load)?;
                reused += 1;
            }
        }
        if reused != crate::fastpath::cache::maps::SHARED_MAPS {
            return Err(BpfError::Missing("flow cache maps"));
        }
    }
    open.load().map_err(BpfError::Load)
}

/// The receive program with a bridge's flow cache maps, attached nowhere:
/// frames go through it by `BPF_PROG_TEST_RUN`, so tests can check what
/// the kernel side of the cache does to a frame (the checksums it
/// completes, the rewrites) without a device or traffic.
pub struct XdpTestRun {
    obj: Object,
}

impl XdpTestRun {
    pub fn load(cache: &crate::fastpath::cache::CacheMaps) -> Result<XdpTestRun, BpfError> {
        Ok(XdpTestRun {
            obj: load_rx(Some(cache))?,
        })
    }

    /// Runs the program once on `frame`, received on the loopback device
    /// (ifindex 1, rx queue 0, no socket: a miss passes the frame to the
    /// kernel). Returns the XDP action and the frame as the program left
    /// it.
    pub fn run(&mut self, frame: &[u8]) -> Result<(u32, Vec<u8>), BpfError> {
        self.run_prog(PROG_NAME, frame)
    }

    /// Sets the address and UDP port the VXLAN uplink program selects on.
    pub fn configure_vxlan(
        &mut self,
        local_ip: std::net::Ipv4Addr,
        dst_port: u16,
    ) -> Result<(), BpfError> {
        configure_vxlan(&self.obj, local_ip, dst_port)
    }

    /// [`XdpTestRun::run`] with the VXLAN uplink program.
    pub fn run_vxlan(&mut self, frame: &[u8]) -> Result<(u32, Vec<u8>), BpfError> {
        self.run_prog(VXLAN_PROG_NAME, frame)
    }

    fn run_prog(&mut self, name: &'static str, frame: &[u8]) -> Result<(u32, Vec<u8>), BpfError> {
        let prog = self
            .obj
            .progs_mut()
            .find(|p| p.name() == OsStr::new(name))
            .ok_or(BpfError::Missing(name))?;
        // Room for the frame to grow by an encapsulation.
        let mut out = vec![0u8; frame.len() + 128];
        let input = libbpf_rs::ProgramInput {
            data_in: Some(frame),
            data_out: Some(&mut out),
            ..Default::default()
        };
        let output = prog.test_run(input).map_err(BpfError::TestRun)?;
        let action = output.return_value;
        let len = output.data.map_or(0, |d| d.len());
        out.truncate(len);
        Ok((action, out))
    }
}

impl std::fmt::Debug for XdpProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdpProgram")
            .field("ifindex", &self.ifindex)
            .field("mode", &self.mode)
            .finish()
    }
}
