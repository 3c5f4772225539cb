//! The engine's side of the XDP flow cache (see `crate::fastpath::cache`):
//! deciding whether a translation can run in the kernel (and, for a port
//! flooding distinct flows, whether now: `install_gate.rs`), and adding
//! the kernel's hits to the ports' and drop counters.

mod install_gate;
pub(super) use install_gate::InstallGate;

use super::live_ports::index_in;
use super::{Engine, EnginePort, Frames, PortIo};
use crate::conntrack::{state, Tuple};
use crate::control::port_config;
use crate::engine::tunnel::TunnelMeta;
use crate::fastpath::cache::entry::{self, mac_bytes, NwRewrite};
use crate::fastpath::cache::{CtConn, FcAction, FcKey, Origin, XdpCache, XdpCacheStats};
use flowtable::action::port as ofpp;
use flowtable::cache::Attribution;
use flowtable::key::{Field, FlowKey};
use flowtable::matching::{IP_PROTO_ICMP, IP_PROTO_TCP, IP_PROTO_UDP};
use flowtable::pipeline::{DpAction, DropReason};
use std::time::Instant;
use xbr_packet::vxlan::OUTER_LEN;

/// Most `ct()` passes one cached translation may go through (the
/// agent's pipeline has three).
pub(super) const MAX_CT_PASSES: usize = 4;

/// A received frame's translation followed across its passes (each
/// `ct(table=N)` recirculation starts one) while it could still become an
/// XDP cache entry: the keys of the passes so far (their counters are
/// gathered only when an entry is installed) and the connections they
/// went through. Fixed-size: followed for every received frame the XDP
/// program could look up, it must not allocate.
pub(super) struct XdpChain {
    xk: FcKey,
    /// Each fork pass's key and its `ct(table=N)` action.
    passes: [Option<(FlowKey, DpAction)>; MAX_CT_PASSES],
    conns: [CtConn; MAX_CT_PASSES],
    n_conns: usize,
    /// The last pass's `ct()` had `commit`.
    committed: bool,
}

/// An unused slot of `XdpChain::conns`.
const NO_CONN: CtConn = CtConn {
    tuple: Tuple::v4(0, 0, 0, 0, 0, 0),
    mark: 0,
    label: 0,
    absent: false,
};

impl XdpChain {
    pub(super) fn new(xk: FcKey) -> Self {
        XdpChain {
            xk,
            passes: [None; MAX_CT_PASSES],
            conns: [NO_CONN; MAX_CT_PASSES],
            n_conns: 0,
            committed: false,
        }
    }

    /// Records a pass translated from `key` that ended in the `ct()`
    /// fork `fork`; `false` if there were too many.
    fn add_pass(&mut self, key: &FlowKey, fork: DpAction) -> bool {
        self.committed = matches!(fork, DpAction::Ct { commit: true, .. });
        match self.passes.iter_mut().find(|p| p.is_none()) {
            Some(slot) => {
                *slot = Some((*key, fork));
                true
            }
            None => false,
        }
    }

    pub(super) fn conns(&self) -> &[CtConn] {
        &self.conns[..self.n_conns]
    }

    /// The frame's XDP key.
    pub(super) fn key(&self) -> &FcKey {
        &self.xk
    }

    /// The key and `ct()` action of the one fork pass, if there was
    /// exactly one.
    pub(super) fn only_fork(&self) -> Option<(&FlowKey, DpAction)> {
        match self.passes {
            [Some((ref k, fork)), None, ..] => Some((k, fork)),
            _ => None,
        }
    }

    /// After a `ct(table=N)` pass from `before` (the pass did nothing but
    /// the `ct()`), `key` is what the fork resumes with: records its
    /// connection, by the tuple conntrack looked up (before any NAT), if
    /// the kernel may carry the packet, i.e. it is `+trk+est` (maybe
    /// `+rpl`, maybe NATed: the entry rewrites as NAT did, from the
    /// fork's headers), not new, invalid or related, or exactly
    /// `+trk+new` (no connection, none committed: the
    /// tuple is then watched until one is, see `conntrack/absent.rs`;
    /// a committed one without a reply yet is refused when it is linked),
    /// and TCP or UDP (the XDP key holds their ports; an ICMP echo's
    /// identifier it does not). Returns whether it did.
    pub(super) fn tracked(&mut self, before: &FlowKey, key: &FlowKey) -> bool {
        let st = key.get(Field::CtState) as u32;
        let need = state::TRK | state::EST;
        let refuse = state::NEW | state::INV | state::REL;
        // `+trk+new` after a commit is a connection just stored: it
        // becomes `+est` with its reply, so no entry (and the packet
        // thread does no work for one: every new connection comes here).
        let absent = st == state::TRK | state::NEW && !self.committed;
        let proto = before.get(Field::IpProto) as u8;
        if !(absent || (st & need == need && st & refuse == 0))
            || !matches!(proto, IP_PROTO_TCP | IP_PROTO_UDP)
            || self.n_conns >= MAX_CT_PASSES
        {
            return false;
        }
        // The tuple conntrack looked up: the packet's before the fork's
        // NAT (the pass did nothing else to it).
        self.conns[self.n_conns] = CtConn {
            // IPv4 only: the XDP cache keys IPv4 frames alone.
            tuple: Tuple::v4(
                key.get(Field::CtZone) as u16,
                proto,
                before.get(Field::IpSrc) as u32,
                before.get(Field::IpDst) as u32,
                before.get(Field::TpSrc) as u16,
                before.get(Field::TpDst) as u16,
            ),
            mark: key.get(Field::CtMark) as u32,
            label: key.ct_label(),
            absent,
        };
        self.n_conns += 1;
        true
    }
}

/// Whether `actions` are a `ct(table=N)` pass the cache can follow: the
/// fork alone (nothing else done to the packet), without a ct_mark or
/// ct_label to write, without `force` (a `commit` of an established
/// connection changes nothing). `nat` may be there: it translates only a
/// connection that has a translation, and then the fork's state says so
/// (`+snat`/`+dnat`), which the entry then rewrites as NAT did; the
/// agent's replies to local pods take `ct(nat,table=70)`. Returns the
/// `ct()` action if they are.
pub(super) fn plain_ct_fork(actions: &[DpAction]) -> Option<&DpAction> {
    match actions {
        [a @ DpAction::Ct {
            table: Some(_),
            mark: None,
            label: None,
            force: false,
            ..
        }] => Some(a),
        _ => None,
    }
}

impl<F: Frames, P: PortIo<F>> Engine<F, P> {
    /// Puts `cache` in front of the sockets (`None`: off).
    pub fn set_xdp_cache(&mut self, cache: Option<XdpCache>) {
        self.xdp = cache;
    }

    /// What the XDP flow cache did so far, if it is on.
    pub fn xdp_cache_stats(&self) -> Option<XdpCacheStats> {
        self.xdp.as_ref().map(|x| XdpCacheStats {
            deferred: self.xdp_gate.deferred,
            ..x.stats()
        })
    }

    /// Collects the XDP cache's hits now (tests and shutdown; rounds do
    /// it every `fastpath::cache::SWEEP_INTERVAL`).
    pub fn xdp_collect(&mut self) {
        self.xdp_sweep(true, false);
    }

    /// One pass of `chain`'s frame was translated into `self.xlate` from
    /// `key`: a `ct(table=N)` fork the cache can follow continues the
    /// chain; the last pass is installed if it can be, and ends it. Taken
    /// by reference: a chain holds a flow key per pass, too big to move
    /// on every pass of every frame.
    pub(super) fn xdp_pass(&mut self, in_port: u32, chain: &mut Option<XdpChain>, key: &FlowKey) {
        let Some(c) = chain else {
            return;
        };
        if self.fail_open || self.xdp.is_none() {
            *chain = None;
            return;
        }
        if let Some(&fork) = plain_ct_fork(self.xlate.actions()) {
            if !c.add_pass(key, fork) {
                *chain = None;
            }
            return;
        }
        if let Some(c) = chain.take() {
            self.xdp_install(in_port, &c, key);
            self.xdp_template(in_port, &c, key);
        }
    }

    /// Installs the translation in `self.xlate` of the frame whose passes
    /// `chain` followed, the last from flow key `key`, if the XDP program
    /// can carry it out alone (see `crate::fastpath::cache` for the rules).
    fn xdp_install(&mut self, in_port: u32, chain: &XdpChain, key: &FlowKey) {
        if self.fail_open || self.xdp.is_none() {
            return;
        }
        let Some((action, out)) = Self::fc_action(
            &mut self.ports,
            &self.port_index,
            in_port,
            &chain.xk,
            key,
            &self.xlate,
        ) else {
            return;
        };
        if !self.xdp_gate.admit(in_port, &chain.xk, self.now_secs) {
            return;
        }
        // The counters of every pass, from the translation cache (a pass
        // whose translation a later one evicted there is not cached).
        let Some(cache) = self.cache.as_ref() else {
            return;
        };
        let fork_keys = chain.passes.iter().flatten().map(|(k, _)| k);
        let parts: Option<Vec<Attribution>> = fork_keys
            .clone()
            .chain(std::iter::once(key))
            .map(|k| cache.attribution(&self.pipeline, k))
            .collect();
        let Some(attribution) = parts.and_then(Attribution::join) else {
            return;
        };
        let origin = Origin {
            in_port,
            passes: fork_keys.chain(std::iter::once(key)).copied().collect(),
            forks: chain.passes.iter().flatten().map(|(_, f)| *f).collect(),
        };
        if let Some(x) = &mut self.xdp {
            x.install(
                chain.xk,
                action,
                origin,
                out,
                attribution,
                chain.conns(),
                &self.conntrack,
                self.ct_now,
            );
        }
    }

    /// The XDP action for the last pass of frame `xk` (received on
    /// `in_port`), translated from `key` into `xlate`, and the port it
    /// leaves by (or why it is dropped); `None` if the XDP program cannot
    /// carry it out alone. Reads `ports` (their device, config and
    /// tunnel next hop), so the answer holds until they change.
    pub(super) fn fc_action(
        ports: &mut [EnginePort<P>],
        port_index: &[u16],
        in_port: u32,
        xk: &FcKey,
        key: &FlowKey,
        xlate: &flowtable::pipeline::Xlate,
    ) -> Option<(FcAction, Result<u32, DropReason>)> {
        if xlate.recirc().is_some() {
            return None;
        }
        let (mut set_dst, mut set_src, mut out_port) = (None, None, None);
        let mut tun = TunnelMeta::default();
        // The addresses and ports the frame leaves with: NAT in the
        // `ct()` passes is in `key` already, set_field comes on top.
        let proto = entry::key_proto(xk);
        let mut nw = NwRewrite {
            src: key.get(Field::IpSrc) as u32,
            dst: key.get(Field::IpDst) as u32,
            sport: key.get(Field::TpSrc) as u16,
            dport: key.get(Field::TpDst) as u16,
        };
        for a in xlate.actions() {
            match *a {
                DpAction::SetField {
                    field: Field::IpSrc,
                    value,
                } if out_port.is_none() => nw.src = value as u32,
                DpAction::SetField {
                    field: Field::IpDst,
                    value,
                } if out_port.is_none() => nw.dst = value as u32,
                DpAction::SetField {
                    field: Field::TpSrc,
                    value,
                } if out_port.is_none() && proto != IP_PROTO_ICMP => nw.sport = value as u16,
                DpAction::SetField {
                    field: Field::TpDst,
                    value,
                } if out_port.is_none() && proto != IP_PROTO_ICMP => nw.dport = value as u16,
                DpAction::SetField {
                    field: Field::EthDst,
                    value,
                } if out_port.is_none() => set_dst = Some(mac_bytes(value)),
                DpAction::SetField {
                    field: Field::EthSrc,
                    value,
                } if out_port.is_none() => set_src = Some(mac_bytes(value)),
                DpAction::Output {
                    port,
                    tun_id,
                    tun_dst,
                } if out_port.is_none() => {
                    out_port = Some(port);
                    tun = TunnelMeta {
                        tun_id,
                        tun_src: 0,
                        tun_dst,
                    };
                }
                // Anything else stays in userspace; a meter above all: its
                // buckets and counters are the packet threads', and a
                // cached flow would pass every packet unmetered.
                _ => return None,
            }
        }
        // Ingress policing and the egress limit are the packet thread's
        // (`crate::qos`): a port with one keeps that direction of its
        // traffic off the kernel path, so every frame is counted against
        // it. Ports without pay nothing in the kernel.
        // So are a mirrored port's frames (`crate::mirror`): the kernel
        // path copies nothing, so they all cross the packet thread.
        let inp = ports.get(index_in(port_index, in_port)?)?;
        if inp.qos.ingress.is_some() || inp.mirrors.any() {
            return None;
        }
        let came = entry::key_nw(xk);
        // ICMP keeps its type and code (no set_field of them is cached).
        if proto == IP_PROTO_ICMP && (nw.sport, nw.dport) != (came.sport, came.dport) {
            return None;
        }
        let nw_rewrite = (nw != came).then_some(nw);
        match out_port {
            None => Some((
                FcAction::Drop,
                Err(xlate.drop_reason().unwrap_or(DropReason::ExplicitDrop)),
            )),
            Some(port) => {
                if port == ofpp::IN_PORT || port == in_port {
                    return None;
                }
                let p = ports.get_mut(index_in(port_index, port)?)?;
                // Asked now, not cached: a veth's readiness follows its
                // peer (`ports::redirect`).
                let (Some(out_ifindex), true) = (p.xdp_ifindex, p.io.xdp_redirect_target()) else {
                    return None;
                };
                if p.config & (port_config::PORT_DOWN | port_config::NO_FWD) != 0
                    || p.qos.egress.is_some()
                    || p.mirrors.any()
                {
                    return None;
                }
                // A tunnel port: the outer headers its `encap` would write
                // now, for this flow (the source port hashes the inner
                // flow, which the key holds); none yet (next hop not
                // resolved): the packet thread keeps the flow.
                let encap = if p.tunnel {
                    let hash = entry::flow_hash(proto, &nw);
                    Some(p.io.tunnel_mut()?.flow_outer(tun, hash)?)
                } else {
                    None
                };
                Some((
                    FcAction::Redirect {
                        out_ifindex,
                        set_dst,
                        set_src,
                        nw: nw_rewrite,
                        encap,
                        frags: p.io.xdp_redirect_frags(),
                    },
                    Ok(port),
                ))
            }
        }
    }

    /// Removes the XDP cache entries of connections conntrack saw change
    /// or go (see `fastpath/ct/link.rs`).
    pub(super) fn xdp_forget_dead(&mut self) {
        let Some(x) = &mut self.xdp else {
            return;
        };
        let mut ids = Vec::new();
        if self
            .conntrack
            .xdp_take_dead(self.changes.engine(), &mut ids)
        {
            x.forget_conns(&ids);
        }
    }

    /// Serves the control plane's statistics requests: a request starts
    /// a fresh XDP cache pass, which goes on a step per busy round like
    /// any sweep (the rest in an idle one), so a large cache does not
    /// stall forwarding; when the pass is complete every counter is
    /// published and the request marked collected. Requests arriving
    /// meanwhile are served by the next pass. `busy`: the last round had
    /// packets.
    pub(super) fn collect_if_asked(&mut self, busy: bool) {
        if self.stats_pass.is_none() {
            let want = self.shared.stats_requested();
            if want == self.stats_seen {
                return;
            }
            self.stats_seen = want;
            let pass = self.xdp.as_ref().map_or(0, |x| x.passes_completed() + 1);
            self.stats_pass = Some((want, pass));
            self.xdp_sweep(true, busy);
        }
        let Some((want, pass)) = self.stats_pass else {
            return;
        };
        if self
            .xdp
            .as_ref()
            .is_some_and(|x| x.passes_completed() < pass)
        {
            return;
        }
        self.stats_pass = None;
        for p in &mut self.ports {
            p.totals.io_rx_dropped = p.io.io_rx_dropped();
        }
        let engine = self.changes.engine();
        let (flush_fdb, list_fdb) = self.shared.take_fdb_requests(engine);
        if flush_fdb {
            self.macs.clear();
        }
        if list_fdb {
            self.shared
                .publish_fdb(engine, self.macs.stations(self.now_secs));
        }
        self.flush();
        self.flush_cache();
        if !self.publish_snapshot() {
            // A reader holds the snapshot this instant: publish at the
            // next round rather than wait for it.
            self.stats_pass = Some((want, pass));
            return;
        }
        self.shared.mark_stats_collected(engine, want);
    }

    /// Sweeps the XDP cache when due (now with `force`; a step of the
    /// pass when `busy`, see `XdpCache::sweep`) and adds the hits it
    /// collected to the ports' and drop counters.
    pub(super) fn xdp_sweep(&mut self, force: bool, busy: bool) {
        self.xdp_forget_dead();
        let Some(x) = &mut self.xdp else {
            return;
        };
        x.sweep(
            Instant::now(),
            force,
            busy,
            &self.conntrack,
            self.conntrack.now_ms(),
        );
        self.xdp_credit();
    }

    /// Adds the hits the XDP cache collected to the ports' and drop
    /// counters.
    pub(super) fn xdp_credit(&mut self) {
        let Some(x) = &mut self.xdp else {
            return;
        };
        // Entries count inner frames; a tunnel port counts what crosses
        // its uplink, with the outer headers (every entry from one
        // decapsulates, every entry to one encapsulates).
        let outer = |p: &EnginePort<P>, c: &crate::fastpath::cache::Credit| {
            c.bytes
                + if p.tunnel {
                    OUTER_LEN as u64 * c.packets
                } else {
                    0
                }
        };
        for (in_port, n) in x.take_ct_new_overflow() {
            self.drops.ct_new_overflow += n;
            if let Some(p) = index_in(&self.port_index, in_port).and_then(|i| self.ports.get_mut(i))
            {
                p.totals.rx_dropped += n;
            }
        }
        for c in x.take_credits() {
            // A port removed meanwhile takes its counts with it.
            if let Some(p) =
                index_in(&self.port_index, c.in_port).and_then(|i| self.ports.get_mut(i))
            {
                p.totals.rx_packets += c.packets;
                p.totals.rx_bytes += outer(p, &c);
            }
            match c.out {
                Ok(port) => {
                    if let Some(p) =
                        index_in(&self.port_index, port).and_then(|i| self.ports.get_mut(i))
                    {
                        p.totals.tx_packets += c.packets;
                        p.totals.tx_bytes += outer(p, &c);
                    }
                }
                Err(reason) => self.drops.count_n(reason, c.packets),
            }
        }
    }
}

#[cfg(test)]
mod tests;
