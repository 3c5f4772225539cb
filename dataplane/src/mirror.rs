//! Port mirroring: OVSDB `Mirror` rows and `xbr capture`'s temporary
//! mirrors, as the packet threads carry them out.
//!
//! # Design
//!
//! A [`Mirror`] selects frames by port name (`select_all`, frames
//! received on `src` ports, frames output to `dst` ports) and sends a copy
//! of each to its [`Sink`]: a bridge port's device (`output_port`), or an
//! `xbr capture` process's socket. A sink is one file descriptor
//! written with `send(2)` (`MSG_DONTWAIT`) straight from the frame in the
//! packet memory: no frame is taken from the forwarding budget, nothing is
//! allocated, and a full sink drops the copy and counts it
//! (`dropped`) instead of stalling the packet thread.
//!
//! A capture's sink is a unix datagram socket (one frame per datagram)
//! bound to `@NAME.tx` ([`capture_sender_name`]) and connected to the
//! capture's `@NAME`, which connects back to it. Two datagram sockets
//! connected to each other are not held to the kernel's
//! `net.unix.max_dgram_qlen` (10 datagrams by default, whatever the
//! buffers: a capture socket connected to nobody dropped copies of any
//! burst); what bounds the copies waiting for the reader is then the
//! sink's send buffer ([`CAPTURE_SNDBUF`], some thousands of frames), so
//! a reader that keeps up loses none to a burst, and a full buffer still
//! drops copies and counts them. Connected back, the capture's socket
//! also takes datagrams from the bridge's sink alone.
//!
//! A port sink is an `AF_PACKET` socket bound to the port's device, so the
//! copy crosses the kernel's transmit path and the device's packet taps
//! (`tcpdump -i`, which is what `ovs-tcpdump` runs on its mirror port) see
//! it; AF_XDP's transmit would bypass them.
//!
//! The control plane (OVSDB, the control socket) replaces the bridge's
//! list of mirrors in [`Mirrors`] and bumps its generation; each packet
//! thread compares the generation once per round and, when it moved, takes
//! the list (a `try_lock` per change, never per packet: a busy list is
//! taken next round, so the thread never waits) and recomputes
//! each port's masks: bit `i` set when mirror `i` selects the port. Per
//! packet, the thread keeps the mask of mirrors it already copied the
//! packet to, so a packet reaches each mirror once, as in OVS. At most
//! [`MAX_MIRRORS`] (OVS's limit) mirrors per bridge, OVSDB's first.

use nix::errno::Errno;
use nix::sys::socket::{self, AddressFamily, MsgFlags, SockFlag, SockType};
use std::collections::BTreeSet;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use thiserror::Error;

/// Mirrors per bridge (OVS's `MAX_MIRRORS`): a port's selection is a
/// 32-bit mask.
pub const MAX_MIRRORS: usize = 32;

/// The send buffer asked for a capture's sink: the bound on the copies
/// waiting for the `xbr capture` process (the kernel doubles it for its
/// bookkeeping and charges each copy its buffer's true size, about 1 KiB
/// for a small frame: some thousands of frames). Above `wmem_max` it is
/// forced where xbr may (`CAP_NET_ADMIN`), else capped there.
pub const CAPTURE_SNDBUF: usize = 8 << 20;

#[derive(Debug, Error)]
pub enum MirrorError {
    #[error("output port {0}: no such device")]
    NoDevice(String),
    #[error("output port {dev}: {source}")]
    Socket { dev: String, source: Errno },
    #[error("capture socket {path}: {source}")]
    Capture {
        path: String,
        source: std::io::Error,
    },
    #[error("too many mirrors on the bridge (at most {MAX_MIRRORS})")]
    TooMany,
    #[error("no mirror named {0}")]
    NotFound(String),
}

/// Which frames a mirror copies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    pub all: bool,
    /// Frames received on these ports.
    pub src: BTreeSet<String>,
    /// Frames output to these ports.
    pub dst: BTreeSet<String>,
}

/// The abstract name a capture's sink for the capture bound to `name`
/// is bound to, for the capture to connect back to.
pub fn capture_sender_name(name: &str) -> String {
    format!("{name}.tx")
}

/// Where a mirror's copies go: a file descriptor `send(2)` writes whole
/// frames to.
pub struct Sink {
    fd: OwnedFd,
    /// The other end is gone (a capture that exited): nothing is sent.
    dead: AtomicBool,
}

impl Sink {
    /// An `AF_PACKET` socket that transmits on device `dev` and receives
    /// nothing (protocol 0).
    pub fn device(dev: &str) -> Result<Sink, MirrorError> {
        let err = |source| MirrorError::Socket {
            dev: dev.to_string(),
            source,
        };
        // The device's link-layer address as the kernel reports it
        // (family AF_PACKET, its ifindex): what bind(2) needs.
        let addr = nix::ifaddrs::getifaddrs()
            .map_err(err)?
            .filter(|a| a.interface_name == dev)
            .find_map(|a| a.address.and_then(|s| s.as_link_addr().copied()))
            .ok_or_else(|| MirrorError::NoDevice(dev.to_string()))?;
        let fd = socket::socket(
            AddressFamily::Packet,
            SockType::Raw,
            SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
            None,
        )
        .map_err(err)?;
        socket::bind(fd.as_raw_fd(), &addr).map_err(err)?;
        Ok(Sink {
            fd,
            dead: AtomicBool::new(false),
        })
    }

    /// A datagram socket bound to [`capture_sender_name`]`(name)` and
    /// connected to `name` in the abstract namespace, where an `xbr
    /// capture` process reads one frame per datagram once it connected
    /// back (see the module documentation).
    pub fn capture_abstract(name: &str) -> Result<Sink, MirrorError> {
        use std::os::linux::net::SocketAddrExt;
        use std::os::unix::net::{SocketAddr, UnixDatagram};
        let err = |source| MirrorError::Capture {
            path: format!("@{name}"),
            source,
        };
        let own = SocketAddr::from_abstract_name(capture_sender_name(name)).map_err(err)?;
        let peer = SocketAddr::from_abstract_name(name).map_err(err)?;
        let s = UnixDatagram::bind_addr(&own).map_err(err)?;
        if socket::setsockopt(&s, socket::sockopt::SndBufForce, &CAPTURE_SNDBUF).is_err() {
            socket::setsockopt(&s, socket::sockopt::SndBuf, &CAPTURE_SNDBUF)
                .map_err(|e| err(e.into()))?;
        }
        s.connect_addr(&peer).map_err(err)?;
        s.set_nonblocking(true).map_err(err)?;
        Ok(Sink {
            fd: s.into(),
            dead: AtomicBool::new(false),
        })
    }

    /// Sends one copy; false if it was not sent.
    fn send(&self, frame: &[u8]) -> bool {
        if self.dead.load(Relaxed) {
            return false;
        }
        match socket::send(self.fd.as_raw_fd(), frame, MsgFlags::MSG_DONTWAIT) {
            Ok(_) => true,
            Err(
                Errno::ECONNREFUSED
                | Errno::ECONNRESET
                | Errno::EPIPE
                | Errno::ENOENT
                | Errno::ENOTCONN
                | Errno::ENXIO
                | Errno::ENODEV,
            ) => {
                self.dead.store(true, Relaxed);
                false
            }
            Err(_) => false,
        }
    }

    pub fn is_dead(&self) -> bool {
        self.dead.load(Relaxed)
    }
}

/// One mirror as the packet threads use it.
pub struct Mirror {
    pub name: String,
    pub select: Selection,
    /// The bridge port the copies go to (OVSDB's `output_port`), whose
    /// own traffic NORMAL leaves alone; `None` for a capture.
    pub output_port: Option<String>,
    sink: Sink,
    /// Shared with the mirror this one replaced, when the same row
    /// changed (OVS keeps a row's statistics across changes).
    pub counters: Arc<MirrorCounters>,
}

/// A mirror's counts; the packet threads add to them with relaxed atomic
/// adds (mirroring costs a system call per copy anyway).
#[derive(Default, Debug)]
pub struct MirrorCounters {
    pub tx_packets: AtomicU64,
    pub tx_bytes: AtomicU64,
    /// Copies a full or gone sink did not take.
    pub dropped: AtomicU64,
}

impl Mirror {
    pub fn new(name: String, select: Selection, output_port: Option<String>, sink: Sink) -> Self {
        Mirror {
            name,
            select,
            output_port,
            sink,
            counters: Arc::default(),
        }
    }

    /// Counts into `counters` (see the field). Before it is published.
    pub fn with_counters(mut self, counters: Arc<MirrorCounters>) -> Self {
        self.counters = counters;
        self
    }

    /// Sends a copy of `frame` to the mirror's sink, counting it; false
    /// once the sink's reader is gone.
    pub fn copy(&self, frame: &[u8]) -> bool {
        let c = &self.counters;
        if self.sink.send(frame) {
            c.tx_packets.fetch_add(1, Relaxed);
            c.tx_bytes.fetch_add(frame.len() as u64, Relaxed);
            true
        } else {
            c.dropped.fetch_add(1, Relaxed);
            !self.sink.is_dead()
        }
    }

    pub fn sink_dead(&self) -> bool {
        self.sink.is_dead()
    }
}

#[derive(Default)]
struct Lists {
    db: Vec<Arc<Mirror>>,
    captures: Vec<Arc<Mirror>>,
    all: Arc<[Arc<Mirror>]>,
}

/// A bridge's mirrors: OVSDB's and the captures', shared by the control
/// plane (writer) and the packet threads (readers, once per change).
#[derive(Default)]
pub struct Mirrors {
    generation: AtomicU64,
    lists: Mutex<Lists>,
}

impl Mirrors {
    /// Bumped by every change.
    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Every mirror, OVSDB's first; bit `i` of a port mask is entry `i`.
    pub fn snapshot(&self) -> Arc<[Arc<Mirror>]> {
        self.lock().all.clone()
    }

    /// [`Mirrors::snapshot`] for the packet threads: `None` while the
    /// control plane holds the list (they try again next round, never
    /// wait).
    pub fn try_snapshot(&self) -> Option<Arc<[Arc<Mirror>]>> {
        match self.lists.try_lock() {
            Ok(l) => Some(l.all.clone()),
            Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner().all.clone()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lists> {
        self.lists.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn publish(&self, l: &mut Lists) {
        l.all = l.db.iter().chain(&l.captures).cloned().collect();
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::Release);
    }

    /// Replaces OVSDB's mirrors (at most [`MAX_MIRRORS`], the caller
    /// checks); captures keep what room is left.
    pub fn set_db(&self, mirrors: Vec<Arc<Mirror>>) {
        let mut l = self.lock();
        l.db = mirrors;
        let room = MAX_MIRRORS.saturating_sub(l.db.len());
        l.captures.truncate(room);
        self.publish(&mut l);
    }

    /// OVSDB's mirrors as last set.
    pub fn db(&self) -> Vec<Arc<Mirror>> {
        self.lock().db.clone()
    }

    /// Adds a capture's mirror; captures whose reader is gone are dropped
    /// first.
    pub fn add_capture(&self, m: Mirror) -> Result<(), MirrorError> {
        let mut l = self.lock();
        l.captures.retain(|c| !c.sink_dead());
        if l.db.len() + l.captures.len() >= MAX_MIRRORS {
            return Err(MirrorError::TooMany);
        }
        l.captures.push(Arc::new(m));
        self.publish(&mut l);
        Ok(())
    }

    /// Removes the captures whose reader is gone (the packet thread calls
    /// it once, when a copy finds that out); false if the list was busy
    /// (the caller tries again later rather than wait).
    pub fn reap(&self) -> bool {
        let mut l = match self.lists.try_lock() {
            Ok(l) => l,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return false,
        };
        let before = l.captures.len();
        l.captures.retain(|c| !c.sink_dead());
        if l.captures.len() != before {
            tracing::info!("capture ended without stopping: its mirror removed");
            self.publish(&mut l);
        }
        true
    }

    /// Removes capture `name`; returns its copies sent and dropped.
    pub fn remove_capture(&self, name: &str) -> Result<(u64, u64), MirrorError> {
        let mut l = self.lock();
        let i = l
            .captures
            .iter()
            .position(|c| c.name == name)
            .ok_or_else(|| MirrorError::NotFound(name.to_string()))?;
        let m = l.captures.remove(i);
        self.publish(&mut l);
        let c = &m.counters;
        Ok((c.tx_packets.load(Relaxed), c.dropped.load(Relaxed)))
    }
}

/// The mirrors' lines of `xbr stats` (none without mirrors): copies sent
/// and dropped (a full or gone sink), per mirror.
pub fn report(mirrors: &[Arc<Mirror>]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    if mirrors.is_empty() {
        return out;
    }
    let _ = writeln!(out, "mirrors:");
    for m in mirrors {
        let c = &m.counters;
        let _ = writeln!(
            out,
            "  {} (to {}): tx packets: {}, bytes: {}, dropped: {}",
            m.name,
            m.output_port.as_deref().unwrap_or("a capture"),
            c.tx_packets.load(Relaxed),
            c.tx_bytes.load(Relaxed),
            c.dropped.load(Relaxed),
        );
    }
    out
}

/// A port's part in the mirrors, as a packet thread computes it.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct PortMirrors {
    /// Mirrors copying what the port receives.
    pub src: u32,
    /// Mirrors copying what is output to the port.
    pub dst: u32,
    /// The port is a mirror's output port.
    pub output: bool,
}

impl PortMirrors {
    pub fn of(port: &str, mirrors: &[Arc<Mirror>]) -> Self {
        let mut p = PortMirrors::default();
        for (i, m) in mirrors.iter().take(MAX_MIRRORS).enumerate() {
            let bit = 1u32 << i;
            if m.select.all || m.select.src.contains(port) {
                p.src |= bit;
            }
            if m.select.all || m.select.dst.contains(port) {
                p.dst |= bit;
            }
            p.output |= m.output_port.as_deref() == Some(port);
        }
        p
    }

    /// Whether the port's traffic must stay off the XDP flow cache.
    pub fn any(&self) -> bool {
        self.src != 0 || self.dst != 0 || self.output
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixDatagram;

    fn sink() -> (Sink, UnixDatagram) {
        let (a, b) = UnixDatagram::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        (
            Sink {
                fd: a.into(),
                dead: AtomicBool::new(false),
            },
            b,
        )
    }

    #[test]
    fn masks_follow_the_selection_and_copies_are_counted() {
        let (s, rx) = sink();
        let sel = Selection {
            all: false,
            src: ["a".to_string()].into(),
            dst: ["b".to_string()].into(),
        };
        let m = Arc::new(Mirror::new("m".into(), sel, Some("o".into()), s));
        let list = vec![m.clone()];
        assert_eq!(PortMirrors::of("a", &list).src, 1);
        assert_eq!(PortMirrors::of("a", &list).dst, 0);
        assert_eq!(PortMirrors::of("b", &list).dst, 1);
        assert!(PortMirrors::of("o", &list).output);
        assert!(!PortMirrors::of("c", &list).any());
        assert!(m.copy(&[1, 2, 3]));
        let mut buf = [0u8; 16];
        assert_eq!(rx.recv(&mut buf).unwrap(), 3);
        assert_eq!(m.counters.tx_packets.load(Relaxed), 1);
        assert_eq!(m.counters.tx_bytes.load(Relaxed), 3);
        drop(rx);
        assert!(!m.copy(&[1]));
        assert_eq!(m.counters.dropped.load(Relaxed), 1);
    }

    /// A capture's sink, once the capture connected back, holds a burst
    /// far past `net.unix.max_dgram_qlen` (10) for a reader that has not
    /// read yet, frame by frame; before, the queue stops at that length.
    #[test]
    fn a_capture_sink_holds_a_burst_for_its_reader() {
        use std::os::linux::net::SocketAddrExt;
        use std::os::unix::net::SocketAddr;
        let name = format!("xbr-mirror-test-{}", std::process::id());
        let reader =
            UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(&name).unwrap()).unwrap();
        let m = Mirror::new(
            "c".into(),
            Selection::default(),
            None,
            Sink::capture_abstract(&name).unwrap(),
        );
        let qlen: u64 = std::fs::read_to_string("/proc/sys/net/unix/max_dgram_qlen")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(10);
        // Not connected back: held to the queue length.
        while m.counters.dropped.load(Relaxed) == 0 {
            assert!(m.copy(&[0; 60]));
            let sent = m.counters.tx_packets.load(Relaxed);
            assert!(sent <= qlen + 1, "{sent} copies queued past {qlen}");
        }
        let mut buf = [0u8; 128];
        reader.set_nonblocking(true).unwrap();
        while reader.recv(&mut buf).is_ok() {}
        // Connected back: a burst of many times that waits for the reader.
        let sender = SocketAddr::from_abstract_name(capture_sender_name(&name)).unwrap();
        reader.connect_addr(&sender).unwrap();
        const BURST: usize = 300;
        for i in 0..BURST {
            m.copy(&[i as u8; 60]);
        }
        assert_eq!(
            m.counters.dropped.load(Relaxed),
            1,
            "dropped from the burst"
        );
        for i in 0..BURST {
            let n = reader.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], &[i as u8; 60][..], "frame {i}");
        }
        drop(reader);
        assert!(!m.copy(&[1]));
        assert!(m.sink_dead());
    }

    #[test]
    fn captures_are_bounded_and_removed_by_name() {
        let ms = Mirrors::default();
        let mut readers = Vec::new();
        for i in 0..MAX_MIRRORS {
            let (s, r) = sink();
            readers.push(r);
            ms.add_capture(Mirror::new(format!("c{i}"), Selection::default(), None, s))
                .unwrap();
        }
        let (s, _r) = sink();
        let g = ms.generation();
        assert!(matches!(
            ms.add_capture(Mirror::new("x".into(), Selection::default(), None, s)),
            Err(MirrorError::TooMany)
        ));
        assert_eq!(ms.generation(), g);
        ms.remove_capture("c3").unwrap();
        assert_eq!(ms.snapshot().len(), MAX_MIRRORS - 1);
        assert!(matches!(
            ms.remove_capture("c3"),
            Err(MirrorError::NotFound(_))
        ));
    }
}
