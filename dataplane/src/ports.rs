//! The bridge's ports as the engine sees them: AF_XDP sockets on existing
//! netdevs (`type=system`) and TAP devices xbr creates (`type=internal`),
//! all moving packets through frames of one shared UMEM.
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
//! Frame budget: each AF_XDP port lends up to `RING_SIZE` frames to its fill
//! ring and may have up to `RING_SIZE` in its TX ring; `SPARE_FRAMES` more
//! cover TAP reads, copies for multi-port output and the frames the engine
//! holds within a round.

use crate::bpf::{BpfError, XdpAttachMode, XdpModeRequest, XdpProgram};
use crate::config::{PortSpec, PortType};
use crate::control::PortMeta;
use crate::engine::{Desc, Frames, PortIo, BATCH};
use crate::netdev::{self, NetdevError};
use crate::tap::{TapError, TapPort};
use crate::vxlan::VxlanPort;
use crate::xsk::{FramePool, Umem, XdpDesc, XskConfig, XskError, XskSocket, XDP_PACKET_HEADROOM};
use std::os::fd::BorrowedFd;
use std::sync::Arc;
use thiserror::Error;

/// Entries in each ring of an AF_XDP port.
const RING_SIZE: u32 = 1024;
/// Frames beyond what the rings can hold.
const SPARE_FRAMES: u32 = 4096;
/// Bytes per frame: one page, so any MTU-1500 frame plus headroom fits.
const FRAME_SIZE: u32 = 4096;

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
        )
    }
}

/// The shared UMEM's free frames, as the engine's frame store.
pub struct UmemFrames {
    pool: FramePool,
    frame_size: u64,
}

impl UmemFrames {
    pub fn new(pool: FramePool) -> Self {
        let frame_size = u64::from(pool.umem().frame_size());
        UmemFrames { pool, frame_size }
    }

    pub fn pool_mut(&mut self) -> &mut FramePool {
        &mut self.pool
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

    #[inline]
    fn bytes(&mut self, addr: u64, len: u32) -> &mut [u8] {
        let offset = (addr % self.frame_size) as usize;
        match self.pool.frame_mut(addr) {
            Some(frame) => {
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
        (addr % self.frame_size) as u32
    }

    #[inline]
    fn copy(&mut self, src: Desc) -> Option<Desc> {
        self.pool.clone_packet(&xdp_desc(src)).map(|d| Desc {
            addr: d.addr,
            len: d.len,
        })
    }
}

/// A netdev attached through XDP and an AF_XDP socket on its queue 0.
pub struct XskPort {
    name: String,
    // Field order is drop order: the socket before the program, so the
    // XSKMAP entry goes away with the socket and then the program detaches.
    sock: Option<XskSocket>,
    prog: XdpProgram,
    /// A fatal kick error was logged (once per port, not per packet).
    tx_error_logged: bool,
}

/// A TAP device xbr created for an internal port.
pub struct InternalPort {
    tap: TapPort,
    io_error_logged: bool,
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
}

impl Port {
    /// Closes the port, returning to `frames` every frame its rings still
    /// held; the XDP program detaches or the TAP device is deleted as the
    /// value drops.
    pub fn close(self, frames: &mut UmemFrames) {
        match self {
            Port::Xsk(mut p) => {
                if let Some(sock) = p.sock.take() {
                    sock.close(&mut frames.pool);
                }
                tracing::debug!(port = %p.name, ifindex = p.prog.ifindex(), "detached");
            }
            Port::Internal(p) => {
                tracing::debug!(port = %p.tap.name(), "TAP device removed");
            }
            Port::Vxlan(v) => Port::Xsk(v.into_uplink()).close(frames),
        }
    }
}

impl PortIo<UmemFrames> for Port {
    #[inline]
    fn recv(&mut self, frames: &mut UmemFrames, out: &mut [Desc]) -> usize {
        match self {
            Port::Xsk(p) => {
                let n = p.recv(out);
                // A pod's veth hands over TCP/UDP checksums its kernel left
                // to offload (see csum.rs).
                for d in &out[..n] {
                    crate::csum::complete_partial(frames.bytes(d.addr, d.len));
                }
                n
            }
            Port::Internal(p) => p.recv(frames, out),
            Port::Vxlan(v) => v.recv(frames, out),
        }
    }

    #[inline]
    fn send(&mut self, frames: &mut UmemFrames, descs: &[Desc]) -> usize {
        match self {
            Port::Xsk(p) => p.send(descs),
            Port::Internal(p) => p.send(frames, descs),
            Port::Vxlan(v) => v.send(frames, descs),
        }
    }

    #[inline]
    fn maintain(&mut self, frames: &mut UmemFrames) {
        match self {
            Port::Xsk(p) => p.maintain(frames),
            Port::Internal(_) => {}
            Port::Vxlan(v) => v.maintain(frames),
        }
    }

    fn poll_fd(&self) -> Option<BorrowedFd<'_>> {
        match self {
            Port::Xsk(p) => p.sock.as_ref().map(|s| s.fd()),
            Port::Internal(p) => Some(p.tap.fd()),
            Port::Vxlan(v) => v.poll_fd(),
        }
    }

    fn is_tunnel(&self) -> bool {
        matches!(self, Port::Vxlan(_))
    }

    #[inline]
    fn decap(
        &mut self,
        frames: &mut UmemFrames,
        desc: Desc,
    ) -> Result<(Desc, crate::vxlan::TunnelMeta), crate::vxlan::TunnelDrop> {
        match self {
            Port::Vxlan(v) => v.decap(frames, desc),
            _ => Ok((desc, crate::vxlan::TunnelMeta::default())),
        }
    }

    #[inline]
    fn encap(
        &mut self,
        frames: &mut UmemFrames,
        desc: Desc,
        tun: crate::vxlan::TunnelMeta,
    ) -> Result<Desc, crate::vxlan::TunnelDrop> {
        match self {
            Port::Vxlan(v) => v.encap(frames, desc, tun),
            _ => Ok(desc),
        }
    }
}

/// The uplink of a VXLAN port: the same AF_XDP socket as a system port,
/// without checksum completion (frames from the wire are complete).
impl PortIo<UmemFrames> for XskPort {
    #[inline]
    fn recv(&mut self, _frames: &mut UmemFrames, out: &mut [Desc]) -> usize {
        XskPort::recv(self, out)
    }

    #[inline]
    fn send(&mut self, _frames: &mut UmemFrames, descs: &[Desc]) -> usize {
        XskPort::send(self, descs)
    }

    fn maintain(&mut self, frames: &mut UmemFrames) {
        XskPort::maintain(self, frames)
    }

    fn poll_fd(&self) -> Option<BorrowedFd<'_>> {
        self.sock.as_ref().map(|s| s.fd())
    }
}

impl XskPort {
    #[inline]
    fn recv(&mut self, out: &mut [Desc]) -> usize {
        let Some(sock) = self.sock.as_mut() else {
            return 0;
        };
        let mut ring = [XdpDesc::default(); BATCH];
        let want = out.len().min(BATCH);
        let n = sock.rx_burst(&mut ring[..want]);
        for (o, d) in out.iter_mut().zip(&ring[..n]) {
            *o = Desc {
                addr: d.addr,
                len: d.len,
            };
        }
        n
    }

    fn send(&mut self, descs: &[Desc]) -> usize {
        let Some(sock) = self.sock.as_mut() else {
            return 0;
        };
        let mut taken = 0;
        let mut ring = [XdpDesc::default(); BATCH];
        for chunk in descs.chunks(BATCH) {
            for (r, d) in ring.iter_mut().zip(chunk) {
                *r = xdp_desc(*d);
            }
            let n = sock.tx_burst(&ring[..chunk.len()]);
            taken += n;
            if n < chunk.len() {
                break;
            }
        }
        self.kick();
        taken
    }

    fn kick(&mut self) {
        let Some(sock) = self.sock.as_mut() else {
            return;
        };
        if let Err(e) = sock.kick_tx() {
            // ENETDOWN and the like: the frames stay queued and leave once
            // the link is back; say so once rather than per batch.
            if !self.tx_error_logged {
                tracing::warn!(port = %self.name, error = %e, "transmit stalled");
                self.tx_error_logged = true;
            }
        } else {
            self.tx_error_logged = false;
        }
    }

    fn maintain(&mut self, frames: &mut UmemFrames) {
        let Some(sock) = self.sock.as_mut() else {
            return;
        };
        sock.complete(&mut frames.pool);
        if sock.tx_pending() > 0 {
            // A kick that met EAGAIN left descriptors behind; retry it.
            self.kick();
        }
        let Some(sock) = self.sock.as_mut() else {
            return;
        };
        sock.refill(&mut frames.pool);
        if sock.needs_rx_wakeup() {
            let _ = sock.wake_rx();
        }
    }
}

impl InternalPort {
    fn recv(&mut self, frames: &mut UmemFrames, out: &mut [Desc]) -> usize {
        let headroom = XDP_PACKET_HEADROOM as usize;
        let mut n = 0;
        while n < out.len() {
            let Some(base) = frames.pool.alloc() else {
                break;
            };
            let got = match frames.pool.frame_mut(base) {
                Some(frame) => {
                    let mut len = [0usize];
                    self.tap
                        .recv_burst(&mut [&mut frame[headroom..]], &mut len)
                        .map(|k| (k == 1).then_some(len[0]))
                }
                None => Ok(None),
            };
            match got {
                Ok(Some(len)) if len > 0 => {
                    out[n] = Desc {
                        addr: base + headroom as u64,
                        len: len as u32,
                    };
                    n += 1;
                }
                Ok(_) => {
                    frames.pool.free(base);
                    break;
                }
                Err(e) => {
                    frames.pool.free(base);
                    self.log_error(&e);
                    break;
                }
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

/// Ports opened for a bridge, with the frame store they share.
pub struct OpenedPorts {
    pub frames: UmemFrames,
    pub ports: Vec<(Arc<PortMeta>, Port)>,
}

/// Opens every port of `specs` (whose ofports are assigned), or none.
pub fn open_ports(specs: &[PortSpec]) -> Result<OpenedPorts, PortError> {
    // Cheap checks first, so a typo in the last spec fails before anything
    // is attached.
    for spec in specs {
        netdev::validate_name(&spec.name).map_err(|source| PortError::Netdev {
            name: spec.name.clone(),
            source,
        })?;
        match (spec.port_type, netdev::link_by_name(&spec.name)) {
            (PortType::System, Err(NetdevError::NotFound(_))) => {
                return Err(PortError::NoSuchInterface(spec.name.clone()))
            }
            (PortType::System, Err(source)) => {
                return Err(PortError::Netdev {
                    name: spec.name.clone(),
                    source,
                })
            }
            (PortType::Internal, Ok(_)) => {
                return Err(PortError::InterfaceExists(spec.name.clone()))
            }
            _ => {}
        }
        if let Some(v) = &spec.vxlan {
            match netdev::link_by_name(&v.uplink) {
                Ok(_) => {}
                Err(NetdevError::NotFound(_)) => {
                    return Err(PortError::NoSuchUplink {
                        port: spec.name.clone(),
                        uplink: v.uplink.clone(),
                    })
                }
                Err(source) => {
                    return Err(PortError::Netdev {
                        name: v.uplink.clone(),
                        source,
                    })
                }
            }
        }
        if let Some(mtu) = spec.mtu_request {
            if !(68..=65535).contains(&mtu) {
                return Err(PortError::BadMtu {
                    name: spec.name.clone(),
                    mtu,
                });
            }
        }
    }

    let n_xsk = specs
        .iter()
        .filter(|s| matches!(s.port_type, PortType::System | PortType::Vxlan))
        .count() as u32;
    let n_frames = n_xsk * 2 * RING_SIZE + SPARE_FRAMES;
    let umem = Umem::new(n_frames, FRAME_SIZE, false).map_err(PortError::Umem)?;
    let mut frames = UmemFrames::new(FramePool::new(&umem).map_err(PortError::Umem)?);

    let mut ports: Vec<(Arc<PortMeta>, Port)> = Vec::with_capacity(specs.len());
    for spec in specs {
        match open_one(spec, &umem, &mut frames) {
            Ok(p) => ports.push(p),
            Err(e) => {
                for (_, port) in ports {
                    port.close(&mut frames);
                }
                return Err(e);
            }
        }
    }
    Ok(OpenedPorts { frames, ports })
}

fn open_one(
    spec: &PortSpec,
    umem: &Arc<Umem>,
    frames: &mut UmemFrames,
) -> Result<(Arc<PortMeta>, Port), PortError> {
    let name = spec.name.clone();
    let ofport = spec.ofport.unwrap_or(0);
    match spec.port_type {
        PortType::System => {
            let link = netdev::link_by_name(&name).map_err(|source| match source {
                NetdevError::NotFound(_) => PortError::NoSuchInterface(name.clone()),
                source => PortError::Netdev {
                    name: name.clone(),
                    source,
                },
            })?;
            let prog =
                XdpProgram::attach(link.ifindex, XdpModeRequest::Auto).map_err(|source| {
                    PortError::Xdp {
                        name: name.clone(),
                        source,
                    }
                })?;
            let port = open_xsk(&name, &link, prog, umem, frames)?;
            tracing::info!(port = %name, ofport, ifindex = link.ifindex, "attached");
            let meta = PortMeta::new(ofport, name, link.mac.unwrap_or_default());
            Ok((Arc::new(meta), Port::Xsk(port)))
        }
        PortType::Vxlan => {
            let (meta, port) = crate::vxlan::port::open(spec, umem, frames)?;
            Ok((meta, Port::Vxlan(port)))
        }
        PortType::Internal => {
            let tap_err = |source| PortError::Tap {
                name: name.clone(),
                source,
            };
            let mtu = spec.mtu_request.map(|m| m as u16);
            let tap = TapPort::create(&name, spec.mac, mtu).map_err(tap_err)?;
            let info = tap.info().map_err(tap_err)?;
            tracing::info!(port = %name, ofport, ifindex = tap.ifindex(), "internal port created");
            let meta = PortMeta::new(ofport, name, info.mac.unwrap_or_default());
            Ok((
                Arc::new(meta),
                Port::Internal(InternalPort {
                    tap,
                    io_error_logged: false,
                }),
            ))
        }
    }
}

/// Binds an AF_XDP socket to queue 0 of `link`, on the shared UMEM, and
/// points `prog`'s XSKMAP at it.
pub(crate) fn open_xsk(
    name: &str,
    link: &netdev::LinkInfo,
    prog: XdpProgram,
    umem: &Arc<Umem>,
    frames: &mut UmemFrames,
) -> Result<XskPort, PortError> {
    if link.rx_queues > 1 {
        tracing::warn!(
            port = %name,
            queues = link.rx_queues,
            "only rx queue 0 is served; steer traffic to it (ethtool -L {name} combined 1)"
        );
    }
    let xsk_err = |source| PortError::Xsk {
        name: name.to_string(),
        source,
    };
    let config = XskConfig {
        rx_size: RING_SIZE,
        tx_size: RING_SIZE,
        fill_size: RING_SIZE,
        comp_size: RING_SIZE,
        ..XskConfig::default()
    };
    let mut sock = XskSocket::bind(link.ifindex, 0, umem, &config).map_err(xsk_err)?;
    sock.refill(&mut frames.pool);
    if let Err(source) = prog.insert_socket(0, sock.fd()) {
        sock.close(&mut frames.pool);
        return Err(PortError::Xdp {
            name: name.to_string(),
            source,
        });
    }
    tracing::debug!(
        port = %name,
        xdp = match prog.mode() {
            XdpAttachMode::Native => "native",
            XdpAttachMode::Generic => "generic",
        },
        "AF_XDP socket bound"
    );
    Ok(XskPort {
        name: name.to_string(),
        sock: Some(sock),
        prog,
        tx_error_logged: false,
    })
}
