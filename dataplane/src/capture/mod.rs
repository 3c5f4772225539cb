//! `xbr capture`: a port's frames, both directions, copied to a process
//! that prints them or writes them as pcap.
//!
//! # Design
//!
//! A capture is a temporary mirror (`crate::mirror`) selecting the port
//! as source and destination, whose sink is a datagram socket connected
//! to the one the capturing process bound in the abstract namespace (no
//! file to leave behind), which connects back to it: one frame per
//! datagram, up to the sink's send buffer waiting (thousands of frames,
//! not `net.unix.max_dgram_qlen`'s 10). Being a mirror, it sees what the
//! XDP flow cache would forward too (a mirrored port's traffic is kept
//! off the cache while the capture runs), and a full socket drops copies
//! instead of slowing forwarding (the count is reported when it stops).
//!
//! The control socket (`xbr_daemon::ctl`) adds it (`capture start PORT
//! @NAME`) and removes it (`capture stop MIRROR`). A capture whose process died
//! without stopping it is removed by the packet thread's first copy that
//! finds nobody reading, so a killed `xbr capture` does not keep the
//! port off the cache for long (only until its next frame).
//!
//! This is the bridge's side; the command is `xbr_daemon::capture`.

use crate::live::LivePorts;
use crate::mirror::{Mirror, Selection, Sink};

/// Serves `capture start PORT @NAME` and `capture stop MIRROR`.
pub fn command(args: &str, live: &LivePorts) -> Result<String, String> {
    let mut words = args.split_whitespace();
    match (words.next(), words.next(), words.next(), words.next()) {
        (Some("start"), Some(port), Some(addr), None) => {
            if !live.datapath().ports().iter().any(|p| p.name == port) {
                return Err(format!("capture: no port {port} on the bridge"));
            }
            let name = addr
                .strip_prefix('@')
                .ok_or_else(|| format!("capture: {addr}: not an abstract socket name (@NAME)"))?;
            let sink = Sink::capture_abstract(name).map_err(|e| e.to_string())?;
            let select = Selection {
                all: false,
                src: [port.to_string()].into(),
                dst: [port.to_string()].into(),
            };
            let mirror = format!("capture:{name}");
            live.datapath()
                .mirrors()
                .add_capture(Mirror::new(mirror.clone(), select, None, sink))
                .map_err(|e| e.to_string())?;
            tracing::info!(port = %port, mirror = %mirror, "capture started");
            Ok(format!("{mirror}\n"))
        }
        (Some("stop"), Some(mirror), None, None) => {
            let (sent, dropped) = live
                .datapath()
                .mirrors()
                .remove_capture(mirror)
                .map_err(|e| e.to_string())?;
            tracing::info!(mirror = %mirror, sent, dropped, "capture stopped");
            Ok(format!("sent {sent} dropped {dropped}\n"))
        }
        _ => Err("capture: start PORT @NAME | stop MIRROR".into()),
    }
}
