//! Execution of the pipeline for one packet (see `pipeline.rs` for the
//! design). Mirrors OVS's translation: `goto_table` continues in the same
//! frame, `resubmit` recurses and returns to the calling action list, group
//! buckets run on a copy of the key, and the action set runs once at the
//! end of the top-level pipeline.

use crate::action::{port, Action, SubField};
use crate::key::{Field, FlowKey};

/// The flow key's VLAN-present bit in `vlan_tci` (the 802.1Q CFI position).
const VLAN_PRESENT: u64 = 0x1000;
use crate::pipeline::Pipeline;
use crate::trace::Tracer;
use crate::translation::{
    packet_in_reason, DpAction, DropReason, Xlate, MAX_RESUBMITS, MAX_RESUBMIT_DEPTH,
};
use std::sync::atomic::Ordering::Relaxed;

/// Header fields the datapath can rewrite, in the order rewrites are
/// emitted. Overlaid fields appear once, under their IP/TCP name.
const HEADER_FIELDS: [Field; 25] = [
    Field::EthSrc,
    Field::EthDst,
    Field::VlanTci,
    Field::IpSrc,
    Field::IpDst,
    Field::IpProto,
    Field::IpDscp,
    Field::IpEcn,
    Field::IpTtl,
    Field::TpSrc,
    Field::TpDst,
    Field::ArpSha,
    Field::ArpTha,
    Field::Ipv6SrcHigh,
    Field::Ipv6SrcLow,
    Field::Ipv6DstHigh,
    Field::Ipv6DstLow,
    Field::Ipv6Label,
    Field::NdTargetHigh,
    Field::NdTargetLow,
    Field::MplsLabel,
    Field::MplsTc,
    Field::MplsBos,
    Field::MplsTtl,
    Field::PbbIsid,
];

struct Ctx<'p, 'o, T: Tracer> {
    pipe: &'p Pipeline,
    /// Observer of the walk; `NoTrace` (a no-op that compiles away) for
    /// packets, a recorder for `xbr trace`.
    tracer: T,
    out: &'o mut Xlate,
    /// The key as the actions see it.
    key: FlowKey,
    /// The packet as the datapath will have it after the actions emitted
    /// so far.
    base: FlowKey,
    packet_len: u32,
    action_set: ActionSet,
    resubmits: u32,
    /// Ends translation; the packet is dropped whatever was output.
    fatal: Option<DropReason>,
    /// Ends translation; what was output so far stays (`dec_ttl` at TTL 1).
    halted: bool,
    /// Why nothing was output, if nothing is.
    note: Option<DropReason>,
    /// The top-level pipeline ended in a table miss: no action set.
    missed: bool,
    /// The table the top-level pipeline ended in.
    last_table: u8,
    /// The flow whose actions run: what a packet-in reports.
    current: CurrentFlow,
    /// Translating a PACKET_OUT, where `output:TABLE` is meaningful.
    packet_out: bool,
    /// Translating a PACKET_OUT at all (also through `output:TABLE`):
    /// what a packet-in then gives as its reason.
    in_packet_out: bool,
    /// Group buckets being run (nested through chained groups).
    in_group: u32,
    /// Running the action set.
    in_action_set: bool,
    /// The label stack beyond the key's top entry.
    mpls: mpls::MplsState,
}

/// Identity of the flow whose actions are running, for packet-ins.
#[derive(Clone, Copy, Default)]
struct CurrentFlow {
    table_id: u8,
    cookie: u64,
    /// Priority 0 and no match at all: OpenFlow's table-miss flow.
    table_miss: bool,
}

pub(crate) fn run<T: Tracer>(
    pipe: &Pipeline,
    key: &FlowKey,
    packet_len: u32,
    out: &mut Xlate,
    tracer: T,
) {
    let start = key.recirc_table().unwrap_or(0);
    run_with(pipe, key, packet_len, out, tracer, |ctx| {
        ctx.run_tables(start, None, 0)
    });
}

/// Translates a PACKET_OUT's action list instead of a table walk;
/// `output:TABLE` in it sends the packet through the tables from 0.
pub(crate) fn run_actions<T: Tracer>(
    pipe: &Pipeline,
    key: &FlowKey,
    packet_len: u32,
    actions: &[Action],
    out: &mut Xlate,
    tracer: T,
) {
    run_with(pipe, key, packet_len, out, tracer, |ctx| {
        ctx.packet_out = true;
        ctx.in_packet_out = true;
        // No flow runs these actions: a packet-in they cause carries the
        // all-ones cookie, as OVS sends it.
        ctx.current.cookie = u64::MAX;
        ctx.execute(actions, 0, 0);
    });
}

fn run_with<'p, 'o, T: Tracer>(
    pipe: &'p Pipeline,
    key: &FlowKey,
    packet_len: u32,
    out: &'o mut Xlate,
    tracer: T,
    body: impl FnOnce(&mut Ctx<'p, 'o, T>),
) {
    let mut ctx = Ctx {
        pipe,
        tracer,
        out,
        key: *key,
        base: *key,
        packet_len,
        action_set: ActionSet::new(),
        resubmits: 0,
        fatal: None,
        halted: false,
        note: None,
        missed: false,
        last_table: 0,
        current: CurrentFlow::default(),
        packet_out: false,
        in_packet_out: false,
        in_group: 0,
        in_action_set: false,
        mpls: mpls::MplsState::default(),
    };
    body(&mut ctx);
    if ctx.fatal.is_none() && !ctx.halted && !ctx.missed && !ctx.action_set.is_empty() {
        ctx.execute_action_set();
    }
    let Ctx {
        out, fatal, note, ..
    } = ctx;
    if let Some(reason) = fatal {
        out.n_actions = 0;
        out.recirc = None;
        out.drop_reason = Some(reason);
    } else if out.n_actions == 0 {
        out.drop_reason = Some(note.unwrap_or(DropReason::ExplicitDrop));
    }
}

impl<T: Tracer> Ctx<'_, '_, T> {
    fn stopped(&self) -> bool {
        self.fatal.is_some() || self.halted
    }

    fn fail(&mut self, reason: DropReason) {
        if self.fatal.is_none() {
            self.fatal = Some(reason);
        }
    }

    fn unwildcard(&mut self, field: Field, ofs: u32, nbits: u32) {
        let bits = if nbits >= 64 {
            u64::MAX
        } else {
            (1u64 << nbits) - 1
        };
        let old = self.out.wildcards.get(field);
        self.out.wildcards.set(field, old | (bits << ofs));
    }

    /// Looks up `table` and runs the matching rule's instructions, following
    /// goto_table within this frame. `lookup_in_port` replaces in_port for
    /// the first lookup only (resubmit semantics).
    fn run_tables(&mut self, mut table: u8, lookup_in_port: Option<u32>, depth: u32) {
        let pipe = self.pipe;
        let mut in_port_override = lookup_in_port;
        loop {
            let Some(cls) = pipe.tables.get(usize::from(table)) else {
                return;
            };
            if self.mpls.opaque {
                // The lookup would see headers the key does not hold.
                self.fail(DropReason::Unsupported(
                    "a table lookup after popping a received MPLS label",
                ));
                return;
            }
            // A trace must not show up in the statistics it may be
            // debugging.
            let counters = if T::COUNTS {
                pipe.counters().table(table)
            } else {
                None
            };
            if let Some(c) = counters {
                c.lookup.fetch_add(1, Relaxed);
            }
            let rule = match in_port_override.take() {
                Some(p) => {
                    let saved = self.key.get(Field::InPort);
                    self.key.set(Field::InPort, u64::from(p));
                    let r = cls.lookup(&self.key, &mut self.out.wildcards);
                    self.key.set(Field::InPort, saved);
                    r
                }
                None => cls.lookup(&self.key, &mut self.out.wildcards),
            };
            self.tracer.lookup(table, rule, depth);
            let Some(rule) = rule else {
                if depth == 0 {
                    self.missed = true;
                    self.note = Some(DropReason::TableMiss);
                }
                return;
            };
            if let Some(c) = counters {
                c.matched.fetch_add(1, Relaxed);
            }
            if T::COUNTS {
                rule.stats.count(self.packet_len);
            }
            self.current = CurrentFlow {
                table_id: table,
                cookie: rule.cookie,
                table_miss: rule.priority == 0 && rule.matching.mask() == &FlowKey::zero(),
            };
            let ins = &rule.instructions;
            // OpenFlow runs the meter instruction first. The rewrites so
            // far are committed so the meter sees (and a DSCP remark
            // changes) the packet as the actions left it.
            if let Some(m) = ins.meter {
                self.commit();
                self.push(DpAction::Meter(m));
                if self.stopped() {
                    return;
                }
            }
            if let Some(actions) = &ins.apply_actions {
                self.execute(actions, table, depth);
                if self.stopped() {
                    return;
                }
            }
            if ins.clear_actions {
                self.action_set.clear();
            }
            if let Some(actions) = &ins.write_actions {
                if !self.action_set.write(actions) {
                    self.fail(DropReason::TooManyActions);
                    return;
                }
            }
            if let Some((value, mask)) = ins.write_metadata {
                let old = self.key.get(Field::Metadata);
                self.key
                    .set(Field::Metadata, (old & !mask) | (value & mask));
            }
            match ins.goto_table {
                Some(next) if next > table && self.mpls.opaque => {
                    self.tracer.goto_table(next, depth);
                    self.recirculate(next, depth);
                    return;
                }
                Some(next) if next > table => {
                    self.tracer.goto_table(next, depth);
                    table = next;
                }
                _ => {
                    if depth == 0 {
                        self.last_table = table;
                    }
                    return;
                }
            }
        }
    }

    fn execute(&mut self, actions: &[Action], table: u8, depth: u32) {
        for a in actions {
            if self.stopped() {
                return;
            }
            self.tracer.action(a, depth);
            if !self.check_opaque(a) {
                return;
            }
            match a {
                Action::Output {
                    port: port::CONTROLLER,
                    max_len,
                } => self.controller(*max_len),
                Action::Output { port, .. } => self.output(*port),
                Action::Group(id) => self.group(*id, table, depth),
                Action::SetField { field, value } => self.write(*field, *value),
                Action::SetField128 { field, value } => {
                    // Both halves, for `write`'s reason.
                    self.unwildcard(*field, 0, 64);
                    if let Some(high) = field.high_half() {
                        self.unwildcard(high, 0, 64);
                    }
                    self.key.set128(*field, *value)
                }
                Action::RegLoad { dst, value } => {
                    if dst.is_valid() {
                        self.unwildcard(dst.field, dst.ofs, dst.nbits);
                        self.key.set_bits(dst.field, dst.ofs, dst.nbits, *value);
                    }
                }
                Action::RegMove { src, dst } => {
                    if src.is_valid() && dst.is_valid() {
                        let v = self.read(src);
                        self.unwildcard(dst.field, dst.ofs, dst.nbits);
                        self.key.set_bits(dst.field, dst.ofs, dst.nbits, v);
                    }
                }
                Action::OutputReg { src, .. } => {
                    if src.is_valid() {
                        let p = self.read(src);
                        match u32::try_from(p) {
                            Ok(p) => self.output(p),
                            Err(_) => self.note = Some(DropReason::BadOutputPort),
                        }
                    }
                }
                Action::Resubmit { in_port, table: to } => {
                    self.resubmits += 1;
                    if depth >= MAX_RESUBMIT_DEPTH || self.resubmits > MAX_RESUBMITS {
                        self.fail(DropReason::ResubmitDepth);
                        return;
                    }
                    let lookup_in_port = (*in_port != port::IN_PORT).then_some(*in_port);
                    self.run_tables(to.unwrap_or(table), lookup_in_port, depth + 1);
                }
                Action::Note(_) => {}
                Action::Ct(ct) => self.conntrack(ct),
                // Validation admits `nat` and ct_label writes only nested
                // in `ct()`.
                Action::Nat(_) => self.fail(DropReason::Unsupported("nat outside ct()")),
                Action::SetNwTtl(ttl) => {
                    if self.is_ip() {
                        self.write(Field::IpTtl, u64::from(*ttl));
                    }
                }
                Action::DecNwTtl => self.dec_ttl(),
                Action::PushVlan(_) => self.push_vlan(),
                Action::SetVlanVid(vid) => {
                    self.set_vlan_tci(0x1fff, u64::from(*vid) | VLAN_PRESENT)
                }
                Action::SetVlanPcp(pcp) => {
                    self.set_vlan_tci(0xe000 | VLAN_PRESENT, u64::from(*pcp) << 13 | VLAN_PRESENT)
                }
                Action::PopVlan => {
                    self.unwildcard(Field::VlanTci, 0, 16);
                    self.key.set(Field::VlanTci, 0);
                }
                Action::SetCtLabel { .. } => {
                    self.fail(DropReason::Unsupported("ct_label write outside ct()"))
                }
                Action::PushMpls(ethertype) => self.push_mpls(*ethertype),
                Action::PopMpls(ethertype) => self.pop_mpls(*ethertype),
                Action::SetMplsTtl(ttl) => self.set_mpls_ttl(*ttl),
                Action::DecMplsTtl => self.dec_mpls_ttl(),
                Action::CopyTtlOut => self.copy_ttl(true),
                Action::CopyTtlIn => self.copy_ttl(false),
                Action::PushPbb(_) => self.push_pbb(),
                Action::PopPbb => self.pop_pbb(),
            }
        }
    }

    /// Writes a whole field. The packet's own value of a written field
    /// becomes significant: whether `commit` emits a rewrite depends on
    /// it (a packet that already holds the value needs none).
    fn write(&mut self, field: Field, value: u64) {
        self.unwildcard(field, 0, field.bits());
        self.key.set(field, value);
    }

    /// Reads a sub-field; the bits read become significant for the flow.
    fn read(&mut self, sf: &SubField) -> u64 {
        self.unwildcard(sf.field, sf.ofs, sf.nbits);
        self.key.get_bits(sf.field, sf.ofs, sf.nbits)
    }

    fn push(&mut self, a: DpAction) {
        if !self.out.push(a) {
            self.fail(DropReason::TooManyActions);
        }
    }

    fn output(&mut self, p: u32) {
        self.unwildcard(Field::InPort, 0, 32);
        let in_port = self.key.get(Field::InPort) as u32;
        let target = match p {
            port::IN_PORT => in_port,
            port::ALL | port::FLOOD => {
                self.commit();
                self.push(DpAction::Flood);
                return;
            }
            // The bridge's own port (OVSDB mode makes one); a bridge
            // without it drops the packet as a bad output.
            port::LOCAL if in_port != port::LOCAL => port::LOCAL,
            port::LOCAL => return,
            port::CONTROLLER => return self.controller(u16::MAX),
            port::NORMAL => {
                self.unwildcard(Field::EthSrc, 0, 48);
                self.unwildcard(Field::EthDst, 0, 48);
                self.commit();
                return self.push(DpAction::Normal);
            }
            port::TABLE if self.packet_out => {
                self.packet_out = false;
                return self.run_tables(0, None, 0);
            }
            port::TABLE => return self.note = Some(DropReason::BadOutputPort),
            p if p > port::MAX => return self.note = Some(DropReason::BadOutputPort),
            // OpenFlow never sends a packet back where it came from unless
            // asked to with IN_PORT.
            p if p == in_port => return,
            p => p,
        };
        self.commit();
        // The tunnel metadata travels in the action.
        self.unwildcard(Field::TunId, 0, 64);
        self.unwildcard(Field::TunDst, 0, 32);
        self.push(DpAction::Output {
            port: target,
            tun_id: self.key.get(Field::TunId),
            tun_dst: self.key.get(Field::TunDst) as u32,
        });
    }

    /// `output:CONTROLLER`, with the reason OVS gives it: where it ran
    /// (packet-out, group bucket, action set, else plain action), and a
    /// plain action of a table-miss flow as a table miss.
    fn controller(&mut self, max_len: u16) {
        let reason = if self.in_packet_out {
            packet_in_reason::PACKET_OUT
        } else if self.in_group > 0 {
            packet_in_reason::GROUP
        } else if self.in_action_set {
            packet_in_reason::ACTION_SET
        } else if self.current.table_miss {
            packet_in_reason::NO_MATCH
        } else {
            packet_in_reason::ACTION
        };
        self.packet_in(max_len, reason);
    }

    fn packet_in(&mut self, max_len: u16, reason: u8) {
        self.unwildcard(Field::InPort, 0, 32);
        self.commit();
        let c = self.current;
        self.push(DpAction::Controller {
            max_len,
            reason,
            table_id: c.table_id,
            cookie: c.cookie,
        });
    }

    fn execute_action_set(&mut self) {
        let n = self.action_set.n_sets;
        for i in 0..n {
            if let Some(&(field, value)) = self.action_set.sets.get(i) {
                self.write(field, value);
            }
        }
        let table = self.last_table;
        self.tracer.action_set();
        self.in_action_set = true;
        if let Some(g) = self.action_set.group {
            self.group(g, table, 0);
        } else if let Some(p) = self.action_set.output {
            self.output(p);
        }
        self.in_action_set = false;
    }
}

/// The translation's entry points on a replica (the walk above; the
/// replica itself is `pipeline.rs`).
impl Pipeline {
    /// Runs the pipeline for one packet, from table 0, or for a packet
    /// recirculated after conntrack from its [`FlowKey::recirc_table`];
    /// counts matched rules (packets += 1, bytes += packet_len) with
    /// Relaxed atomics; resets `out` first. Never allocates.
    pub fn xlate(&self, key: &FlowKey, packet_len: u32, out: &mut Xlate) {
        out.reset();
        crate::xlate::run(self, key, packet_len, out, crate::trace::NoTrace);
    }

    /// Translates a PACKET_OUT: `actions` run on the packet as if they
    /// were a flow's; `output:TABLE` among them sends it through the
    /// tables from table 0 (once). Counts like [`Pipeline::xlate`].
    pub fn xlate_actions(
        &self,
        key: &FlowKey,
        packet_len: u32,
        actions: &[crate::action::Action],
        out: &mut Xlate,
    ) {
        out.reset();
        crate::xlate::run_actions(self, key, packet_len, actions, out, crate::trace::NoTrace);
    }

    /// [`Pipeline::xlate`] reporting every step to `sink` (for `xbr
    /// trace`), without touching any counter. Same result in `out`.
    pub fn xlate_traced(
        &self,
        key: &FlowKey,
        packet_len: u32,
        out: &mut Xlate,
        sink: &mut dyn crate::trace::TraceSink,
    ) {
        out.reset();
        crate::xlate::run(self, key, packet_len, out, crate::trace::Traced(sink));
    }
}

mod action_set;
use action_set::ActionSet;
mod ct;
mod group;
mod headers;
mod mpls;
mod pbb;
