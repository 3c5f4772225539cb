//! Taking over from the previous xbr: the seam between a start that
//! adopted pinned state and the tables that decide from now on.

use super::CacheMaps;
use crate::fastpath::pin::Pins;

/// Has the packet threads adopt the flow cache entries a previous process
/// left (with the maps): the daemon calls this once its tables are final
/// (after any state restore). Each thread checks the entries of its ports
/// against the tables and connections now, keeps those that are the
/// same, rewrites those that changed and removes the rest
/// (`cache/adopt.rs`); the kernel keeps forwarding by them meanwhile.
/// Returns how many entries the start found.
pub fn take_over(maps: &CacheMaps, pins: &Pins) -> u64 {
    let Some(a) = pins.adoption().filter(|a| a.maps) else {
        return 0;
    };
    maps.request_adoption();
    tracing::info!(
        from_version = %a.from_version,
        adopted = a.entries,
        "took over from the previous xbr: its XDP flow cache entries are checked against \
         this process's tables (xbr stats: adopted, adopt_rewritten, adopt_removed)"
    );
    a.entries
}
