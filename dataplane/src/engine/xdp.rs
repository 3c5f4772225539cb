//! The engine's side of the XDP flow cache (see `crate::xdpcache`):
//! deciding whether a translation can run in the kernel, and adding the
//! kernel's hits to the ports' and drop counters.

use super::{Engine, Frames, PortIo};
use crate::control::port_config;
use crate::xdpcache::{entry::mac_bytes, FcAction, FcKey, XdpCache, XdpCacheStats};
use flowtable::action::port as ofpp;
use flowtable::key::{Field, FlowKey};
use flowtable::pipeline::{DpAction, DropReason};
use std::time::Instant;

impl<F: Frames, P: PortIo<F>> Engine<F, P> {
    /// Puts `cache` in front of the sockets (`None`: off).
    pub fn set_xdp_cache(&mut self, cache: Option<XdpCache>) {
        self.xdp = cache;
    }

    /// What the XDP flow cache did so far, if it is on.
    pub fn xdp_cache_stats(&self) -> Option<XdpCacheStats> {
        self.xdp.as_ref().map(XdpCache::stats)
    }

    /// Collects the XDP cache's hits now (tests and shutdown; rounds do
    /// it every `xdpcache::SWEEP_INTERVAL`).
    pub fn xdp_collect(&mut self) {
        self.xdp_sweep(true);
    }

    /// Installs the translation in `self.xlate` of the frame with XDP key
    /// `xk` and flow key `key`, if the XDP program can carry it out alone
    /// (see `crate::xdpcache` for the rules).
    pub(super) fn xdp_install(&mut self, in_port: u32, xk: FcKey, key: &FlowKey) {
        if self.fail_open || self.xdp.is_none() || self.xlate.recirc().is_some() {
            return;
        }
        let (mut set_dst, mut set_src, mut out_port) = (None, None, None);
        for a in self.xlate.actions() {
            match *a {
                DpAction::SetField {
                    field: Field::EthDst,
                    value,
                } if out_port.is_none() => set_dst = Some(mac_bytes(value)),
                DpAction::SetField {
                    field: Field::EthSrc,
                    value,
                } if out_port.is_none() => set_src = Some(mac_bytes(value)),
                DpAction::Output { port, .. } if out_port.is_none() => out_port = Some(port),
                _ => return,
            }
        }
        let Some(in_idx) = self.index_of(in_port) else {
            return;
        };
        let (action, out) = match out_port {
            None => (
                FcAction::Drop,
                Err(self.xlate.drop_reason().unwrap_or(DropReason::ExplicitDrop)),
            ),
            Some(port) => {
                if port == ofpp::IN_PORT || port == in_port {
                    return;
                }
                let Some(idx) = self.index_of(port) else {
                    return;
                };
                let p = &self.ports[idx];
                let (Some(out_ifindex), true) = (p.xdp_ifindex, p.xdp_target) else {
                    return;
                };
                if p.config & (port_config::PORT_DOWN | port_config::NO_FWD) != 0 {
                    return;
                }
                (
                    FcAction::Redirect {
                        out_ifindex,
                        set_dst,
                        set_src,
                    },
                    Ok(idx),
                )
            }
        };
        let Some(attribution) = self
            .cache
            .as_ref()
            .and_then(|c| c.attribution(&self.pipeline, key))
        else {
            return;
        };
        if let Some(x) = &mut self.xdp {
            x.install(xk, action, in_idx, out, attribution);
        }
    }

    /// Collects the XDP cache's hits and publishes every counter when
    /// the control plane is about to answer a statistics request.
    pub(super) fn collect_if_asked(&mut self) {
        let want = self.shared.stats_requested();
        if want == self.stats_seen {
            return;
        }
        self.stats_seen = want;
        self.xdp_sweep(true);
        self.flush();
        self.flush_cache();
        self.shared.mark_stats_collected(want);
    }

    fn index_of(&self, ofport: u32) -> Option<usize> {
        match self.port_index.get(super::live_ports::slot(ofport)) {
            Some(&i) if i != u16::MAX => Some(usize::from(i)),
            _ => None,
        }
    }

    /// Sweeps the XDP cache when due (now with `force`) and adds the hits
    /// it collected to the ports' and drop counters.
    pub(super) fn xdp_sweep(&mut self, force: bool) {
        let Some(x) = &mut self.xdp else {
            return;
        };
        x.sweep(Instant::now(), force);
        for c in x.take_credits() {
            if let Some(p) = self.ports.get_mut(c.in_idx) {
                p.totals.rx_packets += c.packets;
                p.totals.rx_bytes += c.bytes;
            }
            match c.out {
                Ok(idx) => {
                    if let Some(p) = self.ports.get_mut(idx) {
                        p.totals.tx_packets += c.packets;
                        p.totals.tx_bytes += c.bytes;
                    }
                }
                Err(reason) => self.drops.count_n(reason, c.packets),
            }
        }
    }
}
