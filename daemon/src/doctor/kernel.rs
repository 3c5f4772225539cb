//! The kernel: its release and features (what xbr uses arrived in 5.9,
//! 6.3 and 6.6 upstream; distribution kernels backport them, so each
//! feature the kernel can be asked about is probed), and two probes of
//! permission: loading a trivial XDP program and opening an AF_XDP socket.

use super::Check;

/// XDP programs attached through bpf_link (`BPF_LINK_CREATE` for XDP).
const BPF_LINK_XDP: (u32, u32) = (5, 9);
/// The netdev generic-netlink family (xdp-features of devices).
const XDP_FEATURES: (u32, u32) = (6, 3);
/// AF_XDP multi-buffer (`XDP_USE_SG`): frames above one page (jumbo).
const AF_XDP_MULTI_BUFFER: (u32, u32) = (6, 6);

/// The kernel release (`uname -r`).
pub(super) fn release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// `(major, minor)` of a release such as `6.1.0-18-amd64`.
pub(super) fn parse(release: &str) -> Option<(u32, u32)> {
    let mut it = release.split(['.', '-', '+']);
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    Some((major, minor))
}

/// What the kernel answered when asked directly; `None` where it could
/// not be asked (then the release number decides).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Probed {
    /// XDP through bpf_link (the kernel's symbol table).
    pub link: Option<bool>,
    /// Multi-buffer XDP programs (a program with `BPF_F_XDP_HAS_FRAGS`
    /// loads).
    pub frags: Option<bool>,
    /// The netdev generic-netlink family answers (xdp-features).
    pub xdp_features: Option<bool>,
}

/// Asks the kernel (see [`Probed`]): loads a trivial XDP program without
/// attaching it, reads /proc/kallsyms and asks the netdev family about
/// `lo`. Nothing is changed.
pub(super) fn probe() -> Probed {
    let xdp = dataplane::fastpath::loader::probe_xdp_support().ok();
    let lo = dataplane::netdev::ifindex("lo").ok();
    Probed {
        link: xdp.and_then(|x| x.link),
        frags: xdp.map(|x| x.frags),
        xdp_features: lo.map(|i| dataplane::genl::xdp_features(i).is_ok()),
    }
}

/// The kernel's release and features. Distribution kernels (RHEL's 4.18
/// and 5.14) backport XDP features, so what the kernel answered to a
/// probe wins over its release number.
pub(super) fn version(release: &str, probed: Probed) -> Check {
    let name = "kernel";
    let Some(v) = parse(release) else {
        return Check::fail(
            name,
            format!("cannot read the kernel release ({release:?})"),
            "check /proc/sys/kernel/osrelease",
        );
    };
    let shown = |(a, b): (u32, u32)| format!("{a}.{b}");
    // (has it, how we know)
    let has = |answer: Option<bool>, since: (u32, u32)| match answer {
        Some(b) => (b, "probed"),
        None => (v >= since, "by release"),
    };
    let (link, link_how) = has(probed.link, BPF_LINK_XDP);
    if !link {
        return Check::fail(
            name,
            format!("Linux {release} cannot attach XDP programs through bpf_link ({link_how})"),
            format!(
                "boot a kernel {} or later, or one with bpf_link XDP backported ({} for jumbo frames)",
                shown(BPF_LINK_XDP),
                shown(AF_XDP_MULTI_BUFFER)
            ),
        );
    }
    let mut missing = Vec::new();
    // AF_XDP sockets take frames in several buffers (XDP_USE_SG) from
    // 6.6; that cannot be asked without binding a device's queue, so the
    // release decides, unless the kernel refused multi-buffer programs.
    let sg = v >= AF_XDP_MULTI_BUFFER && probed.frags != Some(false);
    if !sg {
        let how = if probed.frags == Some(false) {
            "probed"
        } else {
            "by release"
        };
        missing.push(format!(
            "AF_XDP multi-buffer ({}+, {how}: frames above ~3.5 KiB are dropped)",
            shown(AF_XDP_MULTI_BUFFER)
        ));
    }
    let (features, features_how) = has(probed.xdp_features, XDP_FEATURES);
    if !features {
        missing.push(format!(
            "xdp-features ({}+, {features_how}: the XDP cache forwards no jumbo frames and \
             readiness is not followed)",
            shown(XDP_FEATURES)
        ));
    }
    if !missing.is_empty() {
        return Check::warn(
            name,
            format!("Linux {release} lacks {}", missing.join(", ")),
            format!(
                "boot a kernel {} or later if pods use an MTU above 3500",
                shown(AF_XDP_MULTI_BUFFER)
            ),
        );
    }
    Check::ok(
        name,
        format!(
            "Linux {release}: XDP through bpf_link ({link_how}), xdp-features ({features_how}), \
             AF_XDP multi-buffer"
        ),
    )
}

/// Whether this process may load an XDP program (a trivial one, at once
/// unloaded): kernel support and CAP_BPF/CAP_NET_ADMIN together.
pub(super) fn bpf_xdp() -> Check {
    let name = "bpf";
    match libbpf_rs::ProgramType::Xdp.is_supported() {
        Ok(true) => Check::ok(name, "an XDP program loads"),
        Ok(false) => Check::fail(
            name,
            "the kernel refuses XDP programs",
            "boot a kernel with CONFIG_BPF_SYSCALL and CONFIG_XDP_SOCKETS",
        ),
        Err(e) => Check::fail(
            name,
            format!("loading a test XDP program: {e}"),
            "run as root or with CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON; check kernel.unprivileged_bpf_disabled and lockdown",
        ),
    }
}

/// Whether this process may open an AF_XDP socket.
pub(super) fn af_xdp() -> Check {
    let name = "af_xdp";
    match dataplane::xsk::probe_socket() {
        Ok(()) => Check::ok(name, "an AF_XDP socket opens"),
        Err(e) if e.raw_os_error() == Some(libc::EAFNOSUPPORT) => Check::fail(
            name,
            "the kernel has no AF_XDP sockets",
            "boot a kernel built with CONFIG_XDP_SOCKETS=y",
        ),
        Err(e) => Check::fail(
            name,
            format!("socket(AF_XDP): {e}"),
            "run as root or with CAP_NET_RAW",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::Status;

    #[test]
    fn releases_parse_and_grade() {
        assert_eq!(parse("6.1.0-18-amd64"), Some((6, 1)));
        assert_eq!(parse("6.18.44-fc-v857"), Some((6, 18)));
        assert_eq!(parse("5.14.0-284.el9.x86_64"), Some((5, 14)));
        assert_eq!(parse("junk"), None);
        let unknown = Probed::default();
        assert_eq!(version("5.4.0-100-generic", unknown).status, Status::Fail);
        assert_eq!(version("6.1.0-18-amd64", unknown).status, Status::Warn);
        assert!(version("5.14.0", unknown).detail.contains("xdp-features"));
        assert_eq!(version("6.6.0", unknown).status, Status::Ok);
        assert_eq!(version("", unknown).status, Status::Fail);
    }

    #[test]
    fn probes_win_over_the_release() {
        // RHEL 8's 4.18 with bpf_link XDP backported: not a failure.
        let rhel8 = Probed {
            link: Some(true),
            frags: Some(false),
            xdp_features: Some(false),
        };
        let c = version("4.18.0-477.10.1.el8_8.x86_64", rhel8);
        assert_eq!(c.status, Status::Warn, "{c}");
        assert!(c.detail.contains("multi-buffer (6.6+, probed"), "{c}");
        // A new release whose kernel was built without bpf_link XDP.
        let without = Probed {
            link: Some(false),
            ..Probed::default()
        };
        let c = version("6.8.0", without);
        assert_eq!(c.status, Status::Fail, "{c}");
        assert!(c.detail.contains("(probed)"), "{c}");
    }

    #[test]
    fn this_kernel_answers_the_probes() {
        // CI's kernel has all three; the probes must find them (root).
        if !nix::unistd::geteuid().is_root() {
            panic!("this test needs root (it loads a BPF program)");
        }
        let p = probe();
        assert_eq!(p.frags, Some(true), "{p:?}");
        assert_eq!(p.xdp_features, Some(true), "{p:?}");
        assert_eq!(p.link, Some(true), "{p:?}");
    }
}
