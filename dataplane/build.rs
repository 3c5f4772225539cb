//! Compiles the XDP program in src/fastpath/bpf/ with clang into an ELF
//! object under OUT_DIR; src/fastpath/loader/mod.rs embeds it with
//! include_bytes!, so the xbr binary is self-contained (no object file to install next to it).
//!
//! Headers: <bpf/bpf_helpers.h> comes from the libbpf copy that libbpf-sys
//! builds (exported to us as DEP_BPF_INCLUDE because libbpf-sys declares
//! `links = "bpf"`); <linux/bpf.h> from the system's kernel headers
//! (linux-libc-dev). `-target bpf` hides the multiarch directory that holds
//! <asm/types.h>, so it is added back with -idirafter.

use std::env;
use std::path::PathBuf;
use std::process::Command;

const SOURCES: &[&str] = &["xbr_xdp"];
/// Where the programs live, from the crate's root.
const BPF_DIR: &str = "src/fastpath/bpf";

fn main() {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let clang = env::var_os("CLANG").unwrap_or_else(|| "clang".into());
    println!("cargo:rerun-if-env-changed=CLANG");

    // Never fall back silently on /usr/include/bpf: a libbpf-dev that differs
    // from the libbpf we link would make the object and the loader disagree.
    let libbpf_include = env::var_os("DEP_BPF_INCLUDE")
        .expect("libbpf-sys must be a direct dependency (it exports DEP_BPF_INCLUDE)");
    let mut include_args = vec![format!("-I{}", PathBuf::from(libbpf_include).display())];
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let multiarch = match arch.as_str() {
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
        let src = manifest_dir.join(BPF_DIR).join(format!("{name}.c"));
        let obj = out_dir.join(format!("{name}.bpf.o"));
        println!("cargo:rerun-if-changed={}", src.display());
        // Its headers too.
        println!(
            "cargo:rerun-if-changed={}",
            manifest_dir.join(BPF_DIR).join("xbr_ct_new.h").display()
        );
        let status = Command::new(&clang)
            // v3: atomic compare-and-exchange (the kernel's new connections
            // claim a slot with it); kernels from 5.12 run it.
            .args([
                "-O2", "-g", "-target", "bpf", "-mcpu=v3", "-Wall", "-Werror",
            ])
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
