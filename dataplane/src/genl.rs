//! The device settings and facts xbr gets over generic netlink (no
//! ioctl, no unsafe, no `ethtool` binary needed on the node):
//!
//! - `enable_gro`, ethtool family: turns GRO on for a veth. A veth hands
//!   frames that were XDP-redirected to its peer (`ndo_xdp_xmit`) to the
//!   peer's NAPI instance, which exists only while the peer runs an XDP
//!   program or has GRO on; otherwise the kernel drops them without a
//!   counter. The host end of a veth-backed internal port is xbr's own
//!   device, so xbr turns GRO on there and can then send XDP flow cache
//!   redirects to it (see `hostveth`).
//! - `xdp_features`, netdev family (Linux 6.3+): what a device's driver
//!   does with XDP frames, in particular whether frames redirected to it
//!   may come in several buffers (`NDO_XMIT_SG`). The kernel drops a
//!   multi-buffer frame redirected to a device without it, again without
//!   a counter, so the XDP flow cache forwards jumbo frames only to
//!   devices that have it.
//!
//! - [`XdpFeatureEvents`], netdev family's `mgmt` multicast group: every
//!   change of any device's xdp-features in this network namespace (a
//!   veth's follow its peer's GRO and XDP program), as it happens.
//!
//! Messages are built by hand: a netlink header, a generic-netlink header
//! and a few attributes, some nested. Control path only (once per port,
//! and once per device change).

use std::io;

use netlink_sys::{protocols::NETLINK_GENERIC, Socket, SocketAddr};

use crate::netdev::NetdevError;
use crate::nlattr::{
    put_attr, Attrs, NLA_F_NESTED, NLMSG_ERROR, NLMSG_HDRLEN, NLM_F_ACK, NLM_F_REQUEST,
};

const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const CTRL_ATTR_MCAST_GROUPS: u16 = 7;
const CTRL_ATTR_MCAST_GRP_NAME: u16 = 1;
const CTRL_ATTR_MCAST_GRP_ID: u16 = 2;

const ETHTOOL_GENL_VERSION: u8 = 1;
const ETHTOOL_MSG_FEATURES_SET: u8 = 12;
const ETHTOOL_A_FEATURES_HEADER: u16 = 1;
const ETHTOOL_A_FEATURES_WANTED: u16 = 3;
const ETHTOOL_A_HEADER_DEV_INDEX: u16 = 1;
const ETHTOOL_A_BITSET_BITS: u16 = 3;
const ETHTOOL_A_BITSET_BITS_BIT: u16 = 1;
const ETHTOOL_A_BITSET_BIT_NAME: u16 = 2;
const ETHTOOL_A_BITSET_BIT_VALUE: u16 = 3;

const NETDEV_GENL_VERSION: u8 = 1;
const NETDEV_CMD_DEV_GET: u8 = 1;
const NETDEV_CMD_DEV_ADD_NTF: u8 = 2;
const NETDEV_CMD_DEV_CHANGE_NTF: u8 = 4;
const NETDEV_A_DEV_IFINDEX: u16 = 1;
const NETDEV_A_DEV_XDP_FEATURES: u16 = 3;

/// `NETDEV_XDP_ACT_*` bits of [`xdp_features`].
pub mod xdp_act {
    /// Frames may be redirected to the device (`ndo_xdp_xmit`).
    pub const NDO_XMIT: u64 = 1 << 2;
    /// ... also frames in several buffers.
    pub const NDO_XMIT_SG: u64 = 1 << 6;
}

const GENL_HDRLEN: usize = 4;

/// Turns GRO on (`ethtool -K DEV gro on`) for the device `ifindex`.
pub fn enable_gro(ifindex: u32) -> Result<(), NetdevError> {
    let dev = format!("ifindex {ifindex}");
    let family = family_id("ethtool", &dev)?;
    let mut bit = Vec::new();
    put_attr(&mut bit, ETHTOOL_A_BITSET_BIT_NAME, b"rx-gro\0");
    put_attr(&mut bit, ETHTOOL_A_BITSET_BIT_VALUE, &[]);
    let mut bits = Vec::new();
    put_attr(&mut bits, ETHTOOL_A_BITSET_BITS_BIT | NLA_F_NESTED, &bit);
    // No NOMASK flag: the listed bit is the only one changed.
    let mut wanted = Vec::new();
    put_attr(&mut wanted, ETHTOOL_A_BITSET_BITS | NLA_F_NESTED, &bits);
    let mut header = Vec::new();
    put_attr(
        &mut header,
        ETHTOOL_A_HEADER_DEV_INDEX,
        &ifindex.to_ne_bytes(),
    );
    let mut attrs = Vec::new();
    put_attr(
        &mut attrs,
        ETHTOOL_A_FEATURES_HEADER | NLA_F_NESTED,
        &header,
    );
    put_attr(
        &mut attrs,
        ETHTOOL_A_FEATURES_WANTED | NLA_F_NESTED,
        &wanted,
    );
    exchange(
        family,
        ETHTOOL_MSG_FEATURES_SET,
        ETHTOOL_GENL_VERSION,
        &attrs,
        "ethtool features set",
        &dev,
    )
    .map(|_| ())
}

/// The `NETDEV_XDP_ACT_*` bits (see [`xdp_act`]) the device `ifindex`
/// has now. A veth's redirect bits follow its peer (an XDP program or GRO
/// there); kernels before 6.3 have no netdev family (an error).
pub fn xdp_features(ifindex: u32) -> Result<u64, NetdevError> {
    let dev = format!("ifindex {ifindex}");
    let op = "netdev dev-get";
    let family = family_id("netdev", &dev)?;
    let mut attrs = Vec::new();
    put_attr(&mut attrs, NETDEV_A_DEV_IFINDEX, &ifindex.to_ne_bytes());
    let replies = exchange(
        family,
        NETDEV_CMD_DEV_GET,
        NETDEV_GENL_VERSION,
        &attrs,
        op,
        &dev,
    )?;
    replies
        .iter()
        .find_map(|payload| {
            attrs_of(payload.get(GENL_HDRLEN..)?)
                .filter(|(t, _)| *t == NETDEV_A_DEV_XDP_FEATURES)
                .find_map(|(_, v)| Some(u64::from_ne_bytes(v.get(..8)?.try_into().ok()?)))
        })
        .ok_or_else(|| NetdevError::Malformed {
            op,
            dev,
            detail: "no xdp-features in reply".into(),
        })
}

/// The id the kernel gave the generic-netlink family `name`.
fn family_id(name: &str, dev: &str) -> Result<u16, NetdevError> {
    family(name, dev).map(|(id, _)| id)
}

/// The id the kernel gave the generic-netlink family `name`, and its
/// multicast groups' ids by name.
fn family(name: &str, dev: &str) -> Result<(u16, Vec<(String, u32)>), NetdevError> {
    let mut attrs = Vec::new();
    let mut cname = name.as_bytes().to_vec();
    cname.push(0);
    put_attr(&mut attrs, CTRL_ATTR_FAMILY_NAME, &cname);
    let op = "genl family lookup";
    let replies = exchange(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, 1, &attrs, op, dev)?;
    let mut groups = Vec::new();
    let mut id = None;
    for payload in &replies {
        for (t, v) in attrs_of(payload.get(GENL_HDRLEN..).unwrap_or_default()) {
            match t {
                CTRL_ATTR_FAMILY_ID if v.len() >= 2 => id = Some(u16::from_ne_bytes([v[0], v[1]])),
                CTRL_ATTR_MCAST_GROUPS => {
                    for (_, group) in attrs_of(v) {
                        let (mut gname, mut gid) = (None, None);
                        for (gt, gv) in attrs_of(group) {
                            match gt {
                                CTRL_ATTR_MCAST_GRP_NAME => {
                                    gname = Some(
                                        String::from_utf8_lossy(gv)
                                            .trim_end_matches('\0')
                                            .to_owned(),
                                    )
                                }
                                CTRL_ATTR_MCAST_GRP_ID if gv.len() >= 4 => {
                                    gid = Some(u32::from_ne_bytes([gv[0], gv[1], gv[2], gv[3]]))
                                }
                                _ => {}
                            }
                        }
                        if let (Some(n), Some(i)) = (gname, gid) {
                            groups.push((n, i));
                        }
                    }
                }
                _ => {}
            }
        }
    }
    let id = id.ok_or_else(|| NetdevError::Malformed {
        op,
        dev: dev.to_owned(),
        detail: format!("no id for family {name:?}"),
    })?;
    Ok((id, groups))
}

/// A socket subscribed to the netdev family's `mgmt` group: the kernel
/// sends it a message whenever a device of this network namespace appears
/// or its xdp-features change. Messages lost to a full socket buffer are
/// reported as [`XdpFeatureEvent::Overrun`], after which the reader must
/// ask every device it cares about again.
pub struct XdpFeatureEvents {
    socket: Socket,
    family: u16,
}

/// What [`XdpFeatureEvents::recv`] got.
#[derive(Debug, PartialEq, Eq)]
pub enum XdpFeatureEvent {
    /// The device `ifindex` has the xdp-features `features` now.
    Changed { ifindex: u32, features: u64 },
    /// Messages were lost (ENOBUFS).
    Overrun,
}

impl XdpFeatureEvents {
    /// Subscribes; fails on kernels without the netdev family (before
    /// 6.3).
    pub fn subscribe() -> Result<XdpFeatureEvents, NetdevError> {
        let dev = "netdev notifications";
        let (family, groups) = family("netdev", dev)?;
        let group = groups
            .iter()
            .find(|(n, _)| n == "mgmt")
            .map(|(_, id)| *id)
            .ok_or_else(|| NetdevError::Malformed {
                op: "genl family lookup",
                dev: dev.into(),
                detail: "the netdev family has no mgmt group".into(),
            })?;
        let nl_err = |source: io::Error| NetdevError::Netlink {
            op: "subscribe",
            dev: dev.into(),
            source,
        };
        let mut socket = Socket::new(NETLINK_GENERIC).map_err(nl_err)?;
        socket.bind_auto().map_err(nl_err)?;
        socket.add_membership(group).map_err(nl_err)?;
        Ok(XdpFeatureEvents { socket, family })
    }

    /// The socket, to poll on.
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.socket.as_fd()
    }

    /// Reads one datagram (blocking) and appends what it says to `out`.
    pub fn recv(&mut self, out: &mut Vec<XdpFeatureEvent>) -> Result<(), NetdevError> {
        let data = match self.socket.recv_from_full() {
            Ok((data, _)) => data,
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                out.push(XdpFeatureEvent::Overrun);
                return Ok(());
            }
            Err(source) => {
                return Err(NetdevError::Netlink {
                    op: "receive",
                    dev: "netdev notifications".into(),
                    source,
                })
            }
        };
        let mut offset = 0;
        while offset + NLMSG_HDRLEN <= data.len() {
            let h = &data[offset..];
            let len = u32::from_ne_bytes([h[0], h[1], h[2], h[3]]) as usize;
            let kind = u16::from_ne_bytes([h[4], h[5]]);
            let Some(body) = h.get(NLMSG_HDRLEN..len) else {
                break;
            };
            if kind == self.family {
                if let Some(ev) = parse_dev_notification(body) {
                    out.push(ev);
                }
            }
            offset += (len.max(NLMSG_HDRLEN) + 3) & !3;
        }
        Ok(())
    }
}

/// A netdev family message (generic-netlink header first): a device added
/// or changed, with its ifindex and xdp-features.
fn parse_dev_notification(body: &[u8]) -> Option<XdpFeatureEvent> {
    let cmd = *body.first()?;
    if cmd != NETDEV_CMD_DEV_ADD_NTF && cmd != NETDEV_CMD_DEV_CHANGE_NTF {
        return None;
    }
    let (mut ifindex, mut features) = (None, None);
    for (t, v) in attrs_of(body.get(GENL_HDRLEN..)?) {
        match t {
            NETDEV_A_DEV_IFINDEX if v.len() >= 4 => {
                ifindex = Some(u32::from_ne_bytes([v[0], v[1], v[2], v[3]]))
            }
            NETDEV_A_DEV_XDP_FEATURES => {
                features = Some(u64::from_ne_bytes(v.get(..8)?.try_into().ok()?))
            }
            _ => {}
        }
    }
    Some(XdpFeatureEvent::Changed {
        ifindex: ifindex?,
        features: features?,
    })
}

/// The (type, value) attributes of `buf`; stops at the first malformed one.
fn attrs_of(buf: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    Attrs::new(buf, 0).map_while(Result::ok)
}

/// Sends one request and returns the payloads (generic-netlink header
/// included) of the replies before the kernel's ack.
fn exchange(
    family: u16,
    cmd: u8,
    version: u8,
    attrs: &[u8],
    op: &'static str,
    dev: &str,
) -> Result<Vec<Vec<u8>>, NetdevError> {
    let nl_err = |source: io::Error| NetdevError::Netlink {
        op,
        dev: dev.to_owned(),
        source,
    };
    let malformed = |detail: &str| NetdevError::Malformed {
        op,
        dev: dev.to_owned(),
        detail: detail.to_owned(),
    };
    let len = NLMSG_HDRLEN + GENL_HDRLEN + attrs.len();
    let mut msg = Vec::with_capacity(len);
    msg.extend_from_slice(&(len as u32).to_ne_bytes());
    msg.extend_from_slice(&family.to_ne_bytes());
    msg.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
    msg.extend_from_slice(&1u32.to_ne_bytes()); // sequence number
    msg.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel fills it
    msg.extend_from_slice(&[cmd, version, 0, 0]);
    msg.extend_from_slice(attrs);

    let mut socket = Socket::new(NETLINK_GENERIC).map_err(nl_err)?;
    socket.bind_auto().map_err(nl_err)?;
    socket.connect(&SocketAddr::new(0, 0)).map_err(nl_err)?;
    socket.send(&msg, 0).map_err(nl_err)?;

    let mut out = Vec::new();
    loop {
        let (data, _) = socket.recv_from_full().map_err(nl_err)?;
        if data.is_empty() {
            return Err(malformed("empty datagram"));
        }
        let mut offset = 0;
        while offset + NLMSG_HDRLEN <= data.len() {
            let h = &data[offset..];
            let len = u32::from_ne_bytes([h[0], h[1], h[2], h[3]]) as usize;
            let kind = u16::from_ne_bytes([h[4], h[5]]);
            let body = h
                .get(NLMSG_HDRLEN..len)
                .ok_or_else(|| malformed("truncated message"))?;
            if kind == NLMSG_ERROR {
                let code = body
                    .get(..4)
                    .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
                    .ok_or_else(|| malformed("short error message"))?;
                return if code == 0 {
                    Ok(out)
                } else {
                    Err(nl_err(io::Error::from_raw_os_error(code.saturating_neg())))
                };
            }
            out.push(body.to_vec());
            offset += (len.max(NLMSG_HDRLEN) + 3) & !3;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_are_padded_and_read_back() {
        let mut buf = Vec::new();
        put_attr(&mut buf, 2, b"rx-gro\0");
        put_attr(&mut buf, 3 | NLA_F_NESTED, &[]);
        put_attr(&mut buf, 1, &7u32.to_ne_bytes());
        assert_eq!(buf.len(), 12 + 4 + 8);
        let got: Vec<(u16, Vec<u8>)> = attrs_of(&buf).map(|(t, v)| (t, v.to_vec())).collect();
        assert_eq!(
            got,
            vec![
                (2, b"rx-gro\0".to_vec()),
                (3, Vec::new()),
                (1, 7u32.to_ne_bytes().to_vec())
            ]
        );
        // A length running past the buffer ends the walk, not a panic.
        assert_eq!(attrs_of(&[40, 0, 1, 0, 0]).count(), 0);
    }

    #[test]
    fn the_ethtool_family_is_found() {
        // Every kernel with ethtool netlink (5.6+) registers it; no
        // privileges are needed to look it up.
        assert!(family_id("ethtool", "test").is_ok());
        assert!(family_id("xbr-no-such-family", "test").is_err());
    }

    #[test]
    fn the_netdev_mgmt_group_is_found_and_notifications_parse() {
        // Subscribing needs no privileges either.
        XdpFeatureEvents::subscribe().expect("netdev family (Linux 6.3+)");
        let mut body = vec![NETDEV_CMD_DEV_CHANGE_NTF, 1, 0, 0];
        put_attr(&mut body, NETDEV_A_DEV_IFINDEX, &7u32.to_ne_bytes());
        put_attr(&mut body, NETDEV_A_DEV_XDP_FEATURES, &0x44u64.to_ne_bytes());
        assert_eq!(
            parse_dev_notification(&body),
            Some(XdpFeatureEvent::Changed {
                ifindex: 7,
                features: 0x44
            })
        );
        body[0] = 3; // a deletion
        assert_eq!(parse_dev_notification(&body), None);
    }

    #[test]
    fn xdp_features_are_read_for_a_device_and_refused_for_none() {
        // The loopback device exists in every network namespace and takes
        // no redirected frames; no privileges are needed to ask.
        let lo = xdp_features(1).expect("netdev family (Linux 6.3+)");
        assert_eq!(lo & xdp_act::NDO_XMIT_SG, 0);
        assert!(xdp_features(u32::MAX).is_err());
    }
}
