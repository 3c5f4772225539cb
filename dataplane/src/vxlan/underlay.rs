//! Which interface and address a flow-based VXLAN port sends from: its
//! underlay, found in the kernel's addresses and routes over rtnetlink.
//!
//! OVS resolves a flow-based tunnel's underlay per packet from its own
//! copy of the routing table; xbr picks one uplink per port (the
//! interface the AF_XDP socket and the XDP program sit on) and looks it
//! up again whenever the kernel announces an address, route or link
//! change ([`super::super::netwatch`]), so that a port created before the
//! node's uplink is configured starts forwarding once it is.
//!
//! The rule, in order: the interface that holds `options:local_ip`; else
//! the interface of the main table's IPv4 default route (lowest metric)
//! and its first address; else the only interface with an IPv4 address
//! that is neither loopback nor one of the switch's own ports.
//!
//! Each lookup is two or three netlink dumps on a short-lived socket (no
//! subprocess): a control-path cost paid on a kernel change, not per
//! packet.

use crate::netdev::{self, NetdevError};
use netlink_packet_core::{NLM_F_DUMP, NLM_F_REQUEST};
use netlink_packet_route::address::{AddressAttribute, AddressHeaderFlags, AddressMessage};
use netlink_packet_route::route::{RouteAttribute, RouteMessage, RouteType};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};

/// The main routing table's id (RT_TABLE_MAIN).
const MAIN_TABLE: u32 = 254;

#[derive(Debug, thiserror::Error)]
pub enum UnderlayError {
    #[error("vxlan: no interface holds local_ip {0}")]
    NoLocalIp(Ipv4Addr),
    #[error("vxlan: uplink {0} has no IPv4 address")]
    UplinkWithoutAddress(String),
    #[error(
        "vxlan: no default route and no single addressed interface to use as the uplink; \
         set options:local_ip"
    )]
    NoUplink,
    #[error("vxlan: reading the host's addresses and routes: {0}")]
    Netlink(#[from] NetdevError),
}

/// The port's local address and uplink interface name, as the rule in the
/// module documentation picks them; `ports`: the switch's own interfaces.
pub fn resolve(
    local_ip: Option<Ipv4Addr>,
    ports: &BTreeSet<String>,
) -> Result<(Ipv4Addr, String), UnderlayError> {
    let addrs = addresses()?;
    if let Some(ip) = local_ip {
        let (ifindex, _) = addrs
            .iter()
            .find(|(_, a)| *a == ip)
            .ok_or(UnderlayError::NoLocalIp(ip))?;
        return Ok((ip, netdev::link_by_index(*ifindex)?.name));
    }
    if let Some(oif) = default_route_oif()? {
        let name = netdev::link_by_index(oif)?.name;
        return addrs
            .iter()
            .find(|(i, _)| *i == oif)
            .map(|(_, a)| (*a, name.clone()))
            .ok_or(UnderlayError::UplinkWithoutAddress(name));
    }
    let mut candidates = Vec::new();
    for (ifindex, a) in &addrs {
        if a.is_loopback() || candidates.iter().any(|(i, _, _)| i == ifindex) {
            continue;
        }
        let name = netdev::link_by_index(*ifindex)?.name;
        if !ports.contains(&name) {
            candidates.push((*ifindex, *a, name));
        }
    }
    match candidates.as_slice() {
        [(_, a, name)] => Ok((*a, name.clone())),
        _ => Err(UnderlayError::NoUplink),
    }
}

/// Every IPv4 address as (ifindex, address), primary addresses of an
/// interface before its secondary ones.
fn addresses() -> Result<Vec<(u32, Ipv4Addr)>, NetdevError> {
    let mut msg = AddressMessage::default();
    msg.header.family = AddressFamily::Inet;
    let replies = netdev::request_flags(
        RouteNetlinkMessage::GetAddress(msg),
        NLM_F_REQUEST | NLM_F_DUMP,
        "dump addresses",
        "all interfaces",
    )?;
    let mut out: Vec<(bool, u32, Ipv4Addr)> = Vec::new();
    for m in replies {
        let RouteNetlinkMessage::NewAddress(a) = m else {
            continue;
        };
        // IFA_LOCAL is the interface's own address (IFA_ADDRESS is the
        // peer's on point-to-point links); fall back to IFA_ADDRESS.
        let (mut local, mut address) = (None, None);
        for attr in &a.attributes {
            match attr {
                AddressAttribute::Local(IpAddr::V4(ip)) => local = Some(*ip),
                AddressAttribute::Address(IpAddr::V4(ip)) => address = Some(*ip),
                _ => {}
            }
        }
        if let Some(ip) = local.or(address) {
            let secondary = a.header.flags.contains(AddressHeaderFlags::Secondary);
            out.push((secondary, a.header.index, ip));
        }
    }
    // Stable: the kernel's order within primaries and within secondaries.
    out.sort_by_key(|(secondary, ifindex, _)| (*ifindex, *secondary));
    Ok(out.into_iter().map(|(_, i, a)| (i, a)).collect())
}

/// The output interface of the main table's IPv4 default route with the
/// lowest metric (a multipath route: its first next hop).
fn default_route_oif() -> Result<Option<u32>, NetdevError> {
    let mut msg = RouteMessage::default();
    msg.header.address_family = AddressFamily::Inet;
    let replies = netdev::request_flags(
        RouteNetlinkMessage::GetRoute(msg),
        NLM_F_REQUEST | NLM_F_DUMP,
        "dump routes",
        "main table",
    )?;
    let mut best: Option<(u32, u32)> = None;
    for m in replies {
        let RouteNetlinkMessage::NewRoute(r) = m else {
            continue;
        };
        if r.header.destination_prefix_length != 0 || r.header.kind != RouteType::Unicast {
            continue;
        }
        let (mut table, mut oif, mut metric) = (u32::from(r.header.table), None, 0);
        for attr in &r.attributes {
            match attr {
                RouteAttribute::Table(t) => table = *t,
                RouteAttribute::Oif(i) => oif = Some(*i),
                RouteAttribute::Priority(p) => metric = *p,
                RouteAttribute::MultiPath(hops) => {
                    oif = oif.or(hops.first().map(|h| h.interface_index))
                }
                _ => {}
            }
        }
        if table != MAIN_TABLE {
            continue;
        }
        if let Some(oif) = oif {
            if best.is_none_or(|(m, _)| metric < m) {
                best = Some((metric, oif));
            }
        }
    }
    Ok(best.map(|(_, oif)| oif))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_holds_its_address_and_unknown_addresses_are_named() {
        // Every namespace has lo with 127.0.0.1 once it is up; a test host
        // always has it.
        let (ip, dev) = resolve(Some(Ipv4Addr::LOCALHOST), &BTreeSet::new()).unwrap();
        assert_eq!((ip, dev.as_str()), (Ipv4Addr::LOCALHOST, "lo"));
        let err = resolve(Some("192.0.2.77".parse().unwrap()), &BTreeSet::new()).unwrap_err();
        assert!(
            err.to_string()
                .contains("no interface holds local_ip 192.0.2.77"),
            "{err}"
        );
    }
}
