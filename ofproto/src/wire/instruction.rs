//! Instructions (`ofp_instruction`), decoded into flowtable's
//! [`Instructions`] and encoded in OpenFlow's execution order, which is
//! also the order OVS sends them in.

use super::action;
use super::action::{emit_actions_in, parse_actions_in, Dialect};
use super::{err, Ctx, Put, Reader, WireError};
use flowtable::Instructions;

pub const OFPIT_GOTO_TABLE: u16 = 1;
pub const OFPIT_WRITE_METADATA: u16 = 2;
pub const OFPIT_WRITE_ACTIONS: u16 = 3;
pub const OFPIT_APPLY_ACTIONS: u16 = 4;
pub const OFPIT_CLEAR_ACTIONS: u16 = 5;
pub const OFPIT_METER: u16 = 6;
pub const OFPIT_EXPERIMENTER: u16 = 0xffff;

fn bad(code: u16, detail: impl Into<String>) -> WireError {
    WireError::BadInstruction(code, detail.into())
}

fn dup(name: &str) -> WireError {
    bad(err::BIC_UNSUP_INST, format!("duplicate {name} instruction"))
}

/// Decodes an instruction list (the rest of a FLOW_MOD or flow stats entry).
pub fn parse_instructions(bytes: &[u8]) -> Result<Instructions, WireError> {
    parse_instructions_in(bytes, Dialect::Of13)
}

/// [`parse_instructions`] in `dialect`: in OpenFlow 1.5 the meter is the
/// first action of apply-actions, not an instruction.
pub fn parse_instructions_in(bytes: &[u8], dialect: Dialect) -> Result<Instructions, WireError> {
    let mut r = Reader::new(bytes, Ctx::Instruction, "instructions");
    let mut ins = Instructions::default();
    while !r.is_empty() {
        let ty = r.u16()?;
        let len = usize::from(r.u16()?);
        if len < 8 || len % 8 != 0 || len - 4 > r.remaining() {
            return Err(bad(
                err::BIC_BAD_LEN,
                format!("instruction {ty} has bad length {len}"),
            ));
        }
        let body = r.bytes(len - 4)?;
        let mut b = Reader::new(body, Ctx::Instruction, "instruction");
        let fixed = |b: &Reader<'_>, n: usize| {
            if b.remaining() == n {
                Ok(())
            } else {
                Err(bad(
                    err::BIC_BAD_LEN,
                    format!("instruction {ty} has length {len}"),
                ))
            }
        };
        match ty {
            OFPIT_GOTO_TABLE => {
                fixed(&b, 4)?;
                if ins.goto_table.replace(b.u8()?).is_some() {
                    return Err(dup("goto_table"));
                }
            }
            OFPIT_WRITE_METADATA => {
                fixed(&b, 20)?;
                b.skip(4)?;
                let v = (b.u64()?, b.u64()?);
                if v.0 & !v.1 != 0 {
                    return Err(bad(
                        err::BIC_UNSUP_INST,
                        "write_metadata value has bits outside its mask",
                    ));
                }
                if ins.write_metadata.replace(v).is_some() {
                    return Err(dup("write_metadata"));
                }
            }
            OFPIT_WRITE_ACTIONS | OFPIT_APPLY_ACTIONS => {
                b.skip(4)?;
                let mut list = b.rest();
                if ty == OFPIT_APPLY_ACTIONS && dialect == Dialect::Of15 {
                    let (meter, rest) = action::of15::split_meter(list)?;
                    if let Some(m) = meter {
                        if ins.meter.replace(m).is_some() {
                            return Err(dup("meter"));
                        }
                        if rest.is_empty() {
                            // Only the meter: there are no apply-actions.
                            continue;
                        }
                    }
                    list = rest;
                }
                let actions = parse_actions_in(list, dialect)?;
                let slot = if ty == OFPIT_WRITE_ACTIONS {
                    &mut ins.write_actions
                } else {
                    &mut ins.apply_actions
                };
                if slot.replace(actions).is_some() {
                    return Err(dup("actions"));
                }
            }
            OFPIT_CLEAR_ACTIONS => {
                fixed(&b, 4)?;
                if std::mem::replace(&mut ins.clear_actions, true) {
                    return Err(dup("clear_actions"));
                }
            }
            OFPIT_METER if dialect == Dialect::Of15 => {
                return Err(bad(
                    err::BIC_UNKNOWN_INST,
                    "the meter is an action in OpenFlow 1.5",
                ))
            }
            OFPIT_METER => {
                fixed(&b, 4)?;
                if ins.meter.replace(b.u32()?).is_some() {
                    return Err(dup("meter"));
                }
            }
            OFPIT_EXPERIMENTER => {
                return Err(bad(
                    err::BIC_BAD_EXPERIMENTER,
                    "experimenter instructions are not supported",
                ))
            }
            _ => return Err(bad(err::BIC_UNKNOWN_INST, format!("instruction type {ty}"))),
        }
    }
    Ok(ins)
}

fn emit_action_list(
    ty: u16,
    meter: Option<u32>,
    actions: &[flowtable::Action],
    ip_proto: Option<u8>,
    dialect: Dialect,
    out: &mut Vec<u8>,
) {
    let start = out.len();
    out.put_u16(ty);
    out.put_u16(0);
    out.put_zeros(4);
    if let Some(m) = meter {
        action::of15::emit_meter(m, out);
    }
    emit_actions_in(actions, ip_proto, dialect, out);
    let len = super::len16(out, start);
    out.patch_u16(start + 2, len);
}

/// Encodes instructions in execution order.
pub fn emit_instructions(ins: &Instructions, out: &mut Vec<u8>) {
    emit_instructions_for(ins, None, out);
}

/// [`emit_instructions`] of a flow whose match fixes `ip_proto`, so that
/// set_field of L4 ports keeps its protocol's header.
pub fn emit_instructions_for(ins: &Instructions, ip_proto: Option<u8>, out: &mut Vec<u8>) {
    emit_instructions_in(ins, ip_proto, Dialect::Of13, out);
}

/// [`emit_instructions_for`] in `dialect` (1.5 puts the meter first in
/// apply-actions).
pub fn emit_instructions_in(
    ins: &Instructions,
    ip_proto: Option<u8>,
    dialect: Dialect,
    out: &mut Vec<u8>,
) {
    let meter_action = match (ins.meter, dialect) {
        (Some(m), Dialect::Of15) => Some(m),
        (Some(m), Dialect::Of13) => {
            out.put_u16(OFPIT_METER);
            out.put_u16(8);
            out.put_u32(m);
            None
        }
        (None, _) => None,
    };
    match (&ins.apply_actions, meter_action) {
        (Some(a), m) => emit_action_list(OFPIT_APPLY_ACTIONS, m, a, ip_proto, dialect, out),
        (None, Some(m)) => {
            emit_action_list(OFPIT_APPLY_ACTIONS, Some(m), &[], ip_proto, dialect, out)
        }
        (None, None) => {}
    }
    if ins.clear_actions {
        out.put_u16(OFPIT_CLEAR_ACTIONS);
        out.put_u16(8);
        out.put_zeros(4);
    }
    if let Some(a) = &ins.write_actions {
        emit_action_list(OFPIT_WRITE_ACTIONS, None, a, ip_proto, dialect, out);
    }
    if let Some((v, m)) = ins.write_metadata {
        out.put_u16(OFPIT_WRITE_METADATA);
        out.put_u16(24);
        out.put_zeros(4);
        out.put_u64(v);
        out.put_u64(m);
    }
    if let Some(t) = ins.goto_table {
        out.put_u16(OFPIT_GOTO_TABLE);
        out.put_u16(8);
        out.put_u8(t);
        out.put_zeros(3);
    }
}
