//! One bounded TCP transfer between two pods with `python3`: the
//! receiver's stack verifies every segment's checksum (a wrong one is a
//! loss, retransmitted through the same path until the transfer times
//! out) and the server checks the bytes themselves.

use crate::cmd::Background;
use crate::netns::{unique_tag, Netns, Pod, NAME_PREFIX};
use crate::{require_tool, Result};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

/// Bound on the server getting its socket listening.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound on each side's socket operations, and on the client.
const IO_TIMEOUT_S: u64 = 20;

/// One TCP connection from `a` (source port `sport`) to `b`:`dport`: `a`
/// sends `bytes` bytes of `x`, `b` answers with the count it read (after
/// `corrupt ` if any byte was not an `x`) and closes; `a` closes by FIN,
/// or with `reset` by RST (SO_LINGER 0). Returns `b`'s answer, which is
/// `bytes` as a decimal when everything arrived intact.
pub fn tcp_transfer(
    a: &Pod,
    b: &Pod,
    sport: u16,
    dport: u16,
    bytes: usize,
    reset: bool,
) -> Result<String> {
    tcp_transfer_via(a, b, b.ip(), sport, dport, bytes, reset)
}

/// [`tcp_transfer`] with `a` connecting to `via` (an address the switch
/// translates to `b`'s, e.g. a Service VIP) instead of `b`'s own.
pub fn tcp_transfer_via(
    a: &Pod,
    b: &Pod,
    via: Ipv4Addr,
    sport: u16,
    dport: u16,
    bytes: usize,
    reset: bool,
) -> Result<String> {
    tcp_transfer_ns(
        (a.ns(), a.ip()),
        (b.ns(), b.ip()),
        via,
        (sport, dport),
        bytes,
        reset,
    )
}

/// [`tcp_transfer_via`] between any two namespaces: the client binds
/// `from.1` in `from.0`, the server listens on `to.1` in `to.0`, the
/// client connects to `via`.
pub fn tcp_transfer_ns(
    from: (&Netns, Ipv4Addr),
    to: (&Netns, Ipv4Addr),
    via: Ipv4Addr,
    (sport, dport): (u16, u16),
    bytes: usize,
    reset: bool,
) -> Result<String> {
    require_tool("python3")?;
    let ready = std::env::temp_dir().join(format!("{NAME_PREFIX}-ready-{}", unique_tag()));
    let server = format!(
        "import socket\n\
         s = socket.socket()\n\
         s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
         s.bind(('{ip}', {dport}))\n\
         s.listen(1)\n\
         open('{ready}', 'w').close()\n\
         s.settimeout({IO_TIMEOUT_S})\n\
         c, _ = s.accept()\n\
         c.settimeout({IO_TIMEOUT_S})\n\
         n = 0\n\
         bad = False\n\
         while n < {bytes}:\n    \
             d = c.recv(65536)\n    \
             if not d: break\n    \
             n += len(d)\n    \
             bad = bad or d.count(b'x') != len(d)\n\
         c.sendall(b'%s%d\\n' % (b'corrupt ' if bad else b'', n))\n\
         c.recv(1)\n\
         c.close()\n",
        ip = to.1,
        ready = ready.display()
    );
    let mut srv = Background::spawn(&mut to.0.command("python3", &["-c", &server]))?;
    let deadline = Instant::now() + READY_TIMEOUT;
    while !ready.exists() {
        assert!(Instant::now() < deadline, "TCP server never listened");
        assert!(srv.try_status().is_none(), "TCP server died");
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = std::fs::remove_file(&ready);
    let linger = if reset {
        "s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))\n"
    } else {
        ""
    };
    let client = format!(
        "import socket, struct\n\
         s = socket.socket()\n\
         s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
         s.bind(('{a}', {sport}))\n\
         s.settimeout({IO_TIMEOUT_S})\n\
         s.connect(('{b}', {dport}))\n\
         s.sendall(b'x' * {bytes})\n\
         print(s.makefile().readline().strip())\n\
         {linger}\
         s.close()\n",
        a = from.1,
        b = via,
    );
    let out = from
        .0
        .exec(
            &["python3", "-c", &client],
            Duration::from_secs(IO_TIMEOUT_S + 10),
        )?
        .ok()?;
    let _ = srv.wait(Duration::from_secs(10));
    Ok(out.stdout.trim().to_string())
}

/// A one-connection TCP server in `ns` on `addr`:`port` (IPv4 or IPv6)
/// that greets its client with `hello from ADDR to PEER` (the addresses
/// as the server sees them: a NAT between them shows); returns once it
/// listens. The server gives up after 15 s without a client.
pub fn greeting_server(ns: &Netns, addr: &str, port: u16) -> Result<Background> {
    require_tool("python3")?;
    let ready = std::env::temp_dir().join(format!("{NAME_PREFIX}-greeter-{}", unique_tag()));
    let family = if addr.contains(':') {
        "AF_INET6"
    } else {
        "AF_INET"
    };
    let script = format!(
        "import socket\n\
         s = socket.socket(socket.{family})\n\
         s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
         s.bind(('{addr}', {port}))\n\
         s.listen(4)\n\
         open('{ready}', 'w').close()\n\
         s.settimeout(15)\n\
         c, peer = s.accept()\n\
         c.sendall(('hello from {addr} to %s\\n' % peer[0]).encode())\n\
         c.recv(100)\n\
         c.close()\n",
        ready = ready.display()
    );
    let server = Background::spawn(&mut ns.command("python3", &["-c", &script]))?;
    let deadline = Instant::now() + READY_TIMEOUT;
    while !ready.exists() {
        if Instant::now() > deadline {
            let _ = std::fs::remove_file(&ready);
            return Err(crate::HarnessError::Unexpected(format!(
                "the greeting server on {addr}:{port} never listened"
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = std::fs::remove_file(&ready);
    Ok(server)
}

/// Connects from `ns` to `addr`:`port` and reads the greeting line;
/// `None` if no connection was made within 3 s.
pub fn greeting(ns: &Netns, addr: &str, port: u16) -> Result<Option<String>> {
    let script = format!(
        "import socket\n\
         s = socket.create_connection(('{addr}', {port}), timeout=3)\n\
         print(s.recv(100).decode().strip())\n\
         s.sendall(b'bye')\n"
    );
    let out = ns.exec(
        &["python3", "-c", &script],
        Duration::from_secs(IO_TIMEOUT_S),
    )?;
    Ok(out.success().then(|| out.stdout.trim().to_string()))
}
