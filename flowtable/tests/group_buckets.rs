//! Bucket ids and OpenFlow 1.5's bucket commands (INSERT_BUCKET,
//! REMOVE_BUCKET) and OVS's ADD_OR_MOD, with OVS's semantics.

use flowtable::flow_mod::BucketPos;
use flowtable::text::{parse_bundle_line, parse_group};
use flowtable::*;

fn tables_with(line: &str) -> FlowTables {
    let mut ft = FlowTables::new();
    ft.group_mod(&parse_group(line).unwrap()).unwrap();
    ft
}

fn group_line(line: &str) -> GroupMod {
    match parse_bundle_line(line).unwrap() {
        PipelineMod::Group(gm) => gm,
        other => panic!("{other:?}"),
    }
}

/// The group's buckets as (id, first output port).
fn buckets(ft: &FlowTables, id: u32) -> Vec<(u32, u32)> {
    ft.group(id)
        .unwrap()
        .buckets
        .iter()
        .map(|b| match b.actions.first() {
            Some(Action::Output { port, .. }) => (b.bucket_id, *port),
            other => panic!("{other:?}"),
        })
        .collect()
}

const SELECT: &str = "group_id=1,type=select,bucket=bucket_id:10,actions=output:1,\
                      bucket=bucket_id:20,actions=output:2";

#[test]
fn buckets_without_ids_are_numbered_by_position() {
    let ft = tables_with("group_id=1,type=all,bucket=actions=output:1,bucket=actions=output:2");
    assert_eq!(buckets(&ft, 1), [(0, 1), (1, 2)]);
}

#[test]
fn insert_bucket_puts_buckets_first_last_or_after_one() {
    for (at, want) in [
        ("first", vec![(30, 3), (10, 1), (20, 2)]),
        ("last", vec![(10, 1), (20, 2), (30, 3)]),
        ("10", vec![(10, 1), (30, 3), (20, 2)]),
    ] {
        let mut ft = tables_with(SELECT);
        let gm = group_line(&format!(
            "group insert_bucket group_id=1,command_bucket_id={at},bucket=bucket_id:30,actions=output:3"
        ));
        assert_eq!(gm.command, GroupModCommand::InsertBucket(gm_pos(at)));
        ft.group_mod(&gm).unwrap();
        assert_eq!(buckets(&ft, 1), want, "at {at}");
        // The group stays a select group (the line gave no type).
        assert_eq!(ft.group(1).unwrap().group_type, GroupType::Select);
    }
}

fn gm_pos(at: &str) -> BucketPos {
    match at {
        "first" => BucketPos::First,
        "last" => BucketPos::Last,
        n => BucketPos::Id(n.parse().unwrap()),
    }
}

#[test]
fn insert_bucket_refuses_a_taken_id_or_a_missing_anchor() {
    let mut ft = tables_with(SELECT);
    let taken = group_line(
        "group insert_bucket group_id=1,command_bucket_id=last,bucket=bucket_id:20,actions=output:3",
    );
    assert_eq!(
        ft.group_mod(&taken).err(),
        Some(GroupModError::BucketExists(20))
    );
    let missing = group_line(
        "group insert_bucket group_id=1,command_bucket_id=99,bucket=bucket_id:30,actions=output:3",
    );
    assert_eq!(
        ft.group_mod(&missing).err(),
        Some(GroupModError::UnknownBucket(99))
    );
    let no_group = group_line(
        "group insert_bucket group_id=2,command_bucket_id=first,bucket=bucket_id:30,actions=output:3",
    );
    assert_eq!(
        ft.group_mod(&no_group).err(),
        Some(GroupModError::Unknown(2))
    );
    // Nothing changed.
    assert_eq!(buckets(&ft, 1), [(10, 1), (20, 2)]);
}

#[test]
fn remove_bucket_takes_one_or_all() {
    for (at, want) in [
        ("first", vec![(20, 2)]),
        ("last", vec![(10, 1)]),
        ("20", vec![(10, 1)]),
        ("all", vec![]),
    ] {
        let mut ft = tables_with(SELECT);
        let gm = group_line(&format!(
            "group remove_bucket group_id=1,command_bucket_id={at}"
        ));
        ft.group_mod(&gm).unwrap();
        assert_eq!(buckets(&ft, 1), want, "at {at}");
    }
    // Without a position: all of them, as ovs-ofctl defaults.
    let gm = group_line("group remove_bucket group_id=1");
    assert_eq!(gm.command, GroupModCommand::RemoveBucket(BucketPos::All));
    let mut ft = tables_with(SELECT);
    let unknown = group_line("group remove_bucket group_id=1,command_bucket_id=7");
    assert_eq!(
        ft.group_mod(&unknown).err(),
        Some(GroupModError::UnknownBucket(7))
    );
    // Removing the only bucket of an indirect group would leave it invalid.
    let mut ft = tables_with("group_id=3,type=indirect,bucket=actions=output:1");
    assert!(matches!(
        ft.group_mod(&group_line("group remove_bucket group_id=3")),
        Err(GroupModError::InvalidGroup(_))
    ));
    assert_eq!(buckets(&ft, 3), [(0, 1)]);
}

#[test]
fn duplicate_bucket_ids_are_refused() {
    let mut ft = FlowTables::new();
    let gm = parse_group(
        "group_id=1,type=all,bucket=bucket_id:4,actions=output:1,bucket=bucket_id:4,actions=output:2",
    )
    .unwrap();
    assert!(matches!(
        ft.group_mod(&gm),
        Err(GroupModError::BadBucket(_))
    ));
    assert!(ft.group(1).is_none());
}

#[test]
fn add_or_mod_creates_then_replaces() {
    let mut ft = FlowTables::new();
    let first = group_line("group add_or_mod group_id=5,type=all,bucket=actions=output:1");
    assert_eq!(first.command, GroupModCommand::AddOrModify);
    ft.group_mod(&first).unwrap();
    assert_eq!(buckets(&ft, 5), [(0, 1)]);
    ft.group_mod(&group_line(
        "group add_or_mod group_id=5,type=select,bucket=actions=output:2",
    ))
    .unwrap();
    assert_eq!(buckets(&ft, 5), [(0, 2)]);
    assert_eq!(ft.group(5).unwrap().group_type, GroupType::Select);
}

#[test]
fn bucket_command_lines_are_checked() {
    for bad in [
        // Insert needs a position, and not "all".
        "group insert_bucket group_id=1,bucket=actions=output:3",
        "group insert_bucket group_id=1,command_bucket_id=all,bucket=actions=output:3",
        // Remove takes no buckets.
        "group remove_bucket group_id=1,bucket=actions=output:3",
        // No position for plain commands; ids end at 0xffffff00.
        "group add group_id=1,type=all,command_bucket_id=first",
        "group add group_id=1,type=all,bucket=bucket_id:0xffffff01,actions=output:1",
        "group remove_bucket group_id=1,command_bucket_id=0xffffff01",
    ] {
        assert!(parse_bundle_line(bad).is_err(), "{bad}");
    }
}
