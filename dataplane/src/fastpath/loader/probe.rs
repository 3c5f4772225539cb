//! What the running kernel's XDP supports (`xbr doctor`): a trivial
//! program loaded with raw libbpf calls, hence `unsafe`.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

/// What the running kernel's XDP supports of what xbr uses, asked of the
/// kernel itself (`xbr doctor`): distribution kernels backport features,
/// so a release number says too little.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XdpSupport {
    /// XDP programs attach through bpf_link (`bpf_xdp_link_attach` is in
    /// the kernel's symbol table); `None`: the table could not be read.
    pub link: Option<bool>,
    /// XDP programs may take frames in several buffers
    /// (`BPF_F_XDP_HAS_FRAGS`, what jumbo frames need): a trivial program
    /// with that flag loads.
    pub frags: bool,
}

/// Probes [`XdpSupport`]. Loads (and at once closes) a two-instruction
/// XDP program with the frags flag; nothing is attached. Fails when no
/// XDP program may be loaded at all (no permission, no BPF).
pub fn probe_xdp_support() -> io::Result<XdpSupport> {
    let frags = match load_trivial_xdp(libbpf_sys::BPF_F_XDP_HAS_FRAGS) {
        Ok(_fd) => true,
        // An older kernel refuses the unknown flag.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            load_trivial_xdp(0)?;
            false
        }
        Err(e) => return Err(e),
    };
    let link = std::fs::read_to_string("/proc/kallsyms")
        .ok()
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.lines()
                .any(|l| l.split_whitespace().nth(2) == Some("bpf_xdp_link_attach"))
        });
    Ok(XdpSupport { link, frags })
}

/// Loads `r0 = XDP_PASS; exit` as an XDP program with `prog_flags`.
fn load_trivial_xdp(prog_flags: u32) -> io::Result<OwnedFd> {
    let mov_r0 = libbpf_sys::bpf_insn {
        // BPF_ALU64 | BPF_MOV | BPF_K, dst r0.
        code: 0xb7,
        imm: libbpf_sys::XDP_PASS as i32,
        ..Default::default()
    };
    let exit = libbpf_sys::bpf_insn {
        // BPF_JMP | BPF_EXIT.
        code: 0x95,
        ..Default::default()
    };
    let insns = [mov_r0, exit];
    let mut opts = libbpf_sys::bpf_prog_load_opts {
        sz: size_of::<libbpf_sys::bpf_prog_load_opts>() as libbpf_sys::size_t,
        prog_flags,
        ..Default::default()
    };
    // SAFETY: the name and license are NUL-terminated literals, `insns`
    // holds `insns.len()` initialised instructions, and `opts` is sized and
    // initialised; all outlive the call, which copies what it keeps.
    let rc = unsafe {
        libbpf_sys::bpf_prog_load(
            libbpf_sys::BPF_PROG_TYPE_XDP,
            c"xbr_probe".as_ptr(),
            c"GPL".as_ptr(),
            insns.as_ptr(),
            insns.len() as libbpf_sys::size_t,
            &mut opts,
        )
    };
    if rc < 0 {
        return Err(io::Error::from_raw_os_error(-rc));
    }
    // SAFETY: on success `rc` is a new program fd owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(rc) })
}
