//! The kernel: version (what xbr uses arrived in 5.9, 6.3 and 6.6) and
//! two probes that ask the kernel itself: loading a trivial XDP program
//! and opening an AF_XDP socket.

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

pub(super) fn version(release: &str) -> Check {
    let name = "kernel";
    let Some(v) = parse(release) else {
        return Check::fail(
            name,
            format!("cannot read the kernel release ({release:?})"),
            "check /proc/sys/kernel/osrelease",
        );
    };
    let shown = |(a, b): (u32, u32)| format!("{a}.{b}");
    if v < BPF_LINK_XDP {
        return Check::fail(
            name,
            format!(
                "Linux {release} is older than {} (XDP programs through bpf_link)",
                shown(BPF_LINK_XDP)
            ),
            format!(
                "boot a kernel {} or later ({} for jumbo frames)",
                shown(BPF_LINK_XDP),
                shown(AF_XDP_MULTI_BUFFER)
            ),
        );
    }
    if v < AF_XDP_MULTI_BUFFER {
        let mut missing = vec![format!(
            "AF_XDP multi-buffer ({}+: frames above ~3.5 KiB are dropped)",
            shown(AF_XDP_MULTI_BUFFER)
        )];
        if v < XDP_FEATURES {
            missing.push(format!(
                "xdp-features ({}+: the XDP cache forwards no jumbo frames)",
                shown(XDP_FEATURES)
            ));
        }
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
        format!("Linux {release}: XDP through bpf_link, xdp-features, AF_XDP multi-buffer"),
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
    match crate::xsk::probe_socket() {
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
        assert_eq!(version("5.4.0-100-generic").status, Status::Fail);
        assert_eq!(version("6.1.0-18-amd64").status, Status::Warn);
        assert!(version("5.14.0").detail.contains("xdp-features"));
        assert_eq!(version("6.6.0").status, Status::Ok);
        assert_eq!(version("").status, Status::Fail);
    }
}
