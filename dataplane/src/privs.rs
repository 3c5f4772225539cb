//! Least privilege: the capabilities `xbr run` needs, and dropping every
//! other one at start.
//!
//! [`NEEDED`] is the whole set, each with the reason (also in
//! docs/operations.md, the systemd unit's `CapabilityBoundingSet=` and
//! the DaemonSet's `securityContext`; tests/tests/privs.rs runs the
//! skeleton scenario under exactly this set, and without each of them).
//! CAP_SYS_ADMIN is not in it: xbr's forwarding enters no namespace and
//! reads BPF objects only through the fds it created. It is
//! [`OPTIONAL`]: kept when held and `xdp-peer-gro` is on (the default),
//! because making a pod ready for the XDP flow cache means entering the
//! pod's network namespace (setns needs CAP_SYS_ADMIN; there is no other
//! way to change a device's features in another namespace). Without it
//! xbr runs, and such pods are served by the packet threads (each port's
//! state says why).
//!
//! [`drop_to_needed`] runs first thing in `xbr run`, before any thread
//! exists (capability sets are per thread and inherited by new threads):
//! it refuses to start, naming what is missing, if a needed capability
//! is not held, then removes every other one from the bounding set (so
//! no program xbr runs, such as `ip`, regains them), the inheritable and
//! ambient sets, and the permitted and effective sets.

use caps::{CapSet, Capability, CapsHashSet};
use thiserror::Error;

/// The capabilities `xbr run` needs, and why.
pub const NEEDED: &[(Capability, &str)] = &[
    (
        Capability::CAP_NET_ADMIN,
        "attach XDP programs (bpf_link), set links up/MTU/MAC, create veths and TAPs, kernel conntrack over netlink",
    ),
    (
        Capability::CAP_NET_RAW,
        "open AF_XDP sockets",
    ),
    (
        Capability::CAP_BPF,
        "load the XDP programs and create their maps",
    ),
    (
        Capability::CAP_PERFMON,
        "the verifier lets only a perfmon-capable loader copy packet pointers as the XDP programs do (else EACCES, 'partial copy of pointer')",
    ),
    (
        Capability::CAP_IPC_LOCK,
        "pin the AF_XDP packet memory (UMEM, 8 MiB a port) beyond RLIMIT_MEMLOCK (8 MiB by default: XDP_UMEM_REG fails with ENOBUFS)",
    ),
];

/// Capabilities kept when held, for one feature each; xbr runs without
/// them (see the module comment).
pub const OPTIONAL: &[(Capability, &str)] = &[(
    Capability::CAP_SYS_ADMIN,
    "enter a pod's network namespace to turn GRO on in its eth0 (xdp-peer-gro), so the XDP flow cache can forward to it; mount bpffs for pinning if it is not mounted",
)];

#[derive(Debug, Error)]
pub enum PrivsError {
    #[error("reading the capability sets: {0}")]
    Read(#[source] caps::errors::CapsError),
    #[error("dropping capabilities ({what}): {source}")]
    Drop {
        what: &'static str,
        #[source]
        source: caps::errors::CapsError,
    },
    #[error("{}", missing_message(.0))]
    Missing(Vec<Capability>),
}

fn missing_message(missing: &[Capability]) -> String {
    let mut s = String::from("missing capabilities:");
    for cap in missing {
        s.push_str(&format!(" {cap} ({})", why(*cap).unwrap_or("?")));
    }
    s.push_str(
        "; run as root or grant them (systemd: AmbientCapabilities=; see docs/operations.md)",
    );
    s
}

/// Why xbr needs `cap`, or `None` if it does not.
pub fn why(cap: Capability) -> Option<&'static str> {
    NEEDED
        .iter()
        .chain(OPTIONAL)
        .find(|(c, _)| *c == cap)
        .map(|(_, w)| *w)
}

/// The optional capabilities the calling thread holds.
pub fn optional_held() -> Result<Vec<Capability>, PrivsError> {
    let held = caps::read(None, CapSet::Effective).map_err(PrivsError::Read)?;
    Ok(OPTIONAL
        .iter()
        .map(|(c, _)| *c)
        .filter(|c| held.contains(c))
        .collect())
}

/// The needed set.
pub fn needed() -> CapsHashSet {
    NEEDED.iter().map(|(c, _)| *c).collect()
}

/// The needed capabilities the calling thread's effective set lacks.
pub fn missing() -> Result<Vec<Capability>, PrivsError> {
    let held = caps::read(None, CapSet::Effective).map_err(PrivsError::Read)?;
    Ok(NEEDED
        .iter()
        .map(|(c, _)| *c)
        .filter(|c| !held.contains(c))
        .collect())
}

/// Checks that the needed capabilities are held and drops all others,
/// but for the [`OPTIONAL`] ones held when `optional` (see the module
/// comment). Call before starting any thread.
pub fn drop_to_needed(optional: bool) -> Result<(), PrivsError> {
    let missing = missing()?;
    if !missing.is_empty() {
        return Err(PrivsError::Missing(missing));
    }
    let mut keep = needed();
    if optional {
        keep.extend(optional_held()?);
    }
    let err = |what| move |source| PrivsError::Drop { what, source };
    // The bounding set needs CAP_SETPCAP to shrink; without it (a
    // container that already lacks it) the bounding set is the
    // container's, which is as far as this process can go.
    let effective = caps::read(None, CapSet::Effective).map_err(PrivsError::Read)?;
    if effective.contains(&Capability::CAP_SETPCAP) {
        let bounding = caps::read(None, CapSet::Bounding).map_err(PrivsError::Read)?;
        for cap in bounding.difference(&keep) {
            caps::drop(None, CapSet::Bounding, *cap).map_err(err("bounding"))?;
        }
    }
    caps::clear(None, CapSet::Ambient).map_err(err("ambient"))?;
    caps::clear(None, CapSet::Inheritable).map_err(err("inheritable"))?;
    caps::set(None, CapSet::Effective, &keep).map_err(err("effective"))?;
    caps::set(None, CapSet::Permitted, &keep).map_err(err("permitted"))?;
    Ok(())
}
