//! A long-lived TCP conversation between two pods, to show that a
//! connection survives whatever happens to the switch meanwhile (a
//! restart, a crash): B (the server) sends a numbered line every 100 ms on
//! one socket and waits for A to echo it. B talks first after every
//! pause, so with the agent's policies (only A may start connections to
//! B) a connection the switch forgot makes B's next segment a new
//! connection from B, which is dropped, and the conversation stalls.
//!
//! Bounded: B gives up after 20 s without an echo, or 60 s in all.

use crate::cmd::Background;
use crate::error::HarnessError;
use crate::netns::{unique_tag, Pod};
use crate::xbr::Xbr;
use crate::Result;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The conversation under way; B writes how many echoes came back to
/// `progress` and stops, printing `ok N`, once `stop` exists.
pub struct Conversation {
    server: Background,
    client: Background,
    progress: PathBuf,
    stop: PathBuf,
}

impl Conversation {
    /// Starts B's server on `port` and A's client, connected (python3).
    pub fn start(a: &Pod, b: &Pod, port: u16) -> Result<Conversation> {
        let base = std::env::temp_dir().join(format!("xbrt-talk-{}", unique_tag()));
        let (ready, progress, stop) = (
            base.with_extension("ready"),
            base.with_extension("progress"),
            base.with_extension("stop"),
        );
        let server = format!(
            "import socket, time, os\n\
             s = socket.socket()\n\
             s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
             s.bind(('{b}', {port}))\n\
             s.listen(1)\n\
             open('{ready}', 'w').close()\n\
             s.settimeout(20)\n\
             c, _ = s.accept()\n\
             c.settimeout(20)\n\
             f = c.makefile('rb')\n\
             n = 0\n\
             end = time.time() + 60\n\
             while not os.path.exists('{stop}') and time.time() < end:\n\
             \x20   c.sendall(b'%d\\n' % n)\n\
             \x20   if f.readline().strip() != b'%d' % n:\n\
             \x20       raise SystemExit('bad echo %d' % n)\n\
             \x20   n += 1\n\
             \x20   open('{progress}.tmp', 'w').write(str(n))\n\
             \x20   os.replace('{progress}.tmp', '{progress}')\n\
             \x20   time.sleep(0.1)\n\
             c.close()\n\
             print('ok', n)\n",
            b = b.ip(),
            ready = ready.display(),
            stop = stop.display(),
            progress = progress.display(),
        );
        let server = Background::spawn(&mut b.ns().command("python3", &["-c", &server]))?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ready.exists() {
            if Instant::now() > deadline {
                return Err(HarnessError::Unexpected(
                    "the TCP server never listened".into(),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = std::fs::remove_file(&ready);
        let client = format!(
            "import socket\n\
             s = socket.create_connection(('{b}', {port}), timeout=20)\n\
             f = s.makefile('rb')\n\
             while True:\n\
             \x20   line = f.readline()\n\
             \x20   if not line:\n\
             \x20       break\n\
             \x20   s.sendall(line)\n",
            b = b.ip(),
        );
        let client = Background::spawn(&mut a.ns().command("python3", &["-c", &client]))?;
        Ok(Conversation {
            server,
            client,
            progress,
            stop,
        })
    }

    /// Echoes so far.
    pub fn echoes(&self) -> u64 {
        std::fs::read_to_string(&self.progress)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Waits (bounded) until `more` echoes came back after now; the error
    /// holds `xbr`'s log.
    pub fn wait_more(&self, more: u64, xbr: &Xbr) -> Result<()> {
        let start = self.echoes();
        let deadline = Instant::now() + Duration::from_secs(25);
        while self.echoes() < start + more {
            if Instant::now() > deadline {
                return Err(HarnessError::Unexpected(format!(
                    "the TCP conversation stalled at {} echoes (wanted {} more). Log:\n{}",
                    self.echoes(),
                    more,
                    xbr.log()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// Ends it; the server must report success. Returns the echoes.
    pub fn finish(self) -> Result<u64> {
        std::fs::write(&self.stop, "").map_err(|e| HarnessError::io("stop file", e))?;
        let out = self.server.wait(Duration::from_secs(25));
        let _ = self.client.wait(Duration::from_secs(5));
        let _ = std::fs::remove_file(&self.stop);
        let _ = std::fs::remove_file(&self.progress);
        out.stdout
            .trim()
            .strip_prefix("ok ")
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| {
                HarnessError::Unexpected(format!(
                    "the TCP conversation failed: {} {}",
                    out.stdout, out.stderr
                ))
            })
    }
}
