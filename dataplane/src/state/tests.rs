//! The state file's format: written and read back; every kind of bad
//! file refused with its name and problem; flows, groups and meters read
//! back exactly as saved.

use super::restore::{prepare, ContentError};
use super::*;

/// A test's own directory, removed when the test ends, failed or not.
struct TempDir(PathBuf);

impl std::ops::Deref for TempDir {
    type Target = PathBuf;
    fn deref(&self) -> &PathBuf {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn dir() -> TempDir {
    let d = std::env::temp_dir().join(format!(
        "xbrt-state-test-{}-{}",
        std::process::id(),
        std::thread::current()
            .name()
            .unwrap_or("t")
            .replace("::", "-")
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    TempDir(d)
}

/// The agent's kinds of flows (conntrack with NAT and marks, learn-free
/// register moves, groups, a meter, timeouts, flags and cookies).
fn body() -> Body {
    Body {
        flows: [
            "table=0, priority=1000,ip,ct_state=-trk actions=ct(table=0)",
            "cookie=0x1234, table=0, priority=300,ip,in_port=2,nw_src=10.128.0.0/14 \
             actions=load:0x1->NXM_NX_REG0[],goto_table:30",
            "table=30, priority=100,ip,ct_state=-rpl actions=ct(commit,zone=5,\
             exec(load:0x2->NXM_NX_CT_MARK[]),nat(src=10.0.0.11)),goto_table:31",
            "table=31, idle_timeout=60, send_flow_rem priority=10,ip,nw_dst=10.128.0.3 \
             actions=meter:7,group:4",
            "table=80, priority=0 actions=drop",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        groups: vec![
            "group_id=4,type=select,bucket=actions=output:1,bucket=actions=output:2".into(),
        ],
        meters: vec![SavedMeter {
            id: 7,
            flags: 0x5,
            bands: vec![SavedBand {
                kind: "drop".into(),
                prec_level: 0,
                rate: 1000,
                burst_size: 100,
            }],
        }],
        ports: vec![SavedPort {
            name: "veth1".into(),
            ofport: 3,
        }],
        connections: Vec::new(),
    }
}

/// `body` as the running tables would print it (the same flows, in the
/// canonical text `dump-flows` uses).
fn canonical(b: &Body) -> Body {
    let saved = Saved {
        path: "x".into(),
        header: header(),
        body: b.clone(),
    };
    let mods = super::restore::prepare_unchecked(&saved).expect("parses");
    let mut t = flowtable::FlowTables::new();
    t.apply_batch(&mods).expect("applies");
    let mut rules = t.flows(&flowtable::flow_mod::FlowFilter::default());
    rules.sort_by_key(|r| r.id);
    let mut out = b.clone();
    out.flows = rules.iter().map(|r| capture::flow_line(r)).collect();
    out
}

fn header() -> Header {
    Header {
        format: MAGIC.into(),
        version: FORMAT_VERSION,
        xbr_version: "0".into(),
        bridge: "br0".into(),
        saved_at_unix_ms: 0,
        reason: Reason::Stop,
        body_len: 0,
        body_crc32c: 0,
    }
}

#[test]
fn a_written_file_reads_back_and_its_pipeline_reads_back_as_saved() {
    let d = dir();
    let p = path(&d, "br0");
    let b = canonical(&body());
    write(&p, "br0", Reason::Snapshot, &b).expect("writes");
    let saved = read(&p, "br0").expect("reads").expect("exists");
    assert_eq!(saved.body, b);
    assert_eq!(saved.header.reason, Reason::Snapshot);
    assert_eq!(saved.header.version, FORMAT_VERSION);
    let mods = prepare(&saved).expect("restorable");
    assert_eq!(mods.len(), 1 + 1 + b.flows.len());
    // No temporary file is left behind.
    let names: Vec<_> = std::fs::read_dir(&*d)
        .expect("lists")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("br0.state")]);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&p).expect("stat").permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the state file is readable by others");
    assert!(read(&path(&d, "nothing"), "nothing")
        .expect("no error")
        .is_none());
}

#[test]
fn bad_files_are_refused_by_name_and_problem() {
    let d = dir();
    let p = path(&d, "br0");
    let b = canonical(&body());
    write(&p, "br0", Reason::Stop, &b).expect("writes");
    let good = std::fs::read(&p).expect("reads");
    let named = |e: StateError, what: &str| {
        let msg = e.to_string();
        assert!(
            msg.contains(&p.display().to_string()),
            "no file name: {msg}"
        );
        assert!(msg.contains(what), "`{what}` not in: {msg}");
    };

    std::fs::write(&p, &good[..good.len() - 10]).expect("writes");
    named(read(&p, "br0").expect_err("truncated"), "truncated");

    let mut flipped = good.clone();
    let last = flipped.len() - 3;
    flipped[last] ^= 0x01;
    std::fs::write(&p, &flipped).expect("writes");
    named(read(&p, "br0").expect_err("corrupt"), "corrupt");

    std::fs::write(&p, b"cookie=0x0, table=0, actions=drop\n").expect("writes");
    named(
        read(&p, "br0").expect_err("foreign"),
        "not an xbr state file",
    );

    let text = String::from_utf8(good.clone()).expect("utf-8");
    let v2 = text.replacen("\"version\":1,", "\"version\":2,", 1);
    std::fs::write(&p, v2).expect("writes");
    named(read(&p, "br0").expect_err("version"), "format version 2");

    std::fs::write(&p, &good).expect("writes");
    named(read(&p, "br1").expect_err("other bridge"), "bridge br0");

    // A body that checks out but holds a flow this build cannot read.
    let mut bad = b.clone();
    bad.flows
        .push("table=0, priority=1,frobnicate=3 actions=drop".into());
    write(&p, "br0", Reason::Stop, &bad).expect("writes");
    let saved = read(&p, "br0").expect("reads").expect("exists");
    assert!(matches!(
        prepare(&saved),
        Err(ContentError::Flow { index: 5, .. })
    ));
    // A flow that would read back differently (a non-canonical spelling).
    let mut odd = b.clone();
    odd.flows[4] = "table=80,priority=0,actions=drop".into();
    write(&p, "br0", Reason::Stop, &odd).expect("writes");
    let saved = read(&p, "br0").expect("reads").expect("exists");
    assert!(matches!(
        prepare(&saved),
        Err(ContentError::Mismatch {
            what: "flow",
            index: 4,
            ..
        })
    ));
    // A flow referring to a group the file lacks.
    let mut orphan = b;
    orphan.groups.clear();
    write(&p, "br0", Reason::Stop, &orphan).expect("writes");
    let saved = read(&p, "br0").expect("reads").expect("exists");
    assert!(matches!(
        prepare(&saved),
        Err(ContentError::Apply { what: "flow", .. })
    ));
}
