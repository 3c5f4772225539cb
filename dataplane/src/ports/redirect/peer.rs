//! Making a veth's peer take XDP-redirected frames: GRO turned on for the
//! peer (`ethtool -K eth0 gro on` inside the pod), from the host.
//!
//! Why GRO and not a pass-through XDP program on the peer: both give the
//! peer the NAPI instance redirected frames need; GRO costs the pod
//! nothing per packet (it merges TCP segments the pod receives, which
//! saves its stack work), while a program would run on every frame the
//! pod receives, show in the pod's `ip link`, and take the XDP hook from
//! anything in the pod that wants it. See docs/xdp-redirect-readiness.md.
//!
//! How: the host end's `IFLA_LINK_NETNSID` names the peer's network
//! namespace by the id this one gives it. Namespaces have no lookup by
//! id, so candidates are opened, named ones first (`/run/netns`, where
//! CRI-O and `ip netns` pin pods' namespaces) then those of processes
//! (`/proc/PID/ns/net`, each namespace asked once), and each is asked
//! for its id (`RTM_GETNSID` with its fd). A short-lived thread then
//! enters the one found (`setns`) and sends the ethtool request there.
//! At most [`MAX_CANDIDATES`] namespaces are asked per port. Control
//! path only: once per port added while its peer is not ready.

use crate::genl;
use crate::netdev::{self, LinkInfo, NetdevError};
use netlink_packet_core::{NLM_F_ACK, NLM_F_REQUEST};
use netlink_packet_route::nsid::{NsidAttribute, NsidMessage};
use netlink_packet_route::RouteNetlinkMessage;
use std::collections::HashSet;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Network namespaces asked for their id, at most, per port: bounds the
/// work a node with many processes costs (each is one open and one
/// netlink request; processes sharing a namespace count once).
const MAX_CANDIDATES: usize = 4096;

/// Directories where namespaces are pinned by name.
const NAMED: [&str; 2] = ["/run/netns", "/var/run/netns"];

#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error("{dev} is not a veth")]
    NotVeth { dev: String },
    #[error("{0}")]
    Netdev(#[from] NetdevError),
    #[error("the peer's network namespace (id {nsid}) was not found among {asked} namespaces")]
    NoNamespace { nsid: i32, asked: usize },
    #[error("cannot enter the peer's network namespace {path}: {source}")]
    Enter {
        path: PathBuf,
        #[source]
        source: nix::Error,
    },
    #[error("cannot start a thread to enter the peer's namespace: {0}")]
    Thread(std::io::Error),
}

/// Turns GRO on for the peer of the veth `host`; returns how to name the
/// peer to the operator (`eth0 in netns /run/netns/NAME`).
pub fn enable_gro(host: &LinkInfo) -> Result<String, PeerError> {
    let not_veth = || PeerError::NotVeth {
        dev: host.name.clone(),
    };
    if host.kind.as_deref() != Some("veth") {
        return Err(not_veth());
    }
    let peer = host.link.ok_or_else(not_veth)?;
    let Some(nsid) = host.link_netnsid else {
        // Both ends here (no namespace between them).
        genl::enable_gro(peer)?;
        let name =
            netdev::link_by_index(peer).map_or_else(|_| format!("ifindex {peer}"), |l| l.name);
        return Ok(name);
    };
    let (ns, path) = find_namespace(nsid)?;
    let result = std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("xbr-peer-gro".into())
            .spawn_scoped(s, || -> Result<String, PeerError> {
                // This thread only: the namespace goes with it.
                nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET).map_err(|source| {
                    PeerError::Enter {
                        path: path.clone(),
                        source,
                    }
                })?;
                genl::enable_gro(peer)?;
                Ok(netdev::link_by_index(peer)
                    .map_or_else(|_| format!("ifindex {peer}"), |l| l.name))
            })
            .map_err(PeerError::Thread)?
            .join()
            .unwrap_or_else(|_| {
                Err(PeerError::Thread(std::io::Error::other(
                    "the thread panicked",
                )))
            })
    })?;
    Ok(format!("{result} in netns {}", path.display()))
}

/// The namespace this one numbers `nsid`, opened, and its path.
fn find_namespace(nsid: i32) -> Result<(File, PathBuf), PeerError> {
    let mut seen = HashSet::new();
    let mut asked = 0;
    let named = NAMED
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()));
    let procs = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .map(|e| e.path().join("ns/net"));
    for path in named.chain(procs) {
        if asked >= MAX_CANDIDATES {
            break;
        }
        let Ok(file) = File::open(&path) else {
            continue;
        };
        // The namespace's identity: processes share them.
        let Ok(meta) = file.metadata() else {
            continue;
        };
        if !seen.insert((meta.dev(), meta.ino())) {
            continue;
        }
        asked += 1;
        if nsid_of(&file, &path) == Some(nsid) {
            return Ok((file, path));
        }
    }
    Err(PeerError::NoNamespace { nsid, asked })
}

/// The id this namespace gives the namespace `ns` (`None`: none given,
/// or not a namespace).
fn nsid_of(ns: &File, path: &Path) -> Option<i32> {
    let mut msg = NsidMessage::default();
    msg.attributes
        .push(NsidAttribute::Fd(ns.as_raw_fd() as u32));
    let replies = netdev::request_flags(
        RouteNetlinkMessage::GetNsId(msg),
        NLM_F_REQUEST | NLM_F_ACK,
        "get nsid",
        &path.display().to_string(),
    )
    .ok()?;
    replies.into_iter().find_map(|m| match m {
        RouteNetlinkMessage::NewNsId(m) => m.attributes.into_iter().find_map(|a| match a {
            NsidAttribute::Id(id) if id >= 0 => Some(id),
            _ => None,
        }),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_veths_have_peers() {
        let lo = netdev::link_by_name("lo").expect("lo");
        assert!(matches!(enable_gro(&lo), Err(PeerError::NotVeth { .. })));
    }

    #[test]
    fn an_id_no_namespace_has_is_not_found() {
        assert!(matches!(
            find_namespace(i32::MAX - 7),
            Err(PeerError::NoNamespace { .. })
        ));
    }
}
