//! The flows each switch is programmed with and the traffic the generator
//! sends, per scenario (see the module above for what each one is).

use std::net::Ipv4Addr;

use super::{
    pipeline, Config, ConfigError, Scenario, CT_DST_PORT, CT_NEW_MAX_CONNECTIONS, CT_SRC_PORT,
    ENCAP_DST, ENCAP_POD_PORT, FLOWS_BASE, LOCAL_NODE, REMOTE_NODE, VNI,
};
use crate::bpf::{SinkChecks, SinkClasses};
use crate::measure::Traffic;
use crate::packet::{FrameSpec, Template, TemplateError, Vary, VxlanOuter, VXLAN_OVERHEAD};
use crate::topo::{MAC_A, MAC_B, MAC_VA};

pub(super) fn flows_text(cfg: &Config) -> Result<String, ConfigError> {
    let mut s = String::new();
    match cfg.scenario {
        Scenario::Pipeline => return pipeline::flows(false),
        Scenario::Encap => {
            // The agent's way: table 0 (here) puts the VNID in REG0, and
            // its table 90 flow for the remote node's HostSubnet, verbatim
            // but for the cookie, encapsulates. Nothing comes back.
            s.push_str(&format!(
                "table=0, priority=100, in_port={ENCAP_POD_PORT}, ip, actions=load:{VNI}->NXM_NX_REG0[], goto_table:90\n"
            ));
            s.push_str(&format!(
                "table=90, priority=100, ip, nw_dst={}/23, actions=move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31],set_field:{REMOTE_NODE}->tun_dst,output:1\n",
                Ipv4Addr::from(u32::from(ENCAP_DST) & !0x1ff)
            ));
            return Ok(s);
        }
        Scenario::Conntrack | Scenario::ConntrackNew => {
            s.push_str("table=0,priority=100,ip,ct_state=-trk,actions=ct(table=0)\n");
            s.push_str(
                "table=0,priority=90,ip,ct_state=+trk+new,in_port=1,actions=ct(commit),output:2\n",
            );
            s.push_str("table=0,priority=90,ip,ct_state=+trk+est,in_port=1,actions=output:2\n");
        }
        Scenario::P2p => {
            s.push_str("table=0,priority=10,in_port=1,actions=output:2\n");
        }
        Scenario::Vxlan => {
            // No way back: output to vxlan0 needs a tunnel destination.
            s.push_str(&format!(
                "table=0,priority=100,in_port=1,tun_id={VNI},actions=output:2\n"
            ));
            return Ok(s);
        }
        Scenario::Flows => {
            for i in 0..cfg.n_flows {
                s.push_str(&dst_flow(i, Some(2)));
                s.push('\n');
            }
        }
        // The bundle is the measurement: the switch starts empty.
        Scenario::Flowmod => return Ok(s),
        // Every destination to port 2, the moving ones too, until the
        // churn moves them; nothing comes back from the sinks.
        Scenario::Churn => {
            for i in 0..cfg.n_flows {
                s.push_str(&dst_flow(i, Some(2)));
                s.push('\n');
            }
            return Ok(s);
        }
    }
    s.push_str("table=0,priority=10,in_port=2,actions=output:1\n");
    Ok(s)
}

/// Destination `i` of the `flows`, `churn` and `flowmod` scenarios.
pub(super) fn dst(i: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(FLOWS_BASE) + i)
}

/// The flow for destination `i`, sending it to `port` (`None`: the match
/// alone, for a strict delete).
pub(super) fn dst_flow(i: u32, port: Option<u32>) -> String {
    let m = format!("table=0,priority=100,ip,in_port=1,nw_dst={}", dst(i));
    match port {
        Some(p) => format!("{m},actions=output:{p}"),
        None => m,
    }
}

/// `flowmod`: the bundle file (`ovs-ofctl bundle` syntax) adding one flow
/// per destination for `n` destinations, the `flows` scenario's shape.
pub(super) fn flowmod_bundle(n: u32) -> String {
    let mut s = String::with_capacity(n as usize * 80);
    for i in 0..n {
        s.push_str("flow add ");
        s.push_str(&dst_flow(i, Some(2)));
        s.push('\n');
    }
    s
}

/// `churn`: the bundle that moves every moving destination (odd `i` below
/// `n`, the sink's class 1) to `port`, or deletes their flows (`None`).
/// An add over an existing flow with the same match and priority
/// replaces its actions, as OpenFlow's ADD does.
pub(super) fn churn_bundle(n: u32, port: Option<u32>) -> String {
    let mut s = String::new();
    for i in (1..n).step_by(2) {
        s.push_str(match port {
            Some(_) => "flow add ",
            None => "flow delete_strict ",
        });
        s.push_str(&dst_flow(i, port));
        s.push('\n');
    }
    s
}

/// One set of measurements within a scenario: the `conntrack` scenario has
/// one per connection count, the others one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Case {
    pub(super) connections: Option<u32>,
}

pub(super) fn cases(cfg: &Config) -> Vec<Case> {
    match cfg.scenario {
        Scenario::Conntrack => cfg
            .connections
            .iter()
            .map(|&n| Case {
                connections: Some(n),
            })
            .collect(),
        _ => vec![Case { connections: None }],
    }
}

/// Whether the `conntrack` case's `n` connections differ by source port
/// (one client's connections, while ports last) or by source address.
fn ct_ports_last(n: u32) -> bool {
    u32::from(u16::MAX - CT_SRC_PORT) + 1 >= n
}

/// `conntrack`: pod B's answer to each of the case's connections (the
/// generator's flow i reversed), and how its flows vary.
pub(super) fn ct_replies(cfg: &Config, case: Case) -> Result<(Template, Vary, u32), TemplateError> {
    let n = case.connections.unwrap_or(1).max(1);
    let ports_last = ct_ports_last(n);
    let t = FrameSpec {
        proto: cfg.proto,
        pkt_size: cfg.pkt_size,
        src_mac: MAC_B,
        dst_mac: MAC_A,
        src_ip: Ipv4Addr::new(10, 128, 0, 3),
        dst_ip: Ipv4Addr::new(10, 128, 0, 2),
        src_port: CT_DST_PORT,
        dst_port: CT_SRC_PORT,
        vxlan: None,
    }
    .build()?;
    let vary = Vary {
        dst_port: ports_last,
        dst_ip: !ports_last,
        ..Vary::default()
    };
    Ok((t, vary, n))
}

pub(super) fn traffic(cfg: &Config, case: Case) -> Result<Traffic, TemplateError> {
    let mut src_port = 40000;
    let (dst_ip, n_flows, vary) = match cfg.scenario {
        Scenario::P2p | Scenario::Vxlan | Scenario::Pipeline => {
            (Ipv4Addr::new(10, 128, 0, 3), 1, Vary::default())
        }
        Scenario::Encap => (ENCAP_DST, 1, Vary::default()),
        Scenario::Conntrack => {
            let n = case.connections.unwrap_or(1).max(1);
            src_port = CT_SRC_PORT;
            // Source ports while they last (one client's connections),
            // source addresses beyond: connection i is always unique.
            let ports_last = ct_ports_last(n);
            let vary = Vary {
                src_port: ports_last,
                src_ip: !ports_last,
                ..Vary::default()
            };
            (Ipv4Addr::new(10, 128, 0, 3), n, vary)
        }
        Scenario::ConntrackNew => (
            Ipv4Addr::new(10, 128, 0, 3),
            // A run stops at this count, so no source address repeats.
            u32::try_from(CT_NEW_MAX_CONNECTIONS).unwrap_or(u32::MAX),
            Vary {
                src_ip: true,
                ..Vary::default()
            },
        ),
        // flowmod sends nothing; its arm only keeps the match whole.
        Scenario::Flows | Scenario::Churn | Scenario::Flowmod => (
            FLOWS_BASE,
            cfg.n_flows,
            Vary {
                dst_ip: true,
                ..Vary::default()
            },
        ),
    };
    let template = FrameSpec {
        proto: cfg.proto,
        pkt_size: cfg.pkt_size,
        src_mac: MAC_A,
        // The remote pod's MAC, as the agent makes them: 0a:58 and the
        // IPv4 address (MAC_B is pod B's).
        dst_mac: match cfg.scenario {
            Scenario::Encap => xbr_lab::addr::pod_mac(ENCAP_DST),
            _ => MAC_B,
        },
        src_ip: Ipv4Addr::new(10, 128, 0, 2),
        dst_ip,
        src_port,
        dst_port: CT_DST_PORT,
        vxlan: (cfg.scenario == Scenario::Vxlan).then_some(VxlanOuter {
            src_mac: MAC_A,
            dst_mac: MAC_VA,
            src_ip: REMOTE_NODE,
            dst_ip: LOCAL_NODE,
            vni: VNI,
        }),
    }
    .build()?;
    let sink_tag_off = match cfg.scenario {
        Scenario::Vxlan => template.decapsulated_tag_off(),
        Scenario::Encap => template.tag_off + VXLAN_OVERHEAD as u16,
        _ => template.tag_off,
    };
    let checks = sink_checks(cfg, &template)?;
    // churn: the sinks tell fixed (even) from moving (odd) destinations.
    let classes = (cfg.scenario == Scenario::Churn).then_some(SinkClasses {
        ip_off: template.ip_off,
        base: FLOWS_BASE,
        n: cfg.n_flows,
    });
    Ok(Traffic {
        sink_tag_off,
        template,
        vary,
        n_flows,
        method: cfg.method,
        cpu: Some(cfg.gen_cpu),
        classes,
        checks,
        stop: cfg.stop.clone(),
    })
}

/// The public face of [`traffic`]: the traffic of the scenario's first
/// case, e.g. for a test that sets up a switch itself.
pub fn traffic_of(cfg: &Config) -> Result<Traffic, TemplateError> {
    traffic(cfg, cases(cfg)[0])
}

/// `encap`: the frame pod B must receive for `template`: the outer
/// headers a VTEP at this node's address writes to the remote node (pod
/// B's MAC, VNI 42; the source MAC and UDP port are the switch's own
/// choice), around the template unchanged.
pub(super) fn encapsulated(template: &Template) -> Result<Vec<u8>, TemplateError> {
    let outer = crate::packet::vxlan_header(&VxlanOuter {
        src_mac: [0; 6],
        dst_mac: MAC_B,
        src_ip: LOCAL_NODE,
        dst_ip: REMOTE_NODE,
        vni: VNI,
    })?;
    // The lengths and checksum the encapsulation must fill in.
    let mut f = [&outer[..], &template.frame].concat();
    let total = f.len();
    let ip_len = u16::try_from(total - 14).unwrap_or(u16::MAX);
    f[16..18].copy_from_slice(&ip_len.to_be_bytes());
    f[38..40].copy_from_slice(&(ip_len - 20).to_be_bytes());
    let sum = crate::packet::checksum(&f[14..34], 0);
    f[24..26].copy_from_slice(&sum.to_be_bytes());
    Ok(f)
}

/// What the sink requires of a tagged frame. `encap`: the outer
/// destination MAC, EtherType, IPv4 version, length, protocol and
/// addresses, a verifying outer checksum, UDP port 4789 and length, VXLAN
/// flags and VNI with their reserved bytes zero, and the inner headers as
/// sent. `pipeline`: the Ethernet and IPv4 headers as sent (the flows
/// rewrite nothing between local pods). Others: nothing beyond the tag.
fn sink_checks(cfg: &Config, template: &Template) -> Result<Option<SinkChecks>, TemplateError> {
    let (expected, ranges, csum) = match cfg.scenario {
        Scenario::Encap => {
            let inner_l4 = usize::from(template.tag_off) + VXLAN_OVERHEAD;
            let f = encapsulated(template)?;
            (
                f,
                vec![
                    0..6,
                    12..15,
                    16..18,
                    23..24,
                    26..34,
                    36..40,
                    42..50,
                    VXLAN_OVERHEAD..inner_l4,
                ],
                Some(14),
            )
        }
        Scenario::Pipeline => {
            let l4 = usize::from(template.l4_off);
            (
                template.frame.clone(),
                vec![0..14, 14..l4],
                Some(template.ip_off),
            )
        }
        _ => return Ok(None),
    };
    SinkChecks::new(&expected, &ranges, csum)
        .map(Some)
        .map_err(TemplateError::Checks)
}

#[cfg(test)]
mod tests {
    use super::super::tests::cfg;
    use super::super::validate;
    use super::*;

    const ONE: Case = Case { connections: None };

    #[test]
    fn flows_scenario_has_one_flow_per_destination() {
        let text = flows_text(&cfg(Scenario::Flows)).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4);
        assert_eq!(
            lines[2],
            "table=0,priority=100,ip,in_port=1,nw_dst=10.128.4.2,actions=output:2"
        );
        let t = traffic(&cfg(Scenario::Flows), ONE).unwrap();
        assert_eq!(t.n_flows, 3);
        assert!(t.vary.dst_ip && !t.vary.src_port);
        assert_eq!(&t.template.frame[30..34], &[10, 128, 4, 0]);
        let p2p = flows_text(&cfg(Scenario::P2p)).unwrap();
        assert_eq!(p2p.lines().count(), 2);
    }

    #[test]
    fn churn_moves_the_odd_destinations_and_keeps_the_even_ones() {
        let mut c = cfg(Scenario::Churn);
        c.n_flows = 5;
        let initial = flows_text(&c).unwrap();
        assert_eq!(initial.lines().count(), 5, "no flow for the way back");
        assert!(initial.lines().all(|l| l.ends_with("actions=output:2")));
        assert_eq!(
            churn_bundle(5, Some(3)).lines().collect::<Vec<_>>(),
            [
                "flow add table=0,priority=100,ip,in_port=1,nw_dst=10.128.4.1,actions=output:3",
                "flow add table=0,priority=100,ip,in_port=1,nw_dst=10.128.4.3,actions=output:3",
            ]
        );
        assert_eq!(
            churn_bundle(5, None).lines().collect::<Vec<_>>(),
            [
                "flow delete_strict table=0,priority=100,ip,in_port=1,nw_dst=10.128.4.1",
                "flow delete_strict table=0,priority=100,ip,in_port=1,nw_dst=10.128.4.3",
            ]
        );
        // The flows of the moving destinations are the initial ones, so
        // a strict delete and an add replace exactly those.
        for l in churn_bundle(5, Some(2)).lines() {
            assert!(
                initial.contains(l.strip_prefix("flow add ").unwrap()),
                "{l}"
            );
        }
        let t = traffic(&c, ONE).unwrap();
        assert_eq!(t.n_flows, 5);
        assert!(t.vary.dst_ip);
        let classes = t.classes.expect("the sinks classify");
        assert_eq!((classes.ip_off, classes.n), (14, 5));
        assert_eq!(classes.base, dst(0));
        assert!(traffic(&cfg(Scenario::Flows), ONE)
            .unwrap()
            .classes
            .is_none());
        assert_eq!(flows_text(&cfg(Scenario::Flowmod)).unwrap(), "");
    }

    #[test]
    fn vxlan_scenario_encapsulates_and_expects_the_inner_frame() {
        let mut c = cfg(Scenario::Vxlan);
        assert!(validate(&c).is_err(), "64 bytes cannot hold VXLAN");
        c.pkt_size = Scenario::Vxlan.default_pkt_size();
        let t = traffic(&c, ONE).unwrap();
        assert_eq!(t.template.frame.len(), 110);
        assert_eq!(&t.template.frame[..6], &MAC_VA);
        assert_eq!(&t.template.frame[30..34], &[10, 0, 0, 11]);
        assert_eq!(t.sink_tag_off, t.template.tag_off - 50);
        assert_eq!(
            flows_text(&c).unwrap(),
            "table=0,priority=100,in_port=1,tun_id=42,actions=output:2\n"
        );
    }

    #[test]
    fn encap_flows_are_the_agents_table_90_and_the_sink_checks_the_outer_headers() {
        let c = cfg(Scenario::Encap);
        assert_eq!(
            flows_text(&c).unwrap().lines().collect::<Vec<_>>(),
            [
                "table=0, priority=100, in_port=3, ip, actions=load:42->NXM_NX_REG0[], goto_table:90",
                "table=90, priority=100, ip, nw_dst=10.128.2.0/23, actions=move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31],set_field:10.0.0.12->tun_dst,output:1",
            ]
        );
        let t = traffic(&c, ONE).unwrap();
        // A plain 64-byte frame to the remote pod, 0a:58 + its address.
        assert_eq!(t.template.frame.len(), 60);
        assert_eq!(&t.template.frame[..6], &[0x0a, 0x58, 10, 128, 2, 3]);
        assert_eq!(&t.template.frame[30..34], &[10, 128, 2, 3]);
        assert_eq!(t.sink_tag_off, t.template.tag_off + 50);
        let checks = t.checks.expect("the sink checks encapsulation");
        let good = encapsulated(&t.template).unwrap();
        assert_eq!(good.len(), 110);
        assert!(checks.pass(&good));
        // Another source MAC or UDP source port is the switch's choice.
        let mut f = good.clone();
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 9]);
        f[34..36].copy_from_slice(&51234u16.to_be_bytes());
        assert!(checks.pass(&f));
        // Anything else wrong is refused: VNI, UDP port, outer destination,
        // length, checksum, the inner frame, a missing byte.
        for (at, byte) in [(48, 43), (37, 0xb6), (33, 13), (17, 95), (25, 0), (80, 4)] {
            let mut f = good.clone();
            f[at] = byte;
            assert!(!checks.pass(&f), "byte {at} = {byte}");
        }
        assert!(!checks.pass(&good[..91]));
        // The kernel reference: its header with the lengths and checksum
        // its program fills in (bpf/xbrb_redirect.c) passes.
        let mut h = crate::packet::vxlan_header(&VxlanOuter {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: MAC_B,
            src_ip: LOCAL_NODE,
            dst_ip: REMOTE_NODE,
            vni: VNI,
        })
        .unwrap()
        .to_vec();
        h.extend_from_slice(&t.template.frame);
        h[16..18].copy_from_slice(&96u16.to_be_bytes());
        h[38..40].copy_from_slice(&76u16.to_be_bytes());
        let sum = crate::packet::checksum(&h[14..34], 0);
        h[24..26].copy_from_slice(&sum.to_be_bytes());
        assert!(checks.pass(&h));
    }

    #[test]
    fn pipeline_sends_pod_a_to_pod_b_and_the_sink_wants_the_frame_as_sent() {
        let c = cfg(Scenario::Pipeline);
        let text = flows_text(&c).unwrap();
        assert_eq!(text, pipeline::flows(false).unwrap());
        assert!(
            !text.contains("priority=10,in_port=2"),
            "only the agent's flows"
        );
        let t = traffic(&c, ONE).unwrap();
        assert_eq!(
            &t.template.frame[..12],
            &[[0x0a, 0x58, 10, 128, 0, 3], MAC_A].concat()[..]
        );
        assert_eq!(&t.template.frame[26..34], &[10, 128, 0, 2, 10, 128, 0, 3]);
        assert_eq!(t.sink_tag_off, t.template.tag_off);
        let checks = t.checks.expect("checks");
        assert!(checks.pass(&t.template.frame));
        let mut f = t.template.frame.clone();
        f[33] = 4;
        assert!(!checks.pass(&f), "another destination");
        assert!(traffic(&cfg(Scenario::P2p), ONE).unwrap().checks.is_none());
    }

    #[test]
    fn conntrack_flows_send_every_packet_through_ct() {
        let c = cfg(Scenario::Conntrack);
        let text = flows_text(&c).unwrap();
        assert_eq!(
            text.lines().collect::<Vec<_>>(),
            [
                "table=0,priority=100,ip,ct_state=-trk,actions=ct(table=0)",
                "table=0,priority=90,ip,ct_state=+trk+new,in_port=1,actions=ct(commit),output:2",
                "table=0,priority=90,ip,ct_state=+trk+est,in_port=1,actions=output:2",
                "table=0,priority=10,in_port=2,actions=output:1",
            ]
        );
        assert_eq!(flows_text(&cfg(Scenario::ConntrackNew)).unwrap(), text);
        assert_eq!(
            cases(&c),
            [
                Case {
                    connections: Some(1)
                },
                Case {
                    connections: Some(10_000)
                }
            ]
        );
        assert_eq!(cases(&cfg(Scenario::ConntrackNew)), [ONE]);
    }

    #[test]
    fn conntrack_connections_are_distinct_tuples() {
        let c = cfg(Scenario::Conntrack);
        let t = traffic(
            &c,
            Case {
                connections: Some(10_000),
            },
        )
        .unwrap();
        assert_eq!(t.n_flows, 10_000);
        assert!(t.vary.src_port && !t.vary.src_ip && !t.vary.dst_ip);
        assert_eq!(&t.template.frame[34..36], &CT_SRC_PORT.to_be_bytes());
        // Ports run out: addresses vary instead.
        let t = traffic(
            &c,
            Case {
                connections: Some(70_000),
            },
        )
        .unwrap();
        assert!(!t.vary.src_port && t.vary.src_ip);
        let last_port = traffic(
            &c,
            Case {
                connections: Some(64_512),
            },
        )
        .unwrap();
        assert!(last_port.vary.src_port, "1024 + 64511 = 65535 is a port");
        let new = traffic(&cfg(Scenario::ConntrackNew), ONE).unwrap();
        assert!(new.vary.src_ip && !new.vary.src_port);
        assert_eq!(u64::from(new.n_flows), CT_NEW_MAX_CONNECTIONS);
    }
}
