//! `afxdp-l2fwd`: the smallest forwarder over xbr's own AF_XDP ports.
//! Every frame received on one port is sent out of the other, with no
//! parsing and no lookup; the frames never leave the shared UMEM. It is
//! the ceiling of the AF_XDP path on a machine: what the packet thread
//! could do if the pipeline cost nothing, measured in the same run as xbr
//! (`xbr-bench --systems afxdp-l2fwd,...`).
//!
//! ```text
//! afxdp-l2fwd --port IFNAME --port IFNAME [--cpu N]
//! ```
//!
//! Runs until SIGINT or SIGTERM, then prints the frames it moved each way
//! and detaches its XDP programs.

use clap::Parser;
use dataplane::config::PortSpec;
use dataplane::engine::{Desc, Frames, PortIo};
use dataplane::ports::{open_ports, Port, UmemFrames};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::os::fd::BorrowedFd;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Frames moved per receive call, as the engine's batch.
const BATCH: usize = 64;
/// Empty rounds before sleeping in poll(2), and how long.
const IDLE_ROUNDS: u32 = 64;
const POLL_MS: u16 = 10;

#[derive(Parser)]
#[command(about = "Forward every frame between two interfaces over AF_XDP, no lookup")]
struct Args {
    /// An interface to serve (exactly two).
    #[arg(long = "port", required = true, num_args = 1)]
    ports: Vec<String>,
    /// Pin the forwarding thread to this CPU.
    #[arg(long)]
    cpu: Option<usize>,
}

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    if args.ports.len() != 2 {
        eprintln!(
            "afxdp-l2fwd: exactly two --port are needed, got {}",
            args.ports.len()
        );
        return ExitCode::from(2);
    }
    let mut specs = Vec::new();
    for (i, name) in args.ports.iter().enumerate() {
        match format!("{name}={}", i + 1).parse::<PortSpec>() {
            Ok(s) => specs.push(s),
            Err(e) => {
                eprintln!("afxdp-l2fwd: {e}");
                return ExitCode::from(2);
            }
        }
    }
    if let Some(cpu) = args.cpu {
        let mut set = nix::sched::CpuSet::new();
        if set.set(cpu).is_err()
            || nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).is_err()
        {
            eprintln!("afxdp-l2fwd: cannot pin to CPU {cpu}");
            return ExitCode::from(2);
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        if let Err(e) = signal_hook::flag::register(sig, stop.clone()) {
            eprintln!("afxdp-l2fwd: signal handler: {e}");
            return ExitCode::FAILURE;
        }
    }
    let opened = match open_ports(&specs, 0, 1, None) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("afxdp-l2fwd: {e}");
            return ExitCode::from(if e.is_config_error() { 2 } else { 1 });
        }
    };
    let mut frames = opened.frames;
    let mut ports: Vec<Port> = opened.ports.into_iter().map(|(_, p)| p).collect();
    eprintln!(
        "afxdp-l2fwd: forwarding {} <-> {}",
        args.ports[0], args.ports[1]
    );
    let moved = forward(&mut frames, &mut ports, &stop);
    println!("moved {} frames 1->2, {} frames 2->1", moved[0], moved[1]);
    for p in ports {
        p.close(&mut frames);
    }
    ExitCode::SUCCESS
}

/// The loop: receive a batch on each port, send it on the other, free
/// what the other would not take.
fn forward(frames: &mut UmemFrames, ports: &mut [Port], stop: &AtomicBool) -> [u64; 2] {
    let mut moved = [0u64; 2];
    let mut batch = [Desc::default(); BATCH];
    let mut idle = 0u32;
    while !stop.load(Ordering::Relaxed) {
        let mut any = false;
        for from in 0..2 {
            let to = 1 - from;
            let n = ports[from].recv(frames, &mut batch);
            if n == 0 {
                continue;
            }
            any = true;
            let sent = ports[to].send(frames, &batch[..n]);
            for d in &batch[sent..n] {
                frames.free(d.addr);
            }
            moved[from] += sent as u64;
        }
        for p in ports.iter_mut() {
            p.maintain(frames);
        }
        if any {
            idle = 0;
            continue;
        }
        idle += 1;
        if idle >= IDLE_ROUNDS {
            let mut fds: Vec<BorrowedFd<'_>> = Vec::new();
            for p in ports.iter() {
                p.poll_fds(&mut fds);
            }
            let mut pfds: Vec<PollFd<'_>> = fds
                .into_iter()
                .map(|fd| PollFd::new(fd, PollFlags::POLLIN))
                .collect();
            // EINTR (a signal) and timeouts just return to the loop.
            let _ = poll(&mut pfds, PollTimeout::from(POLL_MS));
        }
    }
    moved
}
