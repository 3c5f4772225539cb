//! `restartbench`: bad input is refused with exit code 2 before anything
//! is set up; `--short` measures xbr and OVS 3.1 in one run and prints
//! the table (root: namespaces, XDP, OVS; needs `xbr` built next to the
//! benchmark, `cargo build -p xbr-daemon --bin xbr`).

mod common;

fn restartbench(args: &[&str]) -> (Option<i32>, String, String) {
    common::run(env!("CARGO_BIN_EXE_restartbench"), args)
}

#[test]
fn bad_arguments_exit_2_naming_the_problem() {
    for (args, needle) in [
        (&["--systems", "xbr,foo"][..], "foo"),
        (&["--connections", "0"][..], "--connections"),
        (&["--seconds", "1"][..], "--seconds"),
        (&["--rate", "10"][..], "--rate"),
    ] {
        let (code, _, err) = restartbench(args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

/// The row `name` of the table: its xbr, OVS and ratio cells.
fn row<'a>(out: &'a str, name: &str) -> Vec<&'a str> {
    let line = out
        .lines()
        .find(|l| l.starts_with(&format!("| {name} |")))
        .unwrap_or_else(|| panic!("no row {name:?} in:\n{out}"));
    line.trim_matches('|')
        .split('|')
        .map(str::trim)
        .skip(1)
        .collect()
}

#[test]
fn the_short_mode_measures_xbr_and_ovs_in_one_run() {
    let (code, out, err) = restartbench(&["--short"]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(out.contains("PASS"), "{out}");
    // The stream the XDP flow cache carries loses nothing across xbr's
    // restart; OVS's userspace datapath stops with its process.
    let cached = row(&out, "frames lost, cached flow (A to B)");
    assert!(cached[0].starts_with("0 of "), "{out}");
    assert!(!cached[1].starts_with("0 of ") && cached[1] != "-", "{out}");
    for name in [
        "frames lost, uncached flow (A to C)",
        "new process start to the probe's first frame",
        "new process start to ready",
    ] {
        let r = row(&out, name);
        assert!(r[0] != "-" && r[1] != "-" && r[2] != "-", "{name}: {out}");
    }
    // xbr restores its connections from the state file; OVS's userspace
    // conntrack does not outlive the process.
    assert_eq!(
        row(&out, "connections before / after the restart")[0],
        "100 / 100",
        "{out}"
    );
    assert_eq!(
        row(&out, "flows before / after the restart")[..2],
        ["1003 / 1003", "1003 / 1003"],
        "{out}"
    );
}
