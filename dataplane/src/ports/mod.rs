//! The bridge's ports as the engine sees them: AF_XDP sockets on existing
//! netdevs (`type=system`) and TAP devices or veth pairs xbr creates
//! (`type=internal`, see `hostveth` for the veth backend, which is served
//! like a system port), all moving packets through frames of one shared
//! UMEM.
//!
//! # Design
//!
//! One UMEM backs every port, so forwarding from one AF_XDP port to another
//! hands the received frame's descriptor to the other port's TX ring with no
//! copy. TAP ports have no rings: they read into, and write from, frames of
//! the same pool, one `read(2)`/`write(2)` per frame.
//!
//! Opening is all or nothing: a failure on the third port drops the first
//! two, and dropping detaches their XDP programs (bpf_link) and deletes
//! their TAP devices, so a bad command line leaves nothing behind.
//!
//! Frame budget: each AF_XDP socket (one per receive queue, see `afxdp`)
//! lends its fill ring's worth of frames to the kernel and may have as many
//! in its TX ring; `SPARE_FRAMES` more cover TAP reads, copies for
//! multi-port output and the frames the engine holds within a round.

mod afxdp;
pub mod carrier;
pub mod redirect;

pub(crate) use afxdp::open_xsk;
pub use afxdp::{XskPort, MAX_QUEUES};

use crate::config::{PortSpec, PortType};
use crate::control::PortMeta;
use crate::engine::{Desc, Frames, PortIo};
use crate::fastpath::loader::{BpfError, XdpModeRequest, XdpProgram};
use crate::netdev::{self, NetdevError};
use crate::tap::{TapError, TapPort};
use crate::vxlan::{VxlanPort, VxlanTunnel};
use crate::xsk::{FramePool, Umem, XdpDesc, XskError, XDP_PACKET_HEADROOM};
use std::os::fd::BorrowedFd;
use std::sync::Arc;
use thiserror::Error;

/// Frames beyond what the rings can hold.
const SPARE_FRAMES: u32 = 4096;
/// Bytes per frame: one page, so any MTU-1500 frame plus headroom fits.
const FRAME_SIZE: u32 = 4096;
/// Jumbo blocks of the UMEM (`xsk::JUMBO_BLOCK` bytes each, 4 MiB in
/// all): packets larger than a frame (MTUs above about 3800) in flight at
/// once, received, queued for transmission or held by the engine. Beyond
/// that such packets are dropped and counted, as a full ring drops.
const JUMBO_BLOCKS: u32 = 256;

#[derive(Debug, Error)]
pub enum PortError {
    #[error("port '{0}': no such network interface")]
    NoSuchInterface(String),
    #[error(
        "port '{0}': an interface of that name already exists; \
         type=internal creates its own device"
    )]
    InterfaceExists(String),
    #[error("port '{name}': {source}")]
    Netdev {
        name: String,
        #[source]
        source: NetdevError,
    },
    #[error("port '{name}': MTU {mtu} is out of range (68-65535)")]
    BadMtu { name: String, mtu: u32 },
    #[error("port '{name}': {source}")]
    Xdp {
        name: String,
        #[source]
        source: BpfError,
    },
    #[error("port '{name}': AF_XDP socket: {source}")]
    Xsk {
        name: String,
        #[source]
        source: XskError,
    },
    #[error("port '{name}': {source}")]
    Tap {
        name: String,
        #[source]
        source: TapError,
    },
    #[error("port '{name}': {source}")]
    HostVeth {
        name: String,
        #[source]
        // Boxed: it would double every PortError's size.
        source: Box<crate::hostveth::HostVethError>,
    },
    #[error("port '{name}': XDP flow cache: {source}")]
    XdpCache {
        name: String,
        #[source]
        source: crate::fastpath::cache::XdpCacheError,
    },
    #[error("packet buffer memory: {0}")]
    Umem(#[source] XskError),
    #[error("port '{0}': type=vxlan needs local_ip and uplink")]
    NoVxlanSettings(String),
    #[error("port '{port}': uplink '{uplink}': no such network interface")]
    NoSuchUplink { port: String, uplink: String },
    #[error("port '{port}': cannot start the neighbour resolver: {source}")]
    Resolver {
        port: String,
        #[source]
        source: std::io::Error,
    },
}

impl PortError {
    /// Errors caused by the configuration rather than by the system.
    pub fn is_config_error(&self) -> bool {
        matches!(
            self,
            PortError::NoSuchInterface(_)
                | PortError::NoSuchUplink { .. }
                | PortError::NoVxlanSettings(_)
                | PortError::InterfaceExists(_)
                | PortError::BadMtu { .. }
                | PortError::Netdev {
                    source: NetdevError::InvalidName(_),
                    ..
                }
        ) || matches!(self, PortError::HostVeth { source, .. } if source.is_config_error())
    }
}

/// The shared UMEM's free frames, as the engine's frame store.
pub struct UmemFrames {
    pool: FramePool,
}

impl UmemFrames {
    pub fn new(pool: FramePool) -> Self {
        UmemFrames { pool }
    }

    pub fn pool_mut(&mut self) -> &mut FramePool {
        &mut self.pool
    }

    /// The frames, for `FramePool::split`.
    pub fn into_pool(self) -> FramePool {
        self.pool
    }
}

fn xdp_desc(d: Desc) -> XdpDesc {
    XdpDesc {
        addr: d.addr,
        len: d.len,
        options: 0,
    }
}

impl Frames for UmemFrames {
    #[inline]
    fn alloc(&mut self) -> Option<u64> {
        self.pool.alloc()
    }

    #[inline]
    fn free(&mut self, addr: u64) {
        self.pool.free(addr)
    }

    fn alloc_large(&mut self) -> Option<u64> {
        self.pool.alloc_jumbo()
    }

    #[inline]
    fn bytes(&mut self, addr: u64, len: u32) -> &mut [u8] {
        match self.pool.frame_mut(addr) {
            Some((base, frame)) => {
                let offset = (addr - base) as usize;
                let end = (offset + len as usize).min(frame.len());
                &mut frame[offset..end]
            }
            // Descriptors come from the kernel's RX ring (checked by the
            // kernel against the UMEM) or from this pool, so this is never
            // reached; an empty packet parses as a runt and is dropped.
            None => &mut [],
        }
    }

    #[inline]
    fn headroom(&self, addr: u64) -> u32 {
        self.pool
            .umem()
            .span(addr)
            .map_or(0, |(base, _)| (addr - base) as u32)
    }

    #[inline]
    fn copy(&mut self, src: Desc) -> Option<Desc> {
        self.pool.clone_packet(&xdp_desc(src)).map(|d| Desc {
            addr: d.addr,
            len: d.len,
        })
    }
}

/// A TAP device xbr created for an internal port.
pub struct InternalPort {
    tap: TapPort,
    io_error_logged: bool,
    /// Frames longer than the buffers a read had (see `recv`).
    oversize_dropped: u64,
}

/// One port's I/O, driven by the engine thread.
// Ports sit inline in the engine's Vec and are visited every round; boxing
// the larger variant would add a pointer chase to the hot loop.
#[allow(clippy::large_enum_variant)]
pub enum Port {
    Xsk(XskPort),
    Internal(InternalPort),
    /// A VXLAN port; its uplink is an AF_XDP socket on the same UMEM.
    Vxlan(VxlanPort<XskPort>),
    /// Another packet thread's port, as this one knows it (see
    /// `engine::handoff`): never received from or sent to.
    StandIn(StandIn),
}

/// What a packet thread knows of a port another packet thread serves:
/// what the XDP flow cache and conntrack ask of a port.
pub struct StandIn {
    xdp_ifindex: Option<u32>,
    /// The port's redirect readiness, shared with its owner.
    redirect: Option<Arc<redirect::Readiness>>,
    host: bool,
    /// A VXLAN port's settings and next hops.
    vxlan: Option<VxlanTunnel>,
}

impl Port {
    /// A port with no device yet: a flow-based VXLAN port whose underlay
    /// is not resolved (see `PortSpec::vxlan`). Like a stand-in it never
    /// receives and takes nothing to send, so what is output to it is
    /// dropped and counted in its `tx_dropped`.
    pub fn unattached() -> Port {
        Port::StandIn(StandIn {
            xdp_ifindex: None,
            redirect: None,
            host: false,
            vxlan: None,
        })
    }

    /// Receive queues the port's packet thread polls (a TAP device: one).
    pub fn rx_queues(&self) -> usize {
        match self {
            Port::Xsk(p) => p.queues(),
            Port::Vxlan(v) => v.uplink().queues(),
            Port::Internal(_) => 1,
            Port::StandIn(_) => 0,
        }
    }

    /// Whether XDP flow cache entries may redirect to the port's device
    /// (a VXLAN port's uplink), as it changes; `None` for TAP ports.
    pub fn redirect(&self) -> Option<Arc<redirect::Readiness>> {
        match self {
            Port::Xsk(p) => Some(p.redirect.clone()),
            Port::Vxlan(v) => Some(v.uplink().redirect.clone()),
            Port::Internal(_) => None,
            Port::StandIn(s) => s.redirect.clone(),
        }
    }

    /// The port as another packet thread knows it.
    pub fn stand_in(&self) -> Port {
        Port::StandIn(StandIn {
            xdp_ifindex: PortIo::<UmemFrames>::xdp_ifindex(self),
            redirect: self.redirect(),
            host: PortIo::<UmemFrames>::is_host(self),
            vxlan: match self {
                Port::Vxlan(v) => Some(v.stand_in()),
                Port::StandIn(s) => s.vxlan.as_ref().map(VxlanTunnel::stand_in),
                _ => None,
            },
        })
    }

    /// Closes the port away from the packet thread (a live removal): the
    /// frames its AF_XDP rings held are returned, for the packet thread's
    /// pool ([`crate::engine::PortOp::Reclaim`]); the XDP program detaches
    /// or the TAP device is deleted as the value drops.
    pub fn close_detached(self) -> Vec<u64> {
        match self {
            Port::Xsk(p) => p.close_detached(),
            Port::Vxlan(v) => v.into_uplink().close_detached(),
            Port::Internal(_) | Port::StandIn(_) => Vec::new(),
        }
    }

    /// Leaves the kicks of the port's AF_XDP transmit socket (a VXLAN
    /// port's uplink's) to a transmit thread of `pool`; a TAP port writes
    /// each frame itself and keeps doing so. Returns that thread's CPU.
    pub fn offload_kicks(&mut self, pool: &crate::kicker::KickPool) -> Option<usize> {
        let port = match self {
            Port::Xsk(p) => p,
            Port::Vxlan(v) => v.uplink_mut(),
            Port::Internal(_) | Port::StandIn(_) => return None,
        };
        port.offload_kicks(pool);
        port.kick_cpu()
    }

    /// Closes the port, returning to `frames` every frame its rings still
    /// held; the XDP program detaches or the TAP device is deleted as the
    /// value drops.
    pub fn close(self, frames: &mut UmemFrames) {
        match self {
            Port::Xsk(p) => p.close(frames),
            Port::Internal(p) => {
                tracing::debug!(port = %p.tap.name(), "TAP device removed");
            }
            Port::Vxlan(v) => Port::Xsk(v.into_uplink()).close(frames),
            Port::StandIn(_) => {}
        }
    }
}

impl PortIo<UmemFrames> for Port {
    #[inline]
    fn recv(&mut self, frames: &mut UmemFrames, out: &mut [Desc]) -> usize {
        match self {
            Port::Xsk(p) => {
                let n = p.recv(frames, out);
                // A pod's veth hands over TCP/UDP checksums its kernel left
                // to offload (see xbr_packet::csum).
                for d in &out[..n] {
                    xbr_packet::csum::complete_partial(frames.bytes(d.addr, d.len));
                }
                n
            }
            Port::Internal(p) => p.recv(frames, out),
            Port::Vxlan(v) => v.recv(frames, out),
            Port::StandIn(_) => 0,
        }
    }

    #[inline]
    fn send(&mut self, frames: &mut UmemFrames, descs: &[Desc]) -> usize {
        match self {
            Port::Xsk(p) => p.send(descs),
            Port::Internal(p) => p.send(frames, descs),
            Port::Vxlan(v) => v.send(frames, descs),
            Port::StandIn(_) => 0,
        }
    }

    #[inline]
    fn maintain(&mut self, frames: &mut UmemFrames) {
        match self {
            Port::Xsk(p) => p.maintain(frames),
            Port::Internal(_) | Port::StandIn(_) => {}
            Port::Vxlan(v) => v.maintain(frames),
        }
    }

    fn poll_fds<'a>(&'a self, out: &mut Vec<BorrowedFd<'a>>) {
        match self {
            Port::Xsk(p) => p.poll_fds(out),
            Port::Internal(p) => out.push(p.tap.fd()),
            Port::Vxlan(v) => v.poll_fds(out),
            Port::StandIn(_) => {}
        }
    }

    fn io_rx_dropped(&self) -> u64 {
        match self {
            Port::Xsk(p) => p.io_rx_dropped(),
            Port::Vxlan(v) => v.uplink().io_rx_dropped(),
            Port::Internal(p) => p.oversize_dropped,
            Port::StandIn(_) => 0,
        }
    }

    fn is_host(&self) -> bool {
        match self {
            Port::Xsk(p) => p.host.is_some(),
            Port::Internal(_) => true,
            Port::Vxlan(_) => false,
            Port::StandIn(s) => s.host,
        }
    }

    fn xdp_ifindex(&self) -> Option<u32> {
        match self {
            Port::Xsk(p) => Some(p.ifindex()),
            // Entries for decapsulated frames are keyed by the uplink,
            // and encapsulating ones redirect to it.
            Port::Vxlan(v) => Some(v.uplink().ifindex()),
            Port::Internal(_) => None,
            Port::StandIn(s) => s.xdp_ifindex,
        }
    }

    fn xdp_redirect_target(&self) -> bool {
        match self {
            Port::Xsk(p) => p.redirect.target(),
            Port::Vxlan(v) => v.uplink().redirect.target(),
            Port::Internal(_) => false,
            Port::StandIn(s) => s.redirect.as_ref().is_some_and(|r| r.target()),
        }
    }

    fn xdp_redirect_frags(&self) -> bool {
        match self {
            Port::Xsk(p) => p.redirect.frags(),
            Port::Vxlan(v) => v.uplink().redirect.frags(),
            Port::Internal(_) => false,
            Port::StandIn(s) => s.redirect.as_ref().is_some_and(|r| r.frags()),
        }
    }

    fn tunnel(&self) -> Option<&VxlanTunnel> {
        match self {
            Port::Vxlan(v) => PortIo::<UmemFrames>::tunnel(v),
            Port::StandIn(s) => s.vxlan.as_ref(),
            _ => None,
        }
    }

    fn tunnel_mut(&mut self) -> Option<&mut VxlanTunnel> {
        match self {
            Port::Vxlan(v) => PortIo::<UmemFrames>::tunnel_mut(v),
            Port::StandIn(s) => s.vxlan.as_mut(),
            _ => None,
        }
    }
}

impl InternalPort {
    /// Reads frames into UMEM frames; one longer than a frame's room (a
    /// jumbo MTU) runs on into a jumbo block, where its head is then
    /// copied, so that short frames cost no copy. A frame that fills every
    /// buffer it was read into (cut by the device: longer than a block, or
    /// than a frame when no block was free) is dropped and counted.
    fn recv(&mut self, frames: &mut UmemFrames, out: &mut [Desc]) -> usize {
        let headroom = XDP_PACKET_HEADROOM as usize;
        let mut n = 0;
        while n < out.len() {
            let Some(base) = frames.pool.alloc() else {
                break;
            };
            let block = frames.pool.alloc_jumbo();
            let read = match block.and_then(|b| frames.pool.frame_and_block_mut(base, b)) {
                Some((frame, jumbo)) => {
                    let room = frame.len() - headroom;
                    let tail = &mut jumbo[headroom + room..];
                    let capacity = room + tail.len();
                    let got = self.tap.recv_split(&mut frame[headroom..], tail);
                    if let Ok(Some(len)) = got {
                        if len > room && len <= capacity {
                            jumbo[headroom..headroom + room].copy_from_slice(&frame[headroom..]);
                        }
                    }
                    got.map(|g| g.map(|len| (len, room, capacity)))
                }
                None => match frames.pool.frame_mut(base) {
                    Some((_, frame)) => {
                        let room = frame.len() - headroom;
                        let mut len = [0usize];
                        self.tap
                            .recv_burst(&mut [&mut frame[headroom..]], &mut len)
                            .map(|k| (k == 1).then_some((len[0], room, room)))
                    }
                    None => Ok(None),
                },
            };
            let (len, room, capacity) = match read {
                Ok(Some(got)) if got.0 > 0 => got,
                other => {
                    if let Err(e) = other {
                        self.log_error(&e);
                    }
                    frames.pool.free(base);
                    if let Some(b) = block {
                        frames.pool.free(b);
                    }
                    break;
                }
            };
            // The device cuts a frame to the buffers it is given and
            // reports what it copied: one that filled them all may have
            // been cut.
            let keep = if len >= capacity {
                self.oversize_dropped += 1;
                None
            } else if len <= room {
                Some(base)
            } else {
                block
            };
            for buf in [Some(base), block].into_iter().flatten() {
                if Some(buf) != keep {
                    frames.pool.free(buf);
                }
            }
            if let Some(at) = keep {
                out[n] = Desc {
                    addr: at + headroom as u64,
                    len: len as u32,
                };
                n += 1;
            }
        }
        n
    }

    fn send(&mut self, frames: &mut UmemFrames, descs: &[Desc]) -> usize {
        let mut taken = 0;
        for d in descs {
            let bytes = frames.bytes(d.addr, d.len);
            match self.tap.send_burst(&[&*bytes]) {
                Ok(1) => {}
                Ok(_) => break,
                Err(e) => {
                    // Not transient: the frame is dropped, not retried.
                    self.log_error(&e);
                }
            }
            frames.free(d.addr);
            taken += 1;
        }
        taken
    }

    fn log_error(&mut self, e: &TapError) {
        if !self.io_error_logged {
            tracing::warn!(port = %self.tap.name(), error = %e, "TAP I/O error");
            self.io_error_logged = true;
        }
    }
}

mod open;
pub(crate) use open::{change_redirect, set_redirect};
pub use open::{check_spec, open_one, open_ports, OpenedPorts};
