//! A port's device: present, what its driver does with XDP
//! (xdp-features), and an XDP program already attached to it (xbr's
//! attach would fail, or the other program's owner would lose it).

use super::Check;
use dataplane::netdev;

/// Names of xbr's own XDP programs (see dataplane/src/fastpath/loader/).
const XBR_PROGRAMS: &[&str] = &["xbr_xdp_rx", "xbr_xdp_vxlan"];

/// `NETDEV_XDP_ACT_*` bit names, in bit order.
const FEATURES: &[&str] = &[
    "basic",
    "redirect",
    "ndo-xmit",
    "xsk-zerocopy",
    "hw-offload",
    "rx-sg",
    "ndo-xmit-sg",
];

/// The loaded program `id`'s name, if this process may list programs
/// (CAP_SYS_ADMIN).
fn prog_name(id: u32) -> Option<String> {
    libbpf_rs::query::ProgInfoIter::default()
        .find(|p| p.id == id)
        .map(|p| p.name.to_string_lossy().into_owned())
}

fn features_text(bits: u64) -> String {
    let names: Vec<&str> = FEATURES
        .iter()
        .enumerate()
        .filter(|(i, _)| bits & (1 << i) != 0)
        .map(|(_, n)| *n)
        .collect();
    if names.is_empty() {
        "none".into()
    } else {
        names.join(",")
    }
}

/// The checks of `port`; a missing device fails if it is `required`,
/// else warns.
pub(super) fn check(port: &str, required: bool, pin_root: &std::path::Path) -> Vec<Check> {
    let name = format!("port {port}");
    let ifindex = match netdev::ifindex(port) {
        Ok(i) => i,
        Err(e) if required => {
            return vec![Check::fail(
                name,
                e.to_string(),
                "create the device, or fix the port's name in --port",
            )]
        }
        Err(e) => {
            return vec![Check::warn(
                name,
                format!("{e}: in the database, xbr marks it failed and retries"),
                format!("if the device is gone for good: ovs-vsctl del-port {port}"),
            )]
        }
    };
    let mut checks = Vec::new();
    let features = dataplane::genl::xdp_features(ifindex);
    checks.push(match features {
        Ok(0) => Check::warn(
            name.clone(),
            "xdp-features none: the driver has no native XDP, xbr uses generic (skb) mode",
            "expect lower throughput on this port; use a driver with native XDP for speed",
        ),
        Ok(bits) => Check::ok(
            name.clone(),
            format!("xdp-features {}", features_text(bits)),
        ),
        Err(e) => Check::warn(
            name.clone(),
            format!("xdp-features unknown: {e}"),
            "a kernel 6.3 or later reports them",
        ),
    });
    match netdev::xdp_prog_id(ifindex) {
        Ok(0) => {}
        Ok(id) if dataplane::fastpath::pin::pinned_under(pin_root, ifindex) => {
            checks.push(Check::ok(
                format!("xdp {port}"),
                format!(
                    "a stopped xbr's pinned XDP program (id {id}) keeps the port fail-closed; \
                 the next xbr adopts it"
                ),
            ))
        }
        Ok(id) => {
            let prog = prog_name(id);
            let xdp = format!("xdp {port}");
            if prog.as_deref().is_some_and(|n| XBR_PROGRAMS.contains(&n)) {
                checks.push(Check::warn(
                    xdp,
                    format!("xbr's XDP program (id {id}) is attached: an xbr serves this port"),
                    format!("stop that xbr, or if none runs: ip link set dev {port} xdp off"),
                ));
            } else {
                // Listing programs needs CAP_SYS_ADMIN, which xbr's set
                // (the unit's, the pod's) lacks: then the id only.
                let named = prog
                    .map(|n| format!(" '{n}'"))
                    .unwrap_or_else(|| " (name not readable without CAP_SYS_ADMIN)".into());
                checks.push(Check::fail(
                    xdp,
                    format!("another XDP program{named} (id {id}) is attached: xbr cannot attach its own"),
                    format!(
                        "find its owner (bpftool prog show id {id}) and detach it: ip link set dev {port} xdp off"
                    ),
                ));
            }
        }
        Err(e) => checks.push(Check::warn(
            format!("xdp {port}"),
            format!("cannot read the attached XDP program: {e}"),
            "check CAP_NET_ADMIN",
        )),
    }
    checks
}

#[cfg(test)]
mod tests {
    #[test]
    fn feature_names() {
        assert_eq!(
            super::features_text(0b100111),
            "basic,redirect,ndo-xmit,rx-sg"
        );
        assert_eq!(super::features_text(0), "none");
    }
}
