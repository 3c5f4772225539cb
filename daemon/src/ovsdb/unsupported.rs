//! Settings `ovs-vsctl` can make that xbr does not implement: each one a
//! row holds becomes a sentence for its interfaces' `error` column (and
//! a log line, from the reconciler), never silence.
//!
//! # Design
//!
//! The lists below name the columns of OVS's schema that change
//! forwarding or the ports and that xbr does not act on. A column is
//! reported only when it holds something OVS would act on (a `true`, a
//! non-empty set or map, a non-zero number), so rows `ovs-vsctl` creates
//! with their defaults say nothing. Columns with no effect on forwarding
//! (`external_ids`, descriptive ones) are left out, as are the ones xbr
//! reads elsewhere (`desired.rs`). A bridge's settings are reported on
//! its local interface (the one named like it), a port's on its
//! interfaces. The options xbr reads are listed here, next to the check
//! that refuses the others, so a new option is added in one place.

use super::datum::Row;
use serde_json::Value;

/// `options` keys xbr reads on a system port.
pub const SYSTEM_OPTIONS: &[&str] = &["xdp_redirect"];
/// `options` keys xbr reads on an internal port.
pub const INTERNAL_OPTIONS: &[&str] = &["internal_backend"];

/// Bridge columns xbr does not implement.
const BRIDGE: &[(&str, &str)] = &[
    ("stp_enable", "STP"),
    ("rstp_enable", "RSTP"),
    ("mcast_snooping_enable", "multicast snooping"),
    ("netflow", "NetFlow"),
    ("sflow", "sFlow"),
    ("ipfix", "IPFIX"),
    ("flood_vlans", "flood_vlans"),
];

/// Port columns xbr does not implement.
const PORT: &[(&str, &str)] = &[
    ("tag", "VLAN access ports (tag)"),
    ("trunks", "VLAN trunks"),
    ("vlan_mode", "vlan_mode"),
    ("bond_mode", "bonding"),
    ("protected", "protected ports"),
];

/// Controller columns xbr does not implement.
const CONTROLLER: &[(&str, &str)] = &[
    ("max_backoff", "max_backoff"),
    ("local_ip", "in-band control"),
];

/// `other_config` keys xbr reads: Bridge, Open_vSwitch.
const BRIDGE_OTHER_CONFIG: &[&str] = &["datapath-id"];
const ROOT_OTHER_CONFIG: &[&str] = &["pmd-cpu-mask", "flow-restore-wait"];

/// Interface columns xbr does not implement.
const INTERFACE: &[(&str, &str)] = &[
    ("ingress_policing_kpkts_rate", "packet-rate policing"),
    ("ingress_policing_kpkts_burst", "packet-rate policing"),
    ("bfd", "BFD"),
    ("cfm_mpid", "CFM"),
    ("lldp", "LLDP"),
    ("other_config", "Interface other_config"),
];

/// The columns a monitor must ask for so these checks see them.
pub fn monitored(table: &str) -> Vec<&'static str> {
    let cols: &[(&str, &str)] = match table {
        "Bridge" => BRIDGE,
        "Port" => PORT,
        "Interface" => INTERFACE,
        "Controller" => CONTROLLER,
        _ => &[],
    };
    // `datapath_type` and `other_config` are monitored already (the
    // reconciler's list).
    let mut out: Vec<&str> = cols.iter().map(|(c, _)| *c).collect();
    match table {
        "Port" => out.push("lacp"),
        "Controller" => out.push("connection_mode"),
        _ => {}
    }
    out.dedup();
    out
}

/// Whether `col` of `row` holds a value OVS would act on.
fn is_set(row: &Row, col: &str) -> bool {
    match row.get(col) {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_f64() != Some(0.0),
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) if a.len() == 2 && (a[0] == "set" || a[0] == "map") => {
            a[1].as_array().is_some_and(|x| !x.is_empty())
        }
        Some(_) => true,
    }
}

fn listed(row: &Row, cols: &[(&str, &str)], what: &str, out: &mut Vec<String>) {
    for (col, feature) in cols {
        if is_set(row, col) {
            out.push(format!(
                "{what} {col}: {feature} is not supported by xbr; ignored"
            ));
        }
    }
}

/// What a Bridge row sets that xbr ignores.
pub fn bridge(name: &str, row: &Row) -> Vec<String> {
    let mut out = Vec::new();
    listed(row, BRIDGE, &format!("bridge {name}:"), &mut out);
    other_config(
        &format!("bridge {name}:"),
        row,
        BRIDGE_OTHER_CONFIG,
        &mut out,
    );
    let dp = super::datum::string(row, "datapath_type").unwrap_or_default();
    if !matches!(dp.as_str(), "" | "netdev" | "system") {
        out.push(format!(
            "bridge {name}: datapath_type '{dp}' is not supported by xbr (it is a netdev \
             datapath); ignored"
        ));
    }
    out
}

/// `other_config` keys of `row` that xbr does not read.
fn other_config(what: &str, row: &Row, known: &[&str], out: &mut Vec<String>) {
    for key in super::datum::string_map(row, "other_config").keys() {
        if !known.contains(&key.as_str()) {
            out.push(format!(
                "{what} other_config:{key} is not supported by xbr; ignored"
            ));
        }
    }
}

/// What a Controller row of bridge `bridge` sets that xbr ignores.
pub fn controller(bridge: &str, row: &Row) -> Vec<String> {
    let target = super::datum::string(row, "target").unwrap_or_default();
    let what = format!("bridge {bridge}: controller {target}:");
    let mut out = Vec::new();
    listed(row, CONTROLLER, &what, &mut out);
    if super::datum::string(row, "connection_mode").as_deref() == Some("in-band") {
        out.push(format!(
            "{what} connection_mode: in-band control is not supported by xbr (out-of-band \
             only); ignored"
        ));
    }
    out
}

/// What the Open_vSwitch row sets that xbr ignores (logged only: the
/// table has no `error` column).
pub fn root(row: &Row) -> Vec<String> {
    let mut out = Vec::new();
    other_config("Open_vSwitch", row, ROOT_OTHER_CONFIG, &mut out);
    out
}

/// What a Port row sets that xbr ignores.
pub fn port(name: &str, row: &Row) -> Vec<String> {
    let mut out = Vec::new();
    listed(row, PORT, &format!("port {name}:"), &mut out);
    let lacp = super::datum::string(row, "lacp").unwrap_or_default();
    if !matches!(lacp.as_str(), "" | "off") {
        out.push(format!(
            "port {name}: lacp: LACP is not supported by xbr; ignored"
        ));
    }
    out
}

/// What an Interface row of type `kind` sets that xbr ignores; `known`
/// are the `options` keys xbr reads for that type.
pub fn interface(
    name: &str,
    row: &Row,
    options: &std::collections::BTreeMap<String, String>,
    known: &[&str],
) -> Vec<String> {
    let mut out = Vec::new();
    listed(row, INTERFACE, &format!("{name}:"), &mut out);
    for key in options.keys() {
        if !known.contains(&key.as_str()) {
            out.push(format!(
                "{name}: options:{key} is not supported by xbr for this interface type; ignored"
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row(v: Value) -> Row {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn defaults_say_nothing_and_settings_are_named() {
        let quiet = row(json!({"stp_enable": false, "mirrors": ["set", []],
                               "datapath_type": "", "flood_vlans": ["set", []]}));
        assert!(bridge("br0", &quiet).is_empty());
        let loud = row(json!({"stp_enable": true, "datapath_type": "dpdk",
                              "mirrors": ["uuid", "m1"]}));
        let msgs = bridge("br0", &loud);
        // Mirrors are carried out (`dataplane::mirror`): not reported.
        assert_eq!(msgs.len(), 2, "{msgs:?}");
        assert!(msgs[0].contains("STP is not supported"), "{msgs:?}");
        let p = row(json!({"tag": 5, "trunks": ["set", []], "lacp": "off"}));
        assert_eq!(port("veth1", &p).len(), 1);
        let i =
            row(json!({"ingress_policing_kpkts_rate": 0, "bfd": ["map", [["enable", "true"]]]}));
        let opts = [
            ("xdp_redirect".to_string(), "on".to_string()),
            ("n_rxq".to_string(), "2".to_string()),
        ]
        .into_iter()
        .collect();
        let msgs = interface("veth1", &i, &opts, SYSTEM_OPTIONS);
        assert_eq!(msgs.len(), 2, "{msgs:?}");
        assert!(msgs[1].contains("options:n_rxq"), "{msgs:?}");
        let c = row(
            json!({"target": "tcp:192.0.2.1:6653", "inactivity_probe": 30000,
                           "max_backoff": 8000, "connection_mode": "out-of-band"}),
        );
        let msgs = controller("br0", &c);
        assert_eq!(msgs.len(), 1, "{msgs:?}");
        assert!(msgs[0].contains("max_backoff"), "{msgs:?}");
        let r = row(json!({"other_config": ["map", [["pmd-cpu-mask", "0x3"],
                                                    ["flow-restore-wait", "true"],
                                                    ["hw-offload", "true"]]]}));
        assert_eq!(root(&r).len(), 1);
    }
}
