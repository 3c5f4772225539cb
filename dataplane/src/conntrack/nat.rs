//! NAT for conntrack: choosing a translated reply tuple for a new
//! connection, and rewriting packets between the two views.
//!
//! # Design
//!
//! A connection is stored as two tuples: `orig` (the originator's packets
//! as they arrived) and `reply` (the responder's packets as they will
//! arrive). Without NAT `reply == orig.reverse()`. SNAT replaces the
//! reply's destination (the originator as the responder sees it), DNAT the
//! reply's source (the responder the originator thinks it talks to). So a
//! packet in the original direction leaves as `reply.reverse()` and one in
//! the reply direction leaves as `orig.reverse()`; one rule covers SNAT,
//! DNAT and both.
//!
//! ICMP echo is translated by address and, for SNAT, identifier (the
//! echo's "port").
//!
//! Allocation searches the configured range for an address and port whose
//! reply tuple is not in use (the caller's `in_use` checks the table), the
//! original port first so most connections keep theirs, then the range
//! from a hash of the tuple so concurrent connections spread out; a
//! connection whose whole range is taken is refused (`+inv`).
//!
//! Rewrites update checksums incrementally (RFC 1624), through
//! `crate::rewrite` for addresses and ports, and by hand for what an ICMP
//! error quotes (the quoted header and the ICMP checksum that covers it).

use super::tuple::{Addr, Quoted, Tuple};
use crate::packet::Layers;
use crate::rewrite;
use flowtable::key::Field;
use flowtable::matching::IP_PROTO_ICMP;
use flowtable::pipeline::NatSpec;

/// Ports used for SNAT when the action gives no range and the original
/// port is taken (OVS's default range for unspecified SNAT ports).
const SNAT_DEFAULT_PORTS: (u16, u16) = (1024, 65535);

/// Most candidate tuples one allocation tries before giving up; bounds the
/// work a full range costs per new connection.
const MAX_TRIES: u32 = 4096;

/// The reply tuple of a new connection with `spec` applied, or `None` when
/// every candidate is taken. `orig` is the connection's original tuple.
pub fn allocate(orig: &Tuple, spec: &NatSpec, in_use: impl Fn(&Tuple) -> bool) -> Option<Tuple> {
    let base = orig.reverse();
    let snat = spec.is_snat();
    // An echo's identifier names the exchange in both directions (the
    // tuples' `sport`); SNAT varies it like a source port, so pings of
    // several hosts with the same identifier share an address.
    let icmp = base.proto == IP_PROTO_ICMP;
    // The (address, port) pair being translated and its current value.
    let (cur_ip, cur_port) = match (snat, icmp) {
        (true, false) => (base.dst.as_v4(), base.dport),
        (true, true) => (base.dst.as_v4(), base.sport),
        (false, _) => (base.src.as_v4(), base.sport),
    };
    let (ip_lo, ip_hi) = if spec.ip_min == 0 {
        (cur_ip, cur_ip)
    } else {
        (spec.ip_min, spec.ip_max.max(spec.ip_min))
    };
    let ports = base.has_ports() || (icmp && snat);
    let (p_lo, p_hi) = match (ports, spec.port_min) {
        (false, _) => (cur_port, cur_port),
        (true, 0) if snat => SNAT_DEFAULT_PORTS,
        (true, 0) => (cur_port, cur_port),
        (true, lo) => (lo, spec.port_max.max(lo)),
    };
    let make = |ip: u32, port: u16| {
        let mut t = base;
        if snat && icmp {
            t.dst = Addr::v4(ip);
            t.sport = port;
        } else if snat {
            t.dst = Addr::v4(ip);
            t.dport = port;
        } else {
            t.src = Addr::v4(ip);
            t.sport = port;
        }
        t
    };
    let n_ips = u64::from(ip_hi - ip_lo) + 1;
    let n_ports = u64::from(p_hi - p_lo) + 1;
    let h = spread(orig);
    let ip_at = |i: u64| ip_lo + (h.wrapping_add(i) % n_ips) as u32;
    // The original port first, on each address, if the range has it or
    // no range was given.
    if spec.port_min == 0 || (p_lo..=p_hi).contains(&cur_port) {
        for i in 0..n_ips.min(u64::from(MAX_TRIES)) {
            let t = make(ip_at(i), cur_port);
            if !in_use(&t) {
                return Some(t);
            }
        }
    }
    let total = n_ips.saturating_mul(n_ports).min(u64::from(MAX_TRIES));
    for i in 0..total {
        let port = p_lo + ((h / 7 + i) % n_ports) as u16;
        let t = make(ip_at(i / n_ports), port);
        if !in_use(&t) {
            return Some(t);
        }
    }
    None
}

/// A stable spread of the tuple over the range.
fn spread(t: &Tuple) -> u64 {
    let mut h = u64::from(t.src.as_v4()) << 32 | u64::from(t.dst.as_v4());
    h ^= u64::from(t.sport) << 16 | u64::from(t.dport) | u64::from(t.proto) << 40;
    h = h.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^ (h >> 29)
}

/// Rewrites a packet whose tuple is `from` so that it carries `to`
/// (addresses, and ports or the echo identifier), checksums included.
pub fn rewrite_packet(frame: &mut [u8], layers: Layers, from: &Tuple, to: &Tuple) {
    if from.src != to.src {
        rewrite::set_field(frame, layers, Field::IpSrc, u64::from(to.src.as_v4()));
    }
    if from.dst != to.dst {
        rewrite::set_field(frame, layers, Field::IpDst, u64::from(to.dst.as_v4()));
    }
    if from.proto == IP_PROTO_ICMP {
        // An echo's identifier, covered by the ICMP checksum only.
        if from.sport != to.sport {
            let l4 = usize::from(layers.l4);
            put16(frame, l4 + 4, to.sport, l4 + 2, None);
        }
        return;
    }
    if from.sport != to.sport {
        rewrite::set_field(frame, layers, Field::TpSrc, u64::from(to.sport));
    }
    if from.dport != to.dport {
        rewrite::set_field(frame, layers, Field::TpDst, u64::from(to.dport));
    }
}

fn read16(f: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*f.get(at)?, *f.get(at + 1)?]))
}

fn write16(f: &mut [u8], at: usize, v: u16) -> Option<()> {
    f.get_mut(at..at + 2)?.copy_from_slice(&v.to_be_bytes());
    Some(())
}

/// RFC 1624 eqn. 3 for one 16-bit word.
fn csum_adjust(csum: u16, old: u16, new: u16) -> u16 {
    let mut sum = u32::from(!csum) + u32::from(!old) + u32::from(new);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Writes a 16-bit word of the ICMP message, keeping the ICMP checksum
/// (at `icmp_csum`) right; `ip_csum`, when given, is another checksum
/// covering the word (the quoted IP header's).
fn put16(
    frame: &mut [u8],
    at: usize,
    new: u16,
    icmp_csum: usize,
    ip_csum: Option<usize>,
) -> Option<()> {
    let old = read16(frame, at)?;
    if old == new {
        return Some(());
    }
    // Read every checksum before writing anything, so a short frame is
    // left untouched.
    let ic = read16(frame, icmp_csum)?;
    let qc = match ip_csum {
        Some(at) => Some((at, read16(frame, at)?)),
        None => None,
    };
    write16(frame, at, new)?;
    if let Some((at, c)) = qc {
        // The quoted header's checksum changes too, and the ICMP checksum
        // covers that change as well.
        let nc = csum_adjust(c, old, new);
        write16(frame, at, nc)?;
        let ic2 = csum_adjust(ic, c, nc);
        return write16(frame, icmp_csum, csum_adjust(ic2, old, new));
    }
    write16(frame, icmp_csum, csum_adjust(ic, old, new))
}

/// Translates an ICMP error: the outer destination becomes `outer_dst`,
/// and the quoted packet is rewritten to carry `quoted_to` (the tuple its
/// sender really used). The quoted L4 checksum is left as it is: the error
/// carries only the first 8 bytes of the segment, so nobody can verify it.
pub fn rewrite_icmp_error(
    frame: &mut [u8],
    layers: Layers,
    quoted: &Quoted,
    quoted_to: &Tuple,
    outer_dst: u32,
    outer_src: u32,
) {
    let icmp_csum = usize::from(layers.l4) + 2;
    let q = &quoted.tuple;
    let qcsum = Some(quoted.l3 + 10);
    let addr = |frame: &mut [u8], at: usize, old: u32, new: u32| {
        if old != new {
            put16(frame, at, (new >> 16) as u16, icmp_csum, qcsum);
            put16(frame, at + 2, new as u16, icmp_csum, qcsum);
        }
    };
    addr(frame, quoted.l3 + 12, q.src.as_v4(), quoted_to.src.as_v4());
    addr(frame, quoted.l3 + 16, q.dst.as_v4(), quoted_to.dst.as_v4());
    if q.has_ports() {
        if q.sport != quoted_to.sport {
            put16(frame, quoted.l4, quoted_to.sport, icmp_csum, None);
        }
        if q.dport != quoted_to.dport {
            put16(frame, quoted.l4 + 2, quoted_to.dport, icmp_csum, None);
        }
    } else if q.proto == IP_PROTO_ICMP && q.sport != quoted_to.sport {
        // A quoted echo's identifier.
        put16(frame, quoted.l4 + 4, quoted_to.sport, icmp_csum, None);
    }
    // The outer addresses are not covered by the ICMP checksum.
    rewrite::set_field(frame, layers, Field::IpDst, u64::from(outer_dst));
    rewrite::set_field(frame, layers, Field::IpSrc, u64::from(outer_src));
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowtable::matching::IP_PROTO_TCP;

    fn t(src: u32, sport: u16, dst: u32, dport: u16) -> Tuple {
        Tuple::v4(0, IP_PROTO_TCP, src, dst, sport, dport)
    }

    #[test]
    fn snat_keeps_the_port_when_free_and_avoids_collisions() {
        let orig = t(0x0a80_0002, 40000, 0x0101_0101, 80);
        let spec = NatSpec {
            flags: NatSpec::SRC,
            ip_min: 0x0a00_000a,
            ip_max: 0x0a00_000a,
            port_min: 0,
            port_max: 0,
            ipv6_range: false,
        };
        let r = allocate(&orig, &spec, |_| false).unwrap();
        assert_eq!(r, t(0x0101_0101, 80, 0x0a00_000a, 40000));
        // Port taken: another one from the default range, never a used one.
        let used = r;
        let r2 = allocate(&orig, &spec, |x| *x == used).unwrap();
        assert_eq!(
            (r2.src.as_v4(), r2.sport, r2.dst.as_v4()),
            (0x0101_0101, 80, 0x0a00_000a)
        );
        assert_ne!(r2.dport, 40000);
        assert!(r2.dport >= 1024);
    }

    #[test]
    fn a_full_range_is_refused_and_ranges_are_respected() {
        let orig = t(0x0a80_0002, 40000, 0x0101_0101, 80);
        let spec = NatSpec {
            flags: NatSpec::SRC,
            ip_min: 0x0a00_000a,
            ip_max: 0x0a00_000b,
            port_min: 2000,
            port_max: 2003,
            ipv6_range: false,
        };
        let mut taken = std::collections::HashSet::new();
        for _ in 0..8 {
            let r = allocate(&orig, &spec, |x| taken.contains(x)).unwrap();
            assert!((0x0a00_000a..=0x0a00_000b).contains(&r.dst.as_v4()));
            assert!((2000..=2003).contains(&r.dport));
            assert!(taken.insert(r), "allocated twice: {r:?}");
        }
        assert_eq!(allocate(&orig, &spec, |x| taken.contains(x)), None);
    }

    #[test]
    fn dnat_rewrites_the_responder() {
        let orig = t(0x0a80_0002, 40000, 0xac1e_0001, 80);
        let spec = NatSpec {
            flags: NatSpec::DST,
            ip_min: 0x0a80_0009,
            ip_max: 0x0a80_0009,
            port_min: 8080,
            port_max: 8080,
            ipv6_range: false,
        };
        let r = allocate(&orig, &spec, |_| false).unwrap();
        assert_eq!(r, t(0x0a80_0009, 8080, 0x0a80_0002, 40000));
    }

    #[test]
    fn snat_of_echo_varies_the_identifier() {
        let orig = Tuple::v4(0, IP_PROTO_ICMP, 0x0a80_0002, 0x0101_0101, 7, 8);
        let spec = NatSpec {
            flags: NatSpec::SRC,
            ip_min: 0x0a00_000a,
            ip_max: 0x0a00_000a,
            port_min: 0,
            port_max: 0,
            ipv6_range: false,
        };
        let r = allocate(&orig, &spec, |_| false).unwrap();
        // Reply: from the host to the node address, identifier kept.
        assert_eq!(
            (r.src.as_v4(), r.dst.as_v4(), r.sport, r.dport),
            (0x0101_0101, 0x0a00_000a, 7, 0)
        );
        let r2 = allocate(&orig, &spec, |x| *x == r).unwrap();
        assert_eq!(
            (r2.src.as_v4(), r2.dst.as_v4(), r2.dport),
            (0x0101_0101, 0x0a00_000a, 0)
        );
        assert_ne!(r2.sport, 7);
    }
}
