//! `xbr dpctl dump-flows BRIDGE`: the XDP flow cache's entries as the
//! kernel holds them (what `ovs-appctl dpctl/dump-flows` shows of OVS's
//! datapath): what each entry matches, how many packets and bytes the
//! kernel forwarded with it, and what it does.
//!
//! Read from the BPF map itself, on the caller's thread: the packet
//! thread is not asked and not slowed. The map is read entry by entry
//! while the kernel and the packet thread change it, so the listing is
//! not one instant's (as OVS's is not); entries of an older generation,
//! which the XDP programs no longer use and the packet thread's sweep
//! deletes, are counted, not listed.
//!
//! One line per entry, in the style of OVS's datapath flows:
//!
//! ```text
//! in_port(veth-a),eth(src=..,dst=..),ipv4(src=..,dst=..,proto=17,tos=0,ttl=64),udp(src=..,dst=..), packets:N, bytes:M, actions:veth-b
//! ```
//!
//! A decapsulated frame's entry starts with `tunnel(src=IP,vni=N)` and its
//! in_port is the VXLAN port's uplink; `ct` after the match says the
//! translation went through conntrack (TCP segments with SYN, FIN or RST
//! still go to the packet thread); actions are `set(eth(...))`,
//! `set(ipv4(...))`, `set(tcp|udp(...))`, `tnl_push(vni=N,src=IP,dst=IP,
//! eth_dst=MAC)` and the output device, or `drop`.

use super::entry::{
    counters, FcKey, ACTION_DROP, ACTION_REDIRECT, FLAG_CT, FLAG_ENCAP, FLAG_SET_DST, FLAG_SET_NW,
    FLAG_SET_SRC, VALUE_ENCAP, VALUE_NW, VALUE_SIZE,
};
use super::maps::CacheMaps;
use std::fmt::Write;
use std::net::Ipv4Addr;
use xbr_packet::bytes::field16;

fn mac(b: &[u8]) -> String {
    let mut m = [0u8; 6];
    m.copy_from_slice(&b[..6]);
    crate::netdev::format_mac(m)
}

fn ipv4(b: &[u8]) -> Ipv4Addr {
    Ipv4Addr::new(b[0], b[1], b[2], b[3])
}

fn l4_name(proto: u8) -> Option<&'static str> {
    match proto {
        6 => Some("tcp"),
        17 => Some("udp"),
        _ => None,
    }
}

/// One entry as a line, with `dev` naming an ifindex; `None` for a value
/// of an unknown action (a layout this xbr did not write).
pub fn describe(key: &FcKey, value: &[u8], dev: &dyn Fn(u32) -> String) -> Option<String> {
    if value.len() != VALUE_SIZE {
        return None;
    }
    let mut line = String::new();
    let tun_src = &key[32..36];
    if tun_src != [0; 4] {
        let vni = u32::from_be_bytes([key[36], key[37], key[38], key[39]]);
        let _ = write!(line, "tunnel(src={},vni={vni}),", ipv4(tun_src));
    }
    let in_if = u32::from_ne_bytes([key[0], key[1], key[2], key[3]]);
    let proto = key[24];
    let _ = write!(
        line,
        "in_port({}),eth(src={},dst={}),ipv4(src={},dst={},proto={proto},tos={},ttl={})",
        dev(in_if),
        mac(&key[10..16]),
        mac(&key[4..10]),
        ipv4(&key[16..20]),
        ipv4(&key[20..24]),
        key[25],
        key[26],
    );
    match l4_name(proto) {
        Some(name) => {
            let _ = write!(
                line,
                ",{name}(src={},dst={})",
                field16(key, 28),
                field16(key, 30)
            );
        }
        None => {
            let _ = write!(line, ",icmp(type={},code={})", key[29], key[31]);
        }
    }
    let flags = value[29];
    if flags & FLAG_CT != 0 {
        line.push_str(",ct");
    }
    let (packets, bytes) = counters(value);
    let _ = write!(line, ", packets:{packets}, bytes:{bytes}, actions:");
    match value[28] {
        ACTION_DROP => line.push_str("drop"),
        ACTION_REDIRECT => {
            let mut actions = Vec::new();
            if flags & (FLAG_SET_DST | FLAG_SET_SRC) != 0 {
                let mut eth = Vec::new();
                if flags & FLAG_SET_SRC != 0 {
                    eth.push(format!("src={}", mac(&value[36..42])));
                }
                if flags & FLAG_SET_DST != 0 {
                    eth.push(format!("dst={}", mac(&value[30..36])));
                }
                actions.push(format!("set(eth({}))", eth.join(",")));
            }
            if flags & FLAG_SET_NW != 0 {
                let nw = &value[VALUE_NW..VALUE_NW + 12];
                actions.push(format!(
                    "set(ipv4(src={},dst={}))",
                    ipv4(&nw[0..4]),
                    ipv4(&nw[4..8])
                ));
                if let Some(name) = l4_name(proto) {
                    actions.push(format!(
                        "set({name}(src={},dst={}))",
                        field16(nw, 8),
                        field16(nw, 10)
                    ));
                }
            }
            if flags & FLAG_ENCAP != 0 {
                let outer = &value[VALUE_ENCAP..];
                let vni = u32::from_be_bytes([0, outer[46], outer[47], outer[48]]);
                actions.push(format!(
                    "tnl_push(vni={vni},src={},dst={},eth_dst={})",
                    ipv4(&outer[26..30]),
                    ipv4(&outer[30..34]),
                    mac(&outer[0..6])
                ));
            }
            let out_if = u32::from_ne_bytes([value[24], value[25], value[26], value[27]]);
            actions.push(dev(out_if));
            line.push_str(&actions.join(","));
        }
        _ => return None,
    }
    Some(line)
}

/// The generation an entry was installed in.
fn generation(value: &[u8]) -> u64 {
    value
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_ne_bytes)
}

/// The report `xbr dpctl dump-flows` prints for the cache in `maps`.
pub fn report(maps: &CacheMaps, dev: &dyn Fn(u32) -> String) -> String {
    let current = maps.generation().current();
    let mut lines = Vec::new();
    let (mut stale, mut unknown) = (0usize, 0usize);
    for (key, value) in maps.entries() {
        if generation(&value) != current {
            stale += 1;
            continue;
        }
        match describe(&key, &value, dev) {
            Some(l) => lines.push(l),
            None => unknown += 1,
        }
    }
    // Stable output for the same entries (the map's order is its hash's).
    lines.sort_unstable();
    let mut out = String::new();
    for l in &lines {
        let _ = writeln!(out, "{l}");
    }
    let _ = writeln!(
        out,
        "entries: {} in use of {}, {stale} of an older generation (awaiting the sweep){}",
        lines.len(),
        maps.capacity(),
        if unknown > 0 {
            format!(", {unknown} unreadable")
        } else {
            String::new()
        }
    );
    out
}

#[cfg(test)]
mod tests {
    use super::super::entry::{frame_key, set_tunnel, value, FcAction, NwRewrite};
    use super::*;
    use xbr_packet::testframes::udp_frame;

    fn dev(ifindex: u32) -> String {
        format!("if{ifindex}")
    }

    #[test]
    fn a_redirect_with_rewrites_reads_like_a_datapath_flow() {
        let f = udp_frame();
        let key = frame_key(&f, 7).unwrap();
        let mut v = value(
            FcAction::Redirect {
                out_ifindex: 9,
                set_dst: Some([0x0a, 0x58, 0, 0, 0, 0x10]),
                set_src: None,
                nw: Some(NwRewrite {
                    src: 0xac1e_0001,
                    dst: 0x0a80_0003,
                    sport: 80,
                    dport: 5678,
                }),
                encap: None,
                frags: false,
            },
            3,
            true,
        );
        v[8..16].copy_from_slice(&5u64.to_ne_bytes());
        v[16..24].copy_from_slice(&300u64.to_ne_bytes());
        let line = describe(&key, &v, &dev).unwrap();
        assert_eq!(
            line,
            format!(
                "in_port(if7),eth(src={},dst={}),ipv4(src=10.128.0.2,dst=10.128.0.3,\
                 proto=17,tos=0,ttl=64),udp(src=1234,dst=5678),ct, packets:5, bytes:300, \
                 actions:set(eth(dst=0a:58:00:00:00:10)),set(ipv4(src=172.30.0.1,\
                 dst=10.128.0.3)),set(udp(src=80,dst=5678)),if9",
                mac(&f[6..12]),
                mac(&f[0..6])
            )
        );
    }

    #[test]
    fn decapsulated_drops_and_unknown_values() {
        let mut key = frame_key(&udp_frame(), 2).unwrap();
        set_tunnel(&mut key, 0xc0a8_0102, 0x0012_3456);
        let line = describe(&key, &value(FcAction::Drop, 1, false), &dev).unwrap();
        assert!(
            line.starts_with("tunnel(src=192.168.1.2,vni=1193046),in_port(if2),"),
            "{line}"
        );
        assert!(
            line.ends_with(", packets:0, bytes:0, actions:drop"),
            "{line}"
        );
        let mut hdr = [0u8; xbr_packet::vxlan::OUTER_LEN];
        hdr[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 9]);
        hdr[26..30].copy_from_slice(&[192, 168, 1, 1]);
        hdr[30..34].copy_from_slice(&[192, 168, 1, 2]);
        hdr[46..49].copy_from_slice(&[0, 0, 42]);
        let encap = crate::vxlan::encap::FlowOuter {
            hdr,
            ip_sum: 0,
            max_inner: 1450,
        };
        let v = value(
            FcAction::Redirect {
                out_ifindex: 4,
                set_dst: None,
                set_src: None,
                nw: None,
                encap: Some(encap),
                frags: false,
            },
            1,
            false,
        );
        let line = describe(&frame_key(&udp_frame(), 3).unwrap(), &v, &dev).unwrap();
        assert!(
            line.ends_with(
                "actions:tnl_push(vni=42,src=192.168.1.1,dst=192.168.1.2,\
                 eth_dst=02:00:00:00:00:09),if4"
            ),
            "{line}"
        );
        let mut bad = value(FcAction::Drop, 1, false);
        bad[28] = 99;
        assert_eq!(describe(&key, &bad, &dev), None);
        assert_eq!(describe(&key, &bad[..10], &dev), None);
    }
}
