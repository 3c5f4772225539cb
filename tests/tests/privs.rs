//! Least privilege (issue 30): `xbr run` keeps exactly the capabilities
//! docs/operations.md lists (dataplane/src/privs.rs) and drops the rest at
//! start; the skeleton scenario (two pods, two flows, ping both ways) works
//! under exactly that set (`capsh` drops every other one from the bounding
//! set, so xbr starts with no more); without any one of them xbr refuses
//! to start, naming it (exit 1, no panic, nothing left attached).
//!
//! Needs root, `capsh` and a built `xbr`.

use std::time::Duration;
use xbr_tests::{
    link_has_xdp, require_tool, Pod, Result, Xbr, POD_A_IP, POD_A_MAC, POD_B_IP, POD_B_MAC,
};

/// The documented set, as capsh names them, with their bit numbers.
const NEEDED: &[(&str, u32)] = &[
    ("cap_net_admin", 12),
    ("cap_net_raw", 13),
    ("cap_ipc_lock", 14),
    ("cap_perfmon", 38),
    ("cap_bpf", 39),
];

/// Every capability of this process's bounding set, by capsh's names.
fn bounding() -> Result<Vec<String>> {
    require_tool("capsh")?;
    let out = xbr_tests::run_timeout(
        std::process::Command::new("capsh").arg("--print"),
        Duration::from_secs(10),
    )?
    .ok()?;
    let line = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("Bounding set ="))
        .expect("capsh --print shows the bounding set");
    Ok(line.split(',').map(str::to_string).collect())
}

/// `capsh --drop=<all but keep> -- -c 'exec "$0" "$@"'`.
fn capsh_keeping(keep: &[&str]) -> Result<Vec<String>> {
    let drop: Vec<String> = bounding()?
        .into_iter()
        .filter(|c| !keep.contains(&c.as_str()))
        .collect();
    Ok(vec![
        "capsh".into(),
        format!("--drop={}", drop.join(",")),
        "--".into(),
        "-c".into(),
        "exec \"$0\" \"$@\"".into(),
    ])
}

/// `CapEff`, `CapPrm` and `CapBnd` of process `pid`.
fn cap_sets(pid: u32) -> [u64; 3] {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    parse_cap_sets(&status)
}

/// [`cap_sets`] of thread `tid` of `pid`; `None` if the thread has
/// ended since it was listed (xbr starts short-lived helper threads).
fn thread_cap_sets(pid: u32, tid: u32) -> Option<[u64; 3]> {
    match std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")) {
        Ok(status) => Some(parse_cap_sets(&status)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => panic!("thread {tid}'s status: {e}"),
    }
}

fn parse_cap_sets(status: &str) -> [u64; 3] {
    let get = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .map(|v| u64::from_str_radix(v.trim(), 16).expect("hex"))
            .expect("capability line")
    };
    [get("CapEff:"), get("CapPrm:"), get("CapBnd:")]
}

fn needed_mask() -> u64 {
    NEEDED
        .iter()
        .map(|(_, bit)| 1u64 << bit)
        .fold(0, |a, b| a | b)
}

fn ping_both_ways(xbr: &Xbr, a: &Pod, b: &Pod) -> Result<()> {
    xbr.add_flow("in_port=1,actions=output:2")?;
    xbr.add_flow("in_port=2,actions=output:1")?;
    for (from, to) in [(a, b), (b, a)] {
        let out = from.ping(to.ip(), 3)?;
        assert!(
            out.success(),
            "ping {} -> {}: {}\n{}\n--- xbr log:\n{}",
            from.ip(),
            to.ip(),
            out.describe_status(),
            out.stdout,
            xbr.log()
        );
    }
    Ok(())
}

#[test]
fn xbr_run_as_root_keeps_only_the_needed_set() -> Result<()> {
    let a = Pod::new(POD_A_IP, 24, POD_A_MAC)?;
    let b = Pod::new(POD_B_IP, 24, POD_B_MAC)?;
    let xbr = Xbr::with_ports(&[(a.host_if(), 1), (b.host_if(), 2)])?;
    let pid = xbr.pid().expect("running");
    // Every thread (the packet threads were started after the drop).
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("tasks");
    for task in tasks.filter_map(std::result::Result::ok) {
        let tid: u32 = task.file_name().to_string_lossy().parse().expect("tid");
        // Root holds CAP_SYS_ADMIN (21), which xbr keeps for
        // xdp-peer-gro (on by default): privs::OPTIONAL.
        let kept = needed_mask() | 1 << 21;
        let Some([eff, prm, bnd]) = thread_cap_sets(pid, tid) else {
            continue;
        };
        assert_eq!(eff, kept, "thread {tid}: CapEff {eff:#x}");
        assert_eq!(prm, kept, "thread {tid}: CapPrm {prm:#x}");
        assert_eq!(bnd, kept, "thread {tid}: CapBnd {bnd:#x}");
    }
    ping_both_ways(&xbr, &a, &b)
}

#[test]
fn skeleton_works_under_exactly_the_needed_set() -> Result<()> {
    let a = Pod::new(POD_A_IP, 24, POD_A_MAC)?;
    let b = Pod::new(POD_B_IP, 24, POD_B_MAC)?;
    let keep: Vec<&str> = NEEDED.iter().map(|(c, _)| *c).collect();
    let wrapper = capsh_keeping(&keep)?;
    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    let ports = [format!("{}=1", a.host_if()), format!("{}=2", b.host_if())];
    let xbr = Xbr::start_wrapped(&wrapper, &["--port", &ports[0], "--port", &ports[1]])?;
    let [_, _, bnd] = cap_sets(xbr.pid().expect("running"));
    assert_eq!(
        bnd,
        needed_mask(),
        "capsh should have left only the needed set"
    );
    ping_both_ways(&xbr, &a, &b)
}

#[test]
fn without_any_needed_capability_xbr_refuses_clearly() -> Result<()> {
    let a = Pod::new(POD_A_IP, 24, POD_A_MAC)?;
    let port = format!("{}=1", a.host_if());
    for (missing, _) in NEEDED {
        let keep: Vec<&str> = NEEDED
            .iter()
            .map(|(c, _)| *c)
            .filter(|c| c != missing)
            .collect();
        let wrapper = capsh_keeping(&keep)?;
        let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
        let (out, rundir) =
            Xbr::run_once_wrapped(&wrapper, &["--port", &port], Duration::from_secs(20))?;
        assert_eq!(
            out.code(),
            Some(1),
            "without {missing}: {}\n{}",
            out.describe_status(),
            out.stderr
        );
        let name = missing.to_uppercase();
        assert!(
            out.stderr.contains("missing capabilities") && out.stderr.contains(&name),
            "without {missing}, the message should name {name}:\n{}",
            out.stderr
        );
        assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
        assert!(!rundir.mgmt_path().exists());
        assert!(
            !link_has_xdp(a.host_if())?,
            "without {missing}: XDP left attached"
        );
    }
    Ok(())
}
