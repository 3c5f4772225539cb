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
//! packet thread's stack for one packet.
//!
//! Invariant: while `headers` is [`Headers::Parsed`], the key's header
//! fields and `layers` are exactly what `parse::extract` would find in
//! the frame `desc` now. An action that rewrites the frame (set_field,
//! push/pop of a tag or label, TTL copy, a meter's remark, NAT) marks
//! the headers [`Headers::Rewritten`]; a stage that needs them then
//! parses the frame again (the rewritten frame is in effect a new packet:
//! at most once more per pass, never for the agent's VXLAN path).
//!
//! Cost: building one is the parse itself (a 216-byte key, zeroed and
//! filled in place) plus a few stores; no allocation.

use super::frames::{Desc, Frames};
use super::tunnel::TunnelMeta;
use super::{Engine, PortIo};
use crate::fastpath::cache::{entry, FcKey};
use flowtable::key::{Field, FlowKey};
use xbr_packet::parse::{self, Layers};

/// A packet's next pass, made by its actions (a `ct(table=N)` fork or a
/// recirculation): the frame, its layers and the key the pass is
/// translated from, waiting until the current pass is done.
pub(super) struct Recirc {
    pub(super) desc: Desc,
    pub(super) layers: Layers,
    pub(super) key: FlowKey,
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
    /// The flow key: headers from the parse, tunnel metadata from the
    /// decapsulation, the pipeline's metadata once it recirculates.
    pub(super) key: FlowKey,
    pub(super) headers: Headers,
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
    /// moving).
    #[inline]
    pub(super) fn unparsed(in_port: u32, desc: Desc) -> Self {
        PacketCtx {
            in_port,
            desc,
            layers: Layers::default(),
            key: FlowKey::zero(),
            headers: Headers::Parsed,
            xdp_key: None,
            mirrored: 0,
        }
    }

    /// A frame another packet thread handed off for output on `port`
    /// (it parsed it, mirrored it, and hashed its inner flow).
    pub(super) fn handed_off(port: u32, desc: Desc, flow_hash: u32) -> Self {
        PacketCtx {
            in_port: port,
            desc,
            layers: Layers::default(),
            key: FlowKey::zero(),
            headers: Headers::HandedOff { flow_hash },
            xdp_key: None,
            mirrored: u32::MAX,
        }
    }

    /// The hash of the inner flow of this packet's frame for a tunnel's
    /// outer source port, from the parse; `None` once an action rewrote
    /// the headers (the frame must then be parsed again).
    pub(super) fn flow_hash(&self) -> Option<u32> {
        match self.headers {
            Headers::Parsed => Some(crate::vxlan::encap::flow_hash(&self.key)),
            Headers::HandedOff { flow_hash } => Some(flow_hash),
            Headers::Rewritten => None,
        }
    }

    /// Makes the context the next pass's.
    pub(super) fn resume(&mut self, r: Recirc) {
        self.desc = r.desc;
        self.layers = r.layers;
        self.key = r.key;
        self.headers = r.headers;
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
        ctx.layers = self.parse_frame(ctx.in_port, ctx.desc, &mut ctx.key);
        ctx.xdp_key =
            xdp_ifindex.and_then(|i| entry::key_of(&ctx.key, ctx.layers, ctx.desc.len as usize, i));
        if let Some(t) = tunnel {
            ctx.key.set(Field::TunId, t.tun_id);
            ctx.key.set(Field::TunSrc, u64::from(t.tun_src));
            ctx.key.set(Field::TunDst, u64::from(t.tun_dst));
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
