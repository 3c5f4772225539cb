//! Internal ports: TAP devices created by xbr (like OVS's internal ports),
//! through which the host stack sends and receives frames on the bridge.
//!
//! The device is created with IFF_TAP|IFF_NO_PI (plain Ethernet frames, no
//! packet-information prefix, no virtio-net header) by the `tun-rs` crate,
//! which wraps the TUNSETIFF ioctl, so no unsafe code is needed here. It is
//! not persistent: the kernel deletes it when the last descriptor closes,
//! i.e. when the [`TapPort`] is dropped or xbr exits.
//!
//! The descriptor is non-blocking so the poll loop can drain it in batches:
//! one read(2)/write(2) per frame (TAP has no batched syscall without
//! virtio-net headers), stopping at EAGAIN.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use tun_rs::{DeviceBuilder, Layer, SyncDevice};

use crate::netdev::{self, NetdevError};

#[derive(Debug, thiserror::Error)]
pub enum TapError {
    #[error("creating TAP device {name:?}: {source}")]
    Create {
        name: String,
        #[source]
        source: io::Error,
    },
    #[error("TAP device {name:?}: {op}: {source}")]
    Io {
        name: String,
        op: &'static str,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Netdev(#[from] NetdevError),
}

/// A TAP device owned by xbr.
pub struct TapPort {
    dev: SyncDevice,
    name: String,
    ifindex: u32,
}

impl TapPort {
    /// Creates TAP device `name`, optionally with a MAC address and MTU, and
    /// brings it up. An existing non-persistent device of that name is
    /// rejected by the kernel (EBUSY).
    pub fn create(name: &str, mac: Option<[u8; 6]>, mtu: Option<u16>) -> Result<TapPort, TapError> {
        netdev::validate_name(name)?;
        let create_err = |source| TapError::Create {
            name: name.to_owned(),
            source,
        };
        let mut builder = DeviceBuilder::new()
            .name(name)
            .layer(Layer::L2)
            .enable(true);
        if let Some(mac) = mac {
            builder = builder.mac_addr(mac);
        }
        if let Some(mtu) = mtu {
            builder = builder.mtu(mtu);
        }
        let dev = builder.build_sync().map_err(create_err)?;
        dev.set_nonblocking(true).map_err(create_err)?;
        let ifindex = netdev::ifindex(name)?;
        Ok(TapPort {
            dev,
            name: name.to_owned(),
            ifindex,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The descriptor to poll for readability.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.dev.as_fd()
    }

    pub fn set_up(&self, up: bool) -> Result<(), TapError> {
        Ok(netdev::set_up(self.ifindex, up)?)
    }

    pub fn set_mtu(&self, mtu: u32) -> Result<(), TapError> {
        Ok(netdev::set_mtu(self.ifindex, mtu)?)
    }

    pub fn set_mac(&self, mac: [u8; 6]) -> Result<(), TapError> {
        Ok(netdev::set_mac(self.ifindex, mac)?)
    }

    /// Current settings of the device.
    pub fn info(&self) -> Result<netdev::LinkInfo, TapError> {
        Ok(netdev::link_by_index(self.ifindex)?)
    }

    /// Reads up to `bufs.len()` frames, frame `i` into `bufs[i]` with its
    /// length in `lens[i]`; returns how many were read (0 when none is
    /// pending). A frame longer than its buffer is truncated by the kernel.
    pub fn recv_burst<B: AsMut<[u8]>>(
        &self,
        bufs: &mut [B],
        lens: &mut [usize],
    ) -> Result<usize, TapError> {
        let mut n = 0;
        for (buf, len) in bufs.iter_mut().zip(lens.iter_mut()) {
            match self.dev.recv(buf.as_mut()) {
                Ok(got) => {
                    *len = got;
                    n += 1;
                }
                Err(e) if is_transient(&e) => break,
                Err(e) => return Err(self.io_err("read", e)),
            }
        }
        Ok(n)
    }

    /// Reads one frame into `head`, running on into `tail` when it is
    /// longer; `None` when none is waiting.
    pub fn recv_split(&self, head: &mut [u8], tail: &mut [u8]) -> Result<Option<usize>, TapError> {
        let mut bufs = [io::IoSliceMut::new(head), io::IoSliceMut::new(tail)];
        match self.dev.recv_vectored(&mut bufs) {
            Ok(got) => Ok(Some(got)),
            Err(e) if is_transient(&e) => Ok(None),
            Err(e) => Err(self.io_err("read", e)),
        }
    }

    /// Writes frames in order until the device would block; returns how
    /// many were written (the rest are still the caller's).
    pub fn send_burst<B: AsRef<[u8]>>(&self, frames: &[B]) -> Result<usize, TapError> {
        let mut n = 0;
        for frame in frames {
            match self.dev.send(frame.as_ref()) {
                Ok(_) => n += 1,
                Err(e) if is_transient(&e) => break,
                // A frame the kernel rejects (malformed, too big, or the
                // device is down: EIO) is dropped, as a link would drop it,
                // so it cannot block the frames behind it.
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINVAL | libc::EMSGSIZE | libc::EIO)
                    ) =>
                {
                    tracing::debug!(tap = %self.name, error = %e, len = frame.as_ref().len(), "dropping frame");
                    n += 1;
                }
                Err(e) => return Err(self.io_err("write", e)),
            }
        }
        Ok(n)
    }

    fn io_err(&self, op: &'static str, source: io::Error) -> TapError {
        TapError::Io {
            name: self.name.clone(),
            op,
            source,
        }
    }
}

impl std::fmt::Debug for TapPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TapPort")
            .field("name", &self.name)
            .field("ifindex", &self.ifindex)
            .finish()
    }
}

fn is_transient(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted
}
