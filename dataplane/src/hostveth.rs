//! The veth backend of internal ports (`internal_backend=veth`): instead
//! of a TAP device, xbr creates a veth pair. The host end carries the
//! port's name (`tun0`), MAC and MTU; the other end, named by
//! [`peer_name`] (`xbr-tun0`), is attached by xbr exactly like a system
//! port: XDP program, one AF_XDP socket, batched RX and TX rings, and
//! checksum completion (the host stack sends CHECKSUM_PARTIAL frames, as
//! pods do).
//!
//! Why: a TAP costs one read(2) or write(2) per frame; a veth end is
//! served through the rings, one syscall per batch or none, and it is an
//! XDP flow cache redirect target, so pod <-> host traffic can stay in
//! the kernel. xbr turns GRO on for the host end (see `genl`), which
//! a veth needs to accept XDP-redirected frames.
//!
//! Lifecycle: a TAP vanishes when xbr closes it; a veth does not, so
//! [`HostVeth`] deletes the pair when it is dropped (port removal, clean
//! exit), through the xbr end, so also when the host end was moved to
//! another namespace. After a crash the pair stays; the next [`HostVeth::create`]
//! replaces it when it is recognisably a pair xbr made and nobody serves:
//! a veth named like the port whose peer is named [`peer_name`] of it and
//! has no XDP program attached (a running xbr keeps one there). Anything
//! else of that name is left alone and reported as an error.

use crate::netdev::{self, NetdevError, MAX_IFNAME_LEN};

/// MTU of the xbr end: the largest a veth takes, so whatever MTU the
/// host end gets (`mtu_request`, or `ip link set` by the agent), its
/// frames fit; the XDP program on the xbr end already bounds the host
/// end's MTU to what a UMEM frame holds.
const PEER_MTU: u32 = 65535;

#[derive(Debug, thiserror::Error)]
pub enum HostVethError {
    #[error(
        "an interface named {name:?} already exists and is not a veth pair xbr created \
         (its peer would be {peer:?}); remove it or pick another name"
    )]
    Foreign { name: String, peer: String },
    #[error(
        "{name:?} is the veth of an internal port that another xbr is serving \
         (XDP program attached to {peer:?})"
    )]
    InUse { name: String, peer: String },
    #[error("creating the veth pair {name:?}/{peer:?}: {source}")]
    Create {
        name: String,
        peer: String,
        #[source]
        source: NetdevError,
    },
    #[error("{op} on {dev:?}: {source}")]
    Setup {
        op: &'static str,
        dev: String,
        #[source]
        source: NetdevError,
    },
}

impl HostVethError {
    /// Errors the configuration can fix (a name clash).
    pub fn is_config_error(&self) -> bool {
        matches!(
            self,
            HostVethError::Foreign { .. } | HostVethError::InUse { .. }
        )
    }
}

/// The name of the xbr end of internal port `name`'s veth pair:
/// `xbr-NAME` when that fits in 15 bytes, else `xbr-` followed by the
/// name's first 3 bytes and 8 hex digits of its FNV-1a hash (different
/// names keep different peers unless the hashes collide, and then the
/// creation fails with a clear error rather than sharing one).
pub fn peer_name(name: &str) -> String {
    let full = format!("xbr-{name}");
    if full.len() <= MAX_IFNAME_LEN {
        return full;
    }
    let hash = name.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    let head: String = name
        .char_indices()
        .take_while(|(i, c)| i + c.len_utf8() <= 3)
        .map(|(_, c)| c)
        .collect();
    format!("xbr-{head}{hash:08x}")
}

/// What holds the name of an internal port about to be created.
#[derive(Debug, PartialEq, Eq)]
pub enum Existing {
    Nothing,
    /// A pair xbr made and nobody serves: host end's ifindex.
    Leftover(u32),
    /// A pair xbr made that a running xbr serves.
    InUse,
    /// Something else.
    Foreign,
}

/// Looks at what holds `name` now (see the module's lifecycle notes).
pub fn existing(name: &str) -> Result<Existing, NetdevError> {
    let link = match netdev::link_by_name(name) {
        Ok(l) => l,
        Err(NetdevError::NotFound(_)) => return Ok(Existing::Nothing),
        Err(e) => return Err(e),
    };
    if link.kind.as_deref() != Some("veth") {
        return Ok(Existing::Foreign);
    }
    let Some(peer_index) = link.link.filter(|i| *i != 0) else {
        return Ok(Existing::Foreign);
    };
    let peer = match netdev::link_by_index(peer_index) {
        Ok(p) => p,
        // The peer is in another namespace (IFLA_LINK then names an index
        // there): not a pair xbr made.
        Err(NetdevError::NotFound(_)) => return Ok(Existing::Foreign),
        Err(e) => return Err(e),
    };
    if peer.name != peer_name(name) || peer.link != Some(link.ifindex) {
        return Ok(Existing::Foreign);
    }
    // A program a previous xbr of this bridge left pinned (it outlives
    // the process, see `crate::fastpath::pin`) does not make the pair in use.
    Ok(
        if peer.xdp_attached && !crate::fastpath::pin::pinned_here(peer.ifindex) {
            Existing::InUse
        } else {
            Existing::Leftover(link.ifindex)
        },
    )
}

/// A veth pair backing an internal port; deleted on drop.
#[derive(Debug)]
pub struct HostVeth {
    name: String,
    ifindex: u32,
    peer: String,
    peer_ifindex: u32,
}

impl HostVeth {
    /// Creates the pair for internal port `name` (replacing a leftover
    /// one), with `mac` and `mtu` on the host end, GRO on there, both
    /// ends up.
    pub fn create(
        name: &str,
        mac: Option<[u8; 6]>,
        mtu: Option<u32>,
    ) -> Result<HostVeth, HostVethError> {
        let peer = peer_name(name);
        let setup = |op, dev: &str| {
            let dev = dev.to_owned();
            move |source| HostVethError::Setup { op, dev, source }
        };
        match existing(name).map_err(setup("looking up", name))? {
            Existing::Nothing => {}
            Existing::Leftover(ifindex) => {
                tracing::warn!(port = %name, peer = %peer, "replacing the veth pair an earlier xbr left");
                netdev::delete_link(ifindex).map_err(setup("deleting the leftover", name))?;
            }
            Existing::InUse => {
                return Err(HostVethError::InUse {
                    name: name.to_owned(),
                    peer,
                })
            }
            Existing::Foreign => {
                return Err(HostVethError::Foreign {
                    name: name.to_owned(),
                    peer,
                })
            }
        }
        let ifindex = netdev::create_veth(name, mac, mtu, &peer, PEER_MTU).map_err(|source| {
            HostVethError::Create {
                name: name.to_owned(),
                peer: peer.clone(),
                source,
            }
        })?;
        let peer_ifindex = match netdev::ifindex(&peer) {
            Ok(i) => i,
            Err(e) => {
                // Cannot happen short of a concurrent delete; clean up
                // through the host end.
                let _ = netdev::delete_link(ifindex);
                return Err(setup("looking up", &peer)(e));
            }
        };
        // From here on, dropping `pair` deletes what was made.
        let pair = HostVeth {
            name: name.to_owned(),
            ifindex,
            peer: peer.clone(),
            peer_ifindex,
        };
        crate::genl::enable_gro(ifindex).map_err(setup("turning GRO on", name))?;
        // The xbr end is no interface of the host's: without IPv6 it sends
        // no router solicitations or MLD reports of its own to the host end.
        // Best effort (IPv6 may be absent or /proc/sys read-only).
        let knob = format!("/proc/sys/net/ipv6/conf/{peer}/disable_ipv6");
        if let Err(e) = std::fs::write(&knob, "1") {
            tracing::debug!(port = %name, "cannot disable IPv6 on {peer}: {e}");
        }
        netdev::set_up(pair.peer_ifindex, true).map_err(setup("bringing up", &peer))?;
        netdev::set_up(ifindex, true).map_err(setup("bringing up", name))?;
        Ok(pair)
    }

    /// The host end's name (the port's).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The host end's ifindex.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The xbr end's name.
    pub fn peer(&self) -> &str {
        &self.peer
    }

    /// The xbr end's ifindex.
    pub fn peer_ifindex(&self) -> u32 {
        self.peer_ifindex
    }
}

impl Drop for HostVeth {
    fn drop(&mut self) {
        // Through the xbr end, which stays in xbr's namespace even when
        // the host end was moved elsewhere; deleting either end deletes
        // both. Only if the index still names that end: never delete an
        // interface that took its place.
        match netdev::link_by_index(self.peer_ifindex) {
            Ok(l) if l.name == self.peer && l.kind.as_deref() == Some("veth") => {
                match netdev::delete_link(self.peer_ifindex) {
                    Ok(()) => {
                        tracing::debug!(port = %self.name, peer = %self.peer, "veth pair deleted")
                    }
                    Err(e) => tracing::warn!(port = %self.name, "cannot delete the veth pair: {e}"),
                }
            }
            Ok(_) | Err(NetdevError::NotFound(_)) => {}
            Err(e) => tracing::warn!(port = %self.name, "cannot delete the veth pair: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_names_are_valid_and_distinct() {
        assert_eq!(peer_name("tun0"), "xbr-tun0");
        assert_eq!(peer_name("abcdefghijk"), "xbr-abcdefghijk");
        let a = peer_name("abcdefghijkl");
        let b = peer_name("abcdefghijkm");
        assert_ne!(a, b);
        for n in [a, b, peer_name("123456789012345")] {
            assert!(netdev::validate_name(&n).is_ok(), "{n}");
            assert!(n.starts_with("xbr-"), "{n}");
        }
    }

    #[test]
    fn an_absent_name_is_free() {
        assert_eq!(existing("xbr-no-such0").unwrap(), Existing::Nothing);
        // Loopback is no veth: never ours to delete.
        assert_eq!(existing("lo").unwrap(), Existing::Foreign);
    }
}
