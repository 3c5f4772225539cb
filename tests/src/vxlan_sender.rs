//! A remote VTEP's VXLAN, written by hand (python3's sockets): what a
//! node sends to another node's `vxlan0`, for tests that need VXLAN from
//! a namespace without an OVS or an xbr in it.

use crate::cmd::run_timeout;
use crate::{HarnessError, Result};
use std::process::Command;
use std::time::Duration;

/// Sends `count` VXLAN packets to `dst:4789` with VNI `vni`, each
/// carrying an xbr-testtool UDP datagram (source port 40000, destination
/// [`VXLAN_INNER_PORT`], the tool's payload pattern, which its receiver
/// checks) from `sip` to `dip` with the MACs given; paced at `rate` a
/// second if given. The outer UDP checksum is off (SO_NO_CHECK), as VTEPs
/// send it. Prints how many it sent.
const VXLAN_SENDER: &str = r#"
import socket, struct, sys, time
dst, vni, dmac, smac, sip, dip, count, rate = sys.argv[1:9]
count, rate = int(count), int(rate)
def csum(b):
    s = sum(struct.unpack('!%dH' % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xffff) + (s >> 16)
    return (~s) & 0xffff
mac = lambda m: bytes.fromhex(m.replace(':', ''))
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, 11, 1)
hdr = struct.pack('!II', 0x08000000, int(vni) << 8) + mac(dmac) + mac(smac) + b'\x08\x00'
# xbr-testtool's payload pattern after its 16-byte header (its receiver
# drops packets whose payload changed).
tail = bytes((i * 31 + 7) & 0xff for i in range(16, 64))
t0 = time.monotonic()
seq = 0
while seq < count:
    due = count if rate == 0 else min(count, int((time.monotonic() - t0) * rate) + 1)
    while seq < due:
        payload = b'XBRTTOOL' + struct.pack('!Q', seq) + tail
        udp = struct.pack('!HHHH', 40000, 7777, 8 + len(payload), 0) + payload
        ip = struct.pack('!BBHHHBBH4s4s', 0x45, 0, 20 + len(udp), seq & 0xffff, 0x4000, 64, 17, 0,
                         socket.inet_aton(sip), socket.inet_aton(dip))
        ip = ip[:10] + struct.pack('!H', csum(ip)) + ip[12:]
        s.sendto(hdr + ip + udp, (dst, 4789))
        seq += 1
    if seq < count:
        time.sleep(0.0005)
print(seq)
"#;

/// The inner datagrams' destination port.
pub const VXLAN_INNER_PORT: u16 = 7777;

/// What one VXLAN burst carries: the inner frame's MACs and addresses.
#[derive(Clone, Copy, Debug)]
pub struct InnerFrame<'a> {
    pub dst_mac: &'a str,
    pub src_mac: &'a str,
    pub src_ip: &'a str,
    pub dst_ip: &'a str,
}

/// Runs the sender in namespace `netns`: `count` packets to `dst` (a
/// node's address) with VNI `vni`, at `rate` a second (`None`: as fast as
/// it goes). Returns how many it sent.
pub fn send_vxlan(
    netns: &str,
    dst: &str,
    vni: u64,
    inner: &InnerFrame<'_>,
    count: u64,
    rate: Option<u64>,
) -> Result<u64> {
    let (vni_s, count_s) = (vni.to_string(), count.to_string());
    let rate_s = rate.unwrap_or(0).to_string();
    let bound = Duration::from_secs(15 + rate.filter(|r| *r > 0).map_or(0, |r| count / r));
    let out = run_timeout(
        Command::new("ip").args([
            "netns",
            "exec",
            netns,
            "python3",
            "-c",
            VXLAN_SENDER,
            dst,
            &vni_s,
            inner.dst_mac,
            inner.src_mac,
            inner.src_ip,
            inner.dst_ip,
            &count_s,
            &rate_s,
        ]),
        bound,
    )?
    .ok()?;
    out.stdout
        .trim()
        .parse()
        .map_err(|_| HarnessError::Unexpected(format!("the VXLAN sender printed {:?}", out.stdout)))
}
