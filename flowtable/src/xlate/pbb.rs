//! PBB (802.1ah) in translation: `push_pbb` and `pop_pbb`, emitted in
//! place like MPLS pushes and pops and known the same way (see
//! `xlate_mpls.rs`): what a pop of a tag this translation pushed uncovers
//! is the key before the push, Ethernet header and VLAN tag included.
//! Behind a tag the packet arrived with is a customer frame the parser
//! did not read: after popping one the key describes none of the packet,
//! so only outputs and metadata work follow, and a goto_table
//! recirculates.

use super::mpls::{set_lse, Op};
use super::Ctx;
use crate::key::Field;
use crate::matching::ETH_TYPE_PBB;
use crate::trace::Tracer;
use crate::translation::DpAction;

impl<T: Tracer> Ctx<'_, '_, T> {
    fn is_pbb(&mut self) -> bool {
        self.unwildcard(Field::EthType, 0, 16);
        self.key.get(Field::EthType) == u64::from(ETH_TYPE_PBB)
    }

    /// `push_pbb`: the new outer header has the frame's addresses, no VLAN
    /// tag, and the I-SID of the tag it covers, or 0.
    pub(super) fn push_pbb(&mut self) {
        let mut before = self.top();
        before.pbb = true;
        let isid = if self.is_pbb() {
            self.unwildcard(Field::PbbIsid, 0, 24);
            self.key.get(Field::PbbIsid) as u32
        } else {
            0
        };
        if !self.push_below(before) {
            return;
        }
        self.commit();
        self.key.set(Field::EthType, u64::from(ETH_TYPE_PBB));
        self.key.set(Field::VlanTci, 0);
        self.key.set(Field::PbbIsid, u64::from(isid));
        set_lse(&mut self.key, 0);
        self.push(DpAction::PushPbb { isid });
        self.sync_base();
        self.log(Op::Push(before));
    }

    /// `pop_pbb`: nothing on a packet that is not PBB.
    pub(super) fn pop_pbb(&mut self) {
        if !self.is_pbb() {
            return;
        }
        let mut before = self.top();
        before.pbb = true;
        self.commit();
        match self.pop_below() {
            Some(under) if under.pbb => {
                self.restore(&under);
                self.mpls.opaque = under.opaque;
                self.mpls.opaque_l2 = under.opaque_l2;
            }
            _ => {
                self.mpls.opaque = true;
                self.mpls.opaque_l2 = true;
            }
        }
        self.push(DpAction::PopPbb);
        self.sync_base();
        self.log(Op::Pop(before));
    }
}
