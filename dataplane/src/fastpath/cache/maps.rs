//! The flow cache's BPF maps, created once per bridge and shared by the
//! XDP programs of all its system ports (each program's object reuses
//! these fds instead of creating its own), and the generation counter.

use super::entry::{FcKey, KEY_SIZE, VALUE_SIZE};
use super::generation::XdpGen;
use crate::fastpath::ct::kernel_new::{KernelMaps, KernelNew};
use libbpf_rs::{MapCore, MapFlags, MapHandle, MapType};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// Why the shared maps could not be made or changed.
#[derive(Debug, thiserror::Error)]
pub enum XdpCacheError {
    #[error("creating BPF map {name}: {source}")]
    CreateMap {
        name: &'static str,
        #[source]
        source: libbpf_rs::Error,
    },
    #[error("cannot write the XDP flow cache generation")]
    Generation,
    #[error("adding ifindex {ifindex} to the redirect map: {source}")]
    Device {
        ifindex: u32,
        #[source]
        source: libbpf_rs::Error,
    },
}

pub(crate) const FLOWS_NAME: &str = "fc_flows";
pub(crate) const DEVS_NAME: &str = "fc_devs";
pub(crate) const GEN_NAME: &str = "fc_gen";
pub(crate) const CT_NEW_NAME: &str = "ct_new";
pub(crate) const CT_SLOTS_NAME: &str = "ct_slots";
pub(crate) const CT_EVENTS_NAME: &str = "ct_events";
pub(crate) const CT_CFG_NAME: &str = "ct_cfg";
pub(crate) const CT_PORTS_NAME: &str = "ct_ports";
pub(crate) const CLOSED_DROPS_NAME: &str = "closed_drops";

/// Maps of bpf/xbr_xdp.c a bridge's programs share.
pub(crate) const SHARED_MAPS: usize = 9;

/// `struct xbr_ct_tmpl`: one template (keyed by `struct xbr_ct_slot`).
pub(crate) const CT_TEMPLATE_SIZE: u32 = 128;
/// Templates an ingress device may have (`XBR_CT_SLOTS`).
pub(crate) const CT_SLOTS: u32 = 4;
/// `struct xbr_ct_cfg`.
pub(crate) const CT_CFG_SIZE: u32 = 32;
/// Bytes of the ring that reports connections created in the kernel
/// (24-byte records plus an 8-byte header each: about 260,000, more than
/// the kernel creates in the 100 ms an idle packet thread sleeps; a full
/// ring sends frames to the packet thread, which then reads it).
const CT_EVENTS_BYTES: u32 = 8 << 20;
/// Reports the ring holds (a 24-byte record and its 8-byte header each).
pub(crate) const CT_EVENTS_REPORTS: u64 = CT_EVENTS_BYTES as u64 / 32;

/// The maps one bridge's XDP programs share.
pub struct CacheMaps {
    flows: MapHandle,
    devs: MapHandle,
    gen: Arc<XdpGen>,
    capacity: u32,
    /// New connections created in the kernel (`fastpath/ct/kernel_new.rs`):
    /// the templates (written by the packet threads), the tuples of every
    /// connection, the reports and the budget.
    ct_new: MapHandle,
    ct: KernelMaps,
    /// The reader of the reports and keeper of the budget and slot counts
    /// over `ct`, once started (`CacheMaps::start_kernel_new`); conntrack
    /// holds it too, as its `KernelConns`.
    kernel_new: OnceLock<Arc<KernelNew>>,
    /// Frames dropped because no socket was bound (fail closed), per CPU.
    closed_drops: MapHandle,
    /// Where the maps and the ports' links are pinned (`crate::fastpath::pin`).
    pins: Option<Arc<crate::fastpath::pin::Pins>>,
    /// The bridge's `xdp-peer-gro` (`other_config`, `xbr run
    /// --xdp-peer-gro`): ports opened with `xdp_redirect=auto` whose veth
    /// peer does not take redirected frames get GRO turned on in the peer
    /// (`ports::redirect::peer`). Read when a port opens.
    peer_gro: AtomicBool,
    /// Take-overs asked of the packet threads (`cache::take_over`): each
    /// adopts the entries a previous process left once per increment
    /// (`cache/adopt.rs`).
    adoptions: AtomicU64,
}

fn create(
    ty: MapType,
    name: &'static str,
    key: u32,
    value: u32,
    entries: u32,
) -> Result<MapHandle, XdpCacheError> {
    create_flags(ty, name, key, value, entries, 0)
}

fn create_flags(
    ty: MapType,
    name: &'static str,
    key: u32,
    value: u32,
    entries: u32,
    map_flags: u32,
) -> Result<MapHandle, XdpCacheError> {
    let opts = libbpf_sys::bpf_map_create_opts {
        sz: size_of::<libbpf_sys::bpf_map_create_opts>() as libbpf_sys::size_t,
        map_flags,
        ..Default::default()
    };
    MapHandle::create(ty, Some(name), key, value, entries, &opts)
        .map_err(|source| XdpCacheError::CreateMap { name, source })
}

impl CacheMaps {
    /// Creates the maps for `capacity` entries, up to `max_ports`
    /// destination devices and up to `connections` connections created in
    /// the kernel. The generation starts at 1 (0 would turn the programs'
    /// lookups off).
    pub fn new(
        capacity: u32,
        max_ports: u32,
        connections: usize,
    ) -> Result<CacheMaps, XdpCacheError> {
        Self::new_pinned(capacity, max_ports, connections, None)
    }

    /// As [`CacheMaps::new`], with the entries, redirect targets,
    /// generation and fail-closed counter pinned in `pins`: adopted from
    /// there if a compatible xbr left them (same shapes), entries and
    /// generation included, so that the entries keep forwarding.
    pub fn new_pinned(
        capacity: u32,
        max_ports: u32,
        connections: usize,
        pins: Option<Arc<crate::fastpath::pin::Pins>>,
    ) -> Result<CacheMaps, XdpCacheError> {
        let (k, v, d) = (KEY_SIZE as u32, VALUE_SIZE as u32, max_ports.max(1));
        let adopted = pins.as_deref().and_then(|p| {
            Some((
                p.adopt_map(FLOWS_NAME, MapType::Hash, k, v, capacity)?,
                p.adopt_map(DEVS_NAME, MapType::DevmapHash, 4, 4, d)?,
                p.adopt_map(GEN_NAME, MapType::Array, 4, 8, 1)?,
            ))
        });
        let adopted_gen = adopted.as_ref().map(|(flows, _, gen)| {
            let g = gen
                .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)
                .ok()
                .flatten()
                .and_then(|b| Some(u64::from_ne_bytes(b.get(..8)?.try_into().ok()?)))
                .unwrap_or(0);
            let entries = flows.keys().count() as u64;
            (g, entries)
        });
        let (mut flows, mut devs, mut gen_map) = match adopted {
            Some(maps) => maps,
            None => (
                create(MapType::Hash, FLOWS_NAME, k, v, capacity)?,
                create(MapType::DevmapHash, DEVS_NAME, 4, 4, d)?,
                create(MapType::Array, GEN_NAME, 4, 8, 1)?,
            ),
        };
        let mut closed_drops = match pins
            .as_deref()
            .and_then(|p| p.adopt_map(CLOSED_DROPS_NAME, MapType::PercpuArray, 4, 8, 1))
        {
            Some(m) => m,
            None => create(MapType::PercpuArray, CLOSED_DROPS_NAME, 4, 8, 1)?,
        };
        if let Some(p) = pins.as_deref() {
            for (name, map) in [
                (FLOWS_NAME, &mut flows),
                (DEVS_NAME, &mut devs),
                (GEN_NAME, &mut gen_map),
                (CLOSED_DROPS_NAME, &mut closed_drops),
            ] {
                // Unpinned, the bridge still works; it just does not
                // outlive the process.
                if let Err(e) = p.pin_map(name, map) {
                    tracing::warn!(error = %e, "cannot pin the XDP flow cache");
                }
            }
        }
        let gen = Arc::new(XdpGen::new(gen_map));
        match adopted_gen {
            // The entries a previous xbr left carry this generation:
            // they keep forwarding until `cache::take_over`.
            Some((g, entries)) if g != 0 => {
                gen.adopt(g, entries > 0);
                if let Some(p) = pins.as_deref() {
                    p.maps_adopted(entries);
                }
            }
            _ => {
                gen.bump();
            }
        }
        if gen.is_broken() {
            return Err(XdpCacheError::Generation);
        }
        let ct_new = create(
            MapType::Hash,
            CT_NEW_NAME,
            8,
            CT_TEMPLATE_SIZE,
            max_ports.max(1) * CT_SLOTS,
        )?;
        // Twice as many slots as connections, rounded up to a power of
        // two, 8 bytes each: 64 MiB for the default limit of 3 million.
        // A slot shared by chance only sends frames to the packet thread.
        let slots = connections
            .max(512)
            .saturating_mul(2)
            .checked_next_power_of_two()
            .unwrap_or(1 << 31)
            .min(1 << 31);
        let ct_slots = create_flags(
            MapType::Array,
            CT_SLOTS_NAME,
            4,
            8,
            slots as u32,
            libbpf_sys::BPF_F_MMAPABLE,
        )?;
        let events = create(MapType::RingBuf, CT_EVENTS_NAME, 0, 0, CT_EVENTS_BYTES)?;
        let cfg = create(MapType::Array, CT_CFG_NAME, 4, CT_CFG_SIZE, 1)?;
        let ports = create_flags(
            MapType::Array,
            CT_PORTS_NAME,
            4,
            8,
            crate::fastpath::ct::kernel_shares::PORT_COUNTERS as u32,
            libbpf_sys::BPF_F_MMAPABLE,
        )?;
        Ok(CacheMaps {
            flows,
            devs,
            gen,
            capacity,
            ct_new,
            ct: KernelMaps {
                slots: ct_slots,
                n_slots: slots,
                events,
                cfg,
                ports,
                ring_reports: CT_EVENTS_REPORTS,
                connections: connections.max(1),
            },
            kernel_new: OnceLock::new(),
            closed_drops,
            pins,
            peer_gro: AtomicBool::new(true),
            adoptions: AtomicU64::new(0),
        })
    }

    /// The pin directory the maps (and the ports' links) live in.
    pub fn pins(&self) -> Option<&Arc<crate::fastpath::pin::Pins>> {
        self.pins.as_ref()
    }

    /// Frames the bridge's programs dropped for want of a socket (fail
    /// closed), over all CPUs, since the counter was made (it is pinned:
    /// it counts across restarts and while no xbr runs).
    pub fn closed_drops(&self) -> u64 {
        self.closed_drops
            .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
            .ok()
            .flatten()
            .map(|cpus| {
                cpus.iter()
                    .filter_map(|b| Some(u64::from_ne_bytes(b.get(..8)?.try_into().ok()?)))
                    .sum()
            })
            .unwrap_or(0)
    }

    /// Asks every packet thread to adopt the entries of the current
    /// generation it has no record of (`cache::take_over`).
    pub(crate) fn request_adoption(&self) {
        let deferred = self.gen.release();
        if deferred > 0 {
            tracing::info!(
                deferred,
                "take-over: {deferred} cache invalidations deferred while the previous \
                 xbr's entries forwarded; its entries are checked now instead"
            );
        }
        self.adoptions.fetch_add(1, Ordering::Release);
    }

    /// Adoptions asked so far (one atomic load: read every round).
    pub(crate) fn adoptions(&self) -> u64 {
        self.adoptions.load(Ordering::Acquire)
    }

    /// Whether ports opened from now on make their veth peer ready (see
    /// the field).
    pub fn peer_gro(&self) -> bool {
        self.peer_gro.load(Ordering::Relaxed)
    }

    pub fn set_peer_gro(&self, on: bool) {
        self.peer_gro.store(on, Ordering::Relaxed);
    }

    /// The maps conntrack keeps the kernel's new connections with.
    pub fn kernel_conns(&self) -> &KernelMaps {
        &self.ct
    }

    /// Starts reading the kernel's new connections over these maps, once
    /// per bridge (before traffic); the caller hands the reader to
    /// conntrack (`Conntrack::set_kernel_new`).
    pub fn start_kernel_new(&self) -> std::io::Result<Arc<KernelNew>> {
        if self.kernel_new.get().is_some() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "the kernel's new connections are read already",
            ));
        }
        let k = Arc::new(KernelNew::new(&self.ct)?);
        let _ = self.kernel_new.set(k.clone());
        Ok(k)
    }

    /// The kernel's new connections, if started (their ports' shares of
    /// the ring, for `xbr stats` and the metrics).
    pub fn kernel_new(&self) -> Option<&Arc<KernelNew>> {
        self.kernel_new.get()
    }

    /// The map of new-connection templates (`templates.rs`).
    pub(crate) fn templates(&self) -> &MapHandle {
        &self.ct_new
    }

    pub fn generation(&self) -> &Arc<XdpGen> {
        &self.gen
    }

    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// The fd of the map named `name` in bpf/xbr_xdp.c, for an object
    /// that is about to be loaded to reuse.
    pub(crate) fn fd_of(&self, name: &str) -> Option<BorrowedFd<'_>> {
        match name {
            FLOWS_NAME => Some(self.flows.as_fd()),
            DEVS_NAME => Some(self.devs.as_fd()),
            GEN_NAME => Some(self.gen.map_fd()),
            CT_NEW_NAME => Some(self.ct_new.as_fd()),
            CT_SLOTS_NAME => Some(self.ct.slots.as_fd()),
            CT_EVENTS_NAME => Some(self.ct.events.as_fd()),
            CT_CFG_NAME => Some(self.ct.cfg.as_fd()),
            CT_PORTS_NAME => Some(self.ct.ports.as_fd()),
            CLOSED_DROPS_NAME => Some(self.closed_drops.as_fd()),
            _ => None,
        }
    }

    /// Makes `ifindex` a redirect target.
    pub fn add_dev(&self, ifindex: u32) -> Result<(), XdpCacheError> {
        self.devs
            .update(
                &ifindex.to_ne_bytes(),
                &ifindex.to_ne_bytes(),
                MapFlags::ANY,
            )
            .map_err(|source| XdpCacheError::Device { ifindex, source })
    }

    /// Stores `value` (counters zero) at `key`.
    pub(crate) fn insert(&self, key: &FcKey, value: &[u8]) -> Result<(), libbpf_rs::Error> {
        self.flows.update(key, value, MapFlags::ANY)
    }

    /// The entry's hit counters; `None` if it is absent.
    pub(crate) fn read(&self, key: &FcKey) -> Option<(u64, u64)> {
        let value = self.flows.lookup(key, MapFlags::ANY).ok()??;
        Some(super::entry::counters(&value))
    }

    /// Reads the next batch of up to `max` entries after `cursor` (one
    /// syscall): their keys and hit counters, into `out` (emptied first).
    /// See [`crate::fastpath::handles::hash_lookup_batch`] for what a batch holds.
    pub(crate) fn read_batch(
        &self,
        cursor: &mut BatchRead,
        max: u32,
        out: &mut Vec<(FcKey, (u64, u64))>,
    ) -> std::io::Result<()> {
        out.clear();
        let n = crate::fastpath::handles::hash_lookup_batch(
            self.flows.as_fd(),
            &mut cursor.cursor,
            KEY_SIZE,
            VALUE_SIZE,
            max,
            &mut cursor.keys,
            &mut cursor.values,
        )?;
        let pairs = cursor
            .keys
            .chunks_exact(KEY_SIZE)
            .zip(cursor.values.chunks_exact(VALUE_SIZE))
            .take(n);
        for (k, v) in pairs {
            let mut key = [0u8; KEY_SIZE];
            key.copy_from_slice(k);
            out.push((key, super::entry::counters(v)));
        }
        Ok(())
    }

    /// Every entry with its value, read one by one (for `xbr dpctl
    /// dump-flows`, off the packet thread); entries deleted meanwhile are
    /// skipped.
    pub(crate) fn entries(&self) -> Vec<(FcKey, Vec<u8>)> {
        self.flows
            .keys()
            .filter_map(|raw| {
                let key = super::entry::key_from(&raw)?;
                let value = self.flows.lookup(&key, MapFlags::ANY).ok()??;
                Some((key, value))
            })
            .collect()
    }

    /// Deletes `key`'s entry and returns its last hit counters, in one
    /// syscall, so that no hit the program counts between a read and the
    /// delete is lost. Kernels before 5.14 cannot look up and delete in a
    /// hash map at once; there it reads and then deletes, and hits counted
    /// between the two are lost.
    pub(crate) fn take(&self, key: &FcKey) -> Option<(u64, u64)> {
        match self.flows.lookup_and_delete(key) {
            Ok(value) => value.map(|v| super::entry::counters(&v)),
            Err(_) => {
                let last = self.read(key);
                self.delete(key);
                last
            }
        }
    }

    pub(crate) fn delete(&self, key: &FcKey) {
        // ENOENT: already gone, which is what we wanted.
        let _ = self.flows.delete(key);
    }
}

/// A pass over the flow map in batches ([`CacheMaps::read_batch`]), with
/// its buffers.
#[derive(Debug, Default)]
pub(crate) struct BatchRead {
    cursor: crate::fastpath::handles::BatchCursor,
    keys: Vec<u8>,
    values: Vec<u8>,
}

impl BatchRead {
    /// Whether the pass reached the end of the map.
    pub(crate) fn is_done(&self) -> bool {
        self.cursor.is_done()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fastpath::cache::entry::{counters, KEY_SIZE, VALUE_SIZE};

    #[test]
    fn take_returns_the_last_counters_and_deletes() {
        // Creates real maps (root, as CI runs).
        assert!(
            nix::unistd::geteuid().is_root(),
            "this test needs root (it creates BPF maps)"
        );
        let maps = CacheMaps::new(16, 4, 16).expect("maps");
        let key = [7u8; KEY_SIZE];
        let mut value = vec![0u8; VALUE_SIZE];
        value[8..16].copy_from_slice(&41u64.to_ne_bytes());
        value[16..24].copy_from_slice(&4100u64.to_ne_bytes());
        assert_eq!(counters(&value), (41, 4100));
        maps.insert(&key, &value).expect("insert");
        assert_eq!(maps.take(&key), Some((41, 4100)));
        assert_eq!(maps.read(&key), None, "taken entries are gone");
        assert_eq!(maps.take(&key), None);
    }
}
