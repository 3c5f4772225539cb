//! `xbr log BRIDGE [DIRECTIVES]`: a running xbr's log filter is shown and
//! changed without a restart (as `ovs-appctl vlog/set` does for OVS), and
//! a bad filter is refused with exit code 2, leaving the old one.
//!
//! Needs root and a built `xbr`, like every end-to-end test.

use xbr_tests::{Pod, Result, Xbr, BRIDGE};

/// A debug-level event of opening an AF_XDP port.
const DEBUG_LINE: &str = "AF_XDP sockets bound";

#[test]
fn the_log_filter_changes_while_running() -> Result<()> {
    let a = Pod::numbered(2)?;
    let b = Pod::numbered(3)?;
    let c = Pod::numbered(4)?;
    let spec_a = format!("{}=1", a.host_if());
    let xbr = Xbr::start(&["--port", &spec_a])?;
    assert_eq!(xbr.client_ok(&["log", BRIDGE])?, "info\n");
    xbr.client_ok(&["port", "add", BRIDGE, b.host_if()])?;
    assert!(!xbr.log().contains(DEBUG_LINE), "{}", xbr.log());

    // EnvFilter prints its directives most specific first.
    assert_eq!(
        xbr.client_ok(&["log", BRIDGE, "info,dataplane=debug"])?,
        "dataplane=debug,info\n"
    );
    xbr.client_ok(&["port", "add", BRIDGE, c.host_if()])?;
    let log = xbr.log();
    assert!(
        log.lines()
            .any(|l| l.contains(DEBUG_LINE) && l.contains(c.host_if())),
        "{log}"
    );

    let bad = xbr.client(&["log", BRIDGE, "dataplane=loud"])?;
    assert_eq!(bad.code(), Some(2), "{bad:?}");
    assert!(bad.stderr.contains("bad log directives"), "{bad:?}");
    assert_eq!(xbr.client_ok(&["log", BRIDGE])?, "dataplane=debug,info\n");
    Ok(())
}
