//! What ovsdb-server sends, as the OVSDB client reads it: a stream of
//! JSON-RPC messages, each classified; the monitor's replies and
//! `update` notifications are applied to the replica, and the desired
//! configuration (bridges, ports, controllers, flow limits, QoS) read
//! from it after each. No panic, whatever the rows hold.

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use xbr_daemon::ovsdb::datum::Replica;
use xbr_daemon::ovsdb::desired;
use xbr_daemon::ovsdb::rpc::{classify, Incoming};

fuzz_target!(|data: &[u8]| {
    let mut db = Replica::default();
    for msg in serde_json::Deserializer::from_slice(data).into_iter::<Value>() {
        let Ok(msg) = msg else {
            break;
        };
        match classify(msg) {
            Some(Incoming::Reply {
                result: Ok(initial),
                ..
            }) => db.apply(&initial),
            Some(Incoming::Request { method, params, .. }) if method == "update" => {
                if let Some(updates) = params.get(1) {
                    db.apply(updates);
                }
            }
            _ => continue,
        }
        let _ = desired::read(&db);
    }
});
