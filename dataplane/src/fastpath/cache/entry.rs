//! The byte layouts of the XDP flow cache's key and value (they must match
//! `struct xbr_fc_key` and `struct xbr_fc_val` in bpf/xbr_xdp.c), and the
//! userspace twin of the XDP program's parser, which decides which frames
//! the program looks up.

use crate::vxlan::encap::FlowOuter;
use flowtable::key::{Field, FlowKey};
use xbr_packet::parse::{Layers, ETH_HEADER_LEN};
use xbr_packet::vxlan::OUTER_LEN;

/// `struct xbr_fc_key`: 40 bytes.
pub const KEY_SIZE: usize = 40;
/// `struct xbr_fc_val`: 128 bytes (8-aligned for the 64-bit counters).
pub const VALUE_SIZE: usize = 128;
/// Where the key holds a decapsulated frame's tunnel source and VNI.
const KEY_TUN_SRC: usize = 32;
const KEY_VNI: usize = 36;
/// Where the value holds the outer headers of an encapsulating entry.
pub(super) const VALUE_ENCAP: usize = 48;
const VALUE_ENCAP_IP_SUM: usize = 100;
const VALUE_ENCAP_MAX_INNER: usize = 104;
pub(super) const VALUE_NW: usize = 112;

pub type FcKey = [u8; KEY_SIZE];

/// Key bytes, checked, from a map's raw key.
pub(super) fn key_from(raw: &[u8]) -> Option<FcKey> {
    (raw.len() == KEY_SIZE).then(|| {
        let mut k = [0u8; KEY_SIZE];
        k.copy_from_slice(raw);
        k
    })
}

const ETH_TYPE_IPV4: [u8; 2] = [0x08, 0x00];
const PROTO_ICMP: u8 = 1;
const PROTO_TCP: u8 = 6;
const PROTO_UDP: u8 = 17;

/// What a hit does: redirect to `out_ifindex` after optional Ethernet
/// rewrites, an optional IPv4/L4 rewrite (`nw`) and, with `encap`, VXLAN
/// encapsulation (`out_ifindex` is then the tunnel port's uplink), or drop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FcAction {
    Redirect {
        out_ifindex: u32,
        set_dst: Option<[u8; 6]>,
        set_src: Option<[u8; 6]>,
        nw: Option<NwRewrite>,
        encap: Option<FlowOuter>,
        /// The device takes frames in several buffers (see
        /// `genl::xdp_features`), so frames larger than a page (jumbo
        /// MTUs) may hit too.
        frags: bool,
    },
    Drop,
}

/// The IPv4 addresses and TCP/UDP ports a frame leaves with, when they
/// differ from those it came with (set_field, or NAT through `ct()`);
/// host order. An ICMP frame's `sport`/`dport` are ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NwRewrite {
    pub src: u32,
    pub dst: u32,
    pub sport: u16,
    pub dport: u16,
}

impl FcAction {
    /// Bytes the entry adds to each frame on the way out (the outer
    /// headers of an encapsulation), for the egress port's counters.
    pub fn added_bytes(&self) -> u64 {
        match self {
            FcAction::Redirect { encap: Some(_), .. } => OUTER_LEN as u64,
            _ => 0,
        }
    }
}

pub(super) const ACTION_REDIRECT: u8 = 1;
pub(super) const ACTION_DROP: u8 = 2;
pub(super) const FLAG_SET_DST: u8 = 1;
pub(super) const FLAG_SET_SRC: u8 = 2;
pub(super) const FLAG_CT: u8 = 4;
pub(super) const FLAG_ENCAP: u8 = 8;
pub(super) const FLAG_SET_NW: u8 = 16;
pub(super) const FLAG_FRAGS: u8 = 32;

/// The value stored for `action` in generation `gen`, counters zero.
/// `ct`: the translation went through conntrack, so TCP segments with
/// SYN, FIN or RST (or without ACK) must still go to xbr, whose
/// conntrack has to see them (see `fastpath/ct/link.rs`).
pub fn value(action: FcAction, gen: u64, ct: bool) -> [u8; VALUE_SIZE] {
    let mut v = [0u8; VALUE_SIZE];
    v[0..8].copy_from_slice(&gen.to_ne_bytes());
    // 8..16 packets, 16..24 bytes: zero.
    if ct {
        v[29] = FLAG_CT;
    }
    match action {
        FcAction::Drop => v[28] = ACTION_DROP,
        FcAction::Redirect {
            out_ifindex,
            set_dst,
            set_src,
            nw,
            encap,
            frags,
        } => {
            v[24..28].copy_from_slice(&out_ifindex.to_ne_bytes());
            v[28] = ACTION_REDIRECT;
            let mut flags = v[29];
            if let Some(mac) = set_dst {
                flags |= FLAG_SET_DST;
                v[30..36].copy_from_slice(&mac);
            }
            if let Some(mac) = set_src {
                flags |= FLAG_SET_SRC;
                v[36..42].copy_from_slice(&mac);
            }
            if let Some(r) = nw {
                flags |= FLAG_SET_NW;
                v[VALUE_NW..VALUE_NW + 4].copy_from_slice(&r.src.to_be_bytes());
                v[VALUE_NW + 4..VALUE_NW + 8].copy_from_slice(&r.dst.to_be_bytes());
                v[VALUE_NW + 8..VALUE_NW + 10].copy_from_slice(&r.sport.to_be_bytes());
                v[VALUE_NW + 10..VALUE_NW + 12].copy_from_slice(&r.dport.to_be_bytes());
            }
            if let Some(outer) = encap {
                flags |= FLAG_ENCAP;
                v[VALUE_ENCAP..VALUE_ENCAP + OUTER_LEN].copy_from_slice(&outer.hdr);
                v[VALUE_ENCAP_IP_SUM..VALUE_ENCAP_IP_SUM + 4]
                    .copy_from_slice(&outer.ip_sum.to_ne_bytes());
                v[VALUE_ENCAP_MAX_INNER..VALUE_ENCAP_MAX_INNER + 2]
                    .copy_from_slice(&outer.max_inner.to_ne_bytes());
            }
            if frags {
                flags |= FLAG_FRAGS;
            }
            v[29] = flags;
        }
    }
    v
}

/// The generation a value was installed in.
pub fn generation(v: &[u8]) -> u64 {
    v.get(0..8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_ne_bytes)
}

/// The hit counters (packets, bytes) of a value.
pub fn counters(v: &[u8]) -> (u64, u64) {
    let word = |at: usize| {
        v.get(at..at + 8)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_ne_bytes)
    };
    (word(8), word(16))
}

/// Adds a decapsulated frame's tunnel metadata to its key (the XDP
/// program of a VXLAN port's uplink does so): the outer source address
/// and the VNI. The outer destination is the port's own address, implied
/// by the ingress ifindex.
pub fn set_tunnel(key: &mut FcKey, tun_src: u32, vni: u32) {
    key[KEY_TUN_SRC..KEY_TUN_SRC + 4].copy_from_slice(&tun_src.to_be_bytes());
    key[KEY_VNI..KEY_VNI + 4].copy_from_slice(&(vni & 0x00ff_ffff).to_be_bytes());
}

/// A decapsulated frame's tunnel source and VNI, as `set_tunnel` wrote
/// them (zeros for any other frame's key).
pub fn key_tunnel(key: &FcKey) -> (u32, u32) {
    let word = |at: usize| u32::from_be_bytes([key[at], key[at + 1], key[at + 2], key[at + 3]]);
    (word(KEY_TUN_SRC), word(KEY_VNI))
}

/// Whether `key` is a decapsulated frame's (its tunnel source is set;
/// statistics use this, lookups need not: a key also holds the ingress
/// ifindex, an uplink's for every decapsulated frame).
pub fn is_decapsulated(key: &FcKey) -> bool {
    key[KEY_TUN_SRC..KEY_TUN_SRC + 4] != [0; 4]
}

/// The IPv4 addresses and TCP/UDP ports of a key (ICMP: type and code in
/// the port words), as a rewrite that changes nothing.
pub fn key_nw(key: &FcKey) -> NwRewrite {
    let word = |at: usize| u32::from_be_bytes([key[at], key[at + 1], key[at + 2], key[at + 3]]);
    let half = |at: usize| u16::from_be_bytes([key[at], key[at + 1]]);
    NwRewrite {
        src: word(16),
        dst: word(20),
        sport: half(28),
        dport: half(30),
    }
}

/// The protocol of a key.
pub fn key_proto(key: &FcKey) -> u8 {
    key[24]
}

/// The inner flow fields that the VXLAN source port hashes
/// (`vxlan::encap::flow_hash`) of a frame of `proto` leaving with `nw`:
/// IPv4 addresses, protocol, and the L4 ports of TCP and UDP.
pub fn flow_hash(proto: u8, nw: &NwRewrite) -> u32 {
    let ports = matches!(proto, PROTO_TCP | PROTO_UDP)
        .then(|| u32::from(nw.sport) << 16 | u32::from(nw.dport));
    crate::vxlan::encap::flow_hash_ipv4(nw.src, nw.dst, proto, ports)
}

/// A MAC held in the low 48 bits of a flow-key value, as bytes.
pub fn mac_bytes(value: u64) -> [u8; 6] {
    let b = value.to_be_bytes();
    [b[2], b[3], b[4], b[5], b[6], b[7]]
}

/// The key the XDP program builds for `frame` received on `ifindex`, or
/// `None` for a frame it never looks up (it goes to xbr every time).
///
/// The key holds every header field `packet::extract` puts in the flow
/// key of such a frame (the Ethernet type and the absence of a VLAN tag,
/// options and fragmentation being implied), so two frames with one key
/// translate alike. The checksum is not part of it: a frame whose
/// checksum the sender left to offload translates like one with a
/// complete checksum, and the XDP program completes it on a hit.
pub fn frame_key(frame: &[u8], ifindex: u32) -> Option<FcKey> {
    let eth = frame.get(..ETH_HEADER_LEN)?;
    if eth[12..14] != ETH_TYPE_IPV4 {
        return None;
    }
    let ip = frame.get(ETH_HEADER_LEN..ETH_HEADER_LEN + 20)?;
    if ip[0] != 0x45 {
        return None;
    }
    if u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff != 0 {
        return None;
    }
    let proto = ip[9];
    let l4 = ETH_HEADER_LEN + 20;
    let (tp_src, tp_dst) = match proto {
        PROTO_TCP | PROTO_UDP => {
            let need = if proto == PROTO_TCP { 18 } else { 8 };
            let p = frame.get(l4..l4 + need)?;
            ([p[0], p[1]], [p[2], p[3]])
        }
        PROTO_ICMP => {
            let p = frame.get(l4..l4 + 2)?;
            ([0, p[0]], [0, p[1]])
        }
        _ => return None,
    };
    let mut k = [0u8; KEY_SIZE];
    k[0..4].copy_from_slice(&ifindex.to_ne_bytes());
    k[4..16].copy_from_slice(&eth[0..12]);
    k[16..24].copy_from_slice(&ip[12..20]);
    k[24] = proto;
    k[25] = ip[1];
    k[26] = ip[8];
    k[28..30].copy_from_slice(&tp_src);
    k[30..32].copy_from_slice(&tp_dst);
    Some(k)
}

/// [`frame_key`] of a frame already parsed: built from the flow key and
/// layer offsets `parse::extract` found in it (`frame_len` bytes long),
/// with no second pass over the bytes. The packet thread keys every
/// received frame this way; `frame_key` stays the reference it must equal
/// (`tests::the_parsed_key_is_the_frame_key`).
///
/// The conditions are `frame_key`'s, read from the parse: the Ethernet
/// type word is IPv4 exactly when the key's type is IPv4 and the IP
/// header is at byte 14 (no VLAN tag, no LLC/SNAP); the header has no
/// options when the L4 header is 20 bytes behind it; "not a fragment" is
/// `ip_frag == 0`.
pub fn key_of(key: &FlowKey, layers: Layers, frame_len: usize, ifindex: u32) -> Option<FcKey> {
    const L3: usize = ETH_HEADER_LEN;
    const L4: usize = L3 + 20;
    if key.get(Field::EthType) != u64::from(u16::from_be_bytes(ETH_TYPE_IPV4))
        || usize::from(layers.l3) != L3
        || usize::from(layers.l4) != L4
        || key.get(Field::IpFrag) != 0
    {
        return None;
    }
    let proto = layers.proto;
    let (tp_src, tp_dst) = match proto {
        PROTO_TCP | PROTO_UDP => {
            let need = if proto == PROTO_TCP { 18 } else { 8 };
            if frame_len < L4 + need {
                return None;
            }
            (key.get(Field::TpSrc) as u16, key.get(Field::TpDst) as u16)
        }
        PROTO_ICMP => (
            key.get(Field::IcmpType) as u16,
            key.get(Field::IcmpCode) as u16,
        ),
        _ => return None,
    };
    let mut k = [0u8; KEY_SIZE];
    k[0..4].copy_from_slice(&ifindex.to_ne_bytes());
    k[4..10].copy_from_slice(&mac_bytes(key.get(Field::EthDst)));
    k[10..16].copy_from_slice(&mac_bytes(key.get(Field::EthSrc)));
    k[16..20].copy_from_slice(&(key.get(Field::IpSrc) as u32).to_be_bytes());
    k[20..24].copy_from_slice(&(key.get(Field::IpDst) as u32).to_be_bytes());
    k[24] = proto;
    k[25] = (key.get(Field::IpDscp) as u8) << 2 | key.get(Field::IpEcn) as u8 & 3;
    k[26] = key.get(Field::IpTtl) as u8;
    k[28..30].copy_from_slice(&tp_src.to_be_bytes());
    k[30..32].copy_from_slice(&tp_dst.to_be_bytes());
    Some(k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use xbr_packet::testframes::{nd_frame, tcp6_frame, udp6_frame};
    use xbr_packet::testframes::{snap_frame, udp_frame};

    /// The XDP program and its userspace twin look up IPv4 only: an IPv6
    /// frame always goes to xbr, so no entry can hold an IPv6 flow.
    #[test]
    fn a_raw_key_is_taken_only_at_its_exact_size() {
        let key = [3u8; KEY_SIZE];
        assert_eq!(key_from(&key[..KEY_SIZE - 1]), None);
        assert_eq!(key_from(&[0u8; KEY_SIZE + 1]), None);
        assert_eq!(key_from(&key), Some(key));
    }

    #[test]
    fn ipv6_frames_are_never_looked_up() {
        for f in [udp6_frame(), tcp6_frame(), nd_frame(135)] {
            assert_eq!(frame_key(&f, 1), None);
        }
        // Nor IPv6 headers behind an IPv4 ethertype.
        let mut f = udp6_frame();
        f[12..14].copy_from_slice(&ETH_TYPE_IPV4);
        assert_eq!(frame_key(&f, 1), None);
    }

    #[test]
    fn udp_key_layout() {
        let f = udp_frame();
        let k = frame_key(&f, 7).expect("plain UDP is cacheable");
        assert_eq!(&k[0..4], &7u32.to_ne_bytes());
        assert_eq!(&k[4..16], &f[0..12]);
        assert_eq!(&k[16..24], &[10, 128, 0, 2, 10, 128, 0, 3]);
        assert_eq!((k[24], k[25], k[26], k[27]), (17, 0, 64, 0));
        assert_eq!(&k[28..32], &[0x04, 0xd2, 0x16, 0x2e]);
    }

    #[test]
    fn frames_the_program_skips_have_no_key() {
        let f = udp_frame();
        let mut options = f.clone();
        options[14] = 0x46;
        let mut fragment = f.clone();
        fragment[20] = 0x20; // MF
        let mut arp = f.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        let mut sctp = f.clone();
        sctp[23] = 132;
        let mut vlan = f.clone();
        vlan[12..14].copy_from_slice(&[0x81, 0x00]);
        for (what, frame) in [
            ("options", options),
            ("fragment", fragment),
            ("arp", arp),
            ("sctp", sctp),
            ("vlan", vlan),
            ("truncated", f[..40].to_vec()),
            // 802.3: the packet thread extracts the IPv4 packet behind
            // LLC/SNAP (dl_type 0x0800) and keys plain LLC as 0x05ff;
            // the program keys neither, so both always go to xbr.
            ("snap", snap_frame(&[], [0; 3], 0x0800)),
            ("llc", snap_frame(&[], [0, 0, 0x0c], 0x0800)),
        ] {
            assert_eq!(frame_key(&frame, 1), None, "{what}");
        }
    }

    #[test]
    fn keys_differ_in_every_field_the_pipeline_sees() {
        let f = udp_frame();
        let base = frame_key(&f, 1).unwrap();
        assert_ne!(frame_key(&f, 2).unwrap(), base, "ifindex");
        for at in [0, 6, 15, 22, 23, 26, 30, 34, 36] {
            let mut g = f.clone();
            g[at] ^= 0x01;
            assert_ne!(frame_key(&g, 1), Some(base), "byte {at}");
        }
    }

    #[test]
    fn value_layout() {
        let v = value(
            FcAction::Redirect {
                out_ifindex: 9,
                set_dst: Some([1, 2, 3, 4, 5, 6]),
                set_src: None,
                nw: None,
                encap: None,
                frags: false,
            },
            5,
            false,
        );
        assert_eq!(&v[0..8], &5u64.to_ne_bytes());
        assert_eq!(&v[24..28], &9u32.to_ne_bytes());
        assert_eq!((v[28], v[29]), (ACTION_REDIRECT, FLAG_SET_DST));
        assert_eq!(&v[30..36], &[1, 2, 3, 4, 5, 6]);
        assert_eq!(counters(&v), (0, 0));
        assert_eq!(value(FcAction::Drop, 1, false)[28], ACTION_DROP);
        assert_eq!(value(FcAction::Drop, 1, false)[29], 0);
        assert_eq!(value(FcAction::Drop, 1, true)[29], FLAG_CT);
        let ct = value(
            FcAction::Redirect {
                out_ifindex: 9,
                set_dst: None,
                set_src: Some([1, 2, 3, 4, 5, 6]),
                nw: None,
                encap: None,
                frags: false,
            },
            5,
            true,
        );
        assert_eq!(ct[29], FLAG_CT | FLAG_SET_SRC);
        let jumbo = value(
            FcAction::Redirect {
                out_ifindex: 9,
                set_dst: None,
                set_src: None,
                nw: None,
                encap: None,
                frags: true,
            },
            5,
            false,
        );
        assert_eq!(jumbo[29], FLAG_FRAGS);
        assert_eq!(mac_bytes(0x0a58_0a80_0002), [0x0a, 0x58, 0x0a, 0x80, 0, 2]);
    }

    #[test]
    fn tunnel_metadata_and_encap_layout() {
        let f = udp_frame();
        let mut k = frame_key(&f, 7).unwrap();
        assert_eq!(&k[32..40], &[0; 8], "not a decapsulated frame");
        assert!(!is_decapsulated(&k));
        set_tunnel(&mut k, 0x0a00_000c, 0x0123_4567);
        assert!(is_decapsulated(&k));
        assert_eq!(key_tunnel(&k), (0x0a00_000c, 0x0023_4567));
        assert_eq!(&k[32..40], &[10, 0, 0, 12, 0, 0x23, 0x45, 0x67]);

        let t = crate::vxlan::encap::Template::new([2; 6], [4; 6], 0x0a00_000b, 0x0a00_000c, 4789);
        let outer = t.flow_outer(0x12_3456, 0xc001, 1500);
        assert_eq!(outer.max_inner, 1500 - 36);
        let v = value(
            FcAction::Redirect {
                out_ifindex: 3,
                set_dst: None,
                set_src: None,
                nw: None,
                encap: Some(outer),
                frags: false,
            },
            2,
            false,
        );
        assert_eq!(v[29], FLAG_ENCAP);
        assert_eq!(&v[48..98], &outer.hdr);
        assert_eq!(&v[100..104], &outer.ip_sum.to_ne_bytes());
        assert_eq!(&v[104..106], &(1464u16).to_ne_bytes());
        // The stored header carries the flow's source port and VNI.
        assert_eq!(&outer.hdr[34..36], &[0xc0, 0x01]);
        assert_eq!(&outer.hdr[42..50], &[0x08, 0, 0, 0, 0x12, 0x34, 0x56, 0]);
    }

    /// The source port an entry stores is the one the packet thread's
    /// encapsulation computes from the frame.
    #[test]
    fn key_flow_hash_is_the_frames() {
        let mut tcp = udp_frame();
        tcp[23] = PROTO_TCP;
        tcp.extend_from_slice(&[0; 12]);
        for f in [udp_frame(), tcp] {
            let k = frame_key(&f, 1).unwrap();
            assert_eq!(flow_hash(key_proto(&k), &key_nw(&k)), parsed_hash(&f));
        }
        let mut icmp = udp_frame();
        icmp[23] = PROTO_ICMP;
        let k = frame_key(&icmp, 1).unwrap();
        assert_eq!(flow_hash(key_proto(&k), &key_nw(&k)), parsed_hash(&icmp));
    }

    fn parsed_hash(frame: &[u8]) -> u32 {
        let mut key = FlowKey::zero();
        xbr_packet::parse::extract(frame, 1, &mut key);
        crate::vxlan::encap::flow_hash(&key)
    }

    /// Frames to mutate: IPv4 UDP, TCP and ICMP, IPv6, IPv4 in LLC/SNAP
    /// and behind a VLAN tag.
    fn base_frames() -> Vec<Vec<u8>> {
        let mut tcp = udp_frame();
        tcp[23] = PROTO_TCP;
        tcp.extend_from_slice(&[0; 12]);
        let mut icmp = udp_frame();
        icmp[23] = PROTO_ICMP;
        let mut vlan = udp_frame();
        vlan.splice(12..12, [0x81, 0x00, 0x00, 0x05]);
        vec![
            udp_frame(),
            tcp,
            icmp,
            udp6_frame(),
            snap_frame(&[], [0, 0, 0], 0x0800),
            vlan,
        ]
    }

    /// Header bytes whose values decide whether a frame is keyed: the
    /// Ethernet type, version and header length, fragment bits, protocol.
    const DECIDING: [usize; 7] = [12, 13, 14, 20, 21, 23, 15];

    proptest::proptest! {
        /// The packet thread's key, built from the parse, is the XDP
        /// program's: for any frame, with any deciding byte changed and
        /// cut anywhere.
        #[test]
        fn the_parsed_key_is_the_frame_key(
            base in 0usize..6,
            flips in proptest::collection::vec((0usize..7, 0usize..64, proptest::prelude::any::<u8>()), 0..4),
            cut in 0usize..60,
        ) {
            let mut f = base_frames()[base].clone();
            for (which, at, b) in flips {
                // Half the changes hit a deciding byte, half anywhere.
                let at = if at % 2 == 0 { DECIDING[which] } else { at };
                if let Some(x) = f.get_mut(at) {
                    *x = b;
                }
            }
            f.truncate(f.len().saturating_sub(cut));
            let mut key = FlowKey::zero();
            let layers = xbr_packet::parse::extract(&f, 1, &mut key);
            proptest::prop_assert_eq!(key_of(&key, layers, f.len(), 7), frame_key(&f, 7));
        }
    }

    #[test]
    fn the_parsed_key_of_common_frames() {
        for f in base_frames() {
            let mut key = FlowKey::zero();
            let layers = xbr_packet::parse::extract(&f, 1, &mut key);
            assert_eq!(key_of(&key, layers, f.len(), 3), frame_key(&f, 3));
        }
        // The IPv4 ones are keyed at all.
        let mut key = FlowKey::zero();
        let layers = xbr_packet::parse::extract(&udp_frame(), 1, &mut key);
        assert!(key_of(&key, layers, udp_frame().len(), 3).is_some());
    }
}
