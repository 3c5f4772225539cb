//! The bridges this process runs, for the metrics endpoint: each is
//! registered while its control socket is served (`ctl::CtlServer`),
//! which has every handle a scrape reads.
//!
//! A short list behind a mutex that only registration, removal and
//! scrapes take (never a packet thread); a scrape clones the `Arc`s and
//! reads the bridges after releasing it.

use dataplane::conntrack::Conntrack;
use dataplane::live::LivePorts;
use ofproto::Bridge;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// What a scrape reads of one bridge.
pub struct BridgeView {
    pub name: String,
    pub bridge: Arc<Bridge>,
    pub conntrack: Arc<Conntrack>,
    pub live: Arc<LivePorts>,
}

static BRIDGES: Mutex<Vec<(u64, Arc<BridgeView>)>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// A bridge's place in the list; dropping it removes the bridge.
pub struct Registration(u64);

/// Lists a bridge until the returned registration is dropped.
pub fn register(view: BridgeView) -> Registration {
    let id = NEXT_ID.fetch_add(1, Relaxed);
    let mut list = BRIDGES.lock().unwrap_or_else(|e| e.into_inner());
    list.push((id, Arc::new(view)));
    Registration(id)
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut list = BRIDGES.lock().unwrap_or_else(|e| e.into_inner());
        list.retain(|(id, _)| *id != self.0);
    }
}

/// The bridges registered now, by name.
pub fn all() -> Vec<Arc<BridgeView>> {
    let mut views: Vec<Arc<BridgeView>> = BRIDGES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|(_, v)| v.clone())
        .collect();
    views.sort_by(|a, b| a.name.cmp(&b.name));
    views
}
