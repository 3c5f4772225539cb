//! Bounded UDP traffic between namespaces with `xbr-testtool` (this
//! crate's binary; integration tests get its path from
//! `env!("CARGO_BIN_EXE_xbr-testtool")`).

use crate::cmd::{Background, CmdOutput};
use crate::netns::{unique_tag, InNetns, NAME_PREFIX};
use crate::{HarnessError, Result};
use std::net::SocketAddrV4;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Bound on a receiver getting its socket bound.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Slack on top of a tool's own timeout before the harness kills it.
const SLACK: Duration = Duration::from_secs(5);

fn parse_count(out: &CmdOutput) -> Result<u64> {
    out.stdout
        .lines()
        .next()
        .and_then(|l| l.trim().parse().ok())
        .ok_or_else(|| {
            HarnessError::Unexpected(format!(
                "`{}` {} without printing a count\n--- stdout:\n{}\n--- stderr:\n{}",
                out.command,
                out.describe_status(),
                out.stdout,
                out.stderr
            ))
        })
}

/// A running `xbr-testtool udp-recv` inside a namespace.
pub struct UdpReceiver {
    proc: Background,
    ready: PathBuf,
    timeout: Duration,
}

impl UdpReceiver {
    /// Starts a receiver for `count` packets on `bind`, giving up after
    /// `timeout`, and returns once its socket is bound.
    pub fn start(
        tool: &Path,
        ns: &(impl InNetns + ?Sized),
        bind: SocketAddrV4,
        count: u64,
        timeout: Duration,
    ) -> Result<Self> {
        let ready = std::env::temp_dir().join(format!("{NAME_PREFIX}-ready-{}", unique_tag()));
        let tool_s = tool.to_string_lossy();
        let bind_s = bind.to_string();
        let count_s = count.to_string();
        let timeout_s = timeout.as_millis().to_string();
        let ready_s = ready.to_string_lossy();
        let mut cmd = ns.command_in(
            &tool_s,
            &[
                "udp-recv",
                "--bind",
                &bind_s,
                "--count",
                &count_s,
                "--timeout-ms",
                &timeout_s,
                "--ready-file",
                &ready_s,
            ],
        );
        let mut rx = UdpReceiver {
            proc: Background::spawn(&mut cmd)?,
            ready,
            timeout,
        };
        let deadline = Instant::now() + READY_TIMEOUT;
        while !rx.ready.exists() {
            if rx.proc.try_status().is_some() || Instant::now() >= deadline {
                let out = rx.proc.wait(Duration::ZERO);
                return Err(HarnessError::Unexpected(format!(
                    "udp receiver never became ready: {}",
                    out.into_error()
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(rx)
    }

    /// Waits for the receiver to finish; returns how many distinct test
    /// packets arrived.
    pub fn finish(self) -> Result<u64> {
        let UdpReceiver {
            proc,
            ready,
            timeout,
        } = self;
        let out = proc.wait(timeout + SLACK);
        // A leftover file is harmless (unique name); removal is best effort.
        let _ = std::fs::remove_file(&ready);
        // Exit 1 only means "not all arrived"; anything else is a failure.
        match out.code() {
            Some(0) | Some(1) => parse_count(&out),
            _ => Err(out.into_error()),
        }
    }
}

/// Sends `count` test packets to `dst` from inside `ns`, at most `rate`
/// packets per second; returns how many were sent.
pub fn udp_send(
    tool: &Path,
    ns: &(impl InNetns + ?Sized),
    dst: SocketAddrV4,
    count: u64,
    rate: u64,
) -> Result<u64> {
    udp_send_flows(tool, ns, dst, count, rate, 1, 0)
}

/// [`udp_send`] from source port `src_port` (0: any free one), so that
/// two calls send the same 5-tuple.
pub fn udp_send_from(
    tool: &Path,
    ns: &(impl InNetns + ?Sized),
    src_port: u16,
    dst: SocketAddrV4,
    count: u64,
    rate: u64,
) -> Result<u64> {
    send(tool, ns, dst, count, rate, 1, src_port, DEFAULT_SIZE)
}

/// [`udp_send_from`] with `size` bytes of UDP payload (16-1472).
pub fn udp_send_sized(
    tool: &Path,
    ns: &(impl InNetns + ?Sized),
    src_port: u16,
    dst: SocketAddrV4,
    count: u64,
    rate: u64,
    size: usize,
) -> Result<u64> {
    send(tool, ns, dst, count, rate, 1, src_port, size)
}

/// [`udp_send`] from `sources` sockets in turn (that many flows, by
/// source port): consecutive source ports from `src_port`, or any free
/// ones with 0.
pub fn udp_send_flows(
    tool: &Path,
    ns: &(impl InNetns + ?Sized),
    dst: SocketAddrV4,
    count: u64,
    rate: u64,
    sources: usize,
    src_port: u16,
) -> Result<u64> {
    send(tool, ns, dst, count, rate, sources, src_port, DEFAULT_SIZE)
}

/// The tool's default UDP payload size.
const DEFAULT_SIZE: usize = 64;

#[allow(clippy::too_many_arguments)]
fn send(
    tool: &Path,
    ns: &(impl InNetns + ?Sized),
    dst: SocketAddrV4,
    count: u64,
    rate: u64,
    sources: usize,
    src_port: u16,
    size: usize,
) -> Result<u64> {
    let size_s = size.to_string();
    let dst_s = dst.to_string();
    let count_s = count.to_string();
    let rate_s = rate.to_string();
    let sources_s = sources.to_string();
    let src_s = src_port.to_string();
    let argv = [
        &*tool.to_string_lossy(),
        "udp-send",
        "--dst",
        &dst_s,
        "--count",
        &count_s,
        "--rate",
        &rate_s,
        "--sources",
        &sources_s,
        "--src-port",
        &src_s,
        "--size",
        &size_s,
    ];
    // At `rate`, sending takes count/rate seconds; allow as much again.
    let secs = count.saturating_mul(2) / rate.max(1);
    let out = ns.exec_in(&argv, Duration::from_secs(secs) + SLACK)?.ok()?;
    parse_count(&out)
}
