//! The engine's side of `ct()`: running conntrack on a frame, and the
//! key its tracked fork re-enters the pipeline with (`pass.rs` runs it).

use super::packet_ctx::{Headers, NextPass, PacketCtx};
use super::{Desc, Engine, Frames, PortIo};
use crate::conntrack::{state, CtRequest};
use flowtable::key::{Field, FlowKey};
use flowtable::matching::{ETH_TYPE_IPV6, IP_PROTO_ICMP, IP_PROTO_ICMPV6};
use flowtable::pipeline::DpAction;

impl<F: Frames, P: PortIo<F>> Engine<F, P> {
    /// Whether `in_port` is a port to the host (see `PortIo::is_host`).
    pub(super) fn is_host_port(&self, in_port: u32) -> bool {
        super::live_ports::index_in(&self.port_index, in_port)
            .and_then(|i| self.ports.get(i))
            .is_some_and(|p| p.io.is_host())
    }

    /// Runs `ct()` on the frame `desc` of packet `ctx`: NAT in place, and
    /// for a `table=N` fork the key it re-enters the pipeline with,
    /// written into the context's next key slot. Conntrack reads the
    /// packet's parse unless an action rewrote its headers since.
    pub(super) fn run_ct(
        &mut self,
        ctx: &mut PacketCtx,
        desc: Desc,
        a: DpAction,
    ) -> Option<NextPass> {
        let DpAction::Ct {
            zone,
            commit,
            force,
            table,
            nat,
            mark,
            label,
        } = a
        else {
            return None;
        };
        let in_port = ctx.in_port;
        let req = CtRequest {
            zone,
            commit,
            force,
            nat,
            mark,
            label,
            from_host: self.is_host_port(in_port),
            in_port,
        };
        // Parsed again only if an action rewrote the headers.
        let mut reparsed = None;
        let layers = if ctx.headers == Headers::Parsed {
            ctx.layers
        } else {
            let mut k = FlowKey::zero();
            let layers = self.parse_frame(in_port, desc, &mut k);
            reparsed = Some(k);
            layers
        };
        let pkt = reparsed.as_ref().unwrap_or(ctx.key());
        let frame = self.frames.bytes(desc.addr, desc.len);
        let (outcome, datagram_l4) =
            self.conntrack
                .execute_datagram(frame, layers, pkt, &req, self.ct_now);
        table?;
        if outcome.state & (state::SNAT | state::DNAT) != 0 {
            // NAT rewrote the headers the pipeline will see: the fork is
            // a new packet.
            let mut natted = FlowKey::zero();
            self.parse_frame(in_port, desc, &mut natted);
            reparsed = Some(natted);
        }
        let recirc = self.xlate.recirc()?;
        let (cur, key) = ctx.keys_mut();
        *key = *recirc;
        key.set_headers_from(reparsed.as_ref().unwrap_or(cur));
        let mut headers = Headers::Parsed;
        if let Some(words) = datagram_l4 {
            // A tracked fragment continues as its whole datagram would,
            // as after the kernel's reassembly (see conntrack/frag.rs):
            // the key no longer says what the frame's headers do.
            as_whole_datagram(key, words);
            headers = Headers::Rewritten;
        }
        key.set(Field::CtState, u64::from(outcome.state));
        key.set(Field::CtZone, u64::from(outcome.zone));
        key.set(Field::CtMark, u64::from(outcome.mark));
        key.set_ct_label(outcome.label);
        Some(NextPass {
            desc,
            layers,
            headers,
        })
    }
}

/// Makes a fragment's key look like its reassembled datagram's: not a
/// fragment, with the datagram's L4 words (ports, or ICMP type and code).
fn as_whole_datagram(key: &mut FlowKey, (first, second): (u16, u16)) {
    key.set(Field::IpFrag, 0);
    let proto = key.get(Field::IpProto) as u8;
    let v6 = key.get(Field::EthType) == u64::from(ETH_TYPE_IPV6);
    if proto == IP_PROTO_ICMP && !v6 {
        key.set(Field::IcmpType, u64::from(first));
        key.set(Field::IcmpCode, u64::from(second));
    } else if proto == IP_PROTO_ICMPV6 && v6 {
        key.set(Field::Icmpv6Type, u64::from(first));
        key.set(Field::Icmpv6Code, u64::from(second));
    } else {
        key.set(Field::TpSrc, u64::from(first));
        key.set(Field::TpDst, u64::from(second));
    }
}
