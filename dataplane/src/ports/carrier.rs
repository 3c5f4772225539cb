//! The ports' carrier, as OpenFlow and fast-failover groups see it.
//!
//! OVS reports a port whose device lost its carrier as `OFPPS_LINK_DOWN`
//! (and not `OFPPS_LIVE`), tells every controller with a PORT_STATUS
//! MODIFY when that changes, and fast-failover groups skip buckets that
//! watch a port which is not live. A pod's host-side veth loses its
//! carrier when the pod's end goes down or its namespace goes away.
//!
//! One thread per bridge listens to rtnetlink's link group (through
//! [`crate::netwatch`], coalesced) and, on each change, reads the carrier
//! of every port that has a device of its own (one RTM_GETLINK per port:
//! a change costs O(ports) syscalls, nothing while links are quiet). A
//! change is stored in [`PortMeta::link_up`], which the packet threads
//! read once per round, logged, and announced. Ports without a device
//! (tunnels, in-memory test ports) are never touched and stay up.
//!
//! [`PortMeta::link_up`]: crate::control::PortMeta

use crate::control::PortMeta;
use crate::live::LivePorts;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How long the thread waits for a change before it checks `stop`.
const POLL: Duration = Duration::from_millis(250);

/// The carrier watcher of one bridge; stopped and joined on drop.
pub struct CarrierWatch {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl CarrierWatch {
    /// Reads every port's carrier once, then follows changes. `None`
    /// (logged) when the netlink socket or the thread cannot be had: the
    /// ports then keep the carrier they had, as before this existed.
    pub fn start(bridge: &str, live: Arc<LivePorts>) -> Option<CarrierWatch> {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = crossbeam::channel::bounded(1);
        let watcher =
            match crate::netwatch::watch("xbr-carrier-nl", &[libc::RTNLGRP_LINK], tx, stop.clone())
            {
                Ok(w) => w,
                Err(e) => {
                    tracing::warn!(bridge, "ports' carrier changes will not be seen: {e}");
                    return None;
                }
            };
        let name = bridge.to_owned();
        let stop_thread = stop.clone();
        let spawned = std::thread::Builder::new()
            .name("xbr-carrier".into())
            .spawn(move || {
                refresh(&name, &live);
                while !stop_thread.load(Ordering::Relaxed) {
                    if rx.recv_timeout(POLL).is_ok() {
                        refresh(&name, &live);
                    }
                }
                let _ = watcher.join();
            });
        match spawned {
            Ok(t) => Some(CarrierWatch {
                stop,
                thread: Some(t),
            }),
            Err(e) => {
                stop.store(true, Ordering::Relaxed);
                tracing::warn!(bridge, "ports' carrier changes will not be seen: {e}");
                None
            }
        }
    }
}

impl Drop for CarrierWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Reads each port's carrier; stores, logs and announces changes.
fn refresh(bridge: &str, live: &LivePorts) {
    let mut changed = false;
    for meta in live.ports() {
        let Some(up) = carrier(&meta) else {
            continue;
        };
        if meta.link_up.swap(up, Ordering::Relaxed) == up {
            continue;
        }
        changed = true;
        let state = if up { "up" } else { "down" };
        tracing::info!(bridge, port = %meta.name, ofport = meta.ofport, "link {state}");
        live.notify_port_modified(&meta);
    }
    if changed {
        live.datapath().wake();
    }
}

/// The carrier of the port's device: administratively up with its lower
/// layers up, as the Interface row's `link_state` says. `None` for ports
/// with no device of their own.
fn carrier(meta: &PortMeta) -> Option<bool> {
    if meta.kind.starts_with("vxlan") {
        return None;
    }
    let link = crate::netdev::link_by_name(&meta.name).ok()?;
    Some(link.up && link.lower_up)
}
