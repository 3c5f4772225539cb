//! What the command-line tests of the bench binaries share.

use std::process::Command;

/// Runs `program` with `args`; its exit code, stdout and stderr.
pub fn run(program: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {program}: {e}"));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
