//! Any text, parsed as ovs-ofctl flow, group, bundle and packet syntax:
//! the parser must never panic, and a flow it accepts must print to text
//! that parses again.

#![no_main]

use flowtable::text::{
    format_instructions, format_match, parse_bundle_line, parse_flow, parse_group, parse_packet,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    for line in text.lines().take(64) {
        let _ = parse_group(line);
        let _ = parse_bundle_line(line);
        let _ = parse_packet(line);
        if let Ok(fm) = parse_flow(line) {
            let printed = format!(
                "table={},{},actions={}",
                fm.table_id,
                format_match(&fm.matching, fm.priority),
                format_instructions(&fm.instructions)
            );
            if let Err(e) = parse_flow(&printed) {
                panic!("{line:?} parsed, but its printed form {printed:?} does not: {e}");
            }
        }
    }
});
