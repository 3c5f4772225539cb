//! The `xbr capture` command: asks the bridge for a capture of a port
//! (`dataplane::capture` is the bridge's side), then prints one line per
//! frame or writes them to a pcap file (`pcap-file`), until COUNT frames
//! or SIGINT/SIGTERM, and stops the capture on the way out.

use crate::ctl::{request, socket_path};
use pcap_file::pcap::{PcapPacket, PcapWriter};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Why a running capture stopped before its count or a signal.
#[derive(Debug, thiserror::Error)]
enum CaptureError {
    #[error("receiving: {0}")]
    Receive(std::io::Error),
    #[error("writing the output: {0}")]
    Write(std::io::Error),
    #[error("writing the pcap file: {0}")]
    Pcap(#[from] pcap_file::PcapError),
}

/// Exit code for bad arguments, a port or bridge that is not there.
const EXIT_USAGE: u8 = 2;
/// How often the receive loop looks at the signal flag.
const TICK: Duration = Duration::from_millis(200);
/// The largest frame a copy can be (jumbo frames fit).
const MAX_FRAME: usize = 65_536;
/// Receive buffer asked for (the bridge's sink's send buffer is what
/// bounds the copies waiting, `dataplane::mirror::CAPTURE_SNDBUF`).
const RCVBUF: usize = 8 << 20;

#[derive(clap::Args)]
pub struct CaptureArgs {
    /// Directory of the running bridge's sockets.
    #[arg(long, default_value = "/var/run/openvswitch")]
    rundir: PathBuf,
    /// Bridge name.
    #[arg(long, default_value = "br0")]
    bridge: String,
    /// The port whose frames (received and sent) are captured.
    port: String,
    /// Write the frames to this pcap file (Ethernet) instead of printing
    /// one line per frame.
    #[arg(short = 'w', value_name = "FILE")]
    write: Option<PathBuf>,
    /// Stop after this many frames (default: until SIGINT or SIGTERM).
    #[arg(short = 'c', value_name = "COUNT",
          value_parser = clap::value_parser!(u64).range(1..))]
    count: Option<u64>,
}

enum Out {
    Print(std::io::Stdout),
    Pcap(PcapWriter<BufWriter<File>>),
}

pub fn run(args: CaptureArgs) -> ExitCode {
    let fail = |msg: String, code: u8| {
        eprintln!("xbr capture: {msg}");
        ExitCode::from(code)
    };
    let mut out = match &args.write {
        None => Out::Print(std::io::stdout()),
        Some(path) => match File::create(path)
            .map_err(|e| e.to_string())
            .and_then(|f| PcapWriter::new(BufWriter::new(f)).map_err(|e| e.to_string()))
        {
            Ok(w) => Out::Pcap(w),
            Err(e) => return fail(format!("{}: {e}", path.display()), EXIT_USAGE),
        },
    };
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        if let Err(e) = signal_hook::flag::register(sig, stop.clone()) {
            return fail(format!("signal handler: {e}"), 1);
        }
    }
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let name = format!("xbr-capture-{}-{}-{nanos}", args.bridge, std::process::id());
    let sock = match bind(&name) {
        Ok(s) => s,
        Err(e) => return fail(format!("socket @{name}: {e}"), 1),
    };
    let ctl = socket_path(&args.rundir, &args.bridge);
    let refused = |msg: String| {
        // Nothing was captured: no empty file left behind.
        if let Some(path) = &args.write {
            let _ = std::fs::remove_file(path);
        }
        fail(msg, EXIT_USAGE)
    };
    let mirror = match request(&ctl, &format!("capture start {} @{name}", args.port)) {
        Ok(r) if r.ok => r.text.trim().to_string(),
        Ok(r) => return refused(r.text.trim().to_string()),
        Err(e) => return refused(e.to_string()),
    };
    // Connected back to the bridge's sink, the socket's queue is bounded
    // by the sink's send buffer, not by net.unix.max_dgram_qlen (see
    // `dataplane::mirror`), and takes the bridge's copies alone.
    let sender = dataplane::mirror::capture_sender_name(&name);
    if let Err(e) = SocketAddr::from_abstract_name(&sender).and_then(|a| sock.connect_addr(&a)) {
        let _ = request(&ctl, &format!("capture stop {mirror}"));
        if let Some(path) = &args.write {
            let _ = std::fs::remove_file(path);
        }
        return fail(format!("connecting to the bridge's @{sender}: {e}"), 1);
    }
    eprintln!(
        "xbr capture: capturing {} on {} (both directions)",
        args.port, args.bridge
    );
    let result = receive(&sock, &mut out, args.count, &stop);
    let summary = request(&ctl, &format!("capture stop {mirror}"));
    let flushed = match out {
        Out::Print(mut s) => s.flush(),
        Out::Pcap(w) => w.into_writer().flush(),
    };
    let captured = match (result, flushed.map_err(CaptureError::Write)) {
        (Ok(n), Ok(())) => n,
        (Err(e), _) | (_, Err(e)) => return fail(e.to_string(), 1),
    };
    let dropped = match summary {
        Ok(r) if r.ok => r
            .text
            .split_whitespace()
            .skip_while(|w| *w != "dropped")
            .nth(1)
            .unwrap_or("0")
            .to_string(),
        _ => "?".to_string(),
    };
    eprintln!("xbr capture: {captured} frames captured, {dropped} dropped by the bridge");
    ExitCode::SUCCESS
}

fn bind(name: &str) -> std::io::Result<UnixDatagram> {
    let s = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name)?)?;
    nix::sys::socket::setsockopt(&s, nix::sys::socket::sockopt::RcvBuf, &RCVBUF)?;
    s.set_read_timeout(Some(TICK))?;
    Ok(s)
}

/// Receives frames until `count` or `stop`; returns how many.
fn receive(
    sock: &UnixDatagram,
    out: &mut Out,
    count: Option<u64>,
    stop: &AtomicBool,
) -> Result<u64, CaptureError> {
    let mut buf = vec![0u8; MAX_FRAME];
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) && count.is_none_or(|c| n < c) {
        let len = match sock.recv(&mut buf) {
            Ok(len) => len,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            Err(e) => return Err(CaptureError::Receive(e)),
        };
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let frame = &buf[..len];
        match out {
            Out::Print(s) => writeln!(s, "{}", line(ts, frame)).map_err(CaptureError::Write)?,
            Out::Pcap(w) => {
                w.write_packet(&PcapPacket::new(ts, len as u32, frame))?;
            }
        }
        n += 1;
    }
    Ok(n)
}

/// One frame as a line: time, MACs, and the IPv4 addresses and protocol
/// or the EtherType.
pub fn line(ts: Duration, f: &[u8]) -> String {
    let secs = ts.as_secs() % 86_400;
    let mut s = format!(
        "{:02}:{:02}:{:02}.{:06} ",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        ts.subsec_micros()
    );
    if f.len() < 14 {
        s.push_str(&format!("truncated frame, length {}", f.len()));
        return s;
    }
    let mac = |m: &[u8]| {
        m.iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":")
    };
    s.push_str(&format!("{} > {}", mac(&f[6..12]), mac(&f[0..6])));
    let ethertype = u16::from_be_bytes([f[12], f[13]]);
    match (ethertype, f.get(14..34)) {
        (0x0800, Some(ip)) => {
            let a = |o: usize| std::net::Ipv4Addr::new(ip[o], ip[o + 1], ip[o + 2], ip[o + 3]);
            let proto = match ip[9] {
                1 => "ICMP".to_string(),
                6 => "TCP".to_string(),
                17 => "UDP".to_string(),
                p => format!("proto {p}"),
            };
            s.push_str(&format!(", IPv4 {} > {}: {proto}", a(12), a(16)));
        }
        (0x0806, _) => s.push_str(", ARP"),
        (0x86dd, _) => s.push_str(", IPv6"),
        (t, _) => s.push_str(&format!(", ethertype 0x{t:04x}")),
    }
    s.push_str(&format!(", length {}", f.len()));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_line_names_its_addresses() {
        let mut f = vec![0u8; 34];
        f[..6].copy_from_slice(&[0x0a, 0x58, 0x0a, 0x80, 0, 3]);
        f[6..12].copy_from_slice(&[0x0a, 0x58, 0x0a, 0x80, 0, 2]);
        f[12..14].copy_from_slice(&[8, 0]);
        f[23] = 1;
        f[26..30].copy_from_slice(&[10, 128, 0, 2]);
        f[30..34].copy_from_slice(&[10, 128, 0, 3]);
        let l = line(Duration::from_micros(3_723_000_001), &f);
        assert_eq!(
            l,
            "01:02:03.000001 0a:58:0a:80:00:02 > 0a:58:0a:80:00:03, \
             IPv4 10.128.0.2 > 10.128.0.3: ICMP, length 34"
        );
    }
}
