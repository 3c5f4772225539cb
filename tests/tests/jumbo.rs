//! Jumbo frames: pods with a 9000-byte MTU (as on clusters whose underlay
//! runs 9000) send frames larger than a UMEM frame's 3840 bytes of room.
//! The kernel hands them to xbr in several AF_XDP descriptors and takes
//! them back the same way (multi-buffer); xbr puts each together in a
//! jumbo block. Pings at the MTU with DF, UDP on both sides of the
//! one-frame limit and a bulk TCP transfer (its segments at the MTU) must
//! be delivered intact, with the XDP flow cache on (whose entries forward
//! them in the kernel, checksums completed over every buffer) as off. A frame no jumbo block holds is
//! dropped and counted as the port's receive drop, and xbr keeps
//! forwarding; an MTU raised while xbr runs (OpenShift's MTU migration)
//! takes effect at once. A TAP-backed internal port takes jumbo frames
//! too, and drops (and counts) one the device had to cut. A controller's
//! PACKET_OUT may carry a jumbo frame.
//!
//! Needs root, a built `xbr` (see skeleton.rs), `ping` and `python3`.

use std::net::SocketAddrV4;
use std::path::Path;
use std::time::Duration;
use xbr_tests::{
    flow_n_packets, run_timeout, start_xdp_pair, tcp_transfer, udp_send_sized, unique_tag,
    xdp_pods, Netns, Pod, Result, UdpReceiver, Xbr, CMD_TIMEOUT, NAME_PREFIX, POD_A_IP, POD_A_MAC,
};

const TOOL: &str = env!("CARGO_BIN_EXE_xbr-testtool");

const PLAIN_FLOWS: &[&str] = &[
    "priority=10,in_port=1,actions=output:2",
    "priority=10,in_port=2,actions=output:1",
];

const MTU: u32 = 9000;
/// ICMP payload filling the MTU: 9000 - 20 (IP) - 8 (ICMP).
const PING_SIZE: u32 = MTU - 28;
/// UDP payloads: 3798 makes a 3840-byte frame, exactly a frame's room;
/// one byte more needs two descriptors; then a middle size and the MTU.
const SIZES: &[usize] = &[3798, 3799, 6000, MTU as usize - 28];
const BURST: u64 = 200;
const RATE: u64 = 5_000;
const RECV_TIMEOUT: Duration = Duration::from_secs(20);
const TCP_BYTES: usize = 8 << 20;

/// `count` pings of `size` bytes with DF from `from` to `to`; how many
/// came back.
fn ping_df(from: &Pod, to: &Pod, count: u32, size: u32) -> Result<u32> {
    let (count_s, size_s, dst) = (count.to_string(), size.to_string(), to.ip().to_string());
    let out = from.ns().exec(
        &[
            "ping", "-n", "-q", "-M", "do", "-c", &count_s, "-i", "0.2", "-W", "1", "-s", &size_s,
            &dst,
        ],
        CMD_TIMEOUT,
    )?;
    let received = out
        .stdout
        .split(',')
        .find_map(|part| part.trim().strip_suffix(" received"))
        .and_then(|n| n.parse().ok());
    Ok(received.unwrap_or_else(|| panic!("no ping summary:\n{}\n{}", out.stdout, out.stderr)))
}

fn udp(from: &Pod, to: &Pod, dport: u16, size: usize) -> Result<u64> {
    let tool = Path::new(TOOL);
    let dst = SocketAddrV4::new(to.ip(), dport);
    let rx = UdpReceiver::start(tool, to.ns(), dst, BURST, RECV_TIMEOUT)?;
    assert_eq!(
        udp_send_sized(tool, from.ns(), 40000, dst, BURST, RATE, size)?,
        BURST
    );
    rx.finish()
}

/// Pods A and B with `mtu` on both veth ends, each knowing the other's MAC.
fn pods(mtu: u32) -> Result<(Pod, Pod)> {
    let (a, b) = xdp_pods()?;
    for p in [&a, &b] {
        p.set_mtu(mtu)?;
    }
    a.add_neighbor(&b)?;
    b.add_neighbor(&a)?;
    Ok((a, b))
}

/// The receive drops `ovs-ofctl dump-ports` reports for `port`.
fn rx_drops(xbr: &Xbr, port: u32) -> Result<u64> {
    let dump = xbr.ofctl_ok(&["dump-ports", "br0", &port.to_string()])?;
    Ok(dump
        .split([',', ' ', '\n'])
        .find_map(|w| w.strip_prefix("drop="))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no drop= in:\n{dump}")))
}

fn exchange(cache: &str) -> Result<()> {
    let (a, b) = pods(MTU)?;
    let xbr = start_xdp_pair(&a, &b, cache, PLAIN_FLOWS)?;
    assert_eq!(
        ping_df(&a, &b, 5, PING_SIZE)?,
        5,
        "cache {cache}: pings at the MTU"
    );
    for (i, size) in SIZES.iter().enumerate() {
        let port = 5001 + i as u16;
        assert_eq!(
            udp(&a, &b, port, *size)?,
            BURST,
            "cache {cache}: A->B {size} bytes"
        );
        assert_eq!(
            udp(&b, &a, port, *size)?,
            BURST,
            "cache {cache}: B->A {size} bytes"
        );
    }
    let tcp = tcp_transfer(&a, &b, 41000, 8080, TCP_BYTES, false)?;
    assert_eq!(tcp, TCP_BYTES.to_string(), "cache {cache}: TCP A->B");
    // The transfer went in jumbo segments: A's bytes per packet are far
    // above what one frame holds.
    let dump = xbr.dump_flows()?;
    let packets = flow_n_packets(&dump, "in_port=1").expect("A's flow");
    let bytes: u64 = dump
        .lines()
        .find(|l| l.contains("in_port=1"))
        .and_then(|l| l.split([',', ' ']).find_map(|w| w.strip_prefix("n_bytes=")))
        .and_then(|n| n.parse().ok())
        .expect("A's flow bytes");
    assert!(
        bytes / packets.max(1) > 4000,
        "cache {cache}: {bytes} bytes in {packets} packets\n{dump}"
    );
    assert_eq!(rx_drops(&xbr, 1)?, 0, "cache {cache}: nothing dropped");
    if cache == "on" {
        kernel_forwarded_jumbo_frames(&xbr)?;
    }
    Ok(())
}

/// With the cache on, the kernel forwarded the jumbo frames (the pods'
/// devices take multi-buffer XDP frames: GRO is on in the pods): nearly
/// all of the TCP transfer's bytes and of the large UDP bursts went
/// through XDP cache entries, not through the packet thread.
fn kernel_forwarded_jumbo_frames(xbr: &Xbr) -> Result<()> {
    let dump = xbr.client_ok(&["dpctl", "dump-flows", "br0"])?;
    let counts = |l4: &str| -> (u64, u64) {
        let line = dump
            .lines()
            .find(|l| l.contains(l4))
            .unwrap_or_else(|| panic!("no XDP cache entry with {l4}:\n{dump}"));
        let field = |name: &str| {
            line.split(name)
                .nth(1)
                .and_then(|r| r.split(',').next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        };
        (field(", packets:"), field(", bytes:"))
    };
    let (packets, bytes) = counts("tcp(src=41000,dst=8080)");
    assert!(
        bytes >= TCP_BYTES as u64 * 9 / 10 && bytes / packets.max(1) > 8000,
        "TCP A->B: the kernel forwarded {bytes} bytes in {packets} packets\n{dump}"
    );
    for (i, size) in SIZES.iter().enumerate().skip(1) {
        let (packets, _) = counts(&format!("udp(src=40000,dst={})", 5001 + i));
        assert!(
            packets >= BURST * 9 / 10,
            "UDP A->B {size} bytes: the kernel forwarded {packets}\n{dump}"
        );
    }
    Ok(())
}

#[test]
fn jumbo_frames_pass_with_the_xdp_cache_off() -> Result<()> {
    exchange("off")
}

#[test]
fn jumbo_frames_pass_with_the_xdp_cache_on() -> Result<()> {
    exchange("on")
}

/// A 16,300-byte frame does not fit a 16 KiB jumbo block: dropped and
/// counted on the receiving port; the blocks are not lost, so frames at
/// 9000 still pass afterwards.
#[test]
fn a_frame_larger_than_a_jumbo_block_is_dropped_and_counted() -> Result<()> {
    let (a, b) = pods(16_300)?;
    let xbr = start_xdp_pair(&a, &b, "off", PLAIN_FLOWS)?;
    assert_eq!(ping_df(&a, &b, 3, 16_300 - 28)?, 0);
    assert!(rx_drops(&xbr, 1)? >= 3, "the oversize frames are counted");
    for _ in 0..3 {
        assert_eq!(ping_df(&a, &b, 5, PING_SIZE)?, 5, "jumbo frames still pass");
    }
    Ok(())
}

/// OpenShift's MTU migration raises the MTU of running pods' interfaces:
/// the kernel takes the new MTU on a port xbr serves (its XDP program
/// takes frames in several buffers) and frames at it pass at once,
/// without restarting xbr.
#[test]
fn an_mtu_raised_while_xbr_runs_carries_jumbo_frames() -> Result<()> {
    let (a, b) = pods(1500)?;
    let xbr = start_xdp_pair(&a, &b, "on", PLAIN_FLOWS)?;
    assert_eq!(ping_df(&a, &b, 3, 1500 - 28)?, 3);
    for p in [&a, &b] {
        p.set_mtu(MTU)?;
    }
    assert_eq!(ping_df(&a, &b, 5, PING_SIZE)?, 5);
    assert_eq!(rx_drops(&xbr, 1)?, 0);
    Ok(())
}

/// A TAP internal port (`internal_backend=tap`, as tun0 may be) reads a
/// jumbo frame into a frame and on into a jumbo block. The device cuts a
/// frame longer than that to what fits and says nothing: xbr drops and
/// counts a read that filled every byte, instead of sending it on cut.
#[test]
fn a_tap_internal_port_carries_jumbo_frames_and_drops_cut_ones() -> Result<()> {
    const BIG_MTU: u32 = 16_300;
    let pod = Pod::new(POD_A_IP, 24, POD_A_MAC)?;
    pod.set_mtu(BIG_MTU)?;
    let host_ns = Netns::new()?;
    let name = format!("{NAME_PREFIX}{}", unique_tag());
    let host_mac = "0a:58:0a:80:00:01";
    let host_ip = "10.128.0.1";
    let pod_spec = format!("{}=1", pod.host_if());
    let tap_spec = format!("{name}=2,type=internal,internal_backend=tap,mac={host_mac}");
    let xbr = Xbr::start(&["--port", &pod_spec, "--port", &tap_spec])?;
    for f in PLAIN_FLOWS {
        xbr.add_flow(f)?;
    }
    // The TAP in a namespace of the test's own, with the host's address.
    let ip = |args: &[&str]| -> Result<()> {
        run_timeout(std::process::Command::new("ip").args(args), CMD_TIMEOUT)?
            .ok()
            .map(drop)
    };
    let mtu = BIG_MTU.to_string();
    let ns = host_ns.name();
    ip(&["link", "set", &name, "netns", ns])?;
    ip(&["-n", ns, "link", "set", &name, "mtu", &mtu, "up"])?;
    ip(&[
        "-n",
        ns,
        "addr",
        "add",
        &format!("{host_ip}/24"),
        "dev",
        &name,
    ])?;
    let pod_ip = POD_A_IP.to_string();
    ip(&[
        "-n",
        ns,
        "neigh",
        "replace",
        &pod_ip,
        "lladdr",
        POD_A_MAC,
        "dev",
        &name,
        "nud",
        "permanent",
    ])?;
    pod.exec_ok(&[
        "ip",
        "neigh",
        "replace",
        host_ip,
        "lladdr",
        host_mac,
        "dev",
        "eth0",
        "nud",
        "permanent",
    ])?;
    let ping = |size: u32| -> Result<String> {
        let size = size.to_string();
        let out = host_ns.exec(
            &[
                "ping", "-n", "-q", "-M", "do", "-c", "3", "-i", "0.2", "-W", "1", "-s", &size,
                &pod_ip,
            ],
            CMD_TIMEOUT,
        )?;
        Ok(out.stdout)
    };
    assert!(
        ping(PING_SIZE)?.contains(" 3 received"),
        "jumbo frames from the TAP"
    );
    assert!(
        ping(BIG_MTU - 28)?.contains(" 0 received"),
        "a cut frame was sent"
    );
    assert!(rx_drops(&xbr, 2)? >= 3, "the cut frames are counted");
    assert!(
        ping(PING_SIZE)?.contains(" 3 received"),
        "jumbo frames still pass"
    );
    Ok(())
}

/// A `len`-byte UDP payload as xbr-testtool's sender writes its packet
/// `seq` (its receiver counts only those): a magic, the sequence number,
/// then a pattern of the offset.
fn testtool_payload(seq: u64, len: usize) -> Vec<u8> {
    let mut p = b"XBRTTOOL".to_vec();
    p.extend(seq.to_be_bytes());
    p.extend((p.len()..len).map(|i| (i.wrapping_mul(31) + 7) as u8));
    p
}

/// Ethernet + IPv4 + UDP from pod `from` to `to` around `payload` (the
/// UDP checksum 0: none, which IPv4 allows).
fn udp_frame(from: &Pod, to: SocketAddrV4, to_mac: &str, payload: &[u8]) -> Vec<u8> {
    let mac = |m: &str| -> Vec<u8> {
        m.split(':')
            .map(|b| u8::from_str_radix(b, 16).expect("a MAC"))
            .collect()
    };
    let mut f = mac(to_mac);
    f.extend(mac(from.mac()));
    f.extend([0x08, 0x00]);
    let total = (20 + 8 + payload.len()) as u16;
    let mut ip = vec![0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, 17, 0, 0];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip.extend(from.ip().octets());
    ip.extend(to.ip().octets());
    let sum: u32 = ip
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    let sum = (sum & 0xffff) + (sum >> 16);
    let csum = !((sum & 0xffff) + (sum >> 16)) as u16;
    ip[10..12].copy_from_slice(&csum.to_be_bytes());
    f.extend(ip);
    f.extend(40000u16.to_be_bytes());
    f.extend(to.port().to_be_bytes());
    f.extend((8 + payload.len() as u16).to_be_bytes());
    f.extend([0, 0]);
    f.extend_from_slice(payload);
    f
}

/// A controller's PACKET_OUT of a jumbo frame goes out whole (from a
/// jumbo block: it fits no frame); data longer than a block is refused
/// with OFPBRC_BAD_LEN, and xbr goes on.
#[test]
fn a_packet_out_of_a_jumbo_frame_is_delivered() -> Result<()> {
    let (a, b) = pods(MTU)?;
    let xbr = start_xdp_pair(&a, &b, "on", PLAIN_FLOWS)?;
    let dst = SocketAddrV4::new(b.ip(), 5100);
    let packet_out = |seq: u64, len: usize| {
        let hex: String = udp_frame(&a, dst, b.mac(), &testtool_payload(seq, len))
            .iter()
            .map(|x| format!("{x:02x}"))
            .collect();
        xbr.ofctl(&[
            "packet-out",
            "br0",
            &format!("in_port=controller,packet={hex},actions=output:2"),
        ])
    };
    let rx = UdpReceiver::start(Path::new(TOOL), b.ns(), dst, 3, RECV_TIMEOUT)?;
    for seq in 0..3 {
        let out = packet_out(seq, MTU as usize - 28)?;
        assert!(out.success(), "{}\n{}", out.stderr, xbr.log());
    }
    let received = rx.finish()?;
    assert_eq!(
        received,
        3,
        "jumbo packet-outs received\n{}",
        xbr.client_ok(&["stats", "br0"])?
    );
    let refused = packet_out(3, 16_129 - 42)?;
    assert!(
        !refused.success() && refused.stderr.contains("OFPBRC_BAD_LEN"),
        "{:?}: {}",
        refused.code(),
        refused.stderr.lines().next().unwrap_or("")
    );
    assert_eq!(ping_df(&a, &b, 2, PING_SIZE)?, 2, "still forwarding");
    Ok(())
}
