//! Netdev queries and settings over rtnetlink (no ioctls, no unsafe).
//!
//! Everything goes through a synchronous NETLINK_ROUTE request/ack
//! exchange on a short-lived socket, so answers always describe the
//! network namespace the calling thread is in (sysfs may be mounted for
//! another one). These are control-path calls: one socket and a few
//! allocations per call is fine.

use std::io;

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_REQUEST,
};
use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::link::{
    InfoData, InfoKind, InfoVeth, LinkAttribute, LinkFlags, LinkInfo as NlLinkInfo, LinkMessage,
    LinkXdp, XdpAttached,
};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

/// Longest interface name the kernel accepts (IFNAMSIZ - 1).
pub const MAX_IFNAME_LEN: usize = 15;

#[derive(Debug, thiserror::Error)]
pub enum NetdevError {
    #[error("invalid interface name {0:?}")]
    InvalidName(String),
    #[error("no such interface {0:?}")]
    NotFound(String),
    #[error("netlink {op} for {dev}: {source}")]
    Netlink {
        op: &'static str,
        dev: String,
        #[source]
        source: io::Error,
    },
    #[error("netlink {op} for {dev}: malformed reply: {detail}")]
    Malformed {
        op: &'static str,
        dev: String,
        detail: String,
    },
}

/// What xbr needs to know about a netdev.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkInfo {
    pub name: String,
    pub ifindex: u32,
    /// `None` for devices without a link-layer address (e.g. a TUN).
    pub mac: Option<[u8; 6]>,
    pub mtu: u32,
    /// Administratively up (IFF_UP).
    pub up: bool,
    /// Carrier and lower layers up (IFF_LOWER_UP).
    pub lower_up: bool,
    pub rx_queues: u32,
    pub tx_queues: u32,
    /// The driver kind (`IFLA_INFO_KIND`: "veth", "tun", ...), if any.
    pub kind: Option<String>,
    /// `IFLA_LINK`: for a veth, its peer's ifindex (in the peer's
    /// namespace, which is this one unless it was moved).
    pub link: Option<u32>,
    /// `IFLA_LINK_NETNSID`: the namespace (its id as this one numbers it)
    /// `link` is in, when that is another one (a veth's peer in a pod).
    pub link_netnsid: Option<i32>,
    /// An XDP program is attached (any mode).
    pub xdp_attached: bool,
}

/// A MAC as `ip link` and `ovs-vsctl` print it: `0a:58:0a:80:00:02`.
pub fn format_mac(mac: [u8; 6]) -> String {
    let [a, b, c, d, e, g] = mac;
    format!("{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
}

/// Checks a name against the kernel's rules for interface names.
pub fn validate_name(name: &str) -> Result<(), NetdevError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_IFNAME_LEN
        && name != "."
        && name != ".."
        && !name
            .bytes()
            .any(|b| b == b'/' || b == b':' || b.is_ascii_whitespace() || b == 0);
    if ok {
        Ok(())
    } else {
        Err(NetdevError::InvalidName(name.to_owned()))
    }
}

/// Looks a netdev up by name.
pub fn link_by_name(name: &str) -> Result<LinkInfo, NetdevError> {
    validate_name(name)?;
    let mut msg = LinkMessage::default();
    msg.attributes.push(LinkAttribute::IfName(name.to_owned()));
    link_get(msg, name)
}

/// Looks a netdev up by index.
pub fn link_by_index(ifindex: u32) -> Result<LinkInfo, NetdevError> {
    let mut msg = LinkMessage::default();
    msg.header.index = ifindex;
    link_get(msg, &format!("ifindex {ifindex}"))
}

/// Interface index of `name`.
pub fn ifindex(name: &str) -> Result<u32, NetdevError> {
    link_by_name(name).map(|l| l.ifindex)
}

/// Sets the administrative state (IFF_UP).
pub fn set_up(ifindex: u32, up: bool) -> Result<(), NetdevError> {
    let mut msg = LinkMessage::default();
    msg.header.index = ifindex;
    msg.header.change_mask = LinkFlags::Up;
    if up {
        msg.header.flags = LinkFlags::Up;
    }
    link_set(msg, ifindex, "set up/down")
}

pub fn set_mtu(ifindex: u32, mtu: u32) -> Result<(), NetdevError> {
    let mut msg = LinkMessage::default();
    msg.header.index = ifindex;
    msg.attributes.push(LinkAttribute::Mtu(mtu));
    link_set(msg, ifindex, "set mtu")
}

pub fn set_mac(ifindex: u32, mac: [u8; 6]) -> Result<(), NetdevError> {
    let mut msg = LinkMessage::default();
    msg.header.index = ifindex;
    msg.attributes.push(LinkAttribute::Address(mac.to_vec()));
    link_set(msg, ifindex, "set mac")
}

/// Creates a veth pair: `name`, with `mac` and `mtu` when given, and its
/// peer `peer` with MTU `peer_mtu`, both down. Returns `name`'s ifindex.
/// Fails (EEXIST) when either name is taken.
pub fn create_veth(
    name: &str,
    mac: Option<[u8; 6]>,
    mtu: Option<u32>,
    peer: &str,
    peer_mtu: u32,
) -> Result<u32, NetdevError> {
    validate_name(name)?;
    validate_name(peer)?;
    let mut peer_msg = LinkMessage::default();
    peer_msg
        .attributes
        .push(LinkAttribute::IfName(peer.to_owned()));
    peer_msg.attributes.push(LinkAttribute::Mtu(peer_mtu));
    let mut msg = LinkMessage::default();
    msg.attributes.push(LinkAttribute::IfName(name.to_owned()));
    if let Some(mac) = mac {
        msg.attributes.push(LinkAttribute::Address(mac.to_vec()));
    }
    if let Some(mtu) = mtu {
        msg.attributes.push(LinkAttribute::Mtu(mtu));
    }
    msg.attributes.push(LinkAttribute::LinkInfo(vec![
        NlLinkInfo::Kind(InfoKind::Veth),
        NlLinkInfo::Data(InfoData::Veth(InfoVeth::Peer(peer_msg))),
    ]));
    request_flags(
        RouteNetlinkMessage::NewLink(msg),
        NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
        "create veth",
        name,
    )?;
    ifindex(name)
}

/// Deletes the netdev `ifindex` (for a veth, both ends go).
pub fn delete_link(ifindex: u32) -> Result<(), NetdevError> {
    let mut msg = LinkMessage::default();
    msg.header.index = ifindex;
    request(
        RouteNetlinkMessage::DelLink(msg),
        "delete link",
        &format!("ifindex {ifindex}"),
    )
    .map(|_| ())
}

fn link_get(msg: LinkMessage, dev: &str) -> Result<LinkInfo, NetdevError> {
    let replies = request(RouteNetlinkMessage::GetLink(msg), "get link", dev)?;
    let link = replies
        .into_iter()
        .find_map(|m| match m {
            RouteNetlinkMessage::NewLink(l) => Some(l),
            _ => None,
        })
        .ok_or_else(|| NetdevError::Malformed {
            op: "get link",
            dev: dev.to_owned(),
            detail: "no link in reply".into(),
        })?;
    let mut info = LinkInfo {
        name: String::new(),
        ifindex: link.header.index,
        mac: None,
        mtu: 0,
        up: link.header.flags.contains(LinkFlags::Up),
        lower_up: link.header.flags.contains(LinkFlags::LowerUp),
        rx_queues: 1,
        tx_queues: 1,
        kind: None,
        link: None,
        link_netnsid: None,
        xdp_attached: false,
    };
    for attr in link.attributes {
        match attr {
            LinkAttribute::IfName(n) => info.name = n,
            LinkAttribute::Address(a) => info.mac = <[u8; 6]>::try_from(a.as_slice()).ok(),
            LinkAttribute::Mtu(m) => info.mtu = m,
            LinkAttribute::NumRxQueues(n) => info.rx_queues = n,
            LinkAttribute::NumTxQueues(n) => info.tx_queues = n,
            LinkAttribute::Link(i) => info.link = Some(i),
            LinkAttribute::LinkNetNsId(id) if id >= 0 => info.link_netnsid = Some(id),
            LinkAttribute::LinkInfo(infos) => {
                for i in infos {
                    if let NlLinkInfo::Kind(k) = i {
                        info.kind = Some(k.to_string());
                    }
                }
            }
            LinkAttribute::Xdp(xdp) => {
                info.xdp_attached |= xdp.iter().any(|x| {
                    matches!(x, LinkXdp::Attached(a) if *a != XdpAttached::None)
                        || matches!(x, LinkXdp::ProgId(id) if *id != 0)
                });
            }
            _ => {}
        }
    }
    Ok(info)
}

/// The id of the XDP program attached to `ifindex` (0: none); `xbr
/// doctor` names it.
pub fn xdp_prog_id(ifindex: u32) -> Result<u32, NetdevError> {
    let mut msg = LinkMessage::default();
    msg.header.index = ifindex;
    let replies = request_flags(
        RouteNetlinkMessage::GetLink(msg),
        NLM_F_REQUEST | NLM_F_ACK,
        "get link",
        &format!("ifindex {ifindex}"),
    )?;
    Ok(replies
        .into_iter()
        .filter_map(|m| match m {
            RouteNetlinkMessage::NewLink(l) => Some(l),
            _ => None,
        })
        .flat_map(|l| l.attributes)
        .filter_map(|a| match a {
            LinkAttribute::Xdp(x) => Some(x),
            _ => None,
        })
        .flatten()
        .find_map(|x| match x {
            LinkXdp::ProgId(id) if id != 0 => Some(id),
            _ => None,
        })
        .unwrap_or(0))
}

fn link_set(msg: LinkMessage, ifindex: u32, op: &'static str) -> Result<(), NetdevError> {
    request(
        RouteNetlinkMessage::SetLink(msg),
        op,
        &format!("ifindex {ifindex}"),
    )
    .map(|_| ())
}

/// Sends one request and collects the replies up to the kernel's ack.
fn request(
    msg: RouteNetlinkMessage,
    op: &'static str,
    dev: &str,
) -> Result<Vec<RouteNetlinkMessage>, NetdevError> {
    request_flags(msg, NLM_F_REQUEST | NLM_F_ACK, op, dev)
}

/// Sends one request with netlink `flags` (e.g. NLM_F_DUMP) and collects
/// the replies up to the kernel's ack or end of dump.
pub(crate) fn request_flags(
    msg: RouteNetlinkMessage,
    flags: u16,
    op: &'static str,
    dev: &str,
) -> Result<Vec<RouteNetlinkMessage>, NetdevError> {
    let nl_err = |source: io::Error| NetdevError::Netlink {
        op,
        dev: dev.to_owned(),
        source,
    };
    let malformed = |detail: String| NetdevError::Malformed {
        op,
        dev: dev.to_owned(),
        detail,
    };

    let mut header = NetlinkHeader::default();
    header.flags = flags;
    header.sequence_number = 1;
    let mut packet = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(msg));
    packet.finalize();
    let mut buf = vec![0u8; packet.buffer_len()];
    packet.serialize(&mut buf);

    let mut socket = Socket::new(NETLINK_ROUTE).map_err(nl_err)?;
    socket.bind_auto().map_err(nl_err)?;
    socket.connect(&SocketAddr::new(0, 0)).map_err(nl_err)?;
    socket.send(&buf, 0).map_err(nl_err)?;

    let mut out = Vec::new();
    loop {
        let (data, _) = socket.recv_from_full().map_err(nl_err)?;
        if data.is_empty() {
            return Err(malformed("empty datagram".into()));
        }
        let mut offset = 0;
        while offset < data.len() {
            let rest = data.get(offset..).unwrap_or_default();
            let reply = NetlinkMessage::<RouteNetlinkMessage>::deserialize(rest)
                .map_err(|e| malformed(e.to_string()))?;
            let len = reply.header.length as usize;
            match reply.payload {
                NetlinkPayload::Error(e) => {
                    return match e.code {
                        None => Ok(out),
                        Some(code) if code.get() == -libc::ENODEV => {
                            Err(NetdevError::NotFound(dev.to_owned()))
                        }
                        Some(_) => Err(nl_err(e.to_io())),
                    };
                }
                NetlinkPayload::Done(_) => return Ok(out),
                NetlinkPayload::InnerMessage(m) => out.push(m),
                _ => {}
            }
            if len == 0 {
                return Err(malformed("zero-length message".into()));
            }
            // Messages are 4-byte aligned inside a datagram.
            offset += (len + 3) & !3;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_validated() {
        assert!(validate_name("veth-a").is_ok());
        assert!(validate_name("").is_err());
        assert!(validate_name("abcdefghijklmnop").is_err());
        assert!(validate_name("../etc").is_err());
        assert!(validate_name("a b").is_err());
    }

    #[test]
    fn loopback_is_found() {
        // Every network namespace has `lo` at index 1; no privileges needed.
        let lo = link_by_name("lo").expect("lo exists");
        assert_eq!(lo.ifindex, 1);
        assert_eq!(lo.name, "lo");
        assert!(lo.mtu > 0);
        assert_eq!(link_by_index(1).expect("by index").name, "lo");
        assert!(matches!(
            link_by_name("xbr-no-such0"),
            Err(NetdevError::NotFound(_))
        ));
    }
}
