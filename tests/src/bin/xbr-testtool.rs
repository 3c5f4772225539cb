//! `xbr-testtool`: bounded UDP traffic for xbr's end-to-end tests, run
//! inside a namespace with `ip netns exec`.
//!
//! Each test packet carries a magic and a sequence number, so the receiver
//! counts distinct test packets and ignores duplicates and strays. Both
//! directions are bounded: the sender by `--count` (and paced by `--rate`
//! so a copy-mode AF_XDP path is not overrun), the receiver by `--count`
//! and `--timeout-ms`.
//!
//! Exit codes: 0 success (receiver: all packets arrived), 1 receiver: some
//! did not arrive in time, 2 usage or system error.

use clap::{Parser, Subcommand};
use nix::sys::socket::{setsockopt, sockopt};
use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

const MAGIC: &[u8; 8] = b"XBRTTOOL";
const HEADER_LEN: usize = MAGIC.len() + 8;

/// Byte `i` of every test packet after the header: not zero, so a switch
/// that got a checksum wrong over some bytes (which then must be nonzero
/// to count) loses the packet, and the receiver checks it arrived intact.
fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(31) + 7) as u8
}
/// Largest UDP payload that fits a 9216-byte (jumbo) MTU over IPv4.
const MAX_SIZE: usize = 9188;
/// The receiver keeps one flag per expected packet; this bounds its memory.
const MAX_COUNT: u64 = 10_000_000;
/// Most sending sockets `udp-send --sources` opens.
const MAX_SOURCES: usize = 1024;
/// Receive buffer asked for, so a receiver descheduled for a moment does
/// not drop what the switch delivered.
const RCVBUF: usize = 8 << 20;
/// How often a send that failed for lack of buffer space is retried.
const SEND_RETRIES: u32 = 10_000;

#[derive(Parser)]
#[command(
    name = "xbr-testtool",
    about = "Bounded UDP traffic for xbr's end-to-end tests"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Send COUNT numbered packets to DST; prints how many were sent.
    UdpSend {
        #[arg(long)]
        dst: SocketAddr,
        #[arg(long)]
        count: u64,
        /// Maximum packets per second (default: as fast as possible).
        #[arg(long)]
        rate: Option<u64>,
        /// UDP payload size in bytes (16-9188; above the MTU's room the
        /// datagrams are IP fragments).
        #[arg(long, default_value_t = 64)]
        size: usize,
        /// Sending sockets (distinct source ports), used in turn: that
        /// many flows, which a multi-queue device spreads over its queues.
        #[arg(long, default_value_t = 1)]
        sources: usize,
        /// Source port (default: any free one), so that two runs send
        /// the same 5-tuple.
        #[arg(long, default_value_t = 0)]
        src_port: u16,
    },
    /// Receive until COUNT distinct packets arrived or the timeout passed;
    /// prints how many arrived.
    UdpRecv {
        #[arg(long)]
        bind: SocketAddr,
        #[arg(long)]
        count: u64,
        #[arg(long)]
        timeout_ms: u64,
        /// Created once the socket is bound, so a test knows when to send.
        #[arg(long)]
        ready_file: Option<PathBuf>,
    },
    /// Send COUNT crafted hostile frames (`bench::hostile`) out of IFACE
    /// with a raw socket, for at most MAX_MS; prints how many were sent.
    Hostile {
        #[arg(long, default_value = "eth0")]
        iface: String,
        #[arg(long)]
        count: u64,
        #[arg(long)]
        max_ms: u64,
        /// Frames per second at most (0: as fast as possible).
        #[arg(long, default_value_t = 0)]
        rate: u64,
        #[arg(long)]
        own_mac: String,
        #[arg(long)]
        own_ip: std::net::Ipv4Addr,
        #[arg(long)]
        victim_mac: String,
        #[arg(long)]
        victim_ip: std::net::Ipv4Addr,
        #[arg(long)]
        gateway_mac: String,
        #[arg(long)]
        gateway_ip: std::net::Ipv4Addr,
    },
}

#[derive(Debug, thiserror::Error)]
enum ToolError {
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Hostile(#[from] bench::hostile::HostileError),
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
}

fn io_err(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> ToolError {
    move |source| ToolError::Io {
        context: context.into(),
        source,
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::UdpSend {
            dst,
            count,
            rate,
            size,
            sources,
            src_port,
        } => udp_send(dst, count, rate, size, sources, src_port).map(|sent| {
            println!("{sent}");
            true
        }),
        Cmd::UdpRecv {
            bind,
            count,
            timeout_ms,
            ready_file,
        } => udp_recv(bind, count, Duration::from_millis(timeout_ms), ready_file),
        Cmd::Hostile {
            iface,
            count,
            max_ms,
            rate,
            own_mac,
            own_ip,
            victim_mac,
            victim_ip,
            gateway_mac,
            gateway_ip,
        } => {
            let mac = |s: &str| {
                bench::hostile::parse_mac(s).ok_or_else(|| ToolError::Usage(format!("bad MAC {s}")))
            };
            (|| {
                let t = bench::hostile::Target {
                    own_mac: mac(&own_mac)?,
                    own_ip,
                    victim_mac: mac(&victim_mac)?,
                    victim_ip,
                    gateway_mac: mac(&gateway_mac)?,
                    gateway_ip,
                };
                let sent =
                    bench::hostile::send(&iface, &t, count, rate, Duration::from_millis(max_ms))?;
                println!("{sent}");
                Ok(true)
            })()
        }
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("xbr-testtool: {e}");
            ExitCode::from(2)
        }
    }
}

/// When packet `seq` is due at `rate` packets per second.
fn due(start: Instant, seq: u64, rate: u64) -> Instant {
    let nanos = u128::from(seq) * 1_000_000_000 / u128::from(rate.max(1));
    start + Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

fn udp_send(
    dst: SocketAddr,
    count: u64,
    rate: Option<u64>,
    size: usize,
    sources: usize,
    src_port: u16,
) -> Result<u64, ToolError> {
    if !(HEADER_LEN..=MAX_SIZE).contains(&size) {
        return Err(ToolError::Usage(format!(
            "--size {size} is outside {HEADER_LEN}-{MAX_SIZE}"
        )));
    }
    if rate == Some(0) {
        return Err(ToolError::Usage("--rate must be at least 1".into()));
    }
    if !(1..=MAX_SOURCES).contains(&sources) {
        return Err(ToolError::Usage(format!(
            "--sources {sources} is outside 1-{MAX_SOURCES}"
        )));
    }
    let local: SocketAddr = if dst.is_ipv4() {
        "0.0.0.0:0".parse()
    } else {
        "[::]:0".parse()
    }
    .map_err(|_| ToolError::Usage("bad wildcard address".into()))?;
    // Consecutive source ports from `src_port` (0: any free ones).
    let socks = (0..sources)
        .map(|i| {
            let mut at = local;
            if src_port != 0 {
                at.set_port(src_port.wrapping_add(i as u16));
            }
            UdpSocket::bind(at).map_err(io_err(format!("binding a sending socket to {at}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut buf: Vec<u8> = (0..size).map(pattern).collect();
    if let Some(m) = buf.get_mut(..MAGIC.len()) {
        m.copy_from_slice(MAGIC);
    }
    let start = Instant::now();
    for seq in 0..count {
        if let Some(rate) = rate {
            let when = due(start, seq, rate);
            let now = Instant::now();
            if when > now {
                std::thread::sleep(when - now);
            }
        }
        if let Some(s) = buf.get_mut(MAGIC.len()..HEADER_LEN) {
            s.copy_from_slice(&seq.to_be_bytes());
        }
        send_one(&socks[(seq % sources as u64) as usize], &buf, dst)?;
    }
    Ok(count)
}

/// Sends one datagram, waiting out transient lack of buffer space (the
/// local queue toward the veth can fill at high rates).
fn send_one(sock: &UdpSocket, buf: &[u8], dst: SocketAddr) -> Result<(), ToolError> {
    let mut retries = 0;
    loop {
        match sock.send_to(buf, dst) {
            Ok(_) => return Ok(()),
            Err(e)
                if (e.kind() == ErrorKind::WouldBlock
                    || e.kind() == ErrorKind::Interrupted
                    || e.raw_os_error() == Some(nix::libc::ENOBUFS))
                    && retries < SEND_RETRIES =>
            {
                retries += 1;
                std::thread::sleep(Duration::from_micros(100));
            }
            Err(e) => return Err(io_err(format!("sending to {dst}"))(e)),
        }
    }
}

fn udp_recv(
    bind: SocketAddr,
    count: u64,
    timeout: Duration,
    ready_file: Option<PathBuf>,
) -> Result<bool, ToolError> {
    if count > MAX_COUNT {
        return Err(ToolError::Usage(format!(
            "--count {count} exceeds {MAX_COUNT}"
        )));
    }
    let sock = UdpSocket::bind(bind).map_err(io_err(format!("binding {bind}")))?;
    // SO_RCVBUFFORCE ignores rmem_max but needs CAP_NET_ADMIN; without it,
    // SO_RCVBUF gives what rmem_max allows. Either way receiving works, a
    // smaller buffer only makes drops under load more likely.
    if setsockopt(&sock, sockopt::RcvBufForce, &RCVBUF).is_err() {
        let _ = setsockopt(&sock, sockopt::RcvBuf, &RCVBUF);
    }
    if let Some(path) = &ready_file {
        std::fs::File::create(path).map_err(io_err(format!("creating {}", path.display())))?;
    }
    let start = Instant::now();
    let deadline = start + timeout;
    // `count` <= MAX_COUNT, so this fits in memory and in usize.
    let mut seen = vec![false; usize::try_from(count).unwrap_or(0)];
    let (mut received, mut duplicates, mut foreign) = (0u64, 0u64, 0u64);
    let mut buf = vec![0u8; MAX_SIZE + 1];
    while received < count {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        sock.set_read_timeout(Some(deadline - now))
            .map_err(io_err("setting the receive timeout"))?;
        let n = match sock.recv_from(&mut buf) {
            Ok((n, _)) => n,
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::TimedOut => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(io_err("receiving")(e)),
        };
        let seq = buf
            .get(..n)
            .filter(|p| p.len() >= HEADER_LEN && p.starts_with(MAGIC))
            .filter(|p| (HEADER_LEN..p.len()).all(|i| p[i] == pattern(i)))
            .and_then(|p| p.get(MAGIC.len()..HEADER_LEN))
            .and_then(|s| <[u8; 8]>::try_from(s).ok())
            .map(u64::from_be_bytes)
            .and_then(|seq| usize::try_from(seq).ok());
        match seq.and_then(|s| seen.get_mut(s)) {
            Some(flag) if *flag => duplicates += 1,
            Some(flag) => {
                *flag = true;
                received += 1;
            }
            // Strays, and test packets whose payload changed.
            None => foreign += 1,
        }
    }
    println!("{received}");
    eprintln!(
        "udp-recv: {received} of {count} in {} ms ({duplicates} duplicates, {foreign} foreign)",
        start.elapsed().as_millis()
    );
    Ok(received == count)
}
