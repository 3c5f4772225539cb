//! What conntrack reads from a packet: the connection tuple of its
//! direction, TCP segment details, and for ICMP errors the tuple of the
//! packet they quote.
//!
//! Everything is read from the frame with bounds checks (the frame is
//! untrusted); a packet conntrack cannot make sense of is reported as
//! [`Parsed::Invalid`] and becomes `+trk+inv`, never a panic.

use flowtable::key::{Field, FlowKey};
use flowtable::matching::{
    ETH_TYPE_IPV4, ETH_TYPE_IPV6, IP_PROTO_ICMP, IP_PROTO_ICMPV6, IP_PROTO_TCP, IP_PROTO_UDP,
};
use std::hash::{Hash, Hasher};
use xbr_packet::bytes::{be16, be32};
use xbr_packet::parse::ipv6::IPV6_HEADER_LEN;
use xbr_packet::parse::{Layers, FRAG_LATER};

/// ICMP types conntrack knows.
pub mod icmp {
    pub const ECHO_REPLY: u8 = 0;
    pub const DEST_UNREACH: u8 = 3;
    pub const SOURCE_QUENCH: u8 = 4;
    pub const REDIRECT: u8 = 5;
    pub const ECHO_REQUEST: u8 = 8;
    pub const TIME_EXCEEDED: u8 = 11;
    pub const PARAM_PROBLEM: u8 = 12;
}

/// ICMPv6 types conntrack knows (RFC 4443).
pub mod icmp6 {
    pub const DEST_UNREACH: u8 = 1;
    pub const PACKET_TOO_BIG: u8 = 2;
    pub const TIME_EXCEEDED: u8 = 3;
    pub const PARAM_PROBLEM: u8 = 4;
    pub const ECHO_REQUEST: u8 = 128;
    pub const ECHO_REPLY: u8 = 129;
}

/// An IPv4 or IPv6 address as conntrack keeps it: IPv6 in four words (the
/// first the most significant), IPv4 in the first word with the others
/// zero. Which one it is, the tuple's `v6` says.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    Default,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct Addr(pub [u32; 4]);

impl Addr {
    pub const fn v4(a: u32) -> Self {
        Addr([a, 0, 0, 0])
    }

    pub const fn v6(a: u128) -> Self {
        Addr([
            (a >> 96) as u32,
            (a >> 64) as u32,
            (a >> 32) as u32,
            a as u32,
        ])
    }

    /// The IPv4 address (meaningful only in an IPv4 tuple).
    pub const fn as_v4(self) -> u32 {
        self.0[0]
    }

    pub const fn as_v6(self) -> u128 {
        let [a, b, c, d] = self.0;
        (a as u128) << 96 | (b as u128) << 64 | (c as u128) << 32 | d as u128
    }
}

/// One direction of a connection: zone, protocol, addresses and ports
/// (host byte order). For ICMP and ICMPv6 echo, `sport` is the identifier
/// and `dport` the message type (request or reply), so a request and its
/// reply are each other's reverse with the type swapped.
///
/// 40 bytes for either family; an IPv4 tuple hashes as two words (see the
/// `Hash` impl), no more than the 16-byte IPv4-only tuple it replaced.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Default,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct Tuple {
    pub zone: u16,
    pub proto: u8,
    /// IPv6 addresses (else IPv4).
    pub v6: bool,
    pub src: Addr,
    pub dst: Addr,
    pub sport: u16,
    pub dport: u16,
}

impl Hash for Tuple {
    fn hash<H: Hasher>(&self, h: &mut H) {
        h.write_u64(
            u64::from(self.zone)
                | u64::from(self.proto) << 16
                | u64::from(self.v6) << 24
                | u64::from(self.sport) << 32
                | u64::from(self.dport) << 48,
        );
        h.write_u64(u64::from(self.src.0[0]) | u64::from(self.dst.0[0]) << 32);
        // An IPv4 tuple's other words are zero: they add nothing.
        if self.v6 {
            for i in 1..4 {
                h.write_u64(u64::from(self.src.0[i]) | u64::from(self.dst.0[i]) << 32);
            }
        }
    }
}

impl Tuple {
    /// An IPv4 tuple.
    pub const fn v4(zone: u16, proto: u8, src: u32, dst: u32, sport: u16, dport: u16) -> Tuple {
        Tuple {
            zone,
            proto,
            v6: false,
            src: Addr::v4(src),
            dst: Addr::v4(dst),
            sport,
            dport,
        }
    }

    /// Whether the tuple is ICMP or ICMPv6 (echo identifier and type in
    /// the port words).
    pub fn is_icmp(&self) -> bool {
        self.proto
            == if self.v6 {
                IP_PROTO_ICMPV6
            } else {
                IP_PROTO_ICMP
            }
    }

    /// The echo request type of the tuple's family.
    pub fn echo_request(&self) -> u16 {
        u16::from(if self.v6 {
            icmp6::ECHO_REQUEST
        } else {
            icmp::ECHO_REQUEST
        })
    }

    /// The echo reply type of the tuple's family.
    fn echo_reply(&self) -> u16 {
        u16::from(if self.v6 {
            icmp6::ECHO_REPLY
        } else {
            icmp::ECHO_REPLY
        })
    }

    /// The tuple of the other direction, before any NAT.
    pub fn reverse(&self) -> Tuple {
        let (sport, dport) = if self.is_icmp() {
            let t = match (self.v6, self.dport == self.echo_request()) {
                (false, true) => icmp::ECHO_REPLY,
                (false, false) => icmp::ECHO_REQUEST,
                (true, true) => icmp6::ECHO_REPLY,
                (true, false) => icmp6::ECHO_REQUEST,
            };
            (self.sport, u16::from(t))
        } else {
            (self.dport, self.sport)
        };
        Tuple {
            zone: self.zone,
            proto: self.proto,
            v6: self.v6,
            src: self.dst,
            dst: self.src,
            sport,
            dport,
        }
    }

    /// Whether the tuple names ports (TCP and UDP) that NAT may change.
    pub fn has_ports(&self) -> bool {
        matches!(self.proto, IP_PROTO_TCP | IP_PROTO_UDP)
    }
}

/// TCP header fields the window tracker needs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpSeg {
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    /// Unscaled window from the header.
    pub win: u16,
    /// Payload bytes.
    pub len: u32,
    /// Window scale option (SYN segments only).
    pub wscale: Option<u8>,
}

pub mod tcp_flags {
    pub const FIN: u8 = 0x01;
    pub const SYN: u8 = 0x02;
    pub const RST: u8 = 0x04;
    pub const ACK: u8 = 0x10;
}

/// Where the quoted packet of an ICMP error sits in the frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Quoted {
    /// The quoted packet's tuple, as it was sent.
    pub tuple: Tuple,
    /// Offset of the quoted IP header.
    pub l3: usize,
    /// Offset of the quoted L4 header.
    pub l4: usize,
}

/// A packet as conntrack sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// TCP, UDP, ICMP echo or another IP protocol (ports 0).
    Conn { tuple: Tuple, tcp: Option<TcpSeg> },
    /// An ICMP error quoting a packet of some connection.
    IcmpError { outer: Tuple, quoted: Quoted },
    /// Not trackable: not IP, truncated headers, an ICMP type that is
    /// neither echo nor a known error.
    Invalid,
}

/// Parses `frame` (already run through `parse::extract` into `key` and
/// `layers`) for zone `zone`.
pub fn parse(frame: &[u8], layers: Layers, key: &FlowKey, zone: u16) -> Parsed {
    if key.get(Field::EthType) == u64::from(ETH_TYPE_IPV6) {
        parse_v6(frame, layers, key, zone)
    } else {
        parse_v4(frame, layers, key, zone)
    }
}

fn parse_v4(frame: &[u8], layers: Layers, key: &FlowKey, zone: u16) -> Parsed {
    // A first fragment has its L4 header and is tracked like a whole
    // packet; later fragments never get here (see `frag.rs`).
    let later = key.get(Field::IpFrag) & FRAG_LATER != 0;
    if key.get(Field::EthType) != u64::from(ETH_TYPE_IPV4)
        || layers.l3 == 0
        || layers.l4 == 0
        || later
    {
        // Other IP protocols have no L4 offset either; track them by
        // addresses when the IPv4 header is there.
        if key.get(Field::EthType) == u64::from(ETH_TYPE_IPV4)
            && layers.l3 != 0
            && !later
            && !matches!(
                key.get(Field::IpProto) as u8,
                IP_PROTO_TCP | IP_PROTO_UDP | IP_PROTO_ICMP
            )
            && frame.len() >= usize::from(layers.l3) + 20
        {
            return Parsed::Conn {
                tuple: Tuple::v4(
                    zone,
                    key.get(Field::IpProto) as u8,
                    key.get(Field::IpSrc) as u32,
                    key.get(Field::IpDst) as u32,
                    0,
                    0,
                ),
                tcp: None,
            };
        }
        return Parsed::Invalid;
    }
    let l3 = usize::from(layers.l3);
    let l4 = usize::from(layers.l4);
    let proto = key.get(Field::IpProto) as u8;
    let mut tuple = Tuple::v4(
        zone,
        proto,
        key.get(Field::IpSrc) as u32,
        key.get(Field::IpDst) as u32,
        0,
        0,
    );
    // Payload length from the IP header, bounded by what was received.
    let Some(total) = be16(frame, l3 + 2).map(usize::from) else {
        return Parsed::Invalid;
    };
    let ip_end = (l3 + total).min(frame.len());
    match proto {
        IP_PROTO_TCP | IP_PROTO_UDP => ports_conn(frame, l4, ip_end, tuple, key),
        IP_PROTO_ICMP => {
            let ty = key.get(Field::IcmpType) as u8;
            match ty {
                icmp::ECHO_REQUEST | icmp::ECHO_REPLY => {
                    let Some(id) = be16(frame, l4 + 4) else {
                        return Parsed::Invalid;
                    };
                    if key.get(Field::IcmpCode) != 0 {
                        return Parsed::Invalid;
                    }
                    tuple.sport = id;
                    tuple.dport = u16::from(ty);
                    Parsed::Conn { tuple, tcp: None }
                }
                icmp::DEST_UNREACH
                | icmp::SOURCE_QUENCH
                | icmp::REDIRECT
                | icmp::TIME_EXCEEDED
                | icmp::PARAM_PROBLEM => match quoted(frame, l4 + 8, ip_end, zone) {
                    Some(q) => Parsed::IcmpError {
                        outer: tuple,
                        quoted: q,
                    },
                    None => Parsed::Invalid,
                },
                _ => Parsed::Invalid,
            }
        }
        _ => Parsed::Invalid,
    }
}

/// A TCP or UDP packet's tuple (ports from `key`) and, for TCP, its
/// segment; `l4` is the L4 header's offset, `ip_end` where the IP payload
/// ends.
fn ports_conn(frame: &[u8], l4: usize, ip_end: usize, mut tuple: Tuple, key: &FlowKey) -> Parsed {
    tuple.sport = key.get(Field::TpSrc) as u16;
    tuple.dport = key.get(Field::TpDst) as u16;
    if tuple.proto != IP_PROTO_TCP {
        if l4 + 8 > ip_end {
            return Parsed::Invalid;
        }
        return Parsed::Conn { tuple, tcp: None };
    }
    let (Some(seq), Some(ack), Some(off_flags), Some(win)) = (
        be32(frame, l4 + 4),
        be32(frame, l4 + 8),
        be16(frame, l4 + 12),
        be16(frame, l4 + 14),
    ) else {
        return Parsed::Invalid;
    };
    let hlen = usize::from(off_flags >> 12) * 4;
    if hlen < 20 || l4 + hlen > ip_end {
        return Parsed::Invalid;
    }
    let flags = off_flags as u8;
    let wscale = if flags & tcp_flags::SYN != 0 {
        frame.get(l4 + 20..l4 + hlen).and_then(window_scale)
    } else {
        None
    };
    let seg = TcpSeg {
        seq,
        ack,
        flags,
        win,
        len: (ip_end - l4 - hlen) as u32,
        wscale,
    };
    Parsed::Conn {
        tuple,
        tcp: Some(seg),
    }
}

/// [`parse`] for IPv6. Fragments never get here (see `frag.rs`); ICMPv6
/// other than echo and the four error types (Neighbor Discovery, MLD,
/// router messages) is not tracked, as in OVS.
fn parse_v6(frame: &[u8], layers: Layers, key: &FlowKey, zone: u16) -> Parsed {
    let l3 = usize::from(layers.l3);
    if l3 == 0 || frame.len() < l3 + IPV6_HEADER_LEN {
        return Parsed::Invalid;
    }
    let Some(payload) = be16(frame, l3 + 4).map(usize::from) else {
        return Parsed::Invalid;
    };
    let ip_end = (l3 + IPV6_HEADER_LEN + payload).min(frame.len());
    let proto = key.get(Field::IpProto) as u8;
    let tuple = Tuple {
        zone,
        proto,
        v6: true,
        src: Addr::v6(key.get128(Field::Ipv6SrcLow)),
        dst: Addr::v6(key.get128(Field::Ipv6DstLow)),
        sport: 0,
        dport: 0,
    };
    let l4 = usize::from(layers.l4);
    match proto {
        IP_PROTO_TCP | IP_PROTO_UDP if l4 != 0 => ports_conn(frame, l4, ip_end, tuple, key),
        IP_PROTO_ICMPV6 if l4 != 0 => {
            let ty = key.get(Field::Icmpv6Type) as u8;
            match ty {
                icmp6::ECHO_REQUEST | icmp6::ECHO_REPLY => {
                    let Some(id) = be16(frame, l4 + 4) else {
                        return Parsed::Invalid;
                    };
                    if key.get(Field::Icmpv6Code) != 0 {
                        return Parsed::Invalid;
                    }
                    Parsed::Conn {
                        tuple: Tuple {
                            sport: id,
                            dport: u16::from(ty),
                            ..tuple
                        },
                        tcp: None,
                    }
                }
                icmp6::DEST_UNREACH
                | icmp6::PACKET_TOO_BIG
                | icmp6::TIME_EXCEEDED
                | icmp6::PARAM_PROBLEM => match quoted6(frame, l4 + 8, ip_end, zone) {
                    Some(q) => Parsed::IcmpError {
                        outer: tuple,
                        quoted: q,
                    },
                    None => Parsed::Invalid,
                },
                _ => Parsed::Invalid,
            }
        }
        // Truncated TCP, UDP or ICMPv6 headers.
        IP_PROTO_TCP | IP_PROTO_UDP | IP_PROTO_ICMPV6 => Parsed::Invalid,
        // Other protocols are tracked by their addresses.
        _ => Parsed::Conn { tuple, tcp: None },
    }
}

/// The IPv6 packet an ICMPv6 error quotes (its fixed header and the first
/// 8 bytes behind it). A quoted extension header is taken for the
/// protocol: no connection has it, so the error is `+inv`.
fn quoted6(frame: &[u8], l3: usize, end: usize, zone: u16) -> Option<Quoted> {
    if *frame.get(l3)? >> 4 != 6 {
        return None;
    }
    let l4 = l3 + IPV6_HEADER_LEN;
    if l4 + 8 > end {
        return None;
    }
    let addr = |at: usize| -> Option<Addr> {
        let b = frame.get(at..at + 16)?;
        Some(Addr::v6(u128::from_be_bytes(b.try_into().ok()?)))
    };
    let proto = *frame.get(l3 + 6)?;
    let mut tuple = Tuple {
        zone,
        proto,
        v6: true,
        src: addr(l3 + 8)?,
        dst: addr(l3 + 24)?,
        sport: 0,
        dport: 0,
    };
    quoted_l4(frame, l4, &mut tuple)?;
    Some(Quoted { tuple, l3, l4 })
}

/// Fills a quoted packet's ports, or its echo identifier and type, from
/// the first 8 bytes of its L4 header at `l4`; `None` for a quoted ICMP
/// message other than echo (errors do not quote errors).
fn quoted_l4(frame: &[u8], l4: usize, tuple: &mut Tuple) -> Option<()> {
    if matches!(tuple.proto, IP_PROTO_TCP | IP_PROTO_UDP) {
        tuple.sport = be16(frame, l4)?;
        tuple.dport = be16(frame, l4 + 2)?;
    } else if tuple.is_icmp() {
        let ty = u16::from(*frame.get(l4)?);
        if ty != tuple.echo_request() && ty != tuple.echo_reply() {
            return None;
        }
        tuple.sport = be16(frame, l4 + 4)?;
        tuple.dport = ty;
    }
    Some(())
}

/// The window scale option of a SYN's options, capped at 14 (RFC 7323).
fn window_scale(opts: &[u8]) -> Option<u8> {
    let mut i = 0;
    while let Some(&kind) = opts.get(i) {
        match kind {
            0 => return None,
            1 => i += 1,
            _ => {
                let len = usize::from(*opts.get(i + 1)?);
                if len < 2 {
                    return None;
                }
                if kind == 3 && len == 3 {
                    return opts.get(i + 2).map(|s| (*s).min(14));
                }
                i += len;
            }
        }
    }
    None
}

/// The packet an ICMP error quotes: its IPv4 header and the first 8 bytes
/// of its L4 header (enough for ports, or an echo identifier).
fn quoted(frame: &[u8], l3: usize, end: usize, zone: u16) -> Option<Quoted> {
    let ver_ihl = *frame.get(l3)?;
    if ver_ihl >> 4 != 4 {
        return None;
    }
    let ihl = usize::from(ver_ihl & 0x0f) * 4;
    let l4 = l3 + ihl;
    if ihl < 20 || l4 + 8 > end {
        return None;
    }
    // A quoted later fragment has no L4 header.
    if be16(frame, l3 + 6)? & 0x1fff != 0 {
        return None;
    }
    let proto = *frame.get(l3 + 9)?;
    let mut tuple = Tuple::v4(
        zone,
        proto,
        be32(frame, l3 + 12)?,
        be32(frame, l3 + 16)?,
        0,
        0,
    );
    quoted_l4(frame, l4, &mut tuple)?;
    Some(Quoted { tuple, l3, l4 })
}
