//! METER_MOD semantics of `FlowTables` and the meter instruction's place
//! in a translation.

mod common;

use common::*;
use flowtable::meter::{meter_flags, METER_ALL, METER_CONTROLLER, METER_MAX};
use flowtable::*;

fn drop_band(rate: u32) -> MeterBand {
    MeterBand {
        band_type: MeterBandType::Drop,
        rate,
        burst_size: 0,
    }
}

fn mm(command: MeterModCommand, meter_id: u32, flags: u16, bands: Vec<MeterBand>) -> MeterMod {
    MeterMod {
        command,
        flags,
        meter_id,
        bands,
    }
}

fn add_meter(id: u32) -> MeterMod {
    mm(
        MeterModCommand::Add,
        id,
        meter_flags::PKTPS,
        vec![drop_band(1000)],
    )
}

fn flow(text: &str) -> FlowMod {
    text::parse_flow(text).unwrap()
}

#[test]
fn meter_mods_follow_ovs() {
    use MeterModCommand::*;
    let mut ft = FlowTables::new();
    let changes = ft.meter_mod(&add_meter(1)).unwrap();
    assert!(matches!(&changes[..], [Change::SetMeter(m)] if m.id == 1));
    let err = |ft: &mut FlowTables, m: MeterMod| ft.meter_mod(&m).unwrap_err().ofp_error();
    assert_eq!(err(&mut ft, add_meter(1)), (12, 1)); // METER_EXISTS
    assert_eq!(err(&mut ft, mm(Modify, 2, 0, vec![])), (12, 3)); // UNKNOWN_METER
    assert_eq!(err(&mut ft, add_meter(0)), (12, 2)); // INVALID_METER
    assert_eq!(err(&mut ft, add_meter(METER_MAX + 1)), (12, 2));
    assert_eq!(err(&mut ft, add_meter(METER_CONTROLLER)), (12, 2));
    assert_eq!(err(&mut ft, add_meter(METER_MAX)), (12, 10)); // OUT_OF_METERS
    let both = meter_flags::KBPS | meter_flags::PKTPS;
    assert_eq!(err(&mut ft, mm(Add, 3, both, vec![])), (12, 5)); // BAD_FLAGS
    assert_eq!(err(&mut ft, mm(Add, 3, 1 << 4, vec![])), (12, 5));
    assert_eq!(err(&mut ft, mm(Add, 3, 0, vec![drop_band(0)])), (12, 6)); // BAD_RATE
    let many = vec![drop_band(1); 9];
    assert_eq!(err(&mut ft, mm(Add, 3, 0, many)), (12, 11)); // OUT_OF_BANDS
    assert_eq!(ft.meters().len(), 1);

    // MODIFY replaces the bands, keeps the age, restarts the counters.
    let before = ft.meter(1).unwrap();
    before.stats.count_in(100);
    let band = MeterBand {
        band_type: MeterBandType::DscpRemark { prec_level: 1 },
        rate: 10,
        burst_size: 5,
    };
    let flags = meter_flags::KBPS | meter_flags::BURST;
    ft.meter_mod(&mm(Modify, 1, flags, vec![band])).unwrap();
    let after = ft.meter(1).unwrap();
    assert_eq!((after.flags, &after.bands[..]), (flags, &[band][..]));
    assert_eq!(after.stats.installed, before.stats.installed);
    assert_eq!(after.stats.input.read(), (0, 0));

    // Deleting what is not there, or cannot be, succeeds.
    assert!(ft.meter_mod(&mm(Delete, 9, 0, vec![])).unwrap().is_empty());
    assert!(ft.meter_mod(&mm(Delete, 0, 0, vec![])).unwrap().is_empty());
}

#[test]
fn flows_need_their_meter_and_go_with_it() {
    let mut ft = FlowTables::new();
    let e = ft.flow_mod(&flow("actions=meter:1,output:2")).unwrap_err();
    assert_eq!(e.ofp_error(), (12, 3)); // UNKNOWN_METER, as OVS
    ft.meter_mod(&add_meter(1)).unwrap();
    ft.meter_mod(&add_meter(2)).unwrap();
    ft.flow_mod(&flow("in_port=1,actions=meter:1,output:2"))
        .unwrap();
    ft.flow_mod(&flow("table=3,in_port=1,actions=meter:1,output:3"))
        .unwrap();
    ft.flow_mod(&flow("in_port=2,actions=meter:2,output:1"))
        .unwrap();
    ft.flow_mod(&flow("in_port=3,actions=output:1")).unwrap();
    assert_eq!(ft.meter_flow_count(1), 2);

    // Deleting a meter deletes the flows that use it, then the meter.
    let del = |id| mm(MeterModCommand::Delete, id, 0, vec![]);
    let changes = ft.meter_mod(&del(1)).unwrap();
    let removed = changes
        .iter()
        .filter(|c| matches!(c, Change::RemoveRule(_)))
        .count();
    assert_eq!(removed, 2);
    assert!(matches!(changes.last(), Some(Change::RemoveMeter(1))));
    assert_eq!((ft.n_rules(), ft.meter_flow_count(1)), (2, 0));

    // OFPM_ALL takes every meter and every metered flow.
    ft.meter_mod(&del(METER_ALL)).unwrap();
    assert!(ft.meters().is_empty());
    assert_eq!(ft.n_rules(), 1);
}

#[test]
fn a_failed_batch_leaves_the_meters_as_they_were() {
    let mut ft = FlowTables::new();
    ft.meter_mod(&add_meter(1)).unwrap();
    ft.flow_mod(&flow("actions=meter:1,output:2")).unwrap();
    let batch = vec![
        PipelineMod::Meter(mm(MeterModCommand::Delete, 1, 0, vec![])),
        PipelineMod::Meter(add_meter(5)),
        PipelineMod::Flow(flow("actions=meter:7,output:2")),
    ];
    let (i, e) = ft.apply_batch(&batch).unwrap_err();
    assert_eq!((i, e.ofp_error()), (2, (12, 3)));
    assert_eq!(ft.meters().iter().map(|m| m.id).collect::<Vec<_>>(), [1]);
    assert_eq!((ft.n_rules(), ft.meter_flow_count(1)), (1, 1));
    // A replica built from scratch gets the meter before its flow.
    let replay = ft.replay();
    assert!(matches!(replay.first(), Some(Change::SetMeter(m)) if m.id == 1));
}

#[test]
fn the_meter_runs_before_the_apply_actions() {
    let mut ft = FlowTables::new();
    let mut p = Pipeline::with_counters(ft.counters());
    p.apply(&ft.meter_mod(&add_meter(4)).unwrap());
    for f in [
        "in_port=1,actions=set_field:00:00:00:00:00:09->eth_dst,goto_table:1",
        "table=1,actions=meter:4,output:2",
    ] {
        p.apply(&ft.flow_mod(&flow(f)).unwrap());
    }
    let x = xlate(&p, &tcp_key(1, 1, 2, 3, 4));
    let a = x.actions();
    // The rewrite of table 0 is committed before the meter sees the
    // packet, and the output comes after it.
    assert_eq!(a.len(), 3, "{a:?}");
    assert!(matches!(
        a[0],
        DpAction::SetField {
            field: key::Field::EthDst,
            value: 9
        }
    ));
    assert_eq!(a[1], DpAction::Meter(4));
    assert_eq!(outputs(&x), [2]);
    assert_eq!(
        trace::format_datapath(&x),
        "set(eth_dst=00:00:00:00:00:09),meter(4),output:2"
    );
}
