//! Actions and instructions, kept in the form they arrived in.
//!
//! The agent parses `dump-flows` text, so an action must be dumped in the
//! encoding it was sent in: an `NXAST_REG_LOAD` stays a `RegLoad` (never a
//! `SetField`), `NXAST_NOTE` keeps its bytes, `NXAST_RESUBMIT_TABLE` keeps
//! table 255 for "current table". The wire codec (ofproto) maps each variant
//! to exactly one encoding.

use crate::key::Field;

/// OpenFlow reserved port numbers (OF1.3 `ofp_port_no`).
pub mod port {
    pub const MAX: u32 = 0xffff_ff00;
    pub const IN_PORT: u32 = 0xffff_fff8;
    pub const TABLE: u32 = 0xffff_fff9;
    pub const NORMAL: u32 = 0xffff_fffa;
    pub const FLOOD: u32 = 0xffff_fffb;
    pub const ALL: u32 = 0xffff_fffc;
    pub const CONTROLLER: u32 = 0xffff_fffd;
    pub const LOCAL: u32 = 0xffff_fffe;
    pub const ANY: u32 = 0xffff_ffff;
}

/// OpenFlow group numbers.
pub mod group {
    pub const MAX: u32 = 0xffff_ff00;
    pub const ALL: u32 = 0xffff_fffc;
    pub const ANY: u32 = 0xffff_ffff;
}

/// Table ids.
pub const N_TABLES: u8 = 254;
pub const TABLE_ALL: u8 = 0xff;

/// A bit range of a field, as NXM actions address them (`NXM_NX_REG0[0..15]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SubField {
    pub field: Field,
    pub ofs: u32,
    pub nbits: u32,
    /// The field the operand was written or decoded as, when it is not
    /// its key field's own (`udp_src` and `sctp_src` are the key's
    /// `TpSrc`, as `tcp_src` is): that entry's name in the field
    /// registry, so the operand prints and encodes with the header it
    /// came with (`NXM_OF_UDP_SRC[]`), as OVS keeps it. `None`: the key
    /// field's own name (`field::nxm_name`).
    pub named: Option<&'static str>,
}

impl SubField {
    /// The whole field (`NXM_NX_REG0[]`).
    pub fn whole(field: Field) -> Self {
        SubField {
            field,
            ofs: 0,
            nbits: field.bits(),
            named: None,
        }
    }

    /// Whether the range lies inside the field.
    pub fn is_valid(&self) -> bool {
        self.nbits > 0
            && self
                .ofs
                .checked_add(self.nbits)
                .is_some_and(|end| end <= self.field.bits())
    }

    /// Bits `ofs..ofs+nbits` of the 128-bit ct_label, as a range of one of
    /// its halves (see `key/`). `None` when the range is empty, leaves
    /// the label, or crosses from bit 63 to bit 64: no single half holds
    /// it, and xbr refuses such operands rather than split an action.
    pub fn ct_label(ofs: u32, nbits: u32) -> Option<SubField> {
        Self::wide(Field::CtLabelLow, ofs, nbits)
    }

    /// [`SubField::ct_label`] for any 128-bit field, named by its low
    /// half (the IPv6 addresses and nd_target as well).
    pub fn wide(low: Field, ofs: u32, nbits: u32) -> Option<SubField> {
        let end = ofs.checked_add(nbits)?;
        if nbits == 0 || end > CT_LABEL_BITS {
            return None;
        }
        let (field, base) = if end <= 64 {
            (low, 0)
        } else if ofs >= 64 {
            (low.high_half()?, 64)
        } else {
            return None;
        };
        Some(SubField {
            field,
            ofs: ofs - base,
            nbits,
            named: None,
        })
    }

    /// The first bit of the range in the coordinates of the field as
    /// OpenFlow names it: the whole 128 bits for a half (ct_label, IPv6
    /// addresses).
    pub fn wire_ofs(&self) -> u32 {
        self.ofs
            + match self.field.high_half() {
                None if self.field.is_half() => 64,
                _ => 0,
            }
    }
}

/// Width of ct_label (NXM_NX_CT_LABEL).
pub const CT_LABEL_BITS: u32 = 128;

/// Conntrack zone source of a `ct()` action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CtZone {
    Immediate(u16),
    Field(SubField),
}

/// NX_CT_F_* flags of `ct()`.
pub mod ct_flags {
    pub const COMMIT: u16 = 1 << 0;
    pub const FORCE: u16 = 1 << 1;
}

/// `ct(...)`: NXAST_CT.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CtAction {
    pub flags: u16,
    pub zone: CtZone,
    /// Table to recirculate to; `None` (255 on the wire) continues with the
    /// next action.
    pub recirc_table: Option<u8>,
    pub alg: u16,
    /// Nested actions: `Nat`, `SetField`/`RegLoad` of ct_mark, and
    /// `SetCtLabel`/`RegLoad` of ct_label.
    pub actions: Vec<Action>,
}

/// NX_NAT_F_* flags of `nat(...)`.
pub mod nat_flags {
    pub const SRC: u16 = 1 << 0;
    pub const DST: u16 = 1 << 1;
    pub const PERSISTENT: u16 = 1 << 2;
    pub const PROTO_HASH: u16 = 1 << 3;
    pub const PROTO_RANDOM: u16 = 1 << 4;
}

/// `nat(...)`: NXAST_NAT, nested in `ct()`. Absent ranges mean "apply the
/// connection's existing binding" (un-NAT of replies).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct NatAction {
    pub flags: u16,
    pub ipv4_min: Option<u32>,
    pub ipv4_max: Option<u32>,
    /// An IPv6 range instead (never both families).
    pub ipv6_min: Option<u128>,
    pub ipv6_max: Option<u128>,
    pub proto_min: Option<u16>,
    pub proto_max: Option<u16>,
}

/// A bucket of a group.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Bucket {
    /// The bucket's identifier (OpenFlow 1.5; at most
    /// `flow_mod::BUCKET_ID_MAX`). Buckets that came without one (OpenFlow
    /// 1.1-1.4, text without `bucket_id:`) are numbered by position from
    /// 0, as OVS numbers them, so a 1.5 peer sees the ids OVS would show.
    pub bucket_id: u32,
    pub weight: u16,
    pub watch_port: u32,
    pub watch_group: u32,
    pub actions: Vec<Action>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// OFPAT_OUTPUT. `max_len` matters only for CONTROLLER.
    Output { port: u32, max_len: u16 },
    /// OFPAT_GROUP.
    Group(u32),
    /// OFPAT_SET_FIELD of a whole field.
    SetField { field: Field, value: u64 },
    /// OFPAT_SET_FIELD of a whole 128-bit packet field (ipv6_src,
    /// ipv6_dst, nd_target), named by its low half (see
    /// `Field::high_half`): wider than `SetField`'s value.
    SetField128 { field: Field, value: u128 },
    /// OFPAT_SET_FIELD of the whole 128-bit ct_label (wider than
    /// `SetField`'s value); only valid nested in `Ct`.
    SetCtLabel { value: u128 },
    /// NXAST_REG_LOAD: write `value` into a bit range.
    RegLoad { dst: SubField, value: u64 },
    /// NXAST_REG_MOVE: copy `src` bits to `dst` (same `nbits`).
    RegMove { src: SubField, dst: SubField },
    /// NXAST_OUTPUT_REG: output to the port number held in `src`.
    OutputReg { src: SubField, max_len: u16 },
    /// NXAST_RESUBMIT (table None) / NXAST_RESUBMIT_TABLE. `in_port` of
    /// `port::IN_PORT` keeps the packet's in_port; `table` None = current.
    Resubmit { in_port: u32, table: Option<u8> },
    /// NXAST_NOTE: opaque bytes, kept as sent (including zero padding).
    Note(Vec<u8>),
    /// NXAST_CT.
    Ct(CtAction),
    /// NXAST_NAT (only valid nested in `Ct`).
    Nat(NatAction),
    /// OFPAT_SET_NW_TTL (`mod_nw_ttl:N`): the IPv4 TTL or IPv6 hop limit.
    SetNwTtl(u8),
    /// OFPAT_PUSH_VLAN (`push_vlan:0x8100`): a new outermost 802.1Q tag,
    /// VID and PCP zero (xbr's flow key holds one tag, so a packet that has
    /// one already is not pushed onto: see the translation).
    PushVlan(u16),
    /// OFPAT_POP_VLAN (`pop_vlan`): removes the outermost tag, if any.
    PopVlan,
    /// OFPAT_SET_FIELD of OXM_OF_VLAN_VID (`set_field:4196->vlan_vid`):
    /// the VID, with OFPVID_PRESENT (0x1000); PCP kept. As in OVS, a packet
    /// without a tag gets one.
    SetVlanVid(u16),
    /// OFPAT_SET_FIELD of OXM_OF_VLAN_PCP (`set_field:3->vlan_pcp`); VID
    /// kept, a packet without a tag gets one with VID 0 (as in OVS).
    SetVlanPcp(u8),
    /// OFPAT_DEC_NW_TTL (`dec_ttl`): decrements the IPv4 TTL or IPv6 hop
    /// limit; a packet
    /// whose TTL would reach zero goes no further (a packet-in with reason
    /// INVALID_TTL for controllers that asked for it), as in OVS.
    DecNwTtl,
    /// OFPAT_PUSH_MPLS (`push_mpls:0x8847`): a new outermost MPLS label
    /// stack entry behind the Ethernet header and any VLAN tag, with this
    /// ethertype (0x8847 or 0x8848). Its label, TC and TTL are the old top
    /// entry's on an MPLS packet; otherwise label and TC are 0 and the TTL
    /// is the IP TTL, or 0 for a packet that is not IP (OF1.3's defaults
    /// for a pushed tag, which os-ken checks; OVS takes TTL 64, label 2 for
    /// IPv6 and the TC from the DSCP instead).
    PushMpls(u16),
    /// OFPAT_POP_MPLS (`pop_mpls:0x0800`): removes the outermost label
    /// stack entry; the ethertype names what follows it.
    PopMpls(u16),
    /// OFPAT_SET_MPLS_TTL (`set_mpls_ttl(64)`).
    SetMplsTtl(u8),
    /// OFPAT_DEC_MPLS_TTL (`dec_mpls_ttl`): like `dec_ttl`, a TTL that
    /// would reach zero ends the packet's actions with a packet-in of
    /// reason INVALID_TTL for controllers that asked for it.
    DecMplsTtl,
    /// OFPAT_COPY_TTL_OUT (`copy_ttl_out`): the TTL of the header behind
    /// the outermost label (the next label, or the IP header behind the
    /// bottom one) into the outermost label. OVS has no such action.
    CopyTtlOut,
    /// OFPAT_COPY_TTL_IN (`copy_ttl_in`): the outermost label's TTL into
    /// the header behind it.
    CopyTtlIn,
    /// OFPAT_PUSH_PBB (`push_pbb:0x88e7`): the frame becomes the customer
    /// frame behind a new Ethernet header (the same addresses) and an
    /// I-TAG with the packet's I-SID if it is PBB already, else 0. OVS
    /// has no PBB.
    PushPbb(u16),
    /// OFPAT_POP_PBB (`pop_pbb`): the customer frame behind the I-TAG is
    /// the packet again.
    PopPbb,
}

/// A flow's instructions in OpenFlow's fixed execution order. An all-`None`
/// value is the empty instruction set: drop.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Instructions {
    pub meter: Option<u32>,
    pub apply_actions: Option<Vec<Action>>,
    pub clear_actions: bool,
    pub write_actions: Option<Vec<Action>>,
    /// (metadata, mask)
    pub write_metadata: Option<(u64, u64)>,
    pub goto_table: Option<u8>,
}

impl Instructions {
    /// `actions=output:PORT` style instructions.
    pub fn apply(actions: Vec<Action>) -> Self {
        Instructions {
            apply_actions: Some(actions),
            ..Default::default()
        }
    }

    /// Every action in apply and write lists, nested `ct()` actions included.
    pub fn actions(&self) -> impl Iterator<Item = &Action> {
        self.apply_actions
            .iter()
            .flatten()
            .chain(self.write_actions.iter().flatten())
    }

    /// Whether any action outputs to `port` (for `out_port` filters).
    pub fn outputs_to(&self, port: u32) -> bool {
        self.actions().any(|a| match a {
            Action::Output { port: p, .. } => *p == port,
            Action::OutputReg { .. } => false,
            _ => false,
        })
    }

    /// Whether any action sends to `group` (for `out_group` filters and for
    /// deleting flows with their group).
    pub fn uses_group(&self, group: u32) -> bool {
        self.actions()
            .any(|a| matches!(a, Action::Group(g) if *g == group))
    }
}
