//! The packet thread's side of adopting a previous xbr's XDP cache
//! entries at take-over (the design is in `fastpath/cache/adopt.rs`): each
//! entry's frame translated with this process's tables and connections,
//! as a miss would translate it, without counting or changing anything:
//! NATed connections with their bindings, decapsulated VXLAN frames with
//! their tunnel metadata.

use super::live_ports::index_in;
use super::xdp::{plain_ct_fork, MAX_CT_PASSES};
use super::{Engine, Frames, PortIo};
use crate::conntrack::Tuple;
use crate::fastpath::cache::{entry, Claim, CtConn, FcKey, Fresh, Origin, REVALIDATE_CHUNK};
use flowtable::cache::Attribution;
use flowtable::key::{Field, FlowKey};
use flowtable::matching::{IP_PROTO_ICMP, IP_PROTO_TCP, IP_PROTO_UDP};
use flowtable::pipeline::{DpAction, Xlate};
use xbr_packet::parse::{self, ETH_HEADER_LEN};

/// The frame an entry's key stands for (`entry::frame_key` of it gives
/// the key back): the key's Ethernet, IPv4 and TCP/UDP/ICMP headers, a
/// TCP segment with ACK alone (the XDP program hands segments with SYN,
/// FIN or RST, or without ACK, to xbr), no payload. `None` for keys
/// the XDP program would not have made.
fn frame_of(key: &FcKey) -> Option<Vec<u8>> {
    let proto = key[24];
    let l4_len = match proto {
        IP_PROTO_TCP => 20,
        IP_PROTO_UDP | IP_PROTO_ICMP => 8,
        _ => return None,
    };
    let ip_len = 20 + l4_len;
    let mut f = vec![0u8; ETH_HEADER_LEN + ip_len];
    f[0..12].copy_from_slice(&key[4..16]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip = &mut f[ETH_HEADER_LEN..];
    ip[0] = 0x45;
    ip[1] = key[25];
    ip[2..4].copy_from_slice(&(ip_len as u16).to_be_bytes());
    ip[8] = key[26];
    ip[9] = proto;
    ip[12..20].copy_from_slice(&key[16..24]);
    let l4 = &mut ip[20..];
    match proto {
        IP_PROTO_ICMP => {
            l4[0] = key[29];
            l4[1] = key[31];
        }
        _ => {
            l4[0..2].copy_from_slice(&key[28..30]);
            l4[2..4].copy_from_slice(&key[30..32]);
            if proto == IP_PROTO_TCP {
                l4[12] = 5 << 4;
                l4[13] = 0x10;
                l4[14..16].copy_from_slice(&0xffffu16.to_be_bytes());
            } else {
                l4[4..6].copy_from_slice(&(l4_len as u16).to_be_bytes());
            }
        }
    }
    Some(f)
}

impl<F: Frames, P: PortIo<F>> Engine<F, P> {
    /// A take-over asked (`XdpCache::adoption_asked`, read before the
    /// changes and port operations it follows were applied): lists the
    /// entries this thread adopts.
    pub(super) fn xdp_start_adoption(&mut self) {
        let Some(x) = self.xdp.as_mut() else {
            return;
        };
        // The ports' devices, and whether this thread serves each.
        let devices: Vec<(u32, bool)> = self
            .ports
            .iter()
            .filter_map(|p| Some((p.xdp_ifindex?, p.owner.is_none())))
            .collect();
        let claim = |key: &FcKey| {
            let ifindex = u32::from_ne_bytes([key[0], key[1], key[2], key[3]]);
            match devices.iter().find(|(i, _)| *i == ifindex) {
                Some((_, true)) => Claim::Mine,
                Some((_, false)) => Claim::Others,
                None => Claim::Nobody,
            }
        };
        x.start_adoption(claim, self.changes.engine() == 0);
    }

    /// One step of the adoption under way, if any: a chunk of entries
    /// when `busy`, else all that are left.
    pub(super) fn xdp_adopt(&mut self, busy: bool) {
        if !self.xdp.as_ref().is_some_and(|x| x.adopting()) {
            return;
        }
        let Some(mut x) = self.xdp.take() else {
            return;
        };
        let mut entries = Vec::new();
        x.adoption_chunk(
            if busy { REVALIDATE_CHUNK } else { usize::MAX },
            &mut entries,
        );
        let mut xlate = Xlate::new();
        for (key, found) in entries {
            let fresh = self.translate_adopted(&key, &mut xlate);
            x.adopt(key, &found, fresh, &self.conntrack, self.ct_now);
        }
        x.adoption_step_done();
        self.xdp = Some(x);
    }

    /// What a miss of the frame `xk` stands for would install now, if
    /// anything: each pass translated with the current tables; a
    /// `ct(table=N)` fork the cache follows resumes with what conntrack
    /// says of the connection now (`fastpath::ct::link::peek`: live and
    /// steady; with `nat`, the headers its binding rewrites to, as
    /// `ct(nat)` would), else `None`; the last pass must be one the XDP
    /// program carries out (`Engine::fc_action`). A decapsulated frame's
    /// entry (keyed by the uplink, with the tunnel source and VNI) is
    /// translated from the VXLAN port, with the tunnel metadata its
    /// decapsulation gives (the tunnel destination is the port's own
    /// address).
    fn translate_adopted(&mut self, xk: &FcKey, xlate: &mut Xlate) -> Option<Fresh> {
        if self.fail_open {
            return None;
        }
        let ifindex = u32::from_ne_bytes([xk[0], xk[1], xk[2], xk[3]]);
        let decap = entry::is_decapsulated(xk);
        // A decapsulated frame came by the VXLAN port (whose device is the
        // uplink), any other by a port of its own device.
        let port = self
            .ports
            .iter()
            .find(|p| p.xdp_ifindex == Some(ifindex) && p.tunnel == decap)?;
        let in_port = port.meta.ofport;
        let tunnel = if decap {
            let (tun_src, vni) = entry::key_tunnel(xk);
            Some((tun_src, vni, port.io.tunnel()?.local_ip()))
        } else {
            None
        };
        index_in(&self.port_index, in_port)?;
        let frame = frame_of(xk)?;
        let mut key = FlowKey::zero();
        let layers = parse::extract(&frame, in_port, &mut key);
        let mut want = entry::key_of(&key, layers, frame.len(), ifindex)?;
        if let Some((tun_src, vni, _)) = tunnel {
            entry::set_tunnel(&mut want, tun_src, vni);
        }
        if want != *xk {
            return None;
        }
        if let Some((tun_src, vni, local)) = tunnel {
            key.set(Field::TunId, u64::from(vni));
            key.set(Field::TunSrc, u64::from(tun_src));
            key.set(Field::TunDst, u64::from(local));
        }
        let (mut passes, mut forks, mut parts, mut conns) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        loop {
            parts.push(self.pipeline.retranslate(&key, xlate));
            passes.push(key);
            let Some(&fork) = plain_ct_fork(xlate.actions()) else {
                break;
            };
            let DpAction::Ct {
                zone,
                nat,
                table: Some(_),
                ..
            } = fork
            else {
                return None;
            };
            let proto = key.get(Field::IpProto) as u8;
            if forks.len() + 1 >= MAX_CT_PASSES || !matches!(proto, IP_PROTO_TCP | IP_PROTO_UDP) {
                return None;
            }
            let tuple = Tuple::v4(
                zone,
                proto,
                key.get(Field::IpSrc) as u32,
                key.get(Field::IpDst) as u32,
                key.get(Field::TpSrc) as u16,
                key.get(Field::TpDst) as u16,
            );
            let peek = crate::fastpath::ct::link::peek(
                &self.conntrack,
                &tuple,
                zone,
                nat.is_some(),
                self.ct_now,
            )?;
            let o = peek.outcome;
            // The fork resumes with the headers `ct()` leaves: the same,
            // or those its NAT binding rewrites to.
            let mut next = *xlate.recirc()?;
            next.set_headers_from(&key);
            if let Some(to) = peek.rewritten {
                next.set(Field::IpSrc, u64::from(to.src.as_v4()));
                next.set(Field::IpDst, u64::from(to.dst.as_v4()));
                next.set(Field::TpSrc, u64::from(to.sport));
                next.set(Field::TpDst, u64::from(to.dport));
            }
            next.set(Field::CtState, u64::from(o.state));
            next.set(Field::CtZone, u64::from(o.zone));
            next.set(Field::CtMark, u64::from(o.mark));
            next.set_ct_label(o.label);
            conns.push(CtConn {
                tuple,
                mark: o.mark,
                label: o.label,
                absent: false,
            });
            forks.push(fork);
            key = next;
        }
        let (action, out) =
            Self::fc_action(&mut self.ports, &self.port_index, in_port, xk, &key, xlate)?;
        Some(Fresh {
            action,
            out,
            attribution: Attribution::join(parts)?,
            origin: Origin {
                in_port,
                passes: passes.into(),
                forks: forks.into(),
            },
            conns,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::frame_of;
    use crate::fastpath::cache::entry::frame_key;
    use crate::fastpath::cache::FcKey;

    /// A key of each protocol the program looks up comes back from its
    /// frame unchanged.
    #[test]
    fn an_entrys_frame_has_its_key() {
        for (proto, l4) in [
            (6u8, [0x9c, 0x41, 0x1b, 0x9e]),
            (17, [0x9c, 0x41, 0x13, 0x89]),
        ] {
            let mut k: FcKey = [0; 40];
            k[0..4].copy_from_slice(&7u32.to_ne_bytes());
            k[4..16].copy_from_slice(&[0x0a, 0x58, 10, 128, 0, 3, 0x0a, 0x58, 10, 128, 0, 2]);
            k[16..24].copy_from_slice(&[10, 128, 0, 2, 10, 128, 0, 3]);
            k[24] = proto;
            k[25] = 0x10;
            k[26] = 64;
            k[28..30].copy_from_slice(&l4[0..2]);
            k[30..32].copy_from_slice(&l4[2..4]);
            let f = frame_of(&k).expect("a frame");
            assert_eq!(frame_key(&f, 7), Some(k), "proto {proto}");
        }
        let mut icmp: FcKey = [0; 40];
        icmp[0..4].copy_from_slice(&3u32.to_ne_bytes());
        icmp[16..24].copy_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        icmp[24] = 1;
        icmp[26] = 63;
        icmp[29] = 8;
        let f = frame_of(&icmp).expect("a frame");
        assert_eq!(frame_key(&f, 3), Some(icmp));
        let mut other = icmp;
        other[24] = 47;
        assert!(frame_of(&other).is_none());
    }
}
