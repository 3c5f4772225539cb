//! What translating one packet through the pipeline produces: the
//! datapath actions ([`DpAction`]: header rewrites, outputs, conntrack,
//! meters, ...) in order, in a fixed-capacity [`Xlate`], with the reason
//! when the packet is dropped, and the limits the walk keeps.
//!
//! These are the types the translation ([`crate::xlate`]) writes and the
//! datapath, the caches and the tracer read; they depend on no part of
//! the pipeline itself.

use crate::key::{Field, FlowKey};

/// Capacity of an [`Xlate`]'s action list.
pub const MAX_DP_ACTIONS: usize = 32;
/// Nesting limit of resubmits (OVS's limit).
pub const MAX_RESUBMIT_DEPTH: u32 = 64;
/// Total resubmits one packet may perform: bounds the work of rules that
/// resubmit several times each (OVS has the same guard).
pub const MAX_RESUBMITS: u32 = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DpAction {
    /// A packet header field was rewritten (eth/vlan/ip/tp fields only,
    /// never metadata). Overlaid fields are named by the packet's type
    /// (`ArpSpa` for ARP, `IcmpType` for ICMP).
    SetField { field: Field, value: u64 },
    /// Send the packet (with all SetFields so far applied) to a port.
    /// tun_* are the values at that point.
    Output {
        port: u32,
        tun_id: u64,
        tun_dst: u32,
    },
    /// Output to all ports except the input port (OFPP_ALL / FLOOD).
    Flood,
    /// OFPP_NORMAL: the datapath's own MAC-learning forwarding.
    Normal,
    /// Send the packet (as rewritten so far) to the controllers
    /// (OFPP_CONTROLLER): a PACKET_IN with these fields.
    Controller {
        /// Bytes of the packet to include (OFPCML_NO_BUFFER: all).
        max_len: u16,
        /// OFPR_NO_MATCH for a table-miss flow, else OFPR_ACTION.
        reason: u8,
        table_id: u8,
        /// The cookie of the flow whose action this is.
        cookie: u64,
    },
    /// Insert an 802.1Q tag (TPID 0x8100) with `tci` (VID and PCP; the
    /// key's CFI-as-present bit is not written) after the Ethernet
    /// addresses.
    PushVlan { tci: u16 },
    /// Remove the outermost VLAN tag.
    PopVlan,
    /// Insert the MPLS label stack entry `lse` (label, TC, BOS, TTL as on
    /// the wire) in front of the packet's label stack or L3 header, behind
    /// the Ethernet header and any VLAN tag, and set the ethertype there
    /// to `ethertype`.
    PushMpls { ethertype: u16, lse: u32 },
    /// Remove the outermost MPLS label stack entry; what follows it is
    /// `ethertype`.
    PopMpls { ethertype: u16 },
    /// `copy_ttl_out`/`copy_ttl_in` on a label the packet arrived with:
    /// between the outermost label's TTL and the one behind it (the next
    /// label's, or the IPv4 TTL or IPv6 hop limit behind the bottom
    /// label), which the key does not hold. Nothing for another packet.
    CopyTtl { out: bool },
    /// Put the frame behind a new Ethernet header with its addresses and
    /// an I-TAG (ethertype 0x88e7) with I-SID `isid`, priority 0.
    PushPbb { isid: u32 },
    /// Remove everything up to and including the I-TAG: the customer
    /// frame behind it is the packet.
    PopPbb,
    /// Parse the packet (as rewritten so far) again and send it through
    /// the pipeline from the table in [`Xlate::recirc`]'s key, whose
    /// header fields the datapath replaces with the packet's: how a
    /// `goto_table` after popping a received MPLS label reaches the
    /// headers behind it (OVS recirculates there too). Always the last
    /// action; it consumes the packet like an output.
    Recirc,
    /// Run the packet (as rewritten so far) through meter `id`'s bands:
    /// a DROP band over its rate drops it, ending its actions; a
    /// DSCP_REMARK band raises its drop precedence. The meter's state
    /// lives in the datapath, so a translation with a meter may be cached
    /// as long as the datapath runs the meter for each packet.
    Meter(u32),
    /// `ct(...)`: send the packet (with the SetFields so far applied)
    /// through the connection tracker. Without `table` the packet goes on
    /// with the next action, NAT applied in place; with `table` the
    /// tracked packet is a fork that re-enters the pipeline at that table
    /// with the key in [`Xlate::recirc`] (metadata as the actions left it)
    /// plus the new ct_state/ct_zone/ct_mark/ct_label, while the original instance
    /// continues with the next action, untracked (OVS semantics).
    Ct {
        zone: u16,
        commit: bool,
        /// NX_CT_F_FORCE: a connection tracked in the reply direction is
        /// ended first, and this packet starts a new one.
        force: bool,
        table: Option<u8>,
        nat: Option<NatSpec>,
        /// ct_mark write from `exec(...)`: (value, mask); applies only with
        /// `commit`.
        mark: Option<(u32, u32)>,
        /// ct_label write from `exec(...)`: (value, mask) over the 128-bit
        /// label; applies only with `commit`.
        label: Option<(u128, u128)>,
    },
}

/// `nat(...)` nested in `ct()`, flattened to a fixed-size value. Neither
/// [`NatSpec::SRC`] nor [`NatSpec::DST`] in `flags` is the bare `nat`:
/// apply the connection's existing translation (un-NAT of replies).
///
/// The address range is its first address and a span, in words, so that
/// an IPv6 range fits without growing [`DpAction`] (a translation cache
/// slot holds eight of them): 28 bytes either family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct NatSpec {
    /// NX_NAT_F_* bits (see [`crate::action::nat_flags`]).
    pub flags: u16,
    /// Port range; `port_min == 0` means no range: keep the port if it is
    /// free, else pick one.
    pub port_min: u16,
    pub port_max: u16,
    /// The address range is IPv6's (else IPv4's).
    pub v6: bool,
    /// The range's first address, most significant word first (an IPv4
    /// address in the last word); all zero means "keep the address" (only
    /// a port range was given).
    pub addr_min: [u32; 4],
    /// How many addresses follow the first; an IPv6 range of more than
    /// 2^32 addresses uses its first 2^32.
    pub addr_span: u32,
}

impl NatSpec {
    pub const SRC: u16 = crate::action::nat_flags::SRC;
    pub const DST: u16 = crate::action::nat_flags::DST;

    /// Source NAT with a range (`nat(src=...)`).
    pub fn is_snat(&self) -> bool {
        self.flags & Self::SRC != 0
    }

    /// Destination NAT with a range (`nat(dst=...)`).
    pub fn is_dnat(&self) -> bool {
        self.flags & Self::DST != 0
    }

    /// An IPv4 range `ip_min..=ip_max` (0 for none) and ports.
    pub const fn v4(flags: u16, ip_min: u32, ip_max: u32, port_min: u16, port_max: u16) -> Self {
        NatSpec {
            flags,
            port_min,
            port_max,
            v6: false,
            addr_min: [0, 0, 0, ip_min],
            addr_span: ip_max.saturating_sub(ip_min),
        }
    }

    /// The first address as a number (an IPv4 address in the low 32
    /// bits); 0 for none.
    pub fn first_addr(&self) -> u128 {
        self.addr_min
            .iter()
            .fold(0u128, |acc, w| acc << 32 | u128::from(*w))
    }

    /// The last address of the range.
    pub fn last_addr(&self) -> u128 {
        self.first_addr() + u128::from(self.addr_span)
    }

    /// Converts the flow-table form; ranges with only a minimum become
    /// single values.
    pub fn from_action(n: &crate::action::NatAction) -> Self {
        let port_min = n.proto_min.unwrap_or(0);
        let (v6, min, max) = match (n.ipv6_min, n.ipv4_min) {
            (Some(lo), _) => (true, lo, n.ipv6_max.unwrap_or(lo).max(lo)),
            (None, lo) => {
                let lo = lo.unwrap_or(0);
                (
                    false,
                    u128::from(lo),
                    u128::from(n.ipv4_max.unwrap_or(lo).max(lo)),
                )
            }
        };
        let words = |a: u128| {
            [
                (a >> 96) as u32,
                (a >> 64) as u32,
                (a >> 32) as u32,
                a as u32,
            ]
        };
        NatSpec {
            flags: n.flags,
            port_min,
            port_max: n.proto_max.unwrap_or(port_min).max(port_min),
            v6,
            addr_min: words(min),
            addr_span: u32::try_from(max - min).unwrap_or(u32::MAX),
        }
    }
}

/// OFPR_* packet-in reasons.
pub mod packet_in_reason {
    pub const NO_MATCH: u8 = 0;
    pub const ACTION: u8 = 1;
    pub const INVALID_TTL: u8 = 2;
    /// OpenFlow 1.4's refinements of ACTION: output to the controller
    /// from the action set, from a group bucket, or while running a
    /// PACKET_OUT's actions. Sent as ACTION to earlier versions.
    pub const ACTION_SET: u8 = 3;
    pub const GROUP: u8 = 4;
    pub const PACKET_OUT: u8 = 5;

    /// How a connection speaking OpenFlow 1.3 or earlier hears `reason`.
    pub const fn before_14(reason: u8) -> u8 {
        match reason {
            ACTION_SET | GROUP | PACKET_OUT => ACTION,
            r => r,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    TableMiss,
    /// Empty instruction set / no output.
    ExplicitDrop,
    ResubmitDepth,
    TooManyActions,
    /// e.g. "ct", "controller", "local".
    Unsupported(&'static str),
    BadOutputPort,
    /// `dec_ttl` of a packet with TTL 0 or 1.
    InvalidTtl,
}

/// The result of translating one packet: fixed capacity, reused across
/// packets, never allocates.
#[derive(Clone, Debug)]
pub struct Xlate {
    pub(crate) actions: [DpAction; MAX_DP_ACTIONS],
    pub(crate) n_actions: usize,
    pub(crate) drop_reason: Option<DropReason>,
    pub(crate) wildcards: FlowKey,
    /// The key a `ct(table=N)` fork re-enters the pipeline with (its
    /// recirculation table set, see [`FlowKey::recirc_table`]); at most one
    /// per translation.
    pub(crate) recirc: Option<FlowKey>,
}

impl Default for Xlate {
    fn default() -> Self {
        Self::new()
    }
}

impl Xlate {
    pub fn new() -> Self {
        Xlate {
            actions: [DpAction::Flood; MAX_DP_ACTIONS],
            n_actions: 0,
            drop_reason: None,
            wildcards: FlowKey::zero(),
            recirc: None,
        }
    }

    /// For a translation with a `DpAction::Ct` that has a table or a
    /// `DpAction::Recirc`: the key its tracked fork (or the packet)
    /// continues with (registers, metadata and tunnel
    /// fields as the actions left them). The datapath replaces the header
    /// fields with the packet's after conntrack (NAT may change them) and
    /// sets ct_state, ct_zone, ct_mark and ct_label.
    pub fn recirc(&self) -> Option<&FlowKey> {
        self.recirc.as_ref()
    }

    pub fn actions(&self) -> &[DpAction] {
        self.actions.get(..self.n_actions).unwrap_or(&[])
    }

    /// `Some` when the packet is dropped with no outputs.
    pub fn drop_reason(&self) -> Option<DropReason> {
        self.drop_reason
    }

    /// The key bits the translation examined (the megaflow cache's mask).
    pub fn wildcards(&self) -> &FlowKey {
        &self.wildcards
    }

    /// Replaces the result with a lone NORMAL (a switch failing open
    /// forwards every packet this way, whatever its flows say).
    pub fn set_normal(&mut self) {
        self.reset();
        self.push(DpAction::Normal);
    }

    pub(crate) fn reset(&mut self) {
        self.n_actions = 0;
        self.drop_reason = None;
        self.wildcards = FlowKey::zero();
        self.recirc = None;
    }

    /// Appends an action; `false` when full.
    pub(crate) fn push(&mut self, a: DpAction) -> bool {
        match self.actions.get_mut(self.n_actions) {
            Some(slot) => {
                *slot = a;
                self.n_actions += 1;
                true
            }
            None => false,
        }
    }
}
