//! xbr's log: tracing events to stderr through a filter, `XBR_LOG` at
//! start (default `info`) and `xbr log BRIDGE DIRECTIVES` while running
//! (as `ovs-appctl vlog/set` changes ovs-vswitchd's levels), so an
//! operator can turn on `debug` for a module of a running switch and off
//! again without a restart that would drop its flows.

use std::sync::OnceLock;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Registry};

/// The filter in force, replaceable while running.
static FILTER: OnceLock<reload::Handle<EnvFilter, Registry>> = OnceLock::new();

/// Installs the process's subscriber; call once, first thing.
pub fn init() {
    let filter = EnvFilter::try_from_env("XBR_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let (filter, handle) = reload::Layer::new(filter);
    let installed = tracing_subscriber::registry()
        .with(filter)
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
        .try_init();
    if installed.is_ok() {
        let _ = FILTER.set(handle);
    }
}

/// The filter in force, as directives (`info`, `info,dataplane::vxlan=debug`).
pub fn filter() -> Result<String, String> {
    let handle = FILTER.get().ok_or("logging is not set up")?;
    handle
        .with_current(|f| f.to_string())
        .map_err(|e| format!("cannot read the log filter: {e}"))
}

/// Replaces the filter with `directives` (EnvFilter syntax, as `XBR_LOG`
/// takes); returns the filter now in force. A bad directive changes
/// nothing.
pub fn set_filter(directives: &str) -> Result<String, String> {
    let new = EnvFilter::try_new(directives)
        .map_err(|e| format!("bad log directives `{directives}`: {e}"))?;
    let handle = FILTER.get().ok_or("logging is not set up")?;
    handle
        .reload(new)
        .map_err(|e| format!("cannot change the log filter: {e}"))?;
    filter()
}
