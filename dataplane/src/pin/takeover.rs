//! Taking over from the previous xbr: the seam between a start that
//! adopted pinned state and the tables that decide from now on.

use super::Pins;

/// Retires the flow cache entries a previous process left (adopted with
/// the maps): the daemon calls this once its tables are final (after any
/// state restore). Frames of those flows then go to this process's
/// sockets, which translate them with its tables and install entries of
/// their own. Returns how many entries were removed.
pub fn take_over(maps: &crate::xdpcache::CacheMaps, pins: &Pins) -> usize {
    let Some(a) = pins.adoption().filter(|a| a.maps) else {
        return 0;
    };
    let n = maps.retire_older_than(maps.generation().bump());
    tracing::info!(
        from_version = %a.from_version,
        adopted = a.entries,
        removed = n,
        "took over from the previous xbr: its XDP flow cache entries retired"
    );
    n
}
