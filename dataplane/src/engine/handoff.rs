//! Packets a packet thread outputs to a port another packet thread owns.
//!
//! # Design
//!
//! With several packet threads every port has one owner: only the owner
//! receives from it and transmits to it, so a port's sockets, rings and
//! the frames in them stay one thread's, as with a single thread. Another
//! thread whose pipeline outputs to the port *hands the packet off*: it
//! appends the bytes, the port and the tunnel metadata to its outbox
//! toward the owner ([`Parcel`]); at the end of its round it delivers
//! each non-empty outbox into the mailbox it shares with that owner
//! ([`Mailbox`]); the owner empties its mailboxes at the start of its
//! next round, copies each packet into a frame of its own and outputs it
//! as its own pipeline would have, so encapsulation, egress QoS, waiting
//! for a tunnel's next hop and the port's counters stay with the owner.
//!
//! Why a copy, not the frame: frame pools stay private to their thread
//! (no frame is ever freed by a thread that did not take it), as OVS's
//! AF_XDP ports copy a packet into the transmitting port's UMEM. Small
//! packets, which dominate packet rates, cost two copies of their bytes;
//! hot flows are forwarded by the XDP flow cache in the kernel anyway.
//!
//! Cost: per packet, an append to a vector that keeps its capacity; per
//! round and destination thread, one lock taken (uncontended but for the
//! owner's own one take per round) and a swap of two vectors, no
//! allocation once warm; an eventfd write only if the owner sleeps
//! ([`Mesh::sleeping`], checked after the mailbox is marked pending, as
//! the owner checks its mailboxes after marking itself asleep: one of
//! the two always sees the other).
//!
//! Bound: a mailbox holds at most [`MAILBOX_PACKETS`] packets; an outbox
//! that would pass it is dropped whole and counted on its ports as
//! transmit drops, as a full TX ring's packets are.

use crate::engine::tunnel::TunnelMeta;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;

/// Most packets waiting in one mailbox (from one thread to another).
pub const MAILBOX_PACKETS: usize = 4096;

/// One handed-off packet: where it goes, and where its bytes are in its
/// parcel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Item {
    pub port: u32,
    pub tun: TunnelMeta,
    /// For a tunnel port: the inner flow's hash (the sender parsed the
    /// packet; see `PacketCtx::flow_hash`), else 0.
    pub flow_hash: u32,
    start: u32,
    len: u32,
}

/// Packets for one thread's ports, their bytes back to back.
#[derive(Default)]
pub struct Parcel {
    bytes: Vec<u8>,
    items: Vec<Item>,
}

impl Parcel {
    pub fn push(&mut self, port: u32, data: &[u8], tun: TunnelMeta, flow_hash: u32) {
        let start = self.bytes.len() as u32;
        self.bytes.extend_from_slice(data);
        self.items.push(Item {
            port,
            tun,
            flow_hash,
            start,
            len: data.len() as u32,
        });
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The packets, in the order they were pushed.
    pub fn iter(&self) -> impl Iterator<Item = (&Item, &[u8])> {
        self.items.iter().map(|i| {
            let start = i.start as usize;
            (i, &self.bytes[start..start + i.len as usize])
        })
    }

    /// Empties it, keeping its capacity.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.items.clear();
    }

    fn append(&mut self, other: &Parcel) {
        let base = self.bytes.len() as u32;
        self.bytes.extend_from_slice(&other.bytes);
        self.items.extend(other.items.iter().map(|i| Item {
            start: i.start + base,
            ..*i
        }));
    }
}

/// Packets from one thread to another, waiting for the receiver's round.
#[derive(Default)]
pub struct Mailbox {
    parcel: Mutex<Parcel>,
    /// Something is waiting (set after a delivery, cleared when taken).
    pending: AtomicBool,
}

/// Every pair of threads' mailboxes, and which threads sleep.
pub struct Mesh {
    threads: usize,
    /// `boxes[from * threads + to]`.
    boxes: Vec<Mailbox>,
    /// Per thread: it is about to sleep or sleeps in poll(2), and must be
    /// woken for a delivery.
    sleeping: Vec<AtomicBool>,
}

impl Mesh {
    fn mailbox(&self, from: usize, to: usize) -> &Mailbox {
        &self.boxes[from * self.threads + to]
    }
}

/// One thread's outboxes and its end of the mesh.
pub struct Handoffs {
    me: usize,
    mesh: Arc<Mesh>,
    /// Per destination thread (this thread's own one stays empty).
    outboxes: Vec<Parcel>,
    /// What the last `take` emptied out of a mailbox, lent to the engine
    /// while it outputs the packets.
    inbox: Parcel,
}

impl Handoffs {
    /// The ends of `threads` packet threads, by number.
    pub fn mesh(threads: usize) -> Vec<Handoffs> {
        let mesh = Arc::new(Mesh {
            threads,
            boxes: (0..threads * threads).map(|_| Mailbox::default()).collect(),
            sleeping: (0..threads).map(|_| AtomicBool::new(false)).collect(),
        });
        (0..threads)
            .map(|me| Handoffs {
                me,
                mesh: mesh.clone(),
                outboxes: (0..threads).map(|_| Parcel::default()).collect(),
                inbox: Parcel::default(),
            })
            .collect()
    }

    /// Queues a packet for port `port` of thread `owner`.
    #[inline]
    pub fn push(&mut self, owner: usize, port: u32, data: &[u8], tun: TunnelMeta, flow_hash: u32) {
        self.outboxes[owner].push(port, data, tun, flow_hash);
    }

    /// Delivers every outbox into its mailbox. `wake(thread)` is called
    /// for a destination that sleeps; `dropped(port)` for each packet of
    /// an outbox the mailbox had no room for.
    pub fn deliver(&mut self, mut wake: impl FnMut(usize), mut dropped: impl FnMut(u32)) {
        for to in 0..self.outboxes.len() {
            let outbox = &mut self.outboxes[to];
            if outbox.is_empty() {
                continue;
            }
            let mailbox = self.mesh.mailbox(self.me, to);
            {
                let mut waiting = mailbox.parcel.lock();
                if waiting.is_empty() {
                    std::mem::swap(&mut *waiting, outbox);
                } else if waiting.len() + outbox.len() <= MAILBOX_PACKETS {
                    waiting.append(outbox);
                } else {
                    for i in &outbox.items {
                        dropped(i.port);
                    }
                }
                mailbox.pending.store(true, SeqCst);
            }
            outbox.clear();
            if self.mesh.sleeping[to].load(SeqCst) {
                wake(to);
            }
        }
    }

    /// Takes what thread `from` delivered, if anything; the engine hands
    /// the parcel back with [`Handoffs::give_back`] once it has output
    /// the packets, so that its capacity is kept.
    pub fn take(&mut self, from: usize) -> Option<Parcel> {
        let mailbox = self.mesh.mailbox(from, self.me);
        if from == self.me || !mailbox.pending.load(SeqCst) {
            return None;
        }
        let mut parcel = std::mem::take(&mut self.inbox);
        {
            let mut waiting = mailbox.parcel.lock();
            mailbox.pending.store(false, SeqCst);
            std::mem::swap(&mut *waiting, &mut parcel);
        }
        Some(parcel)
    }

    pub fn give_back(&mut self, mut parcel: Parcel) {
        parcel.clear();
        self.inbox = parcel;
    }

    /// The number of packet threads.
    pub fn threads(&self) -> usize {
        self.outboxes.len()
    }

    /// Marks this thread as going to sleep; false (and not marked) if a
    /// delivery is already waiting, so it must not.
    pub fn may_sleep(&self) -> bool {
        self.mesh.sleeping[self.me].store(true, SeqCst);
        let waiting = (0..self.mesh.threads)
            .any(|from| from != self.me && self.mesh.mailbox(from, self.me).pending.load(SeqCst));
        if waiting {
            self.woke();
        }
        !waiting
    }

    /// Marks this thread awake again.
    pub fn woke(&self) {
        self.mesh.sleeping[self.me].store(false, SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tun(id: u64) -> TunnelMeta {
        TunnelMeta {
            tun_id: id,
            tun_src: 0,
            tun_dst: 0x0a00_0002,
        }
    }

    fn taken(h: &mut Handoffs, from: usize) -> Vec<(u32, u64, Vec<u8>)> {
        let Some(p) = h.take(from) else {
            return Vec::new();
        };
        let out = p
            .iter()
            .map(|(i, b)| (i.port, i.tun.tun_id, b.to_vec()))
            .collect();
        h.give_back(p);
        out
    }

    #[test]
    fn packets_reach_the_owner_in_order_with_their_metadata() {
        let mut ends = Handoffs::mesh(3);
        ends[0].push(2, 7, b"first", tun(1), 0);
        ends[0].push(1, 5, b"to one", tun(0), 0);
        ends[0].push(2, 8, b"second", tun(2), 0);
        let mut woken = Vec::new();
        ends[0].deliver(|t| woken.push(t), |_| panic!("room enough"));
        assert!(woken.is_empty(), "nobody sleeps");
        assert_eq!(
            taken(&mut ends[2], 0),
            [(7, 1, b"first".to_vec()), (8, 2, b"second".to_vec())]
        );
        assert_eq!(taken(&mut ends[1], 0), [(5, 0, b"to one".to_vec())]);
        assert!(taken(&mut ends[2], 0).is_empty(), "taken once");
        assert!(taken(&mut ends[2], 1).is_empty(), "nothing from thread 1");
    }

    #[test]
    fn deliveries_before_a_take_are_joined() {
        let mut ends = Handoffs::mesh(2);
        ends[1].push(0, 1, b"a", tun(0), 0);
        ends[1].deliver(|_| {}, |_| {});
        ends[1].push(0, 2, b"bb", tun(0), 0);
        ends[1].deliver(|_| {}, |_| {});
        assert_eq!(
            taken(&mut ends[0], 1),
            [(1, 0, b"a".to_vec()), (2, 0, b"bb".to_vec())]
        );
    }

    #[test]
    fn a_full_mailbox_drops_the_whole_outbox_and_names_its_ports() {
        let mut ends = Handoffs::mesh(2);
        for _ in 0..MAILBOX_PACKETS {
            ends[0].push(1, 3, b"x", tun(0), 0);
        }
        ends[0].deliver(|_| {}, |_| panic!("exactly full fits"));
        ends[0].push(1, 4, b"y", tun(0), 0);
        ends[0].push(1, 5, b"z", tun(0), 0);
        let mut dropped = Vec::new();
        ends[0].deliver(|_| {}, |p| dropped.push(p));
        assert_eq!(dropped, [4, 5]);
        assert_eq!(taken(&mut ends[1], 0).len(), MAILBOX_PACKETS);
        ends[0].push(1, 6, b"w", tun(0), 0);
        ends[0].deliver(|_| {}, |_| panic!("room again"));
        assert_eq!(taken(&mut ends[1], 0), [(6, 0, b"w".to_vec())]);
    }

    #[test]
    fn a_sleeping_owner_is_woken_and_one_with_mail_does_not_sleep() {
        let mut ends = Handoffs::mesh(2);
        assert!(ends[1].may_sleep());
        ends[0].push(1, 1, b"wake up", tun(0), 0);
        let mut woken = Vec::new();
        ends[0].deliver(|t| woken.push(t), |_| {});
        assert_eq!(woken, [1]);
        ends[1].woke();
        // Mail waits: going to sleep is refused until it is taken.
        assert!(!ends[1].may_sleep());
        assert_eq!(taken(&mut ends[1], 0).len(), 1);
        assert!(ends[1].may_sleep());
        ends[1].woke();
        ends[0].push(1, 1, b"awake", tun(0), 0);
        let mut woken = Vec::new();
        ends[0].deliver(|t| woken.push(t), |_| {});
        assert!(woken.is_empty(), "an awake owner costs no wakeup");
    }

    #[test]
    fn parcels_keep_their_capacity_across_rounds() {
        let mut ends = Handoffs::mesh(2);
        for round in 0..3 {
            for _ in 0..100 {
                ends[0].push(1, 2, &[round; 64], tun(0), 0);
            }
            ends[0].deliver(|_| {}, |_| {});
            let p = ends[1].take(0).expect("delivered");
            assert_eq!(p.len(), 100);
            assert!(p.iter().all(|(_, b)| b == [round; 64]));
            ends[1].give_back(p);
        }
        // The two parcels of each pair swap between sender and receiver.
        assert!(ends[0].outboxes[1].bytes.capacity() >= 6400);
        assert!(ends[1].inbox.bytes.capacity() >= 6400);
    }
}
