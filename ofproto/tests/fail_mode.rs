//! Fail mode as in ovs-vswitchd (`ofproto/src/fail_mode.rs`): a standalone
//! bridge without controllers forwards by its flows over a priority-0
//! NORMAL flow; fail-open (NORMAL whatever the flows say) only once the
//! controllers it has configured have all been away for three probe
//! intervals.

mod common;
use common::{normalise_dump, Harness};
use std::time::Duration;

#[test]
fn a_flush_leaves_the_normal_flow_of_a_standalone_bridge_only() {
    let h = Harness::start("fail-mode-flush");
    h.ok(&[
        "add-flow",
        &h.target(),
        "table=3,priority=9,ip,actions=drop",
    ]);
    h.ok(&["add-flow", &h.target(), "priority=5,actions=output:2"]);
    h.bridge.flush_flows(true).unwrap();
    let dump = h.ok(&["dump-flows", &h.target()]);
    assert_eq!(
        normalise_dump(&dump),
        vec!["cookie=0x0, table=0, priority=0 actions=NORMAL".to_string()],
        "{dump}"
    );
    // A flush for a secure bridge (or one with controllers) adds nothing.
    h.bridge.flush_flows(false).unwrap();
    assert!(normalise_dump(&h.ok(&["dump-flows", &h.target()])).is_empty());
}

#[test]
fn fail_open_needs_a_configured_controller() {
    let mut h = Harness::start("fail-mode-open");
    let server = h.server.as_mut().unwrap();
    server.set_fail_mode(true);
    // Standalone, no controller configured: the flows apply.
    assert!(!*h.dp.fail_open.lock());
    // A configured controller nobody answers: fail-open, three probe
    // intervals (here 3 x 200 ms) later, as in OVS.
    let nobody = "127.0.0.1:9".parse().unwrap();
    let start = std::time::Instant::now();
    server
        .add_controller(nobody, Duration::from_millis(200), None)
        .unwrap();
    assert!(!*h.dp.fail_open.lock(), "fail-open at once");
    while !*h.dp.fail_open.lock() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "never failed open"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(start.elapsed() >= Duration::from_millis(600));
    server.set_fail_mode(false);
    assert!(!*h.dp.fail_open.lock());
}
