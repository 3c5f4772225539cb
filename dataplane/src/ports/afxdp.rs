//! A netdev attached through XDP with one AF_XDP socket per receive queue.
//!
//! # Design
//!
//! The port's XDP program redirects a frame to the XSKMAP entry of the
//! queue it arrived on (`ctx->rx_queue_index`); a queue without a socket
//! would hand its frames to the kernel instead (XDP_PASS), so a
//! multi-queue NIC whose RSS spreads flows over queues would see part of
//! its traffic bypass the switch. Every receive queue the device has
//! therefore gets its own socket, up to [`MAX_QUEUES`]; all of them share
//! the bridge's UMEM (each with its own fill and completion rings), so a
//! frame received on any queue can be sent on any port without a copy.
//!
//! Receive visits the sockets round-robin, starting one further each call,
//! so a busy queue cannot starve the others. Transmit always uses the
//! queue 0 socket: one TX ring per port keeps the kick (one `sendto()` per
//! batch) and completion handling as with a single queue, and the kernel
//! picks the device's transmit queue itself.
//!
//! Frame budget: a socket first lends the kernel its share of the UMEM
//! ([`ring_size`] frames: with several queues the shares are smaller, so a
//! 16-queue NIC holds about as many frames as a 4-queue one). Its RX and
//! fill rings are deeper ([`rx_ring_size`]), and a busy socket's grant
//! grows into them (see `xsk::umem::FillGrant`): senders stall and then
//! burst (measured here: a generator paced at 150 kpps lost 48% of its
//! frames at a 1024-deep ring and 15% at 2048, as Open vSwitch, whose
//! rings are 2048 deep, did in the same conditions), while idle ports pin
//! only their share of frames. Deeper still would absorb more and queue
//! more: 4096 lost nothing at that rate but held frames for milliseconds.
//!
//! Concurrency: owned and driven by the engine thread only.

use super::{xdp_desc, PortError, UmemFrames};
use crate::engine::{Desc, PortIo, BATCH};
use crate::fastpath::loader::{XdpAttachMode, XdpProgram};
use crate::netdev;
use crate::xsk::{Umem, XdpDesc, XskConfig, XskError, XskSocket};
use std::os::fd::BorrowedFd;
use std::sync::Arc;

/// Frames a single-queue port is sized for (its TX and completion rings,
/// and its fill ring's first grant).
pub(super) const RING_SIZE: u32 = 1024;
/// RX and fill ring depth of a single-queue port.
const RX_RING_SIZE: u32 = 2048;
/// Smallest ring of a socket on a many-queue port.
const MIN_RING_SIZE: u32 = 256;
/// Receive queues served per port (the XDP program's XSKMAP holds 256).
pub const MAX_QUEUES: u32 = 16;

/// Ring size of each socket of a port with `queues` sockets: the
/// single-queue size shared out, but never below [`MIN_RING_SIZE`].
pub(super) fn ring_size(queues: u32) -> u32 {
    (RING_SIZE / queues.max(1).next_power_of_two()).max(MIN_RING_SIZE)
}

/// RX and fill ring depth of each socket of a port with `queues` sockets.
pub(super) fn rx_ring_size(queues: u32) -> u32 {
    (RX_RING_SIZE / queues.max(1).next_power_of_two()).max(MIN_RING_SIZE)
}

/// Sockets opened for a device with `rx_queues` receive queues.
pub(super) fn queues_served(rx_queues: u32) -> u32 {
    rx_queues.clamp(1, MAX_QUEUES)
}

/// A netdev attached through XDP, with an AF_XDP socket per receive queue.
pub struct XskPort {
    name: String,
    // Field order is drop order: the transmit thread's hold on the TX
    // socket first (no kick after it), the sockets before the program, so
    // the XSKMAP entries go away with the sockets and then the program
    // detaches.
    /// The transmit thread that kicks the TX socket (`--pmd-cores`, see
    /// `crate::kicker`); `None`: the packet thread kicks it itself.
    tx_kick: Option<crate::kicker::TxKick>,
    /// Index = queue id; never empty while the port is open.
    socks: Vec<XskSocket>,
    prog: XdpProgram,
    /// The socket the next `recv` starts with.
    next_rx: usize,
    /// Whether XDP flow cache entries may redirect to this port now (and
    /// with frames in several buffers), shared with its `PortMeta`.
    pub(crate) redirect: Arc<super::redirect::Readiness>,
    /// For `xdp_redirect=auto`: the device followed while the port lives.
    pub(crate) redirect_watch: Option<super::redirect::watch::Registration>,
    /// A fatal kick error was logged (once per port, not per packet).
    tx_error_logged: bool,
    /// For an internal port's veth backend, the pair, deleted when the
    /// port drops; last, so the sockets and program go first.
    pub(crate) host: Option<crate::hostveth::HostVeth>,
}

impl XskPort {
    pub(super) fn close(mut self, frames: &mut UmemFrames) {
        self.release(frames);
        tracing::debug!(port = %self.name, ifindex = self.prog.ifindex(), "detached");
    }

    /// Closes the sockets, giving back to `frames` every frame their rings
    /// held; the port then receives and sends nothing.
    fn release(&mut self, frames: &mut UmemFrames) {
        self.log_socket_counters();
        // No kick may run once the rings' frames are taken back.
        self.tx_kick = None;
        for sock in self.socks.drain(..) {
            sock.close(&mut frames.pool);
        }
    }

    /// What each socket moved and what the kernel dropped on it: the
    /// kernel's drops (RX ring full, fill ring empty) are invisible in the
    /// port's own counters, and are the first thing to read when a port
    /// loses traffic.
    fn log_socket_counters(&self) {
        for (queue, sock) in self.socks.iter().enumerate() {
            let c = sock.counters();
            let k = sock.statistics().unwrap_or_default();
            tracing::info!(
                port = %self.name,
                queue,
                rx_packets = c.rx_packets,
                tx_completed = c.tx_completed,
                tx_kicks = c.tx_kicks,
                tx_kick_retries = c.tx_kick_retries,
                rx_wakeups = c.rx_wakeups,
                fill_grant = sock.fill_grant(),
                rx_multi_buffer = c.rx_multi_buffer,
                rx_multi_buffer_dropped = c.rx_multi_buffer_dropped,
                kernel_rx_dropped = k.rx_dropped,
                kernel_rx_ring_full = k.rx_ring_full,
                kernel_fill_ring_empty = k.rx_fill_ring_empty_descs,
                kernel_tx_ring_empty = k.tx_ring_empty_descs,
                kernel_invalid = k.rx_invalid_descs + k.tx_invalid_descs,
                "AF_XDP socket"
            );
        }
    }

    /// What was dropped on the way to the packet thread: the sockets'
    /// XDP_STATISTICS `rx_dropped` (no frame in the fill ring, among
    /// others) and `rx_ring_full`, and packets received in several
    /// descriptors that no jumbo block could hold.
    pub(crate) fn io_rx_dropped(&self) -> u64 {
        self.socks
            .iter()
            .map(|s| {
                let kernel = s.statistics().map_or(0, |k| k.rx_dropped + k.rx_ring_full);
                kernel + s.counters().rx_multi_buffer_dropped
            })
            .sum()
    }

    /// Closes the sockets away from the packet thread, returning the
    /// frames their rings held (for that thread's pool).
    pub(super) fn close_detached(mut self) -> Vec<u64> {
        self.tx_kick = None;
        let mut frames = Vec::new();
        for sock in self.socks.drain(..) {
            sock.close_with(|a| frames.push(a));
        }
        frames
    }

    /// Leaves the TX socket's kicks to a transmit thread of `pool`.
    pub(crate) fn offload_kicks(&mut self, pool: &crate::kicker::KickPool) {
        if let Some(sock) = self.socks.first() {
            self.tx_kick = pool.assign(&self.name, sock.shared_fd());
        }
    }

    /// The CPU of the transmit thread kicking this port, if one does.
    pub(crate) fn kick_cpu(&self) -> Option<usize> {
        self.tx_kick.as_ref().map(crate::kicker::TxKick::cpu)
    }

    pub(super) fn ifindex(&self) -> u32 {
        self.prog.ifindex()
    }

    /// Receive queues with a socket.
    pub fn queues(&self) -> usize {
        self.socks.len()
    }

    /// RX ring depth of each queue's socket.
    pub fn rx_ring_sizes(&self) -> Vec<u32> {
        self.socks.iter().map(XskSocket::rx_ring_size).collect()
    }

    #[inline]
    pub(super) fn recv(&mut self, frames: &mut UmemFrames, out: &mut [Desc]) -> usize {
        let n_socks = self.socks.len();
        let want = out.len().min(BATCH);
        let mut ring = [XdpDesc::default(); BATCH];
        let mut got = 0;
        for i in 0..n_socks {
            if got == want {
                break;
            }
            let q = (self.next_rx + i) % n_socks;
            let n = self.socks[q].recv(&mut frames.pool, &mut ring[..want - got]);
            for (o, d) in out[got..].iter_mut().zip(&ring[..n]) {
                *o = Desc {
                    addr: d.addr,
                    len: d.len,
                };
            }
            got += n;
        }
        if n_socks > 1 {
            self.next_rx = (self.next_rx + 1) % n_socks;
        }
        got
    }

    pub(super) fn send(&mut self, descs: &[Desc]) -> usize {
        let Some(sock) = self.socks.first_mut() else {
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
        let Some(sock) = self.socks.first_mut() else {
            return;
        };
        if let Some(k) = &self.tx_kick {
            // A late transmit thread is not waited for: this thread kicks.
            if sock.tx_pending() == 0 || !sock.tx_needs_kick() || k.request() {
                return;
            }
        }
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

    pub(super) fn maintain(&mut self, frames: &mut UmemFrames) {
        let mut retry_kick = false;
        for sock in &mut self.socks {
            sock.complete(&mut frames.pool);
            // A kick that met EAGAIN left descriptors behind; retry it.
            retry_kick |= sock.tx_pending() > 0;
            sock.refill(&mut frames.pool);
            if sock.needs_rx_wakeup() {
                let _ = sock.wake_rx();
            }
        }
        if retry_kick {
            self.kick();
        }
    }

    pub(super) fn poll_fds<'a>(&'a self, out: &mut Vec<BorrowedFd<'a>>) {
        out.extend(self.socks.iter().map(|s| s.fd()));
    }
}

/// The uplink of a VXLAN port: the same AF_XDP sockets as a system port,
/// without checksum completion (frames from the wire are complete).
impl PortIo<UmemFrames> for XskPort {
    #[inline]
    fn recv(&mut self, frames: &mut UmemFrames, out: &mut [Desc]) -> usize {
        XskPort::recv(self, frames, out)
    }

    #[inline]
    fn send(&mut self, _frames: &mut UmemFrames, descs: &[Desc]) -> usize {
        XskPort::send(self, descs)
    }

    fn maintain(&mut self, frames: &mut UmemFrames) {
        XskPort::maintain(self, frames)
    }

    fn poll_fds<'a>(&'a self, out: &mut Vec<BorrowedFd<'a>>) {
        XskPort::poll_fds(self, out)
    }
}

/// Binds an AF_XDP socket to each receive queue of `link` (up to
/// [`MAX_QUEUES`]), on the shared UMEM, and points `prog`'s XSKMAP at them.
///
/// The fill rings stay empty until the packet thread's first round
/// (`maintain`) tops them up, so a port can be opened off that thread; an
/// unused socket has lent no frame and may simply drop.
pub(crate) fn open_xsk(
    name: &str,
    link: &netdev::LinkInfo,
    prog: XdpProgram,
    umem: &Arc<Umem>,
) -> Result<XskPort, PortError> {
    let wanted = queues_served(link.rx_queues);
    if link.rx_queues > MAX_QUEUES {
        tracing::warn!(
            port = %name,
            queues = link.rx_queues,
            served = MAX_QUEUES,
            "receive queues beyond {MAX_QUEUES} are not served; their traffic goes to the kernel \
             (ethtool -L {name} combined {MAX_QUEUES})"
        );
    }
    let mut socks = bind_queues(name, link.ifindex, &prog, umem, wanted)?;
    let served = socks.len() as u32;
    if served < wanted && socket_config(served).rx_size != socket_config(wanted).rx_size {
        // The device allocated more queues than it uses (a veth has one
        // per CPU, one in use): rings sized for the allocation would give
        // the queues in use a fraction of their depth. The sockets have
        // lent no frame yet, so they can simply be bound again.
        drop(socks);
        socks = bind_queues(name, link.ifindex, &prog, umem, served)?;
    }
    tracing::debug!(
        port = %name,
        queues = socks.len(),
        xdp = match prog.mode() {
            XdpAttachMode::Native => "native",
            XdpAttachMode::Generic => "generic",
        },
        "AF_XDP sockets bound"
    );
    Ok(XskPort {
        name: name.to_string(),
        socks,
        prog,
        next_rx: 0,
        tx_kick: None,
        tx_error_logged: false,
        redirect: Arc::new(super::redirect::Readiness::never()),
        redirect_watch: None,
        host: None,
    })
}

/// Ring sizes of each socket of a port serving `queues` queues.
fn socket_config(queues: u32) -> XskConfig {
    let ring = ring_size(queues);
    let rx_ring = rx_ring_size(queues);
    XskConfig {
        rx_size: rx_ring,
        tx_size: ring,
        fill_size: rx_ring,
        fill_grant: ring,
        comp_size: ring,
        ..XskConfig::default()
    }
}

/// Binds sockets to queues `0..wanted` of `ifindex`, sized for `wanted`
/// queues, and points `prog`'s XSKMAP at them; stops at the first queue
/// past 0 that does not exist.
fn bind_queues(
    name: &str,
    ifindex: u32,
    prog: &XdpProgram,
    umem: &Arc<Umem>,
    wanted: u32,
) -> Result<Vec<XskSocket>, PortError> {
    let config = socket_config(wanted);
    let mut socks: Vec<XskSocket> = Vec::with_capacity(wanted as usize);
    for queue in 0..wanted {
        let sock = match bind_retrying(ifindex, queue, umem, &config) {
            Ok(s) => s,
            // The netlink queue count is what the device allocated; fewer
            // may be in use (ethtool -L). Binding beyond them fails: serve
            // the ones that exist.
            Err(e) if queue > 0 && is_no_such_queue(&e) => {
                tracing::debug!(port = %name, queue, "no such queue; serving {queue}");
                break;
            }
            Err(source) => {
                return Err(PortError::Xsk {
                    name: name.to_string(),
                    source,
                })
            }
        };
        if let Err(source) = prog.insert_socket(queue, sock.fd()) {
            return Err(PortError::Xdp {
                name: name.to_string(),
                source,
            });
        }
        socks.push(sock);
    }
    Ok(socks)
}

/// How long a bind may wait for the kernel to release a queue that a
/// just-closed socket held.
const REBIND_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// `XskSocket::bind`, retried while it fails with EBUSY: the kernel
/// releases a closed socket's hold on the device queue asynchronously, so
/// a port removed and added again at once (`del-port` then `add-port`)
/// can find the queue still taken for a moment.
fn bind_retrying(
    ifindex: u32,
    queue: u32,
    umem: &Arc<Umem>,
    config: &XskConfig,
) -> Result<XskSocket, XskError> {
    let deadline = std::time::Instant::now() + REBIND_WAIT;
    loop {
        match XskSocket::bind(ifindex, queue, umem, config) {
            Err(XskError::Io { source, .. })
                if source.raw_os_error() == Some(libc::EBUSY)
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => return other,
        }
    }
}

fn is_no_such_queue(e: &XskError) -> bool {
    matches!(e, XskError::Io { op: "bind(AF_XDP)", source } if source.raw_os_error() == Some(libc::EINVAL))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rings_shrink_with_queues_but_not_below_the_floor() {
        assert_eq!(ring_size(1), RING_SIZE);
        assert_eq!(ring_size(2), 512);
        assert_eq!(ring_size(3), 256);
        assert_eq!(ring_size(16), MIN_RING_SIZE);
        assert_eq!(ring_size(0), RING_SIZE);
        // RX rings are deeper than a port's share of frames, down to the
        // same floor.
        assert_eq!(rx_ring_size(1), 2048);
        assert_eq!(rx_ring_size(2), 1024);
        assert_eq!(rx_ring_size(16), MIN_RING_SIZE);
        for q in 1..=MAX_QUEUES {
            assert!(rx_ring_size(q) >= ring_size(q));
        }
    }

    #[test]
    fn queues_served_are_bounded() {
        assert_eq!(queues_served(0), 1);
        assert_eq!(queues_served(1), 1);
        assert_eq!(queues_served(8), 8);
        assert_eq!(queues_served(64), MAX_QUEUES);
    }
}
