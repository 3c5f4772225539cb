//! New-connection templates: translations the XDP program applies to UDP
//! frames without a connection, creating the connection as it forwards
//! them (the design, and why it is exact, is in
//! `conntrack/kernel_new.rs`).
//!
//! A template is installed by the packet thread that owns the ingress
//! port, after a frame's translation showed its shape (see
//! `engine/xdp_template.rs`), at most [`SLOTS`] per ingress device; the
//! kernel map (`ct_new`) is keyed by device and slot. Each carries the
//! generation it was installed in (a PORT_MOD, a flush or a tunnel change
//! retires it as it retires entries) and counts its hits as entries do;
//! the sweep credits them to the flows and ports of its translation. A
//! flow, group or port change removes every template before the change
//! is acknowledged (they are few, and the next new connection installs
//! its template again), crediting their last hits.

use super::entry::{mac_bytes, FcKey, KEY_SIZE};
use super::maps::{CT_SLOTS, CT_TEMPLATE_SIZE};
use super::{Credit, XdpCache};
use flowtable::cache::Attribution;
use flowtable::key::{Field, FlowKey};
use flowtable::matching::IP_PROTO_UDP;
use libbpf_rs::{MapCore, MapFlags};
use std::time::{Duration, Instant};

/// Templates an ingress device may have.
pub const SLOTS: u32 = CT_SLOTS;

/// Least time between two attempts to install a template for one
/// ingress port: a translation that cannot become one (its mask, its
/// actions) is then examined 20 times a second at most, not per packet.
pub const ATTEMPT_INTERVAL: Duration = Duration::from_millis(50);

/// What a packet thread asks to install.
pub struct NewConnTemplate {
    /// The OpenFlow port and device the frames come in on.
    pub in_port: u32,
    pub ifindex: u32,
    /// Which bits of the XDP key the translation examined, and the
    /// frame's key it was made from.
    pub mask: FcKey,
    pub key: FcKey,
    /// The zone of both `ct()` actions.
    pub zone: u16,
    pub out_port: u32,
    pub out_ifindex: u32,
    pub set_dst: Option<[u8; 6]>,
    pub set_src: Option<[u8; 6]>,
    /// The flows and tables of both passes.
    pub attribution: Attribution,
}

/// An installed template.
pub(super) struct Template {
    slot: u32,
    gen: u64,
    t: NewConnTemplate,
    /// Hits already credited.
    packets: u64,
    bytes: u64,
    /// Overflow drops already credited.
    overflow: u32,
}

/// The mask of XDP key bits that the flow-key bits `wc` stand for, for a
/// UDP frame received on a device (not decapsulated): the device, the
/// protocol and the tunnel fields (zero) always; the Ethernet and IP
/// addresses, ports, TOS and TTL as examined. Every other field of such a
/// frame's flow key has the same value for all of them (untagged IPv4,
/// not a fragment, no metadata yet), so it needs no bit.
pub fn fc_mask(wc: &FlowKey) -> FcKey {
    let mut m = [0u8; KEY_SIZE];
    m[0..4].fill(0xff);
    m[4..10].copy_from_slice(&mac_bytes(wc.get(Field::EthDst)));
    m[10..16].copy_from_slice(&mac_bytes(wc.get(Field::EthSrc)));
    m[16..20].copy_from_slice(&(wc.get(Field::IpSrc) as u32).to_be_bytes());
    m[20..24].copy_from_slice(&(wc.get(Field::IpDst) as u32).to_be_bytes());
    m[24] = 0xff;
    if wc.get(Field::IpDscp) != 0 || wc.get(Field::IpEcn) != 0 {
        m[25] = 0xff;
    }
    if wc.get(Field::IpTtl) != 0 {
        m[26] = 0xff;
    }
    m[28..30].copy_from_slice(&(wc.get(Field::TpSrc) as u16).to_be_bytes());
    m[30..32].copy_from_slice(&(wc.get(Field::TpDst) as u16).to_be_bytes());
    m[32..40].fill(0xff);
    m
}

fn masked(key: &FcKey, mask: &FcKey) -> FcKey {
    let mut out = [0u8; KEY_SIZE];
    for ((o, k), m) in out.iter_mut().zip(key).zip(mask) {
        *o = k & m;
    }
    out
}

/// `struct xbr_ct_slot`.
fn slot_key(ifindex: u32, slot: u32) -> [u8; 8] {
    let mut k = [0u8; 8];
    k[..4].copy_from_slice(&ifindex.to_ne_bytes());
    k[4..].copy_from_slice(&slot.to_ne_bytes());
    k
}

/// `struct xbr_ct_tmpl` for `t` in generation `gen`, counters zero.
fn value(t: &NewConnTemplate, gen: u64) -> [u8; CT_TEMPLATE_SIZE as usize] {
    let mut v = [0u8; CT_TEMPLATE_SIZE as usize];
    v[0..8].copy_from_slice(&gen.to_ne_bytes());
    v[24..64].copy_from_slice(&t.mask);
    v[64..104].copy_from_slice(&masked(&t.key, &t.mask));
    v[104..108].copy_from_slice(&t.out_ifindex.to_ne_bytes());
    v[108..110].copy_from_slice(&t.zone.to_ne_bytes());
    let mut flags = 0u8;
    if let Some(mac) = t.set_dst {
        flags |= super::entry::FLAG_SET_DST;
        v[112..118].copy_from_slice(&mac);
    }
    if let Some(mac) = t.set_src {
        flags |= super::entry::FLAG_SET_SRC;
        v[118..124].copy_from_slice(&mac);
    }
    v[110] = flags;
    v
}

impl Template {
    fn covers(&self, key: &FcKey) -> bool {
        masked(key, &self.t.mask) == masked(&self.t.key, &self.t.mask)
    }
}

impl XdpCache {
    /// Frames the kernel dropped for lack of room in the ring of reports,
    /// per ingress port, since the last call.
    pub fn take_ct_new_overflow(&mut self) -> std::vec::Drain<'_, (u32, u64)> {
        self.ct_new_overflow.drain(..)
    }

    /// Whether any template is installed.
    pub fn has_templates(&self) -> bool {
        !self.templates.is_empty()
    }

    /// Whether a template of this generation would take frame `key`.
    pub fn template_covers(&self, key: &FcKey) -> bool {
        self.templates
            .iter()
            .any(|t| t.gen == self.round_gen && t.covers(key))
    }

    /// Whether a template may be tried for `in_port` now (see
    /// [`ATTEMPT_INTERVAL`]); counts the attempt.
    pub fn template_attempt(&mut self, in_port: u32, now: Instant) -> bool {
        match self.template_tried.get(&in_port) {
            Some(&at) if now.duration_since(at) < ATTEMPT_INTERVAL => false,
            _ => {
                self.template_tried.insert(in_port, now);
                true
            }
        }
    }

    /// Installs `t` in a free slot of its device, or in place of the one
    /// with the fewest hits (after crediting them). Only UDP templates.
    pub fn install_template(&mut self, t: NewConnTemplate) {
        if self.maps.generation().is_broken() || super::entry::key_proto(&t.key) != IP_PROTO_UDP {
            return;
        }
        if self.template_covers(&t.key) {
            return;
        }
        let used: Vec<u32> = self
            .templates
            .iter()
            .filter(|x| x.t.ifindex == t.ifindex)
            .map(|x| x.slot)
            .collect();
        let slot = match (0..SLOTS).find(|s| !used.contains(s)) {
            Some(s) => s,
            None => {
                let Some(victim) = self
                    .templates
                    .iter()
                    .filter(|x| x.t.ifindex == t.ifindex)
                    .min_by_key(|x| x.packets)
                    .map(|x| x.slot)
                else {
                    return;
                };
                self.remove_template(t.ifindex, victim);
                victim
            }
        };
        let gen = self.round_gen;
        let v = value(&t, gen);
        match self
            .maps
            .templates()
            .update(&slot_key(t.ifindex, slot), &v, MapFlags::ANY)
        {
            Ok(()) => {
                self.stats.templates += 1;
                self.templates.push(Template {
                    slot,
                    gen,
                    t,
                    packets: 0,
                    bytes: 0,
                    overflow: 0,
                });
            }
            Err(e) => {
                self.stats.install_errors += 1;
                tracing::debug!(error = %e, "cannot install a new-connection template");
            }
        }
    }

    /// Reads every template's hits and credits the new ones; removes the
    /// templates of older generations (after their last hits).
    pub(super) fn sweep_templates(&mut self) {
        let current = self.maps.generation().current();
        let mut i = 0;
        while i < self.templates.len() {
            self.credit_template(i);
            if self.templates[i].gen != current {
                let (ifindex, slot) = (self.templates[i].t.ifindex, self.templates[i].slot);
                let _ = self.maps.templates().delete(&slot_key(ifindex, slot));
                self.templates.swap_remove(i);
                self.stats.invalidated += 1;
            } else {
                i += 1;
            }
        }
    }

    /// Removes every template (a flow, group or port change), crediting
    /// their last hits.
    pub fn clear_templates(&mut self) {
        for i in 0..self.templates.len() {
            self.credit_template(i);
            let (ifindex, slot) = (self.templates[i].t.ifindex, self.templates[i].slot);
            let _ = self.maps.templates().delete(&slot_key(ifindex, slot));
        }
        self.templates.clear();
    }

    fn remove_template(&mut self, ifindex: u32, slot: u32) {
        if let Some(i) = self
            .templates
            .iter()
            .position(|x| x.t.ifindex == ifindex && x.slot == slot)
        {
            self.credit_template(i);
            let _ = self.maps.templates().delete(&slot_key(ifindex, slot));
            self.templates.swap_remove(i);
        }
    }

    fn credit_template(&mut self, i: usize) {
        let Some(x) = self.templates.get_mut(i) else {
            return;
        };
        let Ok(Some(v)) = self
            .maps
            .templates()
            .lookup(&slot_key(x.t.ifindex, x.slot), MapFlags::ANY)
        else {
            return;
        };
        let (packets, bytes) = super::entry::counters(&v);
        let overflow = v
            .get(124..128)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u32::from_ne_bytes);
        let dropped = overflow.wrapping_sub(x.overflow);
        if dropped > 0 {
            x.overflow = overflow;
            self.ct_new_overflow.push((x.t.in_port, u64::from(dropped)));
        }
        let (dp, db) = (
            packets.saturating_sub(x.packets),
            bytes.saturating_sub(x.bytes),
        );
        if dp == 0 {
            return;
        }
        x.packets = packets;
        x.bytes = bytes;
        x.t.attribution.credit(dp, db);
        self.stats.hit_packets += dp;
        self.stats.ct_new_packets += dp;
        self.credits.push(Credit {
            in_port: x.t.in_port,
            out: Ok(x.t.out_port),
            packets: dp,
            bytes: db,
        });
    }

    /// The templates installed: (ingress port, slot, mask, masked key,
    /// output port, hits credited), for `xbr` diagnostics and tests.
    pub fn templates(&self) -> Vec<(u32, u32, FcKey, FcKey, u32, u64)> {
        self.templates
            .iter()
            .map(|x| {
                (
                    x.t.in_port,
                    x.slot,
                    x.t.mask,
                    masked(&x.t.key, &x.t.mask),
                    x.t.out_port,
                    x.packets,
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mask_covers_what_the_translation_examined() {
        let mut wc = FlowKey::zero();
        wc.set(Field::IpDst, 0xffff_fe00);
        wc.set(Field::TpDst, 0xffff);
        wc.set(Field::InPort, 0xffff_ffff);
        wc.set(Field::CtState, 0xff);
        wc.set(Field::Reg(0), 0xffff_ffff);
        let m = fc_mask(&wc);
        let mut want = [0u8; KEY_SIZE];
        want[0..4].fill(0xff);
        want[20..24].copy_from_slice(&[0xff, 0xff, 0xfe, 0x00]);
        want[24] = 0xff;
        want[30..32].fill(0xff);
        want[32..40].fill(0xff);
        assert_eq!(m, want);
        let mut wc = FlowKey::zero();
        wc.set(Field::EthSrc, 0xffff_ffff_ffff);
        wc.set(Field::IpEcn, 3);
        wc.set(Field::IpTtl, 1);
        let m = fc_mask(&wc);
        assert_eq!(&m[10..16], &[0xff; 6]);
        assert_eq!((m[25], m[26]), (0xff, 0xff));
        assert_eq!(&m[4..10], &[0; 6]);
    }

    #[test]
    fn a_template_value_holds_the_masked_key_and_the_action() {
        let mut key = [0x5au8; KEY_SIZE];
        key[24] = IP_PROTO_UDP;
        let mut mask = [0u8; KEY_SIZE];
        mask[0..4].fill(0xff);
        mask[24] = 0xff;
        let t = NewConnTemplate {
            in_port: 1,
            ifindex: 7,
            mask,
            key,
            zone: 3,
            out_port: 2,
            out_ifindex: 9,
            set_dst: Some([1, 2, 3, 4, 5, 6]),
            set_src: None,
            attribution: flowtable::pipeline::Pipeline::new()
                .retranslate(&FlowKey::zero(), &mut flowtable::pipeline::Xlate::new()),
        };
        let v = value(&t, 42);
        assert_eq!(u64::from_ne_bytes(v[0..8].try_into().unwrap()), 42);
        assert_eq!(&v[8..24], &[0; 16], "counters start at zero");
        assert_eq!(&v[24..64], &mask);
        assert_eq!(&v[64..68], &[0x5a; 4]);
        assert_eq!(&v[68..88], &[0; 20]);
        assert_eq!(v[88], IP_PROTO_UDP);
        assert_eq!(u32::from_ne_bytes(v[104..108].try_into().unwrap()), 9);
        assert_eq!(u16::from_ne_bytes(v[108..110].try_into().unwrap()), 3);
        assert_eq!(v[110], super::super::entry::FLAG_SET_DST);
        assert_eq!(&v[112..118], &[1, 2, 3, 4, 5, 6]);
        assert_eq!(slot_key(7, 2), {
            let mut k = [0u8; 8];
            k[..4].copy_from_slice(&7u32.to_ne_bytes());
            k[4..].copy_from_slice(&2u32.to_ne_bytes());
            k
        });
    }
}
