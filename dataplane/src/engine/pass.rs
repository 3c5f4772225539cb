//! A packet's passes through the pipeline: translate, let the XDP cache
//! follow, execute; then the `ct(table=N)` fork or recirculation the
//! actions made, if any, as the next pass, up to `MAX_RECIRC_DEPTH`
//! times (see the `engine` module for the design).
//!
//! Every pass reads the packet's [`PacketCtx`]: its key is translated as
//! it is, and a recirculated pass takes the fork's key, layers and
//! frame into the same context.

use super::packet_ctx::{Headers, NextPass, PacketCtx};
use super::xdp::XdpChain;
use super::{Desc, Engine, Frames, PortIo, MAX_RECIRC_DEPTH};
use flowtable::key::FlowKey;

impl<F: Frames, P: PortIo<F>> Engine<F, P> {
    /// Runs a parsed packet through the pipeline: its first pass and
    /// then each fork's, up to [`MAX_RECIRC_DEPTH`].
    pub(super) fn process(&mut self, ctx: &mut PacketCtx) {
        // A received frame the XDP program could look up: its passes are
        // followed, and the whole translation handed to the kernel if it
        // can carry it out (see `xdp/`).
        let mut chain = if ctx.xdp_key.is_some() {
            ctx.xdp_key.take().map(XdpChain::new)
        } else {
            None
        };
        self.process_pass(ctx, &mut chain);
        let mut depth = 1;
        while ctx.next.is_some() {
            if depth > MAX_RECIRC_DEPTH {
                self.drops.ct_recirc_depth += 1;
                if let Some(n) = ctx.next.take() {
                    self.frames.free(n.desc.addr);
                }
                return;
            }
            depth += 1;
            self.pmd.recirculations += 1;
            ctx.resume();
            self.process_pass(ctx, &mut chain);
        }
    }

    /// One pass: translates the context's key, follows `chain`,
    /// executes; the fork to run next, if the actions made one, is left
    /// in `ctx.next`.
    fn process_pass(&mut self, ctx: &mut PacketCtx, chain: &mut Option<XdpChain>) {
        match &mut self.cache {
            _ if self.fail_open => self.xlate.set_normal(),
            Some(c) => c.xlate(&self.pipeline, ctx.key(), ctx.desc.len, &mut self.xlate),
            None => self
                .pipeline
                .xlate(ctx.key(), ctx.desc.len, &mut self.xlate),
        }
        self.xdp_pass(ctx.in_port, chain, ctx.key());
        self.execute(ctx);
        if let Some(c) = chain {
            // The pass was a `ct(table=N)` fork: the connection must
            // be one the kernel may carry.
            if !(ctx.next.is_some() && c.tracked(ctx.key(), ctx.next_key())) {
                *chain = None;
            }
        }
        if self.xdp.is_some() {
            // Entries of connections this `ct()` changed go before
            // the packet that changed them leaves.
            self.xdp_forget_dead();
        }
    }

    /// The packet of a `DpAction::Recirc` as the next pass takes it: the
    /// translation's recirculation key, written into the context's next
    /// key slot, with the frame's headers, from the packet's parse if no
    /// action rewrote them, else parsed again. `None` if the translation
    /// made no recirculation key.
    pub(super) fn reparse(&mut self, ctx: &mut PacketCtx, desc: Desc) -> Option<NextPass> {
        self.xlate.recirc()?;
        let mut fresh = None;
        let layers = if ctx.headers == Headers::Parsed {
            ctx.layers
        } else {
            let mut pkt = FlowKey::zero();
            let layers = self.parse_frame(ctx.in_port, desc, &mut pkt);
            fresh = Some(pkt);
            layers
        };
        let recirc = self.xlate.recirc()?;
        let (cur, next) = ctx.keys_mut();
        *next = *recirc;
        next.set_headers_from(fresh.as_ref().unwrap_or(cur));
        Some(NextPass {
            desc,
            layers,
            headers: Headers::Parsed,
        })
    }
}
