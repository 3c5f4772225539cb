//! The `ovs-appctl` commands sosreport's openvswitch plugin runs against
//! ovs-vswitchd (sos/report/plugins/openvswitch.py), beyond those
//! `unixctl` already served: each answers with xbr's own figures in
//! OVS's layout (asking the bridges' control sockets, `support ...`), or
//! says what xbr has instead, or refuses as OVS refuses the same request
//! on a switch without the feature (`bond/show PORT`: "no such bond").
//! The list sos runs, and what each gives, is in docs/support.md and in
//! tests/tests/sosreport.rs.

use super::{pmd_core, select, Plan, DATAPATH};
use crate::ctl;
use std::path::Path;

fn ask_each(targets: Vec<&String>, line: &str) -> Plan {
    Plan::Ask(
        targets
            .into_iter()
            .map(|b| (b.clone(), line.to_string()))
            .collect(),
    )
}

/// The bridge a per-bridge command names (OVS requires it).
fn named<'a>(bridges: &'a [String], params: &[String], usage: &str) -> Result<&'a String, String> {
    let name = params
        .iter()
        .find(|p| !p.starts_with('-'))
        .ok_or_else(|| format!("usage: {usage}"))?;
    bridges
        .iter()
        .find(|b| *b == name)
        .ok_or_else(|| "no such bridge".to_string())
}

/// The first argument that is not an option, if any.
fn operand(params: &[String]) -> Option<&str> {
    params
        .iter()
        .map(String::as_str)
        .find(|p| !p.starts_with('-'))
}

/// What the datapath supports, as `dpif/show-dp-features` lists it:
/// the features of OVS's list that xbr's pipeline and datapath have.
const DP_FEATURES: &str = "\
Recirc: Yes
CT state: Yes
CT zone: Yes
CT mark: Yes
CT label: Yes
CT state NAT: Yes
Tunnel push pop: Yes
";

/// Turns one of the support commands into a plan; an unknown command
/// is refused as ovs-vswitchd refuses it.
pub(super) fn plan(method: &str, params: &[String], bridges: &[String]) -> Result<Plan, String> {
    let text = |t: &str| Ok(Plan::Text(t.to_string()));
    match method {
        "dpctl/dump-dps" => Ok(Plan::Text(if bridges.is_empty() {
            String::new()
        } else {
            format!("netdev@{DATAPATH}\n")
        })),
        "dpctl/ipf-get-status" => Ok(ask_each(select(bridges, operand(params))?, "support ipf")),
        "coverage/show" => Ok(ask_each(select(bridges, None)?, "support coverage")),
        "memory/show" => Ok(ask_each(select(bridges, None)?, "support memory")),
        "upcall/show" => Ok(ask_each(select(bridges, None)?, "support upcall")),
        "dpif-netdev/pmd-perf-show" => {
            let mut rest = params.iter();
            let (mut dp, mut core) = (None, None);
            while let Some(p) = rest.next() {
                match p.as_str() {
                    "-nh" => {}
                    "-it" | "-ms" => {
                        rest.next().ok_or(format!("{p}: expects a number"))?;
                    }
                    "-pmd" => core = Some(pmd_core(rest.next())?),
                    p if p.starts_with('-') => return Err(format!("{p}: unknown option")),
                    p => dp = Some(p),
                }
            }
            let line = match core {
                Some(c) => format!("support pmd-perf --core {c}"),
                None => "support pmd-perf".into(),
            };
            Ok(ask_each(select(bridges, dp)?, &line))
        }
        "ofproto/list-tunnels" => Ok(Plan::Joined(
            String::new(),
            bridges.iter().map(|b| (b.clone(), "support tunnels".into())).collect(),
        )),
        "tnl/ports/show" => Ok(Plan::Joined(
            "Listening ports:\n".into(),
            bridges
                .iter()
                .map(|b| (b.clone(), "support tunnel-ports".into()))
                .collect(),
        )),
        "bridge/dump-flows" => {
            let b = named(bridges, params, "bridge/dump-flows [--offload-stats] bridge")?;
            Ok(Plan::Ask(vec![(b.clone(), "support dump-flows".into())]))
        }
        "dpif/show-dp-features" => {
            named(bridges, params, "dpif/show-dp-features bridge")?;
            text(DP_FEATURES)
        }
        "fdb/stats-show" => {
            let b = named(bridges, params, "fdb/stats-show bridge")?;
            Ok(Plan::Ask(vec![(b.clone(), "support fdb-stats".into())]))
        }
        // xbr snoops no multicast: no group is ever learned.
        "mdb/show" => {
            named(bridges, params, "mdb/show bridge")?;
            text(" port  VLAN  GROUP                Age\n")
        }
        "qos/show" => {
            let port = operand(params).ok_or("usage: qos/show interface")?;
            if port.contains(char::is_whitespace) {
                return Err("no such interface".into());
            }
            Ok(Plan::AnyOf(
                bridges
                    .iter()
                    .map(|b| (b.clone(), format!("support qos {port}")))
                    .collect(),
                "no such interface".into(),
            ))
        }
        // No bonds, LACP or CFM in xbr: the lists are empty, and a port
        // named is none of them, as OVS answers for a plain port.
        "bond/list" => text("bond\ttype\trecircID\tmembers\n"),
        "bond/show" => match operand(params) {
            None => text(""),
            Some(_) => Err("no such bond".into()),
        },
        "lacp/show" | "lacp/show-stats" => match operand(params) {
            None => text(""),
            Some(_) => Err("no such lacp object".into()),
        },
        "cfm/show" => match operand(params) {
            None => text(""),
            Some(_) => Err("no such interface".into()),
        },
        "ovs/route/show" => text(
            "Route Table:\n\
             (xbr keeps no route table of its own: VXLAN ports look their next hop up in the \
             kernel's, `ip route show table all`)\n",
        ),
        "tnl/arp/show" => text(
            "IP                                            MAC                 Bridge\n\
             ==========================================================================\n\
             (xbr keeps no ARP table of its own: VXLAN ports resolve next hops through the \
             kernel's neighbour table, `ip neigh`)\n",
        ),
        "dpif-netdev/subtable-lookup-prio-get" => text(
            "Available dpcls implementations:\n  \
             xbr (the pipeline's classifier, behind exact-match and megaflow caches; the only one)\n",
        ),
        "dpif-netdev/dpif-impl-get" => {
            text("Available DPIF implementations:\n  xbr (pmds: every packet thread)\n")
        }
        "dpif-netdev/miniflow-parser-get" => text(
            "Available Optimized Miniflow Extracts:\n  \
             scalar (available: True, pmds: every packet thread)\n",
        ),
        other => Err(format!(
            "\"{other}\" is not a valid command (use \"list-commands\" to see a list of valid commands)"
        )),
    }
}

/// `dpctl/show [-s]`: the bridges' `support dpctl-show` replies under
/// OVS's one datapath heading, their lookups and flows summed.
pub(super) fn dpctl_show(rundir: &Path, bridges: &[String], stats: bool) -> Result<String, String> {
    let line = if stats {
        "support dpctl-show -s"
    } else {
        "support dpctl-show"
    };
    let (mut hit, mut missed, mut lost, mut flows) = (0u64, 0u64, 0u64, 0u64);
    let mut ports = String::new();
    for bridge in bridges {
        let reply = match ctl::request(&ctl::socket_path(rundir, bridge), line) {
            Ok(r) if r.ok => r.text,
            Ok(r) => return Err(r.text.trim_end().to_string()),
            Err(ctl::CtlError::Connect { .. }) => continue,
            Err(e) => return Err(e.to_string()),
        };
        let (first, rest) = reply.split_once('\n').unwrap_or((&reply, ""));
        for word in first.split_whitespace() {
            let n = |v: &str| v.parse::<u64>().unwrap_or(0);
            match word.split_once(':') {
                Some(("hit", v)) => hit += n(v),
                Some(("missed", v)) => missed += n(v),
                Some(("lost", v)) => lost += n(v),
                Some(("flows", v)) => flows += n(v),
                _ => {}
            }
        }
        ports.push_str(rest);
    }
    Ok(format!(
        "netdev@{DATAPATH}:\n  lookups: hit:{hit} missed:{missed} lost:{lost}\n  flows: {flows}\n{ports}"
    ))
}
