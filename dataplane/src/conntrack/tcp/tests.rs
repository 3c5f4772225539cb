//! The TCP tracker over hand-made segments: handshakes, windows,
//! closes, and the suspension of window checks for the XDP flow cache.

use super::*;

fn seg(seq: u32, ack: u32, flags: u8, len: u32) -> TcpSeg {
    TcpSeg {
        seq,
        ack,
        flags,
        win: 64000,
        len,
        wscale: None,
    }
}

/// Handshake, data both ways; returns the connection.
fn handshake() -> TcpConn {
    let mut c = TcpConn::new(&seg(1000, 0, F::SYN, 0));
    assert_eq!(c.state_name(), "SYN_SENT");
    assert_eq!(
        c.update(true, &seg(5000, 1001, F::SYN | F::ACK, 0)),
        Verdict::Valid
    );
    assert_eq!(c.state_name(), "SYN_RECV");
    assert_eq!(c.update(false, &seg(1001, 5001, F::ACK, 0)), Verdict::Valid);
    assert!(c.established());
    assert_eq!(c.state_name(), "ESTABLISHED");
    c
}

#[test]
fn suspended_window_resynchronises_from_both_peers() {
    let far = 1_000_000_000u32;
    // Without the suspension, a segment a gigabyte ahead is invalid.
    let mut strict = handshake();
    assert_eq!(
        strict.update(false, &seg(1001 + far, 5001, F::ACK, 100)),
        Verdict::Invalid
    );
    let mut c = handshake();
    c.suspend_window();
    // Carried by the cache meanwhile: both sides moved far ahead.
    assert_eq!(
        c.update_cached(false, &seg(1001 + far, 5001 + far, F::ACK, 100), true),
        Verdict::Valid
    );
    assert!(c.window_suspended(), "still in the kernel");
    // Back in userspace: each peer's first segment resynchronises it.
    assert_eq!(
        c.update(false, &seg(1101 + far, 5001 + far, F::ACK, 100)),
        Verdict::Valid
    );
    assert!(c.window_suspended(), "the responder was not seen yet");
    assert_eq!(
        c.update(true, &seg(5001 + far, 1201 + far, F::ACK, 100)),
        Verdict::Valid
    );
    assert!(!c.window_suspended());
    // Checked again from here on: in window passes, far off does not.
    assert_eq!(
        c.update(false, &seg(1201 + far, 5101 + far, F::ACK, 100)),
        Verdict::Valid
    );
    assert_eq!(
        c.update(false, &seg(1201, 5101 + far, F::ACK, 100)),
        Verdict::Invalid
    );
    assert_eq!(c.state_name(), "ESTABLISHED");
    // A close after the kernel period is tracked as usual.
    assert_eq!(
        c.update(false, &seg(1301 + far, 5101 + far, F::ACK | F::FIN, 0)),
        Verdict::Valid
    );
    assert_eq!(c.state_name(), "FIN_WAIT_1");
}

#[test]
fn handshake_data_and_close() {
    let mut c = handshake();
    let t = Timeouts::default();
    assert_eq!(c.timeout(&t), t.tcp_established);
    assert_eq!(
        c.update(false, &seg(1001, 5001, F::ACK, 1000)),
        Verdict::Valid
    );
    assert_eq!(
        c.update(true, &seg(5001, 2001, F::ACK, 500)),
        Verdict::Valid
    );
    // A retransmission of old data is fine.
    assert_eq!(
        c.update(false, &seg(1001, 5501, F::ACK, 1000)),
        Verdict::Valid
    );
    assert_eq!(
        c.update(false, &seg(2001, 5501, F::ACK | F::FIN, 0)),
        Verdict::Valid
    );
    assert_eq!(c.state_name(), "FIN_WAIT_1");
    assert_eq!(c.timeout(&t), t.tcp_closing);
    assert_eq!(
        c.update(true, &seg(5501, 2002, F::ACK | F::FIN, 0)),
        Verdict::Valid
    );
    assert_eq!(c.update(false, &seg(2002, 5502, F::ACK, 0)), Verdict::Valid);
    assert_eq!(c.timeout(&t), t.tcp_closed);
    // The tuple may be reused by a new SYN once closed.
    assert_eq!(c.update(false, &seg(90000, 0, F::SYN, 0)), Verdict::Reopen);
}

#[test]
fn out_of_window_segments_are_invalid_and_change_nothing() {
    let mut c = handshake();
    let before = c;
    // Far beyond the receiver's window.
    assert_eq!(
        c.update(false, &seg(1001 + 10_000_000, 5001, F::ACK, 100)),
        Verdict::Invalid
    );
    // Far behind: more than a window back.
    assert_eq!(
        c.update(
            false,
            &seg(1001u32.wrapping_sub(1_000_000), 5001, F::ACK, 100)
        ),
        Verdict::Invalid
    );
    // Acknowledging data never sent.
    assert_eq!(
        c.update(false, &seg(1001, 5001 + 5_000_000, F::ACK, 0)),
        Verdict::Invalid
    );
    assert_eq!(c, before);
    assert_eq!(
        c.update(false, &seg(1001, 5001, F::ACK, 10)),
        Verdict::Valid
    );
}

#[test]
fn nonsense_flags_and_half_open_pickup_are_refused() {
    assert!(invalid_flags(F::SYN | F::FIN));
    assert!(invalid_flags(F::SYN | F::RST));
    assert!(invalid_flags(F::FIN));
    assert!(invalid_flags(0));
    assert!(!invalid_flags(F::RST));
    assert!(!valid_new(&seg(1, 1, F::SYN | F::ACK, 0)));
    assert!(!valid_new(&seg(1, 1, F::RST, 0)));
    assert!(valid_new(&seg(1, 0, F::SYN, 0)));
    assert!(valid_new(&seg(1, 1, F::ACK, 0)));
}

#[test]
fn reset_closes_both_sides() {
    let mut c = handshake();
    assert_eq!(
        c.update(true, &seg(5001, 1001, F::RST | F::ACK, 0)),
        Verdict::Valid
    );
    assert_eq!(c.state_name(), "TIME_WAIT");
    assert_eq!(
        c.timeout(&Timeouts::default()),
        Timeouts::default().tcp_closed
    );
}

#[test]
fn window_scaling_applies_when_both_sides_offer_it() {
    let mut syn = seg(1000, 0, F::SYN, 0);
    syn.wscale = Some(7);
    let mut c = TcpConn::new(&syn);
    let mut synack = seg(5000, 1001, F::SYN | F::ACK, 0);
    synack.wscale = Some(7);
    synack.win = 512;
    assert_eq!(c.update(true, &synack), Verdict::Valid);
    let mut ack = seg(1001, 5001, F::ACK, 0);
    ack.win = 512;
    assert_eq!(c.update(false, &ack), Verdict::Valid);
    // The responder advertised 512 << 7 = 64 KiB: 60 KB fits...
    let mut ack2 = seg(5001, 1001, F::ACK, 0);
    ack2.win = 512;
    assert_eq!(c.update(true, &ack2), Verdict::Valid);
    assert_eq!(
        c.update(false, &seg(1001, 5001, F::ACK, 60_000)),
        Verdict::Valid
    );
    // ...and 200 KB beyond it does not.
    assert_eq!(
        c.update(false, &seg(61_001, 5001, F::ACK, 200_000)),
        Verdict::Invalid
    );
}

/// Windows of megabytes (scale 10) must not overflow the sequence
/// arithmetic: a retransmission check one window back once wrapped
/// past 2^31 and made every in-window segment invalid.
#[test]
fn large_scaled_windows_stay_valid() {
    let mut syn = seg(1000, 0, F::SYN, 0);
    syn.wscale = Some(10);
    let mut c = TcpConn::new(&syn);
    let mut synack = seg(5000, 1001, F::SYN | F::ACK, 0);
    synack.wscale = Some(10);
    assert_eq!(c.update(true, &synack), Verdict::Valid);
    let mut ack = seg(1001, 5001, F::ACK, 0);
    ack.win = 2050;
    assert_eq!(c.update(false, &ack), Verdict::Valid);
    let mut ack2 = seg(5001, 1001, F::ACK, 0);
    ack2.win = 2050;
    assert_eq!(c.update(true, &ack2), Verdict::Valid);
    let mut seq = 1001u32;
    for _ in 0..1000 {
        let mut d = seg(seq, 5001, F::ACK, 1448);
        d.win = 63;
        assert_eq!(c.update(false, &d), Verdict::Valid, "seq {seq}");
        seq = seq.wrapping_add(1448);
        let mut a = seg(5001, seq, F::ACK, 0);
        a.win = 2050;
        assert_eq!(c.update(true, &a), Verdict::Valid);
    }
}

mod prop {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Step {
        /// New data of this many bytes, if the window allows.
        Send(u16),
        /// The receiver acknowledges part of what is outstanding
        /// (per mille) and advertises a raw window.
        Ack(u16, u16),
        /// A retransmission of outstanding data (offset per mille).
        Retransmit(u16),
        /// An old acknowledgement arrives again (duplicate, reordered).
        OldAck,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => (1u16..1449).prop_map(Step::Send),
            3 => (0u16..=1000, 1u16..=u16::MAX).prop_map(|(a, w)| Step::Ack(a, w)),
            1 => (0u16..=1000).prop_map(Step::Retransmit),
            1 => Just(Step::OldAck),
        ]
    }

    proptest! {
        /// A legitimate exchange (in-window data, cumulative ACKs
        /// that never shrink the window, retransmissions, duplicate
        /// ACKs), with any window scales, is never invalid.
        #[test]
        fn legitimate_traffic_is_always_valid(
            isn_c: u32, isn_s: u32, ws_c in 0u8..=14, ws_s in 0u8..=14,
            steps in proptest::collection::vec(step(), 1..300),
        ) {
            let mut syn = seg(isn_c, 0, F::SYN, 0);
            syn.wscale = Some(ws_c);
            let mut c = TcpConn::new(&syn);
            let mut synack = seg(isn_s, isn_c.wrapping_add(1), F::SYN | F::ACK, 0);
            synack.wscale = Some(ws_s);
            synack.win = 65535;
            prop_assert_eq!(c.update(true, &synack), Verdict::Valid);
            let una0 = isn_c.wrapping_add(1);
            let mut ack3 = seg(una0, isn_s.wrapping_add(1), F::ACK, 0);
            ack3.win = 65535;
            prop_assert_eq!(c.update(false, &ack3), Verdict::Valid);
            // Sender state, relative to una0.
            let (mut una, mut nxt) = (0u64, 0u64);
            // The receiver's right edge (relative) and last ACK sent.
            let mut edge = 65535u64;
            let mut last_ack = (0u64, 65535u16);
            let srv = isn_s.wrapping_add(1);
            for st in steps {
                match st {
                    Step::Send(len) => {
                        let len = u64::from(len);
                        if nxt + len <= edge {
                            let mut d = seg(una0.wrapping_add(nxt as u32), srv, F::ACK, len as u32);
                            d.win = 65535;
                            prop_assert_eq!(c.update(false, &d), Verdict::Valid, "send {:?}", (una, nxt, edge));
                            nxt += len;
                        }
                    }
                    Step::Ack(part, raw) => {
                        let ack = una + (nxt - una) * u64::from(part) / 1000;
                        let win = u64::from(raw) << ws_s;
                        // Never shrink: the right edge only grows.
                        let raw = if ack + win < edge {
                            (edge - ack).div_ceil(1 << ws_s).min(65535) as u16
                        } else {
                            raw
                        };
                        let win = u64::from(raw) << ws_s;
                        if ack + win < edge {
                            continue;
                        }
                        let mut a = seg(srv, una0.wrapping_add(ack as u32), F::ACK, 0);
                        a.win = raw;
                        prop_assert_eq!(c.update(true, &a), Verdict::Valid, "ack {:?}", (una, nxt, ack, raw));
                        una = ack;
                        edge = ack + win;
                        last_ack = (ack, raw);
                    }
                    Step::Retransmit(at) => {
                        if nxt > una {
                            let off = una + (nxt - una - 1) * u64::from(at) / 1000;
                            let len = (nxt - off).min(1448);
                            let mut d = seg(una0.wrapping_add(off as u32), srv, F::ACK, len as u32);
                            d.win = 65535;
                            prop_assert_eq!(c.update(false, &d), Verdict::Valid, "retransmit {}", off);
                        }
                    }
                    Step::OldAck => {
                        let mut a = seg(srv, una0.wrapping_add(last_ack.0 as u32), F::ACK, 0);
                        a.win = last_ack.1;
                        prop_assert_eq!(c.update(true, &a), Verdict::Valid);
                    }
                }
            }
        }
    }
}
