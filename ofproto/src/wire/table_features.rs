//! The OFPMP_TABLE_FEATURES reply: what every one of the 254 tables
//! supports. ovs-ofctl fetches it before every table-aware command and
//! rejects entries that lack any of the eight required properties.

use super::action::{
    OFPAT_COPY_TTL_IN, OFPAT_COPY_TTL_OUT, OFPAT_DEC_MPLS_TTL, OFPAT_DEC_NW_TTL, OFPAT_GROUP,
    OFPAT_OUTPUT, OFPAT_POP_MPLS, OFPAT_POP_PBB, OFPAT_POP_VLAN, OFPAT_PUSH_MPLS, OFPAT_PUSH_PBB,
    OFPAT_PUSH_VLAN, OFPAT_SET_FIELD, OFPAT_SET_MPLS_TTL, OFPAT_SET_NW_TTL,
};
use super::instruction::{
    OFPIT_APPLY_ACTIONS, OFPIT_CLEAR_ACTIONS, OFPIT_GOTO_TABLE, OFPIT_WRITE_ACTIONS,
    OFPIT_WRITE_METADATA,
};
use super::oxm::HEADERS;
use super::Put;
use flowtable::action::N_TABLES;

const TFPT_INSTRUCTIONS: u16 = 0;
const TFPT_NEXT_TABLES: u16 = 2;
const TFPT_WRITE_ACTIONS: u16 = 4;
const TFPT_APPLY_ACTIONS: u16 = 6;
const TFPT_MATCH: u16 = 8;
const TFPT_WILDCARDS: u16 = 10;
const TFPT_WRITE_SETFIELD: u16 = 12;
const TFPT_APPLY_SETFIELD: u16 = 14;

/// Advertised flow capacity per table (a soft number: the classifier has
/// no hard limit).
pub const MAX_ENTRIES: u32 = 1_000_000;

fn property(out: &mut Vec<u8>, ty: u16, content: &[u8]) {
    let start = out.len();
    out.put_u16(ty);
    out.put_u16(u16::try_from(4 + content.len()).unwrap_or(u16::MAX));
    out.extend_from_slice(content);
    out.pad8_from(start);
}

fn ids(list: &[u16]) -> Vec<u8> {
    let mut v = Vec::new();
    for t in list {
        v.put_u16(*t);
        v.put_u16(4);
    }
    v
}

/// The properties shared by every table (all but NEXT_TABLES).
struct Common {
    instructions: Vec<u8>,
    /// What write_actions takes (see `flowtable`'s validation).
    write_actions: Vec<u8>,
    apply_actions: Vec<u8>,
    matches: Vec<u8>,
    wildcards: Vec<u8>,
    setfields: Vec<u8>,
}

fn common() -> Common {
    let mut matches = Vec::new();
    let mut wildcards = Vec::new();
    let mut setfields = Vec::new();
    let mut seen = Vec::new();
    for h in HEADERS.iter() {
        let hdr = h.header(false);
        if seen.contains(&hdr) {
            continue;
        }
        seen.push(hdr);
        if !h.in_match() {
            continue;
        }
        matches.put_u32(h.header(h.maskable));
        wildcards.put_u32(hdr);
        if super::oxm::set_field_header(h.target).is_some_and(|s| s.header(false) == hdr)
            && h.target.is_writable()
        {
            setfields.put_u32(hdr);
        }
    }
    Common {
        instructions: ids(&[
            OFPIT_GOTO_TABLE,
            OFPIT_WRITE_METADATA,
            OFPIT_WRITE_ACTIONS,
            OFPIT_APPLY_ACTIONS,
            OFPIT_CLEAR_ACTIONS,
        ]),
        write_actions: ids(&[OFPAT_OUTPUT, OFPAT_GROUP, OFPAT_SET_FIELD]),
        apply_actions: ids(&[
            OFPAT_OUTPUT,
            OFPAT_COPY_TTL_OUT,
            OFPAT_COPY_TTL_IN,
            OFPAT_SET_MPLS_TTL,
            OFPAT_DEC_MPLS_TTL,
            OFPAT_PUSH_VLAN,
            OFPAT_POP_VLAN,
            OFPAT_PUSH_MPLS,
            OFPAT_POP_MPLS,
            OFPAT_GROUP,
            OFPAT_SET_NW_TTL,
            OFPAT_DEC_NW_TTL,
            OFPAT_SET_FIELD,
            OFPAT_PUSH_PBB,
            OFPAT_POP_PBB,
        ]),
        matches,
        wildcards,
        setfields,
    }
}

/// One `ofp_table_features` entry per table, 0..=253.
pub fn entries() -> Vec<Vec<u8>> {
    let c = common();
    (0..N_TABLES)
        .map(|t| {
            let mut out = Vec::with_capacity(1536);
            out.put_u16(0);
            out.put_u8(t);
            out.put_zeros(5);
            out.put_zeros(32); // no table names
            out.put_u64(u64::MAX); // metadata_match
            out.put_u64(u64::MAX); // metadata_write
            out.put_u32(0); // config
            out.put_u32(MAX_ENTRIES);
            property(&mut out, TFPT_INSTRUCTIONS, &c.instructions);
            let next: Vec<u8> = (t.saturating_add(1)..N_TABLES).collect();
            property(&mut out, TFPT_NEXT_TABLES, &next);
            property(&mut out, TFPT_WRITE_ACTIONS, &c.write_actions);
            property(&mut out, TFPT_APPLY_ACTIONS, &c.apply_actions);
            property(&mut out, TFPT_MATCH, &c.matches);
            property(&mut out, TFPT_WILDCARDS, &c.wildcards);
            property(&mut out, TFPT_WRITE_SETFIELD, &c.setfields);
            property(&mut out, TFPT_APPLY_SETFIELD, &c.setfields);
            let len = super::len16(&out, 0);
            out.patch_u16(0, len);
            out
        })
        .collect()
}
