//! Whether the XDP flow cache may redirect frames to a port's device:
//! the operator's `xdp_redirect` setting and, for `auto`, what the kernel
//! says about the device now.
//!
//! # Design
//!
//! A frame redirected in XDP to a veth is handed to the veth's peer's
//! NAPI instance, which exists only while the peer has GRO on or an XDP
//! program; otherwise the kernel drops the frame and counts it nowhere.
//! The kernel reports this in the device's xdp-features (netdev family,
//! Linux 6.3+): `NDO_XMIT` (and `NDO_XMIT_SG` for frames in several
//! buffers) are set on a veth exactly while its peer can take them, and
//! every change is announced on the netdev family's `mgmt` multicast
//! group (`watch.rs` follows it). A physical NIC's driver reports them
//! for as long as it implements redirects.
//!
//! What is stored: one [`Readiness`] per port served by AF_XDP (and per
//! VXLAN port, for its uplink), shared by the port (its packet thread
//! reads it whenever it decides whether an XDP cache entry may output to
//! the port), the port's `PortMeta` (`xbr stats`, `dpif/show`) and the
//! watcher that updates it. The state is one atomic word (whether
//! redirects may go there, with several buffers or not, and why), plus a
//! note for the operator behind a lock (control path only).
//!
//! Ordering with the cache: when a device stops taking redirects, the
//! watcher clears the state *then* bumps the cache generation
//! (`XdpGen::bump`, Release): a packet thread that read the new
//! generation also sees the port not ready, and an entry installed by a
//! thread that read the old one is never used. Until the watcher hears
//! of the change (the kernel's notification, within milliseconds) the
//! kernel drops what existing entries redirect there: the peer's owner
//! turned off what made it take them. When a device becomes ready
//! nothing is retired: the next miss of each flow installs an entry.

pub mod peer;
pub mod watch;

use parking_lot::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};

/// The operator's per-port `xdp_redirect` (OVSDB `options:`, `--port`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RedirectMode {
    /// Follow the kernel: redirect while the device reports `NDO_XMIT`.
    #[default]
    Auto,
    /// Always a target: the operator vouches for the device.
    On,
    /// Never a target.
    Off,
}

impl RedirectMode {
    /// `auto`, `on`/`true`, `off`/`false`; `None` for anything else.
    pub fn parse(s: &str) -> Option<RedirectMode> {
        match s {
            "auto" => Some(RedirectMode::Auto),
            "on" | "true" => Some(RedirectMode::On),
            "off" | "false" => Some(RedirectMode::Off),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RedirectMode::Auto => "auto",
            RedirectMode::On => "on",
            RedirectMode::Off => "off",
        }
    }

    fn from_u8(v: u8) -> RedirectMode {
        match v {
            1 => RedirectMode::On,
            2 => RedirectMode::Off,
            _ => RedirectMode::Auto,
        }
    }

    fn to_u8(self) -> u8 {
        match self {
            RedirectMode::Auto => 0,
            RedirectMode::On => 1,
            RedirectMode::Off => 2,
        }
    }
}

/// Why a port is or is not a redirect target (the state word's high
/// byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Why {
    /// The XDP flow cache is off: nothing is redirected anywhere.
    CacheOff = 0,
    /// `xdp_redirect=off`.
    ConfiguredOff = 1,
    /// `xdp_redirect=on`.
    ConfiguredOn = 2,
    /// The device reports `NDO_XMIT` (a veth: its peer has GRO on or an
    /// XDP program).
    KernelReady = 3,
    /// As `KernelReady`, after xbr turned GRO on in the peer.
    MadeReady = 4,
    /// The device does not report `NDO_XMIT` (a veth: its peer has
    /// neither GRO nor an XDP program).
    NotReady = 5,
    /// The kernel cannot say (no netdev family: Linux before 6.3).
    Unknown = 6,
    /// xbr's own veth end (an internal port's), whose peer xbr set up.
    Internal = 7,
}

impl Why {
    fn from_u8(v: u8) -> Why {
        match v {
            1 => Why::ConfiguredOff,
            2 => Why::ConfiguredOn,
            3 => Why::KernelReady,
            4 => Why::MadeReady,
            5 => Why::NotReady,
            6 => Why::Unknown,
            7 => Why::Internal,
            _ => Why::CacheOff,
        }
    }
}

const TARGET: u32 = 1;
const FRAGS: u32 = 2;
const WHY_SHIFT: u32 = 8;

/// One port's redirect readiness; see the module documentation.
#[derive(Debug)]
pub struct Readiness {
    /// The operator's setting (a [`RedirectMode`]); it changes in place
    /// when `options:xdp_redirect` does, as OVS applies a changed
    /// `options` column to the open netdev.
    mode: AtomicU8,
    /// TARGET | FRAGS | why << WHY_SHIFT.
    state: AtomicU32,
    /// For the operator: what xbr did or could not do about the peer.
    note: Mutex<String>,
}

impl Readiness {
    /// A port in `mode`, with the state `why` (and the device taking
    /// multi-buffer frames if `frags`).
    pub fn new(mode: RedirectMode, why: Why, frags: bool) -> Readiness {
        let r = Readiness {
            mode: AtomicU8::new(mode.to_u8()),
            state: AtomicU32::new(0),
            note: Mutex::new(String::new()),
        };
        r.set(why, frags);
        r
    }

    /// Never a target (the cache is off, or a port type without XDP).
    pub fn never() -> Readiness {
        Readiness::new(RedirectMode::Off, Why::CacheOff, false)
    }

    pub fn mode(&self) -> RedirectMode {
        RedirectMode::from_u8(self.mode.load(Ordering::Acquire))
    }

    /// The operator changed the setting; the caller then sets the state
    /// that goes with it (`ports::change_redirect`).
    pub fn set_mode(&self, mode: RedirectMode) {
        self.mode.store(mode.to_u8(), Ordering::Release);
    }

    /// Entries may redirect to the device now. One atomic load: asked for
    /// every XDP cache install, never per packet.
    #[inline]
    pub fn target(&self) -> bool {
        self.state.load(Ordering::Acquire) & TARGET != 0
    }

    /// ... with frames in several buffers.
    #[inline]
    pub fn frags(&self) -> bool {
        self.state.load(Ordering::Acquire) & (TARGET | FRAGS) == TARGET | FRAGS
    }

    pub fn why(&self) -> Why {
        Why::from_u8((self.state.load(Ordering::Acquire) >> WHY_SHIFT) as u8)
    }

    /// Sets the state; returns whether the port was a target before and
    /// is not now (the caller then retires the cache's entries).
    pub fn set(&self, why: Why, frags: bool) -> bool {
        let target = matches!(
            why,
            Why::ConfiguredOn | Why::KernelReady | Why::MadeReady | Why::Internal
        );
        let word = (why as u32) << WHY_SHIFT
            | if target { TARGET } else { 0 }
            | if target && frags { FRAGS } else { 0 };
        let old = self.state.swap(word, Ordering::AcqRel);
        old & TARGET != 0 && !target
    }

    pub fn set_note(&self, note: impl Into<String>) {
        *self.note.lock() = note.into();
    }

    /// The state for `xbr stats` and `dpif/show`: `None` where there is
    /// nothing to tell (the cache is off; xbr's own veth ends, always
    /// ready), else [`Readiness::describe`].
    pub fn report(&self) -> Option<String> {
        match self.why() {
            Why::CacheOff | Why::Internal => None,
            _ => Some(self.describe()),
        }
    }

    /// The state as `xbr stats` and `dpif/show` print it, e.g.
    /// `xdp_redirect=auto: ready (GRO turned on in the peer by xbr)`.
    pub fn describe(&self) -> String {
        let state = match self.why() {
            Why::CacheOff => "off (no XDP flow cache)",
            Why::ConfiguredOff => "off (configured)",
            Why::ConfiguredOn => "on (configured; the device is assumed to take redirects)",
            Why::KernelReady => "ready",
            Why::MadeReady => "ready (GRO turned on in the peer by xbr)",
            Why::NotReady => {
                "not ready: the device does not take redirected frames \
                 (a veth: its peer has neither GRO nor an XDP program)"
            }
            Why::Unknown => "not ready: the kernel does not report xdp-features (before 6.3)",
            Why::Internal => "ready (xbr's own veth)",
        };
        let frags = if self.frags() { ", multi-buffer" } else { "" };
        let note = self.note.lock();
        let sep = if note.is_empty() { "" } else { "; " };
        format!(
            "xdp_redirect={}: {state}{frags}{sep}{note}",
            self.mode().as_str()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_states_say_what_they_mean() {
        assert_eq!(RedirectMode::parse("auto"), Some(RedirectMode::Auto));
        assert_eq!(RedirectMode::parse("true"), Some(RedirectMode::On));
        assert_eq!(RedirectMode::parse("off"), Some(RedirectMode::Off));
        assert_eq!(RedirectMode::parse("maybe"), None);

        let r = Readiness::new(RedirectMode::Auto, Why::NotReady, true);
        assert!(!r.target() && !r.frags());
        assert!(r.describe().contains("not ready"), "{}", r.describe());
        assert!(!r.set(Why::KernelReady, true));
        assert!(r.target() && r.frags());
        // Losing readiness is reported once, to retire the entries.
        assert!(r.set(Why::NotReady, false));
        assert!(!r.set(Why::NotReady, false));
        assert!(!r.set(Why::MadeReady, false));
        assert!(r.target() && !r.frags());
        r.set_note("peer eth0");
        assert_eq!(
            r.describe(),
            "xdp_redirect=auto: ready (GRO turned on in the peer by xbr); peer eth0"
        );
        assert!(!Readiness::never().target());
    }
}
