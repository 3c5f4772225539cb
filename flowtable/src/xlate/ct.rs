//! Translation of `ct(...)` (see `pipeline.rs` for the design and
//! `DpAction::Ct` for the semantics).

use super::Ctx;
use crate::action::{ct_flags, Action, CtAction, CtZone, CT_LABEL_BITS};
use crate::key::Field;
use crate::trace::Tracer;
use crate::translation::{DpAction, DropReason, NatSpec};

impl<T: Tracer> Ctx<'_, '_, T> {
    /// `ct(...)`: emits the datapath's conntrack step. Header rewrites so
    /// far are committed first, since conntrack must see the packet as the
    /// actions made it. A `table=N` records the key the tracked fork
    /// resumes with; the actions after `ct` go on with the original
    /// (untracked) packet, as in OVS.
    pub(super) fn conntrack(&mut self, ct: &CtAction) {
        let zone = match &ct.zone {
            CtZone::Immediate(z) => *z,
            CtZone::Field(sf) if sf.is_valid() => self.read(sf) as u16,
            CtZone::Field(_) => 0,
        };
        let mut nat = None;
        let mut mark: Option<(u32, u32)> = None;
        let mut label: Option<(u128, u128)> = None;
        for inner in &ct.actions {
            match inner {
                Action::Nat(n) => nat = Some(NatSpec::from_action(n)),
                Action::SetField {
                    field: Field::CtMark,
                    value,
                } => mark = Some((*value as u32, u32::MAX)),
                Action::RegLoad { dst, value } if dst.field == Field::CtMark && dst.is_valid() => {
                    let bits = if dst.nbits >= 32 {
                        u32::MAX
                    } else {
                        (1u32 << dst.nbits) - 1
                    };
                    let m = bits << dst.ofs;
                    let v = ((*value as u32) << dst.ofs) & m;
                    let (ov, om) = mark.unwrap_or((0, 0));
                    mark = Some(((ov & !m) | v, om | m));
                }
                Action::SetCtLabel { value } => label = Some((*value, u128::MAX)),
                Action::RegLoad { dst, value } if dst.field.is_ct_label() && dst.is_valid() => {
                    // The bits of the 128-bit label the load covers.
                    let ofs = dst.wire_ofs();
                    let m = (u128::MAX >> (CT_LABEL_BITS - dst.nbits)) << ofs;
                    let v = (u128::from(*value) << ofs) & m;
                    let (ov, om) = label.unwrap_or((0, 0));
                    label = Some(((ov & !m) | v, om | m));
                }
                // Validation admits nothing else inside ct().
                _ => {}
            }
        }
        self.commit();
        if let Some(t) = ct.recirc_table {
            if self.out.recirc.is_some() {
                return self.fail(DropReason::Unsupported("two ct(table=N) in one pass"));
            }
            let mut k = self.key;
            k.set_recirc_table(Some(t));
            self.out.recirc = Some(k);
        }
        self.push(DpAction::Ct {
            zone,
            commit: ct.flags & ct_flags::COMMIT != 0,
            force: ct.flags & ct_flags::FORCE != 0,
            table: ct.recirc_table,
            nat,
            mark,
            label,
        });
    }
}
