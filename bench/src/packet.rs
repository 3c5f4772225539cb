//! Frame templates for the generator: UDP, TCP and VXLAN-encapsulated UDP,
//! with the tag the sink looks for.
//!
//! A [`Template`] is one complete, valid frame (checksums included) plus
//! the offsets the generator program rewrites per frame: the IPv4 header
//! whose addresses vary (the inner one under VXLAN), its L4 header (ports),
//! the L4 checksum to keep right (TCP only: UDP templates carry checksum 0,
//! which IPv4 allows, so nothing has to be maintained), and the tag.
//!
//! The tag is 16 bytes at the start of the payload: [`TAG_MAGIC`] (native
//! byte order, the generator and the sink run on the same host), 4 zero
//! bytes, then the send time in ns (native order, written by the generator
//! program on every frame). Frames shorter than headers + tag are refused.
//!
//! Sizes: `pkt_size` counts the Ethernet frame with its 4-byte FCS, as
//! RFC 2544 does ("64-byte packets"); the frame built is 4 bytes shorter,
//! since the FCS is not part of what XDP sees.

use std::net::Ipv4Addr;

/// Marks a frame as the generator's: "xbrb".
pub const TAG_MAGIC: u32 = 0x7862_7262;
/// Bytes of the tag (magic, pad, timestamp).
pub const TAG_LEN: usize = 16;
/// The Ethernet FCS, counted in `pkt_size` but absent from frames.
pub const FCS_LEN: usize = 4;
/// Largest frame the templates build (a page holds the frame in live mode).
pub const MAX_PKT_SIZE: usize = 1518;

const ETH_LEN: usize = 14;
const IPV4_LEN: usize = 20;
const UDP_LEN: usize = 8;
const TCP_LEN: usize = 20;
const VXLAN_LEN: usize = 8;
/// Outer Ethernet + IPv4 + UDP + VXLAN headers.
pub const VXLAN_OVERHEAD: usize = ETH_LEN + IPV4_LEN + UDP_LEN + VXLAN_LEN;
/// VXLAN's UDP port.
pub const VXLAN_PORT: u16 = 4789;
/// The outer UDP source port of the templates and the kernel reference.
const VXLAN_SRC_PORT: u16 = 49152;

/// The transport of the generated traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    Udp,
    Tcp,
}

/// Outer headers of a VXLAN-encapsulated template (what an uplink receives).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VxlanOuter {
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub src_ip: Ipv4Addr,
    pub dst_ip: Ipv4Addr,
    pub vni: u32,
}

/// What to build; the addresses and source port are flow 0's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameSpec {
    pub proto: Proto,
    /// Frame size with FCS (64 for the classic minimum).
    pub pkt_size: usize,
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub src_ip: Ipv4Addr,
    pub dst_ip: Ipv4Addr,
    pub src_port: u16,
    pub dst_port: u16,
    pub vxlan: Option<VxlanOuter>,
}

/// A built frame and the offsets the generator program needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pub frame: Vec<u8>,
    /// The IPv4 header whose addresses vary.
    pub ip_off: u16,
    /// Its TCP/UDP header.
    pub l4_off: u16,
    /// The TCP checksum; 0 when there is no L4 checksum to keep.
    pub l4_csum_off: u16,
    /// The tag (magic, pad, timestamp).
    pub tag_off: u16,
}

/// Errors building a template.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("packet size {size} is too small for {what}: at least {min} bytes (with FCS)")]
    TooSmall {
        size: usize,
        what: &'static str,
        min: usize,
    },
    #[error("packet size {size} is too large: at most {MAX_PKT_SIZE} bytes (with FCS)")]
    TooLarge { size: usize },
    #[error("VXLAN network identifier {0} does not fit in 24 bits")]
    Vni(u32),
    #[error("the sink's checks of these frames: {0}")]
    Checks(String),
}

impl FrameSpec {
    /// The smallest `pkt_size` this spec can be built with.
    pub fn min_pkt_size(&self) -> usize {
        let l4 = match self.proto {
            Proto::Udp => UDP_LEN,
            Proto::Tcp => TCP_LEN,
        };
        let outer = if self.vxlan.is_some() {
            VXLAN_OVERHEAD
        } else {
            0
        };
        // 60 + FCS is Ethernet's minimum; shorter frames would be padded.
        (outer + ETH_LEN + IPV4_LEN + l4 + TAG_LEN + FCS_LEN).max(64)
    }

    fn what(&self) -> &'static str {
        match (self.proto, self.vxlan.is_some()) {
            (Proto::Udp, false) => "UDP",
            (Proto::Tcp, false) => "TCP",
            (Proto::Udp, true) => "VXLAN-encapsulated UDP",
            (Proto::Tcp, true) => "VXLAN-encapsulated TCP",
        }
    }

    /// Builds the frame.
    pub fn build(&self) -> Result<Template, TemplateError> {
        let min = self.min_pkt_size();
        if self.pkt_size < min {
            return Err(TemplateError::TooSmall {
                size: self.pkt_size,
                what: self.what(),
                min,
            });
        }
        if self.pkt_size > MAX_PKT_SIZE {
            return Err(TemplateError::TooLarge {
                size: self.pkt_size,
            });
        }
        let len = self.pkt_size - FCS_LEN;
        let mut f = vec![0u8; len];
        let mut off = 0;
        if let Some(o) = &self.vxlan {
            write_vxlan_outer(&mut f[..VXLAN_OVERHEAD], o, len)?;
            off = VXLAN_OVERHEAD;
        }
        write_eth(&mut f[off..off + ETH_LEN], self.src_mac, self.dst_mac);
        let ip_off = off + ETH_LEN;
        let l4_off = ip_off + IPV4_LEN;
        let proto = match self.proto {
            Proto::Udp => libc::IPPROTO_UDP as u8,
            Proto::Tcp => libc::IPPROTO_TCP as u8,
        };
        write_ipv4(
            &mut f[ip_off..l4_off],
            len - ip_off,
            proto,
            self.src_ip,
            self.dst_ip,
        );
        f[l4_off..l4_off + 2].copy_from_slice(&self.src_port.to_be_bytes());
        f[l4_off + 2..l4_off + 4].copy_from_slice(&self.dst_port.to_be_bytes());
        let (tag_off, l4_csum_off) = match self.proto {
            Proto::Udp => {
                let udp_len = len16(len - l4_off);
                f[l4_off + 4..l4_off + 6].copy_from_slice(&udp_len.to_be_bytes());
                (l4_off + UDP_LEN, 0)
            }
            Proto::Tcp => {
                // An established connection's segment: ACK, data offset 5.
                f[l4_off + 4..l4_off + 8].copy_from_slice(&1u32.to_be_bytes());
                f[l4_off + 8..l4_off + 12].copy_from_slice(&1u32.to_be_bytes());
                f[l4_off + 12] = 5 << 4;
                f[l4_off + 13] = 0x10;
                f[l4_off + 14..l4_off + 16].copy_from_slice(&65535u16.to_be_bytes());
                (l4_off + TCP_LEN, l4_off + 16)
            }
        };
        f[tag_off..tag_off + 4].copy_from_slice(&TAG_MAGIC.to_ne_bytes());
        if self.proto == Proto::Tcp {
            let sum = l4_checksum(&f[ip_off..]);
            f[l4_csum_off..l4_csum_off + 2].copy_from_slice(&sum.to_be_bytes());
        }
        Ok(Template {
            frame: f,
            ip_off: off16(ip_off),
            l4_off: off16(l4_off),
            l4_csum_off: off16(l4_csum_off),
            tag_off: off16(tag_off),
        })
    }
}

/// Which template fields vary across flows: flow i adds i to each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Vary {
    pub src_port: bool,
    pub dst_ip: bool,
    pub src_ip: bool,
    /// Replies to varied source ports (see `scenario.rs`, `conntrack`).
    pub dst_port: bool,
}

impl Template {
    /// Rewrites `frame` (a copy of this template, possibly rewritten
    /// before) into flow `flow` stamped with `now_ns`, as the generator
    /// program does: the AF_XDP fallback's per-frame work, and the
    /// reference the program is tested against. Checksums are recomputed.
    pub fn write_flow(&self, frame: &mut [u8], vary: Vary, flow: u32, now_ns: u64) {
        let ip = usize::from(self.ip_off);
        let l4 = usize::from(self.l4_off);
        let t = &self.frame;
        let add = |field: &[u8], n: u32| -> [u8; 4] {
            u32::from_be_bytes([field[0], field[1], field[2], field[3]])
                .wrapping_add(n)
                .to_be_bytes()
        };
        if vary.src_ip {
            frame[ip + 12..ip + 16].copy_from_slice(&add(&t[ip + 12..ip + 16], flow));
        }
        if vary.dst_ip {
            frame[ip + 16..ip + 20].copy_from_slice(&add(&t[ip + 16..ip + 20], flow));
        }
        if vary.src_port {
            let port = u16::from_be_bytes([t[l4], t[l4 + 1]]).wrapping_add(flow as u16);
            frame[l4..l4 + 2].copy_from_slice(&port.to_be_bytes());
        }
        if vary.dst_port {
            let port = u16::from_be_bytes([t[l4 + 2], t[l4 + 3]]).wrapping_add(flow as u16);
            frame[l4 + 2..l4 + 4].copy_from_slice(&port.to_be_bytes());
        }
        let ts = usize::from(self.tag_off) + 8;
        frame[ts..ts + 8].copy_from_slice(&now_ns.to_ne_bytes());
        frame[ip + 10..ip + 12].copy_from_slice(&[0, 0]);
        let sum = checksum(&frame[ip..ip + IPV4_LEN], 0);
        frame[ip + 10..ip + 12].copy_from_slice(&sum.to_be_bytes());
        if self.l4_csum_off != 0 {
            let c = usize::from(self.l4_csum_off);
            frame[c..c + 2].copy_from_slice(&[0, 0]);
            let sum = l4_checksum(&frame[ip..]);
            frame[c..c + 2].copy_from_slice(&sum.to_be_bytes());
        }
    }

    /// Where the tag is once a switch has removed the VXLAN headers.
    pub fn decapsulated_tag_off(&self) -> u16 {
        self.tag_off.saturating_sub(VXLAN_OVERHEAD as u16)
    }
}

/// The outer headers of `o` for a frame of `len` bytes (outer ones
/// included) into `f` (VXLAN_OVERHEAD bytes).
fn write_vxlan_outer(f: &mut [u8], o: &VxlanOuter, len: usize) -> Result<(), TemplateError> {
    if o.vni >= 1 << 24 {
        return Err(TemplateError::Vni(o.vni));
    }
    write_eth(&mut f[..ETH_LEN], o.src_mac, o.dst_mac);
    let ip_len = len - ETH_LEN;
    write_ipv4(
        &mut f[ETH_LEN..ETH_LEN + IPV4_LEN],
        ip_len,
        libc::IPPROTO_UDP as u8,
        o.src_ip,
        o.dst_ip,
    );
    let udp = ETH_LEN + IPV4_LEN;
    // The source port of real VTEPs hashes the inner flow; a fixed one
    // is enough for a switch that decapsulates, and is the least work
    // for the kernel encapsulation reference.
    f[udp..udp + 2].copy_from_slice(&VXLAN_SRC_PORT.to_be_bytes());
    f[udp + 2..udp + 4].copy_from_slice(&VXLAN_PORT.to_be_bytes());
    f[udp + 4..udp + 6].copy_from_slice(&len16(ip_len - IPV4_LEN).to_be_bytes());
    let vx = udp + UDP_LEN;
    f[vx] = 0x08; // flags: I (VNI valid)
    f[vx + 4..vx + 7].copy_from_slice(&o.vni.to_be_bytes()[1..]);
    Ok(())
}

/// The outer headers of `o` with the per-frame fields zero (IPv4 total
/// length and checksum, UDP length): what the kernel encapsulation
/// reference pushes and completes (bench/bpf/xbrb_redirect.c).
pub fn vxlan_header(o: &VxlanOuter) -> Result<[u8; VXLAN_OVERHEAD], TemplateError> {
    let mut h = [0u8; VXLAN_OVERHEAD];
    write_vxlan_outer(&mut h, o, VXLAN_OVERHEAD)?;
    for field in [16, 24, ETH_LEN + IPV4_LEN + 4] {
        h[field..field + 2].fill(0);
    }
    Ok(h)
}

// Frames are at most MAX_PKT_SIZE long, so lengths and offsets fit.
fn len16(v: usize) -> u16 {
    u16::try_from(v).unwrap_or(u16::MAX)
}

fn off16(v: usize) -> u16 {
    len16(v)
}

fn write_eth(h: &mut [u8], src: [u8; 6], dst: [u8; 6]) {
    h[..6].copy_from_slice(&dst);
    h[6..12].copy_from_slice(&src);
    h[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
}

fn write_ipv4(h: &mut [u8], total_len: usize, proto: u8, src: Ipv4Addr, dst: Ipv4Addr) {
    h[0] = 0x45;
    h[2..4].copy_from_slice(&len16(total_len).to_be_bytes());
    h[6] = 0x40; // DF
    h[8] = 64;
    h[9] = proto;
    h[12..16].copy_from_slice(&src.octets());
    h[16..20].copy_from_slice(&dst.octets());
    let sum = checksum(&h[..IPV4_LEN], 0);
    h[10..12].copy_from_slice(&sum.to_be_bytes());
}

/// The ones' complement of the ones' complement sum of `data` (16-bit
/// big-endian words, odd length padded) plus `initial`.
pub fn checksum(data: &[u8], initial: u32) -> u16 {
    let mut sum = u64::from(initial);
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u64::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u64::from(*last) << 8;
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The TCP/UDP checksum of the IPv4 packet `ip` (header without options),
/// computed over its pseudo-header and L4 bytes with the checksum field as
/// it is: 0 when the field is zeroed first, 0 for a packet that verifies.
pub fn l4_checksum(ip: &[u8]) -> u16 {
    let l4 = &ip[IPV4_LEN..];
    let mut pseudo = 0u32;
    for w in [&ip[12..14], &ip[14..16], &ip[16..18], &ip[18..20]] {
        pseudo += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    pseudo += u32::from(ip[9]);
    pseudo += l4.len() as u32;
    checksum(l4, pseudo)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(proto: Proto, pkt_size: usize) -> FrameSpec {
        FrameSpec {
            proto,
            pkt_size,
            src_mac: [0x0a, 0x58, 10, 128, 0, 2],
            dst_mac: [0x0a, 0x58, 10, 128, 0, 3],
            src_ip: Ipv4Addr::new(10, 128, 0, 2),
            dst_ip: Ipv4Addr::new(10, 128, 0, 3),
            src_port: 1024,
            dst_port: 5201,
            vxlan: None,
        }
    }

    fn outer() -> VxlanOuter {
        VxlanOuter {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_ip: Ipv4Addr::new(10, 0, 0, 12),
            dst_ip: Ipv4Addr::new(10, 0, 0, 11),
            vni: 0x12_3456,
        }
    }

    #[test]
    fn udp_64_is_60_bytes_with_valid_ip_checksum_and_tag() {
        let t = spec(Proto::Udp, 64).build().unwrap();
        assert_eq!(t.frame.len(), 60);
        assert_eq!(
            (t.ip_off, t.l4_off, t.l4_csum_off, t.tag_off),
            (14, 34, 0, 42)
        );
        assert_eq!(checksum(&t.frame[14..34], 0), 0, "IPv4 header must verify");
        assert_eq!(&t.frame[12..14], &[0x08, 0x00]);
        assert_eq!(u16::from_be_bytes([t.frame[16], t.frame[17]]), 46);
        assert_eq!(u16::from_be_bytes([t.frame[38], t.frame[39]]), 26);
        assert_eq!(&t.frame[40..42], &[0, 0], "UDP checksum 0");
        assert_eq!(&t.frame[42..46], &TAG_MAGIC.to_ne_bytes());
        assert_eq!(&t.frame[34..36], &1024u16.to_be_bytes());
        assert_eq!(&t.frame[36..38], &5201u16.to_be_bytes());
    }

    #[test]
    fn tcp_checksum_verifies_and_needs_room_for_the_tag() {
        let s = spec(Proto::Tcp, 64);
        assert_eq!(
            s.build(),
            Err(TemplateError::TooSmall {
                size: 64,
                what: "TCP",
                min: 74
            })
        );
        let t = spec(Proto::Tcp, 128).build().unwrap();
        assert_eq!(t.frame.len(), 124);
        assert_eq!(t.l4_csum_off, 34 + 16);
        assert_eq!(t.tag_off, 54);
        assert_ne!(&t.frame[50..52], &[0, 0]);
        assert_eq!(l4_checksum(&t.frame[14..]), 0, "TCP checksum must verify");
        assert_eq!(t.frame[47], 0x10, "ACK");
    }

    #[test]
    fn vxlan_wraps_the_inner_frame() {
        let mut s = spec(Proto::Udp, 64);
        s.vxlan = Some(outer());
        assert!(matches!(
            s.build(),
            Err(TemplateError::TooSmall { min: 112, .. })
        ));
        s.pkt_size = 112;
        let t = s.build().unwrap();
        assert_eq!(t.frame.len(), 108);
        assert_eq!(checksum(&t.frame[14..34], 0), 0, "outer IPv4 verifies");
        assert_eq!(t.frame[23], 17);
        assert_eq!(&t.frame[36..38], &4789u16.to_be_bytes());
        assert_eq!(u16::from_be_bytes([t.frame[38], t.frame[39]]), 108 - 34);
        assert_eq!(&t.frame[42..50], &[0x08, 0, 0, 0, 0x12, 0x34, 0x56, 0]);
        assert_eq!(
            &t.frame[50..56],
            &[0x0a, 0x58, 10, 128, 0, 3],
            "inner dst MAC"
        );
        assert_eq!(t.ip_off, 64);
        assert_eq!(checksum(&t.frame[64..84], 0), 0, "inner IPv4 verifies");
        assert_eq!(t.tag_off, 92);
        assert_eq!(t.decapsulated_tag_off(), 42);
        // The reference's header is the template's with the per-frame
        // fields left to the program.
        let h = vxlan_header(s.vxlan.as_ref().unwrap()).unwrap();
        assert_eq!(&h[..16], &t.frame[..16]);
        assert_eq!(&h[16..18], &[0, 0], "IPv4 total length");
        assert_eq!(&h[18..24], &t.frame[18..24]);
        assert_eq!(&h[24..26], &[0, 0], "IPv4 checksum");
        assert_eq!(&h[26..38], &t.frame[26..38]);
        assert_eq!(&h[38..40], &[0, 0], "UDP length");
        assert_eq!(&h[40..50], &t.frame[40..50]);
        s.vxlan.as_mut().unwrap().vni = 1 << 24;
        assert_eq!(
            vxlan_header(s.vxlan.as_ref().unwrap()),
            Err(TemplateError::Vni(1 << 24))
        );
        assert_eq!(s.build(), Err(TemplateError::Vni(1 << 24)));
    }

    #[test]
    fn write_flow_varies_the_destination_port_of_replies() {
        let t = spec(Proto::Tcp, 128).build().unwrap();
        let mut f = t.frame.clone();
        let vary = Vary {
            dst_port: true,
            ..Vary::default()
        };
        t.write_flow(&mut f, vary, 7, 0);
        let base = u16::from_be_bytes([t.frame[36], t.frame[37]]);
        assert_eq!(&f[36..38], &(base + 7).to_be_bytes());
        assert_eq!(&f[34..36], &t.frame[34..36], "src port kept");
        assert_eq!(l4_checksum(&f[14..]), 0);
    }

    #[test]
    fn write_flow_varies_fields_and_keeps_checksums() {
        let t = spec(Proto::Tcp, 128).build().unwrap();
        let mut f = t.frame.clone();
        let vary = Vary {
            src_port: true,
            dst_ip: true,
            ..Vary::default()
        };
        t.write_flow(&mut f, vary, 7, 0x1122_3344_5566_7788);
        assert_eq!(&f[30..34], &[10, 128, 0, 10], "dst IP + 7");
        assert_eq!(&f[26..30], &[10, 128, 0, 2], "src IP kept");
        assert_eq!(&f[34..36], &1031u16.to_be_bytes());
        assert_eq!(&f[36..38], &t.frame[36..38], "dst port kept");
        assert_eq!(&f[62..70], &0x1122_3344_5566_7788u64.to_ne_bytes());
        assert_eq!(checksum(&f[14..34], 0), 0);
        assert_eq!(l4_checksum(&f[14..]), 0);
        // Rewriting an already rewritten frame depends only on the flow.
        let mut g = f.clone();
        t.write_flow(&mut g, vary, 0, 5);
        let mut h = t.frame.clone();
        t.write_flow(&mut h, vary, 0, 5);
        assert_eq!(g, h);
    }

    #[test]
    fn sizes_are_bounded() {
        assert!(matches!(
            spec(Proto::Udp, 63).build(),
            Err(TemplateError::TooSmall { min: 64, .. })
        ));
        assert_eq!(
            spec(Proto::Udp, 1519).build(),
            Err(TemplateError::TooLarge { size: 1519 })
        );
        assert_eq!(spec(Proto::Udp, 1518).build().unwrap().frame.len(), 1514);
    }

    #[test]
    fn checksum_matches_a_known_header() {
        // RFC 1071-style example: a header whose checksum is 0xb861.
        let h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(checksum(&h, 0), 0xb861);
    }
}
