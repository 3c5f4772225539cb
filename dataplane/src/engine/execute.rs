//! Carrying out a translation: rewrites, outputs, conntrack forks,
//! NORMAL, the controllers, and PACKET_OUTs.

use super::packet_ctx::{NextPass, PacketCtx};
use super::{Desc, Engine, Frames, PortIo, BATCH};
use crate::control::Upcall;
use crate::engine::tunnel::TunnelMeta;
use crate::meter::{self, Verdict};
use flowtable::key::Field;
use flowtable::pipeline::{DpAction, DropReason};
use xbr_packet::rewrite;

/// OFPCML_NO_BUFFER: a `controller` action's "send the whole packet".
const CONTROLLER_MAX_LEN_ALL: u16 = 0xffff;
/// Ethernet's minimum frame length, without the FCS.
const ETH_MIN_LEN: u32 = 60;

/// Bytes left in front of a PACKET_OUT's data: the kernel's
/// `XDP_PACKET_HEADROOM`, what received frames have.
const PACKET_OUT_HEADROOM: u64 = crate::xsk::XDP_PACKET_HEADROOM as u64;

impl<F: Frames, P: PortIo<F>> Engine<F, P> {
    /// Carries out the translation in `self.xlate` on the frame of `ctx`,
    /// which it consumes. The `ct(table=N)` fork or recirculation to run
    /// next, if the actions made one, is left in `ctx.next` (its key in
    /// the context's next key slot).
    pub(super) fn execute(&mut self, ctx: &mut PacketCtx) {
        ctx.next = self.execute_actions(ctx);
    }

    fn execute_actions(&mut self, ctx: &mut PacketCtx) -> Option<NextPass> {
        let (in_port, mut desc, mut layers) = (ctx.in_port, ctx.desc, ctx.layers);
        // What the actions do to the frame, in one pass over them: how
        // many outputs take it, whether a controller gets a copy, and
        // whether conntrack or a meter sees it.
        let (mut outputs, mut to_controller, mut tracks) = (0usize, false, false);
        for a in self.xlate.actions() {
            match a {
                DpAction::Output { .. } | DpAction::Recirc => outputs += 1,
                DpAction::Flood | DpAction::Normal => outputs += self.ports.len(),
                // The tracked fork consumes a packet like an output.
                DpAction::Ct { table: Some(_), .. } => {
                    outputs += 1;
                    tracks = true;
                }
                // `ct(commit)` acts even on a packet that goes nowhere
                // after it, and a meter counts it.
                DpAction::Ct { table: None, .. } | DpAction::Meter(_) => tracks = true,
                DpAction::Controller { .. } => to_controller = true,
                DpAction::SetField { .. }
                | DpAction::PushVlan { .. }
                | DpAction::PopVlan
                | DpAction::PushMpls { .. }
                | DpAction::PopMpls { .. }
                | DpAction::CopyTtl { .. }
                | DpAction::PushPbb { .. }
                | DpAction::PopPbb => {}
            }
        }
        if outputs == 0 && !to_controller && !tracks {
            self.drops
                .count(self.xlate.drop_reason().unwrap_or(DropReason::ExplicitDrop));
            self.frames.free(desc.addr);
            return None;
        }
        let mut recirc = None;
        // Outputs still to come, so the last one can take the original frame.
        let mut remaining = outputs;
        for i in 0..self.xlate.actions().len() {
            match self.xlate.actions()[i] {
                DpAction::SetField { field, value } => {
                    let frame = self.frames.bytes(desc.addr, desc.len);
                    rewrite::set_field(frame, layers, field, value);
                    ctx.rewrote();
                }
                DpAction::PushVlan { tci } => {
                    let frame = self.frames.bytes(desc.addr, desc.len + 4);
                    if let Some(moved) = rewrite::push_vlan(frame, desc.len as usize, tci, layers) {
                        desc.len += 4;
                        layers = moved;
                        ctx.rewrote();
                    }
                }
                DpAction::PopVlan => {
                    let frame = self.frames.bytes(desc.addr, desc.len);
                    if let Some(moved) = rewrite::pop_vlan(frame, layers) {
                        desc.len -= 4;
                        layers = moved;
                        ctx.rewrote();
                    }
                }
                DpAction::PushMpls { ethertype, lse } => {
                    let frame = self.frames.bytes(desc.addr, desc.len + 4);
                    let len = desc.len as usize;
                    if let Some(moved) = rewrite::push_mpls(frame, len, ethertype, lse, layers) {
                        desc.len += 4;
                        layers = moved;
                        ctx.rewrote();
                    }
                }
                DpAction::PopMpls { ethertype } => {
                    let frame = self.frames.bytes(desc.addr, desc.len);
                    if let Some(moved) = rewrite::pop_mpls(frame, ethertype, layers) {
                        self.shorten(&mut desc, 4);
                        layers = moved;
                        ctx.rewrote();
                    }
                }
                DpAction::PushPbb { isid } => {
                    let grow = rewrite::PBB_HEADER_LEN as u32;
                    let frame = self.frames.bytes(desc.addr, desc.len + grow);
                    if let Some(moved) = rewrite::push_pbb(frame, desc.len as usize, isid) {
                        desc.len += grow;
                        layers = moved;
                        ctx.rewrote();
                    }
                }
                DpAction::PopPbb => {
                    let frame = self.frames.bytes(desc.addr, desc.len);
                    if let Some((removed, moved)) = rewrite::pop_pbb(frame, layers) {
                        self.shorten(&mut desc, removed as u32);
                        layers = moved;
                        ctx.rewrote();
                    }
                }
                DpAction::CopyTtl { out } => {
                    let frame = self.frames.bytes(desc.addr, desc.len);
                    rewrite::copy_ttl(frame, layers, out);
                    ctx.rewrote();
                }
                DpAction::Recirc => {
                    remaining -= 1;
                    // The last action: the frame is the pass's own.
                    recirc = self.reparse(ctx, desc);
                    if recirc.is_none() {
                        self.frames.free(desc.addr);
                    }
                }
                DpAction::Meter(id) => match self.run_meter(id, desc.len) {
                    Verdict::Pass => {}
                    Verdict::Remark(level) => {
                        let frame = self.frames.bytes(desc.addr, desc.len);
                        meter::remark_dscp(frame, layers, level);
                        ctx.rewrote();
                    }
                    Verdict::Drop => {
                        // The packet's remaining actions are not run; the
                        // outputs before the meter happened. The frame is
                        // still ours unless the last output took it.
                        self.drops.meter += 1;
                        if outputs == 0 || remaining > 0 {
                            self.frames.free(desc.addr);
                        }
                        return recirc;
                    }
                },
                a @ DpAction::Controller { .. } => {
                    self.upcall(in_port, desc, ctx.key().get(Field::TunId), a)
                }
                a @ DpAction::Ct {
                    table: None, nat, ..
                } => {
                    self.run_ct(ctx, desc, a);
                    if nat.is_some() {
                        // NAT may have rewritten the frame in place.
                        ctx.rewrote();
                    }
                }
                a @ DpAction::Ct { .. } => {
                    remaining -= 1;
                    // The fork gets its own frame unless nothing else
                    // follows: NAT must not leak into the original.
                    let fork = if remaining == 0 {
                        Some(desc)
                    } else {
                        let copy = self.frames.copy(desc);
                        if copy.is_none() {
                            self.drops.no_frames += 1;
                        }
                        copy
                    };
                    if let Some(fork) = fork {
                        recirc = self.run_ct(ctx, fork, a);
                        if recirc.is_none() {
                            self.frames.free(fork.addr);
                        }
                    }
                }
                DpAction::Normal => {
                    // A mirror's output port is reserved for it, as in
                    // OVS: NORMAL drops what it receives and never sends
                    // it anything.
                    let reserved = super::live_ports::index_in(&self.port_index, in_port)
                        .is_some_and(|i| self.ports[i].mirrors.output);
                    // Learned destination: that port only; else flood.
                    let target = if reserved {
                        None
                    } else {
                        self.normal_target(in_port, desc)
                    };
                    for p in 0..self.ports.len() {
                        remaining -= 1;
                        let port = self.ports[p].meta.ofport;
                        if port == in_port
                            || reserved
                            || self.ports[p].mirrors.output
                            || target.is_some_and(|t| t != port)
                        {
                            if remaining == 0 {
                                self.frames.free(desc.addr);
                            }
                            continue;
                        }
                        self.output(ctx, port, desc, remaining == 0, TunnelMeta::default());
                    }
                }
                DpAction::Output {
                    port,
                    tun_id,
                    tun_dst,
                } => {
                    remaining -= 1;
                    let tun = TunnelMeta {
                        tun_id,
                        tun_src: 0,
                        tun_dst,
                    };
                    self.output(ctx, port, desc, remaining == 0, tun);
                }
                DpAction::Flood => {
                    for p in 0..self.ports.len() {
                        remaining -= 1;
                        let port = self.ports[p].meta.ofport;
                        if port == in_port {
                            if remaining == 0 {
                                self.frames.free(desc.addr);
                            }
                            continue;
                        }
                        self.output(ctx, port, desc, remaining == 0, TunnelMeta::default());
                    }
                }
            }
        }
        if outputs == 0 {
            // Only the controller took a copy, or only conntrack saw it.
            if !to_controller {
                self.drops
                    .count(self.xlate.drop_reason().unwrap_or(DropReason::ExplicitDrop));
            }
            self.frames.free(desc.addr);
        }
        recirc
    }

    /// The frame `desc` after a pop removed `by` bytes from it. One the
    /// pop takes below Ethernet's minimum goes out padded back to it with
    /// zeros, as a NIC would send it (a veth would not).
    fn shorten(&mut self, desc: &mut Desc, by: u32) {
        let min = desc.len.min(ETH_MIN_LEN);
        desc.len = desc.len.saturating_sub(by);
        if desc.len < min {
            let frame = self.frames.bytes(desc.addr, min);
            if let Some(tail) = frame.get_mut(desc.len as usize..) {
                tail.fill(0);
            }
            desc.len = frame.len() as u32;
        }
    }

    /// NORMAL's forwarding decision: learns the source MAC on `in_port`
    /// and returns the port the destination was learned on (`None`:
    /// flood).
    pub(super) fn normal_target(&mut self, in_port: u32, desc: Desc) -> Option<u32> {
        let frame = self.frames.bytes(desc.addr, desc.len);
        let mac = |at: usize| {
            frame
                .get(at..at + 6)
                .map(|b| b.iter().fold(0u64, |m, x| (m << 8) | u64::from(*x)))
        };
        let (dst, src) = (mac(0)?, mac(6)?);
        self.macs.learn(src, in_port, self.now_secs);
        self.macs.lookup(dst, self.now_secs)
    }

    /// Queues a copy of the frame (cut to the action's max_len) for the
    /// controllers.
    pub(super) fn upcall(&mut self, in_port: u32, desc: Desc, tun_id: u64, action: DpAction) {
        let DpAction::Controller {
            max_len,
            reason,
            table_id,
            cookie,
        } = action
        else {
            return;
        };
        let frame = self.frames.bytes(desc.addr, desc.len);
        let keep = if max_len == CONTROLLER_MAX_LEN_ALL {
            frame.len()
        } else {
            frame.len().min(usize::from(max_len))
        };
        let up = Upcall {
            in_port,
            tun_id,
            reason,
            table_id,
            cookie,
            total_len: u16::try_from(desc.len).unwrap_or(u16::MAX),
            data: frame.get(..keep).unwrap_or_default().to_vec(),
        };
        if !self.changes.upcall(up) {
            self.drops.upcall_queue_full += 1;
        }
    }

    /// Copies `data` into a frame of this thread's, or counts why it
    /// could not (no frame free, or too big for any).
    fn load_frame(&mut self, data: &[u8]) -> Option<Desc> {
        let Some(base) = self.frames.alloc() else {
            self.drops.no_frames += 1;
            return None;
        };
        let len = u32::try_from(data.len()).unwrap_or(u32::MAX);
        // After a headroom, as received frames have, so that an output
        // can push headers (a tunnel's encapsulation) in front. Larger
        // than a frame holds so (a jumbo MTU's packet): in a jumbo block,
        // or at a frame's start if no block is free.
        let mut addr = base + PACKET_OUT_HEADROOM;
        if self.frames.bytes(addr, len).len() != data.len() {
            addr = match self.frames.alloc_large() {
                Some(block) => {
                    self.frames.free(base);
                    block + PACKET_OUT_HEADROOM
                }
                None => base,
            };
        }
        let buf = self.frames.bytes(addr, len);
        if buf.len() != data.len() {
            self.drops.packet_out_too_big += 1;
            self.frames.free(addr);
            return None;
        }
        buf.copy_from_slice(data);
        Some(Desc { addr, len })
    }

    /// Outputs what the other packet threads handed off to this one's
    /// ports (see `handoff.rs`); returns how many packets.
    pub(super) fn run_handoffs(&mut self) -> usize {
        let Some(threads) = self.handoff.as_ref().map(|h| h.threads()) else {
            return 0;
        };
        let mut n = 0;
        // One context for every frame, each handed off alike.
        let mut ctx = PacketCtx::handed_off(0, Desc::default(), 0);
        for from in 0..threads {
            let Some(parcel) = self.handoff.as_mut().and_then(|h| h.take(from)) else {
                continue;
            };
            for (item, data) in parcel.iter() {
                n += 1;
                match self.load_frame(data) {
                    Some(desc) => {
                        // Parsed and mirrored by the thread that handed it off.
                        ctx.hand_off(item.port, desc, item.flow_hash);
                        self.output(&mut ctx, item.port, desc, true, item.tun);
                    }
                    None => {
                        if let Some(i) = super::live_ports::index_in(&self.port_index, item.port) {
                            self.ports[i].totals.tx_dropped += 1;
                        }
                    }
                }
            }
            if let Some(h) = &mut self.handoff {
                h.give_back(parcel);
            }
        }
        n
    }

    /// Runs up to a batch of queued PACKET_OUTs; returns how many.
    pub(super) fn run_packet_outs(&mut self) -> usize {
        let mut n = 0;
        while n < BATCH {
            let Some(req) = self.changes.try_packet_out() else {
                break;
            };
            n += 1;
            let Some(Desc { addr, len }) = self.load_frame(&req.data) else {
                continue;
            };
            let mut ctx = PacketCtx::unparsed(req.in_port, Desc { addr, len });
            ctx.layers = self.parse_frame(ctx.in_port, ctx.desc, ctx.key_mut());
            for &(field, value) in &req.metadata {
                ctx.key_mut().set(field, value);
            }
            self.pipeline
                .xlate_actions(ctx.key(), len, &req.actions, &mut self.xlate);
            self.execute(&mut ctx);
            if ctx.resume() {
                // A PACKET_OUT's `ct(table=N)` resumes like a received
                // packet's.
                self.process(&mut ctx);
            }
        }
        n
    }
}
