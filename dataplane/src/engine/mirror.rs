//! The packet thread's side of port mirroring (`crate::mirror`): the
//! ports' masks refreshed when the bridge's mirrors or ports change, and
//! the copies, taken on receipt (`select_src_port`) and on output
//! (`select_dst_port`), each packet at most once per mirror.

use super::{Desc, Engine, Frames, PortIo};
use crate::mirror::PortMirrors;

impl<F: Frames, P: PortIo<F>> Engine<F, P> {
    /// Picks up changed mirrors; once per round, one atomic load when
    /// nothing changed. A port that gains a part in a mirror retires the
    /// XDP flow cache's entries: the kernel path copies nothing, so
    /// mirrored ports' traffic is kept off it (`xdp::fc_action`).
    pub(super) fn sync_mirrors(&mut self) {
        let generation = self.shared.mirrors().generation();
        if generation == self.mirror_gen && !self.mirror_ports_dirty {
            return;
        }
        let Some(mirrors) = self.shared.mirrors().try_snapshot() else {
            return;
        };
        self.mirror_gen = generation;
        self.mirror_ports_dirty = false;
        self.mirror_reaped = false;
        self.mirrors = mirrors;
        let mut gained = false;
        for port in &mut self.ports {
            let now = PortMirrors::of(&port.meta.name, &self.mirrors);
            gained |= now.any() && !port.mirrors.any();
            port.mirrors = now;
        }
        if gained {
            if let Some(x) = &mut self.xdp {
                x.invalidate();
            }
        }
    }

    /// Copies `desc` to the mirrors of `mask` it has not been copied to
    /// (`mirrored`, the packet's, says which it has).
    #[inline]
    pub(super) fn mirror_copy(&mut self, mask: u32, desc: Desc, mirrored: &mut u32) {
        let mut todo = mask & !*mirrored;
        if todo == 0 {
            return;
        }
        *mirrored |= todo;
        let frame = self.frames.bytes(desc.addr, desc.len);
        let mut gone = false;
        while todo != 0 {
            let i = todo.trailing_zeros() as usize;
            todo &= todo - 1;
            if let Some(m) = self.mirrors.get(i) {
                gone |= !m.copy(frame);
            }
        }
        // A capture's reader died: once per capture (its mask bit is
        // cleared at the next round), not per packet.
        if gone && !self.mirror_reaped {
            self.mirror_reaped = self.shared.mirrors().reap();
        }
    }
}
