//! The agent reference material the ofproto tests read: where it is, and
//! the OpenFlow byte streams of its captures.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The controller port ovs-ofctl talked to in the captures.
pub const OF_PORT: u16 = 16653;

/// The agent's reference directory (`TABLES.md`, `validation/`, `pcap/`):
/// `$XBR_SDN_DIR`, else `shared/sdn` beside the repository, else
/// `/work/shared/sdn` (where the development machines and CI have it). Missing, it fails the test: these
/// tests are the proof of agent compatibility and must not pass vacuously.
pub fn sdn_dir() -> PathBuf {
    let dir = match std::env::var_os("XBR_SDN_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            let beside = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/sdn");
            if beside.is_dir() {
                beside
            } else {
                PathBuf::from("/work/shared/sdn")
            }
        }
    };
    assert!(
        dir.join("pcap").is_dir() && dir.join("validation").is_dir(),
        "{} lacks pcap/ or validation/; set XBR_SDN_DIR to the SDN reference directory",
        dir.display()
    );
    dir
}

pub fn u16be(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn u32le(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Controller-to-switch TCP payload of a gzipped Ethernet pcap, per client
/// port, in capture order (the captures have no loss or reordering; see
/// pcap/README.md).
pub fn client_streams(path: &Path) -> BTreeMap<u16, Vec<u8>> {
    let out = std::process::Command::new("gzip")
        .arg("-dc")
        .arg(path)
        .output()
        .expect("gzip runs");
    assert!(out.status.success(), "gzip -dc {} failed", path.display());
    let data = out.stdout;
    assert_eq!(u32le(&data, 0), 0xa1b2_c3d4, "little-endian pcap expected");
    assert_eq!(u32le(&data, 20), 1, "Ethernet link type expected");
    let mut streams: BTreeMap<u16, Vec<u8>> = BTreeMap::new();
    let mut pos = 24;
    while pos + 16 <= data.len() {
        let incl = u32le(&data, pos + 8) as usize;
        let pkt = &data[pos + 16..pos + 16 + incl];
        pos += 16 + incl;
        if pkt.len() < 34 || u16be(pkt, 12) != 0x0800 || pkt[23] != 6 {
            continue;
        }
        let ip = &pkt[14..];
        let ihl = usize::from(ip[0] & 0xf) * 4;
        let tcp = &ip[ihl..usize::from(u16be(ip, 2))];
        let doff = usize::from(tcp[12] >> 4) * 4;
        if u16be(tcp, 2) == OF_PORT && tcp.len() > doff {
            streams
                .entry(u16be(tcp, 0))
                .or_default()
                .extend_from_slice(&tcp[doff..]);
        }
    }
    streams
}
