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
//! ICMP and ICMPv6 echo are translated by address and, for SNAT,
//! identifier (the echo's "port"). Both families work alike: an address
//! range is its first address and a span (see `NatSpec`), so allocation
//! counts offsets from the first address in either.
//!
//! Allocation searches the configured range for an address and port whose
//! reply tuple is not in use (the caller's `in_use` checks the table), the
//! original port first so most connections keep theirs, then the range
//! from a hash of the tuple so concurrent connections spread out; a
//! connection whose whole range is taken is refused (`+inv`).
//!
//! Rewrites update checksums incrementally (RFC 1624), through
//! `crate::rewrite` for addresses and ports (an IPv6 address through the
//! TCP, UDP or ICMPv6 checksum's pseudo-header), and by hand for what an
//! ICMP error quotes (the quoted header, the IPv4 one's checksum, and the
//! ICMP or ICMPv6 checksum that covers them).

use super::tuple::{Addr, Quoted, Tuple};
use flowtable::key::Field;
use flowtable::pipeline::NatSpec;
use xbr_packet::bytes::{be16, write16};
use xbr_packet::parse::Layers;
use xbr_packet::rewrite;

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
    let icmp = base.is_icmp();
    // The (address, port) pair being translated and its current value.
    let (cur_addr, cur_port) = match (snat, icmp) {
        (true, false) => (base.dst, base.dport),
        (true, true) => (base.dst, base.sport),
        (false, _) => (base.src, base.sport),
    };
    // Addresses as numbers (IPv4's in the low 32 bits): the range's first
    // and how many follow it.
    let as_number = |a: Addr| {
        if base.v6 {
            a.as_v6()
        } else {
            u128::from(a.as_v4())
        }
    };
    let (addr_lo, span) = if spec.first_addr() == 0 {
        (as_number(cur_addr), 0)
    } else {
        (spec.first_addr(), spec.addr_span)
    };
    let addr_at_offset = |off: u64| {
        let n = addr_lo.wrapping_add(u128::from(off));
        if base.v6 {
            Addr::v6(n)
        } else {
            Addr::v4(n as u32)
        }
    };
    let ports = base.has_ports() || (icmp && snat);
    let (p_lo, p_hi) = match (ports, spec.port_min) {
        (false, _) => (cur_port, cur_port),
        (true, 0) if snat => SNAT_DEFAULT_PORTS,
        (true, 0) => (cur_port, cur_port),
        (true, lo) => (lo, spec.port_max.max(lo)),
    };
    let make = |addr: Addr, port: u16| {
        let mut t = base;
        if snat && icmp {
            t.dst = addr;
            t.sport = port;
        } else if snat {
            t.dst = addr;
            t.dport = port;
        } else {
            t.src = addr;
            t.sport = port;
        }
        t
    };
    let n_ips = u64::from(span) + 1;
    let n_ports = u64::from(p_hi - p_lo) + 1;
    let h = spread(orig);
    let ip_at = |i: u64| addr_at_offset(h.wrapping_add(i) % n_ips);
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
    // IPv4 as before; an IPv6 address folded to 32 bits.
    let fold = |a: Addr| {
        if t.v6 {
            a.0.iter().fold(0u32, |acc, w| acc.rotate_left(7) ^ w)
        } else {
            a.as_v4()
        }
    };
    let mut h = u64::from(fold(t.src)) << 32 | u64::from(fold(t.dst));
    h ^= u64::from(t.sport) << 16 | u64::from(t.dport) | u64::from(t.proto) << 40;
    h = h.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^ (h >> 29)
}

/// Rewrites a packet whose tuple is `from` so that it carries `to`
/// (addresses, and ports or the echo identifier), checksums included.
pub fn rewrite_packet(frame: &mut [u8], layers: Layers, from: &Tuple, to: &Tuple) {
    if from.src != to.src {
        set_addr(frame, layers, true, to.src, to.v6);
    }
    if from.dst != to.dst {
        set_addr(frame, layers, false, to.dst, to.v6);
    }
    if from.is_icmp() {
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

/// Writes the packet's source (`src`) or destination address, the L4
/// checksum updated for the pseudo-header (and IPv4's header checksum).
pub(super) fn set_addr(frame: &mut [u8], layers: Layers, src: bool, a: Addr, v6: bool) {
    if v6 {
        let (high, low) = if src {
            (Field::Ipv6SrcHigh, Field::Ipv6SrcLow)
        } else {
            (Field::Ipv6DstHigh, Field::Ipv6DstLow)
        };
        let n = a.as_v6();
        rewrite::set_field(frame, layers, high, (n >> 64) as u64);
        rewrite::set_field(frame, layers, low, n as u64);
    } else {
        let field = if src { Field::IpSrc } else { Field::IpDst };
        rewrite::set_field(frame, layers, field, u64::from(a.as_v4()));
    }
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
    let old = be16(frame, at)?;
    if old == new {
        return Some(());
    }
    // Read every checksum before writing anything, so a short frame is
    // left untouched.
    let ic = be16(frame, icmp_csum)?;
    let qc = match ip_csum {
        Some(at) => Some((at, be16(frame, at)?)),
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
    outer_dst: Addr,
    outer_src: Addr,
) {
    let icmp_csum = usize::from(layers.l4) + 2;
    let q = &quoted.tuple;
    // IPv4's quoted header has a checksum of its own; IPv6's has none.
    let (qcsum, src_at, dst_at, words) = if q.v6 {
        (None, quoted.l3 + 8, quoted.l3 + 24, 4)
    } else {
        (Some(quoted.l3 + 10), quoted.l3 + 12, quoted.l3 + 16, 1)
    };
    let addr = |frame: &mut [u8], at: usize, old: Addr, new: Addr| {
        // An IPv4 address is `Addr`'s first word; IPv6's all four.
        for (i, (o, n)) in old.0.iter().zip(new.0.iter()).take(words).enumerate() {
            if o != n {
                let at = at + 4 * i;
                put16(frame, at, (n >> 16) as u16, icmp_csum, qcsum);
                put16(frame, at + 2, *n as u16, icmp_csum, qcsum);
            }
        }
    };
    addr(frame, src_at, q.src, quoted_to.src);
    addr(frame, dst_at, q.dst, quoted_to.dst);
    if q.has_ports() {
        if q.sport != quoted_to.sport {
            put16(frame, quoted.l4, quoted_to.sport, icmp_csum, None);
        }
        if q.dport != quoted_to.dport {
            put16(frame, quoted.l4 + 2, quoted_to.dport, icmp_csum, None);
        }
    } else if q.is_icmp() && q.sport != quoted_to.sport {
        // A quoted echo's identifier.
        put16(frame, quoted.l4 + 4, quoted_to.sport, icmp_csum, None);
    }
    // The outer addresses: outside ICMP's checksum, inside ICMPv6's
    // pseudo-header (which `set_addr` keeps right).
    set_addr(frame, layers, false, outer_dst, q.v6);
    set_addr(frame, layers, true, outer_src, q.v6);
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowtable::matching::{IP_PROTO_ICMP, IP_PROTO_TCP};

    fn t(src: u32, sport: u16, dst: u32, dport: u16) -> Tuple {
        Tuple::v4(0, IP_PROTO_TCP, src, dst, sport, dport)
    }

    #[test]
    fn snat_keeps_the_port_when_free_and_avoids_collisions() {
        let orig = t(0x0a80_0002, 40000, 0x0101_0101, 80);
        let spec = NatSpec::v4(NatSpec::SRC, 0x0a00_000a, 0x0a00_000a, 0, 0);
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
        let spec = NatSpec::v4(NatSpec::SRC, 0x0a00_000a, 0x0a00_000b, 2000, 2003);
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
        let spec = NatSpec::v4(NatSpec::DST, 0x0a80_0009, 0x0a80_0009, 8080, 8080);
        let r = allocate(&orig, &spec, |_| false).unwrap();
        assert_eq!(r, t(0x0a80_0009, 8080, 0x0a80_0002, 40000));
    }

    #[test]
    fn snat_of_echo_varies_the_identifier() {
        let orig = Tuple::v4(0, IP_PROTO_ICMP, 0x0a80_0002, 0x0101_0101, 7, 8);
        let spec = NatSpec::v4(NatSpec::SRC, 0x0a00_000a, 0x0a00_000a, 0, 0);
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
