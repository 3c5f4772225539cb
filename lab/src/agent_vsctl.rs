//! The SDN agent's `ovs-vsctl` commands for its bridge, as argument
//! lists (TABLES.md §1, /work/shared/sdn): the bridge, `vxlan0`, `tun0`,
//! then one command per pod's host veth. `xbr lab up --ovsdb` configures
//! its nodes with them, and the end-to-end tests replay them against xbr
//! and ovs-vswitchd, so both speak the agent's very words.

/// The bridge the agent manages.
pub const BRIDGE: &str = "br0";

fn owned(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

/// `--may-exist add-br br0 -- set Bridge br0 fail_mode=secure
/// protocols=OpenFlow13`.
pub fn add_bridge() -> Vec<String> {
    owned(&[
        "--may-exist",
        "add-br",
        BRIDGE,
        "--",
        "set",
        "Bridge",
        BRIDGE,
        "fail_mode=secure",
        "protocols=OpenFlow13",
    ])
}

/// The flow-based VXLAN port, OpenFlow port 1, on UDP `dst_port`.
pub fn add_vxlan(dst_port: u16) -> Vec<String> {
    let mut v = owned(&[
        "--may-exist",
        "add-port",
        BRIDGE,
        "vxlan0",
        "--",
        "set",
        "Interface",
        "vxlan0",
        "ofport_request=1",
        "type=vxlan",
        "options:remote_ip=\"flow\"",
        "options:key=\"flow\"",
    ]);
    v.push(format!("options:dst_port={dst_port}"));
    v
}

/// The gateway's internal port `tun0`, OpenFlow port 2, with the pods'
/// MTU; `backend` is xbr's `options:internal_backend` (none: the
/// default), which the agent does not set.
pub fn add_tun0(mtu: u32, backend: Option<&str>) -> Vec<String> {
    let mut v = owned(&[
        "--may-exist",
        "add-port",
        BRIDGE,
        "tun0",
        "--",
        "set",
        "Interface",
        "tun0",
        "ofport_request=2",
        "type=internal",
    ]);
    v.push(format!("mtu_request={mtu}"));
    if let Some(b) = backend {
        v.push(format!("options:internal_backend={b}"));
    }
    v
}

/// A pod's host veth, labelled with its sandbox and address.
pub fn add_pod(host_if: &str, sandbox: &str, ip: &str) -> Vec<String> {
    let mut v = owned(&[
        "--may-exist",
        "add-port",
        BRIDGE,
        host_if,
        "--",
        "set",
        "Interface",
        host_if,
    ]);
    v.push(format!("external_ids=sandbox=\"{sandbox}\",ip=\"{ip}\""));
    v
}

/// An argument list as `&str`s, for a runner taking `&[&str]`.
pub fn as_strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_commands_read_as_the_agent_writes_them() {
        assert_eq!(
            add_tun0(1450, None).join(" "),
            "--may-exist add-port br0 tun0 -- set Interface tun0 ofport_request=2 \
             type=internal mtu_request=1450"
        );
        assert_eq!(
            add_pod("veth1", "sb1", "10.128.0.3").join(" "),
            "--may-exist add-port br0 veth1 -- set Interface veth1 \
             external_ids=sandbox=\"sb1\",ip=\"10.128.0.3\""
        );
        assert!(add_vxlan(4789).join(" ").ends_with("options:dst_port=4789"));
    }
}
