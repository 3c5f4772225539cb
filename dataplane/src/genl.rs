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
//! Messages are built by hand: a netlink header, a generic-netlink header
//! and a few attributes, some nested. Control path only (once per port).

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
    let mut attrs = Vec::new();
    let mut cname = name.as_bytes().to_vec();
    cname.push(0);
    put_attr(&mut attrs, CTRL_ATTR_FAMILY_NAME, &cname);
    let op = "genl family lookup";
    let replies = exchange(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, 1, &attrs, op, dev)?;
    replies
        .iter()
        .find_map(|payload| {
            attrs_of(payload.get(GENL_HDRLEN..)?)
                .find(|(t, v)| *t == CTRL_ATTR_FAMILY_ID && v.len() >= 2)
                .map(|(_, v)| u16::from_ne_bytes([v[0], v[1]]))
        })
        .ok_or_else(|| NetdevError::Malformed {
            op,
            dev: dev.to_owned(),
            detail: format!("no id for family {name:?}"),
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
    fn xdp_features_are_read_for_a_device_and_refused_for_none() {
        // The loopback device exists in every network namespace and takes
        // no redirected frames; no privileges are needed to ask.
        let lo = xdp_features(1).expect("netdev family (Linux 6.3+)");
        assert_eq!(lo & xdp_act::NDO_XMIT_SG, 0);
        assert!(xdp_features(u32::MAX).is_err());
    }
}
