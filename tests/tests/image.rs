//! The container image (issue 30): `scripts/image` builds it without a
//! registry (debootstrap + buildah, the runtime stage of
//! dist/Containerfile) and the image runs xbr as the DaemonSet does: host
//! network and PID, every capability dropped but the documented ones, the
//! run directory and bpffs mounted from the host. The skeleton scenario
//! (two pods, two flows programmed with the host's `ovs-ofctl` over the
//! shared run directory, ping both ways) passes through it, the liveness
//! probe (`xbr probe`) answers inside the container, and SIGTERM stops it
//! cleanly.
//!
//! This machine's container runtime needs two settings a node does not:
//! `runc` (crun refuses its hybrid cgroup layout) and explicit
//! `--ulimit`s (podman's defaults exceed the hard limits here).
//!
//! Needs root, buildah, podman, runc, debootstrap (scripts/lib.sh installs
//! them), a Debian mirror, and a built `xbr`. About a minute.

use std::path::Path;
use std::process::Command;
use std::time::Duration;
use xbr_tests::{
    require_tool, run_timeout, unique_tag, Pod, Result, Xbr, POD_A_IP, POD_A_MAC, POD_B_IP,
    POD_B_MAC,
};

/// Bound on building the image (debootstrap from the mirror, commit).
const BUILD_TIMEOUT: Duration = Duration::from_secs(600);

/// As dist/kubernetes/xbr-daemonset.yaml's xbr container adds them.
const DAEMONSET_CAPS: &str = "NET_ADMIN,NET_RAW,BPF,PERFMON,IPC_LOCK,SYS_ADMIN";

/// Removes the image and any container left by name, also on failure.
struct Cleanup {
    image: String,
    container: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for args in [
            vec!["--runtime", "runc", "rm", "-f", &self.container],
            vec!["rmi", "-f", &self.image],
        ] {
            let _ = run_timeout(Command::new("podman").args(&args), Duration::from_secs(60));
        }
    }
}

fn podman(args: &[&str], timeout: Duration) -> Result<xbr_tests::CmdOutput> {
    run_timeout(
        Command::new("podman")
            .args(["--runtime", "runc"])
            .args(args),
        timeout,
    )
}

#[test]
fn the_image_builds_without_a_registry_and_runs_the_skeleton_as_the_daemonset_does() -> Result<()> {
    for tool in ["buildah", "podman", "runc", "debootstrap"] {
        require_tool(tool)?;
    }
    let tag = unique_tag();
    let cleanup = Cleanup {
        image: format!("localhost/xbrt-image-{tag}:test"),
        container: format!("xbrt-image-{tag}"),
    };
    let bin = Xbr::binary()?;
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let built = run_timeout(
        Command::new(repo.join("scripts/image")).args([
            "--bin",
            &bin.to_string_lossy(),
            "--tag",
            &cleanup.image,
        ]),
        BUILD_TIMEOUT,
    )?;
    assert!(
        built.success(),
        "scripts/image: {}\n{}",
        built.describe_status(),
        built.stderr
    );
    assert_eq!(built.stdout.trim(), cleanup.image);

    // The image's own entrypoint and files.
    let ulimits = [
        "--ulimit",
        "nofile=4096:4096",
        "--ulimit",
        "nproc=4096:4096",
    ];
    let mut args = vec!["run", "--rm", "--network", "none"];
    args.extend(ulimits);
    args.extend([cleanup.image.as_str(), "--version"]);
    let version = podman(&args, Duration::from_secs(60))?;
    assert!(
        version.success() && version.stdout.starts_with("xbr "),
        "{}\n{}{}",
        version.describe_status(),
        version.stdout,
        version.stderr
    );
    let mut args = vec!["run", "--rm", "--network", "none", "--entrypoint", "sh"];
    args.extend(ulimits);
    args.extend([
        cleanup.image.as_str(),
        "-c",
        "test -s /etc/xbr/xbr.conf && test -s /usr/share/doc/xbr/operations.md \
         && command -v ovsdb-server && command -v ip",
    ]);
    let files = podman(&args, Duration::from_secs(60))?;
    assert!(files.success(), "{}{}", files.stdout, files.stderr);

    // xbr in the image as the DaemonSet runs it. The harness starts
    // `sh -c SCRIPT XBR run --bridge br0 --rundir DIR ...`: the script
    // drops the host binary's path ($0) and hands the rest to the image.
    let a = Pod::new(POD_A_IP, 24, POD_A_MAC)?;
    let b = Pod::new(POD_B_IP, 24, POD_B_MAC)?;
    let script = format!(
        "exec podman --runtime runc run --rm --name {name} --network host --pid host \
         --cap-drop ALL --cap-add {DAEMONSET_CAPS} {ulimits} \
         -v /tmp:/tmp -v /sys/fs/bpf:/sys/fs/bpf {image} \"$@\"",
        name = cleanup.container,
        ulimits = ulimits.join(" "),
        image = cleanup.image,
    );
    let wrapper = ["sh", "-c", script.as_str()];
    let ports = [format!("{}=1", a.host_if()), format!("{}=2", b.host_if())];
    let mut xbr = Xbr::start_wrapped(&wrapper, &["--port", &ports[0], "--port", &ports[1]])?;
    xbr.add_flow("in_port=1,actions=output:2")?;
    xbr.add_flow("in_port=2,actions=output:1")?;
    for (from, to) in [(&a, &b), (&b, &a)] {
        let out = from.ping(to.ip(), 3)?;
        assert!(
            out.success(),
            "ping {} -> {} through the image: {}\n{}\n--- xbr log:\n{}",
            from.ip(),
            to.ip(),
            out.describe_status(),
            out.stdout,
            xbr.log()
        );
    }
    // The DaemonSet's liveness probe, inside the running container.
    let rundir = xbr.rundir().to_string_lossy().into_owned();
    let probe = podman(
        &[
            "exec",
            &cleanup.container,
            "/usr/bin/xbr",
            "probe",
            "--rundir",
            &rundir,
        ],
        Duration::from_secs(30),
    )?;
    assert!(
        probe.success(),
        "xbr probe in the container: {}\n{}{}",
        probe.describe_status(),
        probe.stdout,
        probe.stderr
    );
    // SIGTERM reaches xbr through podman and it stops cleanly.
    let status = xbr.stop(nix::sys::signal::Signal::SIGTERM)?;
    assert!(status.success(), "{status:?}\n{}", xbr.log());
    Ok(())
}
