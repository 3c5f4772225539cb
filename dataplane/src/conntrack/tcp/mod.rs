//! TCP state and window tracking for one connection.
//!
//! # Design
//!
//! Each direction ("peer") keeps the sequence space it may use, in the
//! manner of the pf firewall that OVS's userspace conntrack also follows:
//! `seqlo` is the end of the highest segment the peer sent, `seqhi` the
//! highest sequence number the other side's acknowledgements and windows
//! allow it to send, `max_win` its largest advertised window. A segment is
//! valid when it ends inside the window the receiver advertised, starts
//! no more than one window before what was already sent (retransmissions),
//! and acknowledges nothing more than a window ahead or behind what the
//! other side sent. Anything else is `+inv` and does not change the state,
//! so a forged or stale segment cannot move the window.
//!
//! Window scaling applies only when both SYNs carried the option (RFC
//! 7323); until then windows are taken unscaled.
//!
//! Cost: a handful of comparisons per segment, no allocation. The state
//! lives inside the connection and is updated under its shard's lock.

use super::tuple::{tcp_flags as F, TcpSeg};
use super::Timeouts;

/// A peer's progress, ordered: later states compare greater.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
)]
pub enum PeerState {
    /// Has sent nothing yet.
    #[default]
    Closed,
    SynSent,
    Established,
    /// Has sent a FIN.
    Closing,
    /// Its FIN was acknowledged.
    FinWait2,
    /// Reset, or both FINs acknowledged.
    TimeWait,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Peer {
    pub state: PeerState,
    seqlo: u32,
    seqhi: u32,
    /// Largest window the peer advertised, unscaled (as in the header), so
    /// `max_win << wscale` stays below 2^30 and sequence arithmetic holds.
    max_win: u32,
    wscale: Option<u8>,
}

/// Both directions of a TCP connection (serde: saved with the
/// connection in the state file, see `conntrack/persist.rs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TcpConn {
    /// Index 0: the originator, 1: the responder.
    pub peers: [Peer; 2],
    /// Per peer: its sequence numbers are unknown here because the XDP
    /// flow cache forwarded some of its segments in the kernel (see
    /// [`TcpConn::suspend_window`]).
    loose: [bool; 2],
}

/// What the tracker made of a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Valid,
    /// Outside the window, or flags that make no sense here: `+inv`.
    Invalid,
    /// A SYN for a connection that is closed: the old one must go and the
    /// segment starts a new connection.
    Reopen,
}

/// Acknowledgements may be this far off the other side's sequence (one
/// maximum unscaled window plus a segment).
const MAX_ACK_WINDOW: i64 = 0xffff + 1500;

/// `a >= b` in sequence space.
fn seq_geq(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) >= 0
}

fn seq_gt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

/// Flag combinations no TCP stack sends (OVS refuses the same).
pub fn invalid_flags(flags: u8) -> bool {
    if flags & F::SYN != 0 {
        flags & (F::RST | F::FIN) != 0
    } else {
        flags & (F::ACK | F::RST) == 0
    }
}

/// Whether a segment may start a connection: valid flags and not a
/// SYN-ACK (a half-open handshake is not picked up).
pub fn valid_new(seg: &TcpSeg) -> bool {
    let syn_ack = F::SYN | F::ACK;
    !invalid_flags(seg.flags) && seg.flags & syn_ack != syn_ack && seg.flags & F::RST == 0
}

impl TcpConn {
    /// The connection started by `seg` from the originator.
    pub fn new(seg: &TcpSeg) -> Self {
        let mut c = TcpConn::default();
        let p = &mut c.peers[0];
        let end = seg_end(seg);
        p.seqlo = end;
        p.max_win = u32::from(seg.win).max(1);
        p.seqhi = end.wrapping_add(1);
        p.wscale = seg.wscale;
        p.state = if seg.flags & F::SYN != 0 {
            PeerState::SynSent
        } else {
            // Picked up mid-stream: the other side has to prove itself.
            PeerState::Established
        };
        if seg.flags & F::SYN == 0 {
            // No window is known yet: accept the first window's worth.
            p.seqhi = end.wrapping_add(u32::from(seg.win).max(1));
        }
        c
    }

    /// Both directions established (the handshake completed).
    pub fn established(&self) -> bool {
        self.peers.iter().all(|p| p.state == PeerState::Established)
    }

    /// Whether the connection is over and a new SYN may reuse the tuple.
    fn closed(&self) -> bool {
        self.peers.iter().all(|p| p.state >= PeerState::FinWait2)
    }

    /// Stops window tracking: the XDP flow cache is about to forward
    /// this connection's segments without showing them to conntrack, so
    /// the sequence numbers it knows will fall behind. Until each peer has
    /// been seen again with the cache no longer carrying the connection,
    /// segments are accepted without window checks and resynchronise the
    /// peers' windows (flags, states and timeouts are still tracked).
    pub fn suspend_window(&mut self) {
        self.loose = [true, true];
    }

    /// Whether window checks are suspended for either peer.
    #[cfg(test)]
    pub fn window_suspended(&self) -> bool {
        self.loose[0] || self.loose[1]
    }

    /// Tracks `seg` sent by the originator (`reply == false`) or responder.
    #[cfg(test)]
    pub fn update(&mut self, reply: bool, seg: &TcpSeg) -> Verdict {
        self.update_cached(reply, seg, false)
    }

    /// `update` (the tests' entry point) for a connection that the XDP flow cache
    /// carries (`in_kernel`) or carried: while a peer's window is
    /// suspended its segment is not checked against the window but
    /// resynchronises it; the suspension of the sender ends with its first
    /// segment once the cache no longer carries the connection.
    pub fn update_cached(&mut self, reply: bool, seg: &TcpSeg, in_kernel: bool) -> Verdict {
        if invalid_flags(seg.flags) {
            return Verdict::Invalid;
        }
        let (s, d) = if reply { (1, 0) } else { (0, 1) };
        let loose = self.loose[s] || self.loose[d];
        if !in_kernel {
            self.loose[s] = false;
        }
        let mut src = self.peers[s];
        let mut dst = self.peers[d];
        if !reply && seg.flags & (F::SYN | F::ACK) == F::SYN && self.closed() {
            return Verdict::Reopen;
        }
        let scaled = src.wscale.is_some() && dst.wscale.is_some();
        let sws = if scaled && seg.flags & F::SYN == 0 {
            src.wscale.unwrap_or(0)
        } else {
            0
        };
        let dws = if scaled { dst.wscale.unwrap_or(0) } else { 0 };
        let win = u32::from(seg.win) << sws;
        let end = seg_end(seg);
        if src.state == PeerState::Closed {
            // First segment from the responder: its SYN-ACK (or, for a
            // connection picked up mid-stream, any segment).
            src.seqlo = end;
            src.seqhi = end.wrapping_add((dst.max_win << dws).max(1));
            src.max_win = u32::from(seg.win).max(1);
            if seg.flags & F::SYN != 0 {
                src.wscale = seg.wscale;
                if src.wscale.is_none() {
                    dst.wscale = None;
                }
            }
            src.state = PeerState::SynSent;
        }
        let ack = if seg.flags & F::ACK == 0
            || (seg.flags & (F::ACK | F::RST) == (F::ACK | F::RST) && seg.ack == 0)
        {
            dst.seqlo
        } else {
            seg.ack
        };
        let ackskew = i64::from(dst.seqlo.wrapping_sub(ack) as i32);
        let acks_ok = dst.state == PeerState::Closed
            || (ackskew >= -MAX_ACK_WINDOW && ackskew <= MAX_ACK_WINDOW << sws);
        let in_window =
            seq_geq(src.seqhi, end) && seq_geq(seg.seq, src.seqlo.wrapping_sub(dst.max_win << dws));
        if !(loose || in_window && acks_ok) {
            return Verdict::Invalid;
        }
        if u32::from(seg.win) > src.max_win {
            src.max_win = u32::from(seg.win);
        }
        // Resynchronising: what this segment says replaces what was
        // known, which may be any distance behind.
        if seq_gt(end, src.seqlo) || loose {
            src.seqlo = end;
        }
        if loose && seq_gt(end, src.seqhi) {
            src.seqhi = end.wrapping_add((dst.max_win << dws).max(1));
        }
        if seg.flags & F::ACK != 0 {
            let edge = ack.wrapping_add(win);
            if seq_geq(edge, dst.seqhi) || loose {
                dst.seqhi = ack.wrapping_add(win.max(1));
            }
        }
        if seg.flags & F::SYN != 0 && src.state < PeerState::SynSent {
            src.state = PeerState::SynSent;
        }
        if seg.flags & F::FIN != 0 && src.state < PeerState::Closing {
            src.state = PeerState::Closing;
        }
        if seg.flags & F::ACK != 0 {
            if dst.state == PeerState::SynSent {
                dst.state = PeerState::Established;
            } else if dst.state == PeerState::Closing && seq_geq(ack, dst.seqlo) {
                dst.state = PeerState::FinWait2;
            }
        }
        // The responder's SYN-ACK acknowledges the originator's SYN; the
        // originator's first ACK then establishes the responder.
        if seg.flags & F::RST != 0 {
            src.state = PeerState::TimeWait;
            dst.state = PeerState::TimeWait;
        }
        self.peers[s] = src;
        self.peers[d] = dst;
        Verdict::Valid
    }

    /// How long the connection lives without traffic, in milliseconds.
    pub fn timeout(&self, t: &Timeouts) -> u64 {
        let [a, b] = self.peers;
        if a.state >= PeerState::FinWait2 && b.state >= PeerState::FinWait2 {
            t.tcp_closed
        } else if a.state >= PeerState::Closing && b.state >= PeerState::Closing {
            t.tcp_fin_wait
        } else if a.state < PeerState::Established || b.state < PeerState::Established {
            t.tcp_opening
        } else if a.state >= PeerState::Closing || b.state >= PeerState::Closing {
            t.tcp_closing
        } else {
            t.tcp_established
        }
    }

    /// The state name `dump-conntrack` prints, OVS style.
    pub fn state_name(&self) -> &'static str {
        let [a, b] = self.peers;
        let reset = a.state == PeerState::TimeWait || b.state == PeerState::TimeWait;
        if reset || (a.state >= PeerState::FinWait2 && b.state >= PeerState::FinWait2) {
            "TIME_WAIT"
        } else if a.state >= PeerState::Closing && b.state >= PeerState::Closing {
            "LAST_ACK"
        } else if a.state >= PeerState::Closing {
            "FIN_WAIT_1"
        } else if b.state >= PeerState::Closing {
            "CLOSE_WAIT"
        } else if self.established() {
            "ESTABLISHED"
        } else if b.state == PeerState::SynSent {
            "SYN_RECV"
        } else {
            "SYN_SENT"
        }
    }
}

/// Sequence number just past the segment (SYN and FIN count one each).
fn seg_end(seg: &TcpSeg) -> u32 {
    let mut end = seg.seq.wrapping_add(seg.len);
    if seg.flags & F::SYN != 0 {
        end = end.wrapping_add(1);
    }
    if seg.flags & F::FIN != 0 {
        end = end.wrapping_add(1);
    }
    end
}

#[cfg(test)]
mod tests;
