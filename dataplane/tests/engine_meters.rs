//! Meters in the packet engine over in-memory ports: a DROP band ends a
//! packet's actions (the outputs before it happened), a DSCP_REMARK band
//! rewrites the packet, the counters reach the meter, and every frame
//! comes back to the store.

mod common;

use common::Rig;
use flowtable::meter::meter_flags::{BURST, PKTPS};
use flowtable::{MeterBand, MeterBandType, MeterMod, MeterModCommand};
use ofproto::Datapath;

const N_FRAMES: u32 = 64;

/// An Ethernet/IPv4/UDP frame with DSCP `dscp` and a correct IP checksum.
fn udp_frame(dscp: u8) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 0xb, 2, 0, 0, 0, 0, 0xa, 0x08, 0x00];
    let mut ip = vec![
        0x45,
        dscp << 2,
        0,
        48,
        0,
        1,
        0x40,
        0,
        64,
        17,
        0,
        0,
        10,
        0,
        0,
        1,
        10,
        0,
        0,
        2,
    ];
    let sum = ip_sum(&ip);
    ip[10..12].copy_from_slice(&(!sum).to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&[0x30, 0x39, 0x00, 0x35, 0, 28, 0, 0]);
    f.extend([0u8; 20]);
    f
}

fn ip_sum(h: &[u8]) -> u16 {
    let s: u32 = h
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    let s = (s & 0xffff) + (s >> 16);
    ((s & 0xffff) + (s >> 16)) as u16
}

trait Meters {
    fn meter(&mut self, id: u32, band_type: MeterBandType, burst: u32);
    fn inject_n(&mut self, ofport: u32, frame: &[u8], n: usize);
}

impl Meters for Rig {
    /// A pktps meter of one band with a bucket of `burst` packets and a
    /// rate slow enough that a test's rounds refill nothing.
    fn meter(&mut self, id: u32, band_type: MeterBandType, burst: u32) {
        let mm = MeterMod {
            command: MeterModCommand::Add,
            flags: PKTPS | BURST,
            meter_id: id,
            bands: vec![MeterBand {
                band_type,
                rate: 1,
                burst_size: burst,
            }],
        };
        let changes = self.tables.meter_mod(&mm).expect("valid meter");
        self.apply(changes);
    }

    fn inject_n(&mut self, ofport: u32, frame: &[u8], n: usize) {
        for _ in 0..n {
            self.inject(ofport, frame);
        }
    }
}

#[test]
fn a_drop_band_ends_the_actions_after_the_outputs_before_it() {
    let mut rig = Rig::new(3, N_FRAMES);
    rig.meter(1, MeterBandType::Drop, 4);
    rig.flow_text("in_port=1,actions=output:3,goto_table:1");
    rig.flow_text("table=1,actions=meter:1,output:2");
    let frame = udp_frame(0);
    rig.inject_n(1, &frame, 10);
    assert_eq!(rig.engine.round(), 10);
    assert_eq!(rig.sent(3).len(), 10, "the output before the meter");
    assert_eq!(rig.sent(2).len(), 4, "the meter's burst");
    assert_eq!(rig.engine.drops.meter, 6);
    assert_eq!(rig.engine.frames_mut().free_frames(), N_FRAMES as usize);
    let m = rig.tables.meter(1).expect("meter");
    let len = frame.len() as u64;
    assert_eq!(m.stats.input.read(), (10, 10 * len));
    assert_eq!(m.stats.bands[0].read(), (6, 6 * len));

    // A meter whose only action is itself still counts and drops what it
    // must; the rest is an explicit drop.
    rig.meter(2, MeterBandType::Drop, 1);
    rig.flow_text("in_port=2,actions=meter:2");
    rig.inject_n(2, &frame, 3);
    rig.engine.round();
    assert_eq!(rig.engine.drops.meter, 8);
    assert_eq!(rig.engine.drops.explicit, 1);
    assert_eq!(rig.engine.frames_mut().free_frames(), N_FRAMES as usize);
    let m = rig.tables.meter(2).expect("meter");
    assert_eq!((m.stats.input.read().0, m.stats.bands[0].read().0), (3, 2));
}

#[test]
fn deleting_a_meter_takes_its_flows_and_buckets() {
    let mut rig = Rig::new(2, N_FRAMES);
    rig.meter(1, MeterBandType::Drop, 1);
    rig.flow_text("in_port=1,actions=meter:1,output:2");
    let del = MeterMod {
        command: MeterModCommand::Delete,
        flags: 0,
        meter_id: 1,
        bands: vec![],
    };
    let changes = rig.tables.meter_mod(&del).expect("delete");
    rig.shared.publish(changes);
    rig.engine.apply_changes();
    rig.inject_n(1, &udp_frame(0), 2);
    rig.engine.round();
    assert_eq!(rig.engine.drops.table_miss, 2);
    assert_eq!(rig.engine.drops.meter, 0);
}

#[test]
fn a_dscp_remark_band_raises_the_drop_precedence() {
    let mut rig = Rig::new(2, N_FRAMES);
    rig.meter(7, MeterBandType::DscpRemark { prec_level: 1 }, 1);
    rig.flow_text("in_port=1,actions=meter:7,output:2");
    // AF11: the first packet is within the burst, the second is remarked
    // to AF12 and still forwarded.
    let frame = udp_frame(10);
    rig.inject_n(1, &frame, 2);
    rig.engine.round();
    let sent = rig.sent(2);
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0], frame);
    assert_eq!(sent[1][15], 12 << 2);
    assert_eq!(ip_sum(&sent[1][14..34]), 0xffff, "IP checksum fixed");
    assert_eq!(rig.engine.drops.meter, 0);
    let m = rig.tables.meter(7).expect("meter");
    assert_eq!(m.stats.bands[0].read().0, 1);
}
