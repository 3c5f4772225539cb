//! The engine's side of new-connection templates (see
//! `conntrack/kernel_new.rs` for the design and `fastpath/cache/templates.rs`
//! for the kernel's): recognising a translation the XDP program may apply
//! to every UDP frame without a connection that it matches, and
//! installing it after the round's connections reached the kernel.

use super::live_ports::index_in;
use super::xdp::XdpChain;
use super::{Engine, Frames, PortIo};
use crate::conntrack::state;
use crate::control::port_config;
use crate::fastpath::cache::entry::{self, mac_bytes};
use crate::fastpath::cache::templates::{fc_mask, NewConnTemplate};
use flowtable::action::port as ofpp;
use flowtable::cache::Attribution;
use flowtable::key::{Field, FlowKey};
use flowtable::matching::IP_PROTO_UDP;
use flowtable::pipeline::{DpAction, Xlate};
use std::time::Instant;

/// The shape a template stands for, from the actions of its two passes:
/// the fork's zone if the first is exactly `ct(table=N)` in a zone, no
/// commit, NAT, mark, label or force; and, from the second, `ct(commit)`
/// in the same zone, then Ethernet address rewrites and one output (the
/// port, its `set_field` of eth_dst and eth_src). `None` otherwise.
pub(super) fn template_shape(
    fork: &DpAction,
    last: &[DpAction],
) -> Option<(u16, u32, Option<u64>, Option<u64>)> {
    let DpAction::Ct {
        zone,
        commit: false,
        force: false,
        table: Some(_),
        nat: None,
        mark: None,
        label: None,
    } = *fork
    else {
        return None;
    };
    let [DpAction::Ct {
        zone: commit_zone,
        commit: true,
        force: false,
        table: None,
        nat: None,
        mark: None,
        label: None,
    }, rest @ ..] = last
    else {
        return None;
    };
    if *commit_zone != zone {
        return None;
    }
    let (mut dst, mut src, mut out) = (None, None, None);
    for a in rest {
        match *a {
            DpAction::SetField {
                field: Field::EthDst,
                value,
            } if out.is_none() => dst = Some(value),
            DpAction::SetField {
                field: Field::EthSrc,
                value,
            } if out.is_none() => src = Some(value),
            DpAction::Output {
                port,
                tun_id: 0,
                tun_dst: 0,
            } if out.is_none() => out = Some(port),
            _ => return None,
        }
    }
    Some((zone, out?, dst, src))
}

impl<F: Frames, P: PortIo<F>> Engine<F, P> {
    /// After the last pass of `chain`'s frame (translated from `key` into
    /// `self.xlate`): queues a template for the frame's device if the
    /// translation has a template's shape (see [`template_shape`]) and
    /// what it examined fits the XDP key. Tried at most every
    /// `templates::ATTEMPT_INTERVAL` per port.
    pub(super) fn xdp_template(&mut self, in_port: u32, chain: &XdpChain, key: &FlowKey) {
        if self.fail_open || !self.conntrack.kernel_creates() {
            return;
        }
        let xk = chain.key();
        if entry::key_proto(xk) != IP_PROTO_UDP || entry::is_decapsulated(xk) {
            return;
        }
        let (Some((first, fork)), [conn]) = (chain.only_fork(), chain.conns()) else {
            return;
        };
        // The fork found no connection and committed none; the frame is
        // exactly `+trk+new` in the second pass.
        if !conn.absent || key.get(Field::CtState) as u32 != state::TRK | state::NEW {
            return;
        }
        let Some((zone, out_port, dst, src)) = template_shape(&fork, self.xlate.actions()) else {
            return;
        };
        let Some(x) = &self.xdp else {
            return;
        };
        if x.template_covers(xk) || self.is_host_port(in_port) {
            return;
        }
        if out_port == in_port || out_port == ofpp::IN_PORT {
            return;
        }
        // Not from or to a port with a rate limit (see `xdp::fc_action`).
        let Some(ifindex) = index_in(&self.port_index, in_port)
            .and_then(|i| self.ports.get(i))
            .filter(|p| p.qos.ingress.is_none() && !p.mirrors.any())
            .and_then(|p| p.xdp_ifindex)
        else {
            return;
        };
        let Some(p) = index_in(&self.port_index, out_port).and_then(|i| self.ports.get(i)) else {
            return;
        };
        let (Some(out_ifindex), true, false) =
            (p.xdp_ifindex, p.io.xdp_redirect_target(), p.tunnel)
        else {
            return;
        };
        if p.config & (port_config::PORT_DOWN | port_config::NO_FWD) != 0
            || p.qos.egress.is_some()
            || p.mirrors.any()
        {
            return;
        }
        if !self
            .xdp
            .as_mut()
            .is_some_and(|x| x.template_attempt(in_port, Instant::now()))
        {
            return;
        }
        // What both passes examined, and the counters they move: the
        // passes translated again without counting (this translation may
        // have come from the caches, which keep no wildcards).
        let mut xl = Xlate::new();
        let a1 = self.pipeline.retranslate(first, &mut xl);
        let mut wc = *xl.wildcards();
        if xl.actions() != [fork] {
            return;
        }
        let a2 = self.pipeline.retranslate(key, &mut xl);
        if xl.actions() != self.xlate.actions() {
            return;
        }
        for (w, o) in wc.words.iter_mut().zip(xl.wildcards().words.iter()) {
            *w |= o;
        }
        let Some(attribution) = Attribution::join([a1, a2]) else {
            return;
        };
        self.pending_templates.push(NewConnTemplate {
            in_port,
            ifindex,
            mask: fc_mask(&wc),
            key: *xk,
            zone,
            out_port,
            out_ifindex,
            set_dst: dst.map(mac_bytes),
            set_src: src.map(mac_bytes),
            attribution,
        });
    }

    /// End of a round: stores the connections the kernel created, then
    /// installs the templates the round found. Returns how many
    /// connections it stored (work: the thread does not sleep on them).
    pub(super) fn xdp_kernel_sync(&mut self) -> usize {
        let stored = self.conntrack.kernel_sync();
        if self.pending_templates.is_empty() {
            return stored;
        }
        let Some(x) = &mut self.xdp else {
            self.pending_templates.clear();
            return stored;
        };
        for t in self.pending_templates.drain(..) {
            x.install_template(t);
        }
        stored
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ct(zone: u16, commit: bool, table: Option<u8>) -> DpAction {
        DpAction::Ct {
            zone,
            commit,
            force: false,
            table,
            nat: None,
            mark: None,
            label: None,
        }
    }

    fn out(port: u32) -> DpAction {
        DpAction::Output {
            port,
            tun_id: 0,
            tun_dst: 0,
        }
    }

    #[test]
    fn only_a_fork_then_a_commit_and_one_output_is_a_template() {
        let fork = ct(5, false, Some(1));
        assert_eq!(
            template_shape(&fork, &[ct(5, true, None), out(2)]),
            Some((5, 2, None, None))
        );
        let mac = DpAction::SetField {
            field: Field::EthDst,
            value: 0x0a58_0a80_0003,
        };
        assert_eq!(
            template_shape(&fork, &[ct(5, true, None), mac, out(2)]),
            Some((5, 2, Some(0x0a58_0a80_0003), None))
        );
        for last in [
            vec![ct(6, true, None), out(2)],
            vec![ct(5, false, None), out(2)],
            vec![ct(5, true, Some(2)), out(2)],
            vec![ct(5, true, None)],
            vec![ct(5, true, None), out(2), out(3)],
            vec![out(2)],
            vec![
                ct(5, true, None),
                DpAction::SetField {
                    field: Field::IpDst,
                    value: 1,
                },
                out(2),
            ],
        ] {
            assert_eq!(template_shape(&fork, &last), None, "{last:?}");
        }
        let committed_fork = ct(5, true, Some(1));
        assert_eq!(
            template_shape(&committed_fork, &[ct(5, true, None), out(2)]),
            None
        );
        let mut nat = ct(5, false, Some(1));
        if let DpAction::Ct { nat: n, .. } = &mut nat {
            *n = Some(flowtable::pipeline::NatSpec::default());
        }
        assert_eq!(template_shape(&nat, &[ct(5, true, None), out(2)]), None);
        let tunnel = DpAction::Output {
            port: 2,
            tun_id: 7,
            tun_dst: 0,
        };
        assert_eq!(template_shape(&fork, &[ct(5, true, None), tunnel]), None);
    }
}
