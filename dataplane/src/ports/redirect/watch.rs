//! Following the devices of `xdp_redirect=auto` ports: their readiness
//! (see the parent module) is set from their xdp-features when they
//! register, and again whenever the kernel announces a change.
//!
//! One thread for the process (`xbr-redirect-watch`, started by the first
//! registration), subscribed to the netdev family's `mgmt` group
//! (`genl::XdpFeatureEvents`): the kernel sends it each device's new
//! xdp-features as they change (a veth's when its peer's GRO or XDP
//! program comes or goes), so a change is followed within milliseconds.
//! After a lost message (a full socket buffer) and every
//! [`RECHECK_INTERVAL`] it asks every registered device again; on a
//! kernel without the family (before 6.3) ports are `Unknown`, never
//! targets.
//!
//! What is stored: the registered ports by registration id (a device may
//! be registered by several bridges' ports only in tests; each gets its
//! own entry), with the cache generation to bump when a port stops being
//! a target. One lock, held by a registration (which queries the device
//! under it, so that a notification cannot be overtaken by an older
//! answer) and by the thread while it applies a message: control path
//! only, nothing here is on a packet thread.

use super::{peer, Readiness, RedirectMode, Why};
use crate::fastpath::cache::XdpGen;
use crate::genl::{self, xdp_act, XdpFeatureEvent, XdpFeatureEvents};
use crate::netdev::{self, LinkInfo, NetdevError};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// How often every registered device is asked again, in case a
/// notification was missed; also the polling period on kernels that send
/// none.
const RECHECK_INTERVAL: Duration = Duration::from_secs(5);

struct Watched {
    name: String,
    ifindex: u32,
    readiness: Arc<Readiness>,
    /// The bridge's cache generation, bumped when the port stops being a
    /// target.
    gen: Arc<XdpGen>,
    /// xbr turned GRO on in the peer.
    made_ready: bool,
}

#[derive(Default)]
struct Registry {
    ports: Mutex<HashMap<u64, Watched>>,
    next_id: AtomicU64,
}

static REGISTRY: OnceLock<Arc<Registry>> = OnceLock::new();

/// A port followed until this is dropped (with the port).
#[derive(Debug)]
pub struct Registration {
    id: u64,
}

/// Follows the device `ifindex` of port `name`: sets `readiness` from its
/// xdp-features now and on every change, bumping `gen` when it stops
/// being a target.
pub fn register(
    name: &str,
    ifindex: u32,
    readiness: Arc<Readiness>,
    gen: Arc<XdpGen>,
) -> Registration {
    let reg = registry();
    let id = reg.next_id.fetch_add(1, Ordering::Relaxed);
    let w = Watched {
        name: name.to_owned(),
        ifindex,
        readiness,
        gen,
        made_ready: false,
    };
    let mut ports = reg.ports.lock();
    apply(&w, genl::xdp_features(ifindex));
    ports.insert(id, w);
    Registration { id }
}

impl Registration {
    /// Turns GRO on in the peer of the veth `link` (the port's device),
    /// which then takes redirected frames (`peer::enable_gro`); the
    /// port's state says what was done, or why it could not be.
    pub fn make_peer_ready(&self, link: &LinkInfo) {
        make_ready(self.id, link);
    }
}

/// See [`Registration::make_peer_ready`].
fn make_ready(id: u64, link: &LinkInfo) {
    let Some((name, readiness)) = registry()
        .ports
        .lock()
        .get(&id)
        .map(|w| (w.name.clone(), w.readiness.clone()))
    else {
        return;
    };
    // Outside the lock: this enters another namespace, on a thread.
    match peer::enable_gro(link) {
        Ok(peer) => {
            readiness.set_note(format!("xbr turned GRO on for the peer {peer}"));
            let mut ports = registry().ports.lock();
            if let Some(w) = ports.get_mut(&id) {
                w.made_ready = true;
                // The kernel's notification may still be on its way.
                apply(w, genl::xdp_features(w.ifindex));
            }
            tracing::info!(port = %name, %peer, "GRO turned on in the peer: {}",
                readiness.describe());
        }
        Err(e) => {
            readiness.set_note(format!("cannot turn GRO on in the peer: {e}"));
            tracing::warn!(port = %name, error = %e,
                "cannot make the peer take XDP-redirected frames; \
                 its traffic goes through the packet thread");
        }
    }
}

/// Makes ready the veth peers of the not-ready ports of the bridge whose
/// cache generation is `gen` (its `xdp-peer-gro` was just turned on).
pub fn make_peers_ready(gen: &Arc<XdpGen>) {
    let todo: Vec<(u64, u32)> = registry()
        .ports
        .lock()
        .iter()
        .filter(|(_, w)| Arc::ptr_eq(&w.gen, gen) && w.readiness.why() == Why::NotReady)
        .map(|(id, w)| (*id, w.ifindex))
        .collect();
    for (id, ifindex) in todo {
        match netdev::link_by_index(ifindex) {
            Ok(link) if link.kind.as_deref() == Some("veth") => make_ready(id, &link),
            _ => {}
        }
    }
}

/// Sets `readiness` from its device's xdp-features now (its mode just
/// became `auto`).
pub fn recheck(readiness: &Arc<Readiness>) {
    let ports = registry().ports.lock();
    for w in ports
        .values()
        .filter(|w| Arc::ptr_eq(&w.readiness, readiness))
    {
        apply(w, genl::xdp_features(w.ifindex));
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        registry().ports.lock().remove(&self.id);
    }
}

fn registry() -> &'static Arc<Registry> {
    REGISTRY.get_or_init(|| {
        let reg = Arc::new(Registry::default());
        let r = reg.clone();
        if let Err(e) = std::thread::Builder::new()
            .name("xbr-redirect-watch".into())
            .spawn(move || run(&r))
        {
            // Ports are still set once, when they register.
            tracing::error!(error = %e, "cannot start the thread that follows the ports' \
                XDP redirect readiness; changes will not be noticed");
        }
        reg
    })
}

/// Sets `w`'s readiness from the device's xdp-features (or the error
/// reading them); bumps the generation if it stops being a target.
fn apply(w: &Watched, features: Result<u64, NetdevError>) {
    // `on` and `off` are the operator's, not the kernel's, to decide.
    if w.readiness.mode() != RedirectMode::Auto {
        return;
    }
    let (why, frags) = match &features {
        Ok(f) if f & xdp_act::NDO_XMIT != 0 => (
            if w.made_ready {
                Why::MadeReady
            } else {
                Why::KernelReady
            },
            f & xdp_act::NDO_XMIT_SG != 0,
        ),
        Ok(_) => (Why::NotReady, false),
        Err(_) => (Why::Unknown, false),
    };
    let before = w.readiness.why();
    if w.readiness.set(why, frags) {
        // After the state: a packet thread that reads the new generation
        // sees the port not ready (see the parent module).
        w.gen.bump();
    }
    if before != why {
        match &features {
            Err(e) => tracing::info!(port = %w.name, error = %e, "{}", w.readiness.describe()),
            Ok(_) => tracing::info!(port = %w.name, "{}", w.readiness.describe()),
        }
    }
}

/// The thread: notifications, or polling without them.
fn run(reg: &Registry) {
    let mut events = match XdpFeatureEvents::subscribe() {
        Ok(e) => Some(e),
        Err(e) => {
            tracing::warn!(error = %e, "no notifications of XDP feature changes (netdev \
                family); the ports' redirect readiness is polled every {RECHECK_INTERVAL:?}");
            None
        }
    };
    let mut got = Vec::new();
    loop {
        got.clear();
        let recheck = match &mut events {
            None => {
                std::thread::sleep(RECHECK_INTERVAL);
                true
            }
            Some(ev) => {
                let mut fds = [nix::poll::PollFd::new(
                    ev.fd(),
                    nix::poll::PollFlags::POLLIN,
                )];
                let ms = RECHECK_INTERVAL.as_millis() as u16;
                match nix::poll::poll(&mut fds, ms) {
                    Ok(0) => true,
                    Ok(_) => match ev.recv(&mut got) {
                        Ok(()) => got.contains(&XdpFeatureEvent::Overrun),
                        Err(e) => {
                            tracing::warn!(error = %e, "XDP feature notifications");
                            std::thread::sleep(Duration::from_millis(100));
                            true
                        }
                    },
                    Err(nix::errno::Errno::EINTR) => false,
                    Err(e) => {
                        tracing::warn!(error = %e, "poll on XDP feature notifications");
                        std::thread::sleep(Duration::from_millis(100));
                        true
                    }
                }
            }
        };
        let ports = reg.ports.lock();
        if recheck {
            for w in ports.values() {
                apply(w, genl::xdp_features(w.ifindex));
            }
            continue;
        }
        for ev in &got {
            if let XdpFeatureEvent::Changed { ifindex, features } = *ev {
                for w in ports.values().filter(|w| w.ifindex == ifindex) {
                    apply(w, Ok(features));
                }
            }
        }
    }
}
