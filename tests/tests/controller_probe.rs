//! `Controller.inactivity_probe` from the database, per controller, as
//! ovs-vswitchd 3.1 carries it out: a controller that answers HELLO but
//! never an ECHO_REQUEST is sent one after a probe interval of silence
//! and dropped after another (OVS's rconn). The same `ovs-vsctl`
//! commands run against xbr (started with a 30 s `--inactivity-probe`,
//! which the row must override) and against ovs-vswitchd; the row asks
//! for 1000 ms, which OVS reads as 1 s and raises to its 5 s floor, so
//! both drop the controller about 10 s after its HELLO.
//!
//! Needs root, a built `xbr`, ovsdb-server and ovs-vswitchd (OVS 3.1),
//! like tests/ovsdb.rs.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};
use xbr_tests::ovsdb::OvsDb;
use xbr_tests::{unique_tag, HarnessError, Result};

const OFPT_ECHO_REQUEST: u8 = 2;

fn io_err(context: &str, source: std::io::Error) -> HarnessError {
    HarnessError::Io {
        context: context.into(),
        source,
    }
}

/// What the silent controller saw: when the switch's first ECHO_REQUEST
/// came and when the switch hung up, both from the controller's HELLO.
#[derive(Debug)]
struct Seen {
    echo: Option<Duration>,
    closed: Duration,
}

/// Accepts the switch's connection on `listener`, says HELLO (OpenFlow
/// 1.3), then only reads, until the switch closes (at most `limit`).
fn silent_controller(listener: &TcpListener, limit: Duration) -> Result<Seen> {
    let io = |what: &'static str| move |e| io_err(what, e);
    listener
        .set_nonblocking(true)
        .map_err(io("listener mode"))?;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut conn = loop {
        match listener.accept() {
            Ok((c, _)) => break c,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return Err(io_err("no connection from the switch", e)),
        }
    };
    conn.set_nonblocking(false).map_err(io("socket mode"))?;
    conn.set_read_timeout(Some(Duration::from_millis(100)))
        .map_err(io("read timeout"))?;
    conn.write_all(&[4, 0, 0, 8, 0, 0, 0, 1])
        .map_err(io("sending HELLO"))?;
    let hello = Instant::now();
    let mut echo = None;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while hello.elapsed() < limit {
        match conn.read(&mut chunk) {
            Ok(0) => {
                return Ok(Seen {
                    echo,
                    closed: hello.elapsed(),
                })
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return Ok(Seen {
                    echo,
                    closed: hello.elapsed(),
                })
            }
            Err(e) => return Err(io_err("reading from the switch", e)),
        }
        while buf.len() >= 8 {
            let len = usize::from(u16::from_be_bytes([buf[2], buf[3]])).max(8);
            if buf.len() < len {
                break;
            }
            let msg: Vec<u8> = buf.drain(..len).collect();
            if msg[1] == OFPT_ECHO_REQUEST && echo.is_none() {
                echo = Some(hello.elapsed());
            }
        }
    }
    Err(HarnessError::Unexpected(format!(
        "the switch kept a controller that answers no echo request for {limit:?}"
    )))
}

/// Runs the sequence against one switch; returns what the controller saw.
fn run(ovs: bool) -> Result<Seen> {
    let bridge = format!("xbrt{}", unique_tag());
    let listener = TcpListener::bind("127.0.0.1:0").expect("listener");
    let port = listener.local_addr().expect("address").port();
    let mut db = OvsDb::start(None)?;
    if ovs {
        db.start_vswitchd()?;
    } else {
        let target = format!("unix:{}", db.db_sock().display());
        db.start_xbr_with(&target, &["--inactivity-probe", "30"])?;
    }
    let mut add = vec!["add-br", &bridge];
    if ovs {
        add.extend(["--", "set", "Bridge", &bridge, "datapath_type=netdev"]);
    }
    db.vsctl(&add)?.ok()?;
    let target = format!("tcp:127.0.0.1:{port}");
    db.vsctl(&[
        "set-controller",
        &bridge,
        &target,
        "--",
        "set",
        "controller",
        &bridge,
        "inactivity_probe=1000",
    ])?
    .ok()?;
    let seen = silent_controller(&listener, Duration::from_secs(25));
    let _ = db.vsctl(&["del-br", &bridge]);
    seen.map_err(|e| {
        HarnessError::Unexpected(format!(
            "{e}\n{}",
            if ovs { String::new() } else { db.xbr_log() }
        ))
    })
}

#[test]
fn a_silent_controller_is_dropped_after_two_of_its_probe_intervals_like_ovs() -> Result<()> {
    let ovs = run(true)?;
    let xbr = run(false)?;
    // OVS keeps time in whole seconds: the probe goes at 5-6 s, the
    // connection ends at 10-12 s.
    for (who, seen) in [("ovs-vswitchd", &ovs), ("xbr", &xbr)] {
        let echo = seen
            .echo
            .unwrap_or_else(|| panic!("{who} sent no echo request: {seen:?}"));
        assert!(
            (Duration::from_millis(4500)..Duration::from_secs(8)).contains(&echo),
            "{who}: echo request at {echo:?} ({seen:?}; ovs-vswitchd {ovs:?})"
        );
        assert!(
            (Duration::from_millis(9500)..Duration::from_secs(15)).contains(&seen.closed),
            "{who}: dropped at {:?} ({seen:?}; ovs-vswitchd {ovs:?})",
            seen.closed
        );
    }
    Ok(())
}
