//! Checks a flow's instructions and a group's buckets before they are
//! installed, so that the pipeline never meets an action it cannot execute
//! safely (out-of-range bit ranges, missing groups, backward gotos).

use crate::action::{port, Action, CtZone, Instructions, SubField, N_TABLES};
use crate::error::{FlowModError, MatchError};
use crate::key::{Field, HEADER_WORDS};
use crate::matching::{is_mpls, Match, ETH_TYPE_PBB};

/// Where a list of actions lives; decides which actions are allowed.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Context<'a> {
    /// A flow's apply-actions list; the match decides field prerequisites.
    Apply(&'a Match),
    /// A flow's write-actions list (the action set).
    Write(&'a Match),
    /// A group bucket: no match to check prerequisites against, no chaining.
    Bucket,
    /// Actions nested in `ct()`.
    Ct,
}

/// Whether `port` is a valid output port: a physical port number or a
/// reserved port other than ANY.
pub(crate) fn valid_output_port(p: u32) -> bool {
    p <= port::MAX
        || matches!(
            p,
            port::IN_PORT
                | port::TABLE
                | port::NORMAL
                | port::FLOOD
                | port::ALL
                | port::CONTROLLER
                | port::LOCAL
        )
}

/// Validates a flow's instructions for a flow in `table_id`.
pub(crate) fn check_instructions(
    table_id: u8,
    matching: &Match,
    ins: &Instructions,
    group_exists: &dyn Fn(u32) -> bool,
    meter_exists: &dyn Fn(u32) -> bool,
) -> Result<(), FlowModError> {
    if let Some(m) = ins.meter {
        if !meter_exists(m) {
            return Err(FlowModError::NoSuchMeter(m));
        }
    }
    check_goto(table_id, ins)?;
    // MPLS push and pop change the eth_type later actions' prerequisites
    // see, as OVS checks them.
    let mut m = *matching;
    let mut tags = MplsTags::default();
    for a in ins.apply_actions.iter().flatten() {
        check_action(a, Context::Apply(&m), group_exists)?;
        tags.check(a)?;
        tags.apply(a, &mut m);
    }
    for a in ins.write_actions.iter().flatten() {
        check_action(a, Context::Write(&m), group_exists)?;
        tags.check(a)?;
    }
    if tags.opaque && ins.goto_table.is_some() && ins.write_actions.is_some() {
        // The goto recirculates (see `xlate_mpls.rs`), which carries no
        // action set on.
        return Err(FlowModError::Unsupported(
            "write_actions with goto_table after pop_mpls of a received MPLS label",
        ));
    }
    Ok(())
}

/// The MPLS labels and PBB tags an action list pushed, for what a pop
/// uncovers.
#[derive(Default)]
struct MplsTags {
    /// eth_type before each push still on the packet, innermost first
    /// (0 where the flow does not fix it).
    below: Vec<u64>,
    /// A label the packet arrived with was popped: the key holds nothing
    /// of what follows it.
    opaque: bool,
    /// A PBB tag the packet arrived with was popped: the key holds
    /// nothing of the customer frame, its Ethernet header included.
    opaque_l2: bool,
}

impl MplsTags {
    fn check(&self, a: &Action) -> Result<(), FlowModError> {
        if self.opaque_l2 && reads_packet(a) {
            return Err(FlowModError::Unsupported(
                "an action on the customer frame after pop_pbb of a received PBB tag",
            ));
        }
        if self.opaque && reads_behind_l2(a) {
            return Err(FlowModError::Unsupported(
                "an action on headers behind a received MPLS label after pop_mpls",
            ));
        }
        Ok(())
    }

    fn apply(&mut self, a: &Action, m: &mut Match) {
        match a {
            Action::PushMpls(t) => {
                self.below.push(m.get(Field::EthType).0);
                m.set_exact(Field::EthType, u64::from(*t));
            }
            Action::PopMpls(t) => {
                match self.below.pop() {
                    Some(before) => self.opaque |= before != u64::from(*t),
                    None => self.opaque = true,
                }
                m.set_exact(Field::EthType, u64::from(*t));
            }
            // The TTL it copies from a received packet is not in the key.
            Action::CopyTtlOut if self.below.is_empty() => self.opaque = true,
            Action::PushPbb(t) => {
                self.below.push(m.get(Field::EthType).0);
                m.set_exact(Field::EthType, u64::from(*t));
            }
            Action::PopPbb => match self.below.pop() {
                Some(before) => {
                    m.set_masked(Field::EthType, before, u64::from(before != 0) * 0xffff)
                }
                None => {
                    self.opaque = true;
                    self.opaque_l2 = true;
                    m.set_masked(Field::EthType, 0, 0);
                }
            },
            _ => {}
        }
    }
}

/// Whether an action needs the headers behind the Ethernet header (and
/// VLAN tags): those with prerequisites, the TTL actions and conntrack.
/// After a received MPLS label is popped the key no longer describes
/// them (see `xlate_mpls.rs`).
pub(crate) fn reads_behind_l2(a: &Action) -> bool {
    let behind = |f: Field| !Match::catch_all().prerequisites_met(f);
    match a {
        Action::SetField { field, .. } | Action::SetField128 { field, .. } => behind(*field),
        Action::RegLoad { dst, .. } => behind(dst.field),
        Action::RegMove { src, dst } => behind(src.field) || behind(dst.field),
        Action::OutputReg { src, .. } => behind(src.field),
        Action::SetNwTtl(_)
        | Action::DecNwTtl
        | Action::Ct(_)
        | Action::PushMpls(_)
        | Action::SetMplsTtl(_)
        | Action::DecMplsTtl
        | Action::CopyTtlOut
        | Action::CopyTtlIn => true,
        _ => false,
    }
}

/// Whether an action reads or writes the packet's headers at all (not
/// only outputs it or works on metadata). After a received PBB tag is
/// popped the key describes none of them.
pub(crate) fn reads_packet(a: &Action) -> bool {
    let header = |f: Field| HEADER_WORDS.contains(&f.layout().word);
    match a {
        Action::Output { .. }
        | Action::Group(_)
        | Action::Note(_)
        | Action::Resubmit { .. }
        | Action::SetCtLabel { .. }
        | Action::Nat(_) => false,
        Action::SetField { field, .. } | Action::SetField128 { field, .. } => header(*field),
        Action::RegLoad { dst, .. } => header(dst.field),
        Action::RegMove { src, dst } => header(src.field) || header(dst.field),
        Action::OutputReg { src, .. } => header(src.field),
        _ => true,
    }
}

/// set_mpls_ttl and dec_mpls_ttl need an MPLS packet; OVS calls a flow
/// that does not guarantee one inconsistent. pop_mpls (`pinned_only`)
/// is refused only where the flow's eth_type rules MPLS out: on other
/// packets it does nothing, and a flow that pops whatever label comes
/// and goes on in the next table is what os-ken's tests (and the
/// OpenFlow 1.3 spec's examples of popping) use; OVS refuses it.
fn check_mpls(ctx: Context<'_>, what: &'static str, pinned_only: bool) -> Result<(), FlowModError> {
    match ctx {
        Context::Apply(m) | Context::Write(m) => match m.exact(Field::EthType) {
            Some(t) if is_mpls(t as u16) => Ok(()),
            None if pinned_only => Ok(()),
            _ => Err(FlowModError::MatchInconsistent(what)),
        },
        _ => Ok(()),
    }
}

/// goto_table must name a later, existing table.
pub(crate) fn check_goto(table_id: u8, ins: &Instructions) -> Result<(), FlowModError> {
    match ins.goto_table {
        Some(to) if to <= table_id || to >= N_TABLES => {
            Err(FlowModError::BadGotoTable { from: table_id, to })
        }
        _ => Ok(()),
    }
}

fn bad(field: Field, reason: &'static str) -> FlowModError {
    FlowModError::BadField { field, reason }
}

fn check_sub_field(sf: &SubField) -> Result<(), FlowModError> {
    if sf.is_valid() {
        Ok(())
    } else {
        Err(bad(sf.field, "bit range lies outside the field"))
    }
}

fn check_writable(field: Field) -> Result<(), FlowModError> {
    if field.is_writable() {
        Ok(())
    } else {
        Err(bad(field, "field is not writable"))
    }
}

fn check_prereq(ctx: Context<'_>, field: Field) -> Result<(), FlowModError> {
    match ctx {
        Context::Apply(m) | Context::Write(m) if !m.prerequisites_met(field) => {
            Err(FlowModError::Match(MatchError::MissingPrerequisite(field)))
        }
        _ => Ok(()),
    }
}

pub(crate) fn check_action(
    a: &Action,
    ctx: Context<'_>,
    group_exists: &dyn Fn(u32) -> bool,
) -> Result<(), FlowModError> {
    let in_write = matches!(ctx, Context::Write(_));
    // ct_mark belongs to the connection: OVS (ovs-ofctl and ovs-vswitchd
    // alike) lets only ct(exec(...)) set it, and a write elsewhere would
    // change nothing but the packet's copy.
    let writes_ct_mark = match a {
        Action::SetField { field, .. } => *field == Field::CtMark,
        Action::RegLoad { dst, .. } | Action::RegMove { dst, .. } => dst.field == Field::CtMark,
        _ => false,
    };
    if writes_ct_mark && ctx != Context::Ct {
        return Err(bad(Field::CtMark, "ct_mark is set only inside ct()"));
    }
    match a {
        Action::Output { port: p, .. } => {
            if !valid_output_port(*p) {
                return Err(FlowModError::BadOutPort(*p));
            }
        }
        Action::Group(g) => {
            if ctx == Context::Bucket {
                return Err(FlowModError::Unsupported("group chaining"));
            }
            if !group_exists(*g) {
                return Err(FlowModError::UnknownGroup(*g));
            }
        }
        Action::SetField { field, value } => {
            check_writable(*field)?;
            if value & !field.full_mask() != 0 {
                return Err(bad(*field, "value is wider than the field"));
            }
            check_prereq(ctx, *field)?;
        }
        Action::SetField128 { field, .. } => {
            if field.high_half().is_none() || field.is_ct_label() {
                return Err(bad(*field, "not a 128-bit packet field"));
            }
            check_prereq(ctx, *field)?;
        }
        _ if in_write => {
            return Err(FlowModError::Unsupported(
                "write_actions supports only output, group and set_field",
            ))
        }
        Action::SetNwTtl(_) | Action::DecNwTtl => {
            check_prereq(ctx, Field::IpTtl)?;
        }
        Action::PushVlan(0x8100) | Action::PopVlan => {}
        Action::PushMpls(t) if !is_mpls(*t) => {
            return Err(FlowModError::BadArgument(
                "push_mpls needs ethertype 0x8847 or 0x8848",
            ))
        }
        Action::PushMpls(_) => {}
        Action::PopMpls(_) => check_mpls(ctx, "pop_mpls on a flow that is not MPLS", true)?,
        Action::SetMplsTtl(_) => check_mpls(ctx, "set_mpls_ttl on a flow that is not MPLS", false)?,
        Action::DecMplsTtl => check_mpls(ctx, "dec_mpls_ttl on a flow that is not MPLS", false)?,
        Action::PushPbb(t) if *t != ETH_TYPE_PBB => {
            return Err(FlowModError::BadArgument("push_pbb needs ethertype 0x88e7"))
        }
        Action::PushPbb(_) => {}
        Action::PopPbb => match ctx {
            Context::Apply(m) | Context::Write(m)
                if m.exact(Field::EthType)
                    .is_some_and(|t| t != u64::from(ETH_TYPE_PBB)) =>
            {
                return Err(FlowModError::MatchInconsistent(
                    "pop_pbb on a flow that is not PBB",
                ))
            }
            _ => {}
        },
        Action::CopyTtlOut | Action::CopyTtlIn => {
            check_mpls(ctx, "copy_ttl_out/in on a flow that is not MPLS", false)?
        }
        Action::SetVlanVid(v) if *v > 0x1fff => {
            return Err(FlowModError::BadField {
                field: Field::VlanTci,
                reason: "vlan_vid is 12 bits plus OFPVID_PRESENT (0x1000)",
            })
        }
        Action::SetVlanPcp(p) if *p > 7 => {
            return Err(FlowModError::BadField {
                field: Field::VlanTci,
                reason: "vlan_pcp is 3 bits",
            })
        }
        Action::SetVlanVid(_) | Action::SetVlanPcp(_) => {}
        Action::PushVlan(0x88a8) => {
            return Err(FlowModError::BadArgument(
                "push_vlan:0x88a8: 802.1ad tags are not supported, only 0x8100",
            ))
        }
        Action::PushVlan(_) => {
            return Err(FlowModError::BadArgument(
                "push_vlan needs ethertype 0x8100 or 0x88a8",
            ))
        }
        Action::RegLoad { dst, value } => {
            check_sub_field(dst)?;
            check_writable(dst.field)?;
            if dst.nbits < 64 && value >> dst.nbits != 0 {
                return Err(bad(dst.field, "value is wider than the bit range"));
            }
            check_prereq(ctx, dst.field)?;
        }
        Action::RegMove { src, dst } => {
            check_sub_field(src)?;
            check_sub_field(dst)?;
            if src.nbits != dst.nbits {
                return Err(bad(dst.field, "source and destination widths differ"));
            }
            check_writable(dst.field)?;
            check_prereq(ctx, src.field)?;
            check_prereq(ctx, dst.field)?;
        }
        Action::OutputReg { src, .. } => {
            check_sub_field(src)?;
            check_prereq(ctx, src.field)?;
        }
        Action::Resubmit { in_port, table } => {
            if let Some(t) = table {
                if *t >= N_TABLES {
                    return Err(FlowModError::BadTableId(*t));
                }
            }
            if *in_port != port::IN_PORT && *in_port > port::MAX {
                return Err(FlowModError::BadOutPort(*in_port));
            }
        }
        Action::Note(_) => {}
        Action::Ct(ct) => {
            if ctx == Context::Ct {
                return Err(FlowModError::Unsupported("ct() nested in ct()"));
            }
            if ct.alg != 0 {
                // The datapath has no application-layer gateways; refusing
                // the flow beats tracking FTP or TFTP without one.
                return Err(FlowModError::Unsupported("ct(alg=...): conntrack ALGs"));
            }
            if let CtZone::Field(sf) = &ct.zone {
                check_sub_field(sf)?;
            }
            if let Some(t) = ct.recirc_table {
                if t >= N_TABLES {
                    return Err(FlowModError::BadTableId(t));
                }
            }
            for inner in &ct.actions {
                match inner {
                    Action::Nat(_) => check_action(inner, Context::Ct, group_exists)?,
                    Action::SetField {
                        field: Field::CtMark,
                        ..
                    } => check_action(inner, Context::Ct, group_exists)?,
                    Action::RegLoad { dst, .. } if dst.field == Field::CtMark => {
                        check_action(inner, Context::Ct, group_exists)?
                    }
                    Action::SetCtLabel { .. } => {}
                    // ct_label's halves are not writable elsewhere, so
                    // the general RegLoad check does not apply.
                    Action::RegLoad { dst, value } if dst.field.is_ct_label() => {
                        check_sub_field(dst)?;
                        if dst.nbits < 64 && value >> dst.nbits != 0 {
                            return Err(bad(dst.field, "value is wider than the bit range"));
                        }
                    }
                    _ => {
                        return Err(FlowModError::Unsupported(
                            "ct() may only nest nat, ct_mark and ct_label writes",
                        ))
                    }
                }
            }
        }
        Action::SetCtLabel { .. } => {
            // Checked with its ct() above; anywhere else it is refused,
            // as ovs-ofctl refuses to set CT fields outside ct().
            return Err(bad(Field::CtLabelLow, "ct_label is set only inside ct()"));
        }
        Action::Nat(nat) => {
            if ctx != Context::Ct {
                return Err(FlowModError::Unsupported("nat outside ct()"));
            }
            let bad_range = matches!((nat.ipv4_min, nat.ipv4_max), (Some(a), Some(b)) if a > b)
                || matches!((nat.ipv6_min, nat.ipv6_max), (Some(a), Some(b)) if a > b)
                || matches!((nat.proto_min, nat.proto_max), (Some(a), Some(b)) if a > b);
            if bad_range {
                return Err(FlowModError::Unsupported("nat range with min > max"));
            }
            if nat.ipv4_min.is_some() && nat.ipv6_min.is_some() {
                return Err(FlowModError::Unsupported("nat range of both families"));
            }
        }
    }
    Ok(())
}
