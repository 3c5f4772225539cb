//! In-memory frames and ports: the engine without a kernel, for unit tests
//! and for benchmarks that measure xbr's own per-packet cost.

use crate::engine::{Desc, Frames, PortIo};
use std::collections::VecDeque;
use std::os::fd::BorrowedFd;

/// A fixed arena of equal frames with a free stack, like the UMEM pool.
pub struct ArenaFrames {
    mem: Vec<u8>,
    frame_size: u32,
    free: Vec<u64>,
}

impl ArenaFrames {
    pub fn new(n_frames: u32, frame_size: u32) -> Self {
        ArenaFrames {
            mem: vec![0; (n_frames * frame_size) as usize],
            frame_size,
            free: (0..n_frames as u64)
                .rev()
                .map(|i| i * frame_size as u64)
                .collect(),
        }
    }

    pub fn free_frames(&self) -> usize {
        self.free.len()
    }

    /// Copies `bytes` into a new frame.
    pub fn load(&mut self, bytes: &[u8]) -> Option<Desc> {
        self.load_at(bytes, 0)
    }

    /// Copies `bytes` into a new frame after `headroom` bytes, as the
    /// kernel places received packets.
    pub fn load_at(&mut self, bytes: &[u8], headroom: u32) -> Option<Desc> {
        let headroom = headroom.min(self.frame_size);
        let addr = self.alloc()? + u64::from(headroom);
        let len = bytes.len().min((self.frame_size - headroom) as usize);
        self.bytes(addr, len as u32).copy_from_slice(&bytes[..len]);
        Some(Desc {
            addr,
            len: len as u32,
        })
    }
}

impl Frames for ArenaFrames {
    fn alloc(&mut self) -> Option<u64> {
        self.free.pop()
    }

    fn free(&mut self, addr: u64) {
        let base = addr - addr % self.frame_size as u64;
        debug_assert!(!self.free.contains(&base), "double free of frame {base}");
        self.free.push(base);
    }

    fn bytes(&mut self, addr: u64, len: u32) -> &mut [u8] {
        let start = addr as usize;
        let base = start - start % self.frame_size as usize;
        let end = (start + len as usize).min(base + self.frame_size as usize);
        &mut self.mem[start..end]
    }

    fn headroom(&self, addr: u64) -> u32 {
        (addr % u64::from(self.frame_size)) as u32
    }

    fn copy(&mut self, src: Desc) -> Option<Desc> {
        // Same offset in the new frame, so its headroom is kept.
        let addr = self.alloc()? + src.addr % u64::from(self.frame_size);
        let len = src.len.min(self.frame_size);
        self.mem.copy_within(
            src.addr as usize..src.addr as usize + len as usize,
            addr as usize,
        );
        Some(Desc { addr, len })
    }
}

/// A port whose wire is two queues: frames to receive (owned by the arena,
/// loaded by the test) and the bytes it transmitted.
#[derive(Default)]
pub struct MemPort {
    pub rx: VecDeque<Desc>,
    pub sent: Vec<Vec<u8>>,
    /// Transmit capacity per call, to model a full TX ring.
    pub tx_room: Option<usize>,
}

impl PortIo<ArenaFrames> for MemPort {
    fn recv(&mut self, _frames: &mut ArenaFrames, out: &mut [Desc]) -> usize {
        let n = out.len().min(self.rx.len());
        for slot in out.iter_mut().take(n) {
            if let Some(d) = self.rx.pop_front() {
                *slot = d;
            }
        }
        n
    }

    fn send(&mut self, frames: &mut ArenaFrames, descs: &[Desc]) -> usize {
        let n = self.tx_room.map_or(descs.len(), |r| r.min(descs.len()));
        for d in &descs[..n] {
            self.sent.push(frames.bytes(d.addr, d.len).to_vec());
            frames.free(d.addr);
        }
        n
    }

    fn maintain(&mut self, _frames: &mut ArenaFrames) {}

    fn poll_fds<'a>(&'a self, _out: &mut Vec<BorrowedFd<'a>>) {}
}
