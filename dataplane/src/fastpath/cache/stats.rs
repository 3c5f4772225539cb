//! What an XDP flow cache did, as `xbr stats` and the log report it.

/// Counts of what the cache did (diagnostics and tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpCacheStats {
    /// Entries installed (or reinstalled after invalidation).
    pub installs: u64,
    /// Installs the kernel refused (e.g. map full under a race).
    pub install_errors: u64,
    /// Installs skipped because the cache was full.
    pub full: u64,
    /// Installs put off to the flow's second frame: its port was over its
    /// budget of first-frame installs (`engine/xdp/install_gate.rs`).
    pub deferred: u64,
    /// Packets the XDP programs handled from entries (collected so far).
    pub hit_packets: u64,
    /// Entries removed because they were idle.
    pub expired: u64,
    /// Entries removed because a change invalidated them.
    pub invalidated: u64,
    /// Entries installed for translations through conntrack.
    pub ct_installs: u64,
    /// Entries removed because their connection changed or went.
    pub ct_removed: u64,
    /// Entries a revalidation found changed by new flows, groups or
    /// ports, and removed.
    pub revalidated_out: u64,
    /// Entries a revalidation checked and kept.
    pub revalidated: u64,
    /// Packets a VXLAN port's uplink program decapsulated and forwarded
    /// (or dropped) from entries (part of `hit_packets`).
    pub decap_hit_packets: u64,
    /// Packets entries encapsulated into a VXLAN port's uplink (part of
    /// `hit_packets`).
    pub encap_hit_packets: u64,
    /// New-connection templates installed (`templates.rs`).
    pub templates: u64,
    /// Packets the kernel forwarded from templates, each creating a
    /// connection (part of `hit_packets`).
    pub ct_new_packets: u64,
    /// Entries a previous process left that a take-over kept as they
    /// were, rewrote, or removed (`adopt.rs`).
    pub adopted: u64,
    pub adopt_rewritten: u64,
    pub adopt_removed: u64,
    /// Entries the thread has in the map when it published (a level,
    /// not a count of events; summed over threads like the rest).
    pub entries: u64,
}

impl XdpCacheStats {
    /// Adds another packet thread's counts.
    pub fn merge(&mut self, o: &XdpCacheStats) {
        let XdpCacheStats {
            installs,
            install_errors,
            full,
            deferred,
            hit_packets,
            expired,
            invalidated,
            ct_installs,
            ct_removed,
            revalidated_out,
            revalidated,
            decap_hit_packets,
            encap_hit_packets,
            templates,
            ct_new_packets,
            adopted,
            adopt_rewritten,
            adopt_removed,
            entries,
        } = o;
        self.installs += installs;
        self.install_errors += install_errors;
        self.full += full;
        self.deferred += deferred;
        self.hit_packets += hit_packets;
        self.expired += expired;
        self.invalidated += invalidated;
        self.ct_installs += ct_installs;
        self.ct_removed += ct_removed;
        self.revalidated_out += revalidated_out;
        self.revalidated += revalidated;
        self.decap_hit_packets += decap_hit_packets;
        self.encap_hit_packets += encap_hit_packets;
        self.templates += templates;
        self.ct_new_packets += ct_new_packets;
        self.adopted += adopted;
        self.adopt_rewritten += adopt_rewritten;
        self.adopt_removed += adopt_removed;
        self.entries += entries;
    }
}
