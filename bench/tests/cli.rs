//! The `xbr-bench` command line: bad input is refused with exit code 2
//! and a message naming the problem, before anything is set up; a short
//! run writes the JSON report (root: it builds namespaces).

mod common;

fn xbr_bench(args: &[&str]) -> (Option<i32>, String, String) {
    common::run(env!("CARGO_BIN_EXE_xbr-bench"), args)
}

#[test]
fn bad_arguments_exit_2_naming_the_problem() {
    for (args, needle) in [
        (&["--scenario", "nope"][..], "nope"),
        (&["--systems", "xbr,foo"][..], "foo"),
        (&["--proto", "tcp"][..], "too small for TCP"),
        (&["--pkt-size", "9000"][..], "--pkt-size 9000"),
        (&["--cores", "0,99"][..], "CPU 99"),
        (&["--cores", "0"][..], "--cores"),
        (&["--runs", "0"][..], "--runs"),
        (
            &["--scenario", "vxlan", "--systems", "linux-bridge"][..],
            "linux-bridge",
        ),
        (&["--xbr", "/nonexistent/xbr"][..], "/nonexistent/xbr"),
        (
            &["--scenario", "conntrack", "--systems", "xdp-redirect"][..],
            "no conntrack",
        ),
        (
            &[
                "--scenario",
                "conntrack-new",
                "--systems",
                "xbr,linux-bridge",
            ][..],
            "no conntrack",
        ),
        (
            &["--scenario", "conntrack", "--connections", "0"][..],
            "--connections",
        ),
        (&["--connections", "1,x"][..], "--connections"),
        (
            &["--scenario", "vxlan", "--systems", "afxdp-l2fwd"][..],
            "does not decapsulate",
        ),
        (
            &["--scenario", "conntrack", "--systems", "afxdp-l2fwd"][..],
            "no conntrack",
        ),
        (
            &["--scenario", "flowmod", "--systems", "xbr,xdp-redirect"][..],
            "flow table",
        ),
        (
            &["--scenario", "churn", "--systems", "linux-bridge"][..],
            "no flow table",
        ),
        (&["--scenario", "churn", "--flows", "1"][..], "--flows"),
        (
            &["--scenario", "encap", "--systems", "xbr,linux-bridge"][..],
            "does not encapsulate",
        ),
        (
            &["--scenario", "encap", "--systems", "afxdp-l2fwd"][..],
            "does not encapsulate",
        ),
        (
            &["--scenario", "pipeline", "--proto", "tcp"][..],
            "too small for TCP",
        ),
        (&["--scenario", "flowmod", "--flows", "0"][..], "--flows"),
    ] {
        let (code, _, err) = xbr_bench(args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn a_short_run_writes_the_json_report_and_the_svg_plot() {
    let dir = std::env::temp_dir().join(format!("xbrt-benchcli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("report.json");
    let svg = dir.join("report.svg");
    let (code, out, err) = xbr_bench(&[
        "--systems",
        "xdp-redirect",
        "--runs",
        "1",
        "--duration",
        "1",
        "--warmup",
        "0",
        "--rate",
        "5000",
        "--json",
        json.to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
    ]);
    let text = std::fs::read_to_string(&json);
    let plot = std::fs::read_to_string(&svg);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("| xdp-redirect |"), "{out}");
    let v: serde_json::Value = serde_json::from_str(&text.unwrap()).unwrap();
    assert_eq!(v["scenario"], "p2p");
    assert_eq!(v["pkt_size"], 64);
    let r = &v["results"][0];
    assert_eq!(r["system"], "xdp-redirect");
    assert_eq!(r["generator"], "xdp-live-frames");
    assert!(r["mpps"].as_f64().unwrap() > 0.004, "{r}");
    assert_eq!(r["loss"].as_f64(), Some(0.0));
    let plot = plot.unwrap();
    assert!(
        plot.starts_with("<svg") && plot.contains("xdp-redirect"),
        "{plot}"
    );
}
