//! Any bytes, decoded as one OpenFlow message: the decoder must never
//! panic, and whatever it accepts must encode to bytes that decode to the
//! same value (so a flow xbr stores is the flow it dumps).

#![no_main]

use libfuzzer_sys::fuzz_target;
use ofproto::wire::header::msg_type;
use ofproto::wire::message::split;
use ofproto::wire::action::Dialect;
use ofproto::wire::{group15, instruction, mods, Header, HeaderRepr, Message};

fuzz_target!(|data: &[u8]| {
    // Framing never hands the decoder more than a 16-bit length allows.
    if data.len() > usize::from(u16::MAX) {
        return;
    }
    let Ok(view) = Header::new_checked(data) else {
        return;
    };
    // The framing layer has already checked the length field; decode the
    // body whatever the header says so the fuzzer need not guess lengths.
    let h = HeaderRepr::parse(&view);
    // OpenFlow 1.5's GROUP_MOD has its own codec, with the same promise.
    if h.version == 6 && h.msg_type == msg_type::GROUP_MOD {
        if let Ok(gm) = group15::parse_group_mod(&data[8..]) {
            let mut bytes = Vec::new();
            group15::emit_group_mod(&gm, &mut bytes);
            match group15::parse_group_mod(&bytes) {
                Ok(gm2) => assert_eq!(gm, gm2, "re-encoding changed {bytes:02x?}"),
                Err(e) => panic!("re-encoded {gm:?} does not decode: {e} ({bytes:02x?})"),
            }
        }
        return;
    }
    // OpenFlow 1.5's FLOW_MOD: its instructions' own dialect; no panic,
    // and the instructions it accepts re-encode to themselves.
    if h.version == 6 && h.msg_type == msg_type::FLOW_MOD {
        if let Ok(fm) = mods::parse_flow_mod_in(&data[8..], Dialect::Of15) {
            let mut bytes = Vec::new();
            instruction::emit_instructions_in(&fm.instructions, None, Dialect::Of15, &mut bytes);
            match instruction::parse_instructions_in(&bytes, Dialect::Of15) {
                Ok(ins) => assert_eq!(ins, fm.instructions, "re-encoding changed {bytes:02x?}"),
                Err(e) => panic!("re-encoded {fm:?} does not decode: {e} ({bytes:02x?})"),
            }
        }
        return;
    }
    let Ok(m) = Message::parse(&h, &data[8..]) else {
        return;
    };
    let bytes = m.emit(h.xid);
    let (h2, body) = match split(&bytes) {
        Ok(x) => x,
        Err(e) => panic!("re-encoded {m:?} is not a framed message: {e}"),
    };
    assert_eq!(h2.msg_type, h.msg_type, "type changed for {m:?}");
    assert_eq!(h2.xid, h.xid);
    match Message::parse(&h2, body) {
        Ok(m2) => assert_eq!(m, m2, "re-encoding changed the message: {bytes:02x?}"),
        Err(e) => panic!("re-encoded {m:?} does not decode: {e} ({bytes:02x?})"),
    }
});
