//! The engine's side of `ct()`: running conntrack on a frame and
//! re-entering the pipeline with the tracked fork (see the `engine` module for the
//! design).

use super::xdp::XdpChain;
use super::{Desc, Engine, Frames, PortIo, MAX_RECIRC_DEPTH};
use crate::conntrack::{state, CtRequest};
use flowtable::key::{Field, FlowKey};
use flowtable::matching::{ETH_TYPE_IPV6, IP_PROTO_ICMP, IP_PROTO_ICMPV6};
use flowtable::pipeline::DpAction;
use xbr_packet::parse::{self, Layers};

/// A `ct(table=N)` fork waiting to re-enter the pipeline.
pub(super) struct Recirc {
    pub(super) desc: Desc,
    pub(super) layers: Layers,
    pub(super) key: FlowKey,
}

impl<F: Frames, P: PortIo<F>> Engine<F, P> {
    /// Translates and executes a packet whose flow key is `key`, then its
    /// `ct(table=N)` forks, up to [`MAX_RECIRC_DEPTH`] times. The key is
    /// borrowed: most packets take one pass, and a key is too big to move
    /// for nothing.
    pub(super) fn process_recirc(
        &mut self,
        in_port: u32,
        desc: Desc,
        layers: Layers,
        key: &FlowKey,
    ) {
        // A received frame the XDP program could look up: its passes are
        // followed, and the whole translation handed to the kernel if it
        // can carry it out (see `xdp.rs`).
        let mut chain = self.rx_xdp_key.take().map(XdpChain::new);
        let mut next = self.process_pass(in_port, desc, layers, key, &mut chain);
        let mut depth = 1;
        while let Some(r) = next.take() {
            if depth > MAX_RECIRC_DEPTH {
                self.drops.ct_recirc_depth += 1;
                self.frames.free(r.desc.addr);
                return;
            }
            depth += 1;
            self.pmd.recirculations += 1;
            next = self.process_pass(in_port, r.desc, r.layers, &r.key, &mut chain);
        }
    }

    /// One pass: translates `key`, follows `chain`, executes; returns the
    /// fork to run next, if any.
    fn process_pass(
        &mut self,
        in_port: u32,
        desc: Desc,
        layers: Layers,
        key: &FlowKey,
        chain: &mut Option<XdpChain>,
    ) -> Option<Recirc> {
        match &mut self.cache {
            _ if self.fail_open => self.xlate.set_normal(),
            Some(c) => c.xlate(&self.pipeline, key, desc.len, &mut self.xlate),
            None => self.pipeline.xlate(key, desc.len, &mut self.xlate),
        }
        self.xdp_pass(in_port, chain, key);
        let next = self.execute(in_port, desc, layers, key.get(Field::TunId));
        if let Some(c) = chain {
            // The pass was a `ct(table=N)` fork: the connection must
            // be one the kernel may carry.
            if !next.as_ref().is_some_and(|r| c.tracked(key, &r.key)) {
                *chain = None;
            }
        }
        if self.xdp.is_some() {
            // Entries of connections this `ct()` changed go before
            // the packet that changed them leaves.
            self.xdp_forget_dead();
        }
        next
    }

    /// The packet of a `DpAction::Recirc` as the next pass takes it: its
    /// headers parsed again into the translation's recirculation key.
    pub(super) fn reparse(&mut self, in_port: u32, desc: Desc) -> Option<Recirc> {
        let mut key = *self.xlate.recirc()?;
        let mut pkt = FlowKey::zero();
        let layers = parse::extract(self.frames.bytes(desc.addr, desc.len), in_port, &mut pkt);
        key.set_headers_from(&pkt);
        Some(Recirc { desc, layers, key })
    }

    /// Whether `in_port` is a port to the host (see `PortIo::is_host`).
    pub(super) fn is_host_port(&self, in_port: u32) -> bool {
        super::live_ports::index_in(&self.port_index, in_port)
            .and_then(|i| self.ports.get(i))
            .is_some_and(|p| p.io.is_host())
    }

    /// Runs `ct()` on the frame `desc`: NAT in place, and for a `table=N`
    /// fork the key it re-enters the pipeline with.
    pub(super) fn run_ct(
        &mut self,
        in_port: u32,
        desc: Desc,
        layers: Layers,
        a: DpAction,
    ) -> Option<Recirc> {
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
        let frame = self.frames.bytes(desc.addr, desc.len);
        let mut pkt = FlowKey::zero();
        parse::extract(frame, in_port, &mut pkt);
        let (outcome, datagram_l4) =
            self.conntrack
                .execute_datagram(frame, layers, &pkt, &req, self.ct_now);
        table?;
        let mut key = *self.xlate.recirc()?;
        if outcome.state & (state::SNAT | state::DNAT) != 0 {
            // NAT rewrote the headers the pipeline will see.
            parse::extract(self.frames.bytes(desc.addr, desc.len), in_port, &mut pkt);
        }
        if let Some(words) = datagram_l4 {
            // A tracked fragment continues as its whole datagram would,
            // as after the kernel's reassembly (see conntrack/frag.rs).
            as_whole_datagram(&mut pkt, words);
        }
        key.set_headers_from(&pkt);
        key.set(Field::CtState, u64::from(outcome.state));
        key.set(Field::CtZone, u64::from(outcome.zone));
        key.set(Field::CtMark, u64::from(outcome.mark));
        key.set_ct_label(outcome.label);
        Some(Recirc { desc, layers, key })
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
