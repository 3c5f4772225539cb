//! A hostile pod's frames (issue 32's soak): crafted Ethernet frames a pod
//! can put on its `eth0` with a raw `AF_PACKET` socket, from inside its
//! namespace, mixing what a switch shared by tenants must contain:
//! spoofed source IPs and MACs, VXLAN to UDP 4789, fragment floods (first
//! and orphan later fragments), VLAN-tagged and double-tagged frames, IP
//! options, bad checksums and lengths, TTL 0 and 1, ARP claiming another
//! pod's and the gateway's address, broadcast and multicast storms.
//!
//! Every frame carries a marker in its payload (or, for ARP, in its
//! padding) so a capture anywhere can tell where attack frames went:
//! [`MARK_SPOOF`] in frames with a source that is not the pod's,
//! [`MARK_OWN`] in frames with the pod's own addresses, [`MARK_INNER`]
//! in the frame a VXLAN packet carries; the byte after the marker is the
//! frame's kind (not in ARP frames). Frames are built from their index
//! alone (kind = index modulo [`KINDS`], the varying fields from a hash of
//! the index), so two runs send the same frames.
//!
//! Sending is bounded by a count and a time; the socket is a plain
//! `AF_PACKET`/`SOCK_RAW` one, addressed with the interface's link address
//! as `getifaddrs` gives it (no unsafe code here).

use nix::ifaddrs::getifaddrs;
use nix::sys::socket::{sendto, socket, AddressFamily, LinkAddr, MsgFlags, SockFlag, SockType};
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

pub const MARK_SPOOF: &[u8; 8] = b"XBRSPOOF";
pub const MARK_OWN: &[u8; 8] = b"XBRHOSTL";
pub const MARK_INNER: &[u8; 8] = b"XBRINNER";
/// Kinds of frames, sent in turn.
pub const KINDS: u64 = 18;
/// The UDP port attack datagrams go to.
pub const ATTACK_PORT: u16 = 9999;

#[derive(Debug, thiserror::Error)]
pub enum HostileError {
    #[error("no link address for interface {0}")]
    NoInterface(String),
    #[error("{what}: {source}")]
    Sys {
        what: &'static str,
        source: nix::Error,
    },
}

/// Who the hostile pod is and whom it aims at.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    pub own_mac: [u8; 6],
    pub own_ip: Ipv4Addr,
    /// A pod of another tenant.
    pub victim_mac: [u8; 6],
    pub victim_ip: Ipv4Addr,
    /// The node's gateway (tun0).
    pub gateway_mac: [u8; 6],
    pub gateway_ip: Ipv4Addr,
}

/// `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut mac {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

/// splitmix64: the varying fields of frame `i`.
fn mix(i: u64) -> u64 {
    let mut x = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn csum(data: &[u8]) -> u16 {
    crate::packet::checksum(data, 0)
}

/// An IPv4 header (with `options`, a multiple of 4 bytes) and a UDP
/// datagram carrying `payload`, checksums right; returns the IP packet.
#[allow(clippy::too_many_arguments)]
fn ipv4_udp(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    ttl: u8,
    id: u16,
    options: &[u8],
    sport: u16,
    dport: u16,
    payload: &[u8],
) -> Vec<u8> {
    let ihl = 20 + options.len();
    let udp_len = 8 + payload.len();
    let total = ihl + udp_len;
    let mut p = Vec::with_capacity(total);
    p.push(0x40 | (ihl / 4) as u8);
    p.push(0);
    p.extend_from_slice(&(total as u16).to_be_bytes());
    p.extend_from_slice(&id.to_be_bytes());
    p.extend_from_slice(&[0, 0, ttl, 17, 0, 0]);
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(options);
    let c = csum(&p[..ihl]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p.extend_from_slice(&sport.to_be_bytes());
    p.extend_from_slice(&dport.to_be_bytes());
    p.extend_from_slice(&(udp_len as u16).to_be_bytes());
    p.extend_from_slice(&[0, 0]);
    p.extend_from_slice(payload);
    let mut pseudo = 17 + udp_len as u32;
    for w in p[12..20].chunks_exact(2) {
        pseudo += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    let l4 = match crate::packet::checksum(&p[ihl..], pseudo) {
        0 => 0xffff,
        c => c,
    };
    p[ihl + 6..ihl + 8].copy_from_slice(&l4.to_be_bytes());
    p
}

/// A datagram's payload: the marker, the frame's kind, then zeros
/// (frames of 60 bytes and more, as on a wire).
fn payload(mark: &[u8; 8], kind: u64) -> [u8; 24] {
    let mut p = [0u8; 24];
    p[..8].copy_from_slice(mark);
    p[8] = kind as u8;
    p
}

fn eth(dst: [u8; 6], src: [u8; 6], tags: &[(u16, u16)], ethertype: u16, body: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + 4 * tags.len() + body.len());
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    for &(tpid, tci) in tags {
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&tci.to_be_bytes());
    }
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(body);
    f
}

/// An ARP reply claiming `claimed_ip` is at `mac`, to everyone, with the
/// marker in its padding.
fn arp_claim(mac: [u8; 6], claimed_ip: Ipv4Addr, target_ip: Ipv4Addr) -> Vec<u8> {
    let mut a = vec![0, 1, 8, 0, 6, 4, 0, 2];
    a.extend_from_slice(&mac);
    a.extend_from_slice(&claimed_ip.octets());
    a.extend_from_slice(&[0xff; 6]);
    a.extend_from_slice(&target_ip.octets());
    a.extend_from_slice(MARK_SPOOF);
    a.resize(46, 0);
    eth([0xff; 6], mac, &[], 0x0806, &a)
}

/// Frame number `i`.
pub fn frame(i: u64, t: &Target) -> Vec<u8> {
    let r = mix(i);
    let id = r as u16;
    let spoof_ip = Ipv4Addr::new(10, 128, (r >> 16) as u8 & 1, (r >> 24) as u8 | 1);
    let spoof_mac = [0x0a, 0x58, (r >> 32) as u8, (r >> 40) as u8, 0x33, 0x44];
    let sport = 20000 + (r >> 48) as u16 % 20000;
    let own = |ttl, options: &[u8], mark: &[u8; 8]| {
        ipv4_udp(
            t.own_ip,
            t.victim_ip,
            ttl,
            id,
            options,
            sport,
            ATTACK_PORT,
            &payload(mark, i % KINDS),
        )
    };
    let to_victim = |src: [u8; 6], body: &[u8]| eth(t.victim_mac, src, &[], 0x0800, body);
    match i % KINDS {
        // Another pod's address as the source.
        0 => to_victim(
            t.own_mac,
            &ipv4_udp(
                spoof_ip,
                t.victim_ip,
                64,
                id,
                &[],
                sport,
                ATTACK_PORT,
                &payload(MARK_SPOOF, i % KINDS),
            ),
        ),
        // Another MAC as the source.
        1 => to_victim(spoof_mac, &own(64, &[], MARK_SPOOF)),
        // VXLAN from a pod, to the node: the inner frame aims at the
        // victim with a made-up VNI.
        2 => {
            let inner = to_victim(spoof_mac, &own(64, &[], MARK_INNER));
            let mut vx = vec![0x08, 0, 0, 0];
            vx.extend_from_slice(&((r as u32 & 0xff_ffff) << 8).to_be_bytes());
            vx.extend_from_slice(&inner);
            let outer = ipv4_udp(t.own_ip, t.gateway_ip, 64, id, &[], sport, 4789, &vx);
            eth(t.gateway_mac, t.own_mac, &[], 0x0800, &outer)
        }
        // A first fragment (more fragments, offset 0) of a datagram whose
        // rest never comes: a new record for the fragment table each.
        3 | 4 => {
            let mut p = own(64, &[], MARK_OWN);
            p.resize(p.len() + 24, 0);
            let total = p.len() as u16;
            p[2..4].copy_from_slice(&total.to_be_bytes());
            p[6] = 0x20;
            p[10..12].copy_from_slice(&[0, 0]);
            let c = csum(&p[..20]);
            p[10..12].copy_from_slice(&c.to_be_bytes());
            to_victim(t.own_mac, &p)
        }
        // A later fragment without its first.
        5 => {
            let mut p = own(64, &[], MARK_OWN);
            p[6] = 0x00;
            p[7] = 0x40;
            p[10..12].copy_from_slice(&[0, 0]);
            let c = csum(&p[..20]);
            p[10..12].copy_from_slice(&c.to_be_bytes());
            to_victim(t.own_mac, &p)
        }
        // VLAN-tagged and double-tagged.
        6 => eth(
            t.victim_mac,
            t.own_mac,
            &[(0x8100, (r >> 8) as u16 & 0x0fff)],
            0x0800,
            &own(64, &[], MARK_OWN),
        ),
        7 => eth(
            t.victim_mac,
            t.own_mac,
            &[(0x88a8, 100), (0x8100, (r >> 8) as u16 & 0x0fff)],
            0x0800,
            &own(64, &[], MARK_OWN),
        ),
        // IP options: record route, and a run of NOPs.
        8 => to_victim(t.own_mac, &own(64, &[7, 7, 4, 0, 0, 0, 0, 0], MARK_OWN)),
        9 => to_victim(t.own_mac, &own(64, &[1, 1, 1, 0], MARK_OWN)),
        // A bad IP header checksum.
        10 => {
            let mut p = own(64, &[], MARK_OWN);
            p[10] ^= 0x5a;
            to_victim(t.own_mac, &p)
        }
        // Lengths: the IP total length beyond the frame, then below the
        // header; a UDP length beyond the datagram.
        11 => {
            let mut p = own(64, &[], MARK_OWN);
            let bad: u16 = if r & 1 == 0 { 1400 } else { 12 };
            p[2..4].copy_from_slice(&bad.to_be_bytes());
            p[10..12].copy_from_slice(&[0, 0]);
            let c = csum(&p[..20]);
            p[10..12].copy_from_slice(&c.to_be_bytes());
            to_victim(t.own_mac, &p)
        }
        12 => {
            let mut p = own(64, &[], MARK_OWN);
            p[24..26].copy_from_slice(&900u16.to_be_bytes());
            to_victim(t.own_mac, &p)
        }
        // TTL 0 and 1.
        13 => to_victim(t.own_mac, &own((r & 1) as u8, &[], MARK_OWN)),
        // ARP: the victim's address, then the gateway's, claimed.
        14 => arp_claim(t.own_mac, t.victim_ip, t.gateway_ip),
        15 => arp_claim(t.own_mac, t.gateway_ip, t.victim_ip),
        // Broadcast and multicast storms.
        16 => eth(
            [0xff; 6],
            t.own_mac,
            &[],
            0x0800,
            &ipv4_udp(
                t.own_ip,
                Ipv4Addr::BROADCAST,
                64,
                id,
                &[],
                sport,
                ATTACK_PORT,
                &payload(MARK_OWN, i % KINDS),
            ),
        ),
        _ => eth(
            [0x01, 0x00, 0x5e, 0x01, 0x01, 0x01],
            t.own_mac,
            &[],
            0x0800,
            &ipv4_udp(
                t.own_ip,
                Ipv4Addr::new(239, 1, 1, 1),
                1,
                id,
                &[],
                sport,
                ATTACK_PORT,
                &payload(MARK_OWN, i % KINDS),
            ),
        ),
    }
}

/// Sends frames `0..count` out of `iface` (in this process's network
/// namespace), at most `rate` a second (0: as fast as it can), stopping
/// early after `max`; returns how many were sent. A frame the kernel
/// refuses for want of buffer space is counted as not sent, and sending
/// goes on.
pub fn send(
    iface: &str,
    t: &Target,
    count: u64,
    rate: u64,
    max: Duration,
) -> Result<u64, HostileError> {
    let addr: LinkAddr = getifaddrs()
        .map_err(|source| HostileError::Sys {
            what: "getifaddrs",
            source,
        })?
        .filter(|a| a.interface_name == iface)
        .find_map(|a| a.address.and_then(|s| s.as_link_addr().copied()))
        .ok_or_else(|| HostileError::NoInterface(iface.to_string()))?;
    let fd = socket(
        AddressFamily::Packet,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(|source| HostileError::Sys {
        what: "AF_PACKET socket",
        source,
    })?;
    let start = Instant::now();
    let deadline = start + max;
    let mut sent = 0;
    for i in 0..count {
        if i % 256 == 0 {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            if rate > 0 {
                let due = start + Duration::from_secs_f64(i as f64 / rate as f64);
                if due > now {
                    std::thread::sleep(due - now);
                }
            }
        }
        let f = frame(i, t);
        match sendto(fd.as_raw_fd(), &f, &addr, MsgFlags::empty()) {
            Ok(_) => sent += 1,
            Err(nix::errno::Errno::ENOBUFS) | Err(nix::errno::Errno::EAGAIN) => {}
            Err(source) => {
                return Err(HostileError::Sys {
                    what: "sendto",
                    source,
                })
            }
        }
    }
    Ok(sent)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> Target {
        Target {
            own_mac: [0x0a, 0x58, 10, 128, 0, 3],
            own_ip: Ipv4Addr::new(10, 128, 0, 3),
            victim_mac: [0x0a, 0x58, 10, 128, 0, 4],
            victim_ip: Ipv4Addr::new(10, 128, 0, 4),
            gateway_mac: [0x0a, 0x58, 10, 128, 0, 1],
            gateway_ip: Ipv4Addr::new(10, 128, 0, 1),
        }
    }

    #[test]
    fn every_kind_is_built_marked_and_the_same_each_time() {
        let t = target();
        for i in 0..KINDS * 3 {
            let f = frame(i, &t);
            assert!(f.len() >= 60, "{i}: {} bytes", f.len());
            let marked = [MARK_SPOOF, MARK_OWN, MARK_INNER]
                .iter()
                .any(|m| f.windows(8).any(|w| w == &m[..]));
            assert!(marked, "{i}");
            assert_eq!(f, frame(i, &t));
        }
        // The well-formed ones carry right checksums.
        let p = &frame(KINDS, &t)[14..];
        assert_eq!(csum(&p[..20]), 0);
        assert_eq!(parse_mac("0a:58:0a:80:00:03"), Some(t.own_mac));
        assert_eq!(parse_mac("0a:58"), None);
    }
}
