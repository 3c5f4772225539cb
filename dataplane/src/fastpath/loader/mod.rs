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

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use libbpf_rs::{MapCore, MapFlags, Object, ObjectBuilder};

pub mod handles;
pub use handles::{MappedCounters, XdpAttachMode};

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

fn link_create(prog_fd: i32, ifindex: u32, mode: XdpAttachMode) -> Result<OwnedFd, BpfError> {
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
fn link_update(link: BorrowedFd<'_>, prog_fd: i32) -> io::Result<()> {
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

/// What the running kernel's XDP supports of what xbr uses, asked of the
/// kernel itself (`xbr doctor`): distribution kernels backport features,
/// so a release number says too little.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XdpSupport {
    /// XDP programs attach through bpf_link (`bpf_xdp_link_attach` is in
    /// the kernel's symbol table); `None`: the table could not be read.
    pub link: Option<bool>,
    /// XDP programs may take frames in several buffers
    /// (`BPF_F_XDP_HAS_FRAGS`, what jumbo frames need): a trivial program
    /// with that flag loads.
    pub frags: bool,
}

/// Probes [`XdpSupport`]. Loads (and at once closes) a two-instruction
/// XDP program with the frags flag; nothing is attached. Fails when no
/// XDP program may be loaded at all (no permission, no BPF).
pub fn probe_xdp_support() -> io::Result<XdpSupport> {
    let frags = match load_trivial_xdp(libbpf_sys::BPF_F_XDP_HAS_FRAGS) {
        Ok(_fd) => true,
        // An older kernel refuses the unknown flag.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            load_trivial_xdp(0)?;
            false
        }
        Err(e) => return Err(e),
    };
    let link = std::fs::read_to_string("/proc/kallsyms")
        .ok()
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.lines()
                .any(|l| l.split_whitespace().nth(2) == Some("bpf_xdp_link_attach"))
        });
    Ok(XdpSupport { link, frags })
}

/// Loads `r0 = XDP_PASS; exit` as an XDP program with `prog_flags`.
fn load_trivial_xdp(prog_flags: u32) -> io::Result<OwnedFd> {
    let mov_r0 = libbpf_sys::bpf_insn {
        // BPF_ALU64 | BPF_MOV | BPF_K, dst r0.
        code: 0xb7,
        imm: libbpf_sys::XDP_PASS as i32,
        ..Default::default()
    };
    let exit = libbpf_sys::bpf_insn {
        // BPF_JMP | BPF_EXIT.
        code: 0x95,
        ..Default::default()
    };
    let insns = [mov_r0, exit];
    let mut opts = libbpf_sys::bpf_prog_load_opts {
        sz: size_of::<libbpf_sys::bpf_prog_load_opts>() as libbpf_sys::size_t,
        prog_flags,
        ..Default::default()
    };
    // SAFETY: the name and license are NUL-terminated literals, `insns`
    // holds `insns.len()` initialised instructions, and `opts` is sized and
    // initialised; all outlive the call, which copies what it keeps.
    let rc = unsafe {
        libbpf_sys::bpf_prog_load(
            libbpf_sys::BPF_PROG_TYPE_XDP,
            c"xbr_probe".as_ptr(),
            c"GPL".as_ptr(),
            insns.as_ptr(),
            insns.len() as libbpf_sys::size_t,
            &mut opts,
        )
    };
    if rc < 0 {
        return Err(io::Error::from_raw_os_error(-rc));
    }
    // SAFETY: on success `rc` is a new program fd owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(rc) })
}
