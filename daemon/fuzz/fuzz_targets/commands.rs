//! The control sockets' command parsing: `ovs-appctl` requests (JSON-RPC
//! as the unixctl server reads them, then the method and its parameters
//! planned for the running bridges) and `xbr`'s client command line
//! (`xbr trace|conntrack|port|pmd|...`, clap). No panic; a plan never
//! names a bridge that is not running.
//!
//! Input: a selector byte, then the text. Selector even: the text is a
//! stream of JSON-RPC requests. Odd: NUL-separated `xbr` arguments.

#![no_main]

use clap::Parser;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use xbr_daemon::ctl_cli::ClientCommand;
use xbr_daemon::unixctl::{plan, Plan};

#[derive(Parser)]
#[command(name = "xbr")]
struct Cli {
    #[command(subcommand)]
    command: ClientCommand,
}

const BRIDGES: [&str; 2] = ["br0", "br1"];

fuzz_target!(|data: &[u8]| {
    let Some((&sel, text)) = data.split_first() else {
        return;
    };
    if sel % 2 == 1 {
        let Ok(text) = std::str::from_utf8(text) else {
            return;
        };
        let args = std::iter::once("xbr").chain(text.split('\0'));
        let _ = Cli::try_parse_from(args);
        return;
    }
    let bridges: Vec<String> = BRIDGES.iter().map(|b| b.to_string()).collect();
    for request in serde_json::Deserializer::from_slice(text).into_iter::<Value>() {
        let Ok(request) = request else {
            break;
        };
        let Some(method) = request.get("method").and_then(Value::as_str) else {
            continue;
        };
        let params: Vec<String> = request
            .get("params")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|p| p.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        let asks = match plan(method, &params, &bridges) {
            Ok(Plan::Ask(asks) | Plan::AskThen(asks, _)) => asks,
            Ok(Plan::DpifShow(names)) => names.into_iter().map(|b| (b, String::new())).collect(),
            _ => Vec::new(),
        };
        for (bridge, _) in asks {
            assert!(bridges.contains(&bridge), "plan asks {bridge}");
        }
    }
});
