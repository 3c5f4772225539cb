//! The metrics endpoint: `GET /metrics` over HTTP/1.x on a TCP address.
//!
//! # Design
//!
//! A std `TcpListener` and a few threads rather than an HTTP crate: the
//! endpoint has one path, one method and closes every connection after
//! its reply (`Connection: close`), so all of HTTP it needs is reading
//! one request head; the crates that serve HTTP either start a thread
//! per connection without a bound (tiny_http) or bring an async runtime
//! (hyper), and neither bounds what a scraper can make xbr spend the way
//! this does:
//!
//! - The accepting thread hands connections to [`WORKERS`] threads
//!   through a queue of [`QUEUE`] places; a connection that finds the
//!   queue full is answered `503` at once and closed.
//! - A request head is at most [`MAX_HEAD`] bytes (else `431`), read
//!   within [`READ_TIMEOUT`] (else the connection is closed); a reply is
//!   written within [`WRITE_TIMEOUT`].
//! - Every outcome is counted (`xbr_metrics_requests_total`).

use crossbeam::channel::{bounded, Receiver, TrySendError};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use thiserror::Error;

/// Threads answering requests.
pub const WORKERS: usize = 2;
/// Connections waiting for a worker.
pub const QUEUE: usize = 8;
/// Largest request head read.
pub const MAX_HEAD: usize = 8 * 1024;
/// Bound on receiving a request head.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on sending a reply.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Error)]
pub enum MetricsError {
    #[error("metrics address `{0}`: expected IP:PORT (e.g. 127.0.0.1:9476 or [::1]:9476)")]
    BadAddress(String),
    #[error("cannot serve metrics on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot start the metrics threads: {0}")]
    Thread(std::io::Error),
}

/// Parses `--metrics`'s value: `IP:PORT` (`[IPv6]:PORT`).
pub fn parse_addr(s: &str) -> Result<SocketAddr, MetricsError> {
    s.parse()
        .map_err(|_| MetricsError::BadAddress(s.to_string()))
}

/// What the endpoint did, by outcome.
#[derive(Debug, Default)]
pub struct ServerCounters {
    ok: AtomicU64,
    refused_busy: AtomicU64,
    bad_request: AtomicU64,
    not_found: AtomicU64,
    timeout: AtomicU64,
}

impl ServerCounters {
    pub fn by_outcome(&self) -> [(&'static str, u64); 5] {
        [
            ("ok", self.ok.load(Relaxed)),
            ("refused_busy", self.refused_busy.load(Relaxed)),
            ("bad_request", self.bad_request.load(Relaxed)),
            ("not_found", self.not_found.load(Relaxed)),
            ("timeout", self.timeout.load(Relaxed)),
        ]
    }
}

/// A running endpoint.
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    /// A duplicate of the listening socket, shut down to wake `accept`.
    wake: OwnedFd,
    threads: Vec<JoinHandle<()>>,
}

fn respond(stream: &mut TcpStream, status: &str, content_type: &str, body: &[u8]) {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    if stream.write_all(head.as_bytes()).is_ok() {
        let _ = stream.write_all(body);
    }
}

/// Reads a request head (up to the blank line); `None` when the peer
/// was too slow or went away, `Err(())` when it is too long.
fn read_head(stream: &mut TcpStream) -> Option<Result<Vec<u8>, ()>> {
    let deadline = Instant::now() + READ_TIMEOUT;
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return None;
        }
        let n = stream.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        head.extend_from_slice(&buf[..n]);
        if head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n") {
            return Some(Ok(head));
        }
        if head.len() > MAX_HEAD {
            return Some(Err(()));
        }
    }
}

/// After a reply to a request not read to its end: stops sending and
/// reads (a bounded amount, for a bounded time) what the client still
/// sends, so that closing does not reset the connection before the
/// client has read the reply.
fn linger(stream: &mut TcpStream) {
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    let mut buf = [0u8; 4096];
    let mut left = 16 * MAX_HEAD;
    while left > 0 {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => left = left.saturating_sub(n),
        }
    }
}

fn serve(mut stream: TcpStream, counters: &ServerCounters) {
    let head = match read_head(&mut stream) {
        None => {
            counters.timeout.fetch_add(1, Relaxed);
            return;
        }
        Some(Err(())) => {
            counters.bad_request.fetch_add(1, Relaxed);
            let msg = format!("request head longer than {MAX_HEAD} bytes\n");
            respond(
                &mut stream,
                "431 Request Header Fields Too Large",
                "text/plain",
                msg.as_bytes(),
            );
            linger(&mut stream);
            return;
        }
        Some(Ok(h)) => h,
    };
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut words = line.split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    if method != "GET" {
        counters.bad_request.fetch_add(1, Relaxed);
        respond(
            &mut stream,
            "405 Method Not Allowed",
            "text/plain",
            b"only GET /metrics\n",
        );
        return;
    }
    if path != "/metrics" {
        counters.not_found.fetch_add(1, Relaxed);
        respond(
            &mut stream,
            "404 Not Found",
            "text/plain",
            b"only GET /metrics\n",
        );
        return;
    }
    // Counted before rendering, so a scrape sees itself.
    counters.ok.fetch_add(1, Relaxed);
    match super::collect::render(&counters.by_outcome()) {
        Ok(text) => respond(
            &mut stream,
            "200 OK",
            prometheus::TEXT_FORMAT,
            text.as_bytes(),
        ),
        Err(e) => {
            tracing::warn!("metrics: cannot encode: {e}");
            let msg = format!("cannot encode the metrics: {e}\n");
            respond(
                &mut stream,
                "500 Internal Server Error",
                "text/plain",
                msg.as_bytes(),
            );
        }
    }
}

fn work(queue: Receiver<TcpStream>, counters: Arc<ServerCounters>) {
    for stream in queue {
        serve(stream, &counters);
    }
}

impl MetricsServer {
    /// Listens on `addr` and serves until [`MetricsServer::stop`].
    pub fn start(addr: SocketAddr) -> Result<MetricsServer, MetricsError> {
        let listener =
            TcpListener::bind(addr).map_err(|source| MetricsError::Bind { addr, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| MetricsError::Bind { addr, source })?;
        let wake = OwnedFd::from(listener.try_clone().map_err(MetricsError::Thread)?);
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(ServerCounters::default());
        let (tx, rx) = bounded::<TcpStream>(QUEUE);
        let mut threads = Vec::new();
        for i in 0..WORKERS {
            let (rx, counters) = (rx.clone(), counters.clone());
            let t = std::thread::Builder::new()
                .name(format!("xbr-metrics-{i}"))
                .spawn(move || work(rx, counters))
                .map_err(MetricsError::Thread)?;
            threads.push(t);
        }
        let accept = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("xbr-metrics".into())
                .spawn(move || {
                    for conn in listener.incoming() {
                        if stop.load(Relaxed) {
                            return;
                        }
                        let stream = match conn {
                            Ok(s) => s,
                            Err(e) => {
                                tracing::warn!("metrics accept: {e}");
                                std::thread::sleep(Duration::from_millis(50));
                                continue;
                            }
                        };
                        if let Err(TrySendError::Full(mut s)) = tx.try_send(stream) {
                            counters.refused_busy.fetch_add(1, Relaxed);
                            respond(&mut s, "503 Service Unavailable", "text/plain", b"busy\n");
                        }
                    }
                    // Dropping `tx` ends the workers.
                })
                .map_err(MetricsError::Thread)?
        };
        threads.push(accept);
        tracing::info!("metrics served on http://{addr}/metrics");
        Ok(MetricsServer {
            addr,
            stop,
            wake,
            threads,
        })
    }

    /// The address served (with the port the kernel chose for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, lets the requests being served finish, and joins.
    pub fn stop(self) {
        self.stop.store(true, Relaxed);
        let how = nix::sys::socket::Shutdown::Both;
        if let Err(e) = nix::sys::socket::shutdown(self.wake.as_raw_fd(), how) {
            tracing::warn!("cannot shut the metrics socket down: {e}");
        }
        for t in self.threads {
            if t.join().is_err() {
                tracing::error!("a metrics thread panicked");
            }
        }
    }
}
