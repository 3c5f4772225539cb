//! OpenFlow 1.4's port messages (the same in 1.5): PORT_MOD and
//! PORT_STATS entries moved their Ethernet-specific fields into
//! properties.
//!
//! - `ofp_port_mod`: port, hardware address, config and mask (24 bytes),
//!   then properties; the Ethernet property (type 0) carries `advertise`,
//!   others (optical, experimenter) are refused with OFPBPC_BAD_TYPE.
//! - `ofp_port_stats`: a length, the port, its duration and the eight
//!   counters of 1.3 (80 bytes), then the Ethernet property with the
//!   four error counters xbr does not track (zero, as in 1.3's entry).

use super::mods::PortMod;
use super::{err, Ctx, Put, Reader, WireError};
use crate::datapath::PortCounters;

/// OFPPMPT_ETHERNET / OFPPSPT_ETHERNET.
const PROP_ETHERNET: u16 = 0;

/// Decodes a 1.4/1.5 `ofp_port_mod` body.
pub fn parse_port_mod(body: &[u8]) -> Result<PortMod, WireError> {
    let mut r = Reader::new(body, Ctx::Request, "port_mod");
    let mut pm = PortMod::parse_head(&mut r)?;
    while !r.is_empty() {
        let (ty, len, mut value) = r.property("port_mod property")?;
        match ty {
            PROP_ETHERNET if value.remaining() == 4 => pm.advertise = value.u32()?,
            PROP_ETHERNET => {
                return Err(WireError::BadProperty(
                    err::BPC_BAD_LEN,
                    format!("Ethernet port_mod property of length {len}"),
                ))
            }
            t => {
                return Err(WireError::BadProperty(
                    err::BPC_BAD_TYPE,
                    format!("port_mod property type {t} (xbr's ports are Ethernet)"),
                ))
            }
        }
    }
    Ok(pm)
}

/// Encodes a 1.4/1.5 `ofp_port_mod` body (the Ethernet property only when
/// something is advertised, as ovs-ofctl writes it).
pub fn emit_port_mod(pm: &PortMod, out: &mut Vec<u8>) {
    pm.emit_head(out);
    if pm.advertise != 0 {
        out.put_u16(PROP_ETHERNET);
        out.put_u16(8);
        out.put_u32(pm.advertise);
    }
}

/// One 1.4/1.5 `ofp_port_stats` entry.
pub fn port_stats_entry(c: &PortCounters) -> Vec<u8> {
    let mut out = Vec::with_capacity(120);
    out.put_u16(0);
    out.put_zeros(2);
    out.put_u32(c.port_no);
    out.put_u32(u32::try_from(c.duration.as_secs()).unwrap_or(u32::MAX));
    out.put_u32(c.duration.subsec_nanos());
    super::multipart::put_port_counters(&mut out, c);
    out.put_u16(PROP_ETHERNET);
    out.put_u16(40);
    out.put_zeros(4);
    // rx_frame_err, rx_over_err, rx_crc_err, collisions: not tracked.
    out.put_zeros(32);
    let len = super::len16(&out, 0);
    out.patch_u16(0, len);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_port_mod_round_trips_with_and_without_advertise() {
        for advertise in [0, 0x2820] {
            let pm = PortMod {
                port_no: 3,
                hw_addr: [2, 0, 0, 0, 0, 3],
                config: 1,
                mask: 1,
                advertise,
            };
            let mut out = Vec::new();
            emit_port_mod(&pm, &mut out);
            assert_eq!(out.len(), if advertise == 0 { 24 } else { 32 });
            assert_eq!(parse_port_mod(&out).unwrap(), pm);
        }
    }

    #[test]
    fn bad_port_mods_get_the_spec_errors() {
        let mut base = Vec::new();
        emit_port_mod(
            &PortMod {
                port_no: 3,
                hw_addr: [2, 0, 0, 0, 0, 3],
                config: 1,
                mask: 1,
                advertise: 0,
            },
            &mut base,
        );
        let with = |prop: &[u8]| {
            let mut b = base.clone();
            b.extend_from_slice(prop);
            parse_port_mod(&b).unwrap_err().ofp_error()
        };
        // Optical property; an Ethernet one of the wrong length; a
        // property longer than the message.
        assert_eq!(
            with(&[0, 1, 0, 8, 0, 0, 0, 0]),
            (err::BAD_PROPERTY, err::BPC_BAD_TYPE)
        );
        assert_eq!(
            with(&[0, 0, 0, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]).1,
            err::BPC_BAD_LEN
        );
        assert_eq!(with(&[0, 0, 0, 16, 0, 0, 0, 0]).1, err::BPC_BAD_LEN);
        assert!(parse_port_mod(&base[..20]).is_err());
        for n in 0..base.len() {
            let _ = parse_port_mod(&base[..n]);
        }
    }

    #[test]
    fn a_stats_entry_is_120_bytes_with_the_ethernet_property() {
        let e = port_stats_entry(&PortCounters {
            port_no: 7,
            rx_packets: 5,
            duration: Duration::new(3, 9),
            ..PortCounters::default()
        });
        assert_eq!(e.len(), 120);
        assert_eq!(&e[..4], &[0, 120, 0, 0]);
        assert_eq!(&e[4..16], &[0, 0, 0, 7, 0, 0, 0, 3, 0, 0, 0, 9]);
        assert_eq!(&e[16..24], &5u64.to_be_bytes());
        assert_eq!(&e[80..84], &[0, 0, 0, 40]);
    }
}
