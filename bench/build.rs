//! Compiles the benchmark's XDP programs in bpf/ (generator, sink, the
//! kernel-redirect reference) with clang into ELF objects under OUT_DIR;
//! src/bpf.rs embeds them, so xbr-bench needs no files next to it. Same
//! recipe as dataplane/build.rs: libbpf's headers from libbpf-sys
//! (DEP_BPF_INCLUDE), <linux/bpf.h> from the system's kernel headers, the
//! multiarch directory added back for <asm/types.h>.

use std::env;
use std::path::PathBuf;
use std::process::Command;

const SOURCES: &[&str] = &["xbrb_gen", "xbrb_sink", "xbrb_redirect"];

fn main() {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let clang = env::var_os("CLANG").unwrap_or_else(|| "clang".into());
    println!("cargo:rerun-if-env-changed=CLANG");
    let libbpf_include = env::var_os("DEP_BPF_INCLUDE")
        .expect("libbpf-sys must be a direct dependency (it exports DEP_BPF_INCLUDE)");
    let mut include_args = vec![format!("-I{}", PathBuf::from(libbpf_include).display())];
    let multiarch = match env::var("CARGO_CFG_TARGET_ARCH")
        .unwrap_or_default()
        .as_str()
    {
        "x86_64" => Some("x86_64-linux-gnu"),
        "aarch64" => Some("aarch64-linux-gnu"),
        "powerpc64" => Some("powerpc64le-linux-gnu"),
        "s390x" => Some("s390x-linux-gnu"),
        "riscv64" => Some("riscv64-linux-gnu"),
        _ => None,
    };
    if let Some(triple) = multiarch {
        include_args.push(format!("-idirafter/usr/include/{triple}"));
    }
    for name in SOURCES {
        let src = manifest_dir.join("bpf").join(format!("{name}.c"));
        let obj = out_dir.join(format!("{name}.bpf.o"));
        println!("cargo:rerun-if-changed={}", src.display());
        let status = Command::new(&clang)
            .args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror"])
            .args(&include_args)
            .arg("-c")
            .arg(&src)
            .arg("-o")
            .arg(&obj)
            .status();
        match status {
            Ok(s) if s.success() => {}
            Ok(s) => panic!("clang failed ({s}) compiling {}", src.display()),
            Err(e) => panic!(
                "cannot run {:?} to compile {}: {e} (install clang, or set CLANG)",
                clang,
                src.display()
            ),
        }
    }
}
