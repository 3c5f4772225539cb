//! The DaemonSet (dist/kubernetes/xbr-daemonset.yaml, issue 30): valid
//! against the Kubernetes API schemas (kubernetes-validate, strict; a
//! broken copy is refused, so the check can fail), and what it says
//! matches xbr: the capabilities xbr keeps, probes that run `xbr probe`,
//! the host's network, PID, run directory, /sys and bpffs, and a
//! configuration that `xbr` reads.
//!
//! Needs python3-venv (scripts/validate-manifests installs
//! kubernetes-validate from PyPI into the target dir) and a built `xbr`.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use xbr_tests::{run_timeout, unique_tag, CmdOutput, Result, Xbr, CMD_TIMEOUT, NAME_PREFIX};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn manifest() -> PathBuf {
    repo().join("dist/kubernetes/xbr-daemonset.yaml")
}

/// One validator run at a time (the first one installs it).
static VALIDATOR: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn validate(file: &Path) -> Result<CmdOutput> {
    let _one = VALIDATOR
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    run_timeout(
        Command::new(repo().join("scripts/validate-manifests")).arg(file),
        Duration::from_secs(600),
    )
}

/// The manifest's documents as JSON (PyYAML from the validator's venv).
fn documents() -> Result<Vec<Value>> {
    let target = Xbr::binary()?
        .parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .expect("the target dir");
    let python = target.join("kubernetes-validate/bin/python");
    let out = run_timeout(
        Command::new(python).arg("-c").arg(
            "import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))",
        ).arg(manifest()),
        CMD_TIMEOUT,
    )?
    .ok()?;
    Ok(serde_json::from_str::<Vec<Value>>(&out.stdout).expect("JSON"))
}

/// A temporary file, removed on drop.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, text: &str) -> TempFile {
        let p = std::env::temp_dir().join(format!("{NAME_PREFIX}-{}-{name}", unique_tag()));
        std::fs::write(&p, text).expect("writing a temp file");
        TempFile(p)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn the_daemonset_validates_and_a_broken_one_does_not() -> Result<()> {
    let out = validate(&manifest())?;
    assert!(out.success(), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("passed for resource daemonset/ovs"),
        "{}",
        out.stdout
    );
    let text = std::fs::read_to_string(manifest()).expect("the manifest");
    for (what, broken) in [
        (
            "a string for a boolean",
            text.replace("hostNetwork: true", "hostNetwork: \"yes\""),
        ),
        (
            "a misspelt field",
            text.replace("hostPID: true", "hostPID: true\n      hostNetwrk: true"),
        ),
    ] {
        assert_ne!(broken, text);
        let file = TempFile::new("broken.yaml", &broken);
        let out = validate(&file.0)?;
        assert!(!out.success(), "{what} passed:\n{}", out.stdout);
    }
    Ok(())
}

fn container<'a>(pod: &'a Value, list: &str, name: &str) -> &'a Value {
    pod[list]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == name))
        .unwrap_or_else(|| panic!("no {list} {name}"))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn the_daemonset_runs_xbr_as_documented() -> Result<()> {
    // Installs the validator (and PyYAML with it) if needed.
    validate(&manifest())?.ok()?;
    let docs = documents()?;
    let ds = docs
        .iter()
        .find(|d| d["kind"] == "DaemonSet")
        .expect("a DaemonSet");
    assert_eq!(ds["metadata"]["name"], "ovs");
    assert_eq!(ds["metadata"]["namespace"], "openshift-sdn");
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(pod["hostPID"], true);

    // The capabilities: exactly the ones xbr keeps (doctor lists them).
    let out = run_timeout(Command::new(Xbr::binary()?).arg("doctor"), CMD_TIMEOUT)?;
    let mut kept: Vec<String> = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("ok    capabilities: holds "))
        .expect("doctor's capabilities line")
        .split(", ")
        .map(|c| c.trim_start_matches("CAP_").to_string())
        .collect();
    kept.sort();
    for (list, name) in [("initContainers", "doctor"), ("containers", "xbr")] {
        let c = container(pod, list, name);
        let caps = &c["securityContext"]["capabilities"];
        let mut add = strings(&caps["add"]);
        add.sort();
        assert_eq!(add, kept, "{name}'s capabilities");
        assert_eq!(strings(&caps["drop"]), ["ALL"]);
        assert_eq!(c["securityContext"]["privileged"], false);
        let mounts: Vec<&str> = c["volumeMounts"]
            .as_array()
            .expect("mounts")
            .iter()
            .filter_map(|m| m["mountPath"].as_str())
            .collect();
        for want in ["/var/run/openvswitch", "/sys", "/sys/fs/bpf"] {
            assert!(mounts.contains(&want), "{name} lacks the mount {want}");
        }
    }
    let xbr = container(pod, "containers", "xbr");
    assert_eq!(
        strings(&xbr["command"]),
        ["/usr/bin/xbr", "run", "--config", "/etc/xbr/xbr.conf"]
    );
    for probe in ["startupProbe", "livenessProbe", "readinessProbe"] {
        let cmd = strings(&xbr[probe]["exec"]["command"]);
        assert_eq!(cmd[..2], ["/usr/bin/xbr", "probe"], "{probe}");
        // The probe's flags are xbr's (a bad one would exit 2).
        let out = run_timeout(
            Command::new(Xbr::binary()?).args(&cmd[1..]).arg("--help"),
            CMD_TIMEOUT,
        )?;
        assert!(out.success(), "{probe}: {}", out.stderr);
    }
    assert!(strings(&xbr["readinessProbe"]["exec"]["command"]).contains(&"--ovsdb".to_string()));

    // The ConfigMap's xbr.conf is one xbr reads (not refused: exit != 2).
    let cm = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap")
        .expect("a ConfigMap");
    let conf = TempFile::new(
        "xbr.conf",
        cm["data"]["xbr.conf"].as_str().expect("xbr.conf"),
    );
    let out = run_timeout(
        Command::new(Xbr::binary()?)
            .args(["doctor", "--config"])
            .arg(&conf.0),
        CMD_TIMEOUT,
    )?;
    assert_ne!(out.code(), Some(2), "{}", out.stderr);
    assert!(
        out.stdout.contains("ovsdb: /var/run/openvswitch/db.sock"),
        "{}",
        out.stdout
    );
    Ok(())
}
