//! Any netlink message as an answer from the kernel's conntrack
//! (ctnetlink), parsed for the host connections xbr learns: no panic, and
//! a connection it accepts comes back through the request xbr would send
//! for it.

#![no_main]

use dataplane::conntrack::ctnetlink::{get_request, ConntrackMsg};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&zone, msg)) = data.split_first() else {
        return;
    };
    if let Ok(Some(c)) = ConntrackMsg::parse(msg, u16::from(zone)) {
        // The request for its tuple is well-formed netlink: its length
        // field is its length.
        let req = get_request(&c.orig, 7);
        let len = u32::from_ne_bytes([req[0], req[1], req[2], req[3]]);
        assert_eq!(len as usize, req.len());
    }
});
