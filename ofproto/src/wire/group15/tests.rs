use super::*;
use flowtable::{Action, Field};

fn bucket(bucket_id: u32, weight: u16, out: u32) -> Bucket {
    Bucket {
        bucket_id,
        weight,
        watch_port: port::ANY,
        watch_group: group_no::ANY,
        actions: vec![Action::Output {
            port: out,
            max_len: 0,
        }],
    }
}

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// `ovs-ofctl -O OpenFlow15 add-group br0 group_id=1,type=select,
/// bucket=bucket_id:3,weight:5,actions=output:1,bucket=actions=output:2`,
/// as `ovs-ofctl ofp-print` reads it back.
const SELECT_ADD: &str = "0000 01 00 00000001 0040 0000 ffffffff
     0020 0010 00000003 0000 0010 00000001 0000 000000000000 0000 0008 0005 0000
     0020 0010 00000000 0000 0010 00000002 0000 000000000000 0000 0008 0001 0000";

#[test]
fn a_select_group_round_trips_with_ids_and_weights() {
    let gm = GroupMod {
        command: GroupModCommand::Add,
        group_type: GroupType::Select,
        group_id: 1,
        buckets: vec![bucket(3, 5, 1), bucket(0, 1, 2)],
        selection: None,
    };
    let mut out = Vec::new();
    emit_group_mod(&gm, &mut out);
    assert_eq!(out, hex(SELECT_ADD));
    assert_eq!(parse_group_mod(&out).unwrap(), gm);
}

#[test]
fn absent_properties_read_as_ovs_reads_them() {
    // Bucket without properties: weight 1 in a select group, 0 elsewhere.
    let body = |ty: &str| {
        hex(&format!(
            "0000 {ty} 00 00000002 0018 0000 ffffffff
             0018 0010 00000009 0000 0010 00000001 0000 000000000000"
        ))
    };
    let select = parse_group_mod(&body("01")).unwrap();
    assert_eq!(select.buckets, vec![bucket(9, 1, 1)]);
    let all = parse_group_mod(&body("00")).unwrap();
    assert_eq!(all.buckets, vec![bucket(9, 0, 1)]);
}

#[test]
fn a_weight_without_its_padding_counted_is_read_too() {
    let body = hex("0000 01 00 00000002 0020 0000 ffffffff
         0020 0010 00000009 0000 0010 00000001 0000 000000000000 0000 0006 0004 0000");
    assert_eq!(
        parse_group_mod(&body).unwrap().buckets,
        vec![bucket(9, 4, 1)]
    );
}

#[test]
fn watches_travel_as_properties() {
    let mut b = bucket(0, 0, 1);
    b.watch_port = 3;
    b.watch_group = 7;
    let gm = GroupMod {
        command: GroupModCommand::Add,
        group_type: GroupType::FastFailover,
        group_id: 4,
        buckets: vec![b],
        selection: None,
    };
    let mut out = Vec::new();
    emit_group_mod(&gm, &mut out);
    let props = &out[16 + 8 + 16..];
    assert_eq!(props, hex("0001 0008 00000003 0002 0008 00000007"));
    assert_eq!(parse_group_mod(&out).unwrap(), gm);
}

#[test]
fn bucket_commands_name_their_position() {
    for (at, raw) in [
        (BucketPos::First, "fffffffd"),
        (BucketPos::Last, "fffffffe"),
        (BucketPos::Id(6), "00000006"),
    ] {
        let body = hex(&format!("0003 00 00 00000001 0000 0000 {raw}"));
        let gm = parse_group_mod(&body).unwrap();
        assert_eq!(gm.command, GroupModCommand::InsertBucket(at));
        let mut out = Vec::new();
        emit_group_mod(&gm, &mut out);
        assert_eq!(out, body);
    }
    let remove_all = hex("0005 00 00 00000001 0000 0000 ffffffff");
    assert_eq!(
        parse_group_mod(&remove_all).unwrap().command,
        GroupModCommand::RemoveBucket(BucketPos::All)
    );
    let add_or_mod = hex("8000 00 00 00000001 0000 0000 ffffffff");
    assert_eq!(
        parse_group_mod(&add_or_mod).unwrap().command,
        GroupModCommand::AddOrModify
    );
}

#[test]
fn malformed_group_mods_get_the_spec_errors() {
    let code = |body: &str| parse_group_mod(&hex(body)).unwrap_err().ofp_error();
    let bad_bucket = (err::GROUP_MOD_FAILED, err::GMFC_BAD_BUCKET);
    // Insert "at all buckets"; a plain add naming a bucket.
    assert_eq!(code("0003 00 00 00000001 0000 0000 ffffffff"), bad_bucket);
    assert_eq!(code("0000 00 00 00000001 0000 0000 00000001"), bad_bucket);
    // A command id between BUCKET_MAX and FIRST.
    assert_eq!(code("0005 00 00 00000001 0000 0000 ffffff01"), bad_bucket);
    // Unknown command; unknown type.
    assert_eq!(
        code("0004 00 00 00000001 0000 0000 ffffffff"),
        (err::GROUP_MOD_FAILED, err::GMFC_BAD_COMMAND)
    );
    assert_eq!(
        code("0000 09 00 00000001 0000 0000 ffffffff"),
        (err::GROUP_MOD_FAILED, err::GMFC_BAD_TYPE)
    );
    // Bucket array longer than the message; a short header.
    assert_eq!(
        code("0000 00 00 00000001 0010 0000 ffffffff"),
        (err::BAD_REQUEST, err::BRC_BAD_LEN)
    );
    assert_eq!(
        code("0000 00 00 0000"),
        (err::BAD_REQUEST, err::BRC_BAD_LEN)
    );
    // Bucket shorter than its header, actions longer than the bucket,
    // bucket id beyond BUCKET_MAX.
    assert_eq!(
        code("0000 00 00 00000001 0008 0000 ffffffff 0004 0000 00000000"),
        bad_bucket
    );
    assert_eq!(
        code("0000 00 00 00000001 0008 0000 ffffffff 0008 0010 00000000"),
        bad_bucket
    );
    assert_eq!(
        code("0000 00 00 00000001 0008 0000 ffffffff 0008 0000 ffffff01"),
        bad_bucket
    );
    // Leftover bytes after the last bucket.
    assert_eq!(
        code("0000 00 00 00000001 0004 0000 ffffffff 0008 0000"),
        bad_bucket
    );
    // Unknown bucket property; a weight of the wrong length; a property
    // whose padding is missing.
    let prop = |p: &str| {
        let len = 8 + p.split_whitespace().collect::<String>().len() / 2;
        code(&format!(
            "0000 01 00 00000001 {len:04x} 0000 ffffffff {len:04x} 0000 00000000 {p}"
        ))
    };
    assert_eq!(
        prop("0009 0008 00000000"),
        (err::BAD_PROPERTY, err::BPC_BAD_TYPE)
    );
    assert_eq!(
        prop("0000 0004 00000000"),
        (err::BAD_PROPERTY, err::BPC_BAD_LEN)
    );
    assert_eq!(
        prop("0000 000c 00000000 00000000"),
        (err::BAD_PROPERTY, err::BPC_BAD_LEN)
    );
    assert_eq!(
        prop("0000 0006 0001"),
        (err::BAD_PROPERTY, err::BPC_BAD_LEN)
    );
    // Group properties: an unknown type, a short experimenter one.
    assert_eq!(
        code("0000 01 00 00000001 0000 0000 ffffffff 0001 0008 00000000"),
        (err::BAD_PROPERTY, err::BPC_BAD_TYPE)
    );
    assert_eq!(
        code("0000 01 00 00000001 0000 0000 ffffffff ffff 0008 00000000"),
        (err::BAD_PROPERTY, err::BPC_BAD_LEN)
    );
}

/// A select group mod (add) with one selection method property.
fn with_method(group_type: &str, command: &str, method: &str, fields: &str) -> String {
    let fields = fields.replace(' ', "");
    let name: String = method
        .bytes()
        .chain(std::iter::repeat(0))
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect();
    let len = 40 + fields.len() / 2;
    let pad = "00".repeat(len.next_multiple_of(8) - len);
    format!(
        "{command} {group_type} 00 00000001 0000 0000 ffffffff \
         ffff {len:04x} 0000154d 00000001 00000000 {name} 0000000000000007 {fields}{pad}"
    )
}

#[test]
fn selection_methods_round_trip_and_are_refused_as_ovs_refuses_them() {
    // hash of ip_dst/24 and tcp_src, seeded by 7.
    let fields = "80001804 ffffff00 80001a02 ffff";
    let gm = parse_group_mod(&hex(&with_method("01", "0000", "hash", fields))).unwrap();
    let s = gm.selection.clone().unwrap();
    assert_eq!((s.method, s.param), (SelectionKind::Hash, 7));
    assert_eq!(s.fields.get(Field::IpDst), 0xffff_ff00);
    assert_eq!(s.fields.get(Field::TpSrc), 0xffff);
    assert_eq!(s.fields.get(Field::IpSrc), 0);
    let mut out = Vec::new();
    emit_group_mod(&gm, &mut out);
    assert_eq!(out, hex(&with_method("01", "0000", "hash", fields)));
    let e = group_desc_entry(1, GroupType::Select, &[], gm.selection.as_ref());
    assert_eq!(&e[16..], &out[16..]);
    let dp = parse_group_mod(&hex(&with_method("01", "0001", "dp_hash", ""))).unwrap();
    assert_eq!(dp.selection.unwrap().method, SelectionKind::DpHash);
    let code = |body: String| parse_group_mod(&hex(&body)).unwrap_err().ofp_error();
    let bad_value = (err::BAD_PROPERTY, err::BPC_BAD_VALUE);
    // Not a select group; a bucket command; an unknown method; fields
    // without hash.
    assert_eq!(code(with_method("00", "0000", "hash", "")), bad_value);
    assert_eq!(code(with_method("01", "0005", "hash", "")), bad_value);
    assert_eq!(code(with_method("01", "0000", "random", "")), bad_value);
    assert_eq!(
        code(with_method("01", "0000", "dp_hash", fields)),
        bad_value
    );
    // A masked TLV, or a field twice.
    assert_eq!(
        code(with_method(
            "01",
            "0000",
            "hash",
            "80001908 0a000000 ffffff00"
        ))
        .0,
        err::BAD_MATCH
    );
    assert_eq!(
        code(with_method(
            "01",
            "0000",
            "hash",
            "80001804 ffffffff 80001804 ffffffff"
        )),
        (err::BAD_MATCH, err::BMC_DUP_FIELD)
    );
    // Another experimenter's property.
    let other =
        with_method("01", "0000", "hash", "").replace("0000154d 00000001", "00002320 00000001");
    assert_eq!(code(other), (err::BAD_PROPERTY, err::BPC_BAD_EXP_TYPE));
}

#[test]
fn desc_entries_carry_ids_and_properties() {
    let e = group_desc_entry(
        1,
        GroupType::Select,
        &[bucket(3, 5, 1), bucket(0, 1, 2)],
        None,
    );
    let mod_body = hex(SELECT_ADD);
    assert_eq!(&e[..8], hex("0050 01 00 00000001"));
    assert_eq!(&e[8..16], hex("0040 000000000000"));
    // The buckets are the group mod's, byte for byte.
    assert_eq!(&e[16..], &mod_body[16..]);
}

#[test]
fn no_input_panics() {
    // Every prefix and every one-byte corruption of a valid message.
    let good = hex(SELECT_ADD);
    for n in 0..good.len() {
        let _ = parse_group_mod(&good[..n]);
        for v in [0u8, 0x07, 0x80, 0xff] {
            let mut b = good.clone();
            b[n] = v;
            let _ = parse_group_mod(&b);
        }
    }
}
