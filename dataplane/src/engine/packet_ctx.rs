//! One packet's context: what the receive stages learn of a packet,
//! parsed once, and what every later stage reads instead of parsing the
//! frame again.
//!
//! # Design
//!
//! A [`PacketCtx`] is built by the parse stage (`receive.rs`) from the
//! frame as the pipeline sees it (the inner frame of a decapsulated
//! packet): one `parse::extract` (`Engine::parse_frame`, counted in
//! `pmd.parses`) fills the flow key and the layer offsets, the tunnel metadata goes into the key, and the XDP cache key
//! is derived from that parse (`fastpath::cache::entry::key_of`), not read from
//! the bytes a second time. It is then handed by `&mut` through the
//! passes (`pass.rs`): translation reads the key; conntrack
//! (`ct.rs`) reads the key and layers for its tuple; the tunnel stage
//! hashes the inner flow for the outer source port from the key
//! (`vxlan::encap::flow_hash`); the XDP cache follows the passes from
//! the XDP key. Nothing of it is kept on `Engine`: it lives on the
//! packet thread's stack, one per receive batch, reset for each packet.
//!
//! A pass whose actions fork the packet (`ct(table=N)`, a recirculation)
//! writes the next pass's key into the context's second key slot, in
//! place (`PacketCtx::keys_mut`), and leaves the frame and layers in
//! `next`; `resume` makes that slot the current key. So a packet through
//! `ct()`, every IP packet under the agent's flows, moves no key between
//! its passes.
//!
//! Invariant: while `headers` is [`Headers::Parsed`], the key's header
//! fields and `layers` are exactly what `parse::extract` would find in
//! the frame `desc` now. An action that rewrites the frame (set_field,
//! push/pop of a tag or label, TTL copy, a meter's remark, NAT) marks
//! the headers [`Headers::Rewritten`]; a stage that needs them then
//! parses the frame again (the rewritten frame is in effect a new packet:
//! at most once more per pass, never for the agent's VXLAN path).
//!
//! Cost: per packet, the parse itself (a 216-byte key, zeroed and
//! filled in place) plus a few stores; per fork, one copy of the
//! translation's resume key into the other slot; no allocation.

use super::frames::{Desc, Frames};
use super::tunnel::TunnelMeta;
use super::{Engine, PortIo};
use crate::fastpath::cache::{entry, FcKey};
use flowtable::key::{Field, FlowKey};
use xbr_packet::parse::{self, Layers};

/// A packet's next pass, made by its actions (a `ct(table=N)` fork or a
/// recirculation): its frame and layers, waiting until the current pass
/// is done. The key it is translated from is written in place, in the
/// context's other key slot ([`PacketCtx::keys_mut`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct NextPass {
    pub(super) desc: Desc,
    pub(super) layers: Layers,
    pub(super) headers: Headers,
}

/// Whether the key still describes the frame's headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Headers {
    /// The key's header fields and the layers are the frame's.
    Parsed,
    /// An action rewrote the frame since it was parsed.
    Rewritten,
    /// A frame handed off by another packet thread, which parsed it and
    /// sends the inner flow's hash along (the key is not filled in).
    HandedOff { flow_hash: u32 },
}

/// One packet on its way through the engine's stages.
pub(super) struct PacketCtx {
    /// The OpenFlow port it arrived on.
    pub(super) in_port: u32,
    /// The frame (the inner frame, once decapsulated).
    pub(super) desc: Desc,
    /// Layer offsets in the frame.
    pub(super) layers: Layers,
    /// Two flow key slots: the current pass's (`keys[cur]`: headers from
    /// the parse, tunnel metadata from the decapsulation, the pipeline's
    /// metadata once it recirculates) and the next pass's, which a
    /// `ct(table=N)` fork or recirculation fills in place; `resume` flips
    /// them, so no key is moved from pass to pass.
    keys: [FlowKey; 2],
    cur: usize,
    pub(super) headers: Headers,
    /// The next pass the current one's actions made, if any.
    pub(super) next: Option<NextPass>,
    /// The XDP cache key the port's XDP program would look the frame up
    /// by, when the XDP cache is on and could take over the flow.
    pub(super) xdp_key: Option<FcKey>,
    /// The mirrors the packet was copied to (each gets one copy).
    pub(super) mirrored: u32,
}

impl PacketCtx {
    /// The context of the frame `desc` that came in on `in_port` (a
    /// port, or a PACKET_OUT's), before its parse (`Engine::parse_frame`
    /// fills it in place: the context is a few hundred bytes, not worth
    /// moving). A receive batch makes one and [`reset`](Self::reset)s it
    /// for each packet.
    #[inline]
    pub(super) fn unparsed(in_port: u32, desc: Desc) -> Self {
        PacketCtx {
            in_port,
            desc,
            layers: Layers::default(),
            keys: [FlowKey::zero(); 2],
            cur: 0,
            headers: Headers::Parsed,
            next: None,
            xdp_key: None,
            mirrored: 0,
        }
    }

    /// Makes the context the unparsed one of the frame `desc`, which came
    /// in on the same port as the frame before: every field but the keys,
    /// which the parse stage and the passes overwrite whole.
    #[inline]
    pub(super) fn reset(&mut self, desc: Desc) {
        self.desc = desc;
        self.layers = Layers::default();
        self.headers = Headers::Parsed;
        self.next = None;
        self.xdp_key = None;
        self.mirrored = 0;
    }

    /// A frame another packet thread handed off for output on `port`
    /// (it parsed it, mirrored it, and hashed its inner flow).
    pub(super) fn handed_off(port: u32, desc: Desc, flow_hash: u32) -> Self {
        let mut ctx = Self::unparsed(port, desc);
        ctx.hand_off(port, desc, flow_hash);
        ctx
    }

    /// Makes the context that of another handed-off frame (see
    /// [`handed_off`](Self::handed_off)); its keys are not read.
    pub(super) fn hand_off(&mut self, port: u32, desc: Desc, flow_hash: u32) {
        self.reset(desc);
        self.in_port = port;
        self.headers = Headers::HandedOff { flow_hash };
        self.mirrored = u32::MAX;
    }

    /// The current pass's flow key.
    #[inline]
    pub(super) fn key(&self) -> &FlowKey {
        &self.keys[self.cur]
    }

    #[inline]
    pub(super) fn key_mut(&mut self) -> &mut FlowKey {
        &mut self.keys[self.cur]
    }

    /// The next pass's key slot (meaningful once `next` is set).
    #[inline]
    pub(super) fn next_key(&self) -> &FlowKey {
        &self.keys[1 - self.cur]
    }

    /// The current pass's key, and the next pass's slot to fill.
    #[inline]
    pub(super) fn keys_mut(&mut self) -> (&FlowKey, &mut FlowKey) {
        let [a, b] = &mut self.keys;
        if self.cur == 0 {
            (a, b)
        } else {
            (b, a)
        }
    }

    /// The hash of the inner flow of this packet's frame for a tunnel's
    /// outer source port, from the parse; `None` once an action rewrote
    /// the headers (the frame must then be parsed again).
    pub(super) fn flow_hash(&self) -> Option<u32> {
        match self.headers {
            Headers::Parsed => Some(crate::vxlan::encap::flow_hash(self.key())),
            Headers::HandedOff { flow_hash } => Some(flow_hash),
            Headers::Rewritten => None,
        }
    }

    /// Makes the next pass (`next`, whose key is in the other slot) the
    /// current one; false if the actions made none.
    #[inline]
    pub(super) fn resume(&mut self) -> bool {
        let Some(n) = self.next.take() else {
            return false;
        };
        self.desc = n.desc;
        self.layers = n.layers;
        self.headers = n.headers;
        self.cur = 1 - self.cur;
        true
    }

    /// An action changed the frame's headers.
    #[inline]
    pub(super) fn rewrote(&mut self) {
        if self.headers == Headers::Parsed {
            self.headers = Headers::Rewritten;
        }
    }
}

impl<F: Frames, P: PortIo<F>> Engine<F, P> {
    /// The parse stage of a received packet: its frame parsed into the
    /// context's key and layers, the tunnel metadata it was decapsulated
    /// with (if it came by a tunnel) set in the key, and the XDP cache
    /// key derived from the parse when `xdp_ifindex` (the device whose
    /// XDP program could look the frame up, with the cache on) is given.
    #[inline]
    pub(super) fn parse_received(
        &mut self,
        ctx: &mut PacketCtx,
        tunnel: Option<TunnelMeta>,
        xdp_ifindex: Option<u32>,
    ) {
        let (in_port, desc) = (ctx.in_port, ctx.desc);
        ctx.layers = self.parse_frame(in_port, desc, ctx.key_mut());
        ctx.xdp_key =
            xdp_ifindex.and_then(|i| entry::key_of(ctx.key(), ctx.layers, desc.len as usize, i));
        if let Some(t) = tunnel {
            let key = ctx.key_mut();
            key.set(Field::TunId, t.tun_id);
            key.set(Field::TunSrc, u64::from(t.tun_src));
            key.set(Field::TunDst, u64::from(t.tun_dst));
            // Decapsulated: keyed as the uplink's program keys it.
            if let Some(k) = &mut ctx.xdp_key {
                entry::set_tunnel(k, t.tun_src, t.tun_id as u32);
            }
        }
    }

    /// The one place the packet thread parses a frame: `desc`, received
    /// on `in_port`, into `key` (counted in `pmd.parses`, so tests and
    /// benchmarks can see how often a packet is parsed).
    #[inline]
    pub(super) fn parse_frame(&mut self, in_port: u32, desc: Desc, key: &mut FlowKey) -> Layers {
        self.pmd.parses += 1;
        parse::extract(self.frames.bytes(desc.addr, desc.len), in_port, key)
    }

    /// The hash of the inner flow of `desc`, the frame of packet `ctx`,
    /// for a tunnel's outer source port: from the packet's parse, or
    /// from a new one if an action rewrote the headers.
    pub(super) fn flow_hash(&mut self, ctx: &PacketCtx, desc: Desc) -> u32 {
        if let Some(h) = ctx.flow_hash() {
            return h;
        }
        let mut key = FlowKey::zero();
        self.parse_frame(ctx.in_port, desc, &mut key);
        crate::vxlan::encap::flow_hash(&key)
    }
}
