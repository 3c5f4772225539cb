//! MPLS in translation: `push_mpls`, `pop_mpls`, `set_mpls_ttl`,
//! `dec_mpls_ttl`, and undoing a group bucket's pushes and pops.
//!
//! The key holds the top label stack entry only, so a push or a pop
//! cannot be left to `commit` the way a VLAN tag is: each is emitted in
//! place (after committing the rewrites before it, which belong to the
//! headers as they were) and the datapath's view (`base`) follows at once.
//! What a pop uncovers is known only for a label this translation pushed
//! (the key as it was before the push, kept in [`MplsState::below`]). A
//! label the packet arrived with hides everything behind it, since the
//! packet parser stops at the label stack as OVS's does: after popping one,
//! the key says nothing of the packet's inner headers ([`MplsState::opaque`]).
//! A `goto_table` then makes the datapath parse the packet again and
//! resume at that table ([`DpAction::Recirc`]), as OVS recirculates.
//! Actions after the pop in the same list that need those headers are
//! refused (validation; OVS would freeze the translation there), and a
//! translation that still gets there (a group bucket or a resubmitted
//! table, which validation cannot see together with the pop) ends as
//! unsupported rather than act on headers it guessed.

use super::Ctx;
use crate::action::Action;
use crate::key::{Field, FlowKey};
use crate::matching::{is_mpls, ETH_TYPE_IPV4, ETH_TYPE_IPV6};
use crate::trace::Tracer;
use crate::translation::{packet_in_reason, DpAction, DropReason};

/// Labels one translation may push over the packet's own (OVS's
/// FLOW_MAX_MPLS_LABELS).
const MAX_PUSHED: usize = 3;
/// Pushes and pops one translation may undo for group buckets.
const MAX_LOGGED: usize = 8;

/// The part of the key a push or pop changes, before it: what the packet
/// was. A PBB push hides the Ethernet header and VLAN tag as well.
#[derive(Clone, Copy, Default, Debug)]
pub(super) struct Top {
    eth_type: u16,
    lse: u32,
    isid: u32,
    vlan_tci: u16,
    eth_src: u64,
    eth_dst: u64,
    pub(super) opaque: bool,
    pub(super) opaque_l2: bool,
    /// The push or pop was of a PBB tag (`xlate_pbb.rs`).
    pub(super) pbb: bool,
}

#[derive(Clone, Copy, Debug)]
pub(super) enum Op {
    Push(Top),
    Pop(Top),
}

/// What the translation knows about the label stack beyond the key.
#[derive(Clone, Copy, Debug)]
pub(super) struct MplsState {
    /// For each label this translation pushed and did not pop, the packet
    /// before the push; innermost first.
    below: [Top; MAX_PUSHED],
    n_below: usize,
    /// The key no longer describes the headers behind the Ethernet header:
    /// a label the packet arrived with was popped.
    pub(super) opaque: bool,
    /// Nor the Ethernet header: a PBB tag the packet arrived with was
    /// popped.
    pub(super) opaque_l2: bool,
    /// Pushes and pops emitted, oldest first, so a group bucket's can be
    /// undone for the next bucket.
    log: [Op; MAX_LOGGED],
    n_log: usize,
}

impl Default for MplsState {
    fn default() -> Self {
        MplsState {
            below: [Top::default(); MAX_PUSHED],
            n_below: 0,
            opaque: false,
            opaque_l2: false,
            log: [Op::Push(Top::default()); MAX_LOGGED],
            n_log: 0,
        }
    }
}

/// A label stack entry as on the wire: label (20 bits), TC (3), BOS (1),
/// TTL (8).
pub(crate) fn lse_of(key: &FlowKey) -> u32 {
    (key.get(Field::MplsLabel) as u32) << 12
        | (key.get(Field::MplsTc) as u32) << 9
        | (key.get(Field::MplsBos) as u32) << 8
        | key.get(Field::MplsTtl) as u32
}

pub(super) fn set_lse(key: &mut FlowKey, lse: u32) {
    key.set(Field::MplsLabel, u64::from(lse >> 12));
    key.set(Field::MplsTc, u64::from((lse >> 9) & 7));
    key.set(Field::MplsBos, u64::from((lse >> 8) & 1));
    key.set(Field::MplsTtl, u64::from(lse & 0xff));
}

impl<T: Tracer> Ctx<'_, '_, T> {
    /// Whether the packet is MPLS now.
    fn is_mpls(&mut self) -> bool {
        self.unwildcard(Field::EthType, 0, 16);
        is_mpls(self.key.get(Field::EthType) as u16)
    }

    pub(super) fn top(&self) -> Top {
        Top {
            eth_type: self.key.get(Field::EthType) as u16,
            lse: lse_of(&self.key),
            isid: self.key.get(Field::PbbIsid) as u32,
            vlan_tci: self.key.get(Field::VlanTci) as u16,
            eth_src: self.key.get(Field::EthSrc),
            eth_dst: self.key.get(Field::EthDst),
            opaque: self.mpls.opaque,
            opaque_l2: self.mpls.opaque_l2,
            pbb: false,
        }
    }

    /// Puts the key back as `t` was; for a PBB tag, its Ethernet header
    /// and VLAN tag too.
    pub(super) fn restore(&mut self, t: &Top) {
        self.key.set(Field::EthType, u64::from(t.eth_type));
        set_lse(&mut self.key, t.lse);
        if t.pbb {
            self.key.set(Field::PbbIsid, u64::from(t.isid));
            self.key.set(Field::VlanTci, u64::from(t.vlan_tci));
            self.key.set(Field::EthSrc, t.eth_src);
            self.key.set(Field::EthDst, t.eth_dst);
        }
    }

    /// Remembers the packet before a push; `false` (and the translation
    /// failed) when too many are pushed.
    pub(super) fn push_below(&mut self, before: Top) -> bool {
        let Some(slot) = self.mpls.below.get_mut(self.mpls.n_below) else {
            self.fail(DropReason::Unsupported(
                "more than 3 MPLS labels or PBB tags pushed",
            ));
            return false;
        };
        *slot = before;
        self.mpls.n_below += 1;
        true
    }

    /// The packet before the newest push still on it, if any.
    pub(super) fn pop_below(&mut self) -> Option<Top> {
        let i = self.mpls.n_below.checked_sub(1)?;
        self.mpls.n_below = i;
        self.mpls.below.get(i).copied()
    }

    /// The datapath's packet now is the key's (after a push or pop that
    /// followed a commit).
    pub(super) fn sync_base(&mut self) {
        for i in crate::key::HEADER_WORDS {
            if let (Some(b), Some(k)) = (self.base.words.get_mut(i), self.key.words.get(i)) {
                *b = *k;
            }
        }
    }

    pub(super) fn log(&mut self, op: Op) {
        match self.mpls.log.get_mut(self.mpls.n_log) {
            Some(slot) => {
                *slot = op;
                self.mpls.n_log += 1;
            }
            None => self.fail(DropReason::Unsupported("too many MPLS pushes and pops")),
        }
    }

    /// `push_mpls`: the new entry copies the top one of an MPLS packet
    /// (BOS clear); otherwise it is label 0, TC 0, BOS set, with the IP
    /// TTL or, for a packet that is not IP, TTL 0 (OF1.3's defaults).
    pub(super) fn push_mpls(&mut self, ethertype: u16) {
        let before = self.top();
        let lse = if self.is_mpls() {
            for f in [Field::MplsLabel, Field::MplsTc, Field::MplsTtl] {
                self.unwildcard(f, 0, f.bits());
            }
            before.lse & !(1 << 8)
        } else if self.is_ip() {
            self.unwildcard(Field::IpTtl, 0, 8);
            1 << 8 | self.key.get(Field::IpTtl) as u32
        } else {
            1 << 8
        };
        if !self.push_below(before) {
            return;
        }
        self.commit();
        self.key.set(Field::EthType, u64::from(ethertype));
        set_lse(&mut self.key, lse);
        self.push(DpAction::PushMpls { ethertype, lse });
        self.sync_base();
        self.log(Op::Push(before));
    }

    /// `pop_mpls`: nothing on a packet that is not MPLS (as OVS).
    pub(super) fn pop_mpls(&mut self, ethertype: u16) {
        if !self.is_mpls() {
            return;
        }
        let before = self.top();
        self.commit();
        self.key.set(Field::EthType, u64::from(ethertype));
        match self.pop_below() {
            Some(under) => {
                set_lse(&mut self.key, under.lse);
                // Named as something else than it was, it is not what
                // the key says.
                self.mpls.opaque = under.opaque || under.eth_type != ethertype || under.pbb;
            }
            None => {
                set_lse(&mut self.key, 0);
                self.mpls.opaque = true;
            }
        }
        self.push(DpAction::PopMpls { ethertype });
        self.sync_base();
        self.log(Op::Pop(before));
    }

    /// `set_mpls_ttl`: nothing on a packet that is not MPLS.
    pub(super) fn set_mpls_ttl(&mut self, ttl: u8) {
        if self.is_mpls() {
            self.write(Field::MplsTtl, u64::from(ttl));
        }
    }

    /// `dec_mpls_ttl`: `dec_ttl`'s semantics on the top label's TTL.
    pub(super) fn dec_mpls_ttl(&mut self) {
        if !self.is_mpls() {
            return;
        }
        self.unwildcard(Field::MplsTtl, 0, 8);
        let ttl = self.key.get(Field::MplsTtl);
        if ttl > 1 {
            self.key.set(Field::MplsTtl, ttl - 1);
            return;
        }
        self.packet_in(u16::MAX, packet_in_reason::INVALID_TTL);
        self.halted = true;
        if self.note.is_none() {
            self.note = Some(DropReason::InvalidTtl);
        }
    }

    /// `goto_table:next` after popping a received label: the datapath
    /// parses the packet again and the walk goes on at `next` with the
    /// metadata as the actions left it. Only where nothing of this pass
    /// is left to run after the goto: at the top level (not inside a
    /// resubmit, whose caller would continue) and with no action set
    /// (which the new pass would not carry).
    pub(super) fn recirculate(&mut self, next: u8, depth: u32) {
        if depth != 0 || !self.action_set.is_empty() {
            return self.fail(DropReason::Unsupported(
                "goto_table after popping a received MPLS label, inside resubmit or with an action set",
            ));
        }
        if self.out.recirc.is_some() {
            return self.fail(DropReason::Unsupported("two recirculations in one pass"));
        }
        self.commit();
        let mut k = self.key;
        k.set_recirc_table(Some(next));
        self.out.recirc = Some(k);
        self.push(DpAction::Recirc);
        self.halted = true;
    }

    /// `copy_ttl_out` (`out`) and `copy_ttl_in`. Behind the one label
    /// this translation pushed onto an IP packet, the key holds both
    /// TTLs. Otherwise the datapath copies: into a header the key does not
    /// hold (in, behind a received label) that changes nothing the key
    /// says; else the key no longer knows a TTL it holds, and so says
    /// nothing behind the Ethernet header any more (a goto_table then
    /// recirculates).
    pub(super) fn copy_ttl(&mut self, out: bool) {
        if !self.is_mpls() {
            return;
        }
        let over_ip = self.mpls.n_below == 1
            && self.mpls.below.first().is_some_and(|b| {
                !b.opaque && !b.pbb && (b.eth_type == ETH_TYPE_IPV4 || b.eth_type == ETH_TYPE_IPV6)
            });
        if over_ip && out {
            self.unwildcard(Field::IpTtl, 0, 8);
            let ttl = self.key.get(Field::IpTtl);
            return self.write(Field::MplsTtl, ttl);
        }
        self.commit();
        self.push(DpAction::CopyTtl { out });
        if over_ip {
            // The IP header is behind the label, out of reach of a rewrite
            // of nw_ttl: the datapath copied, the key follows.
            self.unwildcard(Field::MplsTtl, 0, 8);
            let ttl = self.key.get(Field::MplsTtl);
            self.key.set(Field::IpTtl, ttl);
            self.sync_base();
        } else if out || self.mpls.n_below > 0 {
            self.mpls.opaque = true;
        }
    }

    /// Refuses an action that needs headers the key no longer describes.
    pub(super) fn check_opaque(&mut self, a: &Action) -> bool {
        if self.mpls.opaque_l2 && crate::validate::reads_packet(a) {
            self.fail(DropReason::Unsupported(
                "an action on the customer frame behind a popped PBB tag",
            ));
            return false;
        }
        if self.mpls.opaque && crate::validate::reads_behind_l2(a) {
            self.fail(DropReason::Unsupported(
                "an action on headers behind a popped MPLS label",
            ));
            return false;
        }
        true
    }

    /// Where the log stands, for [`Ctx::undo_mpls`].
    pub(super) fn mpls_mark(&self) -> (MplsState, usize) {
        (self.mpls, self.mpls.n_log)
    }

    /// Undoes the pushes and pops since `mark` in the datapath (a group
    /// bucket's, before the next bucket), newest first. Rewrites the
    /// bucket made but did not commit never reached the packet, so the
    /// undo starts from the datapath's view.
    pub(super) fn undo_mpls(&mut self, (state, n_log): (MplsState, usize)) {
        if self.mpls.n_log > n_log {
            for i in crate::key::HEADER_WORDS {
                if let (Some(k), Some(b)) = (self.key.words.get_mut(i), self.base.words.get(i)) {
                    *k = *b;
                }
            }
        }
        while self.mpls.n_log > n_log && !self.stopped() {
            self.mpls.n_log -= 1;
            let Some(op) = self.mpls.log.get(self.mpls.n_log).copied() else {
                break;
            };
            match op {
                Op::Push(before) if before.pbb => {
                    self.push(DpAction::PopPbb);
                    self.restore(&before);
                }
                Op::Push(before) => {
                    self.push(DpAction::PopMpls {
                        ethertype: before.eth_type,
                    });
                    self.restore(&before);
                }
                Op::Pop(before) if before.opaque || before.pbb => {
                    // The entry popped was never known; a PBB tag's
                    // Ethernet header is not rebuilt.
                    self.fail(DropReason::Unsupported(
                        "a group bucket popped an unknown MPLS label or a PBB tag",
                    ));
                }
                Op::Pop(before) => {
                    self.push(DpAction::PushMpls {
                        ethertype: before.eth_type,
                        lse: before.lse,
                    });
                    self.restore(&before);
                }
            }
            self.sync_base();
        }
        let n_log = self.mpls.n_log;
        self.mpls = state;
        self.mpls.n_log = n_log;
    }
}
