//! A sequence of frames through flow extraction and conntrack, each with
//! its own `ct()` request: tuple extraction from any frame, ICMP errors
//! quoting a connection, TCP window tracking, IPv4/IPv6 fragments and
//! NAT (source and destination, with address and port ranges small
//! enough to run out). No panic, and the table never holds more
//! connections than its limit.
//!
//! Input: one byte picks the connection limit (1-16), then records of
//! two control bytes and a frame. The first control byte: bit 0 commit,
//! bit 1 force, bits 2-3 NAT (none, src range, dst range, un-NAT only),
//! bits 4-5 the zone, bits 6-7 how far the clock moves (0, 1 ms, 1 s,
//! 1 h). The second: bit 0 "the previous frame's reply" (the frame as
//! conntrack left it, addresses and ports swapped: no frame follows),
//! bit 1 sweep expired connections and fragments, bit 2 dump. A frame is
//! a length byte and that many bytes.

#![no_main]

use dataplane::conntrack::{Conntrack, CtConfig, CtRequest};
use flowtable::key::FlowKey;
use flowtable::NatSpec;
use libfuzzer_sys::fuzz_target;
use xbr_packet::parse::{extract, Layers};

fn nat(kind: u8) -> Option<NatSpec> {
    let range = |flags| NatSpec {
        flags,
        port_min: 1000,
        port_max: 1003,
        v6: false,
        addr_min: [0, 0, 0, 0x0a00_0001],
        addr_span: 2,
    };
    match kind {
        1 => Some(range(NatSpec::SRC)),
        2 => Some(range(NatSpec::DST)),
        3 => Some(NatSpec::default()),
        _ => None,
    }
}

/// The frame with its IPv4 or IPv6 addresses and its L4 ports swapped
/// (where the layers say they are), as the reply of a connection looks.
fn reply_of(frame: &[u8], layers: Layers) -> Vec<u8> {
    let mut f = frame.to_vec();
    let l3 = usize::from(layers.l3);
    let (src, len) = match f.get(l3).map(|b| b >> 4) {
        Some(4) => (l3 + 12, 4),
        Some(6) => (l3 + 8, 16),
        _ => return f,
    };
    if f.len() >= src + 2 * len {
        let (a, b) = f[src..src + 2 * len].split_at_mut(len);
        a.swap_with_slice(b);
    }
    let l4 = usize::from(layers.l4);
    if l4 != 0 && f.len() >= l4 + 4 {
        let (a, b) = f[l4..l4 + 4].split_at_mut(2);
        a.swap_with_slice(b);
    }
    f
}

fuzz_target!(|data: &[u8]| {
    let Some((&limit, mut rest)) = data.split_first() else {
        return;
    };
    let limit = 1 + usize::from(limit % 16);
    let ct = Conntrack::new(CtConfig {
        limit,
        ..CtConfig::default()
    });
    let mut now = 1_000u64;
    let mut previous: Option<(Vec<u8>, Layers)> = None;
    while let [c0, c1, tail @ ..] = rest {
        rest = tail;
        let mut frame = if c1 & 1 != 0 {
            match &previous {
                Some((f, layers)) => reply_of(f, *layers),
                None => continue,
            }
        } else {
            let Some((&len, tail)) = rest.split_first() else {
                break;
            };
            let len = usize::from(len).min(tail.len());
            let (f, tail) = tail.split_at(len);
            rest = tail;
            f.to_vec()
        };
        now += [0, 1, 1_000, 3_600_000][usize::from(c0 >> 6)];
        let req = CtRequest {
            zone: u16::from((c0 >> 4) & 3),
            commit: c0 & 1 != 0,
            force: c0 & 2 != 0,
            nat: nat((c0 >> 2) & 3),
            mark: (c0 & 1 != 0).then_some((u32::from(*c1), 0xff)),
            label: None,
            from_host: false,
            in_port: 1,
        };
        let mut key = FlowKey::default();
        let layers = extract(&frame, 1, &mut key);
        let _ = ct.execute(&mut frame, layers, &key, &req, now);
        // Whatever NAT did, the frame still parses.
        let mut again = FlowKey::default();
        extract(&frame, 1, &mut again);
        assert!(ct.len() <= limit, "{} connections, limit {limit}", ct.len());
        if c1 & 2 != 0 {
            ct.sweep(now, 1);
        }
        if c1 & 4 != 0 {
            let _ = ct.dump(None, now);
        }
        previous = Some((frame, layers));
    }
});
