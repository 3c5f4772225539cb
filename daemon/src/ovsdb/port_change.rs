//! What a change of an open port's Interface row asks of xbr, following
//! ovs-vswitchd's `bridge_delete_or_reconfigure_ports()`.
//!
//! # Design
//!
//! OVS keeps a port, and its OpenFlow number, for the port's life: a
//! changed `options`, `mtu_request`, `mac`, QoS or policing column is
//! applied to the open netdev in place. It deletes and re-adds the port
//! (which may renumber it) only when `ofport_request` names another
//! number than the port has, or when the `type` changes (a new netdev).
//! [`classify`] compares the spec a port was opened from with the one the
//! database now gives and says which of those it is. QoS and policing are
//! not part of a [`PortSpec`]; the reconciler sets them on every pass.
//!
//! Some of xbr's settings live in what it opened rather than in the
//! netdev: a VXLAN port's underlay (uplink, local address, UDP port) and
//! an internal port's backend. Those are [`Change::Reopen`]: the port is
//! closed and opened again under the same number, so flows that name it
//! keep matching (its traffic pauses for the reopening).

use dataplane::config::{PortSpec, PortType};

/// How to apply a changed spec to an open port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// Nothing xbr acts on changed (e.g. an `ofport_request` removed, or
    /// set to the number the port has).
    None,
    /// Only settings applied in place changed: these.
    InPlace(InPlace),
    /// Close and open again, keeping the number.
    Reopen,
    /// Delete and add again; the new port's number follows
    /// `ofport_request` (or is assigned anew), as in OVS.
    Renumber,
}

/// The settings of a port that change in place (true: changed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InPlace {
    /// `mtu_request`: set on the netdev (system and internal ports).
    pub mtu: bool,
    /// `mac` of an internal port: set on its netdev.
    pub mac: bool,
    /// `options:xdp_redirect`: whether the XDP flow cache may redirect to
    /// the port.
    pub xdp_redirect: bool,
}

/// Compares `open` (the spec the port was opened from, as the database
/// gave it) with `want` (the database's now), for a port whose OpenFlow
/// number is `ofport`; `taken` says whether another port has a number.
/// As in OVS, a request for a number another port has does not delete
/// the port (it would only come back with yet another number).
pub fn classify(
    open: &PortSpec,
    want: &PortSpec,
    ofport: u32,
    taken: impl Fn(u32) -> bool,
) -> Change {
    if open.port_type != want.port_type {
        return Change::Renumber;
    }
    if want.ofport.is_some_and(|r| r != ofport && !taken(r)) {
        return Change::Renumber;
    }
    let in_place = InPlace {
        mtu: open.mtu_request != want.mtu_request && want.port_type != PortType::Vxlan,
        mac: open.mac != want.mac && want.port_type == PortType::Internal,
        xdp_redirect: open.xdp_redirect != want.xdp_redirect,
    };
    // Everything else must be equal for the change to apply in place.
    // `mtu_request` of a tunnel (its uplink's MTU is used) and `mac` of a
    // port xbr does not create (reported by `unsupported.rs`) change
    // nothing.
    let rest_equal = PortSpec {
        ofport: open.ofport,
        mtu_request: open.mtu_request,
        mac: open.mac,
        xdp_redirect: open.xdp_redirect,
        ..want.clone()
    } == *open;
    if !rest_equal {
        return Change::Reopen;
    }
    if in_place == InPlace::default() {
        Change::None
    } else {
        Change::InPlace(in_place)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::config::VxlanSpec;
    use dataplane::ports::redirect::RedirectMode;

    fn free(_: u32) -> bool {
        false
    }

    fn spec(kind: PortType) -> PortSpec {
        PortSpec {
            name: "p".into(),
            ofport: None,
            port_type: kind,
            mtu_request: None,
            mac: None,
            vxlan: (kind == PortType::Vxlan).then(|| VxlanSpec {
                dst_port: 4789,
                local_ip: "192.0.2.1".parse().unwrap(),
                uplink: "eth0".into(),
            }),
            xdp_redirect: RedirectMode::Auto,
            internal_backend: Default::default(),
        }
    }

    #[test]
    fn options_mtu_and_mac_apply_in_place() {
        let open = spec(PortType::System);
        let want = PortSpec {
            xdp_redirect: RedirectMode::On,
            mtu_request: Some(1400),
            ..open.clone()
        };
        assert_eq!(
            classify(&open, &want, 7, free),
            Change::InPlace(InPlace {
                mtu: true,
                mac: false,
                xdp_redirect: true,
            })
        );
        let open = spec(PortType::Internal);
        let want = PortSpec {
            mac: Some([2, 0, 0, 0, 0, 1]),
            ..open.clone()
        };
        assert_eq!(
            classify(&open, &want, 2, free),
            Change::InPlace(InPlace {
                mac: true,
                ..Default::default()
            })
        );
    }

    #[test]
    fn settings_that_do_not_apply_change_nothing() {
        let open = spec(PortType::Vxlan);
        let want = PortSpec {
            mtu_request: Some(1400),
            ..open.clone()
        };
        assert_eq!(classify(&open, &want, 1, free), Change::None);
        let open = spec(PortType::System);
        let want = PortSpec {
            mac: Some([2, 0, 0, 0, 0, 1]),
            ..open.clone()
        };
        assert_eq!(classify(&open, &want, 3, free), Change::None);
    }

    #[test]
    fn only_a_new_number_or_type_renumbers() {
        let open = spec(PortType::System);
        // The request names the number the port has, or goes away.
        let same = PortSpec {
            ofport: Some(7),
            ..open.clone()
        };
        assert_eq!(classify(&open, &same, 7, free), Change::None);
        assert_eq!(classify(&same, &open, 7, free), Change::None);
        let other = PortSpec {
            ofport: Some(9),
            ..open.clone()
        };
        assert_eq!(classify(&open, &other, 7, free), Change::Renumber);
        // Another port has 9: the port stays as it is.
        assert_eq!(classify(&open, &other, 7, |n| n == 9), Change::None);
        assert_eq!(
            classify(&open, &spec(PortType::Internal), 7, free),
            Change::Renumber
        );
    }

    #[test]
    fn a_new_underlay_or_backend_reopens_under_the_same_number() {
        let open = spec(PortType::Vxlan);
        let mut want = open.clone();
        want.vxlan.as_mut().unwrap().uplink = "eth1".into();
        assert_eq!(classify(&open, &want, 1, free), Change::Reopen);
        // Resolved for the first time (see desired.rs).
        let unresolved = PortSpec {
            vxlan: None,
            ..open.clone()
        };
        assert_eq!(classify(&unresolved, &open, 1, free), Change::Reopen);
        let open = spec(PortType::Internal);
        let want = PortSpec {
            internal_backend: dataplane::config::InternalBackend::Tap,
            ..open.clone()
        };
        assert_eq!(classify(&open, &want, 2, free), Change::Reopen);
    }
}
