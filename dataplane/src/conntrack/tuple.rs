//! What conntrack reads from a packet: the connection tuple of its
//! direction, TCP segment details, and for ICMP errors the tuple of the
//! packet they quote.
//!
//! Everything is read from the frame with bounds checks (the frame is
//! untrusted); a packet conntrack cannot make sense of is reported as
//! [`Parsed::Invalid`] and becomes `+trk+inv`, never a panic.

use crate::packet::{Layers, FRAG_LATER};
use flowtable::key::{Field, FlowKey};
use flowtable::matching::{ETH_TYPE_IPV4, IP_PROTO_ICMP, IP_PROTO_TCP, IP_PROTO_UDP};

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

/// One direction of a connection: zone, protocol, addresses and ports
/// (host byte order). For ICMP echo, `sport` is the identifier and `dport`
/// the message type (8 request, 0 reply), so a request and its reply are
/// each other's reverse with the type swapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Tuple {
    pub zone: u16,
    pub proto: u8,
    pub src: u32,
    pub dst: u32,
    pub sport: u16,
    pub dport: u16,
}

impl Tuple {
    /// The tuple of the other direction, before any NAT.
    pub fn reverse(&self) -> Tuple {
        let (sport, dport) = if self.proto == IP_PROTO_ICMP {
            let t = if self.dport == u16::from(icmp::ECHO_REQUEST) {
                icmp::ECHO_REPLY
            } else {
                icmp::ECHO_REQUEST
            };
            (self.sport, u16::from(t))
        } else {
            (self.dport, self.sport)
        };
        Tuple {
            zone: self.zone,
            proto: self.proto,
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
    /// Offset of the quoted IPv4 header.
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
    /// Not trackable: not IPv4, a fragment, truncated headers, an ICMP
    /// type that is neither echo nor a known error.
    Invalid,
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at + 4)?;
    Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

/// Parses `frame` (already run through `packet::extract` into `key` and
/// `layers`) for zone `zone`.
pub fn parse(frame: &[u8], layers: Layers, key: &FlowKey, zone: u16) -> Parsed {
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
                tuple: Tuple {
                    zone,
                    proto: key.get(Field::IpProto) as u8,
                    src: key.get(Field::IpSrc) as u32,
                    dst: key.get(Field::IpDst) as u32,
                    sport: 0,
                    dport: 0,
                },
                tcp: None,
            };
        }
        return Parsed::Invalid;
    }
    let l3 = usize::from(layers.l3);
    let l4 = usize::from(layers.l4);
    let proto = key.get(Field::IpProto) as u8;
    let mut tuple = Tuple {
        zone,
        proto,
        src: key.get(Field::IpSrc) as u32,
        dst: key.get(Field::IpDst) as u32,
        sport: 0,
        dport: 0,
    };
    // Payload length from the IP header, bounded by what was received.
    let Some(total) = be16(frame, l3 + 2).map(usize::from) else {
        return Parsed::Invalid;
    };
    let ip_end = (l3 + total).min(frame.len());
    match proto {
        IP_PROTO_TCP => {
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
            tuple.sport = key.get(Field::TpSrc) as u16;
            tuple.dport = key.get(Field::TpDst) as u16;
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
        IP_PROTO_UDP => {
            if l4 + 8 > ip_end {
                return Parsed::Invalid;
            }
            tuple.sport = key.get(Field::TpSrc) as u16;
            tuple.dport = key.get(Field::TpDst) as u16;
            Parsed::Conn { tuple, tcp: None }
        }
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
    let mut tuple = Tuple {
        zone,
        proto,
        src: be32(frame, l3 + 12)?,
        dst: be32(frame, l3 + 16)?,
        sport: 0,
        dport: 0,
    };
    match proto {
        IP_PROTO_TCP | IP_PROTO_UDP => {
            tuple.sport = be16(frame, l4)?;
            tuple.dport = be16(frame, l4 + 2)?;
        }
        IP_PROTO_ICMP => {
            let ty = *frame.get(l4)?;
            if ty != icmp::ECHO_REQUEST && ty != icmp::ECHO_REPLY {
                return None;
            }
            tuple.sport = be16(frame, l4 + 4)?;
            tuple.dport = u16::from(ty);
        }
        _ => {}
    }
    Some(Quoted { tuple, l3, l4 })
}
