//! Meters as the real `ovs-ofctl -O OpenFlow13` drives them: add-meter,
//! mod-meter, del-meters, dump-meters, meter-stats and meter-features
//! against a Server on a temp socket, errors included.

mod common;
use common::Harness;

#[test]
fn meter_features_advertise_what_meters_do() {
    let h = Harness::start("meter-feat");
    let out = h.ok(&["meter-features", &h.target()]);
    assert!(
        out.contains("max_meter:65536 max_bands:8 max_color:0"),
        "{out}"
    );
    assert!(out.contains("band_types: drop dscp_remark"), "{out}");
    assert!(
        out.contains("capabilities: kbps pktps burst stats"),
        "{out}"
    );
}

#[test]
fn add_mod_dump_stats_and_delete_meters() {
    let h = Harness::start("meters");
    let t = h.target();
    h.ok(&[
        "add-meter",
        &t,
        "meter=1,pktps,burst,stats,band=type=drop,rate=1000,burst_size=100",
    ]);
    h.ok(&[
        "add-meter",
        &t,
        "meter=2,kbps,bands=type=dscp_remark,rate=500,prec_level=2 type=drop,rate=2000",
    ]);
    h.ok(&["add-flow", &t, "in_port=1,actions=meter:1,output:2"]);
    h.ok(&["add-flow", &t, "in_port=2,actions=meter:1,output:1"]);
    h.ok(&["add-flow", &t, "in_port=3,actions=meter:2,output:1"]);
    let dump = h.ok(&["dump-flows", &t]);
    assert!(
        dump.contains("in_port=1 actions=meter:1,output:2"),
        "{dump}"
    );

    let out = h.ok(&["dump-meters", &t]);
    assert!(
        out.contains("meter=1 pktps burst stats bands=\ntype=drop rate=1000 burst_size=100\n"),
        "{out}"
    );
    assert!(
        out.contains(
            "meter=2 kbps bands=\ntype=dscp_remark rate=500 prec_level=2\ntype=drop rate=2000\n"
        ),
        "{out}"
    );
    let out = h.ok(&["meter-stats", &t, "meter=1"]);
    assert!(
        out.contains("meter:1 flow_count:2 packet_in_count:0 byte_in_count:0 duration:"),
        "{out}"
    );
    assert!(out.contains("0: packet_count:0 byte_count:0"), "{out}");
    assert!(!out.contains("meter:2"), "{out}");
    // The datapath's counts are what the reply carries.
    let m2 =
        h.dp.meters
            .lock()
            .get(&2)
            .cloned()
            .expect("meter 2 published");
    for _ in 0..5 {
        m2.stats.count_in(140);
    }
    m2.stats.count_band(0, 100);
    let out = h.ok(&["meter-stats", &t]);
    assert!(
        out.contains("meter:2 flow_count:1 packet_in_count:5 byte_in_count:700 duration:"),
        "{out}"
    );
    assert!(
        out.contains("0: packet_count:1 byte_count:100\n1: packet_count:0"),
        "{out}"
    );

    // MODIFY replaces the configuration.
    h.ok(&["mod-meter", &t, "meter=1,kbps,band=type=drop,rate=10"]);
    let out = h.ok(&["dump-meters", &t, "meter=1"]);
    assert!(
        out.contains("meter=1 kbps bands=\ntype=drop rate=10\n"),
        "{out}"
    );

    // Deleting a meter deletes its flows.
    h.ok(&["del-meters", &t, "meter=1"]);
    let dump = h.ok(&["dump-flows", &t]);
    assert!(!dump.contains("meter:1"), "{dump}");
    assert!(dump.contains("meter:2"), "{dump}");
    assert_eq!(h.dp.replica.lock().n_rules(), 1);
    h.ok(&["del-meters", &t]);
    let out = h.ok(&["dump-meters", &t]);
    assert!(!out.contains("meter="), "{out}");
    assert_eq!(h.dp.replica.lock().n_rules(), 0);
}

#[test]
fn bad_meter_mods_get_the_specifications_errors() {
    let h = Harness::start("meter-errs");
    let t = h.target();
    let fails = |args: &[&str], error: &str| {
        let (ok, out, err) = h.ofctl(args);
        assert!(!ok && err.contains(error), "{args:?}: {out}{err}");
    };
    h.ok(&["add-meter", &t, "meter=1,pktps,band=type=drop,rate=1000"]);
    fails(
        &["add-meter", &t, "meter=1,pktps,band=type=drop,rate=5"],
        "OFPMMFC_METER_EXISTS",
    );
    fails(
        &["mod-meter", &t, "meter=3,pktps,band=type=drop,rate=5"],
        "OFPMMFC_UNKNOWN_METER",
    );
    fails(
        &["add-meter", &t, "meter=3,pktps,kbps,band=type=drop,rate=5"],
        "OFPMMFC_BAD_FLAGS",
    );
    // The virtual meters OpenFlow reserves cannot be configured.
    for id in ["controller", "slowpath"] {
        fails(
            &[
                "add-meter",
                &t,
                &format!("meter={id},pktps,band=type=drop,rate=5"),
            ],
            "OFPMMFC_INVALID_METER",
        );
    }
    fails(
        &["add-meter", &t, "meter=70000,pktps,band=type=drop,rate=5"],
        "OFPMMFC_OUT_OF_METERS",
    );
    let nine = ["type=drop,rate=5"; 9].join(" ");
    fails(
        &["add-meter", &t, &format!("meter=4,pktps,bands={nine}")],
        "OFPMMFC_OUT_OF_BANDS",
    );
    let out = h.ok(&["dump-meters", &t, "meter=5"]);
    assert!(out.contains("OFPMMFC_UNKNOWN_METER"), "{out}");
    fails(
        &["add-flow", &t, "actions=meter:7,output:2"],
        "OFPMMFC_UNKNOWN_METER",
    );
    // Deleting what is not there succeeds.
    h.ok(&["del-meters", &t, "meter=9"]);
    let out = h.ok(&["dump-meters", &t]);
    assert!(
        out.contains("meter=1 pktps bands=\ntype=drop rate=1000\n"),
        "{out}"
    );
}

/// ONF bundles (what the agent writes with) carry meter mods, all or
/// nothing like flow mods: ovs-ofctl's bundle files cannot hold meters,
/// so the messages are made by hand.
#[test]
fn meter_mods_in_bundles_are_all_or_nothing() {
    use flowtable::meter::meter_flags::PKTPS;
    use flowtable::{MeterBand, MeterBandType, MeterMod, MeterModCommand};
    use ofproto::wire::message::split;
    use ofproto::wire::{Message, ONF_VENDOR_ID};
    use std::io::Write;

    let h = Harness::start("meter-bundle");
    let mut s = std::os::unix::net::UnixStream::connect(&h.sock).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    s.write_all(&Message::Hello { bitmap: Some(0x10) }.emit(1))
        .unwrap();
    common::read_msg(&mut s).unwrap();
    let onf = |exp_type: u32, data: Vec<u8>, xid: u32| {
        Message::Experimenter {
            experimenter: ONF_VENDOR_ID,
            exp_type,
            data,
        }
        .emit(xid)
    };
    let control = |bundle: u32, ty: u16, xid: u32| {
        let mut d = bundle.to_be_bytes().to_vec();
        d.extend(ty.to_be_bytes());
        d.extend([0, 1]); // OFPBF_ATOMIC
        onf(2300, d, xid)
    };
    let add = |bundle: u32, inner: Vec<u8>, xid: u32| {
        let mut d = bundle.to_be_bytes().to_vec();
        d.extend([0, 0, 0, 1]);
        d.extend(inner);
        onf(2301, d, xid)
    };
    let meter = |command, meter_id| {
        Message::MeterMod(MeterMod {
            command,
            flags: PKTPS,
            meter_id,
            bands: vec![MeterBand {
                band_type: MeterBandType::Drop,
                rate: 100,
                burst_size: 0,
            }],
        })
        .emit(50)
    };
    let flow = |text: &str| Message::FlowMod(flowtable::text::parse_flow(text).unwrap()).emit(51);
    // Runs one bundle; returns the errors it got, as (type, code).
    let mut run = |bundle: u32, inner: Vec<Vec<u8>>| {
        let mut out = control(bundle, 0, 10);
        for m in inner {
            out.extend(add(bundle, m, 11));
        }
        out.extend(control(bundle, 4, 12));
        out.extend(Message::EchoRequest(Vec::new()).emit(13));
        s.write_all(&out).unwrap();
        let mut errors = Vec::new();
        loop {
            let m = common::read_msg(&mut s).unwrap();
            let (hdr, body) = split(&m).unwrap();
            match Message::parse(&hdr, body).unwrap() {
                Message::EchoReply(_) => return errors,
                Message::Error { ty, code, .. } => errors.push((ty, code)),
                _ => {}
            }
        }
    };
    let t = h.target();
    let ok = run(
        1,
        vec![
            meter(MeterModCommand::Add, 1),
            flow("in_port=1,actions=meter:1,output:2"),
        ],
    );
    assert!(ok.is_empty(), "{ok:?}");
    assert!(h.ok(&["dump-flows", &t]).contains("meter:1"));
    // Deleting the meter and naming a missing one: the second fails
    // (UNKNOWN_METER), so the first never happened either.
    let failed = run(
        2,
        vec![
            meter(MeterModCommand::Delete, 1),
            flow("in_port=2,actions=meter:2,output:1"),
        ],
    );
    assert!(failed.contains(&(12, 3)), "{failed:?}");
    assert!(h.ok(&["dump-meters", &t]).contains("meter=1 pktps"));
    assert!(h.ok(&["dump-flows", &t]).contains("meter:1"));
}
